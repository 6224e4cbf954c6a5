"""EASGD family workload: the five EASGD variants of You, Buluc, Demmel (SC17)
and the four SGD counterparts, LeNet on scikit-learn's digits.

    workload:
      kind: easgd
      variant: async_easgd        # easgd (original, round robin) | async_easgd | async_measgd |
                                  # hogwild_easgd | sync_easgd | async_sgd | async_msgd |
                                  # hogwild_sgd | sync_sgd
      steps: 150                  # local steps per worker
      tau: 4                      # steps between exchanges (EASGD variants)
      exchange_order: step_then_exchange   # or zhang: exchange and gradient at the pre-step W
      lr: 0.05
      alpha: null                 # moving rate; null = 0.9 / workers (Zhang: beta = P alpha = 0.9)
      collective: ring            # the allreduce of sync_easgd / sync_sgd: ring | tree | ps | switch
      pack: true                  # sync variants: one allreduce of the flat model per exchange (the
                                  # paper's packed message); false: one per parameter tensor
      device: {type: v100, time_scale: 100}   # or knl; cpu = measured CPU time
      target_acc: 0.9             # time to this test accuracy of the centre variable

Hosts: the asynchronous variants add a `master` host (hosts.easgd.master, the
centre variable); sync variants with collective ps add `ps` (hosts.dnn.run_script's
parameter server). Workers run hosts.easgd.worker. Records: `easgd_iter`
(every worker step), `easgd_exchange` (the master's log), `easgd_curve` (the
centre's test accuracy over time), `easgd_host`, `easgd_final`, the monitor's
`fidelity`, `projection` (1..256 workers from the traces) and one
`easgd_summary` per point.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from testbed import stats
from testbed.results import read_jsonl
from testbed.workloads import register_workload
from testbed.workloads.allreduce import InaParams
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for)
from testbed.workloads.calibrated import ITERATION_WALL_S, CalibratedWorkloadParams, dilation_block

FIGURES = ("easgd_accuracy_vs_time", "easgd_time_to_target", "easgd_comm_share", "easgd_weak_scaling")
VARIANT_NAMES = ("easgd", "async_easgd", "async_measgd", "hogwild_easgd", "sync_easgd",
                 "async_sgd", "async_msgd", "hogwild_sgd", "sync_sgd")
SYNC = ("sync_easgd", "sync_sgd")
EASGD_TCP_PORT = 48000          # master base (+1+s Hogwild servers); collectives at +100
COLLECTIVE_OFFSET = 100
DEVICE_KEYS = {"type", "precision", "efficiency", "hbm_efficiency", "launch_s", "time_scale"}
DEVICE_TYPES = ("cpu", "v100", "a100", "h100", "knl")
# Paper numbers drawn beside ours (You, Buluc, Demmel SC17; seeds.md 4.3 [V]).
PAPER_SYNC_VS_ORIGINAL = 5.3
PAPER_WEAK_SCALING = 0.915
PROJECTED_WORKERS = (16, 32, 64, 128, 256)
PROJECT_MAX_NODES = 600
CURVE_POINTS = 160     # saved centres evaluated per point (accuracy_curve)
# time_scale auto: the first (undilated) calibration round's TDF.
CALIBRATION_START = 200.0


register_figures_if_loaded(*FIGURES)


class LeNetWidths(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    c1: int = Field(16, ge=1, description="First conv layer's channels.")
    c2: int = Field(32, ge=1, description="Second conv layer's channels.")
    hidden: int = Field(64, ge=1, description="Hidden fully connected width.")


@register_workload
class EasgdWorkload(CalibratedWorkloadParams):
    """The EASGD family and its SGD counterparts on LeNet / digits."""

    FIGURES = FIGURES

    kind: Literal["easgd"] = Field("easgd", description="Workload type; selects which fields below apply.")
    variant: Literal[VARIANT_NAMES] = Field(  # type: ignore[valid-type]
        "async_easgd", description="easgd (original: the master serves workers in rank order), "
        "async_easgd (first come first served), async_measgd (+ Nesterov momentum locally), "
        "hogwild_easgd (several server processes, one shared centre, no lock), sync_easgd "
        "(elastic step through an allreduce every tau steps); counterparts async_sgd, async_msgd, "
        "hogwild_sgd, sync_sgd.")
    steps: int = Field(150, ge=1, description="Local steps per worker.")
    tau: int = Field(4, ge=1, description="Communication period: local steps between exchanges (EASGD variants; "
                                          "the SGD counterparts communicate every step).")
    lr: float = Field(0.05, gt=0, description="Learning rate eta.")
    alpha: Optional[float] = Field(None, gt=0, lt=1, description="Moving rate alpha = eta rho; null = 0.9 / workers "
                                                                 "(Zhang et al.'s beta = P alpha = 0.9) [I].")
    exchange_order: Literal["step_then_exchange", "zhang"] = Field(
        "step_then_exchange", description="Master variants' step order at an exchange: step_then_exchange "
        "(W' = W - eta g(W), then the elastic exchange of W') or zhang (the exchange and the gradient both at the "
        "pre-exchange W, W <- W - alpha (W - C) - eta g(W): Zhang et al.'s Algorithm 1 [I]). Sync EASGD is "
        "Zhang's order either way (docs/easgd.md, The step order).")
    momentum: float = Field(0.9, ge=0, lt=1, description="delta: Nesterov (async_measgd) / momentum at the master "
                                                          "(async_msgd).")
    momentum_lr: Optional[float] = Field(None, gt=0, description="eta of the momentum variants (async_measgd, "
                                         "async_msgd); null = lr x (1 - momentum), the same effective step as "
                                         "plain SGD's [A: a momentum run at plain SGD's eta diverged here].")
    batch_size: int = Field(32, ge=1, description="Samples per worker per step (the device model's batch).")
    model: LeNetWidths = Field(default_factory=LeNetWidths, description="LeNet widths.")
    dataset: dict[str, Any] = Field(
        default_factory=lambda: {"source": "digits"},
        description="{source: digits} (scikit-learn's, bundled), {source: mnist, path: DIR} (idx files) or "
                    "{source: cifar10, path: DIR} (binary batches); limit: first n training samples. "
                    "Relative paths start at the project root.")
    collective: Literal["ring", "tree", "ps", "switch"] = Field(
        "ring", description="The allreduce of the sync variants: ring (reduce-scatter + allgather), tree "
        "(binomial-tree reduce to rank 0 + broadcast, the paper's MPI reduce + broadcast [A: shape assumed]), "
        "ps (a parameter-server host) or switch (in-network aggregation).")
    pack: bool = Field(True, description="Sync variants: true, one allreduce of the whole flat model per "
                                         "exchange (the paper's co-design: one packed message); false, one "
                                         "allreduce per parameter tensor (layer by layer, as a framework without "
                                         "the co-design sends). The master variants ignore it, as they ignore "
                                         "collective (a sweep over variants may set both).")
    hogwild_servers: Optional[int] = Field(None, ge=1, description="Hogwild server processes; null = one per worker.")
    device: dict[str, Any] = Field(default_factory=lambda: {"type": "v100", "time_scale": "auto"},
                                   description="Device model (hosts/dnn/device.py): {type: v100|a100|h100|knl|cpu, "
                                               "precision, efficiency, hbm_efficiency, launch_s, time_scale}. "
                                               "time_scale auto (default): calibrated on the built network "
                                               "(docs/easgd.md, Time); a number: fixed.")
    calibration_iterations: int = Field(3, ge=1, le=20, description="time_scale auto: exchanges (or allreduces) "
                                                                     "per worker per calibration round.")
    target_acc: float = Field(0.9, gt=0, le=1, description="Test accuracy of the centre whose first time is "
                                                            "'time to target'.")
    snapshot_every_s: float = Field(0.05, gt=0, description="The centre is saved this often (emulated s).")
    hardware: str = Field("tor-100g-host", description="Hardware network profile (testbed/fidelity/profiles) "
                                                       "for the fidelity monitor and the projection.")
    seed: int = Field(1, ge=0, description="Model init, data split and batch order.")
    timeout_s: float = Field(300.0, gt=0, description="A message that makes no progress this long fails; the "
                                                      f"point fails after this + 60 s + {ITERATION_WALL_S:g} s "
                                                      "per step and calibration iteration.")
    ina: InaParams = Field(default_factory=InaParams, description="In-switch transport (collective switch).")

    @field_validator("device")
    @classmethod
    def _device(cls, v: dict[str, Any]) -> dict[str, Any]:
        kind = v.get("type", "cpu")
        if kind not in DEVICE_TYPES:
            raise ValueError(f"device.type {kind!r}: use one of {', '.join(DEVICE_TYPES)}")
        bad = sorted(set(v) - (DEVICE_KEYS if kind != "cpu" else {"type"}))
        if bad:
            raise ValueError(f"device: unknown key(s) {bad} for type {kind}")
        ts = v.get("time_scale", 1.0)
        if ts != "auto" and (isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts <= 0):
            raise ValueError(f"device.time_scale must be a number > 0 or auto, got {ts!r}")
        try:
            from hosts.dnn.device import DnnDevice  # noqa: PLC0415 - no torch import there
            if kind != "cpu":
                DnnDevice(kind, **{k: (CALIBRATION_START if k == "time_scale" and x == "auto" else x)
                                   for k, x in v.items() if k != "type"})
        except (TypeError, ValueError) as e:
            raise ValueError(f"device: {e}") from None
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: dict[str, Any]) -> dict[str, Any]:
        from hosts.easgd.datasets import DatasetError, check  # noqa: PLC0415
        try:
            check(_resolved(v))
        except (DatasetError, OSError) as e:
            raise ValueError(str(e)) from None
        return v

    def dataset_spec(self) -> dict[str, Any]:
        return _resolved(self.dataset)

    @field_validator("hardware")
    @classmethod
    def _hardware(cls, v: str) -> str:
        from testbed.fidelity.constants import ProfileError, load_profile  # noqa: PLC0415
        try:
            load_profile(v)
        except (ProfileError, OSError) as e:
            raise ValueError(f"hardware: {e}") from None
        return v

    @property
    def calibrated(self) -> bool:
        return self.device.get("type", "cpu") != "cpu" and self.device.get("time_scale") == "auto"

    # at_fixed_tdf stays None (no retry): its calibration rounds train (CalibratedWorkloadParams).

    @property
    def time_scale(self) -> float:
        """The fixed TDF, or calibration's starting one."""
        ts = self.device.get("time_scale", 1.0)
        return CALIBRATION_START if ts == "auto" else float(ts)

    def device_spec(self) -> dict[str, Any]:
        """The hosts' device block (auto starts at CALIBRATION_START)."""
        return {**self.device, **({"time_scale": self.time_scale} if "time_scale" in self.device else {})}

    def lr_for(self) -> float:
        if self.variant not in ("async_measgd", "async_msgd"):
            return self.lr
        return self.momentum_lr if self.momentum_lr is not None else self.lr * (1 - self.momentum)

    def alpha_for(self, workers: int) -> float:
        return self.alpha if self.alpha is not None else 0.9 / workers

    def extra_hosts(self) -> list[str]:
        if self.variant not in SYNC:
            return ["master"]
        return ["ps"] if self.collective == "ps" else []


