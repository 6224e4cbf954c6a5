"""PHub workload: a parameter hub (chunked keys, tall aggregation, the optimizer in
the server, no pull requests) against a wide-aggregation PS, a host ring and
in-switch aggregation, on the same network and model (hosts/phub/, docs/phub.md).

Metric records (metrics.jsonl):
  phub_iter     one per worker and iteration (iteration seconds, loss for the CNN)
  phub_core     one per server core: bytes, messages, seconds per stage (receive,
                aggregate, optimize, send, idle: the emulator's Python time),
                aggregation GB/s and a plain numpy sum's GB/s over the same
                bytes, measured in the same process
  (phub_summary's server_hw_<stage>_us_per_iter: the same stages in hardware
                time, from the server's trace and its core model: hw_stages)
  phub_summary  one per point: median iteration time (the slowest worker's per
                iteration), server totals, weights agreement, device validity, the
                fidelity monitor's verdict where it models the point's messages, and
                the final weights against the plain PS's on the same gradients
                (weights_check: weights_match_plain_ps, weights_max_*_diff; a
                mismatch fails the point)
Time: compute is a modeled GPU per layer (hosts/dnn/device.py's FLOPs model),
slept x the TDF; the server's cores pace a modeled core's work the same way
(hosts/phub/server.py). device.time_scale auto (default) calibrates the TDF on
the point's own exchanges (hosts/phub/timing.py, hosts.common.calibration's
Calibrator) against `hw_table` (the network model's time of one key's exchange);
on the soft switch the network is dilated to that TDF (`network_dilation`).
Fidelity (testbed.fidelity.records): the monitor's verdict and the projection at
the point's worker count, and the same trace shape projected at 16-64 workers
(PHub's server played by the service model, replying once every worker's copy
of a chunk is in: reply_after "all").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from testbed.results import read_jsonl
from testbed.workloads import register_workload
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for)
from testbed.workloads.calibrated import ITERATION_WALL_S, CalibratedWorkloadParams, dilation_block

FIGURES = ("phub_iteration", "phub_stages", "phub_server")
PHUB_TCP_PORT = 47900
# time_scale auto: the first calibration round's TDF (as LHC's and P4SGD's CALIBRATION_START).
CALIBRATION_START = 500.0
# Worker counts the projection adds beyond what the machine emulates.
PROJECTED_WORKERS = (16, 32, 64)
# The network model's algorithm for one key's exchange (calibration's hardware time):
# PHub's per-key push/update is a parameter server's allreduce of that key.
# sharded_ps: a key's exchange with its one server (a big key's parts run in parallel on
# every server) is a parameter server's allreduce of it [A: the colocated server's share
# of the traffic stays on its host; the table charges it to the network].
HW_ALGO = {"phub": "ps", "wide_ps": "ps", "ring": "ring", "switch": "switch", "sharded_ps": "ps"}
# The name a sharded_ps server runs under (its output, config and trace) beside its worker.
KV_SERVER_SUFFIX = ".kv"
register_figures_if_loaded(*FIGURES)


class ModelParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    kind: Literal["profile", "cnn"] = Field("profile", description="profile: a layer profile with modeled "
                                            "compute; cnn: the LeNet-class CNN on the digits, trained for real.")
    name: Literal["resnet50", "inception_v3", "alexnet"] = Field("resnet50", description="profile's model.")
    size_scale: float = Field(0.01, gt=0, le=1, description="profile: every layer's size and FLOPs x this "
                                                            "(the emulated network carries that many bytes).")


class OptimizerParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    kind: Literal["sgd", "nesterov"] = Field("nesterov", description="The optimizer (in PHub's server; "
                                             "on the workers for the baselines).")
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)


class DeviceParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    type: Literal["v100", "a100", "h100"] = Field("v100", description="Modeled GPU (hosts/dnn/device.py).")
    time_scale: Union[Literal["auto"], float] = Field(
        "auto", description="TDF of the modeled compute (and the server's modeled cores). auto (default): "
                            "calibrated by the workers on the point's own exchanges (docs/time-fidelity.md).")

    @field_validator("time_scale")
    @classmethod
    def _ts(cls, v):
        if v != "auto" and v <= 0:
            raise ValueError(f"time_scale must be > 0 or auto, got {v}")
        return v

    @property
    def calibrated(self) -> bool:
        return self.time_scale == "auto"

    def start_tdf(self) -> float:
        return float(CALIBRATION_START if self.time_scale == "auto" else self.time_scale)


@register_workload
class PhubWorkload(CalibratedWorkloadParams):
    """PHub vs wide-aggregation PS, MXNet-kvstore-like sharded PS, ring and in-switch aggregation."""

    FIGURES = FIGURES

    kind: Literal["phub"] = Field("phub", description="Workload type; selects which fields below apply.")
    algorithm: Literal["phub", "wide_ps", "ring", "switch", "sharded_ps"] = Field(
        "phub", description="phub: chunked tall aggregation + optimizer in the server; wide_ps: whole-tensor "
                            "PS then pulls; ring: host ring allreduce; switch: in-switch aggregation; "
                            "sharded_ps: MXNet kvstore dist_sync (the paper's baseline): keys sharded over "
                            "servers colocated with the workers, per-layer pushes overlapped with backward, "
                            "optimizer on the servers, pulls.")
    servers_per_worker: float = Field(
        1.0, gt=0, le=1, description="sharded_ps: kvstore servers per worker (ceil(x * workers) servers, one "
                                     "on each of the first workers' hosts). 1.0: MXNet's usual launch runs one "
                                     "server per worker [A].")
    model: ModelParams = Field(default_factory=ModelParams, description="What the workers train.")
    chunk_bytes: int = Field(32768, ge=4, description="PHub's key chunk size in bytes (multiple of 4).")
    server_cores: int = Field(2, ge=1, le=64, description="PHub server processes (chunk owners).")
    jobs: int = Field(1, ge=1, le=4, description="Jobs sharing the server (workers split evenly).")
    racks: int = Field(1, ge=1, le=8, description="Cross-rack PHub (hosts/phub/rack.py): one PHub server per "
                       "rack on a tree topology with this many leaves; the first host of each leaf is its "
                       "rack's server (topology.workers counts it), the others train. 1: one server.")
    aggregation_order: Literal["rank", "arrival"] = Field(
        "rank", description="How a PHub core sums a chunk's copies (hosts/phub/server.py). rank (default): in "
                            "rank order, the plain PS's sum bit for bit, a copy that comes early waits; "
                            "arrival: each copy is added as it arrives (PHub's own behaviour), which differs "
                            "from the plain PS's sum by float rounding from 3 workers on.")
    iterations: int = Field(5, ge=1)
    warmup: int = Field(1, ge=0)
    batch_size: int = Field(32, ge=1, description="Per worker (the device model's batch).")
    seed: int = Field(1)
    optimizer: OptimizerParams = Field(default_factory=OptimizerParams)
    device: DeviceParams = Field(default_factory=DeviceParams)
    timeout_s: float = Field(120.0, gt=0)
    calibration_iterations: int = Field(2, ge=1, le=10, description="time_scale auto: training iterations "
                                        "per calibration round (PHub: each iteration's first key exchange "
                                        "is measured; baselines: every allreduce).")

    @field_validator("chunk_bytes")
    @classmethod
    def _mult4(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"chunk_bytes must be a multiple of 4 (float32 values), got {v}")
        return v

    @model_validator(mode="after")
    def _jobs(self) -> "PhubWorkload":
        if self.jobs > 1 and self.algorithm != "phub":
            raise ValueError(f"jobs > 1 shares a PHub server; algorithm {self.algorithm} has none")
        if self.racks > 1 and (self.algorithm != "phub" or self.jobs > 1 or self.server_cores != 1):
            raise ValueError(f"racks {self.racks}: cross-rack PHub runs algorithm phub, one job, and one core per "
                             f"rack server (server_cores: 1); got algorithm {self.algorithm}, jobs {self.jobs}, "
                             f"server_cores {self.server_cores}")
        if self.aggregation_order == "arrival" and (self.algorithm not in ("phub", "sharded_ps") or self.racks > 1):
            raise ValueError(f"aggregation_order arrival is the PHub server's own (algorithm phub, one server) "
                             f"and MXNet kvstore's (sharded_ps); algorithm {self.algorithm} with racks "
                             f"{self.racks} sums in rank order (the plain PS's order; cross-rack PHub chains the "
                             "racks' rank-ordered partial sums)")
        if self.servers_per_worker != 1.0 and self.algorithm != "sharded_ps":
            raise ValueError(f"servers_per_worker is sharded_ps's; algorithm {self.algorithm} has its own servers")
        if self.calibrated and self.jobs > 1:
            raise ValueError("device.time_scale auto with jobs > 1: each job would calibrate and dilate the "
                             "network on its own; give a fixed time_scale")
        return self

    @property
    def calibrated(self) -> bool:
        """time_scale auto on a modeled device (the CNN is measured: TDF 1, nothing to calibrate)."""
        return self.model.kind == "profile" and self.device.calibrated

    # at_fixed_tdf stays None (no retry): its calibration rounds train (CalibratedWorkloadParams).

    def tdf_start(self) -> float:
        return self.device.start_tdf() if self.model.kind == "profile" else 1.0

    def calibration_iterations_total(self) -> int:
        return self.calibration_rounds * self.calibration_iterations if self.calibrated else 0

    def extra_hosts(self) -> list[str]:
        return ["ps"] if self.algorithm in ("phub", "wide_ps") and self.racks == 1 else []


def roles(scenario: Any) -> tuple[list[str], list[str]]:
    """(training workers in rank order, servers: their output's name). racks > 1: the
    tree's leaf blocks (testbed.net.topology.split_workers), the first host of each its
    rack's server; sharded_ps: every host trains and the first k also run a kvstore
    server (`kv_servers`); ValueError names a topology that does not fit."""
    wl: PhubWorkload = scenario.workload
    hosts = scenario.hosts()
    if wl.algorithm == "sharded_ps":
        return list(hosts), [name for _, name in kv_servers(wl, hosts)]
    if wl.racks == 1:
        return [h for h in hosts if h not in wl.extra_hosts()], list(wl.extra_hosts())
    blocks = rack_blocks(scenario)
    return [h for b in blocks for h in b[1:]], [b[0] for b in blocks]


def kv_servers(wl: PhubWorkload, workers: list[str]) -> list[tuple[str, str]]:
    """sharded_ps: (host, server name) of each kvstore server in shard order: one on
    each of the first ceil(servers_per_worker x workers) workers' hosts."""
    from hosts.phub.chunking import kvstore_servers  # noqa: PLC0415
    return [(h, h + KV_SERVER_SUFFIX) for h in workers[:kvstore_servers(len(workers), wl.servers_per_worker)]]


def kvstore_bound(wl: PhubWorkload) -> int:
    """MXNet's bigarray bound on the emulated keys: MXNET_BIGARRAY_BOUND values of the
    full-size model, x size_scale for a profile (a key the paper's MXNet splits over
    every server is split here too, whatever the scale); the CNN's keys are real."""
    from hosts.phub.chunking import MXNET_BIGARRAY_BOUND  # noqa: PLC0415
    if wl.model.kind == "profile":
        return max(1, round(MXNET_BIGARRAY_BOUND * wl.model.size_scale))
    return MXNET_BIGARRAY_BOUND


def rack_blocks(scenario: Any) -> list[list[str]]:
    """racks > 1: each rack's hosts, its server first (roles)."""
    from testbed.net.topology import split_workers  # noqa: PLC0415
    wl: PhubWorkload = scenario.workload
    topo = scenario.topology
    if topo.kind != "tree" or topo.leaves != wl.racks:
        raise ValueError(f"workload.racks {wl.racks} needs topology kind tree with leaves {wl.racks} "
                         f"(one PHub server per rack), got kind {topo.kind} with leaves {topo.leaves}")
    blocks = split_workers(scenario.hosts(), wl.racks)
    if any(len(b) < 2 for b in blocks):
        raise ValueError(f"workload.racks {wl.racks}: every rack needs its server and at least one worker; "
                         f"topology.workers {topo.workers} gives racks of {[len(b) for b in blocks]} hosts")
    return blocks


def key_sizes(wl: PhubWorkload) -> list[int]:
    if wl.model.kind == "cnn":
        import torch  # noqa: PLC0415
        from hosts.dnn.lenet import LeNet  # noqa: PLC0415
        torch.manual_seed(wl.seed)
        return [p.numel() for p in LeNet().parameters()]
    from hosts.phub.profiles import get_profile  # noqa: PLC0415
    return [max(1, round(x.params * wl.model.size_scale)) for x in get_profile(wl.model.name).layers]


def job_groups(wl: PhubWorkload, workers: list[str]) -> list[list[str]]:
    if len(workers) % wl.jobs:
        raise ValueError(f"{len(workers)} workers do not split into {wl.jobs} equal jobs")
    n = len(workers) // wl.jobs
    return [workers[i * n:(i + 1) * n] for i in range(wl.jobs)]


def scale_round(wl: PhubWorkload, ina: dict[str, Any] | None = None) -> bool:
    """The in-switch baseline sums floats: without a fixed scale (the switch info's
    ina.scale_exp) each allreduce first agrees on one with a one-value MAX pass
    (hosts/ina/transport.py), a second round trip the network model charges. Leaving it
    out made every in-switch point read 1.44-1.49x the dilated model (docs/phub.md)."""
    return wl.algorithm == "switch" and (ina or {}).get("scale_exp") is None


def hw_table(wl: PhubWorkload, workers: int, agreed_scale: bool = False) -> dict[str, list[float]]:
    """The hardware time of one key's exchange at 0, 1 and a geometric grid (8 steps per
    octave) up to the largest key, for hosts.common.hw_table.HwTable: the network model's
    HW_ALGO allreduce (with the scale round where the in-switch sum agrees a scale:
    `agreed_scale`, from `scale_round`), plus, for PHub, the server cores' modeled work
    on the key (the cores pace it at the TDF, so the exchange the workers measure
    contains it)."""
    from hosts.phub.server import modeled_key_s  # noqa: PLC0415
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time  # noqa: PLC0415
    prof = load_profile(wl.hardware)
    momentum = wl.optimizer.kind == "nesterov"          # as OptimizerSpec.has_state

    def server_s(x: int) -> float:
        if wl.algorithm == "sharded_ps" and x:          # a big key's parts on every server at once
            from hosts.phub.chunking import kvstore_servers  # noqa: PLC0415
            k = kvstore_servers(workers, wl.servers_per_worker)
            return modeled_key_s(x, workers, k if x >= kvstore_bound(wl) else 1, momentum, prof["reduce_rate"])
        return (modeled_key_s(x, workers, wl.server_cores, momentum, prof["reduce_rate"])
                if wl.algorithm == "phub" and x else 0.0)
    top = max(key_sizes(wl))
    sizes, v = [0, 1], 1.0
    while sizes[-1] < top:
        v *= 2 ** (1 / 8)
        if int(v) > sizes[-1]:
            sizes.append(int(v))
    return {"values": [float(x) for x in sizes],
            "hw_s": [collective_time("allreduce", HW_ALGO[wl.algorithm], x, 4, workers, prof,
                                     scale_round=agreed_scale and x > 0) + server_s(x) for x in sizes]}


def network_dilation(wl: PhubWorkload, switch_info: dict[str, Any], workers: int,
                     agreed_scale: bool = False) -> dict[str, Any] | None:
    """The hosts' network_dilation block (as testbed/workloads/lhc.py's): None without a
    soft switch, for the measured CNN or with dilate_network false. hw_op_s (what the
    in-switch transport's timers expect) is the largest key's exchange."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time  # noqa: PLC0415

    return dilation_block(wl, switch_info, wl.model.kind == "profile", lambda: max(collective_time(
        "allreduce", HW_ALGO[wl.algorithm], max(key_sizes(wl)), 4, workers, load_profile(wl.hardware),
        scale_round=agreed_scale), 1e-6))


@register_runtime
class PhubRuntime(WorkloadRuntime):
    kind = "phub"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        from testbed.fidelity.constants import load_profile  # noqa: PLC0415
        scn = ctx.point.scenario
        wl: PhubWorkload = scn.workload
        if wl.algorithm == "switch":
            ctx.require_switch("algorithm switch")
        workers, servers = roles(scn)
        groups = job_groups(wl, workers)
        sizes = key_sizes(wl)
        port = ctx.tcp_port_base(PHUB_TCP_PORT, span=100)     # cores, rack servers (+70), the agreement ring (+80)
        traced = len(workers) + (len(servers) if wl.algorithm in ("phub", "sharded_ps") else 0)
        kv = ({"placement": "kvstore", "bigarray_bound": kvstore_bound(wl)} if wl.algorithm == "sharded_ps"
              else {})
        jobs = [{"job": j + 1, "world": len(g), "sizes": sizes, "chunk_bytes": wl.chunk_bytes,
                 "optimizer": wl.optimizer.model_dump(), "workers": g, **kv} for j, g in enumerate(groups)]
        progs = []
        server = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.extra_hosts() else None
        racks = [{"name": h, "ip": ctx.hosts[h].ip} for h in servers] if wl.racks > 1 else []
        rack_of = {h: r for r, b in enumerate(rack_blocks(scn)) for h in b} if racks else {}
        shards = kv_servers(wl, workers) if wl.algorithm == "sharded_ps" else []
        serve = {}                       # sharded_ps: host -> its kvstore server's config
        for s, (h, name) in enumerate(shards):
            cfg = {"host": name, "ip": ctx.hosts[h].ip, "port": port, "jobs": jobs, "cores": 1,
                   "shards": len(shards), "shard": s, "nic": h,
                   "out": str(ctx.work_dir / f"{name}.jsonl"), "trace": str(ctx.work_dir / f"{name}.trace.jsonl"),
                   "trace_rank": len(workers) + s, "trace_world": traced,
                   "tdf": 1.0 if wl.calibrated else wl.tdf_start(), "trace_from": wl.calibration_iterations_total(),
                   "reduce_bytes_per_s": load_profile(wl.hardware)["reduce_rate"],
                   "aggregation_order": wl.aggregation_order, "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s}
            serve[h] = str(self.write_config(ctx, name, cfg))
        n = len(groups[0])
        agreed = wl.algorithm == "switch" and any(scale_round(wl, ina_settings(ctx.switch, h)) for h in workers)
        calibration = ({"rounds": wl.calibration_rounds, "iterations": wl.calibration_iterations,
                        "hw_table": hw_table(wl, n, agreed), "iteration_wall_s": ITERATION_WALL_S}
                       if wl.calibrated else None)
        dilation = network_dilation(wl, ctx.switch or {}, n, agreed)
        if server:
            cfg = {"host": "ps", "ip": server["ip"], "port": port, "jobs": jobs,
                   "cores": wl.server_cores if wl.algorithm == "phub" else 1,
                   "out": str(ctx.work_dir / "ps.jsonl"),
                   "trace": str(ctx.work_dir / "ps.trace.jsonl") if wl.algorithm == "phub" else None,
                   # calibrated: the cores run unpaced until rank 0 sends the first TDF (round 0
                   # measures the emulator's own speed, the server's Python included)
                   "trace_rank": len(workers), "trace_world": traced,
                   "tdf": 1.0 if wl.calibrated else wl.tdf_start(),
                   "trace_from": wl.calibration_iterations_total(),
                   "reduce_bytes_per_s": load_profile(wl.hardware)["reduce_rate"],
                   "aggregation_order": wl.aggregation_order,
                   "start_at": ctx.start_at, "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s}
            module = "hosts.phub.server" if wl.algorithm == "phub" else "hosts.phub.wide_ps"
            progs.append(HostProgram("ps", self.module_argv(module, self.write_config(ctx, "ps", cfg)), phase=0))
        for r, srv in enumerate(racks):
            mine = [i for i, h in enumerate(workers) if rack_of[h] == r]
            cfg = {"host": srv["name"], "ip": srv["ip"], "port": port, "rack": r, "servers": racks,
                   "ranks": [mine[0], mine[-1] + 1], "jobs": jobs, "out": str(ctx.work_dir / f"{srv['name']}.jsonl"),
                   "trace": str(ctx.work_dir / f"{srv['name']}.trace.jsonl"),
                   "trace_rank": len(workers) + r, "trace_world": traced,
                   "tdf": 1.0 if wl.calibrated else wl.tdf_start(), "trace_from": wl.calibration_iterations_total(),
                   "reduce_bytes_per_s": load_profile(wl.hardware)["reduce_rate"],
                   "start_at": ctx.start_at, "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s}
            progs.append(HostProgram(srv["name"], self.module_argv(
                "hosts.phub.rack", self.write_config(ctx, srv["name"], cfg)), phase=0))
        for j, g in enumerate(groups):
            for rank, h in enumerate(g):
                cfg = {"host": h, "ip": ctx.hosts[h].ip, "rank": rank, "job": jobs[j],
                       "algorithm": wl.algorithm, "model": wl.model.model_dump(), "iterations": wl.iterations,
                       "warmup": wl.warmup, "seed": wl.seed, "batch_size": wl.batch_size,
                       "device": {"type": wl.device.type, "time_scale": wl.tdf_start()},
                       "out": str(ctx.work_dir / f"{h}.jsonl"),
                       "server": racks[rack_of[h]] if racks else server, "port": port,
                       "cores": len(shards) if shards else wl.server_cores,
                       "shards": [{"name": name, "ip": ctx.hosts[x].ip} for x, name in shards] or None,
                       "serve": serve.get(h),
                       "peers": [{"name": x, "ip": ctx.hosts[x].ip} for x in g],
                       "ina": ({**ina_settings(ctx.switch, h), "job_id": 1} if wl.algorithm == "switch"
                               else None),
                       "straggler": straggler_for(scn, h), "trace": str(ctx.work_dir / f"{h}.trace.jsonl"),
                       "trace_world": traced, "trace_rank": j * len(g) + rank,
                       "start_at": ctx.start_at, "connect_timeout_s": 60.0,
                       "timeout_s": wl.timeout_s, "calibration": calibration, "network_dilation": dilation}
                progs.append(HostProgram(h, self.module_argv("hosts.phub.worker",
                                                             self.write_config(ctx, h, cfg)), phase=1))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        from testbed.switch.jobs import JobRequest  # noqa: PLC0415
        wl = point.scenario.workload
        if wl.algorithm != "switch":
            return []
        return [JobRequest(1, tuple(h for h in point.scenario.hosts() if h not in wl.extra_hosts()))]

    def timeout_s(self, ctx: PointContext) -> float:
        wl = ctx.point.scenario.workload
        return (wl.timeout_s * 2 + ITERATION_WALL_S * (wl.iterations + wl.warmup + wl.calibration_iterations_total())
                + 60.0)

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from testbed.outcomes import PointFailed  # noqa: PLC0415
        sums = [r for r in records if r.get("type") == "phub_summary"]
        wrong = [s["weights_check_error"] for s in sums if s.get("weights_check_ok") is False]
        if wrong:                        # its phub_summary in metrics.jsonl keeps the numbers
            raise PointFailed(wrong[0])
        return [summary_row(r) for r in sums]


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


STAGES = ("recv_s", "agg_s", "opt_s", "send_s", "idle_s")


def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: PhubWorkload = scenario.workload
    workers, servers = roles(scenario)
    raw = {h: read_jsonl(work_dir / f"{h}.jsonl") for h in workers}
    iters = [dict(r, type="phub_iter") for h in workers for r in raw[h] if r.get("type") == "iter"]
    sums = {h: next((r for r in raw[h] if r.get("type") == "summary"), None) for h in workers}
    # the server's output (one file per rack server with racks > 1; their cores are the racks)
    server = {h: read_jsonl(work_dir / f"{h}.jsonl") if (work_dir / f"{h}.jsonl").exists() else [] for h in servers}
    cores = [dict(r, type="phub_core", host=h) for h, rs in server.items() for r in rs if r.get("type") == "core"]
    ssums = {h: next((r for r in rs if r.get("type") == "summary"), None) for h, rs in server.items()}
    per_it: dict[tuple[int, int], list[float]] = {}
    for r in iters:
        if not r.get("warmup"):
            per_it.setdefault((r["job"], r["iter"]), []).append(r["iter_s"])
    iter_s = _median([max(v) for v in per_it.values()])
    # The TDF the workers ran at (calibrated or fixed): one value, or the point is wrong.
    tdfs = {s.get("tdf") for s in sums.values() if s and s.get("tdf") is not None}
    if len(tdfs) > 1:
        raise ValueError(f"workers ran at different TDFs {sorted(tdfs)}: calibration did not agree")
    tdf = tdfs.pop() if tdfs else wl.tdf_start()
    n_it = max(1, wl.iterations + wl.warmup + wl.calibration_iterations_total())    # the server's whole run
    errors = [s.get("error") for s in sums.values() if s and s.get("error")]
    errors[:0] = [f"{h}: {s['error']}" for h, s in ssums.items() if s and s.get("error")]
    digests: dict[int, set] = {}
    for s in sums.values():
        if s:
            digests.setdefault(s.get("job"), set()).add(s.get("weights_sha1"))
    summary = {
        "type": "phub_summary", "algorithm": wl.algorithm, "workers": len(workers), "jobs": wl.jobs,
        "racks": wl.racks,
        "model": wl.model.name if wl.model.kind == "profile" else "cnn", "size_scale": wl.model.size_scale,
        "params": sum(key_sizes(wl)), "chunk_bytes": wl.chunk_bytes, "server_cores": wl.server_cores,
        "kv_servers": len(servers) if wl.algorithm == "sharded_ps" else None,
        "ok": all(s and s.get("ok") for s in sums.values()) and all(s and s.get("ok") for s in ssums.values()),
        "error": errors[0] if errors else None,
        "iterations": len({k[1] for k in per_it}),
        "iter_ms": None if iter_s is None else iter_s * 1e3,
        "hw_iter_ms": None if iter_s is None else iter_s / tdf * 1e3, "tdf": tdf,
        "weights_agree": all(len(d) == 1 for d in digests.values()) if digests else None,
        "final_loss": next((r["loss"] for r in sorted(iters, key=lambda r: -r["iter"]) if r.get("loss") is not None), None),
        "accuracy": _median([s.get("accuracy") for s in sums.values() if s]),
        "device_valid": all(((s or {}).get("device") or {}).get("valid", True) for s in sums.values()),
        "calibrated": wl.calibrated,
        "network_dilated": any(bool((s or {}).get("network_dilated")) for s in sums.values()),
    }
    if cores:
        agg_bytes = sum(c["agg_bytes"] for c in cores)
        agg_s = max(c["agg_s"] for c in cores)           # cores run in parallel
        summary.update({f"server_{k}_per_iter_ms": max(c[k] for c in cores) / n_it * 1e3 for k in STAGES})
        summary.update(server_agg_gbps=agg_bytes / agg_s / 1e9 if agg_s else None,
                       server_agg_gbps_per_core=_median([c.get("agg_gbps") for c in cores]),
                       numpy_sum_gbps_per_core=_median([c.get("numpy_gbps") for c in cores]),
                       server_bytes_in=sum(c["bytes_in"] for c in cores),
                       # copies that waited for a lower rank (rank order); none in arrival order.
                       # The rack servers do not count theirs: None there.
                       server_copies_held=(sum(c["copies_held"] for c in cores)
                                           if all("copies_held" in c for c in cores) else None),
                       server_device_valid=all((c.get("device") or {}).get("valid", True) for c in cores))
    inas = [s["ina"] for s in sums.values() if s and s.get("ina")]
    if inas:        # the in-switch baseline's transport: its retransmissions and scale rounds
        summary.update({f"ina_{k}": sum(int(i.get(k) or 0) for i in inas)
                        for k in ("retransmissions", "timeouts", "scale_rounds", "chunks_sent")})
        summary["ina_chunk_latency_p50_s"] = _median([i.get("chunk_latency_p50_s") for i in inas])
    cals = [dict(r, type="calibration") for h in workers for r in raw[h] if r.get("type") == "calibration"]
    summary.update(weights_check(wl, work_dir, groups=job_groups(wl, workers), sums=sums, ssums=ssums,
                                 run_ok=summary["ok"]))
    summary["valid"] = summary["device_valid"] and summary["weights_check_ok"] is not False
    if summary["weights_check_ok"] is False:        # the fidelity verdict names it first (records.py)
        summary["invalid_reasons"] = [summary["weights_check_error"]] + (
            [] if summary["device_valid"] else ["device model exceeded"])
    return [*iters, *cores, *cals, *fidelity_records(wl, work_dir, summary), summary]


def weights_check(wl: PhubWorkload, work_dir: Path, *, groups: list[list[str]], sums: dict[str, Any],
                  ssums: dict[str, Any], run_ok: bool) -> dict[str, Any]:
    """Every point's check of its workers' final weights (the `<host>.weights.npy` each
    writes) against the plain PS's on the same gradients, replayed in-process from what
    the run records (the seed, each job's ranks, the steps the workers report, the
    optimizer): hosts/phub/reference.py. Expected: bit for bit for PHub in rank order
    (and cross-rack PHub) and for the plain PS itself; within float rounding for PHub
    in arrival order; the ring's and the in-switch sums are reported, not judged (their
    own sum order, the switch's fixed point). `weights_check_ok` False makes the point
    invalid and failed (PhubRuntime.summarize). The CNN is replayed whole through the
    worker's own model (reference.cnn_plain_ps_weights)."""
    import time  # noqa: PLC0415
    from hosts.phub.optimizer import OptimizerSpec  # noqa: PLC0415
    from hosts.phub.reference import (cnn_plain_ps_weights, compare, plain_ps_weights,  # noqa: PLC0415
                                      replay_layers)

    order = None
    if wl.algorithm in ("phub", "sharded_ps"):  # the order the servers say they ran (rack servers: rank)
        orders = sorted({str((s or {}).get("aggregation_order")) for s in ssums.values()})
        order = orders[0] if len(orders) == 1 and orders[0] in ("rank", "arrival") else None
    out: dict[str, Any] = {"aggregation_order": order, "weights_match_plain_ps": None,
                           "weights_check_ok": None, "weights_check_error": None}
    if not run_ok:
        return dict(out, weights_check="not run: the run failed")
    expect = {"phub": "bit_exact" if order == "rank" else "rounding", "wide_ps": "bit_exact",
              "sharded_ps": "bit_exact" if order == "rank" else "rounding"}.get(wl.algorithm, "none")
    t0 = time.perf_counter()
    try:
        if wl.algorithm in ("phub", "sharded_ps") and order not in ("rank", "arrival"):
            raise ValueError(f"the PHub server's records name no single aggregation order: {orders}")
        steps = {(sums[h] or {}).get("steps") for g in groups for h in g}
        want = wl.iterations + wl.warmup + wl.calibration_iterations_total()
        if steps != {want}:
            raise ValueError(f"the workers report {sorted(map(str, steps))} optimizer steps, the workload ran {want}")
        sizes = key_sizes(wl)
        world = len(groups[0])           # jobs split evenly, one seed: every job replays the same
        spec = OptimizerSpec(**wl.optimizer.model_dump())
        if wl.model.kind == "profile":
            layers = replay_layers(sizes, world, want)
            ref = np.concatenate(plain_ps_weights(sizes, wl.seed, world, want, spec, layers))
        else:                            # the CNN is small: all of it, through the worker's own model
            layers = list(range(len(sizes)))
            ref = cnn_plain_ps_weights(wl.seed, world, want, spec, wl.batch_size)
        starts = np.cumsum([0, *sizes])
        idx = (np.concatenate([np.arange(starts[k], starts[k + 1]) for k in layers])
               if len(layers) < len(sizes) else slice(None))
        finals = {}
        for h in (h for g in groups for h in g):
            path = work_dir / f"{h}.weights.npy"
            if not path.exists():
                raise ValueError(f"{h} wrote no final weights ({path.name})")
            finals[h] = np.load(path)[idx]
        chk = compare(ref, finals, expect)
    except ValueError as e:
        return dict(out, weights_check=f"error: {e}", weights_check_ok=False,
                    weights_check_error=f"weights check: {e}")
    status = ("reported (not judged: the collective's own sum order or number format)" if expect == "none"
              else "bit_exact" if chk.match else "within_rounding" if chk.ok else "MISMATCH")
    return dict(out, **chk.record(), weights_check=status,
                weights_replayed_values=int(ref.size), weights_replayed_layers=f"{len(layers)} of {len(sizes)}",
                weights_check_s=round(time.perf_counter() - t0, 3))


HW_STAGES = ("recv", "agg", "opt", "send")


def hw_stages(traces, profile, iterations: int) -> dict[str, float] | None:
    """PHub's server pipeline per iteration in hardware microseconds, from its trace:
    the busiest core's (largest total) receive (serialization of its PUSH bytes on
    the server's port: network_model.message_cost's link_busy_s; its share of the
    port), aggregate (the modeled core's per-message cost + summing the pushed
    values), optimize (the rest of each compute node's modeled hw_s: the optimizer's
    bytes) and send (its UPDATE bytes on the port). The model that paces the cores
    and that the projector replays (hosts/phub/server.py modeled_work_s). None
    without a PHub server trace."""
    from hosts.phub.server import CORE_MESSAGE_S  # noqa: PLC0415
    from testbed.fidelity.network_model import message_cost  # noqa: PLC0415
    from testbed.fidelity.server_model import node_core  # noqa: PLC0415
    per_core: dict[tuple[str, int], dict[str, float]] = {}
    for header, nodes in traces:
        if header.get("role") != "server" or header.get("workload") != "phub":
            continue
        rate = float(header["device"]["bytes_per_s"])
        for n in nodes:
            st = per_core.setdefault((header["host"], node_core(header, n)), dict.fromkeys(HW_STAGES, 0.0))
            if n["kind"] == "compute":
                # a rack server's node says how many values it summed (a PUSH's or PREFIX's;
                # an XUPDATE it forwards sums none); a core's PUSH sums all it carries
                agg = CORE_MESSAGE_S + 4 * int(n["work"].get("summed", n["work"]["values"])) / rate
                st["agg"] += agg
                st["opt"] += max(0.0, float(n["hw_s"]) - agg)
            else:
                st["recv" if n["op"] == "recv" else "send"] += message_cost(int(n["bytes"]), profile).link_busy_s
    if not per_core:
        return None
    busiest = max(per_core.values(), key=lambda st: sum(st.values()))
    return {k: v / max(1, iterations) * 1e6 for k, v in busiest.items()}


def _projected_nodes(traces) -> int:
    return max((len(n) for h, n in traces if h.get("role") != "server"), default=0)


def fidelity_records(wl: PhubWorkload, work_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The monitor's verdict and the projection at the point's worker count
    (testbed.fidelity.records), then the same trace shape at PROJECTED_WORKERS (the
    template worker replicated; PHub's server by the service model). Fills the summary's
    `projected_hw_iter_ms_<n>` for each n."""
    from testbed.fidelity.projector import project_world  # noqa: PLC0415
    from testbed.fidelity.records import fidelity_and_projection  # noqa: PLC0415

    # The traces hold the warmup and measured iterations (calibration's are not traced).
    iters = max(1, (summary.get("iterations") or 0) + wl.warmup)
    point = fidelity_and_projection(work_dir, wl.hardware, summary["tdf"], "phub", iters, summary,
                                    device_reason="device model exceeded", max_nodes=None,
                                    extra={"algorithm": wl.algorithm, "chunk_bytes": wl.chunk_bytes,
                                           "model": summary["model"]})
    fid = point.fidelity
    fid["calibrated"] = wl.calibrated
    if wl.algorithm == "phub" and point.profile is not None:
        for k, v in (hw_stages(point.traces, point.profile, iters) or {}).items():
            summary[f"server_hw_{k}_us_per_iter"] = v
    summary["fidelity"] = ("valid" if fid["valid"] else "invalid: " + "; ".join(fid["reasons"]))[:300]
    # Two jobs: a replicated template is one job, not two. Racks: the service model
    # does not play messages between servers (server_model.py), nor more racks.
    # sharded_ps: its servers grow with the workers, which the template's replication
    # does not do (one trace per server, not a service model).
    if point.projected is None or wl.jobs > 1 or wl.racks > 1 or wl.algorithm == "sharded_ps":
        return point.records
    records = point.records
    per_iter = _projected_nodes(point.traces) / iters
    traces = point.traces       # PHub's server: one queue per core (its trace's `cores`)
    for n in PROJECTED_WORKERS:
        if n <= point.projected.world:
            continue
        # Two iterations of every rank are simulated and the rest extrapolated (the
        # projector's max_nodes: a repeating pattern): 64 ranks x a full trace is minutes.
        cap = max(40, int(2.5 * per_iter))
        try:
            proj = project_world(traces, n, point.profile, max_nodes=cap)
        except (ValueError, RuntimeError) as e:        # refused or stalled: named in the record
            records.append({"type": "projection", "workload": "phub", "workers": n, "error": str(e)})
            summary[f"projected_hw_iter_ms_{n}"] = None
            continue
        ms = proj.makespan_s / iters * 1e3
        summary[f"projected_hw_iter_ms_{n}"] = ms
        records.append({"type": "projection", "workload": "phub", "workers": n, "emulated": False,
                        "profile": point.profile.label(), "hw_run_s": proj.makespan_s, "hw_iter_ms": ms,
                        "truncated": bool(proj.truncated), "algorithm": wl.algorithm,
                        "chunk_bytes": wl.chunk_bytes, "model": summary["model"]})
    return records


def summary_row(s: dict[str, Any]) -> dict[str, Any]:
    """The point's row of the end-of-run table and summary.csv: hw_* hardware-equivalent
    (emulated / TDF, or the server's modeled stage times; each point runs at its own
    TDF, so only these compare across points), projected_hw_* the hardware model's
    replay of the point's own trace (_<n>w: replicated to n workers), emu_* measured
    on the emulation's wall clock (the server's stages: this machine's CPU)."""
    def r(v, nd=3):
        return None if v is None else round(v, nd)
    return {"algorithm": s["algorithm"], "model": s["model"], "workers": s["workers"], "jobs": s["jobs"],
            "racks": s.get("racks", 1), "chunk_bytes": s["chunk_bytes"],
            "hw_iter_ms": r(s["hw_iter_ms"]),
            **{f"hw_{k}_us": r(s.get(f"server_hw_{k}_us_per_iter"), 2) for k in HW_STAGES},
            "projected_hw_iter_ms": r(s.get("projected_hw_iter_ms")),
            **{f"projected_hw_iter_ms_{n}w": r(s.get(f"projected_hw_iter_ms_{n}")) for n in PROJECTED_WORKERS},
            "emu_iter_ms": r(s["iter_ms"]),
            "emu_recv_ms": r(s.get("server_recv_s_per_iter_ms")), "emu_agg_ms": r(s.get("server_agg_s_per_iter_ms")),
            "emu_opt_ms": r(s.get("server_opt_s_per_iter_ms")), "emu_send_ms": r(s.get("server_send_s_per_iter_ms")),
            "emu_agg_gbps": r(s.get("server_agg_gbps_per_core")), "emu_numpy_gbps": r(s.get("numpy_sum_gbps_per_core")),
            "tdf": s["tdf"], "net_ratio": r(s.get("net_ratio_p50"), 2),
            "emu/proj": r(s.get("emulated_over_projected"), 2),
            "weights_agree": s["weights_agree"], "order": s.get("aggregation_order"),
            "vs_plain_ps": str(s.get("weights_check") or "")[:16],
            "vs_ps_rel": (None if s.get("weights_max_rel_diff") is None
                          else float(f"{s.get('weights_max_rel_diff'):.3g}")),
            "vs_ps_max_ulp": s.get("weights_max_ulp_diff"),
            "vs_ps_differ": r(s.get("weights_differing_share"), 4),
            "ok": s["ok"],
            "valid": s["valid"], "fidelity": (s.get("fidelity") or "")[:60]}
