"""Gradient sources: what each worker aggregates in each iteration.

    src = make_source({"kind": "synthetic", "size": 1<<20, "density": 0.01,
                       "cluster": 1, "overlap": 0.0, "seed": 0})
    src = make_source({"kind": "profile", "model": "ncf", "size_scale": 1/32, "seed": 0})
    g = src.gradient(rank, iteration)       # float32, deterministic

Deterministic in (seed, rank, iteration), so every worker can regenerate every
other worker's gradient and check its aggregate against the exact sum.
Synthetic: nonzeros come in runs of `cluster` positions (run starts uniform);
a share `overlap` of the runs is common to all workers in an iteration (the
same embedding rows touched by every worker's batch), the rest the worker's
own. Values are N(0, 1) * `scale`. The realised density is slightly below the
target where runs collide.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hosts.lhc.profiles import get_profile


def _runs(rng: np.random.Generator, n: int, nnz: int, cluster: int) -> np.ndarray:
    """Flat positions of ~nnz nonzeros in runs of `cluster` (bool mask)."""
    mask = np.zeros(n, dtype=bool)
    if nnz <= 0 or n == 0:
        return mask
    cluster = max(1, min(cluster, n))
    runs = max(1, round(nnz / cluster))
    starts = rng.integers(0, max(1, n - cluster + 1), size=runs)
    if cluster == 1:
        mask[starts] = True
    else:
        idx = (starts[:, None] + np.arange(cluster)[None, :]).reshape(-1)
        mask[idx] = True
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
        nnz = int(round(n * dens))
        shared_nnz = int(round(nnz * self.overlap))
        common = np.random.default_rng([self.seed, it, li, 1 << 20])
        own = np.random.default_rng([self.seed, it, li, rank])
        return _runs(common, n, shared_nnz, cl) | _runs(own, n, nnz - shared_nnz, cl)

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
    raise ValueError(f"gradient kind must be synthetic or profile, got {kind!r}")
