"""Generalized linear models: loss and derivative as functions of the dot product.

P4SGD's model parallelism relies on one property: the loss of sample i depends
on the model only through s_i = x . a_i. So every worker needs only the scalar
s_i (obtained by allreducing partial dot products) to compute g_i = dloss/ds_i,
and then updates its own model slice with g_i * a_i[slice].

Objective minimised (same convention as scikit-learn with C = 1/(n * l2)):
    F(x) = mean_i loss(x . a_i, b_i) + l2/2 * ||x||^2
The regulariser is separable across feature slices, so each worker applies it
to its own slice without communication.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit


class GLM:
    """Base class. Subclasses define pointwise_loss and derivative."""

    name: str = ""
    classification: bool = False

    def __init__(self, l2: float = 0.0):
        if l2 < 0:
            raise ValueError(f"l2 regularization must be >= 0, got {l2}")
        self.l2 = float(l2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(l2={self.l2})"

    # --- per-sample functions of s (dot product) and b (label) -------------
    def pointwise_loss(self, s: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def derivative(self, s: np.ndarray, b: np.ndarray) -> np.ndarray:
        """d loss(s, b) / d s per sample (a subgradient where not differentiable)."""
        raise NotImplementedError

    def predict(self, s: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # --- aggregates ---------------------------------------------------------
    def loss(self, s: np.ndarray, b: np.ndarray) -> float:
        """Mean loss over the samples (no regularization)."""
        s, b = np.asarray(s, dtype=np.float64), np.asarray(b, dtype=np.float64)
        return float(np.mean(self.pointwise_loss(s, b))) if s.size else 0.0

    def regularizer(self, x: np.ndarray | float) -> float:
        """l2/2 * ||x||^2. Accepts a vector or an already summed squared norm."""
        sq = float(x) if np.isscalar(x) else float(np.dot(x, x))
        return 0.5 * self.l2 * sq

    def reg_gradient(self, x: np.ndarray) -> np.ndarray:
        return self.l2 * x

    def objective(self, s: np.ndarray, b: np.ndarray, x: np.ndarray | float) -> float:
        return self.loss(s, b) + self.regularizer(x)

    def accuracy(self, s: np.ndarray, b: np.ndarray) -> float | None:
        """Fraction of correct sign predictions; None for regression."""
        if not self.classification:
            return None
        s = np.asarray(s)
        return float(np.mean(self.predict(s) == np.asarray(b))) if s.size else 0.0


class LinearRegression(GLM):
    """Squared loss 1/2 (s - b)^2."""

    name = "linreg"
    classification = False

    def pointwise_loss(self, s, b):
        r = np.asarray(s, dtype=np.float64) - b
        return 0.5 * r * r

    def derivative(self, s, b):
        return np.asarray(s, dtype=np.float64) - b

    def predict(self, s):
        return np.asarray(s, dtype=np.float64)


class LogisticRegression(GLM):
    """Logistic loss log(1 + exp(-b s)), labels b in {-1, +1}."""

    name = "logreg"
    classification = True

    def pointwise_loss(self, s, b):
        # logaddexp avoids overflow for large |s|.
        return np.logaddexp(0.0, -np.asarray(b, dtype=np.float64) * s)

    def derivative(self, s, b):
        b = np.asarray(b, dtype=np.float64)
        return -b * expit(-b * np.asarray(s, dtype=np.float64))

    def predict(self, s):
        return np.where(np.asarray(s) >= 0, 1.0, -1.0)

    def probability(self, s):
        """P(b = +1 | s)."""
        return expit(np.asarray(s, dtype=np.float64))


class SVM(GLM):
    """Hinge loss max(0, 1 - b s), labels b in {-1, +1}.

    Subgradient: -b where b s < 1, else 0 (0 chosen at the kink b s == 1).
    """

    name = "svm"
    classification = True

    def pointwise_loss(self, s, b):
        return np.maximum(0.0, 1.0 - np.asarray(b, dtype=np.float64) * s)

    def derivative(self, s, b):
        b = np.asarray(b, dtype=np.float64)
        return np.where(b * np.asarray(s, dtype=np.float64) < 1.0, -b, 0.0)

    def predict(self, s):
        return np.where(np.asarray(s) >= 0, 1.0, -1.0)


MODELS: dict[str, type[GLM]] = {
    cls.name: cls for cls in (LinearRegression, LogisticRegression, SVM)
}


def get_model(model: str | GLM, l2: float | None = None) -> GLM:
    """Model by registry name ("linreg", "logreg", "svm"); instances pass through
    (with l2 overridden when given)."""
    if isinstance(model, GLM):
        return model if l2 is None else type(model)(l2=l2)
    try:
        cls = MODELS[model]
    except KeyError:
        raise ValueError(
            f"unknown model {model!r}; choose one of {sorted(MODELS)}") from None
    return cls(l2=0.0 if l2 is None else l2)