def _resolved(spec: dict[str, Any]) -> dict[str, Any]:
    """The dataset spec with its path made absolute (hosts run from the project root too,
    but a config should not depend on the working directory)."""
    from testbed.results import PROJECT_ROOT  # noqa: PLC0415
    if not spec.get("path"):
        return dict(spec)
    p = Path(spec["path"]).expanduser()
    return {**spec, "path": str(p if p.is_absolute() else PROJECT_ROOT / p)}


def workers_of(scenario: Any) -> list[str]:
    return [h for h in scenario.hosts() if h not in scenario.workload.extra_hosts()]



# ---------------------------------------------------------------------------
# Hardware time of the exchanges (calibration, network dilation)
# ---------------------------------------------------------------------------
def model_values(wl: EasgdWorkload) -> int:
    """Values of the flat model: every message and allreduce carries this many floats."""
    from hosts.easgd.model import initial_weights  # noqa: PLC0415 - torch only when running
    return int(initial_weights(wl.seed, wl.model.model_dump(), wl.dataset_spec()).numel())


def update_hw_s(wl: EasgdWorkload, values: int) -> float:
    """The master's modeled update per message (hosts/easgd/timing.py update_hw_s)."""
    from hosts.easgd.config import master_rule  # noqa: PLC0415
    from hosts.easgd.timing import update_hw_s as on_device  # noqa: PLC0415
    dev = wl.device if wl.device.get("type", "cpu") != "cpu" else {"type": "v100"}
    return on_device(dev, values, master_rule(wl.variant))


