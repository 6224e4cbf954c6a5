"""P4SGD worker (and parameter server) program: GLM training over an allreduce.

    python -m hosts.p4sgd --config cfg.json

Roles:
  worker  mode "model_parallel" (P4SGD): owns a column block of the features
          (balanced by nnz); per micro-batch it allreduces len(micro-batch)
          partial dot products and updates only its model slice. Up to
          `pipeline_depth` micro-batches are in flight (forward-communication-
          backward pipeline; it only overlaps with an asynchronous collective).
          mode "data_parallel" (baseline): a full replica; each step takes its
          share of a global batch of `batch` samples and allreduces the
          D-dimensional gradient.
  ps      the parameter server host of collective "ps": serves the exact
          sequence of allreduces the workers will issue.

Collectives: "switch" (hosts.ina InaClient over UDP, in-network SUM), "ring"
and "ps" (hosts.collectives over TCP, blocking, wrapped as async).

Time: the device model (hosts.glm.devices) sleeps for its modeled compute,
multiplied by `time_scale` (time dilation: the emulated network is ~100x slower
than a Tofino + FPGA NIC round trip, so compute is slowed by the same factor to
keep the compute:communication ratio). Every time this program reports is
emulated wall-clock time, i.e. dilated by `dilation` (recorded in each record).

Output (JSON lines in cfg.out): "start", one "iter" per iteration (compute,
exposed communication, iteration time, per-allreduce latencies), one "snapshot"
per model snapshot, then "validity" and "summary". Model snapshots go to
<out stem>.snapshots.npy (rows = snapshots), the final model slice/replica to
<out stem>.model.npy. Nothing is evaluated over the network during training;
the runtime evaluates snapshots offline.

Exit codes: 0 ok, 1 training error (e.g. fixed-point overflow), 2 bad config
or output path, 3 network failure or timeout.
"""
from __future__ import annotations

import os

# Before numpy loads: BLAS worker threads busy-wait, and with every emulated
# host sharing a few cores they would steal the CPU the other hosts' timing needs.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import hashlib  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from hosts.common import program  # noqa: E402
from hosts.common.config import (Checker, HostAddr, InaSettings,  # noqa: E402
                                 Straggler, load_json_object, ps_port)
from hosts.common.results import JsonlWriter  # noqa: E402
from hosts.common.tcp import NetError  # noqa: E402
from hosts.common.trace import TraceRecorder  # noqa: E402
from hosts.ina.transport import InaError  # noqa: E402
from hosts.common.network_dilation import parse_network_dilation  # noqa: E402
from hosts.glm.worker_device import WorkerDevice, device_validity  # noqa: E402,F401 (re-exported)

EXIT_OK, EXIT_TRAINING = 0, 1
EXIT_CONFIG, EXIT_NET = program.EXIT_CONFIG, program.EXIT_NET
MODES = ("model_parallel", "data_parallel")
COLLECTIVES = ("switch", "ring", "ps")
GLMS = ("linreg", "logreg", "svm")

log = logging.getLogger("p4sgd")


