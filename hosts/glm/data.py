"""Datasets for GLM training: LIBSVM files, seeded synthetic data, builtin real data.
A scenario's dataset spec is read by hosts.glm.datasets.load_dataset (which also
generates hosts.glm.profiles' public-dataset shapes on top of this module).

Everything is float64 so that model-parallel and reference SGD can be compared
to ~1e-10; devices that would use float32 are modelled in `devices`.
"""
from __future__ import annotations

import bz2
import gzip
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .models import MODELS


@dataclass
class Dataset:
    """Samples X (n x D, dense ndarray or CSR) and labels y (n,)."""

    X: np.ndarray | sp.csr_matrix
    y: np.ndarray
    name: str = "dataset"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if sp.issparse(self.X):
            X = sp.csr_matrix(self.X, dtype=np.float64)
            X.sum_duplicates()
            X.sort_indices()
            self.X = X
        else:
            self.X = np.ascontiguousarray(self.X, dtype=np.float64)
            if self.X.ndim != 2:
                raise ValueError(f"X must be 2-D, got shape {self.X.shape}")
        self.y = np.asarray(self.y, dtype=np.float64).ravel()
        if self.y.shape[0] != self.X.shape[0]:
            raise ValueError(
                f"X has {self.X.shape[0]} rows but y has {self.y.shape[0]} labels")

    @property
    def n_samples(self) -> int:
        return self.X.shape[0]

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def is_sparse(self) -> bool:
        return sp.issparse(self.X)

    @property
    def nnz(self) -> int:
        return int(self.X.nnz) if self.is_sparse else int(np.count_nonzero(self.X))

    @property
    def density(self) -> float:
        return self.nnz / max(1, self.n_samples * self.n_features)

    def subset(self, rows: np.ndarray, name: str | None = None) -> "Dataset":
        return Dataset(self.X[rows], self.y[rows], name or self.name, dict(self.meta))

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "samples": self.n_samples,
                "features": self.n_features, "sparse": self.is_sparse,
                "nnz": self.nnz, "density": self.density}


# --------------------------------------------------------------------------- LIBSVM
class LibsvmFormatError(ValueError):
    """Malformed LIBSVM input; carries the path and 1-based line number."""

    def __init__(self, path: str, line_no: int, reason: str, line: str = ""):
        self.path, self.line_no, self.reason = path, line_no, reason
        shown = line if len(line) <= 80 else line[:77] + "..."
        super().__init__(f"{path}:{line_no}: {reason}" + (f" in line {shown!r}" if line else "")
                         + " (expected 'label idx:value idx:value ...' with 1-based,"
                           " increasing indices)")


def _open_text(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    if path.endswith(".bz2"):
        return bz2.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, "rt", encoding="utf-8", errors="replace")


def _check_libsvm_line(text: str, n_features: int | None) -> str | None:
    """Reason why one line is malformed, or None if it is fine."""
    body = text.split("#", 1)[0].split()
    if not body:
        return None
    try:
        float(body[0])
    except ValueError:
        return f"label {body[0]!r} is not a number"
    prev = 0
    for tok in body[1:]:
        key, sep, val = tok.partition(":")
        if not sep:
            return f"token {tok!r} is not idx:value"
        if key == "qid":
            continue
        try:
            idx = int(key)
        except ValueError:
            return f"feature index {key!r} is not an integer"
        try:
            float(val)
        except ValueError:
            return f"value {val!r} of feature {key} is not a number"
        if idx < 1:
            return f"feature index {idx} < 1 (indices are 1-based)"
        if idx <= prev:
            return f"feature index {idx} not increasing (previous {prev})"
        if n_features is not None and idx > n_features:
            return f"feature index {idx} > n_features={n_features}"
        prev = idx
    return None


def validate_libsvm(path: str, n_features: int | None = None) -> None:
    """Raise LibsvmFormatError at the first malformed line (pure Python, slow path)."""
    with _open_text(path) as fh:
        for line_no, text in enumerate(fh, start=1):
            reason = _check_libsvm_line(text, n_features)
            if reason:
                raise LibsvmFormatError(path, line_no, reason, text.rstrip("\n"))


