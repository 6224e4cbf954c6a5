"""DistributedDataParallel over the emulated network's collectives.

    ddp = DistributedDataParallel(model)
    ddp_hook.register(ddp)          # gradient buckets now go through ring | ps | switch

DDP hands each gradient bucket (`bucket.buffer()`, a flat float32 tensor) to a
communication hook and expects a Future of the reduced bucket. `testbed_hook`
sends it through the workload's collective (hosts.dnn.collective: a blocking
call, timed and traced), divides by the world size as DDP's default allreduce
does, and returns an already completed `torch.futures.Future`.

DDP itself still needs a process group (it broadcasts the initial parameters
and buffers with it): `init_process_group()` bootstraps gloo over the emulated
network at MASTER_ADDR:MASTER_PORT (rank 0's emulated address, set by
hosts.dnn.run_script). With collective "gloo" the hook calls gloo's allreduce
on the bucket (what DDP's default hook does), so the baseline is timed and
traced like the testbed collectives.

`hosts.dnn.run_script` registers the hook on every DDP model a script builds
(`patch_ddp`), so an unmodified DDP script runs over the scenario's collective.
"""
from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from hosts.dnn import collective

log = logging.getLogger("dnn.ddp")


def init_process_group(backend: str = "gloo", timeout_s: float = 120.0) -> None:
    """torch.distributed's gloo group from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise RuntimeError(f"init_process_group: environment variable(s) {', '.join(missing)} not set "
                           f"(hosts.dnn.run_script sets them on the testbed)")
    if dist.is_initialized():
        return
    dist.init_process_group(backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=timedelta(seconds=timeout_s))


def testbed_hook(state, bucket):
    # No annotations: DDP checks them against dist.GradBucket / Future objects,
    # which string annotations (from __future__) are not.
    buf = bucket.buffer()
    y = collective.allreduce(buf)
    y = y.reshape(buf.shape).to(buf.dtype)
    y /= collective.world_size()
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(y)
    return fut


def bucket_sizes(ddp: torch.nn.parallel.DistributedDataParallel) -> list[int]:
    """The model's gradient buckets in float32 values (DDP's logging data: bytes,
    comma-separated); what a time_scale auto probe sends (hosts/dnn/timing.py)."""
    raw = str(ddp._get_ddp_logging_data().get("bucket_sizes") or "")
    sizes = [int(x) // 4 for x in raw.split(",") if x.strip().isdigit() and int(x) > 0]
    return sizes or [sum(p.numel() for p in ddp.module.parameters() if p.requires_grad)]


def register(ddp: torch.nn.parallel.DistributedDataParallel) -> None:
    ddp.register_comm_hook(state=None, hook=testbed_hook)
    collective.current().bucket_sizes = bucket_sizes(ddp)


_patched = False


def patch_ddp(hook: bool = True) -> None:
    """Make every DistributedDataParallel built from now on use `testbed_hook`
    (hook False: keep DDP's own allreduce over gloo; only record the bucket sizes)."""
    global _patched
    if _patched:
        return
    cls = torch.nn.parallel.DistributedDataParallel
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if hook:
            register(self)
            log.info("DDP model: gradient buckets go through the testbed collective (%s)",
                     collective.current().cfg.collective)
        else:
            collective.current().bucket_sizes = bucket_sizes(self)
            log.info("DDP model: DDP's own allreduce over gloo (no testbed hook)")

    cls.__init__ = __init__
    _patched = True
