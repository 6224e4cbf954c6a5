"""LHC codec: support bitmap, count sketch over the union support, peeling decode.

Layout. A gradient of n values is cut into blocks of `lanes` values (1024 as in
the public code); value j sits at (block b = j // lanes, lane t = j % lanes).

Phase 1 (support). Each worker's bitmap of nonzeros (+ its exponent one-hot,
scale.py) is OR-aggregated (pack_bits; over a SUM-only transport: 4-bit counts,
pack_nibbles, the public demo's way). The result is U, the union support.

Phase 2 (sketch). A count sketch of R rows x lanes counters, R = sizing.sketch_rows
(|U|). Hash j (j = 0, 1, 2; shared seeds) maps block b to a row in sub-table j
(rows j*R/3 .. (j+1)*R/3 - 1, so a value's three counters are distinct) and a
sign +-1; value (b, t) is added, times its sign, to counter row_j(b) * lanes + t:
the lane is preserved, every lane is an independent sketch. Linear, so the
switch's int32 SUM of the workers' sketches is the sketch of the sum.

Decode (peeling, as an invertible Bloom lookup table). A counter that exactly
one unrecovered position of U maps to is pure: its value is that position's
sum (times the sign); subtract it from the position's other counters, repeat.
Which positions peel, and in which round, depends only on U and the hashes,
never on values: `make_plan` runs the peeling on counts before anything is
sent. Positions left in the 2-core (peeling stalls) are the plan's `core`;
every worker knows them, so each appends its values of the core positions
dense to its sketch (summed by the same SUM round) and the sketch carries only
the peelable rest. Decoding is therefore exact by construction, and checked:
after peeling every counter must be zero, else DecodeError (a corrupted or
mismatched sketch). It never returns an estimate.

All arithmetic on counters is mod 2^32 (int32 wraps, like the switch); a
decoded value is read only from a pure counter, where it fits int32 (the
fixed-point scale guarantees |sum| < 2^30, scale.py), so wrapping is harmless.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from hosts.lhc import sizing
from testbed import cext

# The compiled peeling (hosts/lhc/_peel.c, built by `make setup`); None: the Python reference.
_peelc, _PEEL_IMPORT_ERROR = cext.load("hosts.lhc._peel")
PEEL_IMPL = "python" if _peelc is None else "compiled"

SEEDS = (0x3C6EF372, 0xA54FF53A, 0x510E527F)   # one per hash function, shared by all workers
K = sizing.K


class DecodeError(RuntimeError):
    """The aggregated sketch does not decode exactly: never papered over."""


# ---------------------------------------------------------------------------
# Phase 1: bitmaps
# ---------------------------------------------------------------------------
def pack_bits(bits: np.ndarray) -> np.ndarray:
    """bool[n] -> uint32 words (bit i of the vector = bit i % 32 of word i // 32)."""
    b = np.packbits(np.asarray(bits, dtype=bool), bitorder="little")
    pad = (-b.size) % 4
    if pad:
        b = np.concatenate([b, np.zeros(pad, np.uint8)])
    return b.view("<u4").astype(np.uint32)


def unpack_bits(words: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(np.ascontiguousarray(words, dtype="<u4").view(np.uint8),
                         count=n, bitorder="little").astype(bool)


def pack_nibbles(bits: np.ndarray) -> np.ndarray:
    """bool[n] -> int32 words of 8 four-bit counters (0/1 each); SUM of up to 15 workers'
    words is their per-position count, no carry between nibbles (the demo's OR over SUM)."""
    b = np.asarray(bits, dtype=np.uint32)
    pad = (-b.size) % 8
    if pad:
        b = np.concatenate([b, np.zeros(pad, np.uint32)])
    w = (b.reshape(-1, 8) << (np.arange(8, dtype=np.uint32) * 4)).sum(axis=1, dtype=np.uint32)
    return w.view(np.int32)


def unpack_nibbles(words: np.ndarray, n: int) -> np.ndarray:
    w = np.asarray(words).view(np.uint32)
    nib = (w[:, None] >> (np.arange(8, dtype=np.uint32) * 4)) & np.uint32(0xF)
    return (nib.reshape(-1)[:n] != 0)


NIBBLE_MAX_WORKERS = 15


# ---------------------------------------------------------------------------
# Hashing: block -> (row, sign) per hash function
# ---------------------------------------------------------------------------
def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (uint32, wrapping)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@lru_cache(maxsize=8)
def block_hashes(blocks: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(row[K, blocks], sign[K, blocks]) for a sketch of `rows` rows (multiple of K).
    Kept for the next plan of that shape (read-only): a worker plans every step."""
    if rows < K or rows % K:
        raise ValueError(f"sketch rows must be a positive multiple of {K}, got {rows}")
    sub = rows // K
    b = np.arange(blocks, dtype=np.uint32)
    row = np.empty((K, blocks), dtype=np.int64)
    sign = np.empty((K, blocks), dtype=np.int64)
    with np.errstate(over="ignore"):
        for j, seed in enumerate(SEEDS):
            h = _fmix32(b * np.uint32(0x9E3779B1) + np.uint32(seed))
            row[j] = j * sub + (h % np.uint32(sub)).astype(np.int64)
            sign[j] = 1 - 2 * (h >> np.uint32(31)).astype(np.int64)
    row.flags.writeable = sign.flags.writeable = False
    return row, sign


# ---------------------------------------------------------------------------
# The plan: everything that depends on U only
# ---------------------------------------------------------------------------
@dataclass
class Plan:
    n: int
    lanes: int
    rows: int                      # 0: compact mode (no sketch, U's values sent dense)
    positions: np.ndarray          # flat indices of U, ascending
    cells: np.ndarray              # (K, |U|) counter of each position per hash
    signs: np.ndarray              # (K, |U|)
    rounds: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (pos idx, hash j)
    core: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))   # pos idx, dense
    sketched: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # pos idx in sketch

    @property
    def union(self) -> int:
        return int(self.positions.size)

    @property
    def counters(self) -> int:
        return self.rows * self.lanes

    @property
    def payload_len(self) -> int:
        """int32 values each worker sends in the SUM round: sketch + dense core."""
        return self.counters + int(self.core.size)

    @property
    def peeled(self) -> bool:
        """Plain peeling alone would have recovered everything (no dense completion)."""
        return self.rows > 0 and self.core.size == 0

    def describe(self) -> dict:
        return {"n": self.n, "union": self.union, "rows": self.rows, "lanes": self.lanes,
                "counters": self.counters, "core": int(self.core.size),
                "peel_rounds": len(self.rounds), "payload_values": self.payload_len,
                "compact": self.rows == 0}


def make_plan(union: np.ndarray, rows: int | None = None, lanes: int | None = None,
              alpha: float = sizing.ALPHA, z: float = sizing.Z, compact: bool = False) -> Plan:
    """The peeling plan for union support `union` (bool[n]). rows: None = the sizing
    rule; an explicit value is used as is (decode scenario, tests). lanes: None =
    sizing.lanes_for(|U|), else used as is (capped at n). compact: when
    the sketch would not be smaller than |U|, send U's values instead."""
    u = np.asarray(union, dtype=bool).reshape(-1)
    n = u.size
    pos = np.flatnonzero(u).astype(np.int64)
    m = pos.size
    L = sizing.lanes_for(m, n) if lanes is None else max(1, min(int(lanes), n))
    R = sizing.sketch_rows(m, L, alpha, z) if rows is None else int(rows)
    if compact and (R * L >= m):
        idx = np.arange(m, dtype=np.int64)
        return Plan(n, L, 0, pos, np.empty((K, m), np.int64), np.empty((K, m), np.int64),
                    core=idx)
    blocks = -(-n // L)
    rowtab, signtab = block_hashes(blocks, R)
    b, t = pos // L, pos % L
    cells = rowtab[:, b] * L + t
    signs = signtab[:, b]
    plan = Plan(n, L, R, pos, cells, signs)
    _peel(plan)
    return plan


def _peel(plan: Plan) -> None:
    """Run peeling on counts only: fills plan.rounds and plan.core (the 2-core).
    Compiled (hosts/lhc/_peel.c) where `make setup` built it, else _peel_python;
    both give the same rounds and core (PEEL_IMPL says which runs)."""
    if _peelc is None:
        _peel_python(plan)
        return
    m = plan.union
    round_of, hash_of, order = np.empty(m, np.int32), np.empty(m, np.int8), np.empty(m, np.int64)
    count = _peelc.peel(np.ascontiguousarray(plan.cells, dtype=np.int64), m, plan.cells.shape[0],
                        plan.rows * plan.lanes, round_of, hash_of, order)   # order: the core, then by round
    per_round = np.bincount(round_of + 1, minlength=count + 1)
    plan.rounds = [(sel, hash_of[sel].astype(np.int64))
                   for sel in np.split(order[per_round[0]:], np.cumsum(per_round[1:-1]))] if count else []
    _set_core(plan, order[:per_round[0]])


def _peel_python(plan: Plan) -> None:
    """The reference peeling: each round scans every position left."""
    cells, C = plan.cells, plan.rows * plan.lanes
    count = np.bincount(cells.reshape(-1), minlength=C).astype(np.int64)
    alive = np.arange(plan.union, dtype=np.int64)
    while alive.size:
        pure = count[cells[:, alive]] == 1            # (K, alive)
        has = pure.any(axis=0)
        if not has.any():
            break
        sel = alive[has]
        plan.rounds.append((sel, np.argmax(pure[:, has], axis=0)))
        np.subtract.at(count, cells[:, sel].reshape(-1), 1)
        alive = alive[~has]
    _set_core(plan, alive)


def _set_core(plan: Plan, alive: np.ndarray) -> None:
    plan.core = alive
    # The sketch carries only what peels; the core goes dense. With the core's
    # edges removed every remaining cell count only drops, so the rest still peels
    # in the same rounds.
    if alive.size:
        keep = np.ones(plan.union, dtype=bool)
        keep[alive] = False
        plan.sketched = np.flatnonzero(keep)
    else:
        plan.sketched = np.arange(plan.union, dtype=np.int64)


# ---------------------------------------------------------------------------
# Encode / decode
# ---------------------------------------------------------------------------
def _wrap32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64).astype(np.int32)     # C cast: mod 2^32, like bit<32>


def encode(q: np.ndarray, plan: Plan) -> np.ndarray:
    """int32 payload of one worker: sketch (rows x lanes counters) ++ its core values.

    q: the worker's fixed-point gradient (int32[n]); its nonzeros must lie in U."""
    q = np.asarray(q).reshape(-1)
    if q.size != plan.n:
        raise ValueError(f"gradient has {q.size} values, the plan {plan.n}")
    vals = q[plan.positions]
    out = np.empty(plan.payload_len, dtype=np.int32)
    if plan.rows:
        sk = plan.sketched
        v = vals[sk].astype(np.float64)   # bincount sums in float64: exact below 2^53
        acc = np.zeros(plan.counters, dtype=np.float64)
        for j in range(K):
            acc += np.bincount(plan.cells[j, sk], weights=v * plan.signs[j, sk],
                               minlength=plan.counters)
        out[:plan.counters] = _wrap32(acc.astype(np.int64))
    out[plan.counters:] = vals[plan.core]
    return out


def decode(payload: np.ndarray, plan: Plan) -> np.ndarray:
    """The summed payload -> the summed fixed-point gradient (int32[n]), exactly.

    DecodeError if the sketch is not consistent with the plan (a counter left
    nonzero after peeling, or the wrong length): no estimate is ever returned."""
    p = np.asarray(payload).reshape(-1)
    if p.size != plan.payload_len:
        raise DecodeError(f"payload has {p.size} values, the plan expects {plan.payload_len} "
                          f"({plan.counters} counters + {plan.core.size} dense)")
    vals = np.zeros(plan.union, dtype=np.int32)
    vals[plan.core] = p[plan.counters:]
    if plan.rows:
        S = p[:plan.counters].astype(np.int64)
        cells, signs = plan.cells, plan.signs
        for sel, j in plan.rounds:
            c = cells[j, sel]
            v = _wrap32(S[c] * signs[j, sel])          # pure counter: one position left
            vals[sel] = v
            for jj in range(K):
                np.subtract.at(S, cells[jj, sel], signs[jj, sel] * v.astype(np.int64))
        left = np.flatnonzero(_wrap32(S))
        if left.size:
            raise DecodeError(f"{left.size} sketch counter(s) nonzero after peeling (first: counter "
                              f"{int(left[0])}): the aggregated sketch does not match the plan "
                              f"(|U| {plan.union}, rows {plan.rows})")
    out = np.zeros(plan.n, dtype=np.int32)
    out[plan.positions] = vals
    return out


def wire_values(plan: Plan, bitmap_words: int) -> dict:
    """int32 values per worker per phase, for byte accounting."""
    return {"support_words": bitmap_words, "sketch": plan.counters, "dense_core": int(plan.core.size)}
