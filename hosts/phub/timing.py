"""PHub's time setup: calibration (device time_scale auto) and network dilation, the
ONE place the PHub worker touches them. Decisions are hosts.common.calibration's
Calibrator's, as for LHC (hosts/lhc/timing.py); this module only measures PHub's
own operations and hands them over.

What is measured (per calibration round, `iterations` training iterations):
  phub       per iteration, the first key backward pushes (the last layer): from
             this worker's PUSH to the arrival of the key's last updated chunk.
             On hardware that exchange is a parameter server's allreduce of the
             key (N pushes serialize on the server's port, N updates leave it):
             the network model's `collective_time("allreduce", "ps", ...)` plus
             the server cores' modeled work on the key (server.modeled_key_s).
             Only the first key: it meets an idle server and network, while
             later keys queue behind it (as on hardware, but not in the one-key
             model; measured on every key, round 1 read that queueing as the
             emulator's slowness: 4.9x the TDF, and compensated it away).
  baselines  every allreduce of a layer's gradient (wide_ps: ps, ring, switch).
The hardware times come as a table (`hw_table`, the workload evaluates the
network model: hosts cannot import it) by value count (hosts.common.hw_table).
The workers agree on the next TDF with one SUM allreduce (`agree`): the
baseline's own collective, or, for PHub (whose workers share no collective), a
host ring among the job's workers opened for it.

Calibration iterations are training iterations 0 .. C-1 for every algorithm (so
PHub's weights still equal the plain PS's); they are not traced and not timed.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from hosts.common import calibration as cal
from hosts.common.hw_table import HwTable

log = logging.getLogger("phub.timing")

Span = tuple[float, float, int]       # (this worker's submit, completion, values)


class PhubTiming:
    """Calibration rounds (time_scale auto) or a fixed TDF, and the network dilation."""

    def __init__(self, calibration: dict | None, network_dilation: dict | None, rank: int, world: int,
                 model: Any, expect_delay: Callable[[float], None] = lambda seconds: None):
        self.cc, self.nd, self.rank, self.world, self.model = calibration, network_dilation, rank, world, model
        self.table = HwTable(calibration["hw_table"]) if calibration else None
        self.c = cal.Calibrator(0.0, model.time_scale, network_dilation, rank, expect_delay,
                                iteration_wall_s=calibration["iteration_wall_s"] if calibration else 0.0)
        self._mark()

    @property
    def calibration_iterations(self) -> int:
        return self.cc["rounds"] * self.cc["iterations"] if self.cc else 0

    def round_ends_at(self, it: int) -> bool:
        """Iteration `it` closes a calibration round."""
        return bool(self.cc) and it < self.calibration_iterations and (it + 1) % self.cc["iterations"] == 0

    def begin(self, barrier: Callable[[], None] | None) -> None:
        """Before the first calibration iteration: rank 0 has the switch hold its
        impairments (loss) off while round 0 measures the emulator, and no worker
        pushes before it holds (`barrier`, the workers' own: PHub's pushes wait for
        nobody, so a push could race rank 0's request; Calibrator.start)."""
        if self.cc:
            self.c.start(barrier)

    def dilate_fixed(self) -> None:
        """A fixed TDF dilates the network too (rank 0 asks the switch; no-op without one)."""
        if self.cc is None:
            self.c.dilate(self.model.time_scale)

    def _mark(self) -> None:
        if self.cc is None:             # nothing to measure (a fixed TDF, or the measured CNN)
            return
        d = self.model.device
        self._real0, self._modeled0 = d.real_s_total, d.modeled_s_total

    def end_round(self, spans: list[Span], agree: Callable[[np.ndarray], np.ndarray]) -> float:
        """Measure the round's ops against their hardware time, agree, decide: the next TDF
        (set on the model's device)."""
        d = self.model.device
        spans = spans[:cal.MAX_OPS]
        hw = [self.table(v) for _, _, v in spans]
        real, modeled = d.real_s_total - self._real0, d.modeled_s_total - self._modeled0
        ratio = real / (modeled / d.time_scale) if modeled > 0 else None
        summed = agree(cal.encode([a for a, _, _ in spans], [b for _, b, _ in spans], ratio, self.rank, self.world))
        measured, why = cal.decide(summed, len(spans), self.world, hw or 0.0, fallback=d.time_scale)
        self.c.hw_op_s = float(np.median(hw)) if hw else 0.0     # the delay line's compensation per op
        # One iteration on the hardware: its compute, as modeled, and its first key's exchange.
        step_hw = (modeled / d.time_scale) / self.cc["iterations"] + self.c.hw_op_s
        tdf = self.c.after_round(measured, why, step_hw_s=step_hw, ops=len(spans), my_compute_ratio=ratio,
                                 op_hw_p50_s=self.c.hw_op_s or None)
        d.time_scale = tdf
        log.info("calibration round %d: TDF %g (%s)", len(self.c.rounds) - 1, tdf, why.get("limited_by"))
        self._mark()
        return tdf

    def finish(self, host: str) -> dict[str, Any]:
        """After the last round: a fresh device at the TDF (its statistics are the run's)
        and the calibration record."""
        self.c.finish()                    # the network at the final TDF, impairments back on
        d = self.model.device              # a profile model's PacedDevice (the workload checks)
        d._reset_stats()
        d.debt_s = 0.0
        self._mark()
        return self.c.record(host)
