"""Gradient sources: what each worker aggregates in each iteration.

    src = make_source({"kind": "synthetic", "size": 1<<20, "density": 0.01,
                       "cluster": 1, "overlap": 0.0, "seed": 0})
    src = make_source({"kind": "profile", "model": "ncf", "size_scale": 1/32, "seed": 0})
    g = src.gradient(rank, iteration)       # float32, deterministic

Deterministic in (seed, rank, iteration), so every worker can regenerate every
other worker's gradient and check its aggregate against the exact sum.
Synthetic: nonzeros come in aligned runs of `cluster` positions (run slots
drawn without replacement); a share `overlap` of the runs is common to all
workers in an iteration (the same embedding rows touched by every worker's
batch), the rest the worker's own, drawn from the other slots. Values are
N(0, 1) * `scale`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hosts.lhc.profiles import get_profile


def _slots(rng: np.random.Generator, n_slots: int, k: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """k distinct slot numbers out of n_slots (minus `exclude`)."""
    if exclude is None or exclude.size == 0:
        k = max(0, min(k, n_slots))
        return np.sort(rng.choice(n_slots, size=k, replace=False)) if k else np.empty(0, np.int64)
    free = np.ones(n_slots, dtype=bool)
    free[exclude] = False
    pool = np.flatnonzero(free)
    k = max(0, min(k, pool.size))
    return np.sort(pool[rng.choice(pool.size, size=k, replace=False)]) if k else np.empty(0, np.int64)


def _mask(slots: np.ndarray, n: int, cluster: int) -> np.ndarray:
    """Bool mask of the runs [slot*cluster, slot*cluster + cluster) (last run clipped)."""
    mask = np.zeros(n, dtype=bool)
    if slots.size:
        idx = (slots[:, None] * cluster + np.arange(cluster)[None, :]).reshape(-1)
        mask[idx[idx < n]] = True
    return mask


class SyntheticSource:
    def __init__(self, size: int, density: float, cluster: int = 1, overlap: float = 0.0,
                 scale: float = 1e-3, seed: int = 0):
        if size < 1 or not 0 <= density <= 1 or cluster < 1 or not 0 <= overlap <= 1:
            raise ValueError(f"bad synthetic gradient: size {size}, density {density}, "
                             f"cluster {cluster}, overlap {overlap}")
        self.size, self.density, self.cluster = size, density, cluster
        self.overlap, self.scale, self.seed = overlap, scale, seed
        self.layers = [(0, size, density, cluster)]

    def _layer_mask(self, rank: int, it: int, li: int, lo: int, hi: int, dens: float, cl: int):
        n = hi - lo
        if dens >= 1.0:
            return np.ones(n, dtype=bool)
        # Aligned runs (an embedding row is a run of `dim` at a multiple of dim);
        # the worker's own runs are drawn from the slots the shared ones left free.
        n_slots = -(-n // cl)
        runs = int(round(n * dens / cl))
        shared = _slots(np.random.default_rng([self.seed, it, li, 1 << 20]), n_slots,
                        int(round(runs * self.overlap)))
        own = _slots(np.random.default_rng([self.seed, it, li, rank]), n_slots, runs - shared.size, shared)
        return _mask(np.concatenate([shared, own]), n, cl)

    def gradient(self, rank: int, it: int) -> np.ndarray:
        g = np.zeros(self.size, dtype=np.float32)
        for li, (lo, hi, dens, cl) in enumerate(self.layers):
            mask = self._layer_mask(rank, it, li, lo, hi, dens, cl)
            idx = np.flatnonzero(mask) + lo
            vals = np.random.default_rng([self.seed, it, li, rank, 7]).standard_normal(idx.size)
            g[idx] = (vals * self.scale).astype(np.float32)
        return g

    def describe(self) -> dict[str, Any]:
        return {"kind": "synthetic", "size": self.size, "density": self.density,
                "cluster": self.cluster, "overlap": self.overlap}


class ProfileSource(SyntheticSource):
    """A model profile's layers, shrunk by size_scale, each with its own density and runs."""

    def __init__(self, model: str, size_scale: float | None = None, overlap: float = 0.5,
                 scale: float = 1e-3, seed: int = 0):
        prof = get_profile(model)
        s = prof.size_scale if size_scale is None else size_scale
        layers, lo = [], 0
        for layer in prof.layers:
            n = max(1, int(layer.params * s))
            cl = max(1, min(layer.cluster, n))
            layers.append((lo, lo + n, layer.density, cl))
            lo += n
        super().__init__(lo, prof.density, 1, overlap, scale, seed)
        self.layers, self.profile, self.size_scale = layers, prof, s

    def describe(self) -> dict[str, Any]:
        return {"kind": "profile", "model": self.profile.name, "size": self.size,
                "size_scale": self.size_scale, "density": self.profile.density,
                "compute_ms": self.profile.compute_ms, "overlap": self.overlap}


def make_source(spec: dict[str, Any]):
    spec = dict(spec)
    kind = spec.pop("kind", "synthetic")
    if kind == "synthetic":
        return SyntheticSource(**spec)
    if kind == "profile":
        return ProfileSource(**spec)
    if kind == "ncf_train":                      # a real PyTorch training run (imports torch)
        from hosts.lhc.train import NcfTrainSource
        return NcfTrainSource(**spec)
    raise ValueError(f"gradient kind must be synthetic, profile or ncf_train, got {kind!r}")
