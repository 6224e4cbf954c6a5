"""Float <-> int32 fixed point with one shared scale, as a switch sums integers.

A Tofino-class switch adds 32-bit integers in registers, so workers send
round(q * 2^k) and receive the integer sum S, which they turn back into S * 2^-k.
All workers must use the same k, and the sum of M contributions must not
overflow int32.

Choosing k (all workers agree without a second round trip of floats):
  * each worker sends e_m = exponent(max_i |q_{m,i}|), i.e. the smallest e with
    max|q_m| < 2^e (frexp);
  * the switch (or the allreduce) takes E = max_m e_m (a MAX over workers);
  * k = 30 - E - h, with h = ceil(log2 M) headroom bits.
  Then |q * 2^k| < 2^(30-h), so after rounding |int| <= 2^(30-h) and the sum of
  M <= 2^h values is <= 2^30 < 2^31 - 1: no overflow, one spare bit.

Error bound of one quantized sum (per element), for values with max exponent E:
  rounding on each worker: <= 2^-(k+1), M workers: <= M * 2^-(k+1) = M * 2^(E+h-31)
  conversion of the result to float32: <= 2^-24 * |result| <= 2^-24 * M * 2^E
  total:  |s_q - s| <= M * 2^(E+h-31) + M * 2^(E-24)   (see sum_error_bound)
Relative to the largest input (>= 2^(E-1)) that is about 2^-23 * M (float32
dominates); e.g. M = 8: <= ~1e-6 of max|q|.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

INT32_MAX = 2**31 - 1
EXP_ZERO = -126  # exponent used for an all-zero vector (float32 min normal)


def exponent_of(max_abs: float) -> int:
    """Smallest e with max_abs < 2^e (what a worker would put in its packet)."""
    if not np.isfinite(max_abs):
        raise ValueError(f"cannot quantize non-finite value {max_abs}")
    if max_abs == 0.0:
        return EXP_ZERO
    return max(int(np.frexp(float(abs(max_abs)))[1]), EXP_ZERO)


def headroom_bits(n_workers: int) -> int:
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    return math.ceil(math.log2(n_workers)) if n_workers > 1 else 0


def scale_from_exponent(max_exponent: int, n_workers: int) -> int:
    """k for a known maximum exponent E (the switch's MAX over workers)."""
    return 30 - int(max_exponent) - headroom_bits(n_workers)


def choose_scale(max_abs_values: Sequence[float], n_workers: int) -> int:
    """Shared exponent k (values are multiplied by 2^k) from each worker's max |q|."""
    if len(max_abs_values) == 0:
        raise ValueError("need at least one max-abs value")
    E = max(exponent_of(v) for v in max_abs_values)
    return scale_from_exponent(E, n_workers)


def to_fixed(x: np.ndarray, exp: int) -> np.ndarray:
    """round(x * 2^exp) as int32; OverflowError if a value does not fit."""
    v = np.rint(np.ldexp(np.asarray(x, dtype=np.float64), int(exp)))
    if v.size and (not np.all(np.isfinite(v)) or np.max(np.abs(v)) > INT32_MAX):
        raise OverflowError(f"value too large for int32 at scale 2^{exp}")
    return v.astype(np.int32)


def from_fixed(s: np.ndarray, exp: int, dtype=np.float32) -> np.ndarray:
    """Integer (sum) back to float: s * 2^-exp, rounded to float32 by default."""
    return np.ldexp(np.asarray(s, dtype=np.float64), -int(exp)).astype(dtype)


def sum_error_bound(max_abs_values: Sequence[float], n_workers: int,
                    out_dtype=np.float32) -> float:
    """A-priori bound on |quantized_sum - exact sum| per element (module docstring)."""
    E = max(exponent_of(v) for v in max_abs_values)
    k = scale_from_exponent(E, n_workers)
    bound = n_workers * 2.0 ** (-(k + 1))
    if np.dtype(out_dtype) == np.float32:
        bound += 2.0**-24 * n_workers * 2.0**E
    return bound


def quantized_sum(vectors: Sequence[np.ndarray], out_dtype=np.float32) -> np.ndarray:
    """Sum of per-worker vectors the way the switch computes it (int32 registers)."""
    M = len(vectors)
    k = choose_scale([float(np.max(np.abs(v))) if np.size(v) else 0.0 for v in vectors], M)
    total = np.zeros(np.shape(vectors[0]), dtype=np.int64)
    for v in vectors:
        total += to_fixed(v, k)
    # guaranteed by the choice of k; checked because a register would wrap silently
    if total.size and np.max(np.abs(total)) > INT32_MAX:
        raise OverflowError("int32 overflow in fixed-point sum")
    return from_fixed(total, k, out_dtype)


class QuantizedSum:
    """quantized_sum as a callable that also records its error and a-priori bound.

    Usable as `quantize=` in training.simulate_model_parallel."""

    def __init__(self, out_dtype=np.float32):
        self.out_dtype = out_dtype
        self.calls = 0
        self.max_abs_error = 0.0
        self.max_bound = 0.0

    def __call__(self, vectors: Sequence[np.ndarray]) -> np.ndarray:
        out = quantized_sum(vectors, self.out_dtype)
        exact = np.sum(np.asarray(vectors, dtype=np.float64), axis=0)
        maxes = [float(np.max(np.abs(v))) if np.size(v) else 0.0 for v in vectors]
        self.calls += 1
        if out.size:
            self.max_abs_error = max(self.max_abs_error, float(np.max(np.abs(out - exact))))
        self.max_bound = max(self.max_bound, sum_error_bound(maxes, len(vectors), self.out_dtype))
        return out
