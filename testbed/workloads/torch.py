"""PyTorch workload: every worker host runs a user's training script.

    workload:
      kind: torch
      script: scenarios/torch/train.py      # any PyTorch script (DDP or a plain loop)
      args: [--model, lenet, --epochs, "2"]
      collective: ring                      # switch | ring | ps | gloo (DDP's own allreduce)
      batch_size: 32                        # per worker; the script reads report.config()
      device: {type: v100}                  # time_scale auto (default) or N; {type: cpu}: measured CPU time

Time (docs/pytorch.md, docs/time-fidelity.md): with a modeled device, compute is
slept TDF x its modeled time and, on the soft switch, the network is dilated to
the same TDF (`dilate_network`), so emulated seconds / TDF are hardware seconds.
time_scale auto (default) calibrates the TDF on the script's own first
iterations (or a probe of its DDP buckets), hosts/dnn/timing.py; the hardware
time of each allreduce comes from `hw_table` (testbed.fidelity.network_model;
gloo has its own model: its segmented ring and rendezvous). Each point gets the
fidelity monitor's verdict and a
projection of its own trace (`fidelity_records`).

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
from pydantic import Field, field_validator, model_validator

from hosts.dnn.timing import WARMUP_ITERATIONS
from testbed.results import PROJECT_ROOT, read_jsonl, resolve_project_path
from testbed.workloads import register_workload
from testbed.workloads.allreduce import InaParams
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for,
                                     switch_job)
from testbed.workloads.calibrated import ITERATION_WALL_S, CalibratedWorkloadParams, dilation_block

FIGURES = ("torch_loss_vs_time", "torch_iteration_time")
TORCH_TCP_PORT = 47800      # ring ranks +1+rank, the PS the base (hosts.common.config)
MASTER_PORT_OFFSET = 60     # torch.distributed's rendezvous: port base + 60
DEVICE_TYPES = ("cpu", "v100", "a100", "h100")
DEVICE_KEYS = {"type", "precision", "efficiency", "hbm_efficiency", "launch_s", "time_scale"}
# time_scale auto: the TDF of the first (undilated) calibration round, as LHC's CALIBRATION_START
CALIBRATION_START = 500.0
HW_TABLE_MAX_VALUES = 2 ** 26      # 256 MB buckets: above DDP's 25 MB default cap with room


register_figures_if_loaded(*FIGURES)


@register_workload
class TorchWorkload(CalibratedWorkloadParams):
    """A user's PyTorch training script on every worker."""

    FIGURES = FIGURES

    kind: Literal["torch"] = Field("torch", description="Workload type; selects which fields below apply.")
    script: str = Field(..., description="Path of the training script (relative: to the current folder if it "
                                         "is there, else to the project root).")
    args: list[str] = Field(default_factory=list, description="The script's command-line arguments, passed as "
                            "they are: a shipped scenario's args are for its own script (train.py); with your "
                            "own script set your arguments, or none (`--set workload.args=[]`).")
    collective: Literal["switch", "ring", "ps", "gloo"] = Field(
        "ring", description="Where gradients (DDP buckets) and hosts.dnn.collective calls go: switch "
                            "(in-network aggregation), ring, ps (a parameter-server host), or gloo "
                            "(torch.distributed's own allreduce, the baseline).")
    batch_size: int = Field(32, ge=1, description="Samples per worker per step: the device model's "
                                                  "batch; scripts read it as report.config().batch_size.")
    device: dict[str, Any] = Field(
        default_factory=lambda: {"type": "cpu"},
        description="Device model (hosts/dnn/device.py): {type: cpu|v100|a100|h100, precision, "
                    "efficiency, hbm_efficiency, launch_s, time_scale}. cpu = measured CPU time (no "
                    "dilation). time_scale: auto (default: calibrated on the script's first iterations, "
                    "hosts/dnn/timing.py) or a number (fixed TDF); the network is dilated to it too.")
    seed: int = Field(1, ge=0, description="Passed to the script's environment (TESTBED_SEED).")
    timeout_s: float = Field(300.0, gt=0, description="A collective call that makes no progress this "
                                                      "long fails; the point fails after this + 60 s, plus "
                                                      f"{ITERATION_WALL_S:g} s per calibration iteration "
                                                      "(time_scale auto).")
    ina: InaParams = Field(default_factory=InaParams, description="In-switch transport (collective switch).")
    ddp_hook: bool = Field(True, description="DDP's gradient buckets go through the testbed hook (timed and "
                           "traced). false (collective gloo only): DDP's own allreduce, the hook-overhead "
                           "baseline; no per-bucket times, no calibration on them.")

    @field_validator("script")
    @classmethod
    def _script_exists(cls, v: str) -> str:
        p = resolve_project_path(v)
        if p.is_dir():
            raise ValueError(f"script {v!r}: {p} is a folder; name the training script (.py) in it")
        if not p.is_file():
            raise ValueError(f"script {v!r}: no such file (a relative path is looked up in the current folder, "
                             f"{Path.cwd()}, then in the project, {PROJECT_ROOT})")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: dict[str, Any]) -> dict[str, Any]:
        kind = v.get("type", "cpu")
        ts = v.get("time_scale", "auto")
        if ts != "auto" and (isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts <= 0):
            raise ValueError(f"device.time_scale must be auto or a number > 0, got {ts!r}")
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
                DnnDevice(kind, **{k: x for k, x in v.items() if k not in ("type", "time_scale")})
        except (TypeError, ValueError) as e:
            raise ValueError(f"device: {e}") from None
        return v

    @model_validator(mode="after")
    def _hook(self) -> "TorchWorkload":
        if not self.ddp_hook and self.collective != "gloo":
            raise ValueError(f"ddp_hook false needs collective gloo (DDP's own allreduce), got {self.collective!r}")
        if not self.ddp_hook and self.calibrated:
            raise ValueError("ddp_hook false: set device.time_scale to a number (time_scale auto calibrates "
                             "on the hook's buckets, which DDP's own allreduce does not show)")
        return self

    def extra_hosts(self) -> list[str]:
        return ["ps"] if self.collective == "ps" else []

    @property
    def modeled(self) -> bool:
        return self.device.get("type", "cpu") != "cpu"

    @property
    def calibrated(self) -> bool:
        return self.modeled and self.device.get("time_scale", "auto") == "auto"

    # at_fixed_tdf stays None (no retry): its calibration rounds train (CalibratedWorkloadParams).

    def device_spec(self) -> dict[str, Any]:
        """The hosts' device block: auto starts at CALIBRATION_START (round 0)."""
        if not self.modeled:
            return {"type": "cpu"}
        ts = self.device.get("time_scale", "auto")
        return dict(self.device, time_scale=float(CALIBRATION_START if ts == "auto" else ts))


