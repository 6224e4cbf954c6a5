"""Split the feature columns across M model-parallel workers.

Each worker owns one contiguous block of columns (its model slice and the
matching columns of every sample). Compute per micro-batch is proportional to
the nonzeros a worker streams, so sparse data is balanced by nnz; dense data
by width. Contiguous blocks keep the slice a plain CSR/ndarray view and make
reassembling the model a concatenation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .data import Dataset


@dataclass(frozen=True)
class FeaturePartition:
    """ranges[m] = (start, stop): worker m owns columns start..stop-1."""

    ranges: tuple[tuple[int, int], ...]
    n_features: int
    nnz: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ranges)

    def __getitem__(self, m: int) -> tuple[int, int]:
        return self.ranges[m]

    @property
    def widths(self) -> list[int]:
        return [b - a for a, b in self.ranges]

    @property
    def imbalance(self) -> float:
        """max part nnz / mean part nnz (1.0 = perfectly balanced)."""
        mean = sum(self.nnz) / len(self.nnz)
        return max(self.nnz) / mean if mean > 0 else 1.0


def column_nnz(X) -> np.ndarray:
    if sp.issparse(X):
        return np.bincount(sp.csr_matrix(X).indices, minlength=X.shape[1]).astype(np.int64)
    return np.count_nonzero(X, axis=0).astype(np.int64)


def _equal_width_bounds(D: int, M: int) -> np.ndarray:
    # widths differ by at most one column
    return np.array([(m * D) // M for m in range(M + 1)], dtype=np.int64)


def _nnz_bounds(counts: np.ndarray, M: int) -> np.ndarray:
    """Cut where the cumulative nnz first reaches k/M of the total.

    Guarantees each part holds at most total/M + max_column_nnz nonzeros
    (before the non-empty clamp, which only matters for degenerate data)."""
    D = counts.size
    cs = np.cumsum(counts)
    total = cs[-1]
    if total == 0:
        return _equal_width_bounds(D, M)
    targets = total * np.arange(1, M) / M
    ends = np.searchsorted(cs, targets, side="left") + 1
    bounds = np.concatenate([[0], ends, [D]]).astype(np.int64)
    for k in range(1, M):  # every part gets >= 1 column, leaving room for the rest
        bounds[k] = min(max(bounds[k], bounds[k - 1] + 1), D - (M - k))
    return bounds


def partition_features(data: Dataset | np.ndarray | sp.spmatrix, n_workers: int,
                       balance: str = "auto") -> FeaturePartition:
    """Contiguous column blocks for n_workers.

    balance: "nnz" (cumulative-nnz cuts), "width" (equal widths), or "auto"
    (nnz for sparse input, width for dense)."""
    X = data.X if isinstance(data, Dataset) else data
    D = X.shape[1]
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    if n_workers > D:
        raise ValueError(f"cannot split {D} features across {n_workers} workers "
                         "without empty parts; use at most as many workers as features")
    if balance == "auto":
        balance = "nnz" if sp.issparse(X) else "width"
    counts = column_nnz(X)
    if balance == "nnz":
        bounds = _nnz_bounds(counts, n_workers)
    elif balance == "width":
        bounds = _equal_width_bounds(D, n_workers)
    else:
        raise ValueError(f"balance must be auto/nnz/width, got {balance!r}")
    ranges = tuple((int(bounds[m]), int(bounds[m + 1])) for m in range(n_workers))
    nnz = tuple(int(counts[a:b].sum()) for a, b in ranges)
    return FeaturePartition(ranges, D, nnz)


def slice_dataset(data: Dataset | np.ndarray | sp.spmatrix,
                  part: tuple[int, int]) -> np.ndarray | sp.csr_matrix:
    """Columns part[0]..part[1]-1 of every sample (what worker m stores)."""
    X = data.X if isinstance(data, Dataset) else data
    a, b = part
    if sp.issparse(X):
        return sp.csr_matrix(X)[:, a:b].tocsr()
    return np.ascontiguousarray(X[:, a:b])


def slice_model(x: np.ndarray, part: tuple[int, int]) -> np.ndarray:
    return np.array(x[part[0]:part[1]], dtype=np.float64)


def assemble_model(slices: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(s, dtype=np.float64) for s in slices])
