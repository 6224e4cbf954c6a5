"""Deterministic test tensors and the correctness check of a reduced result.

Every worker can regenerate every rank's input from (seed, rank, size,
iteration), so each one verifies its own result without extra traffic.

Tolerance. A float32 sum of N terms accumulated in any order is within
(N-1)·u·Σ|x_r| of the exact sum per element (u = 2^-24, unit roundoff), and
casting the float64 reference to float32 adds u·|sum|. So we measure

    max_rel_err = ‖result − ref32‖∞ / ‖Σ_r |x_r|‖∞

(the denominator bounds the L-inf norm of the sum but, unlike it, never
collapses when the terms cancel, e.g. size-1 tensors) and accept it up to
max(1e-5, 2·N·u): 1e-5 for up to ~80 workers, growing with the proven bound
beyond. Any real bug (a missing, doubled or misplaced chunk) gives errors of
order 1.
"""
from __future__ import annotations

import numpy as np

UNIT_ROUNDOFF_F32 = 2.0 ** -24
TOLERANCE_FLOOR = 1e-5


def make_tensor(seed: int, rank: int, size: int, iteration: int) -> np.ndarray:
    """float32 standard normals, a pure function of its arguments."""
    rng = np.random.default_rng([seed, rank, size, iteration])
    return rng.standard_normal(size, dtype=np.float32)


def tolerance(world: int) -> float:
    return max(TOLERANCE_FLOOR, 2.0 * world * UNIT_ROUNDOFF_F32)


def reference_sum(seed: int, world: int, size: int, iteration: int) -> tuple[np.ndarray, float]:
    """(float64 sum cast to float32, ‖Σ|x_r|‖∞) over all ranks' inputs."""
    total = np.zeros(size, dtype=np.float64)
    abs_total = np.zeros(size, dtype=np.float64)
    for r in range(world):
        x = make_tensor(seed, r, size, iteration).astype(np.float64)
        total += x
        abs_total += np.abs(x)
    return total.astype(np.float32), float(abs_total.max(initial=0.0))


def relative_error(result: np.ndarray, ref32: np.ndarray, scale: float) -> float:
    if result.shape != ref32.shape:
        return float("inf")
    diff = np.abs(result.astype(np.float64) - ref32.astype(np.float64))
    err = float(diff.max(initial=0.0)) / max(scale, np.finfo(np.float64).tiny)
    return err if np.isfinite(err) else float("inf")


def check_allreduce(result: np.ndarray, seed: int, world: int, size: int,
                    iteration: int) -> tuple[bool, float]:
    """(ok, max_rel_err) of an allreduce result against the numpy reference."""
    ref32, scale = reference_sum(seed, world, size, iteration)
    err = relative_error(result, ref32, scale)
    return err <= tolerance(world), err
