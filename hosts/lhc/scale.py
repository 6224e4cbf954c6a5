"""The shared fixed-point scale of an LHC round, agreed inside the support round.

Values travel as int32 (the INA wire; hosts/ina/fixed_point.py is the one
conversion module and is reused here). All workers must quantize with one
scale k = fp.scale_from_exponent(E, N), E the largest vector exponent of any
worker: then every coordinate's SUM over N workers is below 2^30 in magnitude
(log2 N headroom bits), so the decoded sums fit int32. Sketch counters may hold
several coordinates and wrap mod 2^32 (the switch adds like bit<32>); peeling
reads a counter only when one coordinate is left in it, and that value fits,
so wrapping never loses anything (codec.py).

No extra MAX round: each worker appends a one-hot of its exponent
(EXP_BITS bits, bit e - EXP_ZERO... see exponent_bits) to its support bitmap.
OR-ed (switch) or counted (ring, nibbles), the highest set bit is E.
"""
from __future__ import annotations

import numpy as np

from hosts.ina import fixed_point as fp

EXP_BITS = 256               # int8 exponent range -128..127
_EXP_OFFSET = 128


def exponent_bits(g: np.ndarray) -> np.ndarray:
    """One-hot (bool, EXP_BITS) of this worker's vector exponent."""
    e = fp.vector_exponent(g)
    bits = np.zeros(EXP_BITS, dtype=bool)
    bits[e + _EXP_OFFSET] = True
    return bits


def max_exponent(bits: np.ndarray) -> int:
    """E from the aggregated one-hots (any nonzero entry counts)."""
    nz = np.flatnonzero(np.asarray(bits))
    if nz.size == 0:
        raise ValueError("no worker's exponent bit is set: the support round's tail is corrupt")
    return int(nz[-1]) - _EXP_OFFSET


def scale_for(max_exp: int, n_workers: int) -> int:
    return fp.scale_from_exponent(max_exp, n_workers)


def quantize(g: np.ndarray, k: int, n_workers: int) -> np.ndarray:
    """round(g * 2^k) as int32 within the N-worker budget (FixedPointOverflow otherwise)."""
    return fp.quantize(g, k, n_workers)[0]


def dequantize(s: np.ndarray, k: int) -> np.ndarray:
    return fp.from_fixed(s, k)
