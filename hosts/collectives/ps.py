"""Parameter-server allreduce over TCP (the plain "wide aggregation" PS).

Workers push their whole tensor to the PS and receive the sum. The PS receives
from all workers concurrently, sums in rank order (float32, so the result is
deterministic whatever order the bytes arrive in) and sends the sum to all
workers concurrently.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.collectives import check_hello
from hosts.common.arrays import as_array
from hosts.common.config import HostAddr, ps_port
from hosts.common.tcp import (KIND_DATA, Conn, ProtocolError, RecvOp, SendOp, accept_one,
                              connect_with_retry, exchange, listen, recv_json, send_json,
                              star_barrier_leader, star_barrier_member)


def rank_order_sum(parts) -> np.ndarray:
    """The PS's sum of the workers' tensors (rank 0's first): a float32 copy of parts[0],
    then parts[1], parts[2], ... added in place. The one order every reference to the
    plain PS uses (hosts/phub/reference.py replays it)."""
    acc = np.array(parts[0], dtype=np.float32, copy=True)
    for p in parts[1:]:          # fixed rank order: deterministic float32 sum
        acc += p
    return acc


class PSWorker:
    """Worker side: allreduce = push tensor, receive the sum."""

    def __init__(self, conn: Conn, timeout_s: float):
        self.conn = conn
        self.timeout_s = timeout_s

    @classmethod
    def connect(cls, *, ps: HostAddr, my_ip: str, port_base: int, hello: dict,
                connect_timeout_s: float, timeout_s: float) -> "PSWorker":
        name = f"parameter server {ps.name}"
        start = time.monotonic()
        conn = connect_with_retry(ps.ip, ps_port(port_base), peer=name,
                                  connect_timeout_s=connect_timeout_s, io_timeout_s=timeout_s,
                                  src_ip=my_ip)
        try:
            send_json(conn, hello)
            # The PS answers once all workers are in; allow the full setup window.
            reply = recv_json(conn, timeout_s=max(0.5, connect_timeout_s - (time.monotonic() - start)) + 5)
            check_hello(reply, mine=hello, peer=name)
        except BaseException:
            conn.close()
            raise
        return cls(conn, timeout_s)

    def allreduce(self, x):
        """ndarray -> flat float32 ndarray; CPU tensor -> float32 tensor of x's shape.
        A contiguous float32 input is sent from its own memory (no copy)."""
        a, back = as_array(x)
        buf = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
        out = np.empty_like(buf)
        exchange([SendOp(self.conn, KIND_DATA, buf)], [RecvOp(self.conn, KIND_DATA, out)], self.timeout_s)
        return back(out)

    def barrier(self) -> None:
        star_barrier_member(self.conn, self.timeout_s)

    def close(self) -> None:
        self.conn.close()


class ParameterServer:
    """PS side: one connection per worker, indexed by rank."""

    def __init__(self, conns: list[Conn], timeout_s: float):
        self.conns = conns
        self.timeout_s = timeout_s
        self.bytes_received = 0
        self.bytes_sent = 0
        self._bufs: dict[int, list[np.ndarray]] = {}

    @classmethod
    def accept(cls, *, peers: tuple[HostAddr, ...], my_ip: str, port_base: int, hello: dict,
               connect_timeout_s: float, timeout_s: float) -> "ParameterServer":
        world = len(peers)
        deadline = time.monotonic() + connect_timeout_s
        server = listen(my_ip, ps_port(port_base))
        conns: list[Conn | None] = [None] * world
        try:
            while None in conns:
                missing = ", ".join(peers[r].name for r, c in enumerate(conns) if c is None)
                sock = accept_one(server, waiting_for=f"worker(s) {missing}",
                                  timeout_s=max(0.5, deadline - time.monotonic()))
                conn = Conn(sock, "a connecting worker", timeout_s)
                try:
                    theirs = recv_json(conn, timeout_s=max(0.5, deadline - time.monotonic()))
                    rank = theirs.get("rank") if isinstance(theirs, dict) else None
                    if not isinstance(rank, int) or not 0 <= rank < world:
                        raise ProtocolError(f"a worker sent HELLO with invalid rank: {theirs!r}")
                    conn.peer = f"worker {peers[rank].name} (rank {rank})"
                    if conns[rank] is not None:
                        raise ProtocolError(f"two workers claim rank {rank} ({conn.peer})")
                    check_hello(theirs, mine=hello, peer=conn.peer, expected_rank=rank)
                except BaseException:
                    conn.close()
                    raise
                conns[rank] = conn
            for c in conns:
                send_json(c, hello)
        except BaseException:
            for c in conns:
                if c is not None:
                    c.close()
            raise
        finally:
            server.close()
        return cls(conns, timeout_s)

    def reduce_once(self, size: int, delay_s: float = 0.0) -> None:
        """Serve one allreduce of `size` float32 elements. `delay_s` models a slow PS."""
        bufs = self._bufs.get(size)
        if bufs is None:
            bufs = self._bufs[size] = [np.empty(size, dtype=np.float32) for _ in self.conns]
        exchange([], [RecvOp(c, KIND_DATA, b) for c, b in zip(self.conns, bufs)], self.timeout_s)
        self.bytes_received += size * 4 * len(self.conns)
        acc = rank_order_sum(bufs)
        if delay_s > 0:
            time.sleep(delay_s)
        exchange([SendOp(c, KIND_DATA, acc) for c in self.conns], [], self.timeout_s)
        self.bytes_sent += size * 4 * len(self.conns)

    def reduce_next(self, delay_s: float = 0.0) -> int:
        """Serve one allreduce whose size the workers announce (each frame carries
        its count): for programs whose tensor sizes the PS cannot know in advance
        (DDP gradient buckets). All workers must send the same size; size 0 from
        every worker is their end-of-stream, answered and returned as 0."""
        ops = [RecvOp(c, KIND_DATA) for c in self.conns]
        exchange([], ops, self.timeout_s)
        sizes = [op.array.size for op in ops]
        if len(set(sizes)) != 1:
            raise ProtocolError("workers sent tensors of different sizes to the parameter server: "
                                + ", ".join(f"{c.peer}: {s}" for c, s in zip(self.conns, sizes)))
        size = sizes[0]
        acc = rank_order_sum([op.array for op in ops])
        self.bytes_received += size * 4 * len(self.conns)
        if delay_s > 0:
            time.sleep(delay_s)
        exchange([SendOp(c, KIND_DATA, acc) for c in self.conns], [], self.timeout_s)
        self.bytes_sent += size * 4 * len(self.conns)
        return size

    def barrier(self) -> None:
        star_barrier_leader(self.conns, self.timeout_s)

    def close(self) -> None:
        for c in self.conns:
            c.close()
