"""The scenario's collective on tensors, for training scripts.

    from hosts.dnn import collective
    collective.allreduce_(t)                 # in place: the average over workers
    collective.allreduce_(t, average=False)  # in place: the sum
    y = collective.allreduce(t)              # a new tensor, the sum
    collective.barrier()
    collective.end_process_group()           # last: tear torch.distributed's group down

The collective is the one the workload names (ring | ps | switch; gloo uses
torch.distributed's own allreduce), opened on first use and traced and timed
through hosts.dnn.runtime. This is the "one call" a plain training loop adds
for parameter averaging (EASGD, ShadowSync); DDP scripts need none of it
(hosts.dnn.ddp_hook).

Off the testbed (the script run on its own, docs/pytorch.md step 1) the calls go
to torch.distributed's own collectives on the script's default process group,
so the script trains the same way there; without an initialized process group
they raise NotOnTestbed, naming the fix.
"""
from __future__ import annotations

import time

import torch

from hosts.dnn import report
from hosts.dnn.runtime import NotOnTestbed, current


# gloo's worker threads drop each finished op's tensors themselves, which takes the
# GIL. One descheduled on the shared cores until the interpreter is exiting aborts
# the process (SIGABRT, "terminate called without an active exception", torch 2.13;
# gdb: ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> take_gil at exit), after
# the script trained correctly: 1 run in 4-8 of the guide's fixture, with or
# without a barrier before the teardown; 0 in 40 with this pause after it.
GLOO_EXIT_GRACE_S = 0.2


def end_process_group(barrier: bool = True) -> None:
    """The script's last call (docs/pytorch.md step 1): every rank done (barrier),
    torch.distributed's default group destroyed, and GLOO_EXIT_GRACE_S without the
    GIL so gloo's threads let go of their last ops before the interpreter exits.
    No-op without an initialized group."""
    import torch.distributed as dist  # noqa: PLC0415
    if not (dist.is_available() and dist.is_initialized()):
        return
    if barrier:
        dist.barrier()
    dist.destroy_process_group()
    time.sleep(GLOO_EXIT_GRACE_S)


def _plain_dist():
    """torch.distributed, for a script run off the testbed (its own process group)."""
    import torch.distributed as dist  # noqa: PLC0415
    if not (dist.is_available() and dist.is_initialized()):
        raise NotOnTestbed("hosts.dnn.collective off the testbed uses torch.distributed's own "
                           "collectives: call dist.init_process_group first")
    return dist


def allreduce(t: torch.Tensor) -> torch.Tensor:
    """Sum over all workers, as a new float32 tensor of t's shape."""
    if t.numel() == 0:
        return t.detach().to(torch.float32).clone()
    if not report.on_testbed():
        y = t.detach().to(torch.float32).clone()
        _plain_dist().all_reduce(y)
        return y
    rt = current()
    coll = rt.collective
    return rt.comm(lambda: coll.allreduce(t), t.numel())


def allreduce_(t: torch.Tensor, average: bool = True) -> torch.Tensor:
    """In place: t becomes the sum (or the average) over all workers."""
    y = allreduce(t)
    if average:
        y /= world_size()
    with torch.no_grad():
        t.copy_(y)
    return t


def barrier() -> None:
    if not report.on_testbed():
        _plain_dist().barrier()
        return
    rt = current()
    rt.comm(rt.collective.barrier, 1, op="barrier")


def world_size() -> int:
    return current().cfg.world if report.on_testbed() else _plain_dist().get_world_size()


def rank() -> int:
    return current().cfg.rank if report.on_testbed() else _plain_dist().get_rank()