def map_labels(y: np.ndarray, task: str = "auto",
               positive_label: float | None = None) -> tuple[np.ndarray, str, dict]:
    """Labels -> {-1, +1} for classification, unchanged for regression.

    auto: exactly two distinct values means classification.
    Two classes: the larger value becomes +1 (so {0,1}, {1,2}, {-1,1} all work).
    More classes need positive_label (one-vs-rest).
    """
    values = np.unique(y)
    if task == "auto":
        task = "classification" if (len(values) == 2 or positive_label is not None) \
            else "regression"
    if task == "regression":
        return y.astype(np.float64), task, {}
    if task != "classification":
        raise ValueError(f"task must be auto/classification/regression, got {task!r}")
    if positive_label is not None:
        pos = float(positive_label)
    elif len(values) == 2:
        pos = float(values[1])
    elif len(values) == 1:
        pos = float(values[0])
    else:
        raise ValueError(
            f"classification needs 2 label values, found {len(values)} "
            f"({values[:5].tolist()}...); set positive_label for one-vs-rest")
    out = np.where(y == pos, 1.0, -1.0)
    return out, task, {str(float(v)): (1.0 if v == pos else -1.0) for v in values[:16]}


def load_libsvm(path: str, n_features: int | None = None, task: str = "auto",
                positive_label: float | None = None, name: str | None = None) -> Dataset:
    """Load a LIBSVM/SVMlight file (plain, .gz or .bz2; 1-based indices) as CSR.

    Fast path: scikit-learn's C parser. If it rejects the file, a Python pass
    locates the first bad line so the error names the line number.
    """
    from sklearn.datasets import load_svmlight_file

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"LIBSVM file not found: {path}")
    try:
        X, y = load_svmlight_file(path, n_features=n_features, dtype=np.float64,
                                  zero_based=False)
    except ValueError as exc:
        validate_libsvm(path, n_features)  # raises with line number if it can
        raise LibsvmFormatError(path, 0, f"rejected by parser: {exc}") from exc
    # sklearn accepts some inputs we call malformed (e.g. unsorted indices in old
    # versions are re-sorted silently); a cheap check on small files keeps errors uniform.
    if os.path.getsize(path) < 8 << 20:
        validate_libsvm(path, n_features)
    y, task, label_map = map_labels(y, task, positive_label)
    return Dataset(X.tocsr(), y, name or os.path.basename(path),
                   {"source": "libsvm", "path": path, "task": task, "label_map": label_map})


def save_libsvm(ds: Dataset, path: str) -> None:
    """Write a dataset in LIBSVM format (1-based indices); used by tests and tools."""
    X = sp.csr_matrix(ds.X)
    opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
    with opener(path, "wt") as fh:
        for i in range(X.shape[0]):
            lo, hi = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j + 1}:{v:.17g}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi]))
            fh.write(f"{ds.y[i]:.17g} {feats}".rstrip() + "\n")


# --------------------------------------------------------------------------- synthetic
def _labels_from_scores(s: np.ndarray, model: str, noise: float,
                        rng: np.random.Generator) -> np.ndarray:
    """linreg: b = s + N(0, noise^2). logreg/svm: b = sign(s), flipped w.p. noise."""
    if model == "linreg":
        return s + noise * rng.standard_normal(s.shape[0])
    if not 0.0 <= noise <= 0.5:
        raise ValueError(f"classification label-flip noise must be in [0, 0.5], got {noise}")
    b = np.where(s >= 0, 1.0, -1.0)
    flip = rng.random(s.shape[0]) < noise
    b[flip] = -b[flip]
    return b


def make_dense(samples: int, features: int, model: str = "logreg", noise: float = 0.01,
               seed: int = 0) -> Dataset:
    """Gaussian rows scaled to unit L2 norm; ground truth x* ~ N(0, I).

    Unit-norm rows make s = x* . a ~ N(0, ~1) and bound the SGD step size
    (lr <= 2 is stable for linreg), like normalised LIBSVM sets (rcv1)."""
    _check_model(model)
    rng = np.random.default_rng([seed, 0])
    x_star = rng.standard_normal(features)
    X = rng.standard_normal((samples, features))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)
    y = _labels_from_scores(X @ x_star, model, noise, rng)
    return Dataset(X, y, f"synthetic-dense-{model}",
                   {"source": "synthetic", "kind": "dense", "model": model, "noise": noise,
                    "seed": seed, "x_star": x_star})


