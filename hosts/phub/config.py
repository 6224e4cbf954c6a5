"""Configs of the PHub host programs (written by testbed/workloads/phub.py): the
server's (`load_server`) and a worker's (`load_worker`). Unknown or missing keys
are errors naming the key."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from hosts.common.config import ConfigError, HostAddr
from hosts.phub.chunking import MXNET_BIGARRAY_BOUND, ChunkPlan, kvstore_plan
from hosts.phub.optimizer import OptimizerSpec

ALGORITHMS = ("phub", "wide_ps", "ring", "switch", "sharded_ps")
PLACEMENTS = ("chunks", "kvstore")          # hosts/phub/chunking.py: PHub's chunks, MXNet kvstore's keys
AGGREGATION_ORDERS = ("rank", "arrival")    # a PHub core's sum order (hosts/phub/server.py)


def _take(cls, d: dict[str, Any], where: str, **convert) -> Any:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected an object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}")
    kw = {}
    for f in fields(cls):
        if f.name in d:
            v = d[f.name]
            kw[f.name] = convert[f.name](v, f"{where}.{f.name}") if f.name in convert else v
    try:
        return cls(**kw)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def _opt(v: Any, where: str) -> OptimizerSpec:
    try:
        return OptimizerSpec(**v)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def _addr(v: Any, where: str) -> HostAddr | None:
    if v is None:
        return None
    try:
        return HostAddr(v["name"], v["ip"])
    except (TypeError, KeyError):
        raise ConfigError(f"{where}: expected {{name, ip}}, got {v!r}") from None


@dataclass(frozen=True)
class JobSpec:
    """One training job the server serves."""

    job: int
    world: int
    sizes: list[int]
    chunk_bytes: int
    optimizer: OptimizerSpec
    workers: list[str]
    placement: str = "chunks"            # chunks: PHub's; kvstore: MXNet's (sharded_ps), over `cores` servers
    bigarray_bound: int = MXNET_BIGARRAY_BOUND   # kvstore: keys of at least this many values are split

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")

    def plan(self, cores: int) -> ChunkPlan:
        """The job's chunks and their owners among `cores` cores (kvstore: servers)."""
        if self.placement == "kvstore":
            return kvstore_plan(self.sizes, cores, self.bigarray_bound)
        return ChunkPlan(self.sizes, self.chunk_bytes)

    def identity(self, cores: int) -> dict[str, Any]:
        """What a worker and the server must agree on (checked in HELLO)."""
        digest = hashlib.sha1(json.dumps(self.sizes).encode()).hexdigest()[:12]
        return {"job": self.job, "world": self.world, "keys": len(self.sizes), "sizes_sha1": digest,
                "chunk_bytes": self.chunk_bytes, "cores": cores, "optimizer": self.optimizer.__dict__,
                **({"placement": self.placement, "bigarray_bound": self.bigarray_bound}
                   if self.placement != "chunks" else {})}


@dataclass(frozen=True)
class ServerConfig:
    host: str
    ip: str
    port: int
    cores: int
    jobs: list[JobSpec]
    out: str
    trace: str | None = None
    trace_rank: int = 0
    trace_world: int = 1
    trace_from: int = 0                  # first traced iteration (after calibration's)
    reduce_bytes_per_s: float = 50e9     # a modeled core's summation rate (the profile's reduce_rate)
    aggregation_order: str = "rank"      # rank | arrival (hosts/phub/server.py's docstring)
    shards: int = 0                      # > 0: this is server `shard` of `shards` (sharded_ps), one core
    shard: int = 0
    nic: str | None = None               # the host whose NIC the server uses (sharded_ps: its worker's)
    tdf: float = 1.0
    start_at: float | None = None
    connect_timeout_s: float = 30.0
    timeout_s: float = 60.0

    def __post_init__(self):
        if self.aggregation_order not in AGGREGATION_ORDERS:
            raise ConfigError(f"aggregation_order must be one of {AGGREGATION_ORDERS}, "
                              f"got {self.aggregation_order!r}")
        if self.shards and (self.cores != 1 or not 0 <= self.shard < self.shards):
            raise ConfigError(f"a sharded server is one core, shard 0..shards-1: got cores {self.cores}, "
                              f"shard {self.shard} of {self.shards}")

    @property
    def total_cores(self) -> int:
        """The cores (sharded: servers) the job's chunks are placed on."""
        return self.shards or self.cores

    def core_index(self, core: int) -> int:
        """Local core `core`'s index among total_cores (its chunks, its port offset)."""
        return self.shard if self.shards else core


def load_server(path: str) -> ServerConfig:
    d = _read(path)
    jobs = [_take(JobSpec, j, f"{path}: jobs[{i}]", optimizer=_opt) for i, j in enumerate(d.pop("jobs", []))]
    cfg = _take(ServerConfig, dict(d, jobs=jobs), path)
    if not jobs or cfg.cores < 1:
        raise ConfigError(f"{path}: needs at least one job and cores >= 1")
    if len({j.job for j in jobs}) != len(jobs):
        raise ConfigError(f"{path}: job ids must differ, got {[j.job for j in jobs]}")
    return cfg


