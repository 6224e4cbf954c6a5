"""What a profile model (hosts/phub/model.py ProfileModel) trains: a synthetic,
per-layer quadratic whose gradient depends on the current weights, so that an
aggregation error (a lost, doubled or stale copy, a sum in the wrong place) changes
every later gradient and shows in the final weights; and the same functions let
the workload replay a run in-process (hosts/phub/reference.py) bit for bit.

Rank r's loss at step t on layer k is  CURVATURE/2 |w|^2 + <b_rk, w> / (t + 1),
so its gradient is

    g = CURVATURE * w + b_rk / (t + 1)

with b_rk standard normal, seeded by (seed, rank, layer): a pull towards zero plus a
rank's own, shrinking push (b / (t + 1) alone would not read the weights, and a
worker computing from stale weights would go unnoticed). Every operation is
element-wise float32, so any subset of layers, chunks or values computes the same
bits as the whole. The compute time of a layer is modeled (hosts/dnn/device.py),
not this function's Python cost.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

# [A] The quadratic's curvature: any c > 0 makes the gradient read the weights; with
# lr * c < 1 (the workload's lr is 0.05 by default) the pull contracts instead of
# diverging. Range 0.1-10; it changes no time (compute is modeled) and no message size.
CURVATURE = np.float32(1.0)
INIT_SCALE = 0.01           # the starting weights' standard deviation (as before this module)


def initial_weights(seed: int, sizes: Sequence[int]) -> list[np.ndarray]:
    """Every worker's starting weights (the same on every rank: one rng over the layers)."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(int(n)) * INIT_SCALE).astype(np.float32) for n in sizes]


def noise_base(seed: int, rank: int, layer: int, n: int) -> np.ndarray:
    """b_rk: rank `rank`'s push on layer `layer` (seeded per layer: a replay of a few
    layers does not draw the others)."""
    return np.random.default_rng([seed, 1 + rank, layer]).standard_normal(int(n)).astype(np.float32)


def gradient(w: np.ndarray, base: np.ndarray, step: int, out: np.ndarray) -> np.ndarray:
    """g = CURVATURE * w + base / (step + 1), written into `out` (float32, element-wise)."""
    np.multiply(base, np.float32(1.0 / (step + 1)), out=out)
    out += CURVATURE * w
    return out
