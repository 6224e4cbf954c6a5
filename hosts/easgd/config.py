"""Configs of the EASGD host programs (JSON written by testbed/workloads/easgd.py).

A worker's JSON is {"torch": <a hosts.dnn TorchWorkerConfig>, "easgd": <EasgdSettings>}:
the torch part opens the device model, trace and records exactly as a `kind:
torch` worker does (hosts/dnn/runtime.py); the easgd part says which variant
runs. The master's JSON is {"master": <MasterConfig>, "easgd": <EasgdSettings>}.
Strict like every host config: every key required, unknown keys rejected.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hosts.common.config import Checker, ConfigError, HostAddr, load_json_object

# variant -> (how the master serves, what it applies). Sync variants have no master.
VARIANTS: dict[str, tuple[str | None, str]] = {
    "easgd": ("round_robin", "elastic"),          # the original: rank order
    "async_easgd": ("fcfs", "elastic"),
    "async_measgd": ("fcfs", "elastic"),          # Nesterov momentum in the local step
    "hogwild_easgd": ("hogwild", "elastic"),
    "sync_easgd": (None, "elastic"),              # allreduce every tau steps
    "async_sgd": ("fcfs", "sgd"),
    "async_msgd": ("fcfs", "msgd"),
    "hogwild_sgd": ("hogwild", "sgd"),
    "sync_sgd": (None, "sgd"),                    # gradient allreduce every step
}
EASGD_VARIANTS = ("easgd", "async_easgd", "async_measgd", "hogwild_easgd", "sync_easgd")
SGD_VARIANTS = ("async_sgd", "async_msgd", "hogwild_sgd", "sync_sgd")
MODEL_KEYS = ("c1", "c2", "hidden")
# The step order at an exchange of the master variants (docs/easgd.md, "The step order"):
# step_then_exchange: W' = W - eta g(W), then e = alpha (W' - C), W <- W' - e (this testbed's first);
# zhang: e = alpha (W - C) and g(W) both at the pre-exchange W, W <- W - e - eta g(W)
# (Zhang et al. NIPS 2015, Algorithm 1 as reconstructed [I]). Sync EASGD already takes
# both at the pre-exchange W (Zhang's eq. 5/6), whatever this says.
EXCHANGE_ORDERS = ("step_then_exchange", "zhang")


def serving(variant: str) -> str | None:
    return VARIANTS[variant][0]


def master_rule(variant: str) -> str:
    return VARIANTS[variant][1]


def local_momentum(variant: str) -> bool:
    return variant == "async_measgd"


@dataclass(frozen=True)
class EasgdSettings:
    variant: str
    steps: int               # local steps per worker
    tau: int                 # local steps between exchanges (EASGD variants)
    lr: float                # eta
    alpha: float             # moving rate alpha = eta rho
    momentum: float          # delta (async_measgd local, async_msgd at the master)
    batch_size: int
    seed: int
    model: dict              # LeNet widths {c1, c2, hidden}
    snapshot_every_s: float  # the centre is saved this often (emulated seconds)
    dataset: dict            # hosts/easgd/datasets.py spec: {source, path, limit}
    exchange_order: str = "step_then_exchange"   # EXCHANGE_ORDERS (master variants)
    pack: bool = True        # sync variants: one allreduce of the flat model (true) or one per tensor;
                             # the master variants ignore it (they exchange the flat model with the master)

    KEYS = frozenset({"variant", "steps", "tau", "lr", "alpha", "momentum", "batch_size", "seed",
                      "model", "snapshot_every_s", "dataset", "exchange_order", "pack"})

    @classmethod
    def parse(cls, data: Any, where: str) -> "EasgdSettings":
        c = Checker(data, where + ": easgd")
        variant = c.str("variant", tuple(VARIANTS))
        steps = c.int("steps", lo=1)
        tau = c.int("tau", lo=1)
        lr = c.number("lr", positive=True)
        alpha = c.number("alpha", positive=True)
        momentum = c.number("momentum", lo=0)
        batch = c.int("batch_size", lo=1)
        seed = c.int("seed", lo=0)
        snap = c.number("snapshot_every_s", positive=True)
        order = c.str("exchange_order", EXCHANGE_ORDERS)
        pack = c.data.get("pack")
        if not isinstance(pack, bool):
            c.error("pack", f"must be true or false, got {pack!r}")
        model = c.data.get("model")
        if not isinstance(model, dict) or set(model) != set(MODEL_KEYS) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in model.values()):
            c.error("model", f"must be {{c1, c2, hidden}} of positive integers, got {model!r}")
        if alpha is not None and alpha >= 1:
            c.error("alpha", f"the moving rate must be < 1, got {alpha}")
        if momentum is not None and momentum >= 1:
            c.error("momentum", f"must be < 1, got {momentum}")
        dataset = c.data.get("dataset")
        if not isinstance(dataset, dict) or not isinstance(dataset.get("source"), str):
            c.error("dataset", f"must be an object with a source, got {dataset!r}")
        c.finish(set(cls.KEYS))
        return cls(variant, steps, tau, lr, alpha, momentum, batch, seed, dict(model), snap, dict(dataset), order,
                   pack)

    def identity(self) -> dict[str, Any]:
        """What master and workers must agree on (checked at the handshake)."""
        return {k: getattr(self, k) for k in sorted(self.KEYS)}


@dataclass(frozen=True)
class MasterConfig:
    host: str
    ip: str
    port: int                 # workers connect to port (one server) or port + 1 + s (Hogwild)
    workers: tuple[HostAddr, ...]
    servers: int              # Hogwild: server processes over the shared centre
    connect_timeout_s: float
    timeout_s: float
    start_at: float | None
    out: str                  # JSON lines: exchange log + summary
    snapshots: str            # .npz of the centre over time
    trace: str | None         # the master's trace (<dir>/master[.s<k>].trace.jsonl: one per server)
    timing: dict              # {time_scale, update_hw_s, calibration: null | {rounds, iterations}}

    KEYS = frozenset({"host", "ip", "port", "workers", "servers", "connect_timeout_s", "timeout_s",
                      "start_at", "out", "snapshots", "trace", "timing"})

    @classmethod
    def parse(cls, data: Any, where: str) -> "MasterConfig":
        c = Checker(data, where + ": master")
        host = c.str("host")
        ip = c.str("ip")
        port = c.int("port", lo=1)
        servers = c.int("servers", lo=1)
        raw = c.data.get("workers")
        workers = []
        if not isinstance(raw, list) or not raw:
            c.error("workers", f"must be a non-empty list of {{name, ip}}, got {raw!r}")
        else:
            workers = [h for i, x in enumerate(raw) if (h := c.host(x, f"workers[{i}]")) is not None]
        ct = c.number("connect_timeout_s", positive=True)
        to = c.number("timeout_s", positive=True)
        start_at = c.number("start_at", nullable=True)
        out = c.str("out")
        snaps = c.str("snapshots")
        trace = c.data.get("trace")
        if trace is not None and not isinstance(trace, str):
            c.error("trace", f"must be a folder path or null, got {trace!r}")
        timing = c.data.get("timing")
        cal = timing.get("calibration") if isinstance(timing, dict) else None
        if (not isinstance(timing, dict) or set(timing) != {"time_scale", "update_hw_s", "calibration"}
                or not _positive(timing["time_scale"]) or not _positive(timing["update_hw_s"])
                or not (cal is None or (isinstance(cal, dict) and set(cal) == {"rounds", "iterations"}
                                        and all(isinstance(cal[k], int) and cal[k] >= 1 for k in cal)))):
            c.error("timing", f"must be {{time_scale > 0, update_hw_s > 0, calibration: null | "
                              f"{{rounds >= 1, iterations >= 1}}}}, got {timing!r}")
        c.finish(set(cls.KEYS))
        return cls(host, ip, port, tuple(workers), servers, ct, to, start_at, out, snaps, trace, dict(timing))


def load(source: str | Path | dict, part: str) -> tuple[Any, EasgdSettings, dict]:
    """(the `part` section parsed or raw, the easgd settings, the raw JSON) of a config."""
    data, where = load_json_object(source)
    if not isinstance(data, dict) or set(data) != {part, "easgd"}:
        raise ConfigError(f"{where}: expected exactly the keys {part!r} and 'easgd', got "
                          f"{sorted(data) if isinstance(data, dict) else type(data).__name__}")
    settings = EasgdSettings.parse(data["easgd"], where)
    section = MasterConfig.parse(data[part], where) if part == "master" else data[part]
    return section, settings, data


WORKER_KEYS = frozenset({"torch", "master", "servers", "snapshots", "timing"})


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def parse_worker_timing(section: dict, where: str) -> tuple[dict | None, dict | None]:
    """(calibration {rounds, iterations, hw_op_s, iteration_wall_s} or None, network_dilation
    block or None) of a worker's `timing` section. iteration_wall_s: the wall time the
    point allows an iteration (a calibrated TDF that would make one longer is refused)."""
    from hosts.common.network_dilation import parse_network_dilation  # noqa: PLC0415
    c = Checker(section.get("timing"), where + ": worker.timing")
    cal = c.data.get("calibration")
    if cal is not None and not (isinstance(cal, dict)
                                and set(cal) == {"rounds", "iterations", "hw_op_s", "iteration_wall_s"}
                                and all(isinstance(cal[k], int) and cal[k] >= 1 for k in ("rounds", "iterations"))
                                and (cal["hw_op_s"] == 0 or _positive(cal["hw_op_s"]))
                                and _positive(cal["iteration_wall_s"])):
        c.error("calibration", f"must be null or {{rounds >= 1, iterations >= 1, hw_op_s >= 0, "
                               f"iteration_wall_s > 0}}, got {cal!r}")
    nd = parse_network_dilation(c)
    c.finish({"calibration", "network_dilation"})
    return (dict(cal) if cal else None), nd


def parse_worker(section: Any, where: str) -> tuple[dict, HostAddr | None, int, int, str | None]:
    """A worker's own part: (torch config dict, master address, master port, Hogwild
    servers, snapshot path or None). `torch` is checked by TorchWorkerConfig; `timing`
    by parse_worker_timing."""
    c = Checker(section, where + ": worker")
    torch_cfg = c.data.get("torch")
    if not isinstance(torch_cfg, dict):
        c.error("torch", f"must be a kind-torch worker config object, got {torch_cfg!r}")
    raw = c.data.get("master")
    master, port = None, 0
    if raw is not None:
        if not isinstance(raw, dict) or set(raw) != {"name", "ip", "port"}:
            c.error("master", f"must be null or {{name, ip, port}}, got {raw!r}")
        else:
            master = c.host({"name": raw["name"], "ip": raw["ip"]}, "master")
            port = raw["port"] if isinstance(raw["port"], int) and raw["port"] > 0 else 0
            if not port:
                c.error("master.port", f"must be a positive integer, got {raw['port']!r}")
    servers = c.int("servers", lo=1)
    snaps = c.data.get("snapshots")
    if snaps is not None and not isinstance(snaps, str):
        c.error("snapshots", f"must be a path or null, got {snaps!r}")
    c.finish(set(WORKER_KEYS))
    return torch_cfg, master, port, servers, snaps


def server_port(base: int, server: int) -> int:
    """Hogwild server s listens on base + 1 + s; the other modes' master on base."""
    return base + 1 + server


def server_of(rank: int, servers: int) -> int:
    return rank % servers


__all__ = ["EasgdSettings", "MasterConfig", "VARIANTS", "ConfigError", "load"]