# ============================================================ config
@dataclass(frozen=True)
class P4sgdConfig:
    host: str
    role: str                      # "worker" | "ps"
    rank: int                      # worker rank; -1 for the ps
    world: int
    mode: str
    glm: str
    l2: float
    lr: float
    batch: int                     # samples per model update (global, both modes)
    micro_batch: int               # model parallel: samples per allreduce
    epochs: int
    pipeline_depth: int
    seed: int                      # sample order (identical on every worker)
    dataset: dict                  # hosts.glm.data.load_dataset spec
    balance: str                   # feature partitioning: auto | nnz | width
    collective: str
    peers: tuple[HostAddr, ...]
    ps: HostAddr | None
    port: int                      # TCP port base (ring/ps)
    ina: InaSettings | None        # collective switch: switch address, job, window (optional key)
    fixed_point_exp: int | None    # switch: fixed scale 2^k for partial sums (None = agreed)
    device: dict                   # hosts.glm.devices.make_device spec incl. time_scale
    snapshot_every: int
    straggler: Straggler | None
    start_at: float | None
    connect_timeout_s: float
    timeout_s: float
    out: str
    trace: str | None              # this host's trace (hosts.common.trace), None = not recorded
    calibration: dict | None       # {"hw_op_s", "rounds", "batches"}: calibrate time_scale first
    # {"control": [switch control files], "hardware": {latency_s, link_rate_bps, ...},
    # "headroom": k, "hw_op_s": one allreduce on the hardware}: the soft switch can dilate
    # the network (hosts.common.network_dilation)
    network_dilation: dict | None = None
    # {"xclbin", "device_index", "kernel_name", "dry_run"}: the worker drives a U280 kernel
    # through XRT (hosts.glm.u280_xrt); None (or the key absent): the modeled device only
    xrt: dict | None = None

    KEYS = frozenset({
        "host", "role", "rank", "world", "mode", "glm", "l2", "lr", "batch", "micro_batch",
        "epochs", "pipeline_depth", "seed", "dataset", "balance", "collective", "peers", "ps",
        "port", "ina", "fixed_point_exp", "device", "snapshot_every", "straggler",
        "start_at", "connect_timeout_s", "timeout_s", "out", "trace", "calibration",
        "network_dilation", "xrt"})

    @classmethod
    def from_json(cls, source: str | Path | dict) -> "P4sgdConfig":
        data, where = load_json_object(source)
        c = Checker(data, where)
        v: dict[str, Any] = {
            "host": c.str("host"), "role": c.str("role", ("worker", "ps")), "rank": c.int("rank"),
            "world": c.int("world", lo=1), "mode": c.str("mode", MODES), "glm": c.str("glm", GLMS),
            "l2": c.number("l2", lo=0), "lr": c.number("lr", positive=True),
            "batch": c.int("batch", lo=1), "micro_batch": c.int("micro_batch", lo=1),
            "epochs": c.int("epochs", lo=1), "pipeline_depth": c.int("pipeline_depth", lo=1),
            "seed": c.int("seed", lo=0), "balance": c.str("balance", ("auto", "nnz", "width")),
            "collective": c.str("collective", COLLECTIVES), "port": c.int("port", lo=1),
            "fixed_point_exp": c.int("fixed_point_exp", nullable=True),
            "snapshot_every": c.int("snapshot_every", lo=1), "straggler": c.straggler("straggler"),
            "start_at": c.number("start_at", lo=0, nullable=True),
            "connect_timeout_s": c.number("connect_timeout_s", positive=True),
            "timeout_s": c.number("timeout_s", positive=True), "out": c.str("out"),
        }
        ok, val = c.value("trace", True)
        if ok and not isinstance(val, str):
            c.error("trace", f"must be a path or null, got {val!r}")
        v["trace"] = val if ok and isinstance(val, str) else None
        v["calibration"] = _parse_calibration(c)
        v["network_dilation"] = parse_network_dilation(c)
        v["xrt"] = _parse_xrt(c)
        for key in ("dataset", "device"):
            ok, val = c.value(key, False)
            if ok and not isinstance(val, dict):
                c.error(key, f"must be an object, got {val!r}")
            v[key] = val if ok and isinstance(val, dict) else None
        # Same "ina" block as hosts.allreduce (missing = the Mininet defaults).
        v["ina"] = InaSettings.parse(c, v["collective"])
        if c.data.get("ina") is not None and v["collective"] != "switch":
            c.error("ina", f'only used by collective "switch", not {v["collective"]!r}; remove it or use null')
        peers: list[HostAddr] = []
        ok, raw = c.value("peers", False)
        if ok:
            if not isinstance(raw, list) or not raw:
                c.error("peers", "must be a non-empty list of {name, ip}, workers in rank order")
            else:
                peers = [h for i, p in enumerate(raw) if (h := c.host(p, f"peers[{i}]"))]
                if v["world"] is not None and len(raw) != v["world"]:
                    c.error("peers", f"has {len(raw)} entries but world is {v['world']}")
        v["peers"] = tuple(peers)
        ok, raw_ps = c.value("ps", True)
        v["ps"] = c.host(raw_ps, "ps") if ok else None
        # Cross-field rules.
        if v["collective"] == "ps" and v["ps"] is None:
            c.error("ps", 'collective "ps" needs the parameter server\'s {"name", "ip"}')
        if v["role"] == "worker" and None not in (v["rank"], v["world"]):
            if not 0 <= v["rank"] < v["world"]:
                c.error("rank", f"must be in 0..{v['world'] - 1}, got {v['rank']}")
            elif peers and len(peers) > v["rank"] and peers[v["rank"]].name != v["host"]:
                c.error("host", f"{v['host']!r} but peers[{v['rank']}] is {peers[v['rank']].name!r}")
        if v["role"] == "ps" and v["collective"] not in (None, "ps"):
            c.error("role", f'role "ps" only runs with collective "ps", not {v["collective"]!r}')
        if None not in (v["batch"], v["micro_batch"]) and v["micro_batch"] > v["batch"]:
            c.error("micro_batch", f"{v['micro_batch']} > batch {v['batch']}")
        if (v["mode"] == "data_parallel" and None not in (v["batch"], v["world"])
                and v["batch"] % v["world"]):
            c.error("batch", f"data_parallel splits the global batch over the workers: "
                             f"{v['batch']} is not a multiple of world {v['world']}")
        if v["xrt"] is not None:
            if v["mode"] != "model_parallel":
                c.error("xrt", f"the U280 kernel runs the model-parallel (P4SGD) step; mode is {v['mode']!r}")
            if (v["device"] or {}).get("type") != "u280":
                c.error("xrt", f"needs device type u280, got {(v['device'] or {}).get('type')!r}")
        c.finish(set(cls.KEYS))
        return cls(**v)

    @property
    def my_ip(self) -> str:
        return self.ps.ip if self.role == "ps" else self.peers[self.rank].ip

    def run_identity(self) -> dict[str, Any]:
        """What every participant must agree on (checked in the TCP handshake)."""
        ds = hashlib.blake2b(repr(sorted(self.dataset.items())).encode(), digest_size=6).hexdigest()
        return {"world": self.world, "mode": self.mode, "collective": self.collective,
                "batch": self.batch, "micro_batch": self.micro_batch, "epochs": self.epochs,
                "seed": self.seed, "dataset": ds, "port": self.port}


