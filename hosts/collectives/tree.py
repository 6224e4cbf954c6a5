"""Tree allreduce over TCP: a binomial-tree reduce to rank 0, then a binomial-tree
broadcast of rank 0's sum.

The tree (MPICH's short-message MPI_Reduce / MPI_Bcast shape): rank r's parent is
r with its lowest set bit cleared, its children are r + 2^k for every 2^k below
that bit (rank 0: every 2^k < world) that exists. With L = ceil(log2 world):

  reduce     each rank adds its children's partial sums to its own, children in
             ascending 2^k (the child r + 1 first), then sends the partial to its
             parent: L rounds of one whole message each on the critical path.
  broadcast  each rank receives the sum from its parent, then sends it to its
             children in descending 2^k (the child with the largest subtree first):
             L rounds again.

Every element of the sum is added in the same fixed order whatever the message
size (rank r's own value, then its subtrees'), so one allreduce of the whole
model and one per tensor give the same bits; the broadcast copies rank 0's sum,
so every rank ends with the same bits.

You, Buluc and Demmel's Sync EASGD reduces its one packed message through MPI
reduce + broadcast (shared/research/seeds.md §4.2 [I]); which algorithms their MPI
picked is not in the stored material, so this shape is assumed [A]
(docs/easgd.md, "The collective").

Connections: one TCP connection per tree edge, opened by the child (it listens
first, so no two ranks wait on each other), used both ways. The child sends its
HELLO, the parent checks it and answers with its own, which the child checks.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.collectives import check_hello
from hosts.common.arrays import as_array
from hosts.common.config import HostAddr, ring_port
from hosts.common.tcp import (KIND_BARRIER, KIND_DATA, Conn, ProtocolError, RecvOp, SendOp,
                              accept_until, connect_with_retry, exchange, listen, recv_json, send_json)


def tree_parent(rank: int) -> int | None:
    """Rank's parent in the binomial tree (its lowest set bit cleared); None for the root."""
    return rank & (rank - 1) if rank > 0 else None


def tree_children(rank: int, world: int) -> list[int]:
    """Rank's children in reduce order (ascending 2^k): r + 2^k for each 2^k below
    r's lowest set bit (all of them for the root) with r + 2^k < world."""
    out, mask = [], 1
    while mask < world and not rank & mask:
        if rank + mask < world:
            out.append(rank + mask)
        mask <<= 1
    return out


def tree_depth(world: int) -> int:
    """L = ceil(log2 world): the rounds of the reduce (and of the broadcast)."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    return (world - 1).bit_length()


class TreeAllreduce:
    def __init__(self, rank: int, world: int, parent: Conn | None, children: dict[int, Conn],
                 timeout_s: float):
        self.rank, self.world = rank, world
        self.parent = parent
        self.children = [children[c] for c in tree_children(rank, world)]   # reduce order
        self.timeout_s = timeout_s

    @classmethod
    def connect(cls, *, rank: int, peers: tuple[HostAddr, ...], port_base: int, hello: dict,
                connect_timeout_s: float, timeout_s: float) -> "TreeAllreduce":
        """Listen, connect to the parent (retrying), accept the children, then read
        the parent's answer to our HELLO."""
        world = len(peers)
        if world == 1:
            return cls(rank, 1, None, {}, timeout_s)
        deadline = time.monotonic() + connect_timeout_s
        me = peers[rank]
        p = tree_parent(rank)
        want = tree_children(rank, world)
        server = listen(me.ip, ring_port(port_base, rank)) if want else None
        parent, children = None, {}
        parent_name = f"tree parent {peers[p].name} (rank {p})" if p is not None else ""
        try:
            if p is not None:
                parent = connect_with_retry(peers[p].ip, ring_port(port_base, p), peer=parent_name,
                                            connect_timeout_s=connect_timeout_s, io_timeout_s=timeout_s,
                                            src_ip=me.ip)
                send_json(parent, hello)
            if want:
                def handshake(conn: Conn, left_s: float) -> tuple[int, dict]:
                    theirs = recv_json(conn, timeout_s=left_s)
                    r = theirs.get("rank") if isinstance(theirs, dict) else None
                    if r not in want:
                        raise ProtocolError(f"rank {rank} expected its tree children {want}, got a HELLO "
                                            f"from {theirs!r} (are the peers listed in the same order "
                                            "everywhere?)")
                    conn.peer = f"tree child {peers[r].name} (rank {r})"
                    check_hello(theirs, mine=hello, peer=conn.peer, expected_rank=r)
                    return r, hello
                children = accept_until(server, set(want), handshake, what="tree children",
                                        connect_timeout_s=max(0.5, deadline - time.monotonic()),
                                        io_timeout_s=timeout_s)
            if parent is not None:
                check_hello(recv_json(parent, timeout_s=max(0.5, deadline - time.monotonic()) + 5),
                            mine=hello, peer=parent_name, expected_rank=p)
        except BaseException:
            for c in [parent, *children.values()]:
                if c is not None:
                    c.close()
            raise
        finally:
            if server is not None:
                server.close()
        return cls(rank, world, parent, children, timeout_s)

    def allreduce(self, x):
        """Sum of every rank's x (ndarray -> flat float32 ndarray; CPU tensor -> float32
        tensor of x's shape). The one copy is into the working buffer."""
        a, back = as_array(x)
        buf = np.array(a, dtype=np.float32, copy=True).reshape(-1)
        if self.world == 1:
            return back(buf)
        incoming = np.empty_like(buf)
        for c in self.children:                 # reduce: children in ascending 2^k
            exchange([], [RecvOp(c, KIND_DATA, incoming)], self.timeout_s)
            buf += incoming
        if self.parent is not None:
            exchange([SendOp(self.parent, KIND_DATA, buf)], [], self.timeout_s)
            # the send has completed: buf may be overwritten by the root's sum
            exchange([], [RecvOp(self.parent, KIND_DATA, buf)], self.timeout_s)
        for c in reversed(self.children):       # broadcast: the largest subtree first
            exchange([SendOp(c, KIND_DATA, buf)], [], self.timeout_s)
        return back(buf)

    def barrier(self) -> None:
        """Every child's token up to the root, then the root's release down."""
        if self.world == 1:
            return
        for c in self.children:
            exchange([], [RecvOp(c, KIND_BARRIER)], self.timeout_s)
        if self.parent is not None:
            exchange([SendOp(self.parent, KIND_BARRIER)], [RecvOp(self.parent, KIND_BARRIER)], self.timeout_s)
        for c in reversed(self.children):
            exchange([SendOp(c, KIND_BARRIER)], [], self.timeout_s)

    def close(self) -> None:
        for c in [self.parent, *self.children]:
            if c is not None:
                c.close()
