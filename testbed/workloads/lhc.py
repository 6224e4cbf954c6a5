"""LHC workload: lossless homomorphic gradient compression aggregated in the switch,
and its baselines, one gradient aggregation per iteration (hosts/lhc/worker.py).

Metric records (metrics.jsonl):
  lhc_iter     one per worker and iteration (the worker's own record): iteration,
               aggregation (encode + network + decode) and network time, bytes
               sent, union size, sketch rows, dense core, exactness.
  lhc_summary  one per point: medians over measured iterations and workers,
               aggregation throughput (dense gradient bytes / aggregation time),
               bytes on the wire vs dense, decode errors (must be 0), and the
               fidelity monitor's verdict; `fidelity` and `projection` records
               as for P4SGD (testbed.fidelity, shared functions).
Times are emulated wall-clock seconds; modeled GPU steps are dilated by the
point's TDF, which every summary carries (`tdf`): `device.time_scale` fixed, or
`auto` (default): calibrated by the workers on LHC's own rounds on the built
network (hosts/lhc/timing.py `calibrate`, hosts.common.calibration). On the soft
switch the network is dilated to that TDF too (`dilate_network`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from testbed.results import read_jsonl
from testbed.workloads import register_workload
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for)
from testbed.workloads.calibrated import ITERATION_WALL_S, CalibratedWorkloadParams, dilation_block

FIGURES = ("lhc_throughput", "lhc_decode", "lhc_iteration", "lhc_loss", "lhc_scaling", "lhc_straggler")
ALGORITHMS = ("lhc_switch", "lhc_switch_compact", "lhc_ring", "dense_switch", "dense_ring", "dense_fixed_ring",
              "dense_ps", "topk_ring")
SWITCH_ALGOS = ("lhc_switch", "lhc_switch_compact", "dense_switch")
# lhc_switch_compact: lhc_switch with sketch.compact set (U's values listed instead of the sketch
# where that is smaller), run as a system of its own so a sweep compares it beside the sketch.
COMPACT_ALGOS = {"lhc_switch_compact": "lhc_switch"}
LHC_TCP_PORT = 47800
# time_scale auto: the first calibration round's TDF (as P4SGD's CALIBRATION_START).
CALIBRATION_START = 500.0


register_figures_if_loaded(*FIGURES)


class SketchParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    alpha: float = Field(1.23, gt=0, description="Counters per union position per lane (hosts/lhc/sizing.py).")
    z: float = Field(2.0, ge=0, description="Lane-load margin in standard deviations.")
    rows: Optional[int] = Field(None, ge=3, description="Fixed sketch rows (multiple of 3); null = the sizing "
                                                        "rule. Below the peeling threshold the 2-core goes dense.")
    lanes: Optional[int] = Field(None, ge=1, le=1024, description="Lanes per block; null = sizing.lanes_for.")
    compact: bool = Field(False, description="Send U's values instead of a sketch when that is smaller.")

    @field_validator("rows")
    @classmethod
    def _mult3(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v % 3:
            raise ValueError(f"rows must be a multiple of 3 (three hash sub-tables), got {v}")
        return v


class DeviceParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["gpu", "cpu"] = Field("gpu", description="gpu: modeled V100 (hosts/lhc/timing.py); "
                                                           "cpu: measured numpy time.")
    time_scale: Union[Literal["auto"], float] = Field(
        "auto", description="Dilation (TDF) of the modeled GPU. auto (default): calibrated on the built "
                            "network on LHC's own rounds (workload.calibration_rounds); a number: fixed. "
                            "The fidelity monitor checks the network against it either way.")

    @field_validator("time_scale")
    @classmethod
    def _positive(cls, v: Any) -> Any:
        if v != "auto" and v <= 0:
            raise ValueError(f"time_scale must be > 0 or auto, got {v}")
        return v

    @property
    def calibrated(self) -> bool:
        return self.type == "gpu" and self.time_scale == "auto"

    def spec(self) -> dict[str, Any]:
        """The hosts' device block: auto starts calibration at CALIBRATION_START."""
        ts = self.time_scale if self.time_scale != "auto" else CALIBRATION_START
        return {"type": self.type, "time_scale": float(ts)}


class InaParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    window: int = Field(256, ge=1, le=256, description="Chunks outstanding per worker.")
    retx_timeout_s: float = Field(0.05, gt=0, description="First retransmission timeout.")


_GRADIENT_KEYS = {"synthetic": {"kind", "size", "density", "cluster", "overlap", "scale", "seed"},
                  "profile": {"kind", "model", "size_scale", "overlap", "scale", "seed"},
                  "ncf_train": {"kind", "seed", "users", "items", "per_user", "dim", "batch", "lr"}}


@register_workload
class LhcWorkload(CalibratedWorkloadParams):
    """Gradient aggregation: LHC (in-switch or ring) vs dense switch / ring / PS and top-k."""

    FIGURES = FIGURES

    kind: Literal["lhc"] = Field("lhc", description="Workload type; selects which fields below apply.")
    algorithm: Literal["lhc_switch", "lhc_switch_compact", "lhc_ring", "dense_switch", "dense_ring",
                       "dense_fixed_ring", "dense_ps", "topk_ring"] = Field(
        "lhc_switch", description="lhc_switch: support OR + sketch SUM in the switch (the paper's design); "
                                  "lhc_switch_compact: the same with sketch.compact (U's values in U's order "
                                  "where fewer than the sketch's counters); lhc_ring: the same over "
                                  "a host ring; dense_switch/dense_ring/dense_ps: the float gradient; "
                                  "dense_fixed_ring: the dense gradient in LHC's fixed point over a ring "
                                  "(dense_switch's sum without a switch); topk_ring: top-k with error "
                                  "feedback, allgathered.")
    gradient: dict[str, Any] = Field(
        default_factory=lambda: {"kind": "synthetic", "size": 262144, "density": 0.01},
        description="hosts/lhc/gradients.py spec: {kind: synthetic, size, density, cluster, overlap, scale, "
                    "seed} | {kind: profile, model: ncf|lstm|vgg19|bert, size_scale, overlap}.")
    seed: int = Field(0, ge=0, description="Added to the gradient spec's seed (its data: masks, values, "
                                           "NCF batches); sweep.repeats runs repeat r with seed + r.")
    iterations: int = Field(10, ge=1, description="Measured iterations.")
    warmup: int = Field(1, ge=0, description="Unmeasured iterations first.")
    compute_ms: Optional[float] = Field(None, ge=0, description="Modeled backward time per iteration (ms, "
                                        "hardware); null = the profile's, scaled by the gradient's size_scale; 0 for synthetic gradients.")
    topk_ratio: float = Field(0.01, gt=0, le=1, description="topk_ring: share of entries each worker sends.")
    sketch: SketchParams = Field(default_factory=SketchParams, description="Sketch sizing.")
    device: DeviceParams = Field(default_factory=DeviceParams, description="Encode/decode device model.")
    ina: InaParams = Field(default_factory=InaParams, description="In-switch transport settings.")
    timeout_s: float = Field(120.0, gt=0, description="A host gives up if one operation stalls this long.")
    calibration_iterations: int = Field(2, ge=1, le=20, description="time_scale auto: aggregations per "
                                        "calibration round (unchecked; measured iterations follow).")

    @property
    def calibrated(self) -> bool:
        return self.device.calibrated

    # at_fixed_tdf stays None (no retry): its calibration rounds train (CalibratedWorkloadParams).

    @field_validator("gradient")
    @classmethod
    def _check_gradient(cls, spec: dict[str, Any]) -> dict[str, Any]:
        kind = spec.get("kind", "synthetic")
        if kind not in _GRADIENT_KEYS:
            raise ValueError(f"gradient.kind must be one of {', '.join(_GRADIENT_KEYS)}, got {kind!r}")
        unknown = sorted(set(spec) - _GRADIENT_KEYS[kind])
        if unknown:
            raise ValueError(f"unknown gradient keys {unknown} for kind {kind}; allowed: "
                             f"{', '.join(sorted(_GRADIENT_KEYS[kind]))}")
        from hosts.lhc.gradients import make_source  # light: no numpy work until gradient()
        try:
            make_source(dict(spec, kind=kind))
        except (TypeError, ValueError) as e:
            raise ValueError(f"gradient: {e}") from None
        return spec

    def extra_hosts(self) -> list[str]:
        return ["ps"] if self.algorithm == "dense_ps" else []

    def modeled_compute_ms(self) -> float:
        if self.compute_ms is not None:
            return self.compute_ms
        if self.gradient.get("kind") == "profile":
            # The profile's backward time is the full model's; a shrunk model
            # (size_scale) computes proportionally less, so compute and communication
            # keep the full model's ratio (unscaled, NCF at 0.5 % of its size spent 8 ms
            # computing per iteration for microseconds of network: 4 minutes of
            # emulated time per iteration at TDF 31,000).
            from hosts.lhc.profiles import get_profile
            prof = get_profile(self.gradient["model"])
            scale = self.gradient.get("size_scale")
            return prof.compute_ms * (prof.size_scale if scale is None else float(scale))
        return 0.0


