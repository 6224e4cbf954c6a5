"""P4SGD program's configuration (the JSON the workload writes, checked field
by field) and the allreduce schedule every worker and the PS derive from it.
Used by hosts/p4sgd.py (the program) and its tests."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hosts.common.config import Checker, HostAddr, InaSettings, Straggler, load_json_object
from hosts.common.network_dilation import parse_network_dilation

MODES = ("model_parallel", "data_parallel")
COLLECTIVES = ("switch", "ring", "ps")
GLMS = ("linreg", "logreg", "svm")

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
    dataset: dict                  # hosts.glm.datasets.load_dataset spec
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
    calibration: dict | None       # {"hw_op_s", "rounds", "batches", "run_wall_s"}: calibrate time_scale first
    # {"control": [switch control files], "hardware": {latency_s, link_rate_bps, ...},
    # "headroom": k, "hw_op_s": one allreduce on the hardware}: the soft switch can dilate
    # the network (hosts.common.network_dilation)
    network_dilation: dict | None = None
    # {"xclbin", "device_index", "kernel_name", "dry_run"}: the worker drives a U280 kernel
    # through XRT (hosts.glm.u280_xrt); None (or the key absent): the modeled device only
    xrt: dict | None = None
    # The dataset made once for the point's programs (hosts.glm.datasets.save_dataset_file,
    # from `dataset`); None (or the key absent): each program builds it from `dataset`
    dataset_file: str | None = None

    KEYS = frozenset({
        "host", "role", "rank", "world", "mode", "glm", "l2", "lr", "batch", "micro_batch",
        "epochs", "pipeline_depth", "seed", "dataset", "balance", "collective", "peers", "ps",
        "port", "ina", "fixed_point_exp", "device", "snapshot_every", "straggler",
        "start_at", "connect_timeout_s", "timeout_s", "out", "trace", "calibration",
        "network_dilation", "xrt", "dataset_file"})

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
        v["dataset_file"] = c.data.get("dataset_file")
        if v["dataset_file"] is not None and not isinstance(v["dataset_file"], str):
            c.error("dataset_file", f"must be a path or null, got {v['dataset_file']!r}")
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
    if not isinstance(val, dict) or set(val) != {"hw_op_s", "rounds", "batches", "run_wall_s"}:
        c.error("calibration", f"must be null or {{hw_op_s, rounds, batches, run_wall_s}}, got {val!r}")
        return None
    bad = [k for k in ("rounds", "batches") if not isinstance(val[k], int) or val[k] < 1]
    if (bad or not isinstance(val["hw_op_s"], (int, float)) or val["hw_op_s"] < 0
            or not isinstance(val["run_wall_s"], (int, float)) or val["run_wall_s"] <= 0):
        c.error("calibration", f"hw_op_s must be >= 0, rounds and batches integers >= 1, run_wall_s > 0; "
                               f"got {val!r}")
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
    if starts_after_dilation(cfg):
        out.append((1, False))
    for _ in range(cfg.epochs):
        for b in minibatch_sizes(n_samples, cfg.batch):
            out.extend(batch_ops(b))
    return out


def starts_after_dilation(cfg: P4sgdConfig) -> bool:
    """Whether the workers start training with one 1-value allreduce (the start op):
    where the soft switch dilates the network, rank 0 alone asks for it and waits
    for the switch's acknowledgement (its ~20 ms poll); the start op, which no
    worker's copy completes before rank 0 joins, starts every rank's clock
    together (hosts/p4sgd.py Worker.start_together)."""
    return cfg.network_dilation is not None
