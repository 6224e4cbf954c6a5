"""`Aggregator`: the slot pool, mirroring `control Aggregator` in p4/ina.p4.

Registers (P4 index = slot*2 + slot_ver, and *64 + lane for values), with
slot = the job's slot_base + the packet's slot:
- `Aggregator.worker_bitmap` bit<32>: workers counted in this (slot, version)
- `Aggregator.worker_count`  bit<8>:  how many
- `Aggregator.slot_seq`      bit<32>: the chunk (seq) this (slot, version) holds
- `Aggregator.agg_values`    bit<32> x 64: the running aggregate
- `Aggregator.result_exponent` bit<8> (int8): MAX of the contributors' exponents

Values are stored as int32 and combined with int32 wraparound, exactly like
bit<32> arithmetic on BMv2 and Tofino (SUM is modulo 2^32, MAX compares signed).
The host library picks the shared scale so that N workers never overflow.

Decision for one contribution (worker w, seq s) to (slot, ver) whose state is
(bitmap, count, stored seq); N = the job's number of workers:
1. count == 0 or s newer than stored (serial arithmetic): first contribution of
   a new chunk: bitmap = {w}, count = 1, values and exponent overwritten.
2. s older than stored: a stale copy of a chunk this slot has left: DUPLICATE.
3. w already in bitmap: UNICAST the stored result if count == N (the worker
   lost its result), else DUPLICATE (dropped, not counted twice).
4. count >= N: w already moved on (its bit was cleared): DUPLICATE.
5. otherwise add: bitmap |= w, count += 1, combine values with the packet's op.
A counted contribution also clears w's bit in the other version (shadow copy:
once w works on this version, its previous result is no longer needed).
When count reaches N the packet leaves as the result: MULTICAST.
"""
from __future__ import annotations

import numpy as np

from testbed import wire

from .externs import Register

NUM_SLOTS = 4096
LANES = wire.MAX_VALUES_PER_PACKET

# Verdicts, as `VERDICT_*` in ina.p4. SLOW is Python-only: "decide one by one".
ABSORB, MULTICAST, UNICAST, DUPLICATE, SLOW = 0, 1, 2, 3, -1
_HALF = 1 << 31
_LANE_IDX = np.arange(LANES)


