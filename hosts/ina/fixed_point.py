"""Float <-> int32 fixed point with one shared scale: THE conversion module.

A switch adds 32-bit integers, so a worker sends round(x * 2^k) and turns the
integer sum S back into S * 2^-k. Every worker must use the same k, and the
SUM of N contributions must not overflow int32. Used by the host transport
and by the GLM code's in-process simulation of it (hosts/glm).

Exponents. A worker's exponent for a vector is e = exponent_of(max|x|): the
smallest e with max|x| < 2^e (frexp), EXP_ZERO (-126) for an all-zero vector.
It travels in the INA header's int8 `exponent` field; the switch keeps the MAX
over contributors, so a result tells every worker E = max_m e_m.

Scale. k = scale_from_exponent(E, N) = 30 - E - h, h = ceil(log2 N) headroom
bits. Then |x * 2^k| < 2^(30-h); after rounding each contribution is at most
L = contribution_limit(N) = 2^(30-h) in magnitude, so N of them sum to at most
N * 2^(30-h) <= 2^30 < 2^31 - 1: no overflow, one spare bit.

How workers agree on k (see hosts/ina/transport.py):
 (a) "agreed" scale, default for tensors: one extra round per tensor in which
     each worker sends only its exponent (a MAX packet); every SUM chunk of the
     tensor then uses k from the result. One extra RTT per tensor, amortized
     over ceil(n/64) chunks that are pipelined through the window.
 (b) "fixed" scale (`scale_exp=k` configured), for latency-critical small
     vectors (P4SGD's per-micro-batch dot products): no extra round. Values
     whose fixed-point magnitude would exceed L are an error
     (`FixedPointOverflow`, the default) or, with on_overflow="saturate", are
     clipped to +-L and counted. Each packet still carries the sender's
     exponent, so a result whose MAX exponent exceeds max_exponent_for_scale(k, N)
     tells EVERY worker that some worker saturated that chunk.

Error bounds, per element of a SUM of N contributions:
 - agreed: rounding <= 2^-(k+1) per worker, so |S*2^-k - sum| <= N * 2^-(k+1)
   = N * 2^(E+h-31), i.e. relative to max|x| (>= 2^(E-1)) at most N * 2^(h-30)
   (N=4: 1.5e-8; N=32: 9.5e-7); converting the result to float32 adds
   <= 2^-24 * |result| (see sum_error_bound).
 - fixed:  the same absolute N * 2^-(k+1) while no value saturates (independent
   of the magnitudes; small values lose relative precision), plus the float32
   rounding of the result; a saturated element is wrong by its clipped amount.
OR and MAX carry int32/uint32 values unscaled (no conversion here).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

INT32_MAX = 2**31 - 1
EXP_ZERO = -126          # exponent of an all-zero vector (float32 min normal)
EXP_WIRE_MIN, EXP_WIRE_MAX = -128, 127   # the header field is int8


class FixedPointOverflow(OverflowError):
    """A value does not fit the shared scale for N workers."""


def exponent_of(max_abs: float) -> int:
    """Smallest e with max_abs < 2^e (what a worker puts in its packet)."""
    if not np.isfinite(max_abs):
        raise ValueError(f"cannot quantize non-finite value {max_abs}")
    if max_abs == 0.0:
        return EXP_ZERO
    return max(int(np.frexp(float(abs(max_abs)))[1]), EXP_ZERO)


def vector_exponent(x: np.ndarray) -> int:
    """exponent_of(max|x|), checked to fit the header's int8 field."""
    a = np.asarray(x)
    if a.size and not np.all(np.isfinite(a)):
        bad = np.flatnonzero(~np.isfinite(a.reshape(-1)))[0]
        raise ValueError(f"cannot quantize non-finite value {a.reshape(-1)[bad]} at index {bad}")
    e = exponent_of(float(np.max(np.abs(a))) if a.size else 0.0)
    if e > EXP_WIRE_MAX:
        raise FixedPointOverflow(f"max |x| >= 2^{EXP_WIRE_MAX}: exponent {e} does not fit "
                                 f"the int8 header field")
    return e


def headroom_bits(n_workers: int) -> int:
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    return math.ceil(math.log2(n_workers)) if n_workers > 1 else 0


def contribution_limit(n_workers: int) -> int:
    """Largest |int| one worker may send so that N of them cannot overflow int32."""
    return 1 << (30 - headroom_bits(n_workers))


