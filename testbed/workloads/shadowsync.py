"""ShadowSync workload: DLRM-style CTR trainers with Hogwild workers over one
dense replica each, embedding parameter servers, and the dense replicas
synchronized in the background (S-EASGD, S-MA, S-BMUF) or in the foreground
every k iterations (FR-EASGD, FR-MA, FR-BMUF). docs/shadowsync.md.

    workload:
      kind: shadowsync
      algorithm: easgd            # easgd | ma | bmuf | none (no sync: a measurement baseline)
      mode: shadow                # shadow (S-*) | foreground (FR-*, every k iterations)
      k: 10
      hogwild_workers: 2          # worker processes per trainer
      embedding_servers: 1        # hosts emb1..embE (tables sharded table-wise)
      iterations: 100             # per worker
      collective: ring            # the allreduce of MA / BMUF: ring | switch | ps (host arps)
      device: {type: v100, time_scale: auto}   # auto: calibrated (hosts/shadowsync/timing.py)
      dilate_network: true        # on the soft switch, the network runs at the same TDF

Hosts: trainers are the topology's workers w1..wN (hosts.shadowsync.trainer);
extra hosts emb1..embE (hosts.shadowsync.servers --role embedding_ps), for
easgd syncps (--role sync_ps), and for ma/bmuf with collective ps the allreduce's
parameter server arps (the torch layer's PS program, hosts.dnn.run_script role ps). Records: `shadowsync_iter` (every worker
iteration), `shadowsync_trainer`, `shadowsync_server`, `shadowsync_server_host`,
`fidelity` and one `shadowsync_summary` per point.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from testbed.results import read_jsonl
from testbed.workloads import register_workload
from testbed.workloads.allreduce import InaParams
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings,
                                     register_figures_if_loaded, register_runtime, straggler_for)
from testbed.workloads.calibrated import ITERATION_WALL_S, CalibratedWorkloadParams, dilation_block
from testbed.workloads.shadowsync_projection import fidelity_records  # reads what this module records

FIGURES = ("shadowsync_throughput", "shadowsync_ne", "shadowsync_sync_gap")
SHADOWSYNC_TCP_PORT = 48500        # servers; the ring allreduce at +100
COLLECTIVE_OFFSET = 100
ALLREDUCE_PS = "arps"              # the parameter server of collective ps (MA / BMUF)
DEVICE_TYPES = ("cpu", "v100", "a100", "h100", "knl")
# time_scale auto: the first calibration round's TDF (as LHC's and P4SGD's CALIBRATION_START).
CALIBRATION_START = 400.0

register_figures_if_loaded(*FIGURES)


def label_of(algorithm: str, mode: str) -> str:
    """The paper's names: S-EASGD, FR-MA, ...; 'no sync' for the baseline."""
    if algorithm == "none":
        return "no-sync"
    return ("S-" if mode == "shadow" else "FR-") + algorithm.upper()


class ModelParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    table_sizes: Union[int, list[int]] = Field(1000, description="Rows per embedding table: one number "
                                               "for all 26 or a list of 26 (Criteo's real sizes are millions; "
                                               "CPU-sized here).")
    dim: int = Field(8, ge=1, description="Embedding dimension (= the bottom MLP's output).")
    bottom: list[int] = Field(default_factory=lambda: [32], description="Bottom MLP hidden widths.")
    top: list[int] = Field(default_factory=lambda: [32], description="Top MLP hidden widths.")

    @field_validator("table_sizes")
    @classmethod
    def _sizes(cls, v: Any) -> Any:
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"table_sizes must be >= 1, got {v}")
        elif len(v) != 26 or min(v) < 1:
            raise ValueError(f"table_sizes: the Criteo schema has 26 tables, got a list of {len(v)}")
        return v

    def dense_values(self) -> int:
        """Parameters of the dense tower (what one sync moves), without building it in torch."""
        m = self.resolved()
        t, dim = len(m["table_sizes"]), m["dim"]
        widths = [13, *m["bottom"], dim]
        top = [dim + (t + 1) * t // 2, *m["top"], 1]
        return sum(a * b + b for ws in (widths, top) for a, b in zip(ws[:-1], ws[1:]))

    def resolved(self) -> dict[str, Any]:
        sizes = [self.table_sizes] * 26 if isinstance(self.table_sizes, int) else list(self.table_sizes)
        return {"table_sizes": sizes, "dim": self.dim, "bottom": list(self.bottom), "top": list(self.top)}


@register_workload
class ShadowSyncWorkload(CalibratedWorkloadParams):
    """ShadowSync: background vs foreground synchronization of CTR trainers."""

    FIGURES = FIGURES

    kind: Literal["shadowsync"] = Field("shadowsync", description="Workload type; selects which fields below apply.")
    algorithm: Literal["easgd", "ma", "bmuf", "none"] = Field(
        "easgd", description="easgd (elastic exchange with the sync PS), ma (model averaging by allreduce), "
                             "bmuf (block momentum by allreduce), none (trainers never sync: a baseline).")
    mode: Literal["shadow", "foreground"] = Field("shadow", description="shadow: a background process per "
                                                  "trainer (S-*); foreground: every k iterations in the loop (FR-*).")
    k: int = Field(10, ge=1, description="Foreground sync period in worker iterations.")
    hogwild_workers: int = Field(2, ge=1, description="Worker processes per trainer over one shared replica.")
    embedding_servers: int = Field(1, ge=1, le=26, description="Embedding PS hosts emb1..embE.")
    iterations: int = Field(100, ge=1, description="Iterations per worker (one pass over its shard).")
    batch_size: int = Field(64, ge=1)
    lr_dense: float = Field(0.05, gt=0, description="Dense SGD step of the Hogwild workers.")
    lr_embed: float = Field(3.0, gt=0, description="Sparse SGD step the embedding PSs apply [A: tuned here].")
    alpha: float = Field(0.3, gt=0, lt=1, description="S-EASGD moving rate [I].")
    bmuf_eta: float = Field(0.5, ge=0, lt=1, description="BMUF block momentum [I].")
    bmuf_zeta: float = Field(1.0, gt=0, description="BMUF block learning rate [I].")
    nesterov: bool = Field(False, description="BMUF Nesterov variant (w_k <- w_g + eta v).")
    shadow_pause_ms: float = Field(0.0, ge=0, description="The shadow's pause between two syncs, in "
                                   "hardware milliseconds (dilated by the TDF, traced as a step of the shadow).")
    eval_examples: int = Field(4000, ge=2, description="Eval set size (eval NE).")
    model: ModelParams = Field(default_factory=ModelParams)
    dataset: dict[str, Any] = Field(default_factory=lambda: {"source": "synthetic"},
                                    description="{source: synthetic} or {source: criteo_tsv, path, limit}.")
    collective: Literal["ring", "switch", "ps"] = Field("ring", description="The allreduce of MA / BMUF: ring, "
                                                        "switch (in-network) or ps (a parameter server, host arps).")
    device: dict[str, Any] = Field(default_factory=lambda: {"type": "v100", "time_scale": 400.0},
                                   description="Trainer device model (hosts/dnn/device.py).")
    hardware: str = Field("tor-100g-host", description="Hardware network profile for the fidelity monitor.")
    calibration_rounds: int = Field(2, ge=1, description="time_scale auto: calibration rounds.")
    calibration_iterations: int = Field(6, ge=1, description="time_scale auto: worker iterations per round "
                                        "(every process of every trainer runs them, before the measured run).")
    project_trainers: list[int] = Field(default_factory=lambda: [16, 32, 64],
                                        description="Trainer counts every point's traces are projected to "
                                                    "(trainer 0's worker and shadow replicated, servers as a "
                                                    "service model); [] for none.")
    project_servers_per_trainer: Optional[float] = Field(
        None, gt=0, le=1, description="Servers per trainer at the projected counts: embedding PSs (at most 26, "
        "one per table) and sync PSs (S-/FR-EASGD) become ceil(trainers x this), never fewer than recorded, the "
        "tables (dense vector) re-spread over them; null keeps the recorded servers.")
    trainer_cores: Optional[int] = Field(
        None, ge=1, description="Cores of a trainer's host in the projections at project_trainers: its Hogwild "
        "workers and its shadow (or foreground sync) share them (testbed/fidelity/host_cpu.py); null: as many as "
        "hogwild_workers [A: one worker thread per core, no core free for the shadow].")
    trainer_mem_GBps: float = Field(
        10.0, gt=0, description="Memory bandwidth one thread streams a sync's update at on a trainer's host, in "
        "the projections at project_trainers [A: one core ~10 GB/s]; the update moves 5 / 6 / 11 passes over the "
        "dense vector (EASGD / MA / BMUF, hosts/shadowsync/rules.py sync_bytes).")
    seed: int = Field(1, ge=0)
    timeout_s: float = Field(300.0, gt=0)
    ina: InaParams = Field(default_factory=InaParams, description="In-switch transport (collective switch).")

    @field_validator("device")
    @classmethod
    def _device(cls, v: dict[str, Any]) -> dict[str, Any]:
        kind = v.get("type", "cpu")
        if kind not in DEVICE_TYPES:
            raise ValueError(f"device.type {kind!r}: use one of {', '.join(DEVICE_TYPES)}")
        if v.get("time_scale") == "auto" and kind == "cpu":
            raise ValueError("device.time_scale auto needs a modeled device (v100, a100, h100, knl), not cpu")
        try:
            from hosts.dnn.device import make_device  # noqa: PLC0415 - no torch import there
            make_device(dict(v, time_scale=CALIBRATION_START) if v.get("time_scale") == "auto" else v)
        except (TypeError, ValueError) as e:
            raise ValueError(f"device: {e}") from None
        return v

    @model_validator(mode="after")
    def _dataset(self) -> "ShadowSyncWorkload":
        # A bad file is refused here, before anything starts (file:line in the message).
        from hosts.shadowsync.data import DataError, parse_tsv  # noqa: PLC0415
        src = self.dataset.get("source")
        bad = sorted(set(self.dataset) - {"source", "path", "limit", "zipf_a", "signal_tables", "base_ctr_logit",
                                          "truth_seed"})
        if bad:
            raise ValueError(f"dataset: unknown key(s) {bad}")
        if src == "criteo_tsv":
            if not self.dataset.get("path"):
                raise ValueError("dataset: source criteo_tsv needs a path")
            try:
                parse_tsv(self.dataset_spec()["path"], self.model.resolved()["table_sizes"],
                          self.dataset.get("limit"))
            except DataError as e:
                raise ValueError(f"dataset: {e}") from None
        elif src != "synthetic":
            raise ValueError(f"dataset.source must be synthetic or criteo_tsv, got {src!r}")
        return self

    def dataset_spec(self) -> dict[str, Any]:
        from testbed.results import PROJECT_ROOT  # noqa: PLC0415
        if not self.dataset.get("path"):
            return dict(self.dataset)
        p = Path(self.dataset["path"]).expanduser()
        return {**self.dataset, "path": str(p if p.is_absolute() else PROJECT_ROOT / p)}

    @property
    def calibrated(self) -> bool:
        return self.device.get("time_scale") == "auto"

    # at_fixed_tdf stays None (no retry): the shadowsync hosts dilate the network only
    # while calibrating (network_dilation below), so a fixed-TDF retry would run undilated.

    @property
    def time_scale(self) -> float:
        """The fixed TDF, or (calibrated) the first round's."""
        return CALIBRATION_START if self.calibrated else float(self.device.get("time_scale", 1.0))

    def device_spec(self) -> dict[str, Any]:
        """The hosts' device spec: a number for time_scale (auto: the start; calibration sets the rest)."""
        return dict(self.device, time_scale=self.time_scale) if self.device.get("type") != "cpu" else dict(self.device)

    def server_hosts(self) -> list[str]:
        return [f"emb{i + 1}" for i in range(self.embedding_servers)]

    def extra_hosts(self) -> list[str]:
        return self.server_hosts() + (["syncps"] if self.algorithm == "easgd" else []) + \
            ([ALLREDUCE_PS] if self.allreduce_ps else [])

    @property
    def allreduce_ps(self) -> bool:
        """MA / BMUF whose allreduce runs through a parameter server (host arps)."""
        return self.algorithm in ("ma", "bmuf") and self.collective == "ps"


def trainers_of(scenario: Any) -> list[str]:
    return [h for h in scenario.hosts() if h not in scenario.workload.extra_hosts()]


def settings_of(wl: ShadowSyncWorkload, trainers: int) -> dict[str, Any]:
    """The hosts' shared `shadowsync` block (hosts/shadowsync/config.py Settings).
    Repeat r runs with seed + r (testbed.scenario.sweep.repeat_seeded: init,
    training streams, tables, the synthetic click model and its eval set), the
    same in every case, so S-X and FR-X of one repeat see the same examples and
    the repeats are independent samples."""
    return {"algorithm": wl.algorithm, "mode": wl.mode, "k": wl.k, "trainers": trainers,
            "hogwild_workers": wl.hogwild_workers, "embedding_servers": wl.embedding_servers,
            "iterations": wl.iterations, "batch_size": wl.batch_size, "lr_dense": wl.lr_dense,
            "lr_embed": wl.lr_embed, "alpha": wl.alpha, "bmuf_eta": wl.bmuf_eta, "bmuf_zeta": wl.bmuf_zeta,
            "nesterov": wl.nesterov, "shadow_pause_ms": wl.shadow_pause_ms, "eval_examples": wl.eval_examples,
            "seed": wl.seed, "model": wl.model.resolved(),
            "dataset": {**wl.dataset_spec(), **({"truth_seed": wl.seed} if wl.dataset.get("source") == "synthetic"
                                                else {})},
            "sync_hw_s": sync_hw_s(wl, trainers), "calibrated": wl.calibrated}


def lookup_hw_s(wl: ShadowSyncWorkload) -> list[float]:
    """Hardware seconds of one LOOKUP to each embedding PS: the ids' message and the
    rows' reply (network_model.message_time; the PS's own work is not modeled [A])."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import message_time  # noqa: PLC0415
    prof, m = load_profile(wl.hardware), wl.model.resolved()
    tables = [len([t for t in range(26) if t % wl.embedding_servers == e]) for e in range(wl.embedding_servers)]
    return [message_time(8 * wl.batch_size * t, prof) + message_time(4 * wl.batch_size * t * m["dim"], prof)
            for t in tables]


def network_dilation(wl: ShadowSyncWorkload, switch_info: dict[str, Any], trainers: int) -> dict[str, Any] | None:
    """The trainers' network_dilation block (as testbed/workloads/lhc.py's): None without a
    soft switch, with a fixed TDF (not calibrated) or dilate_network false. hw_op_s (the
    largest op a transport waits for): a lookup or a sync."""
    return dilation_block(wl, switch_info, wl.calibrated,
                          lambda: max([*lookup_hw_s(wl), sync_hw_s(wl, trainers), 1e-6]))


def dense_values(wl: ShadowSyncWorkload) -> int:
    """Parameters of the dense tower (what one sync moves): ModelParams.dense_values."""
    return wl.model.dense_values()


def sync_hw_s(wl: ShadowSyncWorkload, trainers: int) -> float:
    """Modeled hardware seconds of one sync on the workload's network profile
    (testbed/fidelity/network_model.py, which hosts cannot import): S-EASGD's
    request and reply of the dense vector, or MA/BMUF's allreduce of it (+1 flag)."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import collective_time, message_time  # noqa: PLC0415
    if wl.algorithm == "none":
        return 0.0
    prof, n = load_profile(wl.hardware), dense_values(wl)
    if wl.algorithm == "easgd":
        return 2 * message_time(4 * n, prof)
    if trainers == 1:
        return 0.0
    return collective_time("allreduce", wl.collective, n + 1, 4, trainers, prof)


