"""Open the collective a torch worker's config names (ring | ps | switch | tree | gloo).

Below hosts.dnn.runtime (which opens it on first use) and hosts.dnn.collective
(the tensor API scripts call), so neither imports the other.
"""
from __future__ import annotations

import numpy as np
import torch

from hosts.collectives import make_hello
from hosts.dnn.config import TorchWorkerConfig


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
    if cfg.collective == "tree":
        from hosts.collectives.tree import TreeAllreduce  # noqa: PLC0415
        return TreeAllreduce.connect(rank=cfg.rank, peers=cfg.peers, port_base=cfg.port, hello=hello, **kw)
    if cfg.collective == "ps":
        from hosts.collectives.ps import PSWorker  # noqa: PLC0415
        return _PSStream(PSWorker.connect(ps=cfg.ps, my_ip=cfg.my_ip, port_base=cfg.port, hello=hello, **kw))
    if cfg.collective == "switch":
        from hosts.collectives.switch import SwitchAllreduce  # noqa: PLC0415
        return SwitchAllreduce.connect(rank=cfg.rank, world=cfg.world, my_ip=cfg.my_ip, ina=cfg.ina,
                                       run=cfg.run_identity(), **kw)
    return _Gloo()
