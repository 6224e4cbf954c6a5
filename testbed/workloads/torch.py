"""PyTorch workload: every worker host runs a user's training script.

    workload:
      kind: torch
      script: scenarios/torch/train.py      # any PyTorch script (DDP or a plain loop)
      args: [--model, lenet, --epochs, "2"]
      collective: ring                      # switch | ring | ps | gloo (DDP's own allreduce)
      batch_size: 32                        # per worker; the script reads report.config()
      device: {type: v100, time_scale: 50}  # or {type: cpu}: measured CPU time

The host program is hosts.dnn.run_script (rendezvous environment, collective,
DDP hook); the script's `hosts.dnn.report` calls produce per-iteration records
(loss, accuracy, compute vs communication time, bytes), collected here as
`torch_iter`, `torch_final` and `torch_host` metrics plus one `torch_summary`
per point. Every host also leaves `<host>.trace.jsonl` in the point's work
folder (hosts/common/trace.py) for the fidelity monitor and projector.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from testbed.results import PROJECT_ROOT, read_jsonl
from testbed.workloads import register_workload
from testbed.workloads.allreduce import InaParams
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for,
                                     switch_job)

FIGURES = ("torch_loss_vs_time", "torch_iteration_time")
TORCH_TCP_PORT = 47800      # ring ranks +1+rank, the PS the base (hosts.common.config)
MASTER_PORT_OFFSET = 60     # torch.distributed's rendezvous: port base + 60
DEVICE_TYPES = ("cpu", "v100", "a100", "h100")
DEVICE_KEYS = {"type", "precision", "efficiency", "hbm_efficiency", "launch_s", "time_scale"}


register_figures_if_loaded(*FIGURES)


def resolve_path(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else PROJECT_ROOT / p


@register_workload
class TorchWorkload(BaseModel):
    """A user's PyTorch training script on every worker."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Literal["torch"] = Field("torch", description="Workload type; selects which fields below apply.")
    script: str = Field(..., description="Path of the training script (relative: to the project root).")
    args: list[str] = Field(default_factory=list, description="The script's command-line arguments.")
    collective: Literal["switch", "ring", "ps", "gloo"] = Field(
        "ring", description="Where gradients (DDP buckets) and hosts.dnn.collective calls go: switch "
                            "(in-network aggregation), ring, ps (a parameter-server host), or gloo "
                            "(torch.distributed's own allreduce, the baseline).")
    batch_size: int = Field(32, ge=1, description="Samples per worker per step: the device model's "
                                                  "batch; scripts read it as report.config().batch_size.")
    device: dict[str, Any] = Field(
        default_factory=lambda: {"type": "cpu"},
        description="Device model (hosts/dnn/device.py): {type: cpu|v100|a100|h100, precision, "
                    "efficiency, hbm_efficiency, launch_s, time_scale}. cpu = measured CPU time.")
    seed: int = Field(1, ge=0, description="Passed to the script's environment (TESTBED_SEED).")
    timeout_s: float = Field(300.0, gt=0, description="A collective call that makes no progress this "
                                                      "long fails; the point fails after this + 60 s.")
    ina: InaParams = Field(default_factory=InaParams, description="In-switch transport (collective switch).")

    @model_validator(mode="before")
    @classmethod
    def _figures(cls, data: Any) -> Any:
        register_figures_if_loaded(*FIGURES)
        return data

    @field_validator("script")
    @classmethod
    def _script_exists(cls, v: str) -> str:
        if not resolve_path(v).is_file():
            raise ValueError(f"script {v!r}: no such file (relative paths start at {PROJECT_ROOT})")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: dict[str, Any]) -> dict[str, Any]:
        kind = v.get("type", "cpu")
        if kind not in DEVICE_TYPES:
            raise ValueError(f"device.type {kind!r}: use one of {', '.join(DEVICE_TYPES)}")
        bad = sorted(set(v) - (DEVICE_KEYS if kind != "cpu" else {"type"}))
        if bad:
            raise ValueError(f"device: unknown key(s) {bad} for type {kind}; allowed: "
                             f"{sorted(DEVICE_KEYS) if kind != 'cpu' else ['type']}")
        # Build it once here, so a bad precision/efficiency fails before anything starts.
        try:
            from hosts.dnn.device import DnnDevice  # noqa: PLC0415 - no torch import there
            if kind != "cpu":
                DnnDevice(kind, **{k: x for k, x in v.items() if k != "type"})
        except (TypeError, ValueError) as e:
            raise ValueError(f"device: {e}") from None
        return v

    def extra_hosts(self) -> list[str]:
        return ["ps"] if self.collective == "ps" else []


