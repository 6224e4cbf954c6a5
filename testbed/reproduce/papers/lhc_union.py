"""The union support of W workers' gradients, layer by layer, from the MEASURED unions
(testbed/reproduce/measurements/lhc_density.py; hosts/lhc/profiles.py carries the means).

No single overlap share fits the measured unions (at 4 workers they imply about 0.3 for
the embeddings and 0.98-0.99 for VGG19's layers), so each layer's union comes from its
own measurements:

  * overlap: `implied_overlap(d, u, n)` is the share of common runs at which
    hosts/lhc/gradients.py's generator (union_density) gives the measured union u of n
    workers at per-worker density d. At a measured n and the measured density the model
    therefore returns the measured union itself.
  * density moves (an assumed touch rate at its range's end, the density-scale regime):
    the implied overlap is piecewise linear in the per-worker density through the layer's
    measured points: the training measurement and, for embedding tables, the file's
    touch_sweep over the id distribution (Zipf s = 0 / 0.8 / 1 / 1.2, the same table and
    batch). It is held at the outermost point beyond them. Why: the implied overlap moves
    with the id distribution (NCF users 0.0 uniform, 0.31 at s = 1, 0.39 at s = 1.2), so
    one overlap held while the density moves would misstate the range's ends.
  * worker counts: measured at 2, 4 and 8. Between two, the implied overlap is linear in
    log2(workers); above 8 it is held at 8's. It grows with n in every sparse layer
    measured (NCF users 0.23 / 0.31 / 0.38 at 2 / 4 / 8), so holding it overstates the
    union at 16+ workers: against LHC.
  * spread: `spread` in [-1, 1] moves each measured point's union from its mean over the
    recorded training steps (0) to the largest (-1) or smallest (+1) recorded union.
  * no measurement (a layer measured dense, >= DENSE per worker, whose density the
    density-scale regime lowers: NCF's MLP, the LSTM's recurrent weights, BERT's encoder):
    the union comes from `fallback_overlap` (papers/lhc.py's profile_overlap, an assumption).
"""
from __future__ import annotations

import math
from functools import lru_cache

from testbed.reproduce.measurements import lhc_density

# The touch_sweep tables whose ids select the layer's rows (the sampled-softmax end of the
# LSTM's output layer: the batch's target tokens, the same token stream as its input).
SWEEP_TABLES: dict[tuple[str, str], tuple[str, ...]] = {
    ("ncf", "user_gmf"): ("ncf_users",), ("ncf", "user_mlp"): ("ncf_users",),
    ("ncf", "item_gmf"): ("ncf_items", "ncf_items_no_negatives"),
    ("ncf", "item_mlp"): ("ncf_items", "ncf_items_no_negatives"),
    ("lstm", "embedding"): ("lstm",), ("lstm", "softmax"): ("lstm",),
    ("bert", "word_embedding"): ("bert",),
}
STATS = {0: "mean", -1: "max", 1: "min"}     # spread end -> the step statistic of the union
# A layer measured this dense (BERT's encoder: 0.99996 per worker, union 1.0) says nothing
# about how supports overlap (any share gives the union 1.0): it counts as unmeasured.
DENSE = 0.999


def union_density(density: float, overlap: float, workers: int) -> float:
    """Expected union support share of one layer at `workers` workers under
    hosts/lhc/gradients.py's generator: a share `overlap` of each worker's runs
    common to all, the rest drawn from the remaining slots independently."""
    if density >= 1.0:
        return 1.0
    shared = overlap * density
    own = density - shared
    free = 1.0 - shared
    return shared + free * (1.0 - (1.0 - own / free) ** workers) if free > 0 else 1.0


def implied_overlap(density: float, union: float, workers: int) -> float:
    """The overlap at which union_density gives a measured union (bisection; union falls as
    overlap grows). 0 where even independent supports give less than `union`, 1 where the
    union is the density."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if union_density(density, mid, workers) > union else (lo, mid)
    return (lo + hi) / 2


@lru_cache(maxsize=None)
def measured_workers(model: str, layer: str) -> tuple[int, ...]:
    """The worker counts at which the layer's union was measured; () where it was not."""
    points = _points(model, layer, None, "mean")
    return tuple(sorted(int(n) for n in points)) if points else ()


@lru_cache(maxsize=None)
def _points(model: str, layer: str, n: str | None, stat: str):
    """{n: ((density, implied overlap), ...) sorted by density} from the training run's
    layer (where it is sparse) and its touch_sweep tables; n=None: all n."""
    data = lhc_density.load()
    found: dict[str, list[tuple[float, float]]] = {}
    summary = data["models"].get(model, {}).get("summary", {}).get(layer)
    sources = []
    if summary is not None and summary["per_worker"]["mean"] < DENSE:
        sources.append(summary)
    sources += [by for t in SWEEP_TABLES.get((model, layer), ()) for by in data["touch_sweep"][t]["by_s"].values()]
    for src in sources:
        d = src["per_worker"]["mean"]
        for k, u in src["union"].items():
            if n is None or k == n:
                found.setdefault(k, []).append((d, implied_overlap(d, u[stat], int(k))))
    return {k: tuple(sorted(v)) for k, v in found.items()}


def _interp(points: tuple[tuple[float, float], ...], x: float) -> float:
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def overlap_at(model: str, layer: str, density: float, workers: int, spread: float = 0.0) -> float | None:
    """The layer's overlap share at `density` and `workers` by the rules above; None where
    the layer has no measured union."""
    if not -1.0 <= spread <= 1.0:
        raise ValueError(f"union spread must be in [-1, 1], got {spread}")
    ns = measured_workers(model, layer)
    if not ns:
        return None

    def at(n: int) -> float:
        mean = _interp(_points(model, layer, str(n), "mean")[str(n)], density)
        if spread == 0:
            return mean
        end = _interp(_points(model, layer, str(n), STATS[1 if spread > 0 else -1])[str(n)], density)
        return mean + abs(spread) * (end - mean)

    if workers <= ns[0]:
        return at(ns[0])
    if workers >= ns[-1]:
        return at(ns[-1])
    lo = max(n for n in ns if n <= workers)
    hi = min(n for n in ns if n >= workers)
    if lo == hi:
        return at(lo)
    f = (math.log2(workers) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return at(lo) + f * (at(hi) - at(lo))


def layer_union(model: str, layer: str, density: float, workers: int, spread: float,
                fallback_overlap: float) -> float:
    """Union support share of the layer at `workers` workers and per-worker `density`."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if density >= 1.0 or workers == 1:
        return min(1.0, density)
    o = overlap_at(model, layer, density, workers, spread)
    return union_density(density, fallback_overlap if o is None else o, workers)