# ---------------------------------------------------------------------------
# Hardware time of the aggregation ops (calibration, network dilation)
# ---------------------------------------------------------------------------
def op_algo(wl: LhcWorkload) -> str:
    """The network model's algo of the traced ops."""
    return {"lhc_switch": "switch", "lhc_switch_compact": "switch", "dense_switch": "switch", "lhc_ring": "ring",
            "dense_ring": "ring",
            "dense_fixed_ring": "ring", "dense_ps": "ps", "topk_ring": "ring"}[wl.algorithm]


def sketch_spec(wl: LhcWorkload) -> dict[str, Any]:
    """The hosts' sketch settings: the scenario's, compact set by lhc_switch_compact."""
    return dict(wl.sketch.model_dump(), compact=True) if wl.algorithm in COMPACT_ALGOS else wl.sketch.model_dump()


def op_kind(wl: LhcWorkload) -> str:
    """The network model's op: top-k allgathers every rank's (indices, values) block
    (`values` = one rank's block); everything else is an allreduce."""
    return "allgather" if wl.algorithm == "topk_ring" else "allreduce"


def gradient_spec(wl: LhcWorkload, world: int) -> dict[str, Any]:
    """The hosts' gradient spec: the scenario's, its seed offset by workload.seed."""
    spec = dict(wl.gradient, seed=int(wl.gradient.get("seed", 0)) + wl.seed)
    return dict(spec, world=world) if spec.get("kind") == "ncf_train" else spec


def gradient_size(wl: LhcWorkload) -> int:
    from hosts.lhc.gradients import make_source  # noqa: PLC0415
    return int(make_source(dict(wl.gradient)).size)


def hw_op_time(wl: LhcWorkload, values: int, workers: int, profile: Any = None) -> float:
    """Modeled hardware seconds of one op of `values` int32/float32 values. Every LHC
    round is an in-switch (or ring) op of its own; dense_switch's float sum first
    agrees a scale (scale_round), as the protocol does."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time  # noqa: PLC0415
    return collective_time(op_kind(wl), op_algo(wl), int(values), 4, workers,
                           profile or load_profile(wl.hardware), scale_round=wl.algorithm == "dense_switch")


def hw_table(wl: LhcWorkload, workers: int) -> dict[str, list[float]]:
    """hw_op_time at 0, 1 and a geometric grid (8 steps per octave) up to the largest op
    (the sketch round can exceed n: 2-core values + counters), for hosts.lhc.timing.HwTable."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    prof = load_profile(wl.hardware)
    top = 4 * gradient_size(wl) + 4096
    sizes, v = [0, 1], 1.0
    while sizes[-1] < top:
        v *= 2 ** (1 / 8)
        if int(v) > sizes[-1]:
            sizes.append(int(v))
    return {"values": [float(x) for x in sizes], "hw_s": [hw_op_time(wl, x, workers, prof) for x in sizes]}


def network_dilation(wl: LhcWorkload, switch_info: dict[str, Any], workers: int) -> dict[str, Any] | None:
    """The hosts' network_dilation block (as testbed/workloads/p4sgd.py's): None without a
    soft switch, on a measured CPU device or with dilate_network false. hw_op_s (the
    transport's expected op time) is the largest op: the dense gradient's."""
    return dilation_block(wl, switch_info, wl.device.type != "cpu",
                          lambda: max(hw_op_time(wl, gradient_size(wl), workers), 1e-6))


