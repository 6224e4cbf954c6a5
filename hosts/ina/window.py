"""The INA client's window: the seq counter and the per-slot FIFOs of chunks.

Chunk `seq` of a job (one counter per job, shared by every tensor, identical
on all workers) goes to slot seq % window with slot_ver (seq // window) % 2.
Every slot holds a FIFO of runs of chunks (`Seg`); only the head is on the
wire, so a worker sends chunk seq only after it holds the result of
seq - window: the SwitchML rule that makes the switch's shadow copy safe.
"""
from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from hosts.ina.chunks import Seg
from hosts.ina.handles import InaHandle

_SEQ_SPACE = 1 << 32


class SlotWindow:
    """`slots[s]`: slot s's FIFO of runs; the head run's current chunk is
    `hci[s]`; it is on the wire iff `hseq[s]` >= 0 (its seq)."""

    def __init__(self, window: int, first_seq: int = 0):
        W = self.window = window
        # Seqs wrap at a multiple of 2 x window (not at 2^32 unless the window divides
        # 2^31): a slot's consecutive chunks must alternate slot_ver ((seq // W) & 1)
        # across the wrap too, or a chunk would overwrite its predecessor's result in
        # the switch while a worker that lost that result still needs it (found by the
        # property test at window 5). The switch's serial seq arithmetic is unaffected:
        # the skipped seqs are fewer than 2 x window.
        self.seq_space = (_SEQ_SPACE // (2 * window)) * (2 * window)
        self.next_seq = (first_seq & 0xFFFFFFFF) % self.seq_space
        self.slots: list[deque[Seg]] = [deque() for _ in range(W)]
        self.hci = np.zeros(W, np.int64)
        self.hseq = np.full(W, -1, np.int64)
        # the head run's tag per slot: a burst of results is one run's when all agree
        self.head_tag = np.zeros(W, np.int64)
        self._tags = itertools.count(1)

    @property
    def in_flight(self) -> int:
        return int(np.count_nonzero(self.hseq >= 0))

    def new_segs(self, h: InaHandle, nchunks: int, op: int, is_exp: bool,
                 patience_s: float | None) -> list[Seg]:
        """Take the next nchunks seqs; queue their runs in their slots' FIFOs."""
        W, slots, out, c0 = self.window, self.slots, [], 0
        while c0 < nchunks:
            seq0 = self.next_seq
            n = min(nchunks - c0, self.seq_space - seq0)   # a run never wraps seq
            self.next_seq = (seq0 + n) % self.seq_space
            slot0 = seq0 % W
            seg = Seg(h, seq0, slot0, n, c0, op, is_exp, patience_s)
            seg.tag = tag = next(self._tags)
            for i in range(min(n, W)):
                s = slot0 + i
                if s >= W:
                    s -= W
                q = slots[s]
                if not q:
                    self.hci[s] = i
                    self.head_tag[s] = tag
                q.append(seg)
            h.segs.append(seg)
            out.append(seg)
            c0 += n
        return out

    def idle_heads(self, seg: Seg) -> list[int]:
        """Slots whose head chunk belongs to `seg` and is not on the wire yet."""
        W, slots, hseq = self.window, self.slots, self.hseq
        ready = []
        for i in range(min(seg.n, W)):
            s = seg.slot0 + i
            if s >= W:
                s -= W
            if slots[s][0] is seg and hseq[s] < 0:
                ready.append(s)
        return ready

    def next_in_slot(self, s: int) -> tuple[Seg, int] | None:
        """Slot s's head was answered: its next chunk (run, index in the run),
        now the slot's head, or None when the slot's FIFO is empty."""
        q = self.slots[s]
        seg = q[0]
        nxt = int(self.hci[s]) + self.window
        if nxt < seg.n:
            self.hci[s] = nxt
            return seg, nxt
        q.popleft()
        if not q:
            return None
        seg = q[0]
        self.head_tag[s] = seg.tag
        ci = s - seg.slot0
        if ci < 0:
            ci += self.window
        self.hci[s] = ci
        return seg, ci
