"""Statistics over repeats: one place for intervals and time-to-target.

Used by workloads (time to a target loss or accuracy), figures (interval bands)
and `testbed reproduce` (the emulated interval of a headline). Pure numpy/scipy,
no testbed imports, so every layer may use it.

  mean_ci95(values)           the mean and the two-sided 95 % Student-t interval
                              of the mean ([mean, mean] for one value, None for none)
  smooth(values, window)      trailing moving average (the first points average
                              what exists so far): a curve that oscillates around
                              the target crosses it once it is there on average
  time_to_target(times, values, target, lower_is_better=True, window=5)
                              the first time the smoothed curve reaches the target,
                              interpolated linearly between the two recorded points
                              around the crossing; None when it never does (a run
                              that never reaches the target says so)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

SMOOTHING_WINDOW = 5     # points of a recorded curve averaged before a crossing is looked for


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "ci95": [self.lo, self.hi], "n": self.n}


def mean_ci95(values: Sequence[float]) -> Interval | None:
    """Mean and 95 % interval of the mean (Student t, n - 1 degrees of freedom)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return None
    mean = float(np.mean(xs))
    if len(xs) == 1:
        return Interval(mean, mean, mean, 1)
    from scipy.stats import t  # noqa: PLC0415 - scipy import costs ~0.3 s; only here
    half = float(t.ppf(0.975, len(xs) - 1) * np.std(xs, ddof=1) / math.sqrt(len(xs)))
    return Interval(mean, mean - half, mean + half, len(xs))


def smooth(values: Sequence[float], window: int = SMOOTHING_WINDOW) -> np.ndarray:
    """Trailing moving average over `window` points (fewer at the start)."""
    v = np.asarray(values, dtype=np.float64)
    if window <= 1 or v.size == 0:
        return v.copy()
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, v.size + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def time_to_target(times: Sequence[float], values: Sequence[float], target: float | None,
                   lower_is_better: bool = True, window: int = SMOOTHING_WINDOW) -> float | None:
    """First time the smoothed curve reaches `target` (module docstring); None if never."""
    if target is None or len(times) == 0:
        return None
    t = np.asarray(times, dtype=np.float64)
    s = smooth(values, window)
    reached = s <= target if lower_is_better else s >= target
    hits = np.flatnonzero(reached)
    if hits.size == 0:
        return None
    i = int(hits[0])
    if i == 0 or s[i] == s[i - 1]:
        return float(t[i])
    frac = (target - s[i - 1]) / (s[i] - s[i - 1])
    return float(t[i - 1] + min(max(frac, 0.0), 1.0) * (t[i] - t[i - 1]))
