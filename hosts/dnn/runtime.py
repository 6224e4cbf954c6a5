"""The testbed side of one torch worker process: its config, device model,
collective, trace and records, opened once and shared by `collective`,
`ddp_hook` and `report`.

`hosts.dnn.run_script` opens it from its config before running the user's
script; a script run outside the testbed can open one itself with
`Runtime.open(config)`. `current()` returns the open one, or raises with the
reason (a script that needs the testbed but was started without it).

Accounting. `compute(fn, batch_size)` runs one training step on the CPU and
charges the device model (sleeping to modeled x time_scale); `comm(...)` wraps
every collective call. Both add to the iteration's counters that
`report.iteration()` writes and resets, and both record trace nodes. Time spent
in collectives *inside* a compute() call (DDP's hook runs during backward) is
taken out of that step's real compute time; the emulation then runs the step's
communication and compute back to back (no overlap; see docs/pytorch.md);
such comm nodes carry `inside_compute: true` in the trace and precede the
compute node of their step. Every call blocks, so the trace records each after
the one before it (`TraceRecorder(blocking_comm=True)`): a DDP step's buckets are
projected in a row, as they ran.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hosts.common.results import JsonlWriter
from hosts.common.trace import TraceRecorder
from hosts.dnn.config import TorchWorkerConfig
from hosts.dnn.device import make_device

ENV_CONFIG = "TESTBED_TORCH_CONFIG"
log = logging.getLogger("dnn")

_current: "Runtime | None" = None


class NotOnTestbed(RuntimeError):
    pass


def current() -> "Runtime":
    global _current
    if _current is None:
        path = os.environ.get(ENV_CONFIG)
        if not path:
            raise NotOnTestbed(f"no testbed runtime: this process was not started by "
                               f"hosts.dnn.run_script (${ENV_CONFIG} is not set)")
        _current = Runtime.open(path)
    return _current


@dataclass
class Step:
    """One step run by run_step."""
    result: Any
    hw_s: float | None      # modeled device seconds (x slowdown); None on the measured CPU device
    charged_s: float        # the step's device time as traced: hw_s, or (CPU device) real_s x slowdown
    real_s: float           # the CPU time fn took (less what `excluded` says was not compute)
    t0: float               # perf_counter before fn, after it, and after the device's sleep
    t1: float
    t2: float


def run_step(dev: Any, fn: Callable[[], Any], batch_size: int, phase: str = "step", *, slowdown: float = 1.0,
             delay_ms: float = 0.0, excluded: Callable[[], float] = lambda: 0.0) -> Step:
    """Run one training step `fn` on the CPU and charge it to the device model `dev`
    (hosts/dnn/device.py): slept to modeled x time_scale (a straggler's slowdown
    scales the modeled time, also when projected), or, on the measured CPU device,
    to real x slowdown; then a straggler's delay_ms. The one place a torch step is
    charged: Runtime.compute and ShadowSync's Hogwild workers use it."""
    hw = dev.hw_time(batch_size, phase)       # None for the measured CPU device
    if hw is not None:
        hw *= slowdown
    t0 = time.perf_counter()
    result = fn()
    t1 = time.perf_counter()
    real = (t1 - t0) - excluded()
    if hw is None:
        charged = real * slowdown
        dev._record(real, real)
        if charged > real:
            time.sleep(charged - real)
    else:
        charged = hw
        dev.charge(hw * dev.time_scale, real)
        dev.flush()                           # the step's data is ready only now
    if delay_ms > 0:
        time.sleep(delay_ms / 1e3)
    return Step(result, hw, charged, real, t0, t1, time.perf_counter())


