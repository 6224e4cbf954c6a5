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

import numpy as np
import torch

from hosts.collectives import make_hello
from hosts.dnn.config import TorchWorkerConfig
from hosts.dnn.runtime import current


class _PSStream:
    """Worker side of the parameter server for tensors of any size: the PS serves
    whatever size the workers send (ParameterServer.reduce_next); close() sends
    the empty end-of-stream allreduce so the PS program ends cleanly."""

    def __init__(self, worker):
        self.w = worker

    def allreduce(self, x):
        return self.w.allreduce(x)

    def barrier(self) -> None:
        self.w.allreduce(np.zeros(1, np.float32))

    def close(self) -> None:
        try:
            self.w.allreduce(np.zeros(0, np.float32))
        finally:
            self.w.close()


class _Gloo:
    """torch.distributed's own allreduce (the process group DDP bootstraps)."""

    def allreduce(self, x):
        import torch.distributed as dist  # noqa: PLC0415
        y = torch.as_tensor(x, dtype=torch.float32).clone()
        dist.all_reduce(y)
        return y

    def barrier(self) -> None:
        import torch.distributed as dist  # noqa: PLC0415
        dist.barrier()

    def close(self) -> None:
        pass


def open_collective(cfg: TorchWorkerConfig):
    """The worker's collective from its config (connects; blocks until peers are up)."""
    kw = dict(connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    hello = make_hello(cfg.host, cfg.rank, cfg.run_identity())
    if cfg.collective == "ring":
        from hosts.collectives.ring import RingAllreduce  # noqa: PLC0415
        return RingAllreduce.connect(rank=cfg.rank, peers=cfg.peers, port_base=cfg.port, hello=hello, **kw)
    if cfg.collective == "ps":
        from hosts.collectives.ps import PSWorker  # noqa: PLC0415
        return _PSStream(PSWorker.connect(ps=cfg.ps, my_ip=cfg.my_ip, port_base=cfg.port, hello=hello, **kw))
    if cfg.collective == "switch":
        from hosts.collectives.switch import SwitchAllreduce  # noqa: PLC0415
        return SwitchAllreduce.connect(rank=cfg.rank, world=cfg.world, my_ip=cfg.my_ip, ina=cfg.ina,
                                       run=cfg.run_identity(), **kw)
    return _Gloo()


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