@register_runtime
class ShadowSyncRuntime(WorkloadRuntime):
    kind = "shadowsync"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl: ShadowSyncWorkload = scn.workload
        trainers = trainers_of(scn)
        allreduce = wl.algorithm in ("ma", "bmuf")
        if allreduce and wl.collective == "switch":
            ctx.require_switch("collective 'switch'", "collective ring")
        port = ctx.tcp_port_base(SHADOWSYNC_TCP_PORT, span=COLLECTIVE_OFFSET + 80)
        s = settings_of(wl, len(trainers))
        servers = wl.server_hosts() + (["syncps"] if wl.algorithm == "easgd" else [])
        # Traced hosts: the trainers' worker 0, the servers, and (S-*) each trainer's
        # shadow "<host>-shadow", ranked after the servers (hosts/shadowsync/trainer.py).
        world = len(trainers) + len(servers) + (len(trainers) if wl.mode == "shadow" and wl.algorithm != "none"
                                                else 0)
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in trainers]
        ps = {"name": ALLREDUCE_PS, "ip": ctx.hosts[ALLREDUCE_PS].ip} if wl.allreduce_ps else None
        progs = []
        for i, h in enumerate(servers):
            role = "sync_ps" if h == "syncps" else "embedding_ps"
            clients = len(trainers) * (wl.hogwild_workers + 1) if role == "embedding_ps" else len(trainers)
            cfg = {role: {"host": h, "ip": ctx.hosts[h].ip, "index": i if role == "embedding_ps" else 0,
                          "port": port, "rank": len(trainers) + i, "world": world, "clients": clients,
                          "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s,
                          "out": str(ctx.work_dir / f"{h}.jsonl"),
                          "trace": str(ctx.work_dir / f"{h}.trace.jsonl")},
                   "shadowsync": s}
            argv = self.module_argv("hosts.shadowsync.servers", self.write_config(ctx, h, cfg))
            progs.append(HostProgram(h, argv[:3] + ["--role", role] + argv[3:], phase=0))
        for rank, h in enumerate(trainers):
            coll = None
            if allreduce:
                ina = None
                if wl.collective == "switch":
                    ina = {**ina_settings(ctx.switch, h), "job_id": 1, **wl.ina.model_dump(exclude_none=True)}
                coll = {"host": h, "role": "worker", "rank": rank, "world": len(trainers),
                        "collective": wl.collective, "peers": peers, "ps": ps,
                        "port": port + COLLECTIVE_OFFSET, "master_addr": peers[0]["ip"],
                        "master_port": port + COLLECTIVE_OFFSET + 60, "gloo_ifname": None,
                        "script": "hosts/shadowsync/trainer.py", "args": [], "batch_size": wl.batch_size,
                        "seed": wl.seed, "device": {"type": "cpu"}, "straggler": None, "start_at": None,
                        "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s, "out": "/dev/null",
                        "trace": None, "ina": ina}
            cfg = {"trainer": {"host": h, "ip": ctx.hosts[h].ip, "rank": rank, "trace_world": world,
                               "embedding_servers": [{"name": e, "ip": ctx.hosts[e].ip} for e in wl.server_hosts()],
                               "sync_ps": ({"name": "syncps", "ip": ctx.hosts["syncps"].ip}
                                           if wl.algorithm == "easgd" else None),
                               "port": port, "collective": coll, "device": wl.device_spec(),
                               "calibration": ({"rounds": wl.calibration_rounds,
                                                "iterations": wl.calibration_iterations,
                                                "lookup_hw_s": lookup_hw_s(wl),
                                                "iteration_wall_s": ITERATION_WALL_S} if wl.calibrated else None),
                               "network_dilation": network_dilation(wl, ctx.switch or {}, len(trainers)),
                               "straggler": straggler_for(scn, h), "start_at": ctx.start_at,
                               "connect_timeout_s": 60.0, "timeout_s": wl.timeout_s,
                               "out": str(ctx.work_dir / f"{h}.jsonl"),
                               "trace": str(ctx.work_dir / f"{h}.trace.jsonl")},
                   "shadowsync": s}
            progs.append(HostProgram(h, self.module_argv("hosts.shadowsync.trainer",
                                                         self.write_config(ctx, h, cfg)), phase=1))
        if ps is not None:
            # The torch layer's PS program serves the trainers' allreduces (of any size) until
            # each sends the end of stream (hosts/dnn/open_collective.py _PSStream.close).
            cfg = {**coll, "host": ALLREDUCE_PS, "role": "ps", "rank": -1, "ina": None,
                   "out": str(ctx.work_dir / f"{ALLREDUCE_PS}.jsonl")}
            progs.append(HostProgram(ALLREDUCE_PS, self.module_argv("hosts.dnn.run_script",
                                                                    self.write_config(ctx, ALLREDUCE_PS, cfg)),
                                     phase=0))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        from testbed.switch.jobs import JobRequest  # noqa: PLC0415
        wl = point.scenario.workload
        if wl.algorithm in ("ma", "bmuf") and wl.collective == "switch":
            return [JobRequest(1, tuple(trainers_of(point.scenario)))]
        return []

    def timeout_s(self, ctx: PointContext) -> float:
        # ITERATION_WALL_S per iteration (a calibration round's AGREE counted as one, as lhc's):
        # the budget a calibrated TDF must fit (the trainers' iteration_wall_s).
        wl = ctx.point.scenario.workload
        cal = wl.calibration_rounds * (wl.calibration_iterations + 1) if wl.calibrated else 0
        return wl.timeout_s + 120.0 + ITERATION_WALL_S * (wl.iterations + cal)

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        return collect_point(ctx.point.scenario, ctx.work_dir)

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [summary_row(r) for r in records if r.get("type") == "shadowsync_summary"]