def lossy_calibration(scn: Any) -> str | None:
    """Why time_scale auto cannot run on this point's links, or None. On a dilated
    network calibration holds the switch's loss off (Calibrator.start/finish);
    undilated (dilate_network false) it would measure loss recovery (retransmission
    timeouts), not the network."""
    wl: TorchWorkload = scn.workload
    lossy = [scn.links.loss_pct] + [o.loss_pct for o in scn.links.hosts.values() if o.loss_pct]
    if not (wl.calibrated and any(lossy)) or wl.dilate_network:
        return None
    return (f"links.loss_pct {max(lossy):g} with workload.device.time_scale auto and dilate_network false: "
            f"calibration on a lossy undilated network measures loss recovery, not the network (a TDF "
            f"~20x too high, a run ~20x too long); set dilate_network true (the switch then holds the "
            f"loss off while calibrating) or workload.device.time_scale to a number")


# ---------------------------------------------------------------------------
# Hardware time of an allreduce (calibration, network dilation)
# ---------------------------------------------------------------------------
def hw_op_time(wl: TorchWorkload, values: int, workers: int, profile: Any = None) -> float:
    """Modeled hardware seconds of one allreduce of `values` float32 values with the
    workload's collective (gloo: gloo's own ring; switch: with the scale-agreement pass)."""
    from hosts.dnn.timing import model_algo  # noqa: PLC0415 - no torch import there
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time  # noqa: PLC0415
    scale_round = wl.collective == "switch" and wl.ina.scale_exp is None
    return collective_time("allreduce", model_algo(wl.collective), int(values), 4, workers,
                           profile or load_profile(wl.hardware), scale_round=scale_round)