class Aggregator:
    BITMAP = "Aggregator.worker_bitmap"
    COUNT = "Aggregator.worker_count"
    SEQ = "Aggregator.slot_seq"
    VALUES = "Aggregator.agg_values"
    EXPONENT = "Aggregator.result_exponent"

    def __init__(self, num_slots: int = NUM_SLOTS):
        s = self.num_slots = num_slots
        self.bitmap = np.zeros((s, 2), dtype=np.uint32)
        self.count = np.zeros((s, 2), dtype=np.uint8)
        self.seq = np.zeros((s, 2), dtype=np.uint32)
        self.exponent = np.zeros((s, 2), dtype=np.int8)
        self.values = np.zeros((s, 2, LANES), dtype=np.int32)
        self.registers = {
            self.BITMAP: Register(self.BITMAP, self.bitmap, 32),
            self.COUNT: Register(self.COUNT, self.count, 8),
            self.SEQ: Register(self.SEQ, self.seq, 32),
            self.VALUES: Register(self.VALUES, self.values, 32),
            self.EXPONENT: Register(self.EXPONENT, self.exponent, 8),
        }

    def reset(self, slot_base: int = 0, slot_count: int | None = None) -> None:
        """Zero a slot range (what a controller does when it installs a job)."""
        end = self.num_slots if slot_count is None else slot_base + slot_count
        for a in (self.bitmap, self.count, self.seq, self.exponent, self.values):
            a[slot_base:end] = 0

    # -- one packet (the reference semantics) --------------------------------
    def apply(self, g: int, v: int, wid: int, seq: int, op: int, cnt: int, exp: int,
              vals: np.ndarray, n: int) -> tuple[int, np.ndarray | None, int]:
        """-> (verdict, result values (cnt,) for MULTICAST/UNICAST, result exponent)."""
        wbit = 1 << wid
        bm = int(self.bitmap[g, v])
        c = int(self.count[g, v])
        diff = (seq - int(self.seq[g, v])) & 0xFFFFFFFF
        first = c == 0 or 0 < diff < _HALF
        if not first:
            if diff != 0:
                return DUPLICATE, None, 0
            if bm & wbit:
                if c == n:
                    return UNICAST, self.values[g, v, :cnt].copy(), int(self.exponent[g, v])
                return DUPLICATE, None, 0
            if c >= n:
                return DUPLICATE, None, 0
        self.bitmap[g, 1 - v] &= np.uint32(~wbit & 0xFFFFFFFF)
        row = self.values[g, v]
        if first:
            self.bitmap[g, v] = wbit
            c = 1
            e = exp
            self.seq[g, v] = seq
            row[:] = 0
            row[:cnt] = vals[:cnt]
        else:
            self.bitmap[g, v] = bm | wbit
            c += 1
            e = max(int(self.exponent[g, v]), exp)
            lanes = row[:cnt]
            if op == wire.OP_SUM:
                np.add(lanes, vals[:cnt], out=lanes)          # int32: wraps like bit<32>
            elif op == wire.OP_OR:
                np.bitwise_or(lanes, vals[:cnt], out=lanes)
            else:
                np.maximum(lanes, vals[:cnt], out=lanes)
        self.count[g, v] = c
        self.exponent[g, v] = e
        if c == n:
            return MULTICAST, row[:cnt].copy(), e
        return ABSORB, None, e

    # -- a batch ---------------------------------------------------------------
    def apply_batch(self, g, v, wid, seq, op, cnt, exp, vals, n):
        """Vectorized `apply` for the common case. All arguments are arrays over
        the batch's contributions in arrival order (vals: (m, 64) int32 with
        lanes >= cnt zeroed). Packets are grouped by slot; a group takes the
        fast path when its result cannot depend on the order inside it:
        same version, seq, op and count, distinct workers none of which is
        already counted, and no more packets than the slot still needs. Then
        the group is one reduction, and the packet that completes the slot is
        the group's last. Other groups get verdict SLOW: the caller runs
        `apply` on their packets one by one, in arrival order (slots are
        independent, so handling them after the fast groups changes nothing).

        -> (verdict (m,), result rows, result values (c, 64), result exponents (c,))
        """
        m = len(g)
        order = np.argsort(g, kind="stable")
        gs = g[order]
        edge = np.empty(m, dtype=bool)
        edge[0] = True
        np.not_equal(gs[1:], gs[:-1], out=edge[1:])
        starts = np.flatnonzero(edge)
        k = np.diff(starts, append=m)

        # one key per packet: a group is uniform when min(key) == max(key)
        vs, ss = v[order], seq[order]
        key = ((((ss << 1) | vs) << 2 | op[order]) << 7 | cnt[order]) << 6 | n[order]
        uniform = np.minimum.reduceat(key, starts) == np.maximum.reduceat(key, starts)
        or_bits = np.bitwise_or.reduceat(np.left_shift(1, wid[order]), starts)
        distinct = np.bitwise_count(or_bits) == k

        gg, vv, sq, N = gs[starts], vs[starts], ss[starts], n[order][starts]
        cur_bm = self.bitmap[gg, vv].astype(np.int64)
        cur_cnt = self.count[gg, vv].astype(np.int64)
        diff = (sq - self.seq[gg, vv]) & 0xFFFFFFFF
        first = (cur_cnt == 0) | ((diff != 0) & (diff < _HALF))
        cont = (diff == 0) & ((cur_bm & or_bits) == 0) & (cur_cnt + k <= N)
        ok = uniform & distinct & np.where(first, k <= N, cont)

        verdict = np.full(m, SLOW, dtype=np.int8)
        if ok.all():
            E = np.arange(len(starts))
            verdict[:] = ABSORB
        else:
            E = np.flatnonzero(ok)
            verdict[order[ok[np.cumsum(edge) - 1]]] = ABSORB
            if not len(E):
                return verdict, np.empty(0, np.int64), np.empty((0, LANES), np.int32), \
                    np.empty(0, np.int64)
            gg, vv, sq, N, starts, k, first = gg[E], vv[E], sq[E], N[E], starts[E], k[E], first[E]
            cur_bm, cur_cnt, or_bits = cur_bm[E], cur_cnt[E], or_bits[E]

        # Gather each group's rows into (groups, kmax, 64), padding short
        # groups with the op's identity, and reduce along the middle axis.
        # int32 arithmetic wraps mod 2^32: the same as bit<32> in P4.
        kmax = int(k.max())
        pos = np.arange(kmax)
        idx = order[np.minimum(starts[:, None] + pos, m - 1)]
        pad = pos[None, :] >= k[:, None]
        x = vals[idx]
        old = self.values[gg, vv]
        gop = op[order][starts]
        o_min, o_max = int(gop.min()), int(gop.max())
        if o_min == o_max:
            new = self._combine(o_min, x, pad, old, first, cnt[order][starts])
        else:
            new = np.empty_like(old)
            for o in range(o_min, o_max + 1):
                sel = gop == o
                if sel.any():
                    new[sel] = self._combine(o, x[sel], pad[sel], old[sel], first[sel],
                                             cnt[order][starts][sel])
        self.values[gg, vv] = new
        ex = exp[idx]
        if kmax > 1:
            ex[pad] = -128
        red_exp = ex.max(axis=1)
        new_exp = np.where(first, red_exp, np.maximum(self.exponent[gg, vv], red_exp))
        self.exponent[gg, vv] = new_exp
        self.bitmap[gg, vv] = np.where(first, 0, cur_bm) | or_bits
        self.bitmap[gg, 1 - vv] &= (~or_bits & 0xFFFFFFFF).astype(np.uint32)
        new_cnt = np.where(first, 0, cur_cnt) + k
        self.count[gg, vv] = new_cnt
        self.seq[gg, vv] = sq

        done = np.flatnonzero(new_cnt == N)
        res_rows = order[starts[done] + k[done] - 1]
        verdict[res_rows] = MULTICAST
        return verdict, res_rows, new[done], new_exp[done]

    @staticmethod
    def _combine(op: int, x: np.ndarray, pad: np.ndarray, old: np.ndarray,
                 first: np.ndarray, cnt: np.ndarray) -> np.ndarray:
        """New slot values for groups of one op: x (groups, kmax, 64) contributions."""
        padded = x.shape[1] > 1 and pad.any()
        if op == wire.OP_MAX:
            if padded:
                x[pad] = np.iinfo(np.int32).min
            red = np.maximum.reduce(x, axis=1)
            # lanes beyond count are 0 in x but must keep their old value
            live = _LANE_IDX[None, :] < cnt[:, None]
            return np.where(first[:, None], red, np.where(live, np.maximum(old, red), old))
        if padded:
            x[pad] = 0
        if op == wire.OP_SUM:
            red = np.add.reduce(x, axis=1, dtype=np.int32)
            return np.where(first[:, None], red, old + red)
        red = np.bitwise_or.reduce(x, axis=1)
        return np.where(first[:, None], red, old | red)
