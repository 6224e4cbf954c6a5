"""Host collectives LHC and top-k need beyond float32 allreduce, on the ring's connections.

`IntRing` is hosts.collectives.ring.RingAllreduce (same connections, schedule and
framing) with two more operations:
  * allreduce_int32: the same reduce-scatter + allgather over int32 with
    wrapping addition (sketch counters and 4-bit support counts; exact, as the
    switch's int32 SUM is);
  * allgather: every rank's equal-length block to every rank (top-k's indices
    and values), N-1 ring steps.
"""
from __future__ import annotations

import numpy as np

from hosts.collectives.ring import RingAllreduce
from hosts.common.tcp import KIND_DATA, RecvOp, SendOp, exchange


class IntRing(RingAllreduce):
    def allreduce_int32(self, x: np.ndarray) -> np.ndarray:
        return self._allreduce(x, np.int32)          # int32: wraps mod 2^32

    def allgather(self, block: np.ndarray) -> np.ndarray:
        """(world, len(block)) array of every rank's block (same dtype and length on all)."""
        b = np.ascontiguousarray(block).reshape(-1)
        out = np.empty((self.world, b.size), dtype=b.dtype)
        out[self.rank] = b
        for step in range(self.world - 1):
            send, recv = (self.rank - step) % self.world, (self.rank - step - 1) % self.world
            exchange([SendOp(self.right, KIND_DATA, out[send])],
                     [RecvOp(self.left, KIND_DATA, out[recv])], self.timeout_s)
        return out