def hw_table(wl: TorchWorkload, workers: int) -> dict[str, list[float]]:
    """hw_op_time at 0, 1 and a geometric grid (8 per octave) up to HW_TABLE_MAX_VALUES,
    for hosts.lhc.timing.HwTable (bucket sizes are the script's: unknown here)."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    prof = load_profile(wl.hardware)
    sizes, v = [0, 1], 1.0
    while sizes[-1] < HW_TABLE_MAX_VALUES:
        v *= 2 ** (1 / 8)
        if int(v) > sizes[-1]:
            sizes.append(int(v))
    return {"values": [float(x) for x in sizes], "hw_s": [hw_op_time(wl, x, workers, prof) for x in sizes]}


def network_dilation(wl: TorchWorkload, switch_info: dict[str, Any], workers: int) -> dict[str, Any] | None:
    """The hosts' network_dilation block: None without a soft switch, on a measured CPU
    device or with dilate_network false. The in-switch client takes its timer floor
    per chunk from `hardware` (InaClient.expect_delay); hw_op_s, one full packet's
    allreduce, is the shared block's shape (hosts.common.network_dilation)."""
    from testbed.wire import MAX_VALUES_PER_PACKET  # noqa: PLC0415

    return dilation_block(wl, switch_info, wl.modeled,
                          lambda: max(hw_op_time(wl, MAX_VALUES_PER_PACKET, workers), 1e-6))