class Runtime:
    def __init__(self, cfg: TorchWorkerConfig):
        self.cfg = cfg
        self.device = make_device(cfg.device)
        self.trace = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.rank, world=cfg.world,
                                   tdf=self.device.time_scale, device=self.device.describe(),
                                   workload="torch", collective=cfg.collective, role="worker",
                                   blocking_comm=True)
        self.bucket_sizes: list[int] = []    # DDP's gradient buckets (values), set by ddp_hook.register
        self.writer = JsonlWriter(cfg.out)
        self._coll = None
        self.t0 = time.perf_counter()       # records' t_s: since the first compute() (training start)
        self._started = False
        self.t0_wall = time.time()
        # The point's common start (a straggler's start_s counts from it): run_script
        # sets the one the start gate chose (hosts.common.start_gate).
        self.start_wall = cfg.start_at
        self.iteration = 0
        self._in_compute = False
        self._comm_inside = 0.0
        self._reset_counters()
        self.totals = {"compute_s": 0.0, "comm_s": 0.0, "hw_compute_s": 0.0, "bytes": 0, "ops": 0}
        from hosts.dnn.timing import Dilation  # noqa: PLC0415
        self.dilation = Dilation(self)
        # in-switch float sums agree on a fixed-point scale first (one MAX pass): the model charges it
        self._scale_round = cfg.collective == "switch" and (cfg.ina is None or cfg.ina.scale_exp is None)

    @classmethod
    def open(cls, source: str | Path | dict) -> "Runtime":
        global _current
        _current = cls(TorchWorkerConfig.from_json(source))
        return _current

    def _reset_counters(self) -> None:
        self.it = {"compute_s": 0.0, "hw_compute_s": 0.0, "comm_s": 0.0, "bytes": 0, "ops": 0}

    # -- the collective ---------------------------------------------------------
    @property
    def collective(self):
        if self._coll is None:
            from hosts.dnn.open_collective import open_collective  # noqa: PLC0415
            self._coll = open_collective(self.cfg)
        return self._coll

    def comm(self, fn: Callable[[], Any], values: int, op: str = "allreduce") -> Any:
        """Run one collective call, timed, counted and traced."""
        from hosts.dnn.timing import model_algo  # noqa: PLC0415
        self.dilation.before_op(values)       # the first call may calibrate first (probe)
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        self.dilation.op_done(t0, t1, values)
        # inside_compute: issued from within a step (DDP's hook during backward), so
        # on the hardware it would overlap that step's compute node (recorded after it).
        # algo: the network model's (gloo's allreduce is modeled as the ring; impl says which ran).
        attrs = {"impl": self.cfg.collective} if model_algo(self.cfg.collective) != self.cfg.collective else {}
        if self._in_compute:
            attrs["inside_compute"] = True
        if self._scale_round and op == "allreduce":
            attrs["scale_round"] = True
        node = self.trace.comm(t0, t1, op=op, algo=model_algo(self.cfg.collective), values=values, **attrs)
        self.trace.waited(node)
        dt = t1 - t0
        self.it["comm_s"] += dt
        self.it["bytes"] += 4 * values
        self.it["ops"] += 1
        if self._in_compute:
            self._comm_inside += dt
        return out

    # -- compute ------------------------------------------------------------------
    def straggler_active(self) -> bool:
        s = self.cfg.straggler
        return s is not None and time.time() - self._start_wall() >= s.start_s

    def _start_wall(self) -> float:
        return self.start_wall if self.start_wall is not None else self.t0_wall

    def compute(self, fn: Callable[[], Any], batch_size: int | None = None, phase: str = "step") -> Any:
        """One step of `batch_size` samples (default: the workload's batch_size) on
        the modeled device (run_step); a straggler's slowdown scales the modeled time
        and its delay_ms is added once per call."""
        n = self.cfg.batch_size if batch_size is None else batch_size
        strag = self.cfg.straggler if self.straggler_active() else None
        self._in_compute, self._comm_inside = True, 0.0
        if not self._started:                # script set-up (imports, data) is not training time
            self.t0, self._started = time.perf_counter(), True
        try:
            st = run_step(self.device, fn, n, phase, slowdown=strag.slowdown if strag else 1.0,
                          delay_ms=strag.delay_ms if strag else 0.0, excluded=lambda: self._comm_inside)
        finally:
            self._in_compute = False
        self.trace.compute(st.t0, st.t2, hw_s=st.charged_s, real_s=st.real_s, work={"batch_size": n, "phase": phase})
        self.dilation.compute_done(st.real_s, st.hw_s)
        self.it["compute_s"] += (st.t2 - st.t0) - self._comm_inside
        self.it["hw_compute_s"] += st.charged_s
        return st.result

    # -- records ---------------------------------------------------------------------
    def restart_clock(self) -> None:
        """Records' t_s start again now (after calibration: the measured run)."""
        self.t0 = time.perf_counter()

    def record_iteration(self, **fields: Any) -> dict[str, Any]:
        it = self.it
        calibration = self.dilation.calibrating and self.dilation.mode == "iterations"
        rec = {"type": "iteration", "host": self.cfg.host, "rank": self.cfg.rank,
               "collective": self.cfg.collective, "iter": self.iteration,
               "t_s": time.perf_counter() - self.t0, "compute_s": it["compute_s"],
               "hw_compute_s": it["hw_compute_s"], "comm_s": it["comm_s"],
               "comm_bytes": it["bytes"], "comm_ops": it["ops"]}
        for k, v in fields.items():
            if v is not None:
                rec[k] = float(v) if hasattr(v, "__float__") and not isinstance(v, (int, bool)) else v
        if calibration:
            rec["calibration"] = True          # a calibration round: not in the summary
        rec["tdf"] = self.device.time_scale
        self.writer.write(rec)
        self.dilation.at_iteration()
        self._fold_counters()
        self.iteration += 1
        return rec

    def _fold_counters(self) -> None:
        """Add the current iteration's counters to the run totals and reset them."""
        for k in ("compute_s", "comm_s", "hw_compute_s", "bytes", "ops"):
            self.totals[k] += self.it[k]
        self._reset_counters()

    def close(self, ok: bool, error: str | None = None, **extra: Any) -> None:
        global _current
        self._fold_counters()      # comm of a script that never reports iterations counts too
        try:
            if self._coll is not None:
                self._coll.close()
        finally:
            self.trace.close()
            self.writer.write({"type": "summary", "host": self.cfg.host, "rank": self.cfg.rank,
                               "role": self.cfg.role, "collective": self.cfg.collective,
                               "world": self.cfg.world, "ok": ok, "error": error,
                               "iterations": self.iteration, **self.totals, **self.dilation.summary(),
                               "bucket_sizes": self.bucket_sizes,
                               "device": self.device.describe(), "validity": self.device.validity(),
                               "transport": (self._coll.stats() if self._coll is not None
                                             and hasattr(self._coll, "stats") else None), **extra})
            self.writer.close()
            if _current is self:
                _current = None
