"""Python garbage-collection pauses of a host program, measured on request.

The emulator's per-operation time (and so every calibrated TDF, hosts/common/
calibration.py) includes whatever stops a host program between a frame's arrival
and its reply; a cyclic-GC pass is one such stop. With INNET_PROFILE_GC=1 in the
environment (the runner passes its environment to every host program) each
program that calls `profile_from_env` times every collection through
`gc.callbacks` and, at exit, logs one line to stderr (the host's log file):

    gc_pauses {"program": ..., "host": ..., "pid": ...,
               "setup": {"wall_s": ..., "total_s": ..., "gen": {"0": {"n", "total_s", "max_s"}, ...}},
               "run":   {... the same, from `setup_done` to exit ...},
               "sched": {"cpu_s": ..., "runqueue_wait_s": ..., "timeslices": ...}}

"run" is what the timed loops see (total_s / wall_s: their share of time spent in
the collector); "sched" is the process's whole-life CPU time and time runnable but
waiting for a core (/proc/self/schedstat), the other stop a host sees.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time
from typing import Any, Callable

ENV_PROFILE = "INNET_PROFILE_GC"
LINE_TAG = "gc_pauses"


def _phase_stats() -> dict[str, Any]:
    return {"gen": {g: {"n": 0, "total_s": 0.0, "max_s": 0.0} for g in range(3)}}


class GcPauses:
    """Counts and times every collection per generation while installed, split at
    `end_setup` into the program's setup and its run."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._t_start: float | None = None
        self._gen = 0
        self.phases: dict[str, dict[str, Any]] = {"setup": _phase_stats()}
        self.phase = "setup"
        self._t_phase = {"setup": clock()}

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t_start, self._gen = self._clock(), info["generation"]
        elif phase == "stop" and self._t_start is not None:
            dt = self._clock() - self._t_start
            g = self.phases[self.phase]["gen"][self._gen]
            g["n"] += 1
            g["total_s"] += dt
            g["max_s"] = max(g["max_s"], dt)
            self._t_start = None

    def end_setup(self) -> None:
        if self.phase == "setup":
            self.phases["run"], self.phase = _phase_stats(), "run"
            self._t_phase["run"] = self._clock()

    def install(self) -> "GcPauses":
        gc.callbacks.append(self._callback)
        return self

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def record(self, **ident: Any) -> dict[str, Any]:
        now = self._clock()
        rec: dict[str, Any] = dict(ident)
        for name, st in self.phases.items():
            end = self._t_phase["run"] if name == "setup" and "run" in self._t_phase else now
            rec[name] = {"wall_s": end - self._t_phase[name],
                         "total_s": sum(g["total_s"] for g in st["gen"].values()),
                         "gen": {str(k): dict(v) for k, v in st["gen"].items()}}
        rec["sched"] = schedstat()
        return rec


def schedstat(path: str = "/proc/self/schedstat") -> dict[str, float] | None:
    """This process's CPU time and time spent runnable but waiting for a core, over its
    whole life (Linux; None where the file is missing)."""
    try:
        with open(path) as f:
            on_cpu_ns, wait_ns, slices = (int(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return None
    return {"cpu_s": on_cpu_ns / 1e9, "runqueue_wait_s": wait_ns / 1e9, "timeslices": slices}


_active: GcPauses | None = None     # this process's profile, if INNET_PROFILE_GC=1


def profile_from_env(program: str, host: str, environ: dict[str, str] | None = None,
                     at_exit: Callable[[Callable[[], None]], Any] = atexit.register) -> GcPauses | None:
    """Start timing collections when INNET_PROFILE_GC=1 (any other non-empty value
    but 0 is refused: a typo must not pass silently); log the record at exit."""
    global _active
    env = environ if environ is not None else os.environ
    value = env.get(ENV_PROFILE, "").strip()
    if value in ("", "0"):
        return None
    if value != "1":
        raise ValueError(f"{ENV_PROFILE}={value!r}: expected 1 (profile) or 0/unset (off)")
    prof = _active = GcPauses().install()

    def _report() -> None:
        prof.uninstall()
        rec = prof.record(program=program, host=host, pid=os.getpid())
        print(f"{LINE_TAG} {json.dumps(rec)}", file=sys.stderr, flush=True)

    at_exit(_report)
    return prof


def setup_done() -> None:
    """The end of a host program's setup (imports, config; for torch the collective
    too): a running profile counts the collections after it as the run's."""
    if _active is not None:
        _active.end_setup()
