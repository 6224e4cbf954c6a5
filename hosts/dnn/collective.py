"""The scenario's collective on tensors, for training scripts.

    from hosts.dnn import collective
    collective.allreduce_(t)                 # in place: the average over workers
    collective.allreduce_(t, average=False)  # in place: the sum
    y = collective.allreduce(t)              # a new tensor, the sum
    collective.barrier()

The collective is the one the workload names (ring | ps | switch; gloo uses
torch.distributed's own allreduce), opened on first use and traced and timed
through hosts.dnn.runtime. This is the "one call" a plain training loop adds
for parameter averaging (EASGD, ShadowSync); DDP scripts need none of it
(hosts.dnn.ddp_hook).
"""
from __future__ import annotations

import torch

from hosts.dnn.runtime import current


def allreduce(t: torch.Tensor) -> torch.Tensor:
    """Sum over all workers, as a new float32 tensor of t's shape."""
    rt = current()
    if t.numel() == 0:
        return t.detach().to(torch.float32).clone()
    coll = rt.collective
    return rt.comm(lambda: coll.allreduce(t), t.numel())


def allreduce_(t: torch.Tensor, average: bool = True) -> torch.Tensor:
    """In place: t becomes the sum (or the average) over all workers."""
    y = allreduce(t)
    if average:
        y /= current().cfg.world
    with torch.no_grad():
        t.copy_(y)
    return t


def barrier() -> None:
    rt = current()
    rt.comm(rt.collective.barrier, 1, op="barrier")


def world_size() -> int:
    return current().cfg.world


def rank() -> int:
    return current().cfg.rank