def _parse_calibration(c: Checker) -> dict | None:
    ok, val = c.value("calibration", True)
    if not ok:
        return None
    if not isinstance(val, dict) or set(val) != {"hw_op_s", "rounds", "batches"}:
        c.error("calibration", f"must be null or {{hw_op_s, rounds, batches}}, got {val!r}")
        return None
    bad = [k for k in ("rounds", "batches") if not isinstance(val[k], int) or val[k] < 1]
    if bad or not isinstance(val["hw_op_s"], (int, float)) or val["hw_op_s"] < 0:
        c.error("calibration", f"hw_op_s must be >= 0, rounds and batches integers >= 1; got {val!r}")
        return None
    return dict(val)


def _parse_xrt(c: Checker) -> dict | None:
    """The optional "xrt" block: which xclbin and card a worker's U280 kernel runs on."""
    from hosts.glm.u280_xrt import KERNEL_NAME, check_xclbin

    val = c.data.get("xrt")
    if val is None:
        return None
    keys = {"xclbin", "device_index", "kernel_name", "dry_run"}
    if not isinstance(val, dict) or set(val) - keys:
        c.error("xrt", f"must be null or an object with keys {sorted(keys)}, got {val!r}")
        return None
    out = {"xclbin": val.get("xclbin"), "device_index": val.get("device_index", 0),
           "kernel_name": val.get("kernel_name", KERNEL_NAME), "dry_run": val.get("dry_run", False)}
    if not isinstance(out["dry_run"], bool):
        c.error("xrt.dry_run", f"must be true or false, got {out['dry_run']!r}")
    if isinstance(out["device_index"], bool) or not isinstance(out["device_index"], int) \
            or out["device_index"] < 0:
        c.error("xrt.device_index", f"must be an integer >= 0, got {out['device_index']!r}")
    if not isinstance(out["kernel_name"], str) or not out["kernel_name"]:
        c.error("xrt.kernel_name", f"must be a non-empty string, got {out['kernel_name']!r}")
    if out["xclbin"] is None:
        if out["dry_run"] is not True:
            c.error("xrt.xclbin", "missing: a real U280 run needs the kernel's xclbin file")
    elif not isinstance(out["xclbin"], str):
        c.error("xrt.xclbin", f"must be a path, got {out['xclbin']!r}")
    elif (why := check_xclbin(out["xclbin"])) is not None:
        c.error("xrt.xclbin", why)
    return out


def xrt_calls_path(out: str | Path) -> Path:
    """<stem>.xrt_calls.jsonl next to the JSONL output: the worker's recorded XRT calls."""
    p = Path(out)
    stem = p.with_suffix("") if p.suffix == ".jsonl" else p
    return Path(f"{stem}.xrt_calls.jsonl")


def out_paths(out: str | Path) -> tuple[Path, Path]:
    """(<stem>.snapshots.npy, <stem>.model.npy) next to the JSONL output."""
    p = Path(out)
    stem = p.with_suffix("") if p.suffix == ".jsonl" else p
    return Path(f"{stem}.snapshots.npy"), Path(f"{stem}.model.npy")


# ============================================================ schedule
def minibatch_sizes(n_samples: int, batch: int) -> list[int]:
    """Sizes of one epoch's mini-batches (the last may be smaller)."""
    return [min(batch, n_samples - i) for i in range(0, n_samples, batch)]


def allreduce_schedule(cfg: P4sgdConfig, n_samples: int, n_features: int) -> list[tuple[int, bool]]:
    """(float32 elements, last of its iteration) of every allreduce, in order.

    Identical on all workers (that is what keeps collectives in step); the PS
    uses it to know what to serve. Calibration (if any) comes first: `rounds`
    times its first `batches` mini-batches, then one agreement allreduce."""
    def batch_ops(b: int) -> list[tuple[int, bool]]:
        if cfg.mode == "data_parallel":
            return [(n_features, True)]
        micro = [min(cfg.micro_batch, b - i) for i in range(0, b, cfg.micro_batch)]
        return [(m, k == len(micro) - 1) for k, m in enumerate(micro)]

    out: list[tuple[int, bool]] = []
    if cfg.calibration:
        sizes = minibatch_sizes(n_samples, cfg.batch)[:cfg.calibration["batches"]]
        from hosts.common.calibration import agreement_size
        round_ops = [op for b in sizes for op in batch_ops(b)]
        for _ in range(cfg.calibration["rounds"]):
            out.extend(round_ops)
            out.append((agreement_size(len(round_ops), cfg.world), True))
    for _ in range(cfg.epochs):
        for b in minibatch_sizes(n_samples, cfg.batch):
            out.extend(batch_ops(b))
    return out