def hw_op_s(wl: EasgdWorkload, values: int, workers: int) -> float:
    """Hardware seconds of one traced operation: an allreduce of the model (sync
    variants), or a master round trip = 2 message times + the master's update."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time, message_time  # noqa: PLC0415
    prof = load_profile(wl.hardware)
    if wl.variant in SYNC:
        return collective_time("allreduce", wl.collective, values, 4, workers, prof,
                               scale_round=wl.collective == "switch")
    return 2 * message_time(4 * values, prof) + update_hw_s(wl, values)


def network_dilation(wl: EasgdWorkload, switch_info: dict[str, Any], op_s: float) -> dict[str, Any] | None:
    """The hosts' network_dilation block (as LHC's): None without a soft switch, on a
    measured CPU device or with dilate_network false."""
    return dilation_block(wl, switch_info, wl.device.get("type", "cpu") != "cpu", lambda: max(op_s, 1e-6))


# ---------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------
@register_runtime
class EasgdRuntime(WorkloadRuntime):
    kind = "easgd"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl: EasgdWorkload = scn.workload
        workers = workers_of(scn)
        sync = wl.variant in SYNC
        if sync and wl.collective == "switch":
            ctx.require_switch("collective 'switch'", "collective ring/ps")
        port = ctx.tcp_port_base(EASGD_TCP_PORT, span=COLLECTIVE_OFFSET + 80)
        servers = min(wl.hogwild_servers or len(workers), len(workers))
        settings = {"variant": wl.variant, "steps": wl.steps, "tau": wl.tau, "lr": wl.lr_for(),
                    "alpha": wl.alpha_for(len(workers)), "momentum": wl.momentum,
                    "batch_size": wl.batch_size, "seed": wl.seed, "model": wl.model.model_dump(),
                    "snapshot_every_s": wl.snapshot_every_s, "dataset": wl.dataset_spec(),
                    "exchange_order": wl.exchange_order, "pack": wl.pack}
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in workers]
        coll = wl.collective if sync else "gloo"      # async workers never open a collective
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if sync and wl.collective == "ps" else None
        values = model_values(wl)
        op_s = hw_op_s(wl, values, len(workers)) if len(workers) > 1 or not sync else 0.0
        calibrate = wl.calibrated          # one sync worker: compute only (no op crosses the network)
        nd = network_dilation(wl, ctx.switch or {}, op_s)
        wtiming = {"calibration": ({"rounds": wl.calibration_rounds, "iterations": wl.calibration_iterations,
                                    "hw_op_s": op_s, "iteration_wall_s": ITERATION_WALL_S} if calibrate else None),
                   "network_dilation": nd}
        common = {"world": len(workers), "collective": coll, "peers": peers, "ps": ps,
                  "port": port + COLLECTIVE_OFFSET, "master_addr": peers[0]["ip"],
                  "master_port": port + COLLECTIVE_OFFSET + 60,
                  "script": "hosts/easgd/worker.py", "args": [], "batch_size": wl.batch_size,
                  "seed": wl.seed, "device": wl.device_spec(), "start_at": ctx.start_at,
                  "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s}
        progs = []
        master = None
        if not sync:
            master = {"name": "master", "ip": ctx.hosts["master"].ip, "port": port}
            mcfg = {"master": {"host": "master", "ip": master["ip"], "port": port, "workers": peers,
                               "servers": servers, "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s,
                               "start_at": ctx.start_at, "out": str(ctx.work_dir / "master.jsonl"),
                               "snapshots": str(ctx.work_dir / "centre.npz"), "trace": str(ctx.work_dir),
                               "timing": {"time_scale": wl.time_scale, "update_hw_s": update_hw_s(wl, values),
                                          "calibration": ({"rounds": wl.calibration_rounds,
                                                           "iterations": wl.calibration_iterations}
                                                          if calibrate else None)}},
                    "easgd": settings}
            progs.append(HostProgram("master", self.module_argv("hosts.easgd.master",
                                                                self.write_config(ctx, "master", mcfg)), phase=0))
        if ps is not None:
            cfg = dict(common, host="ps", role="ps", rank=-1, ina=None, gloo_ifname=None, trace=None,
                       straggler=straggler_for(scn, "ps"), out=str(ctx.work_dir / "ps.jsonl"))
            progs.append(HostProgram("ps", self.module_argv("hosts.dnn.run_script",
                                                            self.write_config(ctx, "ps", cfg)), phase=0))
        for rank, h in enumerate(workers):
            ina = None
            if sync and wl.collective == "switch":
                ina = {**ina_settings(ctx.switch, h), "job_id": 1, **wl.ina.model_dump(exclude_none=True)}
            tcfg = dict(common, host=h, role="worker", rank=rank, ina=ina, gloo_ifname=None,
                        trace=str(ctx.work_dir / f"{h}.trace.jsonl"), straggler=straggler_for(scn, h),
                        out=str(ctx.work_dir / f"{h}.jsonl"))
            cfg = {"worker": {"torch": tcfg, "master": master, "servers": servers, "timing": wtiming,
                              "snapshots": str(ctx.work_dir / "centre.npz") if sync and rank == 0 else None},
                   "easgd": settings}
            progs.append(HostProgram(h, self.module_argv("hosts.easgd.worker",
                                                         self.write_config(ctx, h, cfg)), phase=1))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        from testbed.switch.jobs import JobRequest  # noqa: PLC0415
        wl = point.scenario.workload
        if wl.variant in SYNC and wl.collective == "switch":
            return [JobRequest(1, tuple(workers_of(point.scenario)))]
        return []

    def timeout_s(self, ctx: PointContext) -> float:
        # ITERATION_WALL_S per step and calibration iteration: what a calibrated TDF may
        # make one last (a longer one is refused, hosts/easgd/timing.py).
        wl = ctx.point.scenario.workload
        cal = wl.calibration_rounds * wl.calibration_iterations if wl.calibrated else 0
        return wl.timeout_s + ITERATION_WALL_S * (wl.steps + cal) + 60.0

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [summary_row(r) for r in records if r.get("type") == "easgd_summary"]


# ---------------------------------------------------------------------------
# collect (functions of the hosts' outputs)
# ---------------------------------------------------------------------------
_RENAME = {"iteration": "easgd_iter", "final": "easgd_final", "summary": "easgd_host",
           "exchange": "easgd_exchange", "calibration": "calibration"}


def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: EasgdWorkload = scenario.workload
    workers = workers_of(scenario)
    out: list[dict[str, Any]] = []
    for h in workers + wl.extra_hosts():
        for r in read_jsonl(work_dir / f"{h}.jsonl"):
            t = _RENAME.get(r.get("type"))
            if t is not None:
                out.append(dict(r, type=t, host=h))
    starts = [r["t0_perf"] for r in out if r["type"] == "easgd_final" and r.get("t0_perf") is not None]
    curve = accuracy_curve(wl, work_dir / "centre.npz", min(starts) if starts else None)
    out.extend(curve)
    summary = point_summary(wl, workers, out, curve)
    out.extend(fidelity_records(scenario, work_dir, summary))
    out.append(summary)
    return out


def accuracy_curve(wl: EasgdWorkload, path: Path, start: float | None) -> list[dict[str, Any]]:
    """Test accuracy of every saved centre (the master's, or rank 0's for sync), at
    seconds since the first worker started training (`start`, perf_counter)."""
    if not path.is_file() or start is None:
        return []
    from hosts.easgd.model import Evaluator  # noqa: PLC0415 - torch only when collecting
    data = np.load(path)
    acc = Evaluator(wl.seed, wl.model.model_dump(), wl.dataset_spec())
    # A dilated run lasts TDF x its hardware time and saves hundreds of centres; each
    # evaluation is a test-set pass (~0.3 s here), so at most CURVE_POINTS evenly
    # spaced ones are evaluated, the first and last always (time-to-target resolution:
    # the run / CURVE_POINTS).
    keep = np.unique(np.linspace(0, len(data["t_perf"]) - 1, min(len(data["t_perf"]), CURVE_POINTS)).round()
                     .astype(int))
    return [{"type": "easgd_curve", "t_s": max(0.0, float(data["t_perf"][i]) - start), "acc": acc(data["centre"][i])}
            for i in keep]


def comm_share(comm_s: dict[Any, float], span_s: dict[Any, float]) -> float | None:
    """Share of the workers' time spent in exchanges: sum over workers of the time in
    exchanges (sends, waits for replies, allreduces, with any wait for a peer inside
    them) / sum of each worker's time from its first step to its OWN last one. A fast
    worker that finished early under an asynchronous master is not idling "in
    communication" until the straggler ends (1 - busy / makespan counted that tail).
    The emulated and the projected shares both use this (docs/easgd.md, Time)."""
    ranks = [r for r in span_s if r in comm_s and span_s[r] > 0]
    total = sum(span_s[r] for r in ranks)
    return sum(comm_s[r] for r in ranks) / total if total > 0 else None


def projected_comm_share(proj: Any, workers: int) -> float | None:
    """comm_share of a projection: per worker rank (< workers; a server rank's busy time
    is the master's updates) the time its device was not busy up to its own finish."""
    finish = {int(r): v for r, v in proj.finish_s.items() if int(r) < workers}
    busy = {int(r): v for r, v in proj.compute_s.items()}
    return comm_share({r: v - busy.get(r, 0.0) for r, v in finish.items()}, finish)


def time_to_target(curve: list[dict[str, Any]], target: float) -> float | None:
    """When the smoothed accuracy curve reaches the target (testbed.stats.time_to_target:
    an oscillating curve's first lucky crossing does not count); None if it never does."""
    return stats.time_to_target([r["t_s"] for r in curve], [r["acc"] for r in curve], target,
                                lower_is_better=False)


def point_summary(wl: EasgdWorkload, workers: list[str], recs: list[dict[str, Any]],
                  curve: list[dict[str, Any]]) -> dict[str, Any]:
    hosts = {r["host"]: r for r in recs if r["type"] == "easgd_host"}
    finals = {r["host"]: r for r in recs if r["type"] == "easgd_final"}
    master = hosts.get("master")
    worker_ex = {str(finals[h]["rank"]): finals[h]["exchanges"] for h in workers if h in finals}
    compute = sum(hosts[h].get("compute_s", 0.0) for h in workers if h in hosts)
    comm = sum(hosts[h].get("comm_s", 0.0) for h in workers if h in hosts)
    validity = [hosts[h].get("validity") or {} for h in workers if h in hosts]
    validity += [v for v in ((master or {}).get("validity") or {}).values() if v]   # the master's updates
    # The TDF the hosts ran at (calibrated or fixed): one value, or the point is wrong.
    tdfs = {hosts[h].get("tdf") for h in workers if h in hosts and hosts[h].get("tdf")}
    if master is not None and master.get("tdf"):
        tdfs.add(master["tdf"])
    if len(tdfs) > 1:
        raise ValueError(f"hosts ran at different TDFs {sorted(tdfs)}: calibration did not agree")
    tdf = tdfs.pop() if tdfs else wl.time_scale
    tdf = tdf if wl.device.get("type", "cpu") != "cpu" else 1.0
    # wall: first worker's training start to the last worker's end (one clock for all)
    ends = [(r["t0_perf"], r["t_end_perf"]) for r in finals.values() if r.get("t_end_perf") is not None]
    wall = (max(e for _, e in ends) - min(s for s, _ in ends)) if ends else None
    ok = bool(workers) and all(hosts.get(h, {}).get("ok") for h in workers) and \
        (master is None or bool(master.get("ok")))
    return {
        "type": "easgd_summary", "variant": wl.variant, "workers": len(workers), "tau": wl.tau,
        "collective": wl.collective if wl.variant in SYNC else "master",
        "pack": wl.pack if wl.variant in SYNC else None,
        "device": wl.device.get("type", "cpu"), "time_scale": tdf, "tdf": tdf, "calibrated": wl.calibrated,
        "network_dilated": any(bool(hosts[h].get("network_dilated")) for h in workers if h in hosts), "ok": ok,
        "errors": {h: r.get("error") for h, r in hosts.items() if r.get("error")},
        "steps": wl.steps, "wall_s": wall, "target_acc": wl.target_acc,
        "time_to_target_s": time_to_target(curve, wl.target_acc),
        # hardware-equivalent seconds (emulated / TDF): calibrated points' TDFs differ
        "hw_wall_s": wall / tdf if wall is not None else None,
        "hw_time_to_target_s": (time_to_target(curve, wl.target_acc) / tdf
                                if time_to_target(curve, wl.target_acc) is not None else None),
        "final_acc": curve[-1]["acc"] if curve else None,
        "max_acc": max((r["acc"] for r in curve), default=None),
        "comm_share": comm_share({h: hosts[h].get("comm_s", 0.0) for h in workers if h in hosts},
                                 {h: finals[h]["t_end_perf"] - finals[h]["t0_perf"] for h in workers
                                  if h in finals and finals[h].get("t_end_perf") is not None}),
        "compute_s": compute, "comm_s": comm,
        "exchanges_worker": worker_ex,
        "exchanges_master": (master or {}).get("exchanges"),
        "exchanges_match": None if master is None else master.get("exchanges") == worker_ex,
        "w_sha256": {str(finals[h]["rank"]): finals[h]["w_sha256"] for h in workers if h in finals},
        "c_sha256": {str(finals[h]["rank"]): finals[h].get("c_sha256") for h in workers if h in finals},
        "device_valid": all(v.get("valid", True) for v in validity),
        "device_violations": sum(v.get("violations", 0) for v in validity),
        "device_overruns": device_overruns(workers, hosts, master),
        "hogwild_overlap": hogwild_overlap([r for r in recs if r["type"] == "easgd_exchange"]),
    }


def device_overruns(workers: list[str], hosts: dict[str, dict[str, Any]],
                    master: dict[str, Any] | None) -> list[str]:
    """Who overran the dilated device model, for the reason a reader sees: 'w2: 1 of 200
    steps (worst 1.05x)', 'master server 0: 1 of 800 updates (worst 1.17x)'."""
    out = []
    for h in workers:
        v = (hosts.get(h) or {}).get("validity") or {}
        if v.get("violations"):
            out.append(f"{h}: {v['violations']} of {v.get('steps')} steps (worst {v.get('worst_ratio', 0):.2f}x)")
    for s, v in sorted(((master or {}).get("validity") or {}).items()):
        if v and v.get("violations"):
            out.append(f"master server {s}: {v['violations']} of {v.get('steps')} updates "
                       f"(worst {v.get('worst_ratio', 0):.2f}x)")
    return out


def hogwild_overlap(exchanges: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How often two server processes were inside the centre at once: pairs of
    [t_read, t_write] intervals from different servers that intersect."""
    servers = {r.get("server", 0) for r in exchanges}
    if len(servers) < 2:
        return None
    ev = sorted(exchanges, key=lambda r: r["t_read"])
    pairs, overlapped = 0, set()
    open_: list[dict[str, Any]] = []
    for r in ev:
        open_ = [o for o in open_ if o["t_write"] > r["t_read"]]
        for o in open_:
            if o["server"] != r["server"]:
                pairs += 1
                overlapped.update({(o["rank"], o["seq"]), (r["rank"], r["seq"])})
        open_.append(r)
    return {"servers": len(servers), "exchanges": len(ev), "overlapping_pairs": pairs,
            "exchanges_overlapped": len(overlapped)}


def fidelity_records(scenario: Any, work_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The fidelity monitor's verdict and the projection at 1..256 workers: the
    shared testbed.fidelity.records helper for the verdict and the own-count
    projection (every rank's own trace), project_world beyond. The master
    variants' p2p messages and the master's server trace are checked and projected
    like the sync variants' allreduces (docs/time-fidelity.md, point-to-point
    messages and servers)."""
    from testbed.fidelity.projector import project_world  # noqa: PLC0415
    from testbed.fidelity.records import check_agreement, fidelity_and_projection  # noqa: PLC0415

    wl: EasgdWorkload = scenario.workload
    summary["valid"] = bool(summary["device_valid"])
    summary["invalid_reasons"] = ([] if summary["device_valid"] else
                                  [f"device model exceeded (CPU time over TDF x modeled): "
                                   + "; ".join(summary["device_overruns"] or
                                               [f"{summary['device_violations']} steps"])])
    point = fidelity_and_projection(work_dir, wl.hardware, summary["tdf"], "easgd", None, summary,
                                    max_nodes=PROJECT_MAX_NODES, agreement_tolerance=None,
                                    extra={"variant": wl.variant})
    fid = point.fidelity
    fid.update(calibrated=wl.calibrated, tdf=summary["tdf"])
    if point.projected is None:                  # no traces, or the projector refused them
        err = fid.get("projection_error")
        if err:
            summary["valid"] = fid["valid"] = False
            summary["invalid_reasons"].append(f"projection failed: {err}")
            fid["reasons"] = summary["invalid_reasons"]
        summary["projection"] = f"failed: {err}" if err else "no traces"
        return point.records
    traces, profile = point.traces, point.profile
    world = len([t for t in traces if t[0].get("role") != "server"])
    records = []
    base = None
    try:
        for n in sorted({1, world, *PROJECTED_WORKERS}):
            cap = PROJECT_MAX_NODES if n <= world else max(40, PROJECT_MAX_NODES * 4 // n)
            proj = point.projected if n == world else project_world(traces, n, profile, max_nodes=cap)
            if n == 1:
                base = proj.makespan_s
            records.append({"type": "projection", "workload": "easgd", "variant": wl.variant, "workers": n,
                            "emulated": n == world, "profile": profile.label(), "hw_train_s": proj.makespan_s,
                            "comm_share": projected_comm_share(proj, n),
                            "weak_scaling_eff": (base / proj.makespan_s) if base and proj.makespan_s > 0 else None,
                            "truncated": bool(proj.truncated)})
    except (ValueError, KeyError, RuntimeError) as e:     # a count the projector cannot replay
        summary["projection"] = f"failed: {e}"
        summary["valid"] = fid["valid"] = False
        summary["invalid_reasons"].append(f"projection failed: {e}")
        fid["reasons"] = summary["invalid_reasons"]
        return [fid, {"type": "projection", "workload": "easgd", "variant": wl.variant, "error": str(e)}]
    summary["projection"] = "projected"
    own = next(r for r in records if r["workers"] == world)
    summary["projected_hw_train_s"] = own["hw_train_s"]
    summary["projected_comm_share"] = own["comm_share"]
    summary["projected_eff_256"] = records[-1]["weak_scaling_eff"]
    # Time to target on the hardware model: the same fraction of the projected run as of
    # the emulated one (exact for the sync variants' lockstep; for the asynchronous ones
    # it assumes progress per emulated second is even over the run).
    if summary.get("wall_s") and summary.get("time_to_target_s") is not None:
        summary["projected_time_to_target_s"] = own["hw_train_s"] * summary["time_to_target_s"] / summary["wall_s"]
    if summary.get("hw_wall_s") and own["hw_train_s"]:
        summary["emulated_vs_projected"] = summary["hw_wall_s"] / own["hw_train_s"]
        check_agreement(summary, fid, summary["emulated_vs_projected"])
    return [fid, *records]


def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    """The point's row of the end-of-run table and summary.csv: hw_* hardware-equivalent
    (emulated / TDF; calibrated points' TDFs differ, so only these compare across
    points), projected_hw_* the hardware model's replay of the point's own trace,
    emu_* emulated wall time."""
    def rnd(x, k=3):
        return None if x is None else round(x, k)

    def ms(x):
        return None if x is None else x * 1e3
    return {"variant": r["variant"], "workers": r["workers"], "tau": r["tau"],
            "via": f"{r['collective']}/tensor" if r.get("pack") is False else r["collective"],
            "final_acc": rnd(r["final_acc"]),
            # what `testbed reproduce easgd` reads: hw_wall_ms, comm_share
            "hw_wall_ms": rnd(ms(r.get("hw_wall_s")), 2),
            "projected_hw_wall_ms": rnd(ms(r.get("projected_hw_train_s")), 2),
            "hw_t_target_ms": rnd(ms(r.get("hw_time_to_target_s")), 2),
            "projected_hw_t_target_ms": rnd(ms(r.get("projected_time_to_target_s")), 2),
            "emu_wall_s": rnd(r.get("wall_s"), 2), "emu_t_target_s": rnd(r.get("time_to_target_s"), 2),
            "tdf": r.get("tdf"), "emu/proj": rnd(r.get("emulated_vs_projected"), 2),
            "net_p50": rnd(r.get("net_ratio_p50"), 2),
            "comm_share": rnd(r["comm_share"]), "projected_comm_share": rnd(r.get("projected_comm_share")),
            "exch_match": r["exchanges_match"], "device_valid": r["device_valid"],
            "valid": r.get("valid"), "ok": r["ok"]}
