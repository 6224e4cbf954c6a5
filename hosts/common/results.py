"""JSON-lines output and latency summaries shared by host programs."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np


class JsonlWriter:
    """One JSON object per line, flushed per record so a crash loses nothing written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, default=_json_default, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def finite_or_none(x: float) -> float | None:
    """JSON has no inf/nan; write null instead."""
    return x if math.isfinite(x) else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default); None for no values."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def latency_summary(latencies: Iterable[float], nbytes: int) -> dict[str, Any]:
    """p50/p90/p99/mean of latencies (s) and goodput for a payload of `nbytes`.

    goodput_gbps is *algorithm bandwidth*: payload bytes × 8 / p50 latency, in
    Gbit/s -- how fast the caller's tensor got reduced, not how many bytes the
    links carried (for a ring, bus bandwidth = algbw × 2(N−1)/N). The median
    keeps one scheduler hiccup from moving it.
    """
    lat = [float(x) for x in latencies]
    p50 = percentile(lat, 50)
    return {
        "n": len(lat),
        "p50_s": p50,
        "p90_s": percentile(lat, 90),
        "p99_s": percentile(lat, 99),
        "mean_s": float(np.mean(lat)) if lat else None,
        "goodput_gbps": (nbytes * 8 / p50 / 1e9) if p50 else None,
    }
