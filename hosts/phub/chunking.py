"""Key chunking: every key (one layer's parameters, float32) is cut into chunks of
`chunk_bytes`; a chunk is PHub's unit of transfer, aggregation and optimization.

Chunk ids run over all keys in key order, so a key's chunks are consecutive. A key
whose size is not a multiple of the chunk size ends in one short chunk. Each chunk
is owned by one server core, fixed at start by `owner` (round robin over chunk
ids: neighbouring chunks of one layer land on different cores, so a layer's push
spreads over every core, as PHub balances chunks over cores and NICs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

DEFAULT_CHUNK_BYTES = 32 * 1024     # PHub's default key chunk (research/seeds.md §5.2)
VALUE_BYTES = 4                     # float32 gradients and weights


@dataclass(frozen=True)
class Chunk:
    id: int
    key: int
    offset: int      # first value of the chunk within its key
    length: int      # values


class ChunkPlan:
    """The chunks of keys of `sizes` values each."""

    def __init__(self, sizes: Sequence[int], chunk_bytes: int = DEFAULT_CHUNK_BYTES):
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

    def owned(self, core: int, cores: int) -> list[int]:
        """Chunk ids core `core` of `cores` owns."""
        return [c.id for c in self.chunks if owner(c.id, cores) == core]

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