# ---------------------------------------------------------------------------
# collect (functions of the hosts' outputs)
# ---------------------------------------------------------------------------
def collect_point(scenario: Any, work_dir: Path) -> list[dict[str, Any]]:
    wl: ShadowSyncWorkload = scenario.workload
    trainers = trainers_of(scenario)
    out: list[dict[str, Any]] = []
    for h in trainers:
        for r in read_jsonl(work_dir / f"{h}.jsonl"):
            t = {"iteration": "shadowsync_iter", "summary": "shadowsync_trainer",
                 "calibration": "calibration"}.get(r.get("type"))
            if t:
                out.append(dict(r, type=t, host=h))
    for h in wl.extra_hosts():
        for r in read_jsonl(work_dir / f"{h}.jsonl"):
            t = {"server": "shadowsync_server", "summary": "shadowsync_server_host"}.get(r.get("type"))
            if t:
                out.append(dict(r, type=t, host=h))
    summary = point_summary(wl, trainers, out)
    out.extend(fidelity_records(scenario, work_dir, summary))
    out.append(summary)
    return out


def push_accounting(trainer_recs: list[dict], server_recs: list[dict], servers: int) -> dict[str, Any]:
    """Every sparse update counted: PUSH requests the trainers sent vs those the
    embedding PSs applied (each PUSH goes to every PS), per trainer and in all."""
    sent = {r["host"]: r.get("pushes", 0) for r in trainer_recs}
    applied: dict[str, int] = {}
    rows: dict[str, int] = {}
    from hosts.shadowsync.protocol import trainer_of  # noqa: PLC0415 - client names: one per connection
    for r in server_recs:
        if r.get("role") == "embedding_ps":
            h = trainer_of(r["client"])
            applied[h] = applied.get(h, 0) + r["pushes"]
            rows[h] = rows.get(h, 0) + r["rows_applied"]
    rows_sent = {r["host"]: r.get("rows_pushed", 0) for r in trainer_recs}
    return {"pushes_sent": sum(sent.values()), "pushes_applied": sum(applied.values()),
            "rows_sent": sum(rows_sent.values()), "rows_applied": sum(rows.values()),
            "pushes_match": bool(sent) and all(applied.get(h, 0) == n for h, n in sent.items())
            and all(rows.get(h, 0) == n for h, n in rows_sent.items()),
            "per_trainer": {h: {"sent": n, "applied": applied.get(h, 0)} for h, n in sent.items()}}


