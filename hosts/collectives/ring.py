"""Ring allreduce over TCP: reduce-scatter, then allgather, N-1 steps each.

The tensor is cut into N chunks. In reduce-scatter step s, rank r sends its
partial sum of chunk (r-s) mod N to its right neighbour and adds the chunk
(r-s-1) mod N arriving from its left; after N-1 steps rank r holds the full
sum of chunk (r+1) mod N. Allgather then circulates those finished chunks.
Each finished chunk is computed by exactly one rank and only copied after, so
all ranks end with bit-identical results.

Every step sends and receives at once (tcp.exchange), so chunks larger than
the socket buffers cannot deadlock the ring.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.collectives import check_hello
from hosts.common.arrays import as_array
from hosts.common.config import HostAddr, ring_port
from hosts.common.tcp import (KIND_DATA, Conn, RecvOp, SendOp, accept_one, connect_with_retry,
                              exchange, listen, recv_json, ring_barrier, send_json)


def chunk_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) of `parts` contiguous chunks covering n elements; sizes differ by at most 1
    (some are empty when n < parts)."""
    return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def reduce_scatter_step(rank: int, world: int, step: int) -> tuple[int, int]:
    """(chunk sent right, chunk received from left and accumulated) in reduce-scatter."""
    return (rank - step) % world, (rank - step - 1) % world


def allgather_step(rank: int, world: int, step: int) -> tuple[int, int]:
    """(chunk sent right, chunk received from left and stored) in allgather."""
    return (rank + 1 - step) % world, (rank - step) % world


def owned_chunk(rank: int, world: int) -> int:
    """Chunk whose full sum `rank` holds after reduce-scatter."""
    return (rank + 1) % world


class RingAllreduce:
    def __init__(self, rank: int, world: int, left: Conn | None, right: Conn | None, timeout_s: float):
        self.rank, self.world = rank, world
        self.left, self.right = left, right
        self.timeout_s = timeout_s

    @classmethod
    def connect(cls, *, rank: int, peers: tuple[HostAddr, ...], port_base: int, hello: dict,
                connect_timeout_s: float, timeout_s: float) -> "RingAllreduce":
        """Listen, connect to the right neighbour (retrying), accept the left one.

        Listening before connecting means no two ranks can wait on each other.
        """
        world = len(peers)
        if world == 1:
            return cls(rank, 1, None, None, timeout_s)
        deadline = time.monotonic() + connect_timeout_s
        me = peers[rank]
        lr, rr = (rank - 1) % world, (rank + 1) % world
        left_name = f"left neighbour {peers[lr].name} (rank {lr})"
        right_name = f"right neighbour {peers[rr].name} (rank {rr})"
        server = listen(me.ip, ring_port(port_base, rank))
        right = left = None
        try:
            right = connect_with_retry(peers[rr].ip, ring_port(port_base, rr), peer=right_name,
                                       connect_timeout_s=connect_timeout_s, io_timeout_s=timeout_s,
                                       src_ip=me.ip)
            send_json(right, hello)
            sock = accept_one(server, waiting_for=left_name,
                              timeout_s=max(0.5, deadline - time.monotonic()))
            left = Conn(sock, left_name, timeout_s)
            theirs = recv_json(left, timeout_s=max(0.5, deadline - time.monotonic()))
            check_hello(theirs, mine=hello, peer=left_name, expected_rank=lr)
        except BaseException:
            for c in (left, right):
                if c is not None:
                    c.close()
            raise
        finally:
            server.close()
        return cls(rank, world, left, right, timeout_s)

    def allreduce(self, x):
        """Sum of every rank's x (ndarray -> flat float32 ndarray; CPU tensor -> float32
        tensor of x's shape). The one copy is into the working buffer."""
        a, back = as_array(x)
        return back(self._allreduce(a))

    def _allreduce(self, x: np.ndarray, dtype=np.float32) -> np.ndarray:
        """Reduce-scatter then allgather, summing in `dtype` (int32 wraps mod 2^32)."""
        buf = np.array(x, dtype=dtype, copy=True).reshape(-1)
        n, world, rank = buf.size, self.world, self.rank
        if world == 1:
            return buf
        bounds = chunk_bounds(n, world)
        tmp = np.empty(max(hi - lo for lo, hi in bounds), dtype=dtype)
        for step in range(world - 1):
            s, r = reduce_scatter_step(rank, world, step)
            (slo, shi), (rlo, rhi) = bounds[s], bounds[r]
            incoming = tmp[: rhi - rlo]
            exchange([SendOp(self.right, KIND_DATA, buf[slo:shi])],
                     [RecvOp(self.left, KIND_DATA, incoming)], self.timeout_s)
            # Safe to touch buf now: the send of chunk s has completed.
            buf[rlo:rhi] += incoming
        for step in range(world - 1):
            s, r = allgather_step(rank, world, step)
            (slo, shi), (rlo, rhi) = bounds[s], bounds[r]
            exchange([SendOp(self.right, KIND_DATA, buf[slo:shi])],
                     [RecvOp(self.left, KIND_DATA, buf[rlo:rhi])], self.timeout_s)
        return buf

    def barrier(self) -> None:
        if self.world > 1:
            ring_barrier(self.left, self.right, self.world, self.timeout_s)

    def close(self) -> None:
        for c in (self.left, self.right):
            if c is not None:
                c.close()