# ============================================================ collectives
class Comm:
    """An opened collective: async allreduce, barrier, close, per-op latency."""

    def __init__(self, aar, barrier, close, latency, blocking: bool, stats=None):
        self.aar, self.barrier, self.close = aar, barrier, close
        self.latency = latency          # (handle, submit_s) -> seconds the allreduce took
        self.blocking = blocking
        self.idle = time.sleep          # how the device waits out modeled compute
        self.stats = stats or (lambda: {})
        # seconds -> None: an operation may take this long on purpose (network dilation)
        self.expect_delay = lambda seconds: None


def open_comm(cfg: P4sgdConfig) -> Comm:
    from hosts.glm.training import BlockingAsAsync

    hello = {"host": cfg.host, "rank": cfg.rank, "run": cfg.run_identity()}
    if cfg.collective == "switch" and cfg.world == 1:
        # One worker: the sum of one vector is itself, and nothing crosses the network
        # (as on the hardware, and as testbed.fidelity.network_model charges it).
        return Comm(BlockingAsAsync(lambda v: np.array(v, dtype=np.float64)), lambda: None,
                    lambda: None, lambda h, submit_s: submit_s, blocking=True)
    if cfg.collective == "switch":
        return _open_switch(cfg)
    if cfg.collective == "ring":
        from hosts.collectives.ring import RingAllreduce
        coll = RingAllreduce.connect(rank=cfg.rank, peers=cfg.peers, port_base=cfg.port,
                                     hello=hello, connect_timeout_s=cfg.connect_timeout_s,
                                     timeout_s=cfg.timeout_s)
    else:
        from hosts.collectives.ps import PSWorker
        coll = PSWorker.connect(ps=cfg.ps, my_ip=cfg.my_ip, port_base=cfg.port, hello=hello,
                                connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    # Blocking: submit() does the whole allreduce, so its duration is the latency.
    return Comm(BlockingAsAsync(coll.allreduce), coll.barrier, coll.close,
                lambda h, submit_s: submit_s, blocking=True)


class _SwitchAsync:
    """The in-switch collective's InaClient as an AsyncAllreduce (float SUM).

    P4SGD's partial dot products use a fixed scale 2^k (no scale round trip:
    latency-centric); data-parallel gradients have no known range, so each
    vector first agrees on a scale (one MAX round)."""

    def __init__(self, client, scale_exp: int | None, timeout_s: float):
        self.client, self.timeout_s = client, timeout_s
        self.kw = {} if scale_exp is None else {"scale_exp": scale_exp}

    def submit(self, vec):
        return self.client.submit(np.asarray(vec, dtype=np.float64), "sum", **self.kw)

    def wait(self, handle):
        return self.client.wait(handle, timeout=self.timeout_s)


def switch_scale_exp(cfg: P4sgdConfig) -> int | None:
    """Fixed-point scale of in-switch sums. P4SGD's partial dot products have a known
    range (fixed 2^k); data-parallel gradients do not: None = agree per vector (a MAX
    round first, which the network model charges as `scale_round`)."""
    return cfg.fixed_point_exp if cfg.mode == "model_parallel" else None


def _open_switch(cfg: P4sgdConfig) -> Comm:
    from hosts.collectives.switch import SwitchAllreduce

    # connect() = socket + client + a first round that checks every worker runs this config.
    sw = SwitchAllreduce.connect(rank=cfg.rank, world=cfg.world, my_ip=cfg.my_ip, ina=cfg.ina,
                                 run=cfg.run_identity(), connect_timeout_s=cfg.connect_timeout_s,
                                 timeout_s=cfg.timeout_s)
    aar = _SwitchAsync(sw.client, switch_scale_exp(cfg), cfg.timeout_s)

    def latency(h, submit_s):
        done = getattr(h, "completed_at", 0.0)  # the transport's own completion time
        return done - h.submitted_at if done else None

    comm = Comm(aar, sw.barrier, sw.close, latency, blocking=False, stats=sw.stats)
    comm.idle = lambda seconds: _idle_polling(sw.client, seconds)
    comm.expect_delay = sw.client.expect_delay
    return comm


def _idle_polling(client, seconds: float) -> None:
    """Sleep `seconds` while the transport takes in results and fires its timers,
    so completion times are when results arrived, not when we next looked."""
    import select

    end = time.perf_counter() + seconds
    sock = getattr(client.io, "sock", None)
    while True:
        client.poll()
        left = end - time.perf_counter()
        if left <= 0:
            return
        deadline = client.next_deadline()
        if deadline is not None:
            left = min(left, max(0.0, deadline - time.monotonic()))
        if sock is not None:
            select.select([sock], [], [], left)
        else:
            time.sleep(left)


class TimedAllreduce:
    """AsyncAllreduce wrapper: exposed communication time, per-op latency, result digest.

    Exposed = time this worker spends inside submit/wait (the part of the
    communication compute did not hide)."""

    def __init__(self, comm: Comm, before_send=None, trace=None, algo: str = "", after_wait=None,
                 scale_round: bool = False):
        self.comm = comm
        self.scale_round = scale_round          # each op first agrees on a fixed-point scale
        self.before_send = before_send
        self.after_wait = after_wait            # e.g. WorkerDevice.mark: waiting is not glue
        self.trace, self.algo = trace, algo     # hosts.common.trace.TraceRecorder or None
        self.exposed_s = 0.0
        self.latencies: list[float] = []
        self.spans: list[tuple[float, float]] = []   # (submitted, completed) per op
        self.digest = hashlib.blake2b(digest_size=8)  # equal on all workers iff results agree

    def submit(self, vec):
        if self.before_send is not None:
            self.before_send()
        t = time.perf_counter()
        h = self.comm.aar.submit(vec)
        dt = time.perf_counter() - t
        self.exposed_s += dt
        node = (self.trace.comm(t, None, op="allreduce", algo=self.algo, values=len(vec),
                                **({"scale_round": True} if self.scale_round else {}))
                if self.trace is not None else None)
        return (h, dt, t, node)

    def wait(self, wrapped):
        h, submit_s, t_submit, node = wrapped
        t = time.perf_counter()
        result = self.comm.aar.wait(h)
        t_end = time.perf_counter()
        self.exposed_s += t_end - t
        # Blocking: the whole time inside the collective (nothing can hide it);
        # async: the collective's own completion time, else until wait returned.
        lat = submit_s + (t_end - t) if self.comm.blocking else self.comm.latency(h, submit_s)
        lat = lat if lat is not None else t_end - t_submit
        self.latencies.append(lat)
        self.spans.append((t_submit, t_submit + lat))
        if node is not None:
            self.trace.done(node, t_submit + lat)
            self.trace.waited(node)
        self.digest.update(np.ascontiguousarray(result).tobytes())
        if self.after_wait is not None:
            self.after_wait()
        return result

    def __call__(self, vec):  # blocking form, for data_parallel_sgd
        return self.wait(self.submit(vec))


# ============================================================ worker
def wait_until(start_at: float | None) -> None:
    if start_at is not None and start_at > time.time():
        time.sleep(start_at - time.time())


class Worker:
    def __init__(self, cfg: P4sgdConfig, writer: JsonlWriter):
        from hosts.glm.data import load_dataset
        from hosts.glm.models import get_model

        self.cfg, self.writer = cfg, writer
        self.model = get_model(cfg.glm, cfg.l2)
        self.kernel = self._open_kernel()
        measured = cfg.device.get("type", "cpu") == "cpu" or (self.kernel is not None and not self.kernel.dry_run)
        self.dilation = 1.0 if measured else float(cfg.device.get("time_scale", 1.0))
        self.trace = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.rank, world=cfg.world,
                                   tdf=self.dilation, device=dict(cfg.device), workload="p4sgd",
                                   mode=cfg.mode, collective=cfg.collective,
                                   pipeline_depth=cfg.pipeline_depth) if cfg.trace else None
        self.device = self._new_device(self.dilation)
        self.calibration: dict[str, Any] | None = None
        t = time.perf_counter()
        self.ds = load_dataset(dict(cfg.dataset))
        self.load_s = time.perf_counter() - t
        self.snap_path, self.model_path = out_paths(cfg.out)
        self.snapshots: list[np.ndarray] = []
        self.iterations = self.samples = 0
        self.train_s = 0.0
        self.cpu_s = 0.0               # this process's CPU time (user + sys) while training
        self.x: np.ndarray | None = None
        self.part = (0, self.ds.n_features)
        self.timed: TimedAllreduce | None = None
        self.comm: Comm | None = None

    def _open_kernel(self):
        """The U280 kernel adapter when the config names one (a real run: pyxrt must
        import, else XrtUnavailable, a config error), else None (modeled device)."""
        if self.cfg.xrt is None:
            return None
        from hosts.glm.u280_xrt import U280XrtAdapter

        x = self.cfg.xrt
        return U280XrtAdapter(x["xclbin"], x["device_index"], x["kernel_name"], dry_run=x["dry_run"])

    def _new_device(self, time_scale: float) -> WorkerDevice:
        from hosts.glm.devices import make_device

        if self.kernel is not None and not self.kernel.dry_run:
            # A real card: its measured kernel time, not the model (no dilation).
            from hosts.glm.u280_xrt import XrtKernelDevice
            return WorkerDevice(XrtKernelDevice(self.kernel), self.cfg.straggler, self.trace)
        spec = dict(self.cfg.device)
        if spec.get("type", "cpu") != "cpu":
            spec["time_scale"] = time_scale
        return WorkerDevice(make_device(spec), self.cfg.straggler, self.trace)

    def _attach(self) -> None:
        """Wire device and collective together (again after calibration)."""
        self.device.idle = self.comm.idle
        # Realize the modeled compute before each send: the device sleeps in batches
        # (sleep granularity), and unrealized debt would let a worker's partial sums
        # leave before its forward pass "finished", misaligning workers in lock-step.
        self.timed = TimedAllreduce(self.comm, before_send=self.device.flush, trace=self.trace,
                                    algo=self.cfg.collective, after_wait=self.device.mark,
                                    scale_round=self.cfg.collective == "switch" and switch_scale_exp(self.cfg) is None)

    # -- data -------------------------------------------------------------
    def prepare(self) -> None:
        from hosts.glm.partition import partition_features, slice_dataset

        if self.cfg.mode == "model_parallel":
            part = partition_features(self.ds, self.cfg.world, self.cfg.balance)
            self.part = part.ranges[self.cfg.rank]
            self.X = slice_dataset(self.ds, self.part)
            self.imbalance = part.imbalance
        else:
            self.X, self.imbalance = self.ds.X, 1.0
        self.x = np.zeros(self.part[1] - self.part[0])
        if self.kernel is not None:   # samples, labels and the zero model into the card's HBM
            self.kernel.load(self.X, self.ds.y, None, self.cfg.micro_batch, self.cfg.glm)

    # -- main loop -------------------------------------------------------
    def run(self, comm: Comm | None = None) -> int:
        """Train; `comm` replaces the configured collective (in-process tests)."""
        cfg = self.cfg
        self.prepare()
        if self.trace is not None:   # what the projector needs to rescale compute to other worker counts
            self.trace.header.update(n_features=self.ds.n_features, n_samples=self.ds.n_samples,
                                     part=list(self.part), batch=cfg.batch, micro_batch=cfg.micro_batch)
        log.info("%s rank %d/%d, %s over %s, features %d..%d of %d, %d samples, device %s x%g",
                 cfg.mode, cfg.rank, cfg.world, cfg.glm, cfg.collective, self.part[0], self.part[1],
                 self.ds.n_features, self.ds.n_samples, cfg.device.get("type"), self.dilation)
        self.comm = comm or open_comm(cfg)
        self._attach()
        try:
            wait_until(cfg.start_at)
            self.comm.barrier()
            if cfg.calibration:
                self.calibrate()
            elif cfg.network_dilation is not None and self.device.base_scale is not None:
                # A fixed TDF dilates the network too (no barrier needed: no allreduce
                # completes before rank 0, which waits for the switch, joins it).
                from hosts.common.calibration import Calibrator
                Calibrator(0.0, self.dilation, cfg.network_dilation, cfg.rank,
                           self.comm.expect_delay).dilate(self.dilation)
            self.train()
        finally:
            self.comm.close()
            self.save()
            self.save_kernel_calls()
            if self.trace is not None:
                self.trace.set_tdf(self.dilation)
                self.trace.close()
        self.writer.write(device_validity(cfg.host, self.device, self.dilation))
        self.write_summary(True, None)
        log.info("done: %d iterations, %d samples in %.3f s (dilation %g)", self.iterations,
                 self.samples, self.train_s, self.dilation)
        return EXIT_OK

    def calibrate(self) -> None:
        """Set the dilation from this network: `rounds` times, run the first
        `batches` mini-batches at the current dilation, measure every allreduce
        against its hardware time, and agree on a new dilation (see
        hosts.common.calibration). The model is reset afterwards: training
        starts from the same state as without calibration.

        Where the soft switch can dilate the network (cfg.network_dilation),
        round 0 measures the undilated emulator and picks TDF with headroom;
        later rounds run on the dilated network and tune the delay line's
        compensation. Elsewhere TDF follows the network's own slowdown."""
        from hosts.common.calibration import Calibrator

        cc = self.cfg.calibration
        cal = Calibrator(cc["hw_op_s"], self.dilation, self.cfg.network_dilation, self.cfg.rank,
                         self.comm.expect_delay)
        cal.start()
        for _ in range(cc["rounds"]):
            measured, why, lat, ratio = self._calibration_round(cc)
            tdf = cal.after_round(measured, why, op_p50_s=float(np.median(lat)) if lat else None,
                                  ops=len(lat), my_compute_ratio=ratio)
            if self.device.base_scale is not None:
                self.dilation = tdf
            self.device = self._new_device(self.dilation)
            self._attach()
        cal.finish()
        self.calibration = cal.record(self.cfg.host)
        self.writer.write(self.calibration)
        self.x = np.zeros_like(self.x)          # training starts from scratch
        if self.kernel is not None:
            self.kernel.reset_model()
        if self.trace is not None:
            self.trace.reset()
        # No extra barrier: the agreement allreduce already lines the workers up, and
        # the PS serves exactly the schedule allreduce_schedule() lists.

    def _calibration_round(self, cc: dict[str, Any]):
        """Run the first `batches` mini-batches; every worker gets the same verdict."""
        from hosts.common import calibration as cal
        from hosts.glm.training import epoch_order, minibatches

        first = list(minibatches(epoch_order(self.ds.n_samples, self.cfg.seed, 0), self.cfg.batch))
        self.device.t0 = time.perf_counter()
        self.device.mark()
        n0 = len(self.timed.latencies)
        busy0, hw0 = self.device.busy_s, self.device.hw_s
        for idx in first[:cc["batches"]]:
            self.step(idx)
            self.device.flush()
        lat, spans = self.timed.latencies[n0:], self.timed.spans[n0:]
        hw = self.device.hw_s - hw0
        # numpy + glue per hardware second: the dilation the host itself needs.
        ratio = (self.device.busy_s - busy0) / hw if self.device.base_scale is not None and hw > 0 else None
        summed = self.comm.aar.wait(self.comm.aar.submit(cal.encode(
            [a for a, _ in spans], [b for _, b in spans], ratio, self.cfg.rank, self.cfg.world)))
        measured, why = cal.decide(summed, len(spans), self.cfg.world, cc["hw_op_s"],
                                   fallback=self.dilation)
        return measured, why, lat, ratio

    def train(self) -> None:
        from hosts.glm.training import epoch_order, minibatches

        cfg = self.cfg
        self.writer.write({"type": "start", "host": cfg.host, "rank": cfg.rank, "mode": cfg.mode,
                           "collective": cfg.collective, "part": list(self.part),
                           "n_samples": self.ds.n_samples, "n_features": self.ds.n_features,
                           "dilation": self.dilation, "device": self.describe_device(),
                           "network_dilated": (cfg.network_dilation is not None
                                               and self.device.base_scale is not None),
                           "load_s": self.load_s, "wall_start": time.time()})
        t0 = self.device.t0 = time.perf_counter()
        cpu0 = time.process_time()
        self.snapshot(t0)
        t_prev = t0
        for epoch in range(cfg.epochs):
            for idx in minibatches(epoch_order(self.ds.n_samples, cfg.seed, epoch), cfg.batch):
                c0, e0, n0 = self.device.compute_s, self.timed.exposed_s, len(self.timed.latencies)
                self.step(idx)
                self.device.flush()  # the update needs every backward pass: realize them
                stall = self.device.stall()
                t = time.perf_counter()
                self.iterations += 1
                self.samples += len(idx)
                self.writer.write({
                    "type": "iter", "host": cfg.host, "rank": cfg.rank, "iter": self.iterations,
                    "epoch": epoch, "samples": len(idx), "t_s": t - t0, "iter_s": t - t_prev,
                    "compute_s": self.device.compute_s - c0, "comm_s": self.timed.exposed_s - e0,
                    "stall_s": stall, "allreduce_s": self.timed.latencies[n0:],
                    "dilation": self.dilation})
                t_prev = t
                if self.iterations % cfg.snapshot_every == 0:
                    self.snapshot(t0)
        self.train_s = time.perf_counter() - t0
        self.cpu_s = time.process_time() - cpu0
        if self.iterations % cfg.snapshot_every:
            self.snapshot(t0)

    def step(self, idx: np.ndarray) -> None:
        from hosts.glm.training import data_parallel_sgd, pipelined_epoch

        cfg = self.cfg
        if cfg.mode == "model_parallel":
            # One mini-batch of the pipelined schedule; updates self.x in place.
            pipelined_epoch(self.X, self.ds.y, self.x, self.model, cfg.lr, len(idx),
                            cfg.micro_batch, idx, self.timed, cfg.pipeline_depth, self.device,
                            kernel=self.kernel)
        else:
            # The core's data-parallel step on exactly this global batch.
            self.x, _ = data_parallel_sgd(self.X, self.ds.y, self.model, cfg.lr,
                                          cfg.batch // cfg.world, 1, cfg.seed, self.timed,
                                          cfg.rank, cfg.world, order=lambda _e: idx, x0=self.x,
                                          eval_every=0, device=self.device)

    def snapshot(self, t0: float) -> None:
        # In memory only (a copy costs microseconds); written to disk after training.
        t = time.perf_counter() - t0
        if self.kernel is not None:   # the model lives on the card: read it back
            self.x = self.kernel.read_model().astype(np.float64)
        self.snapshots.append(self.x.copy())
        self.writer.write({"type": "snapshot", "host": self.cfg.host, "rank": self.cfg.rank,
                           "index": len(self.snapshots) - 1, "iter": self.iterations,
                           "epochs": self.samples / self.ds.n_samples,
                           "samples_seen": self.samples, "t_s": t, "dilation": self.dilation})

    def describe_device(self) -> dict[str, Any]:
        d = dict(self.device.device.describe())
        if self.kernel is not None and self.kernel.dry_run:
            d.update(xrt=self.kernel.header(), time="dry run: modeled time")
        return d

    def save_kernel_calls(self) -> None:
        """The U280 adapter's recorded calls, beside the outputs (also after a failure)."""
        if self.kernel is None:
            return
        path = xrt_calls_path(self.cfg.out)
        self.kernel.write_calls(path)
        self.writer.write({"type": "xrt", "host": self.cfg.host, **self.kernel.header(),
                           "calls_path": str(path)})

    def save(self) -> None:
        if self.x is None:
            return
        if self.snapshots:
            np.save(self.snap_path, np.stack(self.snapshots))
        np.save(self.model_path, self.x)

    def write_summary(self, ok: bool, error: str | None) -> None:
        cfg, timed = self.cfg, self.timed
        lat = np.asarray(timed.latencies if timed else [], dtype=np.float64)
        self.writer.write({
            "type": "summary", "host": cfg.host, "role": "worker", "rank": cfg.rank, "ok": ok,
            "error": error, "mode": cfg.mode, "collective": cfg.collective, "world": cfg.world,
            "part": list(self.part), "imbalance": getattr(self, "imbalance", None),
            "iterations": self.iterations, "samples": self.samples, "train_s": self.train_s,
            # Real CPU this emulated host used while training (numpy + transport + Python):
            # with every host on a few shared cores, sum over hosts / train_s must stay
            # well below the core count, or hosts wait for a core, not for the model.
            "cpu_s": self.cpu_s,
            "compute_s": self.device.compute_s, "comm_s": timed.exposed_s if timed else 0.0,
            "allreduces": int(lat.size), "allreduce_total_s": float(lat.sum()),
            "allreduce_p50_s": float(np.percentile(lat, 50)) if lat.size else None,
            "digest": timed.digest.hexdigest() if timed else None,
            "blocking_collective": self.comm.blocking if self.comm else None,
            "dilation": self.dilation, "times_dilated": self.dilation != 1.0,
            "snapshots_path": str(self.snap_path), "model_path": str(self.model_path),
            "collective_stats": self.comm.stats() if self.comm else {},
        })


