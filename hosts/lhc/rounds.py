"""One LHC aggregation, step by step, independent of the transport.

    agg = LhcRound(world, support="or")        # "or": switch OR; "nibbles": SUM-only (ring)
    words = agg.support_message(g)            # phase 1 payload (bitmap ++ exponent one-hot)
    ...words_sum = OR / SUM over workers...
    payload = agg.encode(words_sum, g)        # plan (from U), scale, quantize, sketch ++ core
    ...payload_sum = int32 SUM over workers (wrapping)...
    y = agg.decode(payload_sum)               # float32 sum; agg.int_sum is the exact int32 sum

The worker program (worker.py), the tests and the bench all go through this,
so the local reference and the emulated run are the same code.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from hosts.lhc import codec, scale, sizing


class LhcRound:
    def __init__(self, world: int, *, support: str = "or", lanes: int | None = None,
                 alpha: float = sizing.ALPHA, z: float = sizing.Z, rows: int | None = None,
                 compact: bool = False):
        if support not in ("or", "nibbles"):
            raise ValueError(f"support must be 'or' or 'nibbles', got {support!r}")
        if support == "nibbles" and world > codec.NIBBLE_MAX_WORKERS:
            raise ValueError(f"4-bit support counts hold at most {codec.NIBBLE_MAX_WORKERS} workers, "
                             f"got {world}")
        self.world, self.support, self.lanes = world, support, lanes
        self.alpha, self.z, self.rows, self.compact = alpha, z, rows, compact
        self.n = 0
        self.plan: codec.Plan | None = None
        self.k: int | None = None
        self.q: np.ndarray | None = None
        self.int_sum: np.ndarray | None = None

    # phase 1 ---------------------------------------------------------------
    def support_message(self, g: np.ndarray) -> np.ndarray:
        g = np.asarray(g, dtype=np.float32).reshape(-1)
        self.n = g.size
        bits = np.concatenate([g != 0, scale.exponent_bits(g)])
        return codec.pack_bits(bits) if self.support == "or" else codec.pack_nibbles(bits)

    def support_words(self, n: int) -> int:
        bits = n + scale.EXP_BITS
        return -(-bits // 32) if self.support == "or" else -(-bits // 8)

    # phase 2 ---------------------------------------------------------------
    def encode(self, support_sum: np.ndarray, g: np.ndarray) -> np.ndarray:
        g = np.asarray(g, dtype=np.float32).reshape(-1)
        n = self.n = g.size
        unpack = codec.unpack_bits if self.support == "or" else codec.unpack_nibbles
        bits = unpack(np.asarray(support_sum), n + scale.EXP_BITS)
        union = bits[:n]
        nz = np.flatnonzero(g)
        if not union[nz].all():
            raise codec.DecodeError("the aggregated support misses some of this worker's nonzeros: "
                                    "the support round's result is corrupt")
        self.k = scale.scale_for(scale.max_exponent(bits[n:]), self.world)
        self.plan = codec.make_plan(union, self.rows, self.lanes, self.alpha, self.z, self.compact)
        self.q = np.zeros(n, dtype=np.int32)       # zeros stay zero: quantize the nonzeros only
        self.q[nz] = scale.quantize(g[nz], self.k, self.world)
        return codec.encode(self.q, self.plan)

    def decode(self, payload_sum: np.ndarray) -> np.ndarray:
        if self.plan is None or self.k is None:
            raise RuntimeError("decode before encode")
        self.int_sum = codec.decode(payload_sum, self.plan)
        return scale.dequantize(self.int_sum, self.k)

    def wire(self) -> dict:
        """int32/uint32 values one worker sent in each phase of this round."""
        p = self.plan
        return {"support_values": self.support_words(self.n), "sketch_values": p.counters,
                "core_values": int(p.core.size), "union": p.union, "rows": p.rows,
                "peeled": p.peeled, "peel_rounds": len(p.rounds)}


def _wrapping_sum(arrays: Sequence[np.ndarray]) -> np.ndarray:
    acc = np.zeros(np.shape(arrays[0]), dtype=np.int64)
    for a in arrays:
        acc += np.asarray(a).view(np.int32)
    return acc.astype(np.int32)


def local_allreduce(grads: Sequence[np.ndarray], **kw) -> tuple[np.ndarray, list[LhcRound]]:
    """The whole algorithm with numpy reductions standing in for the network."""
    world = len(grads)
    rounds = [LhcRound(world, **kw) for _ in grads]
    msgs = [r.support_message(g) for r, g in zip(rounds, grads)]
    if rounds[0].support == "or":
        agg = np.bitwise_or.reduce(np.stack(msgs), axis=0)
    else:
        agg = _wrapping_sum(msgs)
    payloads = [r.encode(agg, g) for r, g in zip(rounds, grads)]
    total = _wrapping_sum(payloads)
    outs = [r.decode(total) for r in rounds]
    return outs[0], rounds


def exact_fixed_sum(grads: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    """The reference: sum of the workers' fixed-point values at the shared scale (int64), k."""
    from hosts.ina import fixed_point as fp
    world = len(grads)
    E = max(fp.vector_exponent(np.asarray(g, np.float32)) for g in grads)
    k = scale.scale_for(E, world)
    return np.sum([scale.quantize(np.asarray(g, np.float32).reshape(-1), k, world).astype(np.int64)
                   for g in grads], axis=0), k
