"""What a training script tells the testbed, in one or two calls.

    from hosts.dnn import report
    loss = report.compute(lambda: train_step(batch))   # one step on the modeled device
    report.iteration(loss=loss, acc=acc)                # one record per iteration

`iteration()` writes {"type": "iteration", iter, t_s, loss, acc, compute_s,
comm_s, comm_bytes, comm_ops, hw_compute_s, ...} to the worker's JSON lines
(the workload collects them into metrics.jsonl). compute_s / comm_s default
to what `compute()` and the testbed collectives measured since the last
iteration; a script that times itself may pass its own. Outside the testbed
(no runtime) both calls do the plain thing: compute() runs fn, iteration()
returns None, so one script runs both ways.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from hosts.dnn.runtime import ENV_CONFIG, current


def on_testbed() -> bool:
    from hosts.dnn import runtime  # noqa: PLC0415
    return runtime._current is not None or bool(os.environ.get(ENV_CONFIG))


def compute(fn: Callable[[], Any], batch_size: int | None = None, phase: str = "step") -> Any:
    if not on_testbed():
        return fn()
    return current().compute(fn, batch_size, phase)


def profile(model: Any, *sample_inputs: Any) -> Any:
    """Count the model's FLOPs per layer for the device model (once, before training)."""
    if not on_testbed():
        return None
    return current().device.profile(model, *sample_inputs)


def iteration(loss: Any = None, acc: Any = None, compute_s: float | None = None,
              comm_s: float | None = None, **extra: Any) -> dict[str, Any] | None:
    if not on_testbed():
        return None
    rt = current()
    if compute_s is not None:
        rt.it["compute_s"] = float(compute_s)
    if comm_s is not None:
        rt.it["comm_s"] = float(comm_s)
    return rt.record_iteration(loss=loss, acc=acc, **extra)


def final(**fields: Any) -> dict[str, Any] | None:
    """The run's end result (e.g. final test accuracy): one "final" record."""
    if not on_testbed():
        return None
    rt = current()
    rec = {"type": "final", "host": rt.cfg.host, "rank": rt.cfg.rank, "collective": rt.cfg.collective,
           "t_s": time.perf_counter() - rt.t0, **fields}
    rt.writer.write(rec)
    return rec


def config() -> Any:
    """The worker's TorchWorkerConfig (rank, world, batch_size, seed, ...)."""
    return current().cfg
