"""P4SGD workload: model-parallel GLM training over in-switch aggregation, and its baselines.

Workers run `python -m hosts.p4sgd`: mode model_parallel (P4SGD: feature slices,
one small allreduce of partial dot products per micro-batch, pipelined) or
data_parallel (replicas, one D-dimensional gradient allreduce per step), over
the switch, a host ring or a parameter server. Training never evaluates over the
network; workers keep timestamped model snapshots, and `collect` assembles and
evaluates them offline into loss-vs-time curves.

Metric records (metrics.jsonl, besides the workers' `validity` records):
  p4sgd_iter     one per worker and iteration: iteration time, compute, exposed
                 communication, straggler stall, other (host overhead), and the
                 latency of every allreduce of the iteration (`allreduce_s`).
  p4sgd_curve    one per snapshot: time (emulated, dilated), iteration, samples,
                 training loss / objective / accuracy of the assembled model.
  p4sgd_summary  one per point: throughput, iteration time, communication share,
                 pipeline hiding share, allreduce latency, final loss, time to
                 target loss, correctness (all workers got identical sums).
All times are emulated wall-clock seconds; with a modeled device they are
dilated by `dilation` (= time_scale), which every record carries.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hosts.glm import profiles as dataset_profiles  # light: the profile table and its spec check
from testbed import stats
from testbed.results import read_jsonl, resolve_project_path
from testbed.workloads import register_workload
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for,
                                     switch_job)
from testbed.workloads.calibrated import CalibratedWorkloadParams, dilation_block
from testbed.workloads.p4sgd_dataset import point_dataset, shared_dataset_file
from testbed.workloads.p4sgd_projection import fidelity_records

FIGURES = ("p4sgd_scaling", "p4sgd_convergence", "p4sgd_latency_cdf", "p4sgd_loss",
           "p4sgd_straggler", "p4sgd_pipeline")
DEFAULT_DILATION = {"cpu": 1.0, "u280": 100.0, "gpu": 100.0}
# time_scale auto: calibration's first round runs at this dilation ([A] the emulated
# in-switch allreduce was 200-1400x slower than hardware here, issue 8).
CALIBRATION_START = 500.0
P4SGD_TCP_PORT = 47400   # ring ranks use +1+rank, the PS the base (hosts.common.config)
# [I] one in-switch allreduce round trip on real hardware (Tofino + FPGA NIC),
# research/seeds.md section 1.3; used only to report how much slower the emulated network is.
HW_ALLREDUCE_S = 2e-6
# [D] the U280 has two 100 GbE QSFP28 ports; [A] a data-parallel gradient allreduce through
# a switch streams the D float32 values up and the sums down at line rate, one round trip
# apart (SwitchML-style): ~HW_ALLREDUCE_S + 4 D / HW_LINK_BPS. Used like HW_ALLREDUCE_S.
HW_LINK_BPS = 100e9 / 8


register_figures_if_loaded(*FIGURES)

# ---------------------------------------------------------------------------
# Params model
# ---------------------------------------------------------------------------
_DATASET_KEYS = {
    "synthetic": {"source", "kind", "samples", "features", "density", "model", "noise", "seed",
                  "skew", "name"},
    "libsvm": {"source", "path", "n_features", "task", "model", "positive_label", "name"},
    "builtin": {"source", "name", "bias"},
    "profile": dataset_profiles.SPEC_KEYS,
}
_BUILTIN_DATASETS = {"breast_cancer", "digits"}


def _default_dataset() -> dict[str, Any]:
    return {"source": "synthetic", "kind": "dense", "samples": 4096, "features": 2048}


class XrtParams(BaseModel):
    """A real (or dry-run) Alveo U280 kernel driven through XRT (hosts/glm/u280_xrt.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    xclbin: Optional[str] = Field(None, description="The kernel's xclbin (relative to the project root or "
                                  "absolute); required unless dry_run.")
    device_index: int = Field(0, ge=0, description="Which card (xrt device index) on the worker's host.")
    kernel_name: str = Field("p4sgd_glm", min_length=1, description="Kernel name inside the xclbin "
                             "(its interface: hosts/glm/u280_xrt.py).")
    dry_run: bool = Field(False, description="Record every XRT call and compute the kernel in numpy "
                          "(time: the modeled u280 device); false needs pyxrt on the worker's host.")

    @field_validator("xclbin")
    @classmethod
    def _xclbin_exists(cls, path: Optional[str]) -> Optional[str]:
        from hosts.glm.u280_xrt import check_xclbin  # noqa: PLC0415 - light
        if path is not None and (why := check_xclbin(resolve_project_path(path))) is not None:
            raise ValueError(why)
        return path

    @model_validator(mode="after")
    def _real_needs_xclbin_and_pyxrt(self) -> "XrtParams":
        from hosts.glm.u280_xrt import pyxrt_available  # noqa: PLC0415
        if not self.dry_run:
            if self.xclbin is None:
                raise ValueError("xclbin: missing; a real U280 run needs the kernel's xclbin "
                                 "(or set dry_run: true)")
            if not pyxrt_available():
                raise ValueError("dry_run is false but pyxrt (XRT's Python binding) is not importable "
                                 "here: `source /opt/xilinx/xrt/setup.sh` on the U280 host, or set "
                                 "dry_run: true")
        return self

    def host_spec(self) -> dict[str, Any]:
        return {"xclbin": None if self.xclbin is None else str(resolve_project_path(self.xclbin)),
                "device_index": self.device_index, "kernel_name": self.kernel_name,
                "dry_run": self.dry_run}


@register_workload
class P4sgdWorkload(CalibratedWorkloadParams):
    """GLM training: P4SGD model parallelism or the data-parallel baseline."""

    FIGURES = FIGURES

    kind: Literal["p4sgd"] = Field("p4sgd", description="Workload type; selects which fields below apply.")
    mode: Literal["model_parallel", "data_parallel"] = Field(
        "model_parallel", description="model_parallel: P4SGD (feature slices, per-micro-batch allreduce "
                                      "of partial dot products); data_parallel: replicas, gradient allreduce.")
    glm: Literal["linreg", "logreg", "svm"] = Field("logreg", description="The generalized linear model.")
    dataset: dict[str, Any] = Field(
        default_factory=_default_dataset,
        description="hosts.glm.datasets.load_dataset spec: {source: synthetic, kind: dense|sparse, samples, "
                    "features, density, noise, seed, skew} | {source: libsvm, path, n_features} | "
                    "{source: builtin, name: breast_cancer} | {source: profile, name: rcv1, samples, "
                    "features, seed, noise} (a public dataset's shape, generated: hosts/glm/profiles.py). "
                    "A synthetic or profile set's labels follow `glm` unless it names its own `model`.")
    lr: float = Field(1.0, gt=0, description="Learning rate.")
    l2: float = Field(0.0, ge=0, description="L2 regularization (objective = mean loss + l2/2 ||x||^2).")
    batch: int = Field(64, ge=1, description="Samples per model update (the global mini-batch, both modes; "
                                             "data_parallel splits it over the workers).")
    micro_batch: int = Field(8, ge=1, description="model_parallel: samples per allreduce (one packet).")
    epochs: int = Field(2, ge=1, description="Passes over the data.")
    pipeline_depth: int = Field(4, ge=1, description="model_parallel: micro-batches in flight (1 = no "
                                                     "overlap; only an asynchronous collective overlaps).")
    collective: Literal["switch", "ring", "ps"] = Field(
        "switch", description="switch: in-network aggregation; ring: host ring allreduce; ps: a "
                              "parameter-server host `ps`.")
    device: Literal["cpu", "u280", "gpu"] = Field(
        "u280", description="Compute model: cpu = real numpy time; u280 / gpu = modeled FPGA / V100 "
                            "time (hosts/glm/devices.py), slept for, times `time_scale`.")
    xrt: Optional[XrtParams] = Field(
        None, description="device u280 only: the workers drive a U280 kernel through XRT (pyxrt), "
                          "given the user's xclbin: {xclbin, device_index, kernel_name, dry_run}. "
                          "Real: time is the kernel's measured time, undilated; dry_run: every XRT call "
                          "recorded (<host>.xrt_calls.jsonl), time from the modeled u280. null: modeled only.")
    device_options: dict[str, Any] = Field(
        default_factory=dict, description="Extra device-model parameters, e.g. {hbm_efficiency: 0.5, "
                                          "latency_s: 1e-6} (see hosts/glm/devices.py).")
    time_scale: Union[Literal["auto"], float, None] = Field(
        "auto", description="Time dilation (TDF) of a modeled device. auto (default): calibrated on the "
                            "built network before training (the workload's own allreduces against the "
                            "`hardware` model; testbed.fidelity). A number: fixed, checked by the fidelity "
                            "monitor all the same. null: the old fixed default (100 for u280/gpu).")
    calibration_batches: int = Field(4, ge=1, le=64, description="time_scale auto: mini-batches per "
                                     "calibration round (training then starts from scratch).")
    fixed_point_exp: Optional[int] = Field(
        16, ge=-32, le=40, description="switch, model_parallel: partial sums travel as round(q * 2^k) "
                                       "with this fixed k (no scale round trip); null = agree per vector.")
    balance: Literal["auto", "nnz", "width"] = Field(
        "auto", description="Feature partitioning: nnz-balanced column blocks (auto: nnz for sparse data).")
    seed: int = Field(0, ge=0, description="Sample-order seed; fixed (not per point) so points are comparable.")
    snapshot_every: int = Field(8, ge=1, description="Iterations between model snapshots (the loss curve).")
    target_loss: Optional[float] = Field(None, gt=0, description="Training loss for time-to-target; null = none.")
    timeout_s: float = Field(120.0, gt=0, description="A host gives up if one allreduce stalls this long; "
                                                      "the point fails if training takes longer (+30 s).")

    @field_validator("dataset")
    @classmethod
    def _check_dataset(cls, spec: dict[str, Any]) -> dict[str, Any]:
        source = spec.get("source")
        if source not in _DATASET_KEYS:
            raise ValueError(f"dataset.source must be one of {', '.join(_DATASET_KEYS)}; got {source!r}")
        unknown = sorted(set(spec) - _DATASET_KEYS[source])
        if unknown:
            raise ValueError(f"unknown dataset keys {unknown} for source {source}; allowed: "
                             f"{', '.join(sorted(_DATASET_KEYS[source]))}")
        if source == "synthetic":
            if spec.get("kind", "dense") not in ("dense", "sparse"):
                raise ValueError(f"dataset.kind must be dense or sparse, got {spec.get('kind')!r}")
            for key in ("samples", "features"):
                v = spec.get(key, 1)
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError(f"dataset.{key} must be a positive integer, got {v!r}")
            d = spec.get("density", 0.01)
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d <= 1:
                raise ValueError(f"dataset.density must be in (0, 1], got {d!r}")
        elif source == "libsvm":
            if not isinstance(spec.get("path"), str):
                raise ValueError("a libsvm dataset needs `path` (relative to the project root or absolute)")
            if not resolve_project_path(spec["path"]).exists():
                raise ValueError(f"dataset file {resolve_project_path(spec['path'])} does not exist")
        elif source == "profile":
            dataset_profiles.check_spec(spec)
        elif spec.get("name") not in _BUILTIN_DATASETS:
            raise ValueError(f"unknown builtin dataset {spec.get('name')!r}; available: "
                             f"{', '.join(sorted(_BUILTIN_DATASETS))}")
        return spec

    @model_validator(mode="after")
    def _cross_checks(self) -> "P4sgdWorkload":
        if self.micro_batch > self.batch:
            raise ValueError(f"micro_batch {self.micro_batch} > batch {self.batch}")
        if isinstance(self.time_scale, float) and self.time_scale <= 0:
            raise ValueError(f"time_scale must be > 0 or auto, got {self.time_scale}")
        if self.device == "cpu" and self.time_scale not in (None, 1.0, "auto"):
            raise ValueError("time_scale dilates a modeled device; the cpu device is measured, "
                             "not modeled: leave time_scale null (or 1)")
        if self.xrt is not None:
            if self.device != "u280":
                raise ValueError(f"xrt drives a U280 kernel: it needs device u280, not {self.device!r}")
            if self.mode != "model_parallel":
                raise ValueError("xrt: the U280 kernel runs the model-parallel (P4SGD) step; "
                                 "mode data_parallel cannot use it")
            if self.dataset.get("source") == "synthetic" and self.dataset.get("kind") == "sparse":
                raise ValueError("xrt: the U280 kernel takes dense samples; dataset.kind is sparse")
            name = self.dataset.get("name")
            if self.dataset.get("source") == "profile" and not dataset_profiles.PROFILES[name].dense:
                raise ValueError(f"xrt: the U280 kernel takes dense samples; profile {name} is sparse")
            if self.measured and self.time_scale not in (None, 1.0, "auto"):
                raise ValueError("time_scale dilates a modeled device; a real U280 (xrt.dry_run false) "
                                 "is measured: leave time_scale null (or 1)")
        if self.dataset.get("source") == "profile":
            dataset_profiles.check_spec(self.dataset_spec())   # with the labels' model: noise bound
        from hosts.glm.devices import make_device  # light: no numpy work
        try:
            make_device(self.device_spec())
        except ValueError as e:
            raise ValueError(f"device_options: {e}") from None
        return self

    # -- derived ---------------------------------------------------------------
    @property
    def measured(self) -> bool:
        """Compute time is measured, not modeled: the cpu device, or a real U280 (xrt)."""
        return self.device == "cpu" or (self.xrt is not None and not self.xrt.dry_run)

    @property
    def calibrated(self) -> bool:
        """Dilation set by calibration on the built network (modeled devices only)."""
        return self.time_scale == "auto" and not self.measured

    def at_fixed_tdf(self, tdf: float) -> "P4sgdWorkload":
        return self.model_copy(update={"time_scale": tdf})

    def retry_fits(self, tdf: float, fidelity: dict[str, Any]) -> bool:
        """P4SGD's deadline is timeout_s over the run's hardware time (hw_train_s), as
        calibration's (run_wall_s = timeout_s)."""
        hw_s = fidelity.get("hw_train_s")
        return not hw_s or tdf * float(hw_s) <= self.timeout_s

    @property
    def dilation(self) -> float:
        """The fixed dilation, or calibration's starting point."""
        if self.measured:
            return 1.0
        if isinstance(self.time_scale, (int, float)):
            return float(self.time_scale)
        if self.calibrated:
            return CALIBRATION_START
        return DEFAULT_DILATION[self.device]

    def device_label(self) -> str:
        """The device as records name it: u280 alone is the modeled one."""
        if self.xrt is None:
            return self.device
        return "u280 (dry run: modeled time)" if self.xrt.dry_run else "u280 (XRT: measured kernel time)"

    def device_spec(self) -> dict[str, Any]:
        spec = {"type": self.device, **self.device_options}
        if self.device != "cpu":
            spec["time_scale"] = self.dilation
        return spec

    def dataset_spec(self) -> dict[str, Any]:
        """The spec hosts load: synthetic labels follow the GLM; libsvm paths absolute."""
        spec = dict(self.dataset)
        if spec["source"] in ("synthetic", "profile"):
            spec.setdefault("model", self.glm)
        elif spec["source"] == "libsvm":
            spec["path"] = str(resolve_project_path(spec["path"]))
            spec.setdefault("model", self.glm)
        return spec

    def extra_hosts(self) -> list[str]:
        return ["ps"] if self.collective == "ps" else []


# ---------------------------------------------------------------------------
# Hardware time of the workload's operations (testbed.fidelity)
# ---------------------------------------------------------------------------
def n_features(wl: P4sgdWorkload) -> int:
    spec = wl.dataset_spec()
    if spec["source"] == "synthetic":
        return int(spec.get("features", 1))
    if spec["source"] == "profile":
        return dataset_profiles.shape(spec)[1]
    return int(point_dataset(spec).n_features)      # real files and builtins: read them


def op_values(wl: P4sgdWorkload) -> int:
    """Values of one allreduce: a micro-batch of partial dot products (P4SGD) or a
    full gradient (data parallel)."""
    return wl.micro_batch if wl.mode == "model_parallel" else n_features(wl)


def network_dilation(wl: Any, switch_info: dict[str, Any], workers: int) -> dict[str, Any] | None:
    """The hosts' `network_dilation` block: the soft switches' control files and the
    `hardware` profile's hop, or None where the network cannot or should not be dilated
    (no soft switch, a measured CPU device, dilate_network false)."""
    return dilation_block(wl, switch_info, not wl.measured, lambda: hw_op_time(wl, workers))


def hw_op_time(wl: P4sgdWorkload, workers: int, profile: Any = None) -> float:
    """Modeled hardware seconds of one of the workload's allreduces."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time  # noqa: PLC0415
    # Data-parallel (or unfixed) in-switch sums agree on a scale first (hosts/p4sgd.py).
    agreed = wl.collective == "switch" and (wl.mode != "model_parallel" or wl.fixed_point_exp is None)
    return collective_time("allreduce", wl.collective, op_values(wl), 4, workers,
                           profile or load_profile(wl.hardware), scale_round=agreed)


# ---------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------


@register_runtime
class P4sgdRuntime(WorkloadRuntime):
    kind = "p4sgd"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl: P4sgdWorkload = scn.workload
        workers = [h for h in scn.hosts() if h not in wl.extra_hosts()]
        if wl.collective == "switch":
            ctx.require_switch("collective 'switch'", "collective ring/ps")
        if wl.mode == "data_parallel" and wl.batch % len(workers):
            raise ValueError(f"data_parallel splits workload.batch={wl.batch} over {len(workers)} "
                             f"workers; use a multiple of {len(workers)}")
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in workers]
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.collective == "ps" else None
        common = {
            "world": len(workers), "mode": wl.mode, "glm": wl.glm, "l2": wl.l2, "lr": wl.lr,
            "batch": wl.batch, "micro_batch": wl.micro_batch, "epochs": wl.epochs,
            "pipeline_depth": wl.pipeline_depth, "seed": wl.seed, "dataset": wl.dataset_spec(),
            "balance": wl.balance, "collective": wl.collective, "peers": peers, "ps": ps,
            "port": ctx.tcp_port_base(P4SGD_TCP_PORT), "fixed_point_exp": wl.fixed_point_exp,
            "device": wl.device_spec(), "snapshot_every": wl.snapshot_every,
            "start_at": ctx.start_at, "dataset_file": shared_dataset_file(wl.dataset_spec(), ctx),
            "connect_timeout_s": 30.0, "timeout_s": wl.timeout_s,
            # run_wall_s: the wall time the point's deadline (timeout_s) leaves the training run;
            # a calibrated TDF that would not fit it is refused (hosts.common.calibration)
            "calibration": ({"hw_op_s": hw_op_time(wl, len(workers)), "rounds": wl.calibration_rounds,
                             "batches": wl.calibration_batches, "run_wall_s": wl.timeout_s}
                            if wl.calibrated else None),
            "network_dilation": network_dilation(wl, ctx.switch, len(workers)),
            "xrt": wl.xrt.host_spec() if wl.xrt is not None else None,
        }
        progs = []
        if ps is not None:
            cfg = dict(common, host="ps", role="ps", rank=-1, ina=None, trace=None,
                       straggler=straggler_for(scn, "ps"), out=str(ctx.work_dir / "ps.jsonl"))
            progs.append(HostProgram("ps", self.module_argv("hosts.p4sgd", self.write_config(ctx, "ps", cfg)),
                                     phase=0))
        for rank, h in enumerate(workers):
            ina = ina_settings(ctx.switch, h) if wl.collective == "switch" else None
            cfg = dict(common, host=h, role="worker", rank=rank, ina=ina,
                       trace=str(ctx.work_dir / f"{h}.trace.jsonl"),
                       straggler=straggler_for(scn, h), out=str(ctx.work_dir / f"{h}.jsonl"))
            progs.append(HostProgram(h, self.module_argv("hosts.p4sgd", self.write_config(ctx, h, cfg)),
                                     phase=1))
        if wl.xrt is not None:
            _write_xrt_plans(wl, workers, ctx.work_dir)
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        return switch_job(point)

    def timeout_s(self, ctx: PointContext) -> float:
        return ctx.point.scenario.workload.timeout_s + 30.0

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [summary_row(r) for r in records if r.get("type") == "p4sgd_summary"]


def _write_xrt_plans(wl: P4sgdWorkload, workers: list[str], work_dir: Path) -> None:
    """<host>.xrt_plan.txt: the XRT calls each worker makes to open its card and train
    the first mini-batch (shapes from the feature partition; nothing touches a card).
    `testbed run --dry-run` prints them with the configs; a run keeps them beside the
    workers' recorded calls (<host>.xrt_calls.jsonl)."""
    from hosts.glm.partition import partition_features  # noqa: PLC0415
    from hosts.glm.u280_xrt import plan_calls  # noqa: PLC0415

    ds = point_dataset(wl.dataset_spec())
    ranges = partition_features(ds, len(workers), wl.balance).ranges
    x = wl.xrt.host_spec()
    for h, (a, b) in zip(workers, ranges):
        ad = plan_calls(ds.n_samples, b - a, wl.batch, wl.micro_batch, wl.pipeline_depth, wl.glm,
                        wl.lr, wl.l2, x["xclbin"], x["device_index"], x["kernel_name"])
        (work_dir / f"{h}.xrt_plan.txt").write_text(
            f"{h}: features {a}..{b} of {ds.n_features}; "
            f"{'dry run (numpy), time: modeled u280' if x['dry_run'] else 'real U280 through pyxrt'}\n"
            + ad.text() + "\n")


# ---------------------------------------------------------------------------
# collect: raw host outputs -> metric records (pure functions, unit-testable)
# ---------------------------------------------------------------------------
def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: P4sgdWorkload = scenario.workload
    workers = [h for h in scenario.hosts() if h not in wl.extra_hosts()]
    raw = {h: read_jsonl(work_dir / f"{h}.jsonl") for h in workers}
    out: list[dict[str, Any]] = []
    for h in workers + wl.extra_hosts():
        for r in raw.get(h) or read_jsonl(work_dir / f"{h}.jsonl"):
            if r.get("type") == "validity":
                out.append(dict(r, host=h))
    iters = [_iter_record(r) for h in workers for r in raw[h] if r.get("type") == "iter"]
    out.extend(iters)
    summaries = {h: next((r for r in raw[h] if r.get("type") == "summary"), None) for h in workers}
    curve, final_x = _curve(wl, work_dir, workers, raw, summaries)
    out.extend(curve)
    if final_x is not None:
        np.save(work_dir / "model.npy", final_x)
    summary = _summary(wl, workers, raw, summaries, iters, curve, final_x,
                       [r for r in out if r.get("type") == "validity"], work_dir)
    out.extend(r for h in workers for r in raw[h] if r.get("type") == "calibration")
    # A U280 kernel's adapter: which card/xclbin, dry run or not, calls made (listed in
    # <host>.xrt_calls.jsonl beside the outputs), and on a real card its kernel time.
    out.extend(r for h in workers for r in raw[h] if r.get("type") == "xrt")
    out.extend(fidelity_records(scenario, work_dir, summary))
    out.append(summary)
    return out


def _iter_record(r: dict[str, Any]) -> dict[str, Any]:
    other = r["iter_s"] - r["compute_s"] - r["comm_s"] - r.get("stall_s", 0.0)
    return {"type": "p4sgd_iter", "host": r["host"], "rank": r["rank"], "iter": r["iter"],
            "epoch": r["epoch"], "samples": r["samples"], "t_s": r["t_s"], "iter_s": r["iter_s"],
            "compute_s": r["compute_s"], "comm_s": r["comm_s"], "stall_s": r.get("stall_s", 0.0),
            "other_s": max(0.0, other), "allreduce_s": r["allreduce_s"], "dilation": r["dilation"]}


def _load_snapshots(work_dir: Path, host: str) -> np.ndarray | None:
    p = work_dir / f"{host}.snapshots.npy"
    return np.load(p) if p.exists() else None


def _curve(wl: P4sgdWorkload, work_dir: Path, workers: list[str], raw: dict[str, list],
           summaries: dict[str, Any]) -> tuple[list[dict[str, Any]], np.ndarray | None]:
    """Assemble the model at every snapshot and evaluate it on the training data."""
    from hosts.glm.models import get_model
    from hosts.glm.training import evaluate

    snaps = {h: _load_snapshots(work_dir, h) for h in workers}
    metas = {h: [r for r in raw[h] if r.get("type") == "snapshot"] for h in workers}
    if any(s is None for s in snaps.values()):
        return [], None
    n = min(min(len(snaps[h]), len(metas[h])) for h in workers)
    ds = point_dataset(wl.dataset_spec())
    model = get_model(wl.glm, wl.l2)
    mp = wl.mode == "model_parallel"
    order = sorted(workers, key=lambda h: (summaries[h] or {}).get("rank", workers.index(h)))
    curve = []
    x = None
    for j in range(n):
        # Model parallel: slices in rank order; data parallel: every replica is the model.
        x = np.concatenate([snaps[h][j] for h in order]) if mp else snaps[order[0]][j]
        if x.size != ds.n_features:
            return [], None
        ev = evaluate(ds, x, model)
        m0 = metas[order[0]][j]
        t = max(metas[h][j]["t_s"] for h in workers)  # a snapshot exists once all have it
        curve.append({"type": "p4sgd_curve", "snapshot": j, "iter": m0["iter"], "epochs": m0["epochs"],
                      "samples_seen": m0["samples_seen"], "t_s": t, "dilation": m0["dilation"],
                      "loss": ev["loss"], "objective": ev["objective"], "accuracy": ev["accuracy"]})
    final = [work_dir / f"{h}.model.npy" for h in order]
    if all(p.exists() for p in final):
        parts = [np.load(p) for p in final]
        x = np.concatenate(parts) if mp else parts[0]
    return curve, x


def time_to_target(curve: list[dict[str, Any]], target: float | None) -> float | None:
    """Emulated time at which the smoothed training-loss curve reaches the target
    (testbed.stats.time_to_target); None if it never does (or no target)."""
    return stats.time_to_target([c["t_s"] for c in curve], [c["loss"] for c in curve], target)


def _switch_cpu(work_dir: Path) -> dict[str, float]:
    """CPU, wall time and run-queue wait of the point's soft switches (summed; they
    cover the switch's whole life: start, handshake, training, teardown)."""
    p = work_dir / "switch_stats.json"
    try:
        stats = json.loads(p.read_text()) if p.exists() else {}
    except (OSError, ValueError):
        return {}
    out: dict[str, float] = {}
    for st in stats.values():
        if isinstance(st, dict):
            for k in ("cpu_time_s", "wall_time_s", "runqueue_wait_s"):
                if isinstance(st.get(k), (int, float)):
                    out[k] = out.get(k, 0.0) + float(st[k])
    return out


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def _summary(wl: P4sgdWorkload, workers: list[str], raw: dict[str, list], summaries: dict[str, Any],
             iters: list[dict[str, Any]], curve: list[dict[str, Any]], final_x: np.ndarray | None,
             validity: list[dict[str, Any]], work_dir: Path | None = None) -> dict[str, Any]:
    sums = [s for s in summaries.values() if s is not None]
    ok = len(sums) == len(workers) and all(s.get("ok") for s in sums)
    digests = {s.get("digest") for s in sums}
    replicas_identical = None
    if wl.mode == "data_parallel" and ok:
        models = [np.load(s["model_path"]) for s in sums if Path(s["model_path"]).exists()]
        replicas_identical = len(models) == len(sums) and all(np.array_equal(models[0], m) for m in models)
    train_s = max((s["train_s"] for s in sums), default=0.0)
    samples = sums[0]["samples"] if sums else 0
    lat = np.array([v for r in iters for v in r["allreduce_s"]], dtype=np.float64)
    iter_s = np.array([r["iter_s"] for r in iters], dtype=np.float64)
    # Data parallelism waits for every gradient allreduce (nothing to overlap): no hidden share.
    hidden = [1.0 - s["comm_s"] / s["allreduce_total_s"] for s in sums
              if s.get("allreduce_total_s") and wl.mode == "model_parallel"]
    comm_share = [s["comm_s"] / s["train_s"] for s in sums if s.get("train_s")]
    compute_share = [s["compute_s"] / s["train_s"] for s in sums if s.get("train_s")]
    final = curve[-1] if curve else {}
    # The dilation the workers actually used (calibrated or fixed), identical on all.
    dilation = float(sums[0].get("dilation", wl.dilation)) if sums else wl.dilation
    stats = [s.get("collective_stats") or {} for s in sums]
    # What the emulation cost in real CPU: all hosts share the machine's cores.
    host_cpu = [s["cpu_s"] for s in sums if s.get("cpu_s") is not None]
    cores = os.cpu_count() or 1
    sw = _switch_cpu(work_dir) if work_dir is not None else {}
    # Hardware time of one allreduce of this point's vectors (see HW_LINK_BPS).
    n_values = wl.micro_batch if wl.mode == "model_parallel" else (final_x.size if final_x is not None else 0)
    hw_allreduce = HW_ALLREDUCE_S + 4 * n_values / HW_LINK_BPS
    return {
        "type": "p4sgd_summary", "mode": wl.mode, "collective": wl.collective, "glm": wl.glm,
        "device": wl.device_label(), "dilation": dilation, "times_dilated": dilation != 1.0,
        "workers": len(workers), "batch": wl.batch, "micro_batch": wl.micro_batch,
        "pipeline_depth": wl.pipeline_depth, "ok": ok,
        "error": next((s.get("error") for s in sums if s.get("error")), None),
        "iterations": sums[0]["iterations"] if sums else 0, "samples": samples,
        "train_s": train_s,
        "throughput_sps": samples / train_s if train_s > 0 else None,
        # In hardware time: valid only if the network was slowed as much as the device
        # (the fidelity monitor's verdict, `valid`, says whether it was).
        "tdf": dilation, "calibrated": wl.calibrated,
        # The soft switch slowed the network to the TDF (docs/time-fidelity.md).
        "network_dilated": any(r.get("network_dilated") for h in workers for r in raw.get(h, [])
                               if r.get("type") == "start"),
        "hw_train_s": train_s / dilation if train_s > 0 else None,
        "hw_throughput_sps": samples / train_s * dilation if train_s > 0 else None,
        "iter_ms_mean": float(iter_s.mean() * 1e3) if iter_s.size else None,
        "iter_ms_p50": float(np.percentile(iter_s, 50) * 1e3) if iter_s.size else None,
        "iter_ms_p99": float(np.percentile(iter_s, 99) * 1e3) if iter_s.size else None,
        "compute_share": _mean(compute_share), "comm_share": _mean(comm_share),
        # Host work the device model does not cover (Python around each micro-batch).
        "other_share": (float(sum(r["other_s"] for r in iters) / sum(r["iter_s"] for r in iters))
                        if iters and sum(r["iter_s"] for r in iters) > 0 else None),
        # Per worker and iteration: modeled compute slept + numpy, and exposed communication.
        "compute_ms_mean": _mean([r["compute_s"] * 1e3 for r in iters]),
        "comm_ms_mean": _mean([r["comm_s"] * 1e3 for r in iters]),
        # 1 - exposed / total allreduce time (model parallel; None for data parallel,
        # which blocks on every allreduce). Only an asynchronous collective with
        # pipeline_depth > 1 can hide anything; depth 1 or ring/ps is ~0 by construction,
        # slightly negative when host-side packet handling outside the measured round
        # trip counts as exposed. Queueing of deeper pipelines lengthens each allreduce,
        # and so the total: compare exposed time across depths too (p4sgd_pipeline).
        "hidden_share": _mean(hidden),
        "allreduces_per_worker": int(lat.size // max(1, len(workers))),
        "allreduce_p50_ms": float(np.percentile(lat, 50) * 1e3) if lat.size else None,
        "allreduce_p99_ms": float(np.percentile(lat, 99) * 1e3) if lat.size else None,
        # Compare with `dilation`: the device is slowed by that factor, the network by this one.
        "network_slowdown_vs_hw": (float(np.percentile(lat, 50)) / hw_allreduce
                                   if lat.size and n_values else None),
        "hw_allreduce_s": hw_allreduce,
        "host_cpu_s": float(sum(host_cpu)) if host_cpu else None,
        # Share of the machine's cores the workers kept busy while training: near 1,
        # hosts queue for a core and iteration times measure the machine, not the model.
        "host_cpu_load": (float(sum(host_cpu)) / (train_s * cores)
                          if host_cpu and train_s > 0 else None),
        "cores": cores,
        "switch_cpu_s": sw.get("cpu_time_s"), "switch_wall_s": sw.get("wall_time_s"),
        "switch_runqueue_wait_s": sw.get("runqueue_wait_s"),
        "final_loss": final.get("loss"), "final_objective": final.get("objective"),
        "final_accuracy": final.get("accuracy"), "target_loss": wl.target_loss,
        "time_to_target_s": time_to_target(curve, wl.target_loss),
        "model_digest": (hashlib.blake2b(np.ascontiguousarray(final_x).tobytes(), digest_size=8).hexdigest()
                         if final_x is not None else None),
        # Every worker hashed every allreduce result: equal digests = identical sums everywhere.
        "all_correct": ok and len(digests) == 1 and replicas_identical is not False,
        "replicas_identical": replicas_identical,
        "valid": all(v.get("valid", True) for v in validity),
        "retransmissions": sum(int(st.get("retransmissions", 0)) for st in stats),
        "per_worker": [{"host": h, "train_s": (summaries[h] or {}).get("train_s"),
                        "compute_s": (summaries[h] or {}).get("compute_s"),
                        "comm_s": (summaries[h] or {}).get("comm_s"),
                        "part": (summaries[h] or {}).get("part")} for h in workers],
    }


def summary_row(s: dict[str, Any]) -> dict[str, Any]:
    """The point's row of the end-of-run table and summary.csv. Times and rates say
    what they are: hw_* hardware-equivalent (emulated / TDF: each point runs at its
    own TDF, so only these compare across points), projected_hw_* the hardware
    model's replay of the point's own trace, emu_* emulated wall time."""
    def r(v, nd=3):
        return None if v is None else round(v, nd)

    def hw(v, scale=1.0):           # an emulated duration in hardware-equivalent time
        return v * scale / tdf if v is not None and tdf else None
    tdf = s.get("tdf") or s.get("dilation")
    samples, proj_s = s.get("samples"), s.get("projected_hw_train_s")
    return {"mode": s["mode"], "collective": s["collective"], "workers": s["workers"],
            "device": s["device"], "batch": s["batch"], "depth": s["pipeline_depth"],
            "hw_throughput_sps": r(s.get("hw_throughput_sps"), 1),
            "projected_hw_throughput_sps": r(samples / proj_s if samples and proj_s else None, 1),
            # what `testbed reproduce p4sgd` reads: hardware time, and why a point is invalid
            "hw_train_s": s.get("hw_train_s"), "projected_hw_train_s": proj_s,
            "hw_iter_ms": r(hw(s.get("iter_ms_p50")), 6),
            "hw_allreduce_p50_ms": r(hw(s.get("allreduce_p50_ms")), 6),
            "hw_time_to_target_s": r(hw(s.get("time_to_target_s")), 6),
            "emu_throughput_sps": r(s["throughput_sps"], 1), "emu_iter_ms": r(s["iter_ms_p50"]),
            "emu_allreduce_p50_ms": r(s["allreduce_p50_ms"]), "emu_time_to_target_s": r(s["time_to_target_s"]),
            "tdf": tdf, "emu/proj": r(s.get("emulated_vs_projected"), 2),
            "comm_share": r(s["comm_share"]), "hidden_share": r(s["hidden_share"]),
            "final_loss": r(s["final_loss"], 5), "valid": s["valid"], "all_correct": s["all_correct"],
            "invalid_reasons": s.get("invalid_reasons") or []}