# ============================================================ parameter server
class PSRole:
    def __init__(self, cfg: P4sgdConfig, writer: JsonlWriter):
        self.cfg, self.writer = cfg, writer
        self.served = 0
        self.ps = None

    def run(self) -> int:
        from hosts.collectives.ps import ParameterServer
        from hosts.glm.data import load_dataset

        cfg = self.cfg
        ds = load_dataset(dict(cfg.dataset))
        schedule = allreduce_schedule(cfg, ds.n_samples, ds.n_features)
        log.info("parameter server for %d workers on %s:%d, %d allreduces", cfg.world,
                 cfg.ps.ip, ps_port(cfg.port), len(schedule))
        hello = {"host": cfg.host, "rank": cfg.rank, "run": cfg.run_identity()}
        self.ps = ParameterServer.accept(peers=cfg.peers, my_ip=cfg.ps.ip, port_base=cfg.port,
                                         hello=hello, connect_timeout_s=cfg.connect_timeout_s,
                                         timeout_s=cfg.timeout_s)
        try:
            wait_until(cfg.start_at)
            self.ps.barrier()
            t0 = time.perf_counter()
            s = cfg.straggler
            for size, last in schedule:
                # A straggling PS adds its delay once per iteration (it has no compute).
                delay = (s.delay_ms / 1e3 if s is not None and last
                         and time.perf_counter() - t0 >= s.start_s else 0.0)
                self.ps.reduce_once(size, delay)
                self.served += 1
        finally:
            self.ps.close()
        self.write_summary(True, None)
        return EXIT_OK

    def write_summary(self, ok: bool, error: str | None) -> None:
        self.writer.write({"type": "summary", "host": self.cfg.host, "role": "ps", "ok": ok,
                           "error": error, "allreduces_served": self.served,
                           "bytes_received": self.ps.bytes_received if self.ps else 0,
                           "bytes_sent": self.ps.bytes_sent if self.ps else 0})


# ============================================================ main
def main(argv: list[str] | None = None) -> int:
    global log
    try:
        cfg, writer, log = program.start("p4sgd", __doc__, P4sgdConfig, argv)
    except program.SetupFailed as e:
        return e.code
    try:
        job = PSRole(cfg, writer) if cfg.role == "ps" else Worker(cfg, writer)
    except (ValueError, OSError) as e:  # dataset or device spec problems
        log.error("cannot set up: %s", e)
        writer.close()
        return EXIT_CONFIG
    try:
        return job.run()
    except (NetError, TimeoutError, InaError) as e:
        log.error("network: %s", e)
        job.write_summary(False, f"{type(e).__name__}: {e}")
        return EXIT_NET
    except (ArithmeticError, ValueError) as e:  # e.g. FixedPointOverflow, diverging model
        log.exception("training failed")
        job.write_summary(False, f"{type(e).__name__}: {e}")
        return EXIT_TRAINING
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