def point_summary(wl: ShadowSyncWorkload, trainers: list[str], recs: list[dict[str, Any]]) -> dict[str, Any]:
    tr = [r for r in recs if r["type"] == "shadowsync_trainer"]
    srv = [r for r in recs if r["type"] == "shadowsync_server"]
    hosts = [r for r in recs if r["type"] == "shadowsync_server_host"]
    ok = len(tr) == len(trainers) and all(r.get("ok") for r in tr) and all(r.get("ok") for r in hosts) \
        and len(hosts) == len(wl.extra_hosts())
    starts = [r["t0_perf"] for r in tr if r.get("t0_perf") is not None]
    ends = [r["t_end_perf"] for r in tr if r.get("t_end_perf") is not None]
    wall = max(ends) - min(starts) if starts and ends else None
    examples = sum(r.get("examples", 0) for r in tr)
    ne = [r["eval_ne"] for r in tr if r.get("eval_ne") is not None]
    gaps = [r["avg_sync_gap"] for r in tr if r.get("avg_sync_gap") is not None]
    validity = [v for r in tr for v in (r.get("validity") or []) if v]
    emb_hosts = [r for r in hosts if r.get("role") == "embedding_ps"]
    # The TDF the trainers ran at (calibrated or fixed): one value, or the point is wrong.
    tdfs = {r["tdf"] for r in tr if r.get("tdf") is not None}
    if len(tdfs) > 1:
        raise ValueError(f"trainers ran at different TDFs {sorted(tdfs)}: calibration did not agree")
    tdf = tdfs.pop() if tdfs else wl.time_scale
    return {
        "type": "shadowsync_summary", "algorithm": wl.algorithm, "mode": wl.mode,
        "label": label_of(wl.algorithm, wl.mode), "trainers": len(trainers),
        "hogwild_workers": wl.hogwild_workers, "embedding_servers": wl.embedding_servers, "k": wl.k,
        # the point's own seed (workload.seed + repeat) and length: what its eval NE is measured at
        "seed": wl.seed, "iterations": wl.iterations,
        "collective": wl.collective if wl.algorithm in ("ma", "bmuf") else ("syncps" if wl.algorithm == "easgd"
                                                                             else None),
        "time_scale": wl.device.get("time_scale"), "tdf": tdf, "calibrated": wl.calibrated, "ok": ok,
        "errors": {r["host"]: r.get("error") for r in tr + hosts if r.get("error")},
        "examples": examples, "wall_s": wall, "examples_per_s": examples / wall if wall else None,
        "examples_per_s_per_trainer": [r.get("examples_per_s") for r in tr],
        # On the modeled hardware (emulated / TDF): what the projections compare with.
        "hw_examples_per_s": examples / wall * tdf if wall else None,
        "eval_ne": float(np.mean(ne)) if ne else None, "eval_ne_per_trainer": ne,
        "train_ne": float(np.mean([r["train_ne"] for r in tr if r.get("train_ne") is not None]))
        if any(r.get("train_ne") is not None for r in tr) else None,
        "avg_sync_gap": float(np.mean(gaps)) if gaps else None,
        "syncs": [r.get("syncs") for r in tr],
        **push_accounting(tr, srv, wl.embedding_servers),
        "emb_ps_load": [r.get("load") for r in emb_hosts],
        "emb_ps_requests": [r.get("lookups", 0) + r.get("pushes", 0) for r in emb_hosts],
        "device_valid": all(v.get("valid", True) for v in validity),
        "device_violations": sum(v.get("violations", 0) for v in validity),
    }