def scale_from_exponent(max_exponent: int, n_workers: int) -> int:
    """k for a known maximum exponent E (the switch's MAX over workers)."""
    return 30 - int(max_exponent) - headroom_bits(n_workers)


def max_exponent_for_scale(scale_exp: int, n_workers: int) -> int:
    """Largest vector exponent that fits scale k without saturating (inverse of
    scale_from_exponent)."""
    return 30 - headroom_bits(n_workers) - int(scale_exp)


def choose_scale(max_abs_values: Sequence[float], n_workers: int) -> int:
    """Shared exponent k (values are multiplied by 2^k) from each worker's max |x|."""
    if len(max_abs_values) == 0:
        raise ValueError("need at least one max-abs value")
    E = max(exponent_of(v) for v in max_abs_values)
    return scale_from_exponent(E, n_workers)


def to_fixed(x: np.ndarray, exp: int) -> np.ndarray:
    """round(x * 2^exp) as int32; OverflowError if a value does not fit int32."""
    v = np.rint(np.ldexp(np.asarray(x, dtype=np.float64), int(exp)))
    if v.size and (not np.all(np.isfinite(v)) or np.max(np.abs(v)) > INT32_MAX):
        raise FixedPointOverflow(f"value too large for int32 at scale 2^{exp}")
    return v.astype(np.int32)


def quantize(x: np.ndarray, scale_exp: int, n_workers: int,
             on_overflow: str = "raise") -> tuple[np.ndarray, int]:
    """round(x * 2^k) as int32 within the N-worker budget -> (ints, n_saturated).

    on_overflow="raise": FixedPointOverflow naming the first offending value;
    "saturate": clip to +-contribution_limit(N) and report how many were clipped."""
    if on_overflow not in ("raise", "saturate"):
        raise ValueError(f"on_overflow must be 'raise' or 'saturate', got {on_overflow!r}")
    a = np.asarray(x, dtype=np.float64)
    if a.size and not np.all(np.isfinite(a)):
        bad = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
        raise ValueError(f"cannot quantize non-finite value {a.reshape(-1)[bad]} at index {bad}")
    v = np.rint(np.ldexp(a, int(scale_exp)))
    lim = contribution_limit(n_workers)
    over = np.abs(v) > lim
    n_over = int(np.count_nonzero(over))
    if n_over:
        if on_overflow == "raise":
            i = int(np.flatnonzero(over.reshape(-1))[0])
            raise FixedPointOverflow(
                f"{n_over} value(s) overflow the fixed-point scale 2^{scale_exp} for {n_workers} "
                f"workers (first: x[{i}] = {float(a.reshape(-1)[i])!r}; |x| must stay below "
                f"2^{max_exponent_for_scale(scale_exp, n_workers)}); lower scale_exp or use "
                f"the agreed scale")
        np.clip(v, -lim, lim, out=v)
    return v.astype(np.int32), n_over


def from_fixed(s: np.ndarray, exp: int, dtype=np.float32) -> np.ndarray:
    """Integer (sum) back to float: s * 2^-exp, rounded to float32 by default."""
    return np.ldexp(np.asarray(s, dtype=np.float64), -int(exp)).astype(dtype)


def sum_error_bound(max_abs_values: Sequence[float], n_workers: int,
                    out_dtype=np.float32) -> float:
    """A-priori bound on |quantized_sum - exact sum| per element, agreed scale."""
    E = max(exponent_of(v) for v in max_abs_values)
    k = scale_from_exponent(E, n_workers)
    bound = n_workers * 2.0 ** (-(k + 1))
    if np.dtype(out_dtype) == np.float32:
        bound += 2.0**-24 * n_workers * 2.0**E
    return bound


def fixed_scale_error_bound(scale_exp: int, n_workers: int, max_abs_sum: float = 0.0,
                            out_dtype=np.float32) -> float:
    """Bound per element at a fixed scale k, when nothing saturates:
    N * 2^-(k+1) plus the float32 rounding of a result up to max_abs_sum."""
    bound = n_workers * 2.0 ** (-(int(scale_exp) + 1))
    if np.dtype(out_dtype) == np.float32:
        bound += 2.0**-24 * (max_abs_sum + bound)
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
        raise FixedPointOverflow("int32 overflow in fixed-point sum")
    return from_fixed(total, k, out_dtype)


class QuantizedSum:
    """quantized_sum as a callable that also records its error and a-priori bound.

    Usable as `quantize=` in hosts.glm.training.simulate_model_parallel."""

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
