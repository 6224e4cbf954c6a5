"""ShadowSync (Zheng et al., arXiv 2003.03477, Facebook): background (shadow)
synchronization of the dense replicas of CTR trainers whose embeddings live on
parameter servers. docs/shadowsync.md, issues 27 and 32.

Headlines (the abstract's two claims; the stored material holds the abstract and
the introduction only, so every number of the setting is `assumed`):

* `linear_throughput`: "our methods all succeed in making the training
  throughput linearly scale with the number of trainers" with "the number of
  parameter servers the same". Read numerically as the scaling efficiency
  X(N) / (N x X(1)) at the paper's largest trainer count, 100 % [A: the abstract
  gives no number; "linear" is read as 100 %, the project's 25 % margin applies].

  Projection (`project_efficiency`): the job at the paper's setting is built as
  traces (hosts.common.trace.TraceRecorder, shaped as the hosts write them) and
  replayed on the project's projector (testbed/fidelity/projector.py, fabric.py,
  network_model.py on the `tor-100g-host` profile) with the servers as service
  models (testbed/fidelity/server_model.py ServiceModel):
    - a FIXED number of embedding PSs (table-wise, hosts.shadowsync.config.tables_of)
      and one sync PS, whatever the trainer count;
    - each trainer one rank carrying its Hogwild workers' traffic (H workers' lookups,
      rows and pushes in one message per PS, H x the rows) and computing one step of
      the device model (hosts/dnn/device.py DnnDevice over hosts/dnn/dlrm.py
      tower_profile; the H workers run on their own device streams [A], each one thread
      of the trainer host's cores);
    - each trainer's shadow a rank of its own whose messages carry the TRAINER's
      host name, so in fabric.py (links keyed by the host names of a message's
      group) its ELASTIC exchange queues on the same NIC uplink and downlink as the
      trainer's lookups and pushes (S-EASGD: all its traffic is point-to-point);
    - PS service time per request from assumed per-request and per-row costs (and
      the sync PS's elementwise update at an assumed memory bandwidth), charged for
      every Hogwild worker's request (H per trainer iteration).
    - S-MA / S-BMUF (`algorithm`, the regime of that name): the shadows allreduce the
      dense vector (ring); fabric.py holds every member NIC's uplink and downlink for the
      allreduce's link time, so it queues with the trainers' lookups and pushes. BMUF's
      traffic is MA's; EASGD's differs (an exchange with the sync PS).
    - the shadow's work on its trainer's host (sync_update_s): each sync's update is a
      compute node of the shadow, its bytes (hosts/shadowsync/rules.py sync_bytes: 5 / 6 /
      11 passes over the dense vector for EASGD / MA / BMUF) at the bandwidth one thread
      streams (`trainer_mem_GBps`), on the trainer host's `trainer_cores` cores shared
      with its Hogwild workers (testbed/fidelity/host_cpu.py: processor sharing; a
      trainer of W worker threads on C <= W cores runs at W / (W + 1) of its rate while
      its shadow updates, at full rate when a core is free). FR-EASGD's trainer pays the
      same update in the foreground, after its exchange, with its workers waiting.
  What is still by construction or approximated: only cores are shared (the update's
  memory traffic does not slow the workers' own, which is the device model's); the
  shadow loops back to back, so a longer update means fewer syncs and less of its
  traffic on the NIC; a PS's threads are a fluid approximation (one queue min(threads,
  requesters) times as fast); the one sync PS is N endpoints syncps1..N, each serving its
  shadow at a 1/N fluid share of the PS's threads and NIC (services()); the H Hogwild
  workers of a trainer are one rank (their messages to a PS travel as one); an allreduce
  holds every member's links for its busiest link's time.
  The PS costs are assumed (a C++ PS); the project's own Python PS, measured on this
  machine (testbed/reproduce/measurements/shadowsync_ps.py), is the top of the request
  cost's range and the bottom of the sync PS bandwidth's.

* `ne_neutral`: "neutral to better model quality" of S-* vs FR-*: NE(S) / NE(FR)
  paired by seed (S and FR of one repeat see the same examples and
  initialisation), paper value 1.0 with a stated margin (Headline.tolerance, 0.1 %).
  No hardware model predicts NE: the projection is the null model 1.0 (the sync mode
  does not change NE), so the verdict is decided by the emulated 95 % interval
  (direction "neutral_or_better": neutral, better, worse or undecided, verdict.py),
  and only between trained models: every valid point's eval NE must be within the
  measurement's margin (2 %) of the NE the model reaches trained to convergence on its seed's data
  (measurements/shadowsync_ne.py), or the comparison is not tested.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from testbed.reproduce.measurements.shadowsync_ps import ps_cost as _ps_cost
from testbed.reproduce.model import (AssumedConstant, EmulatedValues, Headline, Paper, Regime, ScenarioRun,
                                     SettingItem)

PROFILE = "tor-100g-host"
DEVICE = "v100"
SEEDS_MD = "/work/shared/research/seeds.md §3"
ABSTRACT = "arXiv 2003.03477 v3 abstract (ar5iv / research.facebook.com page); seeds.md §3.1 [V]"

# ---- the paper's setting (the full text is not in the stored material: assumed) ----------
TRAINERS = 20            # seeds.md §3.2: "for example 5 -> 20 trainers" with a fixed number of PSs [I]
TABLES = 26              # the Criteo schema of the workload (hosts/shadowsync/data.py)
# The dense tower: the public DLRM benchmark's Criteo-Kaggle configuration
# (facebookresearch/dlrm's Criteo-Kaggle benchmark command: --arch-sparse-feature-size=16
# --arch-mlp-bot=13-512-256-64-16 --arch-mlp-top=512-256-1 --mini-batch-size=128),
# not the paper's production model (not stated in stored material).
DIM, BOTTOM, TOP, BATCH = 16, (512, 256, 64), (512, 256), 128
ITERATIONS = 6           # simulated iterations per trainer: the rate is the difference of 6 and 12 (_rate)

# The project's own Python PS, measured on this machine (testbed/reproduce/measurements/
# shadowsync_ps.py, dim 16 as here): a Python + PyTorch server on 2 shared cores, not the
# paper's C++ PS, so it is not carried over as the nominal; it is the top of the request
# cost's range and the bottom of the sync PS's bandwidth (a C++ PS costs less, not more).
_LOOKUP, _PUSH, _ELASTIC = _ps_cost("lookup", DIM), _ps_cost("push", DIM), _ps_cost("elastic")
_PY_REQUEST_US = max(_LOOKUP.fixed_s, _PUSH.fixed_s) * 1e6
_PY_ROW_NS = max(_LOOKUP.per_unit_s, _PUSH.per_unit_s) * 1e9
_PY_SYNC_GBPS = 3 * 4 / (_ELASTIC.per_unit_s * 1e9)      # read centre, read w, write: 12 B per value

PS_REQUEST_US = AssumedConstant(
    "ps_request_us", 5.0, 1.0, max(50.0, round(_PY_REQUEST_US)), "us",
    "assumed: an embedding/sync PS's fixed cost per request (RPC decode, dispatch, reply); 1 us is a "
    "kernel-bypass RPC, 50 us a loaded TCP/Thrift server; the paper's PS is not described in stored material. "
    f"Top of the range: this project's Python PS measured here, {_PY_REQUEST_US:.0f} us ({_LOOKUP.source})")
PS_ROW_NS = AssumedConstant(
    "ps_row_ns", 100.0, 20.0, max(500.0, round(_PY_ROW_NS)), "ns",
    "assumed: PS cost per embedding row looked up or updated, per thread (one random DRAM access ~100 ns; "
    "20 ns cache-resident, 500 ns a contended hash-table update); this project's Python PS measured here: "
    f"{_LOOKUP.per_unit_s * 1e9:.0f} ns per looked-up row, {_PUSH.per_unit_s * 1e9:.0f} ns per updated row "
    f"({_LOOKUP.source})")
PS_THREADS = AssumedConstant(
    "ps_threads", 8.0, 1.0, 32.0, "threads/PS",
    "assumed: serving threads per PS host, one worker's request on one thread (1: a single event "
    "loop; 32: a two-socket server's cores); rounded to a whole thread")
SYNC_PS_GBPS = AssumedConstant(
    "sync_ps_GBps", 10.0, min(2.0, round(_PY_SYNC_GBPS, 2)), 40.0, "GB/s",
    "assumed: memory bandwidth of the sync PS's elementwise EASGD update (read centre, add, write; "
    "one core ~10 GB/s, a socket ~40); bottom of the range: this project's Python sync PS measured here, "
    f"{_PY_SYNC_GBPS:.2f} GB/s at 12 B per dense value ({_ELASTIC.source})")
EMB_PS = AssumedConstant(
    "embedding_ps", 8.0, 2.0, 26.0, "servers",
    "assumed: the paper's fixed number of embedding PSs is not in stored material; 2 to 26 (one per "
    "table, the most table-wise sharding allows), rounded to a whole server")
HOGWILD = AssumedConstant(
    "hogwild_workers", 4.0, 1.0, 16.0, "workers/trainer",
    "assumed: Hogwild workers per trainer (the emulation runs 2; the paper's count is not in stored "
    "material), rounded to a whole worker")
COMPUTE_SLOWDOWN = AssumedConstant(
    "compute_slowdown", 1.0, 1.0, 20.0, "x V100 model",
    "assumed: the trainers' compute against the V100 device model (hosts/dnn/device.py, efficiency 0.4 [A]); "
    "up to 20x for a CPU trainer (~1 TFLOP/s fp32 against V100's 15.7 [D])")
TRAINER_CORES = AssumedConstant(
    "trainer_cores", 4.0, 2.0, 40.0, "cores/trainer",
    "assumed: cores of a trainer's host, shared by its Hogwild workers and its shadow "
    "(testbed/fidelity/host_cpu.py); the paper's trainer machines are not in stored material. Nominal: as "
    "many cores as Hogwild workers (hogwild_workers' nominal: each worker thread keeps a core, Hogwild's usual "
    "one thread per core, so the shadow has no core of its own); 2 to 40 (a two-socket server of 20-core "
    "Skylake-SP parts such as the Xeon Gold 6138: 20 cores, six DDR4-2666 channels [D: Intel's figures as "
    "quoted by a hosting provider's article (m.jtti.cc/supports/2997.html), not a data sheet read here]), "
    "rounded to a whole core")
TRAINER_MEM_GBPS = AssumedConstant(
    "trainer_mem_GBps", 10.0, 1.0, 20.0, "GB/s",
    "assumed: memory bandwidth one thread (the shadow, or a foreground sync) streams its update at on a "
    "trainer's host, as sync_ps_GBps' one core ~10 GB/s; 1 GB/s near this project's Python/PyTorch update "
    "(unfused temporaries, about twice the passes counted; the Python sync PS measured 0.85 GB/s at 12 B per "
    "value), 20 GB/s a recent server core's single-thread stream")
CONSTANTS = [PS_REQUEST_US, PS_ROW_NS, PS_THREADS, SYNC_PS_GBPS, EMB_PS, HOGWILD, COMPUTE_SLOWDOWN,
             TRAINER_CORES, TRAINER_MEM_GBPS]


def _nominal(over: dict[str, float]) -> dict[str, float]:
    return {c.name: float(over.get(c.name, c.nominal)) for c in CONSTANTS}


@lru_cache(maxsize=8)
def dense_values(width: float = 1.0) -> int:
    """Dense parameters one sync moves (testbed.workloads.shadowsync.dense_values)."""
    from testbed.workloads.shadowsync import ModelParams, dense_values as count  # noqa: PLC0415

    class _Wl:      # the one field dense_values reads
        model = ModelParams(table_sizes=1, dim=DIM, bottom=[max(1, round(w * width)) for w in BOTTOM],
                            top=[max(1, round(w * width)) for w in TOP])
    return count(_Wl)


@lru_cache(maxsize=8)
def step_hw_s(width: float = 1.0, batch: int = BATCH) -> float:
    """One Hogwild worker's forward/backward of `batch` on the V100 device model."""
    from hosts.dnn.device import make_device  # noqa: PLC0415
    from hosts.dnn.dlrm import DenseTower, tower_profile  # noqa: PLC0415
    dev = make_device({"type": DEVICE, "time_scale": 1.0})
    tower = DenseTower(13, TABLES, DIM, [max(1, round(w * width)) for w in BOTTOM],
                       [max(1, round(w * width)) for w in TOP])
    dev.model = tower_profile(tower, batch=4, n_tables=TABLES)
    return dev.hw_time(batch)