def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    """The point's row of the end-of-run table and summary.csv: hw_* on the modeled
    hardware (emulated x TDF for a rate; each point runs at its own TDF, so only these
    compare across points), projected_hw_* the hardware model's replay of the point's
    own trace, emu_* measured on the emulation's wall clock."""
    def rnd(x, k=4):
        return None if x is None else round(x, k)
    return {"algo": r["label"], "trainers": r["trainers"], "hogwild": r["hogwild_workers"],
            "emb_ps": r["embedding_servers"], "k": r["k"] if r["mode"] == "foreground" else None,
            # what testbed reproduce reads: the rate on the modeled hardware (x TDF) and why invalid
            "hw_ex_per_s": rnd(r.get("hw_examples_per_s"), 1),
            "projected_hw_ex_per_s": rnd(r.get("projected_hw_examples_per_s"), 1),
            "projected_hw_iter_ms": rnd(r.get("projected_hw_iter_ms")),
            "emu_ex_per_s": rnd(r["examples_per_s"], 1), "tdf": rnd(r.get("tdf"), 1),
            "emu/proj": rnd(r.get("emulated_over_projected"), 2),
            "eval_ne": rnd(r["eval_ne"]), "train_ne": rnd(r["train_ne"]),
            "seed": r.get("seed"), "iterations": r.get("iterations"), "sync_gap": rnd(r["avg_sync_gap"], 1),
            "pushes": f"{r['pushes_applied']}/{r['pushes_sent']}", "pushes_match": r["pushes_match"],
            "device_valid": r["device_valid"], "valid": r.get("valid"), "ok": r["ok"],
            "invalid_reasons": list(r.get("invalid_reasons") or [])}