@dataclass(frozen=True)
class RackServerConfig:
    """One rack's PHub server (hosts/phub/rack.py): its workers are the job's ranks
    `ranks` [first, end) (contiguous: racks chain their partial sums in rank order);
    `servers` lists every rack's server {name, ip} in rack order."""
    host: str
    ip: str
    port: int
    rack: int
    servers: list[dict[str, str]]
    ranks: list[int]
    jobs: list[JobSpec]
    out: str
    cores: int = 1                       # one core per rack server (what its workers' HELLO says)
    trace: str | None = None
    trace_rank: int = 0
    trace_world: int = 1
    trace_from: int = 0
    reduce_bytes_per_s: float = 50e9
    tdf: float = 1.0
    start_at: float | None = None
    connect_timeout_s: float = 30.0
    timeout_s: float = 60.0

    # accept_links (server.py) serves both configs: a rack server is never sharded
    @property
    def total_cores(self) -> int:
        return self.cores

    def core_index(self, core: int) -> int:
        return core

    def __post_init__(self):
        if len(self.jobs) != 1 or self.cores != 1:
            raise ConfigError(f"a rack server serves one job with one core, got {len(self.jobs)} job(s), "
                              f"cores {self.cores}")
        if not 0 <= self.rack < len(self.servers) or len(self.servers) < 2:
            raise ConfigError(f"rack {self.rack} of {len(self.servers)} servers (cross-rack PHub needs >= 2)")
        r = self.ranks
        if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)
                and 0 <= r[0] < r[1] <= self.jobs[0].world):
            raise ConfigError(f"ranks must be [first, end) within the job's world {self.jobs[0].world}, "
                              f"got {r!r}")


def load_rack(path: str) -> RackServerConfig:
    d = _read(path)
    jobs = [_take(JobSpec, j, f"{path}: jobs[{i}]", optimizer=_opt) for i, j in enumerate(d.pop("jobs", []))]
    return _take(RackServerConfig, dict(d, jobs=jobs), path)


@dataclass(frozen=True)
class WorkerConfig:
    host: str
    ip: str
    rank: int
    job: JobSpec
    algorithm: str
    model: dict[str, Any]
    iterations: int
    warmup: int
    seed: int
    batch_size: int
    device: dict[str, Any]
    out: str
    server: HostAddr | None = None       # phub: the PHub server; wide_ps: the PS host
    shards: list[dict[str, str]] | None = None   # sharded_ps: every server {name, ip}, by shard index
    serve: str | None = None             # sharded_ps: the config of the server this host runs beside
    port: int = 47900                    # phub: core c listens on port + c; wide_ps: the PS port
    cores: int = 1
    peers: list[dict[str, str]] | None = None    # ring: every worker of the job, by rank
    ina: dict[str, Any] | None = None            # switch: hosts.common.config.InaSettings keys
    straggler: dict[str, float] | None = None
    exit_at: dict[str, int] | None = None        # fault injection: {iteration, layers} then exit(1)
    calibration: dict[str, Any] | None = None    # time_scale auto: {rounds, iterations, hw_table}
    network_dilation: dict[str, Any] | None = None   # hosts.common.network_dilation's block, or None
    trace: str | None = None
    trace_world: int = 1
    trace_rank: int | None = None        # rank in the point's traces (jobs sharing a server: global); None = rank
    start_at: float | None = None
    connect_timeout_s: float = 30.0
    timeout_s: float = 60.0

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if not 0 <= self.rank < self.job.world:
            raise ConfigError(f"rank {self.rank} outside the job's world {self.job.world}")
        c = self.calibration
        if c is not None and (not isinstance(c, dict)
                              or set(c) != {"rounds", "iterations", "hw_table", "iteration_wall_s"}
                              or not all(isinstance(c[k], int) and c[k] >= 1 for k in ("rounds", "iterations"))
                              or not isinstance(c["iteration_wall_s"], (int, float)) or c["iteration_wall_s"] <= 0):
            raise ConfigError(f"calibration must be null or {{rounds >= 1, iterations >= 1, hw_table, "
                              f"iteration_wall_s > 0}}, got {c!r}")
        nd = self.network_dilation
        if nd is not None and (not isinstance(nd, dict) or set(nd) != {"control", "hardware", "headroom", "hw_op_s"}):
            raise ConfigError(f"network_dilation must be null or {{control, hardware, headroom, hw_op_s}}, "
                              f"got {nd!r}")


def load_worker(path: str) -> WorkerConfig:
    d = _read(path)
    job = _take(JobSpec, d.pop("job", None), f"{path}: job", optimizer=_opt)
    return _take(WorkerConfig, dict(d, job=job), path, server=_addr)


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return d
