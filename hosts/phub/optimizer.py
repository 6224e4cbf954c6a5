"""The optimizer PHub runs inside the server, as pure float32 functions of one
chunk (or a whole tensor: every operation is element-wise, so a chunked update
and a whole-tensor update give the same bits; tests/unit/test_phub_core.py).

Both take the SUM of the workers' gradients and average it first, as a worker
of the plain PS does with the sum it receives (hosts/collectives/ps.py), so
PHub's weights and the plain PS's are comparable bit for bit.
  sgd       w <- w - lr * (g + wd w)
  nesterov  v <- mu v + (g + wd w);  w <- w - lr * ((g + wd w) + mu v)
            (PyTorch's SGD(nesterov=True) rule; PHub's default optimizer is
            Nesterov, PHUB_OPTIMIZER "nagntnt", research/seeds.md §5.1)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPTIMIZERS = ("sgd", "nesterov")


@dataclass(frozen=True)
class OptimizerSpec:
    kind: str = "nesterov"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0

    def __post_init__(self):
        if self.kind not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.kind!r}")
        if self.lr <= 0 or not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ValueError(f"optimizer needs lr > 0, 0 <= momentum < 1, weight_decay >= 0; got {self}")

    @property
    def has_state(self) -> bool:
        return self.kind == "nesterov"


def average(gsum: np.ndarray, world: int) -> np.ndarray:
    """The mean gradient from the workers' sum (float32)."""
    return gsum / np.float32(world)


def step(spec: OptimizerSpec, w: np.ndarray, v: np.ndarray | None, gsum: np.ndarray, world: int) -> None:
    """Update w (and the momentum v for nesterov) in place from the gradient sum."""
    g = average(gsum, world)
    if spec.weight_decay:
        g = g + np.float32(spec.weight_decay) * w
    if spec.kind == "sgd":
        w -= np.float32(spec.lr) * g
        return
    if v is None:
        raise ValueError("nesterov needs a momentum buffer")
    mu = np.float32(spec.momentum)
    v *= mu
    v += g
    w -= np.float32(spec.lr) * (g + mu * v)