# ---------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------
@register_runtime
class TorchRuntime(WorkloadRuntime):
    kind = "torch"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        from testbed.outcomes import SkipPoint  # noqa: PLC0415

        scn = ctx.point.scenario
        wl: TorchWorkload = scn.workload
        workers = [h for h in scn.hosts() if h not in wl.extra_hosts()]
        if wl.collective == "switch" and not ctx.switch:
            raise SkipPoint(f"collective 'switch' needs the in-network switch, which --net "
                            f"{ctx.net_mode} does not provide; use --net mininet or collective ring/ps/gloo")
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in workers]
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.collective == "ps" else None
        port = ctx.tcp_port_base(TORCH_TCP_PORT, span=MASTER_PORT_OFFSET + 2)
        common = {
            "world": len(workers), "collective": wl.collective, "peers": peers, "ps": ps, "port": port,
            "master_addr": peers[0]["ip"], "master_port": port + MASTER_PORT_OFFSET,
            "script": str(resolve_path(wl.script)), "args": list(wl.args), "batch_size": wl.batch_size,
            "seed": wl.seed, "device": dict(wl.device), "start_at": ctx.start_at,
            "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s,
        }
        progs = []
        if ps is not None:
            cfg = dict(common, host="ps", role="ps", rank=-1, ina=None, gloo_ifname=None, trace=None,
                       straggler=straggler_for(scn, "ps"), out=str(ctx.work_dir / "ps.jsonl"))
            progs.append(HostProgram("ps", self.module_argv("hosts.dnn.run_script",
                                                            self.write_config(ctx, "ps", cfg)), phase=0))
        for rank, h in enumerate(workers):
            ina = None
            if wl.collective == "switch":
                ina = {**ina_settings(ctx.switch, h), "job_id": 1,
                       **wl.ina.model_dump(exclude_none=True)}
            cfg = dict(common, host=h, role="worker", rank=rank, ina=ina,
                       gloo_ifname="lo" if ctx.net_mode == "local" else f"{h}-eth0",
                       trace=str(ctx.work_dir / f"{h}.trace.jsonl"),
                       straggler=straggler_for(scn, h), out=str(ctx.work_dir / f"{h}.jsonl"))
            progs.append(HostProgram(h, self.module_argv("hosts.dnn.run_script",
                                                         self.write_config(ctx, h, cfg)), phase=1))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        return switch_job(point)

    def timeout_s(self, ctx: PointContext) -> float:
        return ctx.point.scenario.workload.timeout_s + 60.0

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [summary_row(r) for r in records if r.get("type") == "torch_summary"]


# ---------------------------------------------------------------------------
# collect (pure functions of the hosts' JSON lines)
# ---------------------------------------------------------------------------
_RENAME = {"iteration": "torch_iter", "final": "torch_final", "summary": "torch_host"}


def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: TorchWorkload = scenario.workload
    workers = [h for h in scenario.hosts() if h not in wl.extra_hosts()]
    out: list[dict[str, Any]] = []
    for h in workers + wl.extra_hosts():
        for r in read_jsonl(work_dir / f"{h}.jsonl"):
            t = _RENAME.get(r.get("type"))
            if t is not None:
                out.append(dict(r, type=t, host=h))
    out.append(point_summary(wl, workers, out))
    return out


def point_summary(wl: TorchWorkload, workers: list[str], recs: list[dict[str, Any]]) -> dict[str, Any]:
    iters = [r for r in recs if r["type"] == "torch_iter"]
    hosts = {r["host"]: r for r in recs if r["type"] == "torch_host"}
    finals = [r for r in recs if r["type"] == "torch_final"]
    rank0 = [r for r in iters if r.get("rank") == 0]
    losses = [r["loss"] for r in rank0 if r.get("loss") is not None]
    accs = [r["acc"] for r in finals if r.get("acc") is not None]
    validity = [h.get("validity") or {} for h in hosts.values()]

    def mean(key: str) -> float | None:
        v = [r[key] for r in iters if r.get(key) is not None]
        return float(np.mean(v)) if v else None
    return {
        "type": "torch_summary", "collective": wl.collective, "workers": len(workers),
        "device": wl.device.get("type", "cpu"), "time_scale": wl.device.get("time_scale", 1.0),
        "ok": bool(workers) and all(hosts.get(h, {}).get("ok") for h in workers),
        "errors": {h: r.get("error") for h, r in hosts.items() if r.get("error")},
        "iterations": len(rank0), "final_loss": losses[-1] if losses else None,
        "final_acc": float(np.mean(accs)) if accs else None,
        "final_acc_per_rank": [r.get("acc") for r in sorted(finals, key=lambda r: r.get("rank", 0))],
        "wall_s": max((r["t_s"] for r in iters), default=None),
        "iter_compute_s": mean("compute_s"), "iter_comm_s": mean("comm_s"),
        "iter_hw_compute_s": mean("hw_compute_s"),
        "comm_bytes_per_worker": (sum(r.get("comm_bytes", 0) for r in iters) / len(workers)) if workers else 0,
        "device_valid": all(v.get("valid", True) for v in validity),
        "device_violations": sum(v.get("violations", 0) for v in validity),
        "retransmissions": sum(((h.get("transport") or {}).get("retransmissions") or 0) for h in hosts.values()),
    }


def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    def rnd(x, k=4):
        return None if x is None else round(x, k)
    return {"collective": r["collective"], "workers": r["workers"], "device": r["device"],
            "iterations": r["iterations"], "final_loss": rnd(r["final_loss"]),
            "final_acc": rnd(r["final_acc"]), "wall_s": rnd(r["wall_s"], 2),
            "compute_ms/it": rnd(r["iter_compute_s"] and r["iter_compute_s"] * 1e3, 2),
            "comm_ms/it": rnd(r["iter_comm_s"] and r["iter_comm_s"] * 1e3, 2),
            "retx": r["retransmissions"], "device_valid": r["device_valid"], "ok": r["ok"]}