@register_runtime
class LhcRuntime(WorkloadRuntime):
    kind = "lhc"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl: LhcWorkload = scn.workload
        workers = [h for h in scn.hosts() if h not in wl.extra_hosts()]
        if wl.algorithm in SWITCH_ALGOS:
            ctx.require_switch(f"algorithm {wl.algorithm}")
        if wl.algorithm == "lhc_ring" and len(workers) > 15:
            raise ValueError(f"lhc_ring's 4-bit support counts hold at most 15 workers, got {len(workers)}")
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in workers]
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.algorithm == "dense_ps" else None
        common = {
            "world": len(workers), "algorithm": COMPACT_ALGOS.get(wl.algorithm, wl.algorithm), "peers": peers,
            "ps": ps,
            "port": ctx.tcp_port_base(LHC_TCP_PORT), "gradient": gradient_spec(wl, len(workers)),
            "iterations": wl.iterations, "warmup": wl.warmup, "compute_ms": wl.modeled_compute_ms(),
            "topk_ratio": wl.topk_ratio, "sketch": sketch_spec(wl), "device": wl.device.spec(),
            "start_at": ctx.start_at, "connect_timeout_s": 30.0, "timeout_s": wl.timeout_s,
            "calibration": ({"rounds": wl.calibration_rounds, "iterations": wl.calibration_iterations,
                             "hw_table": hw_table(wl, len(workers)), "iteration_wall_s": ITERATION_WALL_S}
                            if wl.device.calibrated else None),
            "network_dilation": network_dilation(wl, ctx.switch or {}, len(workers)),
        }
        progs = []
        if ps is not None:
            cfg = dict(common, host="ps", role="ps", rank=-1, ina=None, trace=None, straggler=None,
                       out=str(ctx.work_dir / "ps.jsonl"))
            progs.append(HostProgram("ps", self.module_argv("hosts.lhc.worker",
                                                            self.write_config(ctx, "ps", cfg)), phase=0))
        for rank, h in enumerate(workers):
            ina = (dict(ina_settings(ctx.switch, h), **wl.ina.model_dump())
                   if wl.algorithm in SWITCH_ALGOS else None)
            cfg = dict(common, host=h, role="worker", rank=rank, ina=ina,
                       trace=str(ctx.work_dir / f"{h}.trace.jsonl"), straggler=straggler_for(scn, h),
                       out=str(ctx.work_dir / f"{h}.jsonl"))
            progs.append(HostProgram(h, self.module_argv("hosts.lhc.worker",
                                                         self.write_config(ctx, h, cfg)), phase=1))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        from testbed.switch.jobs import JobRequest  # noqa: PLC0415

        wl = point.scenario.workload
        if wl.algorithm not in SWITCH_ALGOS:
            return []
        return [JobRequest(1, tuple(h for h in point.scenario.hosts() if h not in wl.extra_hosts()))]

    def timeout_s(self, ctx: PointContext) -> float:
        wl = ctx.point.scenario.workload
        cal = wl.calibration_rounds * (wl.calibration_iterations + 1) if wl.device.calibrated else 0
        return wl.timeout_s * 2 + ITERATION_WALL_S * (wl.iterations + wl.warmup + cal) + 60.0

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [summary_row(r) for r in records if r.get("type") == "lhc_summary"]


# ---------------------------------------------------------------------------
# collect (pure functions of the work folder)
# ---------------------------------------------------------------------------
def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: LhcWorkload = scenario.workload
    workers = [h for h in scenario.hosts() if h not in wl.extra_hosts()]
    raw = {h: read_jsonl(work_dir / f"{h}.jsonl") for h in workers}
    iters = [dict(r, type="lhc_iter") for h in workers for r in raw[h] if r.get("type") == "iter"]
    sums = {h: next((r for r in raw[h] if r.get("type") == "summary"), None) for h in workers}
    summary = point_summary(wl, workers, iters, sums)
    cals = [dict(r, type="calibration") for h in workers for r in raw[h] if r.get("type") == "calibration"]
    return [*iters, *cals, *fidelity_records(wl, work_dir, summary), summary]


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def _training_curve(iters: list[dict[str, Any]]) -> dict[str, Any]:
    r0 = sorted((r for r in iters if r.get("rank") == 0 and "test_acc" in r), key=lambda r: r["iter"])
    if not r0:
        return {}
    return {"test_acc_curve": [r["test_acc"] for r in r0], "train_loss_curve": [r["train_loss"] for r in r0],
            "weights_digests": [r["weights_digest"] for r in r0], "final_test_acc": r0[-1]["test_acc"]}


