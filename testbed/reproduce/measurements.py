"""Published measurements the hardware models are checked against (validation.py).

Each is a number someone measured on real hardware, with its source; none was
used to set a model's constants and none comes from a paper this testbed
reproduces. `predict` computes the same quantity from the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Measurement:
    id: str
    model: str                 # the hardware model: a fidelity profile name or a device model key
    quantity: str              # what was measured
    setting: str               # under which conditions
    published: float
    unit: str
    source: str                # who measured it, where (paper section / table / figure)
    predict: Callable[[], float]


MEASUREMENTS: list[Measurement] = []
