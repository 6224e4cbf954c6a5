"""Hardware seconds of one collective op by its value count, for calibration on hosts.

Hosts cannot import the network model (testbed.fidelity sits above them in the
layers), so the workload evaluates it at a grid of sizes and passes the table in
the host config; calibration looks each measured op up here.
"""
from __future__ import annotations

import numpy as np


class HwTable:
    """Hardware seconds of one aggregation op by its value count: the network model
    evaluated by the workload at a grid of sizes, interpolated (the model is affine
    in packets between grid points, so the error is below one packet's time)."""

    def __init__(self, spec: dict[str, list[float]]):
        self.values = np.asarray(spec["values"], dtype=np.float64)
        self.hw_s = np.asarray(spec["hw_s"], dtype=np.float64)
        if self.values.size < 2 or self.values.size != self.hw_s.size or np.any(np.diff(self.values) <= 0):
            raise ValueError(f"hw_table needs >= 2 increasing sizes with one time each, got {spec!r}")

    def __call__(self, values: int) -> float:
        if values > self.values[-1]:
            raise ValueError(f"hw_table covers up to {self.values[-1]:.0f} values, op has {values}")
        return float(np.interp(values, self.values, self.hw_s))
