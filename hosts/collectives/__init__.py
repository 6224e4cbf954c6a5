"""Host-side allreduce algorithms (the baselines in-network aggregation is compared with).

Each worker-side collective offers the same small interface, so a benchmark
loop does not care which algorithm it drives.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np


class Collective(Protocol):
    def allreduce(self, x: np.ndarray) -> np.ndarray:
        """Sum of every worker's `x` (float32), returned to every worker: a flat
        ndarray, or for a CPU torch.Tensor a float32 tensor of x's shape
        (hosts/common/arrays.py; same bits as the numpy path)."""

    def barrier(self) -> None:
        """Return once every worker has called barrier()."""

    def close(self) -> None: ...


def make_hello(host: str, rank: int, run: dict) -> dict:
    """First frame on every connection: who we are and what run we think this is."""
    return {"host": host, "rank": rank, "run": run}


def check_hello(theirs: object, *, mine: dict, peer: str, expected_rank: int | None = None) -> None:
    """Reject a peer that is not who we expect or runs a different experiment."""
    from hosts.common.tcp import ProtocolError

    if (not isinstance(theirs, dict) or not {"host", "rank", "run"} <= set(theirs)
            or not isinstance(theirs["run"], dict)):
        raise ProtocolError(f"{peer} sent a malformed HELLO: {theirs!r}")
    if expected_rank is not None and theirs["rank"] != expected_rank:
        raise ProtocolError(f"{peer}: expected rank {expected_rank}, but {theirs['host']} says it is "
                            f"rank {theirs['rank']} (are the peers listed in the same order everywhere?)")
    diffs = [f"{k}: {mine['run'][k]!r} here vs {theirs['run'].get(k)!r} at {theirs['host']}"
             for k in mine["run"] if theirs["run"].get(k) != mine["run"][k]]
    if diffs:
        raise ProtocolError(f"config mismatch with {peer}: " + "; ".join(diffs))