ALGORITHMS = ("easgd", "ma", "bmuf")


def sync_update_s(algorithm: str, dense: int, mem_GBps: float) -> float:
    """One sync's work on its trainer's host: the bytes its update moves through memory
    (hosts/shadowsync/rules.py sync_bytes: 5 / 6 / 11 passes over the dense vector for
    EASGD / MA / BMUF) at the bandwidth one thread streams (trainer_mem_GBps). No fixed
    per-sync cost is added: the messages' per-message costs are the network model's, and
    nothing in stored material sizes a thread's wake-up on these hosts."""
    from hosts.shadowsync.rules import sync_bytes  # noqa: PLC0415
    return sync_bytes(algorithm, dense) / (mem_GBps * 1e9)


def job(trainers: int, emb_ps: int, hogwild: int, step_s: float, dense: int, mode: str = "shadow", k: int = 5,
        iterations: int | None = None, syncs: int | None = None, algorithm: str = "easgd",
        update_s: float = 0.0, cores: int | None = None) -> list:
    """The traces of the job (module docstring): trainers t1..tN (one rank each); mode
    "shadow" (S-*): a shadow per trainer on its trainer's host name; "foreground"
    (FR-EASGD): the trainer's exchange every k iterations; "none": no sync.
    algorithm (shadow mode): "easgd" exchanges the dense vector with the sync PS; "ma"
    and "bmuf" allreduce it over the trainers' shadows (ring, group "trainers"): the same
    traffic; they differ in update_s.
    update_s: one sync's work on the trainer's host (sync_update_s), a compute node of the
    shadow (one thread) before each exchange, or of the trainer after its foreground
    exchange (the workers wait at the barrier meanwhile). cores: the trainer host's cores
    (header host_cores; the trainer's rank is its `hogwild` worker threads, the shadow one
    thread: testbed/fidelity/host_cpu.py); None: the host's cores are not modeled."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    if mode == "foreground" and algorithm != "easgd":
        raise ValueError("the foreground job is FR-EASGD only")
    from hosts.common.trace import TraceRecorder  # noqa: PLC0415
    from hosts.shadowsync.config import tables_of  # noqa: PLC0415

    iterations = ITERATIONS if iterations is None else iterations
    shadow = mode == "shadow"
    world = trainers * (2 if shadow else 1)
    rows = [hogwild * BATCH * len(tables_of(e, emb_ps, TABLES)) for e in range(emb_ps)]
    out = []
    for t in range(trainers):
        host = f"t{t + 1}"
        cpu = {} if cores is None else {"host_cores": int(cores), "threads": hogwild}
        w = TraceRecorder(None, host=host, rank=t, world=world, tdf=1.0, workload="shadowsync", role="worker",
                          **cpu)
        for it in range(iterations):
            for e in range(emb_ps):
                w.send(0, 0, peer=f"emb{e + 1}", values=rows[e], value_bytes=8, tag=f"lookup{t}")
            for e in range(emb_ps):
                w.waited(w.recv(0, 0, peer=f"emb{e + 1}", values=rows[e] * DIM, value_bytes=4, tag=f"rows{t}"))
            w.compute(0, 0, hw_s=step_s, real_s=0.0)
            for e in range(emb_ps):
                w.send(0, 0, peer=f"emb{e + 1}", values=rows[e] * DIM, value_bytes=4, tag=f"push{t}")
            if mode == "foreground" and (it + 1) % k == 0:
                w.send(0, 0, peer=f"syncps{t + 1}", values=dense, value_bytes=4, tag="elastic")
                w.waited(w.recv(0, 0, peer=f"syncps{t + 1}", values=dense, value_bytes=4, tag="center"))
                w.compute(0, 0, hw_s=update_s, real_s=0.0, work={"step": "sync"})   # in the foreground
        out.append((w.header, w.nodes))
    if shadow:
        syncs = iterations if syncs is None else syncs    # _rate makes them outlast the workers
        for t in range(trainers):
            s = TraceRecorder(None, host=f"t{t + 1}", rank=trainers + t, world=world, tdf=1.0,
                              workload="shadowsync", role="shadow", threads=1)
            for _ in range(syncs):
                s.compute(0, 0, hw_s=update_s, real_s=0.0, work={"step": "sync"})   # on its trainer's cores
                if algorithm == "easgd":
                    s.send(0, 0, peer=f"syncps{t + 1}", values=dense, value_bytes=4, tag="elastic")
                    s.waited(s.recv(0, 0, peer=f"syncps{t + 1}", values=dense, value_bytes=4, tag="center"))
                else:       # fabric.py: the allreduce holds the trainers' NIC links
                    s.waited(s.comm(0, 0, op="allreduce", algo="ring", values=dense, value_bytes=4,
                                    group="trainers"))
            out.append((s.header, s.nodes))
    return out


def services(first_rank: int, trainers: int, emb_ps: int, hogwild: int, dense: int, c: dict[str, float]) -> list:
    """The servers as service models: embedding PSs (lookup answered with rows, push not
    answered) costing per request and per row, for each of the H workers' requests; the
    sync PS costing per request plus its elementwise update of the dense vector. A PS
    with `ps_threads` threads is one queue served min(threads, requesters) times as fast
    (requesters: the H x trainers Hogwild workers, or the trainers' shadows): a fluid
    stand-in for a multi-threaded server in which one worker's request uses one thread."""
    from hosts.shadowsync.config import tables_of  # noqa: PLC0415
    from testbed.fidelity.server_model import Reply, ServiceModel  # noqa: PLC0415

    req, row = c["ps_request_us"] * 1e-6, c["ps_row_ns"] * 1e-9
    threads = max(1, round(c["ps_threads"]))
    out = []
    for e in range(emb_ps):
        rows = BATCH * len(tables_of(e, emb_ps, TABLES))          # per worker request
        per = hogwild * (req + row * rows) / min(threads, hogwild * trainers)
        out.append(ServiceModel(f"emb{e + 1}", first_rank + e, "fcfs",
                                {f"{tag}{t}": per for t in range(trainers) for tag in ("lookup", "push")},
                                {f"lookup{t}": Reply(f"rows{t}", hogwild * rows * DIM, 4) for t in range(trainers)}))
    # The one sync PS as N endpoints syncps1..N, one per trainer, each serving its shadow at
    # a 1/N fluid share of the PS: of its threads' updates and of its NIC (the others' dense
    # vectors; its own crosses the endpoint's link). A fluid stand-in for a multi-threaded
    # server, like the embedding PSs' min(threads, requesters) queue.
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import message_cost  # noqa: PLC0415
    update = req + 3 * 4 * dense / (c["sync_ps_GBps"] * 1e9)
    busy = message_cost(4 * dense, load_profile(PROFILE)).link_busy_s
    share = max(trainers * update / min(threads, trainers), (trainers - 1) * busy)
    for t in range(trainers):
        out.append(ServiceModel(f"syncps{t + 1}", first_rank + emb_ps + t, "fcfs", {"elastic": share},
                                {"elastic": Reply("center", dense, 4)}))
    return out


@lru_cache(maxsize=4096)
def _rate(trainers: int, emb_ps: int, hogwild: int, step_s: float, dense: int, mode: str, k: int,
          consts: tuple, iterations: int, algorithm: str = "easgd") -> float:
    """Steady-state examples/s: the workers' extra examples over their extra time between a
    run of `iterations` and one of twice as many (the start, when every trainer looks up at
    once, and the drain cancel out)."""
    n1, t1 = _span(trainers, emb_ps, hogwild, step_s, dense, mode, k, consts, iterations, algorithm)
    n2, t2 = _span(trainers, emb_ps, hogwild, step_s, dense, mode, k, consts, 2 * iterations, algorithm)
    return (n2 - n1) / (t2 - t1)


def _span(trainers: int, emb_ps: int, hogwild: int, step_s: float, dense: int, mode: str, k: int,
          consts: tuple, iterations: int, algorithm: str = "easgd") -> tuple[int, float]:
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.projector import project  # noqa: PLC0415
    c = dict(consts)
    host = {"update_s": sync_update_s(algorithm, dense, c["trainer_mem_GBps"]) if mode != "none" else 0.0,
            "cores": max(1, round(c["trainer_cores"]))}
    if mode == "shadow" and algorithm != "easgd" and trainers == 1:
        mode = "none"        # an allreduce over one trainer moves nothing: its shadow has no traffic
    # The shadow loops back to back for the whole run: its sync count is raised until
    # every shadow outlasts the workers (extra syncs after their finish do not move it).
    syncs = iterations
    for _ in range(6):
        traces = job(trainers, emb_ps, hogwild, step_s, dense, mode, k, iterations, syncs, algorithm, **host)
        models = services(len(traces), trainers, emb_ps, hogwild, dense, c)
        proj = project(traces, load_profile(PROFILE), services=models)
        span = max(proj.finish_s[r] for r in range(trainers))
        shadows = [proj.finish_s[r] for r in range(trainers, 2 * trainers)] if mode == "shadow" else []
        if not shadows or min(shadows) >= span:
            break
        syncs = math.ceil(syncs * 1.25 * span / max(min(shadows), 1e-12))
    else:
        raise RuntimeError(f"shadows end before the workers after 6 tries ({syncs} syncs)")
    return trainers * hogwild * iterations * BATCH, span


def throughput(trainers: int, over: dict[str, float] | None = None, mode: str = "shadow", k: int = 5,
               width: float = 1.0, emb_ps: int | None = None, algorithm: str = "easgd") -> float:
    """Examples/s of all trainers on the modeled hardware (the workers' finish)."""
    c = _nominal(over or {})
    e = int(emb_ps if emb_ps is not None else max(1, min(TABLES, round(c["embedding_ps"]))))
    h = max(1, round(c["hogwild_workers"]))
    step = step_hw_s(width) * c["compute_slowdown"]
    consts = tuple(sorted((n, c[n]) for n in ("ps_request_us", "ps_row_ns", "sync_ps_GBps", "ps_threads",
                                              "trainer_cores", "trainer_mem_GBps")))
    return _rate(trainers, e, h, step, dense_values(width), mode, k, consts, ITERATIONS, algorithm)


def project_efficiency(over: dict[str, float], trainers: int | None = None, mode: str = "shadow",
                       width: float = 1.0, emb_ps: int | None = None, algorithm: str = "easgd") -> float:
    """X(N) / (N x X(1)) in % at a fixed PS count (module docstring); N: the paper's
    TRAINERS unless given."""
    trainers = TRAINERS if trainers is None else trainers
    one = throughput(1, over, mode, width=width, emb_ps=emb_ps, algorithm=algorithm)
    return 100.0 * throughput(trainers, over, mode, width=width, emb_ps=emb_ps,
                              algorithm=algorithm) / (trainers * one)


# ---- emulated extractors -----------------------------------------------------------------

def efficiency_per_seed(runs: Any) -> EmulatedValues:
    """X(2) / (2 x X(1)) of S-EASGD on the modeled hardware (hw_examples_per_s), paired by
    repeat (valid points only): the emulation at 1-2 trainers and 1 embedding PS, a check
    of the models beside the projection, not the paper's setting."""
    run = runs["throughput"]
    by: dict[int, dict[int, float]] = {}
    n, reasons = 0, []
    for p in run.points:
        if p.params.get("topology.workers") not in (1, 2) or p.params.get("workload.algorithm", "easgd") != "easgd" \
                or p.case != "shadow":
            continue
        n += 1
        row = p.summaries[0] if p.summaries else None
        v = row.get("hw_ex_per_s") if row else None
        if p.valid and v:
            by.setdefault(p.repeat, {})[int(p.params["topology.workers"])] = float(v)
        else:
            reasons += p.invalid_reasons or [f"{p.label}: no hw_examples_per_s"]
    values = [100.0 * d[2] / (2 * d[1]) for _, d in sorted(by.items()) if 1 in d and 2 in d]
    return EmulatedValues(values, n, "S-EASGD X(2)/(2 X(1)) on the modeled hardware, emulated with 1 embedding PS, "
                                      "2 Hogwild workers, the workload's small tower (not the paper's setting)",
                          reasons)


def ne_ratio_per_seed(runs: Any, algorithms: tuple[str, ...] = ("easgd", "ma", "bmuf"),
                      achievable: Any = None) -> EmulatedValues:
    """NE(S-X) / NE(FR-X), paired by repeat and algorithm (both points valid); not tested
    (EmulatedValues.not_tested) unless every valid point's eval NE is within the margin of
    the NE its model reaches trained to convergence on its seed's data (`achievable`:
    seed -> measurements.shadowsync_ne.Achievable; default the measured file)."""
    from testbed.reproduce.measurements import shadowsync_ne  # noqa: PLC0415
    achievable = achievable or shadowsync_ne.achievable
    run = runs["quality"]
    got: dict[tuple[str, int], dict[str, float]] = {}
    n, reasons, short, missing, ran = 0, [], [], [], set()
    for p in run.points:
        row = p.summaries[0] if p.summaries else None
        alg = p.params.get("workload.algorithm", "easgd")
        if alg not in algorithms:
            continue
        n += 1
        if p.valid and row and row.get("eval_ne"):
            got.setdefault((alg, p.repeat), {})[p.case] = float(row["eval_ne"])
            # the point's workload seed; summaries before it was recorded: QUALITY pins
            # workload.seed, and repeat r runs seed + r (scenario.sweep.repeat_seeded)
            seed = int(row["seed"]) if row.get("seed") is not None else QUALITY_SEED + p.repeat
            if row.get("iterations"):
                ran.add(int(row["iterations"]))
            try:
                a = achievable(seed)
            except shadowsync_ne.NeMeasurementError as e:
                missing.append(f"{p.label}: {e}")
                continue
            if float(row["eval_ne"]) > a.ne * (1 + a.margin):
                short.append((float(row["eval_ne"]) / a.ne, p.label, a))
        else:
            reasons += p.invalid_reasons or [f"{p.label}: no eval_ne"]
    values = [d["shadow"] / d["foreground"] for _, d in sorted(got.items()) if "shadow" in d and "foreground" in d]
    return EmulatedValues(values, n, "eval NE(S-*) / NE(FR-*) paired by seed and algorithm, 2 trainers x 2 Hogwild "
                                     "workers, 1 embedding PS, k = 5", reasons,
                          not_tested=_untrained(short, missing, sum(len(d) for d in got.values()), ran))


def _untrained(short: list, missing: list[str], valid: int, ran: set[int]) -> str:
    """Why the NE comparison cannot decide: points not trained to within the margin of
    the achievable NE (how far, and how many iterations the model needs), or points whose
    seed has no achievable-NE measurement; "" when every valid point is trained."""
    if missing:
        return f"{len(missing)} of {valid} valid points have no achievable-NE measurement ({missing[0]})"
    if not short:
        return ""
    from testbed.reproduce.measurements import shadowsync_ne  # noqa: PLC0415
    worst, label, a = max(short, key=lambda s: s[0])
    best = min(s[0] for s in short)
    need = shadowsync_ne.iterations_needed()
    need_txt = (f"needs ~{need} iterations per worker" if need is not None
                else "did not come within the margin in the measured iterations")
    return (f"{len(short)} of {valid} valid points trained to {best:.3g}-{worst:.3g}x the achievable NE (worst "
            f"{label}), beyond the {a.margin:.0%} margin; the model {need_txt} to get there (trained to "
            f"convergence in process, {a.source})"
            + (f"; these ran {'/'.join(map(str, sorted(ran)))}" if ran else ""))


# ---- scenarios ---------------------------------------------------------------------------
# Fixed PSs (the paper's condition): one embedding PS (and one sync PS) at every trainer
# count, the 16-64-trainer projections of the emulated traces off (the paper-setting
# projection is project_efficiency). --quick: S-EASGD at 1 and 2 trainers, and S-EASGD vs
# FR-EASGD NE at 2 trainers (150 iterations per worker), calibrated, 3 seeds each.
THROUGHPUT = ScenarioRun(
    "throughput", "scenarios/shadowsync/throughput.yaml",
    overrides=("workload.project_trainers=[]", "workload.project_servers_per_trainer=null",
               "workload.embedding_servers=1",
               "sweep.grid={topology.workers: [1, 2, 4], workload.algorithm: [easgd, ma]}"),
    quick_overrides=("workload.iterations=20", "sweep.grid={topology.workers: [1, 2], workload.algorithm: [easgd]}",
                     "sweep.cases=[{name: shadow, set: {workload.mode: shadow}}]"),
    quick=False)
QUALITY_SEED = 1            # workload.seed of the quality run (repeat r: seed 1 + r): the seeds measured in
                            # testbed/reproduce/measurements/shadowsync_ne.py
QUALITY = ScenarioRun(
    "quality", "scenarios/shadowsync/quality.yaml",
    overrides=("workload.project_trainers=[]", "workload.embedding_servers=1", f"workload.seed={QUALITY_SEED}",
               # calibrated (valid points: the network dilated to the TDF); the scenario's fixed
               # TDF 400 leaves the network undilated and every point invalid on --net mininet
               "workload.device={type: v100, time_scale: auto}", "workload.timeout_s=1200"),
    quick_overrides=("workload.iterations=150", "sweep.grid={workload.algorithm: [easgd]}"),
    quick=False)

SETTING_THROUGHPUT = [
    SettingItem("claim", "throughput scales linearly with the number of trainers, the PS count kept the same",
                "verified", ABSTRACT),
    SettingItem("numeric reading", "X(N) / (N x X(1)) = 100 % at the largest trainer count", "assumed",
                "the abstract states no number; 'linear' read as 100 % efficiency"),
    SettingItem("trainers", TRAINERS, "assumed", f"{SEEDS_MD}.2: '5 -> 20 trainers' [I], full text not stored"),
    SettingItem("parameter servers", "fixed while trainers grow (embedding PSs: constant embedding_ps; 1 sync PS)",
                "assumed", "the abstract's 'when we keep the number of parameter servers the same'; the counts are "
                "not in stored material"),
    SettingItem("algorithm", "S-EASGD (shadow exchanges with a sync PS); S-MA/S-BMUF in a regime", "assumed",
                "the paper's three; the headline projects S-EASGD, the regime 'S-MA / S-BMUF' the allreduce "
                "(the same traffic for both; BMUF's update on the trainer's host is longer)"),
    SettingItem("model", f"DLRM-like: {TABLES} tables dim {DIM}, bottom 13-{'-'.join(map(str, BOTTOM))}-{DIM}, "
                f"top {'-'.join(map(str, TOP))}-1", "assumed",
                "the public DLRM benchmark's Criteo-Kaggle command (facebookresearch/dlrm, dlrm_s_pytorch.py "
                "--arch-mlp-bot=13-512-256-64-16 --arch-mlp-top=512-256-1); the paper's "
                "production model is not in stored material"),
    SettingItem("batch per Hogwild worker", BATCH, "assumed", "the same DLRM Kaggle command (--mini-batch-size=128)"),
    SettingItem("hardware", f"{PROFILE} network profile, {DEVICE} device model", "assumed",
                "the paper's cluster is not in stored material"),
]

SETTING_NE = [
    SettingItem("claim", "S-* gives neutral to better model quality than FR-* (same number of PSs)", "verified",
                ABSTRACT),
    SettingItem("metric", "normalized entropy (eval NE), NE(S-X) / NE(FR-X) paired by seed", "assumed",
                f"{SEEDS_MD}.2 (NE as He et al. 2014) [I]"),
    SettingItem("margin", "0.1 % relative", "assumed", f"{SEEDS_MD}.2: '~0.1 % NE is significant' in CTR work [I]"),
    SettingItem("data", "synthetic click model (hosts/shadowsync/data.py), not the paper's production data",
                "assumed", "the paper's datasets are internal"),
    SettingItem("foreground period", "k = 5 worker iterations", "assumed", f"{SEEDS_MD}.2 gives k in {{5, 10, 30}} "
                "as an example [I]"),
]


def _emb_regime(v: float) -> float:
    return project_efficiency({}, emb_ps=int(v))


PAPER = Paper(
    name="shadowsync",
    title="ShadowSync: Performing Synchronization in the Background for Highly Scalable Distributed Training",
    citation="Q. Zheng, B.-Y. Su, J. Yang, A. Azzolini, Q. Wu, O. Jin, S. Karandikar, H. Lupesko, L. Xiong, E. Zhou. "
             "arXiv 2003.03477 (v3, 2021), Facebook",
    headlines=[
        Headline(
            id="linear_throughput",
            claim="S-* training throughput scales linearly with the number of trainers at a fixed number of PSs",
            paper_value=100.0, unit="%", paper_source=ABSTRACT + "; the number (100 %) is our reading [A]",
            setting=SETTING_THROUGHPUT, project=project_efficiency, constants=CONSTANTS,
            emulated=efficiency_per_seed, emulated_applies=False,
            regimes=[
                Regime("trainers at a fixed PS count", "trainers", TRAINERS, [2, 5, 10, 20, 40, 80],
                       lambda v: project_efficiency({}, trainers=int(v)), log_x=True),
                Regime("S-MA / S-BMUF (allreduce over the shadows): trainers at a fixed PS count", "trainers",
                       TRAINERS, [2, 5, 10, 20, 40, 80],
                       lambda v: project_efficiency({}, trainers=int(v), algorithm="ma"), log_x=True),
                Regime("trainer cores (the shadow shares its trainer's host; 4 Hogwild workers)", "cores",
                       TRAINER_CORES.nominal, [2, 4, 5, 8, 40],
                       lambda v: project_efficiency({"trainer_cores": v}), log_x=True),
                Regime("embedding PSs (fixed while trainers grow)", "servers", EMB_PS.nominal,
                       [2, 4, 8, 13, 26], _emb_regime, log_x=True),
                Regime("dense model size (tower widths x)", "x", 1.0, [0.25, 0.5, 1, 2, 4, 8],
                       lambda v: project_efficiency({}, width=v), log_x=True),
            ],
            profiles=[PROFILE, f"device:dnn-{DEVICE}"],
            note="Projected by replaying the paper-setting S-EASGD job on the projector with a FIXED PS count, "
                 "shadows sharing their trainer's NIC and PS service time from per-request and per-row costs "
                 "(module docstring; the range of the request cost reaches the project's Python PS as measured "
                 "here). S-MA/S-BMUF (allreduce over the shadows, on the trainers' NIC links) are the regime of "
                 "that name; their traffic is the same, their update on the trainer's host differs. Each sync's "
                 "update (5 / 6 / 11 passes over the dense vector, EASGD / MA / BMUF, at trainer_mem_GBps) runs on "
                 "the trainer's trainer_cores cores beside its Hogwild workers (processor sharing: the workers "
                 "slow only when no core is free); FR-EASGD pays it in the foreground. Still by construction or "
                 "approximated: only cores are shared, not memory bandwidth; a PS's threads are one queue "
                 "min(threads, requesters) times as fast; the one sync PS is N endpoints, each a 1/N fluid share "
                 "of its threads and NIC. Efficiency above 100 % is possible: at one "
                 "trainer the lone shadow syncs fastest and takes most of its trainer's NIC. The emulated value is "
                 "S-EASGD at 1-2 trainers with 1 embedding PS and the workload's 12k-parameter tower: a check of "
                 "the models, not the paper's setting."),
        Headline(
            id="ne_neutral",
            claim="background (S-*) sync gives neutral-to-better NE than foreground (FR-*) sync",
            paper_value=1.0, unit="x", paper_source=ABSTRACT,
            setting=SETTING_NE, project=lambda over: 1.0, constants=[],
            emulated=ne_ratio_per_seed, emulated_applies=True, tolerance=0.001,
            direction="neutral_or_better", lower_is_better=True,
            note="No hardware model predicts NE: the projection is the null model NE(S)/NE(FR) = 1.0, and the "
                 "verdict is decided on the emulated 95 % interval of the paired ratio (verdict."
                 "decide_neutral_or_better): neutral when it lies within 1 ± 0.1 %, better when wholly below 1, "
                 "worse when wholly above, undecided otherwise; reproduced when neutral or better. Margin 0.1 % "
                 "(seeds.md: ~0.1 % NE is significant in CTR work) [A]. Only trained models are compared: a valid "
                 "point whose eval NE is more than the measurement's margin (2 %) above the NE its model reaches "
                 "trained to convergence on its seed's data (testbed/reproduce/measurements/shadowsync_ne.py) makes "
                 "the comparison 'not tested'. Limits: the emulation is not the paper's setting (2 trainers, "
                 "synthetic data, a 12k-parameter tower)."),
    ],
    scenarios=[THROUGHPUT, QUALITY],
    seeds=5, quick_seeds=3,
    notes=["Only the abstract and introduction of arXiv 2003.03477 are in the stored material: every number of "
           "the setting (trainers, PSs, Hogwild workers, model, batch, hardware) is assumed.",
           "The emulation runs 1-2 trainers (--quick) with 1 embedding PS and a 12k-parameter tower; the paper's "
           "setting is only projected."],
)
