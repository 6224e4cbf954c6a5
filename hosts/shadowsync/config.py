"""Configs of the ShadowSync host programs (JSON written by
testbed/workloads/shadowsync.py), strict like every host config.

Every host's JSON is {"<role>": {...}, "shadowsync": <Settings>}; the settings
are what all hosts must agree on (checked at every connection's HELLO).
Roles: "trainer" (hosts.shadowsync.trainer), "embedding_ps"
(hosts.shadowsync.embedding_ps), "sync_ps" (hosts.shadowsync.sync_ps).

Ports (one base per point): embedding PS e and the sync PS listen on `port`
(each on its own IP); trainers' ring allreduce uses the collective config's own port.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hosts.common.config import Checker, ConfigError, HostAddr, load_json_object

ALGORITHMS = ("easgd", "ma", "bmuf", "none")     # none: no synchronization (a measurement baseline)
MODES = ("shadow", "foreground")
MODEL_KEYS = ("table_sizes", "dim", "bottom", "top")


def tables_of(server: int, servers: int, tables: int) -> list[int]:
    """Table-wise sharding: table t lives on embedding PS t mod E (also the projection's
    rule when it re-spreads the tables over more servers)."""
    return [t for t in range(tables) if t % servers == server]


@dataclass(frozen=True)
class Settings:
    algorithm: str           # easgd | ma | bmuf | none
    mode: str                # shadow (background process) | foreground (every k iterations)
    k: int                   # foreground: worker iterations between two syncs
    trainers: int
    hogwild_workers: int     # worker processes per trainer over one shared dense replica
    embedding_servers: int
    iterations: int          # per worker
    batch_size: int
    lr_dense: float
    lr_embed: float
    alpha: float             # S-EASGD moving rate
    bmuf_eta: float          # block momentum
    bmuf_zeta: float         # block learning rate
    nesterov: bool
    shadow_pause_ms: float   # the shadow's pause between two syncs (0 = back to back)
    sync_hw_s: float         # modeled hardware time of one sync (the workload's network model);
                             # a sync is paced to at least this x the trainer's time_scale
    calibrated: bool         # time_scale auto: trainers calibrate first (servers trace after MEASURE)
    eval_examples: int
    seed: int
    model: dict              # {table_sizes, dim, bottom, top}
    dataset: dict            # hosts/shadowsync/data.py open_source spec

    KEYS = frozenset({"algorithm", "mode", "k", "trainers", "hogwild_workers", "embedding_servers",
                      "iterations", "batch_size", "lr_dense", "lr_embed", "alpha", "bmuf_eta",
                      "bmuf_zeta", "nesterov", "shadow_pause_ms", "sync_hw_s", "calibrated", "eval_examples", "seed", "model",
                      "dataset"})

    @classmethod
    def parse(cls, data: Any, where: str) -> "Settings":
        c = Checker(data, where + ": shadowsync")
        v = dict(algorithm=c.str("algorithm", ALGORITHMS), mode=c.str("mode", MODES), k=c.int("k", lo=1),
                 trainers=c.int("trainers", lo=1), hogwild_workers=c.int("hogwild_workers", lo=1),
                 embedding_servers=c.int("embedding_servers", lo=1), iterations=c.int("iterations", lo=1),
                 batch_size=c.int("batch_size", lo=1), lr_dense=c.number("lr_dense", positive=True),
                 lr_embed=c.number("lr_embed", positive=True), alpha=c.number("alpha", positive=True),
                 bmuf_eta=c.number("bmuf_eta", lo=0), bmuf_zeta=c.number("bmuf_zeta", positive=True),
                 shadow_pause_ms=c.number("shadow_pause_ms", lo=0), sync_hw_s=c.number("sync_hw_s", lo=0),
                 eval_examples=c.int("eval_examples", lo=2), seed=c.int("seed", lo=0))
        nesterov, calibrated = c.data.get("nesterov"), c.data.get("calibrated")
        if not isinstance(nesterov, bool):
            c.error("nesterov", f"must be true or false, got {nesterov!r}")
        if not isinstance(calibrated, bool):
            c.error("calibrated", f"must be true or false, got {calibrated!r}")
        model = c.data.get("model")
        if not isinstance(model, dict) or set(model) != set(MODEL_KEYS):
            c.error("model", f"must be {{{', '.join(MODEL_KEYS)}}}, got {model!r}")
        elif not (isinstance(model["table_sizes"], list) and len(model["table_sizes"]) == 26
                  and all(isinstance(n, int) and n >= 1 for n in model["table_sizes"])):
            c.error("model.table_sizes", "must be 26 positive integers (the Criteo schema)")
        dataset = c.data.get("dataset")
        if not isinstance(dataset, dict) or not isinstance(dataset.get("source"), str):
            c.error("dataset", f"must be an object with a source, got {dataset!r}")
        if v["alpha"] is not None and v["alpha"] >= 1:
            c.error("alpha", f"the moving rate must be < 1, got {v['alpha']}")
        c.finish(set(cls.KEYS))
        return cls(**v, nesterov=nesterov, calibrated=calibrated, model=dict(model), dataset=dict(dataset))

    def identity(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in sorted(self.KEYS)}

    def tables_of(self, server: int) -> list[int]:
        return tables_of(server, self.embedding_servers, len(self.model["table_sizes"]))

    @property
    def syncs(self) -> bool:
        return self.algorithm != "none"


@dataclass(frozen=True)
class ServerConfig:
    """An embedding PS or the sync PS."""
    host: str
    ip: str
    index: int               # embedding PS e (0-based); 0 for the sync PS
    port: int
    rank: int                # trace rank (after the trainers)
    world: int               # traced hosts
    clients: int             # connections to accept before serving
    connect_timeout_s: float
    timeout_s: float
    out: str
    trace: str | None

    KEYS = frozenset({"host", "ip", "index", "port", "rank", "world", "clients", "connect_timeout_s",
                      "timeout_s", "out", "trace"})

    @classmethod
    def parse(cls, data: Any, where: str) -> "ServerConfig":
        c = Checker(data, where)
        v = dict(host=c.str("host"), ip=c.str("ip"), index=c.int("index", lo=0), port=c.int("port", lo=1),
                 rank=c.int("rank", lo=0), world=c.int("world", lo=1), clients=c.int("clients", lo=1),
                 connect_timeout_s=c.number("connect_timeout_s", positive=True),
                 timeout_s=c.number("timeout_s", positive=True), out=c.str("out"))
        trace = c.data.get("trace")
        if trace is not None and not isinstance(trace, str):
            c.error("trace", f"must be a path or null, got {trace!r}")
        c.finish(set(cls.KEYS))
        return cls(**v, trace=trace)


@dataclass(frozen=True)
class TrainerConfig:
    host: str
    ip: str
    rank: int                       # trainer index 0..N-1
    trace_world: int                # traced hosts (trainers + servers): the trace header's world
    embedding_servers: tuple[HostAddr, ...]
    sync_ps: HostAddr | None        # S-/FR-EASGD
    port: int                       # the servers' port
    collective: dict | None         # S-/FR-MA, BMUF: a hosts.dnn TorchWorkerConfig (ring | switch | ps)
    device: dict                    # hosts.dnn.device.make_device spec
    straggler: dict | None          # {start_s, slowdown, delay_ms}
    calibration: dict | None        # time_scale auto: {rounds, iterations, lookup_hw_s: [per embedding PS],
                                    # iteration_wall_s: the wall time the point's deadline allows an iteration}
    network_dilation: dict | None   # the soft switch's delay line (hosts.common.calibration.Calibrator)
    start_at: float | None
    connect_timeout_s: float
    timeout_s: float
    out: str
    trace: str | None

    KEYS = frozenset({"host", "ip", "rank", "trace_world", "embedding_servers", "sync_ps", "port", "collective", "device",
                      "straggler", "calibration", "network_dilation", "start_at", "connect_timeout_s", "timeout_s", "out", "trace"})

    @classmethod
    def parse(cls, data: Any, where: str) -> "TrainerConfig":
        c = Checker(data, where + ": trainer")
        host, ip, rank, port = c.str("host"), c.str("ip"), c.int("rank", lo=0), c.int("port", lo=1)
        trace_world = c.int("trace_world", lo=1)
        raw = c.data.get("embedding_servers")
        servers = []
        if not isinstance(raw, list) or not raw:
            c.error("embedding_servers", f"must be a non-empty list of {{name, ip}}, got {raw!r}")
        else:
            servers = [h for i, x in enumerate(raw) if (h := c.host(x, f"embedding_servers[{i}]"))]
        sync_ps = c.host(c.data["sync_ps"], "sync_ps") if c.data.get("sync_ps") is not None else None
        coll = c.data.get("collective")
        if coll is not None and not isinstance(coll, dict):
            c.error("collective", f"must be null or a torch worker config, got {coll!r}")
        device = c.data.get("device")
        if not isinstance(device, dict):
            c.error("device", f"must be a device spec object, got {device!r}")
        straggler = c.straggler("straggler")
        cal, nd = c.data.get("calibration"), c.data.get("network_dilation")
        if cal is not None and not (isinstance(cal, dict)
                                    and set(cal) == {"rounds", "iterations", "lookup_hw_s", "iteration_wall_s"}
                                    and isinstance(cal["rounds"], int) and cal["rounds"] >= 1
                                    and isinstance(cal["iterations"], int) and cal["iterations"] >= 1
                                    and isinstance(cal["lookup_hw_s"], list) and cal["lookup_hw_s"]
                                    and isinstance(cal["iteration_wall_s"], (int, float)) and cal["iteration_wall_s"] > 0):
            c.error("calibration", f"must be null or {{rounds >= 1, iterations >= 1, lookup_hw_s: [...], "
                                   f"iteration_wall_s > 0}}, got {cal!r}")
        if nd is not None and not isinstance(nd, dict):
            c.error("network_dilation", f"must be null or an object, got {nd!r}")
        start_at = c.number("start_at", nullable=True)
        ct, to = c.number("connect_timeout_s", positive=True), c.number("timeout_s", positive=True)
        out = c.str("out")
        trace = c.data.get("trace")
        c.finish(set(cls.KEYS))
        return cls(host, ip, rank, trace_world, tuple(servers), sync_ps, port, coll, dict(device),
                   None if straggler is None else straggler.__dict__, cal, nd, start_at, ct, to, out, trace)


def load(source: str | Path | dict, role: str) -> tuple[Any, Settings]:
    data, where = load_json_object(source)
    if not isinstance(data, dict) or set(data) != {role, "shadowsync"}:
        raise ConfigError(f"{where}: expected exactly the keys {role!r} and 'shadowsync', got "
                          f"{sorted(data) if isinstance(data, dict) else type(data).__name__}")
    s = Settings.parse(data["shadowsync"], where)
    part = TrainerConfig.parse(data[role], where) if role == "trainer" else \
        ServerConfig.parse(data[role], f"{where}: {role}")
    return part, s


__all__ = ["Settings", "TrainerConfig", "ServerConfig", "ConfigError", "load", "ALGORITHMS", "MODES"]
