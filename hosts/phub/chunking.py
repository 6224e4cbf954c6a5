"""Key chunking: every key (one layer's parameters, float32) is cut into chunks of
`chunk_bytes`; a chunk is PHub's unit of transfer, aggregation and optimization.

Chunk ids run over all keys in key order, so a key's chunks are consecutive. A key
whose size is not a multiple of the chunk size ends in one short chunk. Each chunk
is owned by one server core, fixed at start by `owner` (round robin over chunk
ids: neighbouring chunks of one layer land on different cores, so a layer's push
spreads over every core, as PHub balances chunks over cores and NICs).

`kvstore_plan` is the other placement, MXNet kvstore's (the sharded_ps baseline):
no chunking; a key of at least `bigarray_bound` values is cut into one part per
server, a smaller key goes whole to one server (kvstore_dist.h EncodeDefaultKey).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

DEFAULT_CHUNK_BYTES = 32 * 1024     # PHub's default key chunk (research/seeds.md §5.2)
VALUE_BYTES = 4                     # float32 gradients and weights
# MXNet's MXNET_KVSTORE_BIGARRAY_BOUND default (values, not bytes): keys this large are
# split over every server (MXNet docs, env_var.md; kvstore_dist.h bigarray_bound_).
MXNET_BIGARRAY_BOUND = 1_000_000
# The multiplier of MXNet's small-key placement hash, server = (key * 9973) % servers
# (kvstore_dist.h EncodeDefaultKey: "send it to a single random picked server").
MXNET_KEY_HASH = 9973


@dataclass(frozen=True)
class Chunk:
    id: int
    key: int
    offset: int      # first value of the chunk within its key
    length: int      # values


class ChunkPlan:
    """The chunks of keys of `sizes` values each."""

    def __init__(self, sizes: Sequence[int], chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.owners: list[int] | None = None        # kvstore_plan: each chunk's server; None: `owner`
        if chunk_bytes < VALUE_BYTES or chunk_bytes % VALUE_BYTES:
            raise ValueError(f"chunk_bytes must be a positive multiple of {VALUE_BYTES}, got {chunk_bytes}")
        if not sizes or any(int(s) <= 0 for s in sizes):
            raise ValueError(f"every key needs at least one value, got sizes {list(sizes)[:8]}")
        self.sizes = [int(s) for s in sizes]
        self.chunk_bytes = int(chunk_bytes)
        self.chunk_values = self.chunk_bytes // VALUE_BYTES
        self.chunks: list[Chunk] = []
        self.key_chunks: list[range] = []
        for k, n in enumerate(self.sizes):
            first = len(self.chunks)
            for off in range(0, n, self.chunk_values):
                self.chunks.append(Chunk(len(self.chunks), k, off, min(self.chunk_values, n - off)))
            self.key_chunks.append(range(first, len(self.chunks)))

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    @property
    def total_values(self) -> int:
        return sum(self.sizes)

    def owner_of(self, chunk_id: int, cores: int) -> int:
        """The core (kvstore_plan: the server) of `cores` that owns a chunk."""
        if self.owners is None:
            return owner(chunk_id, cores)
        if cores != self.servers:
            raise ValueError(f"this kvstore plan places keys on {self.servers} servers, asked for {cores}")
        return self.owners[chunk_id]

    def owned(self, core: int, cores: int) -> list[int]:
        """Chunk ids core `core` of `cores` owns."""
        return [c.id for c in self.chunks if self.owner_of(c.id, cores) == core]

    def split(self, key: int, flat: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(chunk id, view) of each chunk of key `key`'s values `flat` (no copies)."""
        if flat.size != self.sizes[key]:
            raise ValueError(f"key {key} has {self.sizes[key]} values, got {flat.size}")
        return [(cid, flat[self.chunks[cid].offset:self.chunks[cid].offset + self.chunks[cid].length])
                for cid in self.key_chunks[key]]


def owner(chunk_id: int, cores: int) -> int:
    """The server core that owns a chunk: fixed at start, so no two cores touch one chunk."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    return chunk_id % cores


def kvstore_servers(workers: int, servers_per_worker: float) -> int:
    """How many kvstore servers `servers_per_worker` gives N workers: ceil(x N), 1 to N
    (the sharded_ps workload and the reproduction's projection alike)."""
    if workers < 1 or not 0 < servers_per_worker <= 1:
        raise ValueError(f"need workers >= 1 and 0 < servers_per_worker <= 1, got {workers}, {servers_per_worker}")
    return max(1, min(workers, math.ceil(servers_per_worker * workers - 1e-9)))


def kvstore_plan(sizes: Sequence[int], servers: int, bigarray_bound: int = MXNET_BIGARRAY_BOUND) -> ChunkPlan:
    """MXNet kvstore's placement of keys on `servers` servers (kvstore_dist.h
    EncodeDefaultKey, dist_sync): a key of fewer than `bigarray_bound` values is one
    chunk on server (key * 9973) % servers (MXNet's hash: a round robin in another
    order when servers does not divide 9973); a larger key is one part per server,
    part i holding round(n / servers * (i + 1)) - round(n / servers * i) values (C's
    round: halves away from zero), on server i. A part is one message, as ps-lite's."""
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if bigarray_bound < 1:
        raise ValueError(f"bigarray_bound must be >= 1 value, got {bigarray_bound}")
    # validates the sizes; one chunk per key (chunk_bytes past the largest), then replaced by the parts
    plan = ChunkPlan(sizes, VALUE_BYTES * max(max(int(x) for x in sizes) if sizes else 1, 1))
    plan.chunk_bytes, plan.chunk_values = 0, 0      # no fixed chunk size: parts are as large as they come
    plan.chunks, plan.key_chunks, owners = [], [], []

    def c_round(x: float) -> int:
        return int(math.floor(x + 0.5))             # x >= 0 here

    for k, n in enumerate(plan.sizes):
        first = len(plan.chunks)
        if n < bigarray_bound:
            plan.chunks.append(Chunk(first, k, 0, n))
            owners.append((k * MXNET_KEY_HASH) % servers)
        else:
            for i in range(servers):
                lo, hi = c_round(n / servers * i), c_round(n / servers * (i + 1))
                if hi > lo:                         # a key of fewer values than servers: no empty part
                    plan.chunks.append(Chunk(len(plan.chunks), k, lo, hi - lo))
                    owners.append(i)
        plan.key_chunks.append(range(first, len(plan.chunks)))
    plan.owners, plan.servers = owners, servers
    return plan
