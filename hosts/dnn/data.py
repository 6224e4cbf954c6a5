"""Seeded data plumbing shared by the example models: every rank derives its
shard and its batch order from (seed, rank, epoch), so a run is reproducible
and data-parallel workers see disjoint samples."""
from __future__ import annotations

from typing import Iterator

import torch


def split(n: int, seed: int, test_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train indices, test indices) of n samples, a seeded permutation."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    n_test = int(round(n * test_fraction))
    return perm[n_test:], perm[:n_test]


def shard(indices: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank's share of the indices: strided, all shards the same size (the last
    len % world samples are left out), so data-parallel ranks run the same
    number of steps (DDP hangs otherwise)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} not in 0..{world - 1}")
    usable = len(indices) - len(indices) % world
    return indices[:usable][rank::world]


def batches(indices: torch.Tensor, batch_size: int, seed: int, epoch: int,
            drop_last: bool = True) -> Iterator[torch.Tensor]:
    """Index batches of one epoch in a seeded order. drop_last keeps every batch
    the same size (data-parallel ranks then run the same number of steps)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = indices[torch.randperm(len(indices), generator=g)]
    stop = len(order) - (len(order) % batch_size if drop_last else 0)
    for i in range(0, stop, batch_size):
        yield order[i:i + batch_size]