def _retx(worker_summary: dict | None, key: str) -> int:
    return int((((worker_summary or {}).get(key)) or {}).get("retransmissions", 0))


def point_summary(wl: LhcWorkload, workers: list[str], iters: list[dict[str, Any]],
                  sums: dict[str, Any]) -> dict[str, Any]:
    world = len(workers)
    meas = [r for r in iters if not r.get("warmup")]
    checked = [r for r in iters if r.get("checked")]
    # Every rank hashed its result: per iteration all digests equal = everyone got rank 0's checked sum.
    by_it: dict[int, set] = {}
    for r in iters:
        by_it.setdefault(r["iter"], set()).add(r["digest"])
    digest_mismatch = sum(1 for d in by_it.values() if len(d) > 1)
    decode_errors = sum(1 for r in checked if not r["ok"]) + digest_mismatch
    n = meas[0]["n"] if meas else None
    # Per iteration: the slowest worker's times (synchronous training waits for it).
    per_it: dict[int, list] = {}
    for r in meas:
        per_it.setdefault(r["iter"], []).append(r)
    agg_s = _median([max(x["agg_s"] for x in rs) for rs in per_it.values()])
    comm_s = _median([max(x["comm_s"] for x in rs) for rs in per_it.values()])
    # Network time of a round: from the last worker's submit to the result, i.e. the
    # shortest wait of any worker (the others also waited for the slowest encoder,
    # as the fidelity monitor's last-arrival rule says). Summed over the rounds.
    round_keys = ("comm_support_s", "comm_sketch_s") if meas and "comm_sketch_s" in meas[0] else ("comm_s",)
    net_s = _median([sum(min(x[k] for x in rs) for k in round_keys) for rs in per_it.values()])
    iter_s = _median([max(x["iter_s"] for x in rs) for rs in per_it.values()])
    values_sent = _median([r.get("values_sent") for r in meas])
    dense_bytes = 4 * n if n else None
    sent_bytes = 4 * values_sent if values_sent is not None else None
    ok = all(s is not None and s.get("ok") for s in sums.values())
    # The TDF the workers ran at (calibrated or fixed): one value, or the point is wrong.
    tdfs = {s.get("tdf") for s in sums.values() if s and s.get("tdf") is not None}
    if len(tdfs) > 1:
        raise ValueError(f"workers ran at different TDFs {sorted(tdfs)}: calibration did not agree")
    tdf = tdfs.pop() if tdfs else (wl.device.spec()["time_scale"] if wl.device.type == "gpu" else 1.0)
    return {
        "type": "lhc_summary", "algorithm": wl.algorithm, "workers": world, "n": n,
        "gradient": (next((s for s in sums.values() if s), None) or {}).get("gradient"),
        "density": _median([(r.get("union") or 0) / r["n"] for r in meas]) if wl.algorithm.startswith("lhc")
        else None,
        "iterations": len(per_it), "ok": ok,
        "error": next((s.get("error") for s in sums.values() if s and s.get("error")), None),
        "decode_errors": decode_errors, "checked_iterations": len(checked),
        "digest_mismatches": digest_mismatch, "exact": decode_errors == 0 and len(checked) > 0,
        "iter_ms": None if iter_s is None else iter_s * 1e3,
        "agg_ms": None if agg_s is None else agg_s * 1e3,
        "comm_ms": None if comm_s is None else comm_s * 1e3,
        "net_ms": None if net_s is None else net_s * 1e3,
        "encode_ms": _median([r["encode_s"] * 1e3 for r in meas]),
        "decode_ms": _median([r["decode_s"] * 1e3 for r in meas]),
        "dense_bytes": dense_bytes, "sent_bytes": sent_bytes,
        "dense_over_sent": dense_bytes / sent_bytes if dense_bytes and sent_bytes else None,
        # Hardware-equivalent times (emulated / TDF): points' TDFs differ when calibrated,
        # so only these compare across points.
        "hw_iter_us": None if iter_s is None else iter_s / tdf * 1e6,
        "hw_agg_us": None if agg_s is None else agg_s / tdf * 1e6,
        "hw_net_us": None if net_s is None else net_s / tdf * 1e6,
        # Aggregation throughput on hardware-equivalent time: dense-gradient bytes per
        # second of aggregation (network rounds only, net_ms: agg_network_gbps; with
        # encode/decode and waiting for the slowest worker, agg_ms: agg_gbps).
        "agg_gbps": dense_bytes * 8 / (agg_s / tdf) / 1e9 if dense_bytes and agg_s else None,
        "agg_network_gbps": dense_bytes * 8 / (net_s / tdf) / 1e9 if dense_bytes and net_s else None,
        "union": _median([r.get("union") for r in meas]), "rows": _median([r.get("rows") for r in meas]),
        "core_values": _median([r.get("core_values") for r in meas]),
        "sketch_values": _median([r.get("sketch_values") for r in meas]),
        "support_values": _median([r.get("support_values") for r in meas]),
        "peeled_share": (float(np.mean([bool(r.get("peeled")) for r in meas]))
                         if meas and "peeled" in meas[0] else None),
        "rel_err": _median([r.get("rel_err") for r in checked]),
        # In-switch retransmissions of the measured run (calibration's apart: its first
        # round runs undilated, before the transport's timers learn the dilated op time).
        "retransmissions": sum(_retx(s, "collective_stats") - _retx(s, "calibration_stats")
                               for s in sums.values()),
        "calibration_retransmissions": sum(_retx(s, "calibration_stats") for s in sums.values()),
        # A training run (gradient kind ncf_train): rank 0's curve, every iteration in order.
        **_training_curve(iters),
        "tdf": tdf, "calibrated": wl.device.calibrated,
        "network_dilated": any(bool((s or {}).get("network_dilated")) for s in sums.values()),
        "valid": all(((s or {}).get("device") or {}).get("valid", True) for s in sums.values()),
    }


