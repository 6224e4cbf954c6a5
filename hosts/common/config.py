"""Host-program configs: strict JSON -> frozen dataclasses.

The runner writes one JSON file per host; a typo'd or missing key must fail
loudly here rather than silently change an experiment, so every key is
required and unknown keys are rejected. All problems are reported at once.
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """Bad host-program config; the message lists every problem, one per line."""


@dataclass(frozen=True)
class HostAddr:
    name: str
    ip: str


@dataclass(frozen=True)
class Straggler:
    start_s: float      # seconds after the common start when slowing down begins
    slowdown: float     # multiplies this host's modeled compute
    delay_ms: float     # extra fixed delay per iteration


class Checker:
    """Collects field errors of one JSON object so they can be reported together.

    Reusable by other host programs: `c = Checker(data, "config x.json")`,
    then `c.int("rank")`, ..., `c.finish(allowed_keys)`.
    """

    def __init__(self, data: Any, where: str):
        self.where = where
        self.errors: list[str] = []
        self.data = data if isinstance(data, dict) else {}
        if not isinstance(data, dict):
            self.errors.append(f"expected a JSON object, got {type(data).__name__}")

    def error(self, field: str, msg: str) -> None:
        self.errors.append(f"{field}: {msg}")

    def value(self, key: str, nullable: bool) -> tuple[bool, Any]:
        if key not in self.data:
            self.error(key, "missing (every key is required; use null where allowed)")
            return False, None
        value = self.data[key]
        if value is None:
            if not nullable:
                self.error(key, "must not be null")
            return False, None
        return True, value

    def int(self, key: str, lo: int | None = None, nullable: bool = False) -> int | None:
        ok, v = self.value(key, nullable)
        if not ok:
            return None
        # bool is an int subclass in Python; `true` as a rank is surely a mistake.
        if isinstance(v, bool) or not isinstance(v, int):
            self.error(key, f"must be an integer, got {v!r}")
            return None
        if lo is not None and v < lo:
            self.error(key, f"must be >= {lo}, got {v}")
            return None
        return v

    def number(self, key: str, lo: float | None = None, positive: bool = False,
               nullable: bool = False, data: dict | None = None, prefix: str = "") -> float | None:
        src = self.data if data is None else data
        if key not in src:
            self.error(prefix + key, "missing")
            return None
        v = src[key]
        if v is None:
            if not nullable:
                self.error(prefix + key, "must not be null")
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.error(prefix + key, f"must be a number, got {v!r}")
            return None
        if positive and not v > 0:
            self.error(prefix + key, f"must be > 0, got {v}")
            return None
        if lo is not None and v < lo:
            self.error(prefix + key, f"must be >= {lo}, got {v}")
            return None
        return float(v)

    def str(self, key: str, choices: tuple[str, ...] | None = None) -> str | None:
        ok, v = self.value(key, False)
        if not ok:
            return None
        if not isinstance(v, str) or not v:
            self.error(key, f"must be a non-empty string, got {v!r}")
            return None
        if choices is not None and v not in choices:
            self.error(key, f"must be one of {', '.join(choices)}; got {v!r}")
            return None
        return v

    def host(self, value: Any, field: str) -> HostAddr | None:
        if not isinstance(value, dict) or set(value) != {"name", "ip"}:
            self.error(field, f'must be {{"name": ..., "ip": ...}}, got {value!r}')
            return None
        name, ip = value["name"], value["ip"]
        if not isinstance(name, str) or not name:
            self.error(field + ".name", f"must be a non-empty string, got {name!r}")
            return None
        try:
            ipaddress.ip_address(ip)
        except (ValueError, TypeError):
            self.error(field + ".ip", f"not an IP address: {ip!r}")
            return None
        return HostAddr(name, ip)

    def straggler(self, key: str) -> Straggler | None:
        ok, v = self.value(key, True)
        if not ok:
            return None
        keys = {"start_s", "slowdown", "delay_ms"}
        if not isinstance(v, dict) or set(v) != keys:
            self.error(key, f"must be null or an object with exactly {sorted(keys)}, got {v!r}")
            return None
        start = self.number("start_s", lo=0, data=v, prefix=key + ".")
        slow = self.number("slowdown", positive=True, data=v, prefix=key + ".")
        delay = self.number("delay_ms", lo=0, data=v, prefix=key + ".")
        if None in (start, slow, delay):
            return None
        return Straggler(start, slow, delay)

    def finish(self, allowed: set[str]) -> None:
        for key in sorted(set(self.data) - allowed):
            self.error(key, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        if self.errors:
            raise ConfigError(f"{self.where}:\n  " + "\n  ".join(self.errors))


def load_json_object(source: str | Path | dict) -> tuple[Any, str]:
    """(parsed JSON, description for error messages) from a path or a dict."""
    if isinstance(source, dict):
        return source, "config"
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"config {path}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text), f"config {path}"
    except json.JSONDecodeError as e:
        raise ConfigError(f"config {path}: invalid JSON at line {e.lineno} col {e.colno}: {e.msg}") from None


# Port scheme: the PS listens on `port`, ring rank r on `port + 1 + r`, so the two
# algorithms never clash and everything still works when hosts share one IP.
def ps_port(base: int) -> int:
    return base


def ring_port(base: int, rank: int) -> int:
    """Where rank listens for its ring (left) or tree (children) neighbours."""
    return base + 1 + rank


# --- [INA] settings of algorithm "switch" (in-network aggregation); optional key "ina".
@dataclass(frozen=True)
class InaSettings:
    switch_ip: str = "10.0.0.254"       # where contributions go: Mininet: the switch's virtual IP;
    switch_port: int = 0x5A00           # local mode: the soft switch's UDP endpoint for this worker
    switch_mac: str = "02:00:00:00:00:fe"  # for the runner's static ARP entry (Mininet)
    job_id: int = 1
    worker_port: int = 0x5A00           # UDP port this worker binds (the switch's udp_port for it)
    window: int = 256                   # outstanding slots; <= the job's slot_count (the runner gives 256)
    retx_timeout_s: float = 0.05        # first retransmission timeout (then doubled, capped x16)
    max_retries: int = 20
    scale_exp: int | None = None        # None: agree on the scale per tensor (one MAX round)
    # Adapt the chunks on the wire to a switch slower than its links (hosts/ina/cwnd.py);
    # the network turns it on for BMv2, whose packet sockets drop the excess of a burst.
    congestion_window: bool = False
    # the worker's packet loops (hosts/ina/hostpath.py): None = compiled where built
    impl: str | None = None
    # Send runs of chunks as UDP GSO messages (hosts/ina/_mmsg.py). Off unless the network
    # says the host's uplink passes no host-side qdisc or nftables rule, which would shape
    # or drop a whole message as one packet (Network.switch_info, workers[host].gso).
    gso: bool = False

    @classmethod
    def parse(cls, c: "Checker", algorithm: str | None) -> "InaSettings | None":
        raw = c.data.get("ina")
        if raw is None:
            if algorithm == "switch":
                return cls()             # defaults: the Mininet addresses
            return None
        d = dict(cls().__dict__)
        if not isinstance(raw, dict):
            c.error("ina", f"must be an object with keys among {sorted(d)}, got {raw!r}")
            return None
        for k, v in raw.items():
            if k not in d:
                c.error(f"ina.{k}", f"unknown key (allowed: {', '.join(sorted(d))})")
            elif k in ("switch_ip", "switch_mac"):
                try:
                    if k == "switch_ip":
                        ipaddress.ip_address(v)
                    elif len(bytes.fromhex(v.replace(":", ""))) != 6:
                        raise ValueError
                    d[k] = v
                except (ValueError, TypeError, AttributeError):
                    c.error(f"ina.{k}", f"not a valid {'IP' if k == 'switch_ip' else 'MAC'} address: {v!r}")
            elif k == "retx_timeout_s":
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                    c.error(f"ina.{k}", f"must be a number > 0, got {v!r}")
                d[k] = v
            elif k == "scale_exp" and v is None:
                d[k] = None
            elif k == "impl":
                if v not in (None, "compiled", "python"):
                    c.error(f"ina.{k}", f"must be compiled, python or null, got {v!r}")
                d[k] = v
            elif k in ("congestion_window", "gso"):
                if not isinstance(v, bool):
                    c.error(f"ina.{k}", f"must be true or false, got {v!r}")
                d[k] = v
            else:
                lo, hi = {"switch_port": (1, 65535), "worker_port": (1, 65535), "job_id": (0, 255),
                          "window": (1, 4096), "max_retries": (0, 10**6),
                          "scale_exp": (-1000, 1000)}[k]
                if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                    c.error(f"ina.{k}", f"must be an integer in {lo}..{hi}, got {v!r}")
                d[k] = v
        return cls(**d)
# --- [INA] end


@dataclass(frozen=True)
class AllreduceConfig:
    host: str
    role: str                    # "worker" | "ps"
    rank: int                    # worker rank; ignored (any int) for the ps role
    world: int                   # number of workers
    algorithm: str               # "ring" | "ps"
    peers: tuple[HostAddr, ...]  # workers in rank order
    ps: HostAddr | None
    port: int
    sizes: tuple[int, ...]       # float32 elements per tensor
    iterations: int              # measured iterations per size
    warmup: int                  # unmeasured iterations before them
    compute_ms: float
    seed: int
    straggler: Straggler | None
    start_at: float | None
    connect_timeout_s: float
    timeout_s: float
    out: str
    ina: InaSettings | None = None  # [INA] algorithm "switch" only; optional key

    KEYS = frozenset({
        "host", "role", "rank", "world", "algorithm", "peers", "ps", "port", "sizes",
        "iterations", "warmup", "compute_ms", "seed", "straggler", "start_at",
        "connect_timeout_s", "timeout_s", "out", "ina"})

    @classmethod
    def from_json(cls, source: str | Path | dict) -> "AllreduceConfig":
        data, where = load_json_object(source)
        c = Checker(data, where)
        host = c.str("host")
        role = c.str("role", ("worker", "ps"))
        rank = c.int("rank")
        world = c.int("world", lo=1)
        algorithm = c.str("algorithm", ("ring", "ps", "switch"))  # [INA] + "switch"
        port = c.int("port", lo=1)
        if port is not None and world is not None and port + world >= 65536:
            c.error("port", f"port + world must stay below 65536 (uses {port}..{port + world})")
        iterations = c.int("iterations", lo=1)
        warmup = c.int("warmup", lo=0)
        compute_ms = c.number("compute_ms", lo=0)
        seed = c.int("seed", lo=0)
        straggler = c.straggler("straggler")
        start_at = c.number("start_at", lo=0, nullable=True)
        connect_timeout_s = c.number("connect_timeout_s", positive=True)
        timeout_s = c.number("timeout_s", positive=True)
        out = c.str("out")

        peers: list[HostAddr] = []
        ok, raw_peers = c.value("peers", False)
        if ok:
            if not isinstance(raw_peers, list) or not raw_peers:
                c.error("peers", "must be a non-empty list of {name, ip}, workers in rank order")
            else:
                for i, p in enumerate(raw_peers):
                    h = c.host(p, f"peers[{i}]")
                    if h:
                        peers.append(h)
                names = [p.name for p in peers]
                if len(set(names)) != len(names):
                    c.error("peers", f"duplicate host names: {names}")
                if world is not None and len(raw_peers) != world:
                    c.error("peers", f"has {len(raw_peers)} entries but world is {world}")

        ps = None
        ok, raw_ps = c.value("ps", True)
        if ok:
            ps = c.host(raw_ps, "ps")

        sizes: list[int] = []
        ok, raw_sizes = c.value("sizes", False)
        if ok:
            if (not isinstance(raw_sizes, list) or not raw_sizes
                    or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in raw_sizes)):
                c.error("sizes", f"must be a non-empty list of positive integers (float32 elements), got {raw_sizes!r}")
            else:
                sizes = list(raw_sizes)

        # Cross-field rules.
        if algorithm == "ps" and "ps" in c.data and c.data["ps"] is None:
            c.error("ps", 'algorithm "ps" needs the parameter server\'s {"name", "ip"}')
        if role == "ps" and algorithm not in (None, "ps"):
            c.error("role", f'role "ps" only makes sense with algorithm "ps", not {algorithm!r}')
        if role == "worker" and rank is not None and world is not None and peers:
            if not 0 <= rank < world:
                c.error("rank", f"must be in 0..{world - 1} for a worker, got {rank}")
            elif host is not None and rank < len(peers) and peers[rank].name != host:
                c.error("host", f"{host!r} but peers[{rank}] is {peers[rank].name!r}; "
                                "peers must list workers in rank order")
        if role == "ps" and ps is not None and host is not None and ps.name != host:
            c.error("host", f"{host!r} has role ps but ps.name is {ps.name!r}")

        ina = InaSettings.parse(c, algorithm)  # [INA]
        if c.data.get("ina") is not None and algorithm != "switch":
            c.error("ina", f'only used by algorithm "switch", not {algorithm!r}; remove it or use null')
        c.finish(set(cls.KEYS))
        return cls(host=host, role=role, rank=rank, world=world, algorithm=algorithm,
                   peers=tuple(peers), ps=ps, port=port, sizes=tuple(sizes), iterations=iterations,
                   warmup=warmup, compute_ms=compute_ms, seed=seed, straggler=straggler,
                   start_at=start_at, connect_timeout_s=connect_timeout_s, timeout_s=timeout_s,
                   out=out, ina=ina)

    @property
    def my_ip(self) -> str:
        return self.ps.ip if self.role == "ps" else self.peers[self.rank].ip

    def run_identity(self) -> dict[str, Any]:
        """What every participant of one run must agree on (checked at handshake)."""
        ident = {"world": self.world, "algorithm": self.algorithm, "sizes": list(self.sizes),
                 "iterations": self.iterations, "warmup": self.warmup, "seed": self.seed,
                 "port": self.port}
        if self.ina is not None:  # [INA] what the switch's workers must share
            ident["ina"] = {"job_id": self.ina.job_id, "window": self.ina.window,
                            "scale_exp": self.ina.scale_exp}
        return ident
