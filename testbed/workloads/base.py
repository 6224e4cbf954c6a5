"""What a workload does at run time, so the runner stays workload-agnostic.

A workload kind (allreduce, p4sgd, later lhc, shadowsync, easgd, phub) lives in
one module of this package holding its params model (validated by the scenario
schema) and a `WorkloadRuntime` subclass registered with `register_runtime`.
The runner asks the runtime which programs to start on which hosts, waits for
them, and hands the raw outputs back to the runtime to turn into metrics.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from testbed.process_env import one_blas_thread
from testbed.results import PROJECT_ROOT, read_jsonl

PYTHON = sys.executable  # the venv's interpreter: host programs run with it


@dataclass
class HostProgram:
    """One process to start on one emulated host."""

    host: str
    argv: list[str]
    # Processes with a lower phase start first (e.g. a parameter server before workers).
    phase: int = 0
    # A server-like program the runner stops once the others are done.
    daemon: bool = False


@dataclass
class PointContext:
    """Everything a runtime needs to know about the point it runs."""

    point: Any                 # testbed.scenario.Point
    hosts: dict[str, Any]      # name -> HostInfo(name, ip, mac)
    work_dir: Path             # configs and raw host outputs
    net_mode: str              # "mininet" | "local"
    start_at: float            # wall-clock time all hosts begin together
    switch: dict[str, Any] = field(default_factory=dict)  # switch addressing for in-network modes
    # Files the point's programs share for its run only (the start gate, a dataset made
    # once for all of them): the runner deletes the folder once the programs have
    # stopped. None where the hosts do not share this machine's files (ssh, cluster).
    scratch_dir: Path | None = None
    planning: bool = False     # a dry run (`testbed run --dry-run`): write configs, make nothing else

    def require_switch(self, what: str, otherwise: str | None = None) -> None:
        """Skip the point (SkipPoint, with what to use instead) where `what` (a
        collective or algorithm that aggregates in the switch) has no in-network
        switch to run on: --net local provides none."""
        if self.switch:
            return
        from testbed.outcomes import SkipPoint  # noqa: PLC0415
        raise SkipPoint(f"{what} needs the in-network switch, which --net {self.net_mode} does not provide; "
                        f"use --net mininet" + (f" or {otherwise}" if otherwise else ""))

    def tcp_port_base(self, default: int, span: int = 64) -> int:
        """Base of the TCP ports host programs listen on. Mininet runs have a
        network namespace of their own, so the fixed default is safe; local
        runs share the machine's loopback, so pick a free range instead: below
        the kernel's ephemeral range (an outgoing connection of any process may
        take a port there at any moment: a local ShadowSync run once found its
        ring port 42859 taken), every port of the span free now."""
        if self.net_mode != "local":
            return default
        from testbed.loopback_ports import free_port_base  # noqa: PLC0415
        try:
            return free_port_base(span, tries=50)
        except RuntimeError:
            return default


class WorkloadRuntime:
    kind: ClassVar[str]

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        raise NotImplementedError

    def timeout_s(self, ctx: PointContext) -> float:
        return float(getattr(ctx.point.scenario.workload, "timeout_s", 300))

    def ina_jobs(self, point: Any) -> list[Any]:
        """In-network aggregation jobs (testbed.switch.jobs.JobRequest) the
        controller installs on the switch before the host programs start."""
        return []

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        """Raw host outputs -> metric records (each gets tagged with the point)."""
        records: list[dict[str, Any]] = []
        for path in sorted(ctx.work_dir.glob("*.jsonl")):
            records.extend(read_jsonl(path))
        return records

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows for the end-of-run table and summary.csv. Every time or rate column says
        what it is, with its unit: hw_* hardware-equivalent (emulated / TDF), first;
        projected_hw_* the projection of the point's trace; emu_* emulated wall time
        (docs/time-fidelity.md, "Reading the summary table")."""
        return []

    def retune(self, point: Any, fidelity: dict[str, Any] | None) -> Any | None:
        """A point to run once more at a corrected dilation, when the fidelity monitor
        found the calibrated one off the band; None = keep the result.

        Calibration's round 0 times a few undilated operations, and the run that follows
        can be slower than that sample by more than the headroom's margin
        (docs/time-fidelity.md, "How much headroom"): a calibrated point whose run-long
        network slowdown left the band runs once more at a fixed TDF from what the monitor
        measured over the whole run, by calibration's own rule (hosts.common.calibration.
        retune_tdf: on a dilated network the headroom rule applied to the emulator's own
        slowdown; undilated, the slowdown itself). Only a network off the band is retried
        (a device-model or agreement failure is not a dilation a TDF fixes); no retry
        where the workload cannot dilate at a fixed TDF (`at_fixed_tdf` None) or where
        the retry would outrun the point's deadline (`retry_fits`), nor where the point's
        links are impaired (loss, delay, ...): calibration holds impairments off to time
        the emulator alone, while the run-long slowdown includes what the impairment
        costs, and a TDF chosen from it would dilate the impairment's cost away. The
        runner keeps the first attempt's verdict in `fidelity.earlier_attempts`."""
        import dataclasses  # noqa: PLC0415

        from hosts.common.calibration import retune_tdf  # noqa: PLC0415

        wl = point.scenario.workload
        if (not getattr(wl, "calibrated", False) or not fidelity
                or "dilation_mismatch" not in (fidelity.get("flags") or [])
                or not fidelity.get("net_slowdown_p50") or not fidelity.get("tdf")
                or links_impaired(point.scenario)):
            return None
        tdf = retune_tdf(float(fidelity["tdf"]), float(fidelity["net_slowdown_p50"]),
                         wl.network_headroom if fidelity.get("network_dilated") else None,
                         fidelity.get("net_slowdown_p99"))
        if tdf is None or not wl.retry_fits(tdf, fidelity):
            return None
        fixed = wl.at_fixed_tdf(tdf)
        if fixed is None:
            return None
        return dataclasses.replace(point, scenario=point.scenario.model_copy(update={"workload": fixed}))

    # Helpers shared by runtimes -------------------------------------------
    @staticmethod
    def write_config(ctx: PointContext, host: str, config: dict[str, Any]) -> Path:
        path = ctx.work_dir / f"{host}.config.json"
        path.write_text(json.dumps(config, indent=2))
        return path

    @staticmethod
    def module_argv(module: str, config_path: Path) -> list[str]:
        return [PYTHON, "-m", module, "--config", str(config_path)]