def fidelity_records(wl: LhcWorkload, work_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The fidelity monitor's verdict and the projection at the point's worker count
    (testbed.fidelity.records; compute nodes keep their modeled time)."""
    from testbed.fidelity.records import fidelity_and_projection  # noqa: PLC0415

    # The trace holds every iteration, warmup included (calibration is not in it).
    iters = max(1, (summary.get("iterations") or 0) + wl.warmup)
    return fidelity_and_projection(work_dir, wl.hardware, summary["tdf"], "lhc", iters, summary,
                                   extra={"algorithm": wl.algorithm}).records


def summary_row(s: dict[str, Any]) -> dict[str, Any]:
    """The point's row of the end-of-run table and summary.csv: hw_* hardware-equivalent
    (emulated / TDF; each point runs at its own TDF, so only these compare across
    points), projected_hw_* the hardware model's replay of the point's own trace,
    emu_* emulated wall time."""
    def r(v, nd=3):
        return None if v is None else round(v, nd)
    proj_ms = s.get("projected_hw_iter_ms")
    return {"algorithm": s["algorithm"], "workers": s["workers"], "n": s["n"],
            "hw_iter_us": r(s.get("hw_iter_us"), 2), "hw_agg_us": r(s.get("hw_agg_us"), 2),
            "hw_net_us": r(s.get("hw_net_us"), 2),
            "projected_hw_iter_us": r(proj_ms * 1e3 if proj_ms is not None else None, 2),
            "hw_net_gbps": r(s["agg_network_gbps"], 4),
            "emu_iter_ms": r(s["iter_ms"]), "emu_agg_ms": r(s["agg_ms"]), "emu_net_ms": r(s["net_ms"]),
            "tdf": s.get("tdf"), "net_ratio": r(s.get("net_ratio_p50"), 2),
            "emu/proj": r(s.get("emulated_over_projected"), 2),
            "dense_over_sent": r(s["dense_over_sent"], 2),
            "union": s["union"], "core": s["core_values"], "decode_errors": s["decode_errors"],
            "exact": s["exact"], "valid": s["valid"]}
