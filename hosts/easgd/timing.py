"""The one place the EASGD hosts touch the time machinery (so it is easy to
follow when that machinery changes): the device model, pacing, trace and
per-iteration records all come from hosts/dnn/runtime.py, exactly as for a
`kind: torch` worker.

  open_runtime(torch_cfg)        the worker's Runtime (device model, trace, records)
  compute(rt, fn, n)             one forward/backward of n samples, charged to the device model
  exchange(rt, fn, values, rank) one message to the master and its reply, timed and traced
  allreduce(rt, t)               the scenario's collective (ring | ps | switch), timed and traced

Trace shape of an exchange: a comm node with op "allreduce", algo "ps" (the
master is a parameter-server-shaped host: one push of `values` floats, one
reply of as many) in the group "master-<rank>". The monitor then times each
exchange alone against the PS model at the run's worker count (the master's
port serializes all workers' messages); the projector, which replicates rank
0's program to every rank, sees every rank's k-th exchange meet in one PS
operation: the master serving all P workers once per round, which is the
original EASGD's round robin and the asynchronous variants' steady state when
the master's link is the bottleneck (docs/easgd.md).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from hosts.dnn.config import TorchWorkerConfig
from hosts.dnn.runtime import Runtime

EXCHANGE_OP, EXCHANGE_ALGO = "allreduce", "ps"


def open_runtime(torch_cfg: dict) -> Runtime:
    return Runtime(TorchWorkerConfig.from_json(torch_cfg))


def compute(rt: Runtime, fn: Callable[[], Any], batch_size: int) -> Any:
    return rt.compute(fn, batch_size)


def exchange(rt: Runtime, fn: Callable[[], Any], values: int, rank: int) -> Any:
    """As Runtime.comm, in a per-worker group (the master is not a collective)."""
    t0 = time.perf_counter()
    out = fn()
    t1 = time.perf_counter()
    node = rt.trace.comm(t0, t1, op=EXCHANGE_OP, algo=EXCHANGE_ALGO, values=values,
                         group=f"master-{rank}")
    rt.trace.waited(node)
    rt.it["comm_s"] += t1 - t0
    rt.it["bytes"] += 2 * 4 * values          # the message and the reply
    rt.it["ops"] += 1
    return out


def allreduce(rt: Runtime, t):
    coll = rt.collective
    return rt.comm(lambda: coll.allreduce(t), t.numel())