_RUNTIMES: dict[str, type[WorkloadRuntime]] = {}


def register_runtime(cls: type[WorkloadRuntime]) -> type[WorkloadRuntime]:
    _RUNTIMES[cls.kind] = cls
    return cls


def get_runtime(kind: str) -> WorkloadRuntime:
    try:
        return _RUNTIMES[kind]()
    except KeyError:
        raise KeyError(f"workload kind {kind!r} has no runtime; known: {sorted(_RUNTIMES)}") from None


def switch_job(point: Any) -> list[Any]:
    """The one in-switch aggregation job of a workload whose `collective` is
    "switch": every worker host (not the extra hosts such as a PS) is a member."""
    from testbed.switch.jobs import JobRequest  # noqa: PLC0415

    wl = point.scenario.workload
    if wl.collective != "switch":
        return []
    return [JobRequest(1, tuple(h for h in point.scenario.hosts() if h not in wl.extra_hosts()))]


def host_env() -> dict[str, str]:
    """Environment for host programs: the project importable, no stray venv vars
    needed, one BLAS thread (unless the user's environment says otherwise)."""
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return one_blas_thread(env)


def register_figures_if_loaded(*names: str) -> bool:
    """Add a workload's figure names to the scenario schema, if it is loaded yet.

    testbed.scenario.models imports the workloads package before it defines
    register_figure_names, so at import time it usually is not; each params
    model's validator calls this again, always before the scenario's figure check."""
    fn = getattr(sys.modules.get("testbed.scenario.models"), "register_figure_names", None)
    if fn is None:
        return False
    fn(*names)
    return True


def straggler_for(scenario: Any, host: str) -> dict[str, float] | None:
    """The host program's `straggler` block from the scenario's stragglers (None: none)."""
    for s in scenario.stragglers:
        if s.host == host:
            return {"start_s": s.start_s, "slowdown": s.slowdown, "delay_ms": s.delay_ms}
    return None


_INA_KEYS = ("switch_ip", "switch_port", "switch_mac", "job_id", "worker_port", "window",
             "retx_timeout_s", "max_retries", "congestion_window", "gso")
_INA_ALIASES = {"ip": "switch_ip", "mac": "switch_mac", "ina_port": "switch_port"}


def ina_settings(info: dict[str, Any], host: str) -> dict[str, Any]:
    """The worker's "ina" block (hosts.common.config.InaSettings) from the runner's
    switch info: InaSettings keys at the top level or under "ina", the
    Network.switch_info names ip/mac/ina_port, and per-host overrides under
    workers[host] (e.g. local mode's per-worker UDP endpoint). Missing keys
    take InaSettings' defaults (the Mininet addresses)."""
    out: dict[str, Any] = {}
    for src in (info, info.get("ina") or {}, (info.get("workers") or {}).get(host) or {}):
        for k, v in src.items():
            key = _INA_ALIASES.get(k, k)
            if key in _INA_KEYS and v is not None:
                out[key] = v
    return out


LINK_IMPAIRMENTS = ("delay_ms", "jitter_ms", "loss_pct", "duplicate_pct", "reorder_pct")


def links_impaired(scenario: Any) -> bool:
    """Whether any host's link delays, drops, duplicates or reorders (bandwidth is not an
    impairment here: the hardware model has its own link rate)."""
    links = getattr(scenario, "links", None)
    if links is None:
        return False
    hosts = [links, *(links.for_host(h) for h in links.hosts)]
    return any(getattr(params, k, 0) for params in hosts for k in LINK_IMPAIRMENTS)