def make_sparse(samples: int, features: int, density: float = 0.01, model: str = "logreg",
                noise: float = 0.01, seed: int = 0, skew: float = 0.0) -> Dataset:
    """CSR samples with ~density * features nonzeros per row, unit-norm rows.

    skew = 0: columns uniform; skew > 0: column popularity ~ (j+1)^-skew, as in
    real hashed/bag-of-words data, which makes nnz-balanced partitioning matter.
    Per row nnz ~ Binomial(features, density) (at least 1); column draws with
    replacement are de-duplicated, so realised density is slightly below
    `density` (relative shortfall ~ density/2 for skew = 0).
    """
    _check_model(model)
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    rng = np.random.default_rng([seed, 1])
    x_star = rng.standard_normal(features)
    per_row = np.maximum(rng.binomial(features, density, size=samples), 1)
    rows = np.repeat(np.arange(samples, dtype=np.int64), per_row)
    if skew > 0:
        p = (np.arange(1, features + 1, dtype=np.float64)) ** -skew
        cols = rng.choice(features, size=rows.size, p=p / p.sum())
    else:
        cols = rng.integers(0, features, size=rows.size)
    keys = np.unique(rows * features + cols)  # sorted and de-duplicated
    rows, cols = keys // features, keys % features
    vals = rng.standard_normal(keys.size)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(samples, features))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-300)) @ X
    y = _labels_from_scores(X @ x_star, model, noise, rng)
    return Dataset(X.tocsr(), y, f"synthetic-sparse-{model}",
                   {"source": "synthetic", "kind": "sparse", "model": model, "noise": noise,
                    "seed": seed, "density": density, "skew": skew, "x_star": x_star})


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")


# --------------------------------------------------------------------------- builtin
def load_breast_cancer(bias: bool = False) -> Dataset:
    """scikit-learn's bundled Wisconsin breast cancer data (569 x 30, no download).

    Standardised per feature (zero mean, unit variance); labels benign=+1,
    malignant=-1. bias=True appends a constant-1 column (the model then has an
    intercept, regularised like every other weight)."""
    from sklearn.datasets import load_breast_cancer as _load

    raw = _load()
    X = raw.data.astype(np.float64)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    if bias:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    y = np.where(raw.target == 1, 1.0, -1.0)
    return Dataset(X, y, "breast_cancer",
                   {"source": "builtin", "standardized": True, "bias": bias,
                    "positive_class": "benign"})


def load_digits_binary(bias: bool = False) -> Dataset:
    """scikit-learn's bundled handwritten digits (1797 x 64 pixel intensities, no
    download) as a binary task: digits 5-9 (+1) against 0-4 (-1).

    Pixels scaled to [0, 1] (16 grey levels); constant-zero pixels kept, so the
    feature count stays 64. Real, correlated features: unlike the isotropic
    synthetic sets, the stable learning rate is bounded, so a larger batch cannot
    simply take a proportionally larger step."""
    from sklearn.datasets import load_digits as _load

    raw = _load()
    X = raw.data.astype(np.float64) / 16.0
    if bias:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    y = np.where(raw.target >= 5, 1.0, -1.0)
    return Dataset(X, y, "digits",
                   {"source": "builtin", "scaled": "x/16", "bias": bias, "positive_class": "5-9"})


BUILTIN = {"breast_cancer": load_breast_cancer, "digits": load_digits_binary}


def train_test_split(ds: Dataset, test_fraction: float = 0.2,
                     seed: int = 0) -> tuple[Dataset, Dataset]:
    """Seeded random split of the samples."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    perm = np.random.default_rng([seed, 2]).permutation(ds.n_samples)
    n_test = max(1, int(round(test_fraction * ds.n_samples)))
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    return ds.subset(train, f"{ds.name}-train"), ds.subset(test, f"{ds.name}-test")