# ---------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------
@register_runtime
class TorchRuntime(WorkloadRuntime):
    kind = "torch"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl: TorchWorkload = scn.workload
        workers = [h for h in scn.hosts() if h not in wl.extra_hosts()]
        if wl.collective == "switch":
            ctx.require_switch("collective 'switch'", "collective ring/ps/gloo")
        refusal = lossy_calibration(scn)
        if refusal:
            raise ValueError(refusal)
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in workers]
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.collective == "ps" else None
        port = ctx.tcp_port_base(TORCH_TCP_PORT, span=MASTER_PORT_OFFSET + 2)
        common = {
            "world": len(workers), "collective": wl.collective, "peers": peers, "ps": ps, "port": port,
            "master_addr": peers[0]["ip"], "master_port": port + MASTER_PORT_OFFSET,
            "script": str(resolve_project_path(wl.script)), "args": list(wl.args), "batch_size": wl.batch_size,
            "seed": wl.seed, "device": wl.device_spec(), "start_at": ctx.start_at,
            "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s,
            "calibration": ({"rounds": wl.calibration_rounds, "iteration_wall_s": ITERATION_WALL_S}
                            if wl.calibrated else None),
            "hw_table": hw_table(wl, len(workers)) if wl.modeled else None,
            "network_dilation": network_dilation(wl, ctx.switch or {}, len(workers)),
            "ddp_hook": wl.ddp_hook,
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
        # The script's iteration count is its own: the deadline can allow ITERATION_WALL_S
        # (the calibration's refusal budget) to the calibration iterations only; the
        # measured run has timeout_s.
        wl = ctx.point.scenario.workload
        cal = WARMUP_ITERATIONS + wl.calibration_rounds if wl.calibrated else 0
        return wl.timeout_s + ITERATION_WALL_S * cal + 60.0

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [summary_row(r) for r in records if r.get("type") == "torch_summary"]


# ---------------------------------------------------------------------------
# collect (pure functions of the hosts' JSON lines)
# ---------------------------------------------------------------------------
_RENAME = {"iteration": "torch_iter", "final": "torch_final", "summary": "torch_host",
           "calibration": "calibration"}


def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: TorchWorkload = scenario.workload
    workers = [h for h in scenario.hosts() if h not in wl.extra_hosts()]
    out: list[dict[str, Any]] = []
    for h in workers + wl.extra_hosts():
        for r in read_jsonl(work_dir / f"{h}.jsonl"):
            t = _RENAME.get(r.get("type"))
            if t is not None:
                out.append(dict(r, type=t, host=h))
    summary = point_summary(wl, workers, out)
    if wl.modeled and summary["ok"]:
        out.extend(fidelity_records(wl, work_dir, summary))
    out.append(summary)
    return out


def _tdf(wl: TorchWorkload, hosts: dict[str, dict[str, Any]]) -> float:
    """The TDF the workers ran at (calibrated or fixed): one value, or the point is wrong."""
    tdfs = {h.get("tdf") for h in hosts.values() if h.get("tdf") is not None}
    if len(tdfs) > 1:
        raise ValueError(f"workers ran at different TDFs {sorted(tdfs)}: calibration did not agree")
    return float(tdfs.pop()) if tdfs else float(wl.device_spec().get("time_scale", 1.0))


def point_summary(wl: TorchWorkload, workers: list[str], recs: list[dict[str, Any]]) -> dict[str, Any]:
    iters = [r for r in recs if r["type"] == "torch_iter" and not r.get("calibration")]
    cal_iters = [r for r in recs if r["type"] == "torch_iter" and r.get("calibration") and r.get("rank") == 0]
    hosts = {r["host"]: r for r in recs if r["type"] == "torch_host" and r.get("role", "worker") == "worker"}
    finals = [r for r in recs if r["type"] == "torch_final"]
    rank0 = sorted((r for r in iters if r.get("rank") == 0), key=lambda r: r["iter"])
    losses = [r["loss"] for r in rank0 if r.get("loss") is not None]
    accs = [r["acc"] for r in finals if r.get("acc") is not None]
    validity = [h.get("validity") or {} for h in hosts.values()]
    tdf = _tdf(wl, hosts) if wl.modeled else 1.0

    def mean(key: str) -> float | None:
        v = [r[key] for r in iters if r.get(key) is not None]
        return float(np.mean(v)) if v else None
    # Emulated time per iteration: the slowest worker's clock (restarted after calibration)
    # at its last record, over the measured iterations.
    ends = [max((r["t_s"] for r in iters if r["host"] == h), default=None) for h in workers]
    ends = [e for e in ends if e is not None]
    wall = max(ends) if ends else None
    iter_s = wall / len(rank0) if wall is not None and rank0 else None
    calibration_incomplete = [h for h, r in hosts.items() if r.get("calibration_complete") is False]
    reasons = ([f"calibration incomplete on {', '.join(calibration_incomplete)} (the script "
                f"reported fewer iterations than calibration_rounds + 1)"] if calibration_incomplete else [])
    if not rank0:
        # An unmodified script: no time per iteration, nothing to hold against the projection.
        reasons.append("no iterations counted: the script never called report.iteration() after "
                       "calibration, so the testbed cannot count its iterations; its time per iteration "
                       "is unknown and not checked against the projection (docs/pytorch.md, step 2)")
    comp, comm = mean("compute_s"), mean("comm_s")
    return {
        "type": "torch_summary", "collective": wl.collective, "workers": len(workers),
        "device": wl.device.get("type", "cpu"), "time_scale": tdf,
        "ok": bool(workers) and all(hosts.get(h, {}).get("ok") for h in workers),
        "errors": {h: r.get("error") for h, r in hosts.items() if r.get("error")},
        "iterations": len(rank0), "calibration_iterations": len(cal_iters), "ddp_hook": wl.ddp_hook,
        "bucket_values": next((h.get("bucket_sizes") for h in hosts.values() if h.get("bucket_sizes")), None),
        "calibration_mode": next((h.get("calibration_mode") for h in hosts.values()), None),
        "final_loss": losses[-1] if losses else None,
        "final_acc": float(np.mean(accs)) if accs else None,
        "final_acc_per_rank": [r.get("acc") for r in sorted(finals, key=lambda r: r.get("rank", 0))],
        "wall_s": wall, "iter_s": iter_s,
        "iter_compute_s": comp, "iter_comm_s": comm,
        "iter_hw_compute_s": mean("hw_compute_s"),
        "comm_bytes_per_worker": (sum(r.get("comm_bytes", 0) for r in iters) / len(workers)) if workers else 0,
        "device_valid": all(v.get("valid", True) for v in validity),
        "device_violations": sum(v.get("violations", 0) for v in validity),
        "retransmissions": sum(((h.get("transport") or {}).get("retransmissions") or 0) for h in hosts.values()),
        # Hardware time (emulated / TDF): compute and communication are dilated alike
        # only where the network is (network_dilated); elsewhere these mix the two.
        "tdf": tdf, "calibrated": wl.calibrated,
        "network_dilated": any(bool(h.get("network_dilated")) for h in hosts.values()),
        "hw_iter_ms": iter_s / tdf * 1e3 if iter_s is not None else None,
        "hw_compute_ms": comp / tdf * 1e3 if comp is not None else None,
        "hw_comm_ms": comm / tdf * 1e3 if comm is not None else None,
        "valid": all(v.get("valid", True) for v in validity) and not reasons,
        "invalid_reasons": reasons,
    }


def fidelity_records(wl: TorchWorkload, work_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The fidelity monitor's verdict and the projection of the point's own trace
    (testbed.fidelity.records, shared by every workload; its agreement rule: the
    emulated hardware time per iteration within 15 % of the projection)."""
    from testbed.fidelity.records import fidelity_and_projection  # noqa: PLC0415

    if not summary["device_valid"]:
        summary["invalid_reasons"] = [*summary["invalid_reasons"], "device model exceeded"]
    point = fidelity_and_projection(work_dir, wl.hardware, summary["tdf"], "torch",
                                    max(1, summary.get("iterations") or 0), summary, max_nodes=4000,
                                    extra={"collective": wl.collective})
    return point.records


def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    """The point's row of the end-of-run table and summary.csv, per iteration: hw_*
    hardware-equivalent (emulated / TDF; each point runs at its own TDF, so only
    these compare across points), projected_hw_* the hardware model's replay of the
    point's own trace, emu_* emulated wall time."""
    def rnd(x, k=4):
        return None if x is None else round(x, k)

    def ms(x):
        return None if x is None else x * 1e3
    return {"collective": r["collective"], "workers": r["workers"], "device": r["device"],
            "iterations": r["iterations"], "final_loss": rnd(r["final_loss"]),
            "final_acc": rnd(r["final_acc"]),
            "hw_iter_ms": rnd(r.get("hw_iter_ms"), 4), "hw_compute_ms": rnd(r.get("hw_compute_ms"), 4),
            "hw_comm_ms": rnd(r.get("hw_comm_ms"), 4),
            "projected_hw_iter_ms": rnd(r.get("projected_hw_iter_ms"), 4),
            "emu_iter_ms": rnd(ms(r.get("iter_s")), 2), "emu_compute_ms": rnd(ms(r["iter_compute_s"]), 2),
            "emu_comm_ms": rnd(ms(r["iter_comm_s"]), 2), "emu_wall_s": rnd(r["wall_s"], 2),
            "tdf": r.get("tdf"), "emu/proj": rnd(r.get("emulated_over_projected"), 2),
            "retx": r["retransmissions"], "device_valid": r["device_valid"], "valid": r.get("valid"),
            "ok": r["ok"]}
