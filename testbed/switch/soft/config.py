"""The soft switch's config file (docs/architecture.md, "Soft switch"), validated
into plain Python values so the switch never meets a malformed field later."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.switch.pipeline import parse_mac
from testbed.switch.soft.impairments import Impair
from testbed.switch.soft.pcap import MAX_SNAPLEN

log = logging.getLogger("softswitch")

KNOWN_KEYS = ("name", "ports", "forwarding", "flood", "impairments", "seed", "pcap_dir", "pcap_snaplen",
              "stats_path", "ready_path", "batch", "pipeline", "pipeline_impl", "p4runtime_addr", "io_impl",
              "io_spin_us", "inter_switch_ports", "ingress_mbps")
# How the "ina" pipeline runs (testbed/switch/ina/fastpath.py); absent = compiled when built.
PIPELINE_IMPLS = ("compiled", "reference")
# How AF_PACKET ports move frames (dataplane.py, fastloop.py); absent = ring_fastpath
# when built: the receive rings read by the compiled loop (fastloop.py) whenever
# no Python-side feature needs the frames, else by the Python loop as mmap_ring.
IO_IMPLS = ("ring_fastpath", "mmap_ring", "mmsg")
# mmap_ring: how long the loop busy-polls the rings for the next frame before
# sleeping in epoll (only right after a batch: idle ports cost nothing).
DEFAULT_IO_SPIN_US = 20
# ingress_mbps: the most a port's link may carry into the switch (Mbit/s)
MAX_INGRESS_MBPS = 100_000.0
MAX_IO_SPIN_US = 1000
REQUIRED = ("name", "ports", "stats_path", "ready_path")
MAX_BATCH = 1024
# Upper bound per recv, not a wait: bigger batches cost no latency and cut
# per-batch overhead (~10% less CPU per packet than 64 at full load).
DEFAULT_BATCH = 256


class ConfigError(ValueError):
    """A config value the switch cannot use; the message says which and why."""


def _per_port(d: dict, key: str, shape: str, ports: dict[int, str], err) -> list[tuple[str, int, Any]]:
    """(key as written, port number, value) of the object d[key] keyed by port
    number; a key that is not a port of `ports` is reported through err and left out."""
    raw = d.get(key) or {}
    if not isinstance(raw, dict):
        err(key, f"must be an object {shape}")
        return []
    out = []
    for k, v in raw.items():
        try:
            no = int(k)
        except (TypeError, ValueError):
            err(f"{key}.{k}", "port number must be an integer")
            continue
        if ports and no not in ports:
            err(f"{key}.{k}", f"port {no} is not in ports {sorted(ports)}")
            continue
        out.append((k, no, v))
    return out


@dataclass
class SwitchConfig:
    name: str
    ports: dict[int, str]
    stats_path: Path
    ready_path: Path
    forwarding: list[dict] = field(default_factory=list)
    flood: bool = True
    impairments: dict[int, dict[str, Impair]] = field(default_factory=dict)
    seed: int = 0
    pcap_dir: Path | None = None
    # Bytes of each frame the pcaps keep (their snaplen); longer frames are cut,
    # their records keep the wire length. Null in the file: whole frames.
    pcap_snaplen: int = MAX_SNAPLEN
    batch: int = DEFAULT_BATCH
    pipeline: str = "forward"
    p4runtime_addr: str | None = None
    io_impl: str | None = None   # None: ring_fastpath when built, else mmsg
    io_spin_us: int = DEFAULT_IO_SPIN_US
    # Ports cabled to another switch (a tree): the delay line charges a frame L0 once
    # per path, not per switch (dilation.py, "Trees"). Set by the network builder.
    inter_switch_ports: frozenset[int] = frozenset()
    # {port: Mbit/s}: the link into that port serializes at this rate, modeled at the
    # port's receive ring (a host's uplink; _pktio.c RxRing.shape). Set by the network builder.
    ingress_mbps: dict[int, float] = field(default_factory=dict)
    raw: dict = field(default_factory=dict)  # the dict as given (pipelines read their own keys)

    @classmethod
    def from_dict(cls, d: Any, source: str = "config") -> "SwitchConfig":
        errs: list[str] = []

        def err(key: str, msg: str) -> None:
            errs.append(f"{source}: {key}: {msg}")

        if not isinstance(d, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(d).__name__}")
        for k in REQUIRED:
            if k not in d:
                err(k, "missing (required)")
        unknown = sorted(set(d) - set(KNOWN_KEYS))
        if unknown:
            # Not an error: a pipeline (e.g. ina) may read keys of its own.
            log.warning("%s: keys %s are not switch keys; left to the pipeline", source, unknown)

        name = d.get("name", "")
        if not isinstance(name, str) or not name:
            err("name", "must be a non-empty string")

        ports: dict[int, str] = {}
        raw_ports = d.get("ports", {})
        if not isinstance(raw_ports, dict) or not raw_ports:
            err("ports", "must be a non-empty object {port_no: interface}")
        else:
            for k, v in raw_ports.items():
                try:
                    no = int(k)
                    if no < 0:
                        raise ValueError
                except (TypeError, ValueError):
                    err(f"ports.{k}", "port number must be an integer >= 0")
                    continue
                if not isinstance(v, str) or not v:
                    err(f"ports.{k}", "interface name must be a non-empty string")
                    continue
                ports[no] = v
            if len(set(ports.values())) != len(ports):
                err("ports", "an interface appears on two ports")

        fwd = d.get("forwarding") or []
        if not isinstance(fwd, list):
            err("forwarding", "must be a list of {dst_mac, port}")
            fwd = []
        for i, e in enumerate(fwd):
            if not isinstance(e, dict) or "dst_mac" not in e or "port" not in e:
                err(f"forwarding[{i}]", "must be {dst_mac: 'aa:bb:cc:dd:ee:ff', port: N}")
                continue
            try:
                parse_mac(e["dst_mac"])
            except (ValueError, AttributeError) as ex:
                err(f"forwarding[{i}].dst_mac", str(ex))
            try:
                p = int(e["port"])
            except (TypeError, ValueError):
                err(f"forwarding[{i}].port", f"{e['port']!r} is not a port number")
                continue
            if ports and p not in ports:
                err(f"forwarding[{i}].port", f"port {p} is not in ports {sorted(ports)}")

        flood = d.get("flood", True)
        if not isinstance(flood, bool):
            err("flood", "must be true or false")

        imps: dict[int, dict[str, Impair]] = {}
        for k, no, v in _per_port(d, "impairments", "{port_no: {ingress: {...}, egress: {...}}}", ports, err):
            if not isinstance(v, dict) or set(v) - {"ingress", "egress"}:
                err(f"impairments.{k}", "must be {ingress: Impair, egress: Impair} (both optional)")
                continue
            imps[no] = {}
            for direction in ("ingress", "egress"):
                try:
                    imps[no][direction] = Impair.from_dict(v.get(direction),
                                                           f"impairments.{k}.{direction}")
                except ValueError as ex:
                    errs.append(f"{source}: {ex}")

        seed = d.get("seed", 0)
        if seed is None:
            seed = 0
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            err("seed", "must be an integer >= 0")

        batch = d.get("batch", DEFAULT_BATCH)
        if batch is None:
            batch = DEFAULT_BATCH
        if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH:
            err("batch", f"must be an integer in 1..{MAX_BATCH}")

        pipeline = d.get("pipeline", "forward") or "forward"
        if not isinstance(pipeline, str):
            err("pipeline", "must be a pipeline name such as 'forward' or 'ina'")

        impl = d.get("pipeline_impl")
        if impl is not None and impl not in PIPELINE_IMPLS:
            err("pipeline_impl", f"{impl!r} is not one of {', '.join(PIPELINE_IMPLS)} "
                                 f"(or absent: compiled when built)")

        io_impl = d.get("io_impl")
        if io_impl is not None and io_impl not in IO_IMPLS:
            err("io_impl", f"{io_impl!r} is not one of {', '.join(IO_IMPLS)} "
                           f"(or absent: ring_fastpath when built)")
        spin = d.get("io_spin_us", DEFAULT_IO_SPIN_US)
        if not isinstance(spin, int) or isinstance(spin, bool) or not 0 <= spin <= MAX_IO_SPIN_US:
            err("io_spin_us", f"must be an integer in 0..{MAX_IO_SPIN_US}, got {spin!r}")

        paths: dict[str, Path | None] = {}
        for k in ("stats_path", "ready_path", "pcap_dir"):
            v = d.get(k)
            if v is None:
                paths[k] = None
            elif isinstance(v, str) and v:
                paths[k] = Path(v)
            else:
                err(k, "must be a path string" + (" or null" if k == "pcap_dir" else ""))
                paths[k] = None
        snaplen = d.get("pcap_snaplen")
        if snaplen is None:
            snaplen = MAX_SNAPLEN
        if not isinstance(snaplen, int) or isinstance(snaplen, bool) or not 1 <= snaplen <= MAX_SNAPLEN:
            err("pcap_snaplen", f"must be an integer in 1..{MAX_SNAPLEN} (bytes kept of each frame) "
                                f"or null (whole frames), got {snaplen!r}")
        p4addr = d.get("p4runtime_addr")
        if p4addr is not None and not isinstance(p4addr, str):
            err("p4runtime_addr", "must be 'host:port' or null")

        isp = d.get("inter_switch_ports") or []
        inter: set[int] = set()
        if not isinstance(isp, list):
            err("inter_switch_ports", "must be a list of port numbers")
            isp = []
        for i, p in enumerate(isp):
            if isinstance(p, bool) or not isinstance(p, int) or (ports and p not in ports):
                err(f"inter_switch_ports[{i}]", f"{p!r} is not a port in ports {sorted(ports)}")
            else:
                inter.add(p)

        rates: dict[int, float] = {}
        for k, no, v in _per_port(d, "ingress_mbps", "{port_no: Mbit/s}", ports, err):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= MAX_INGRESS_MBPS:
                err(f"ingress_mbps.{k}", f"must be a rate in (0, {MAX_INGRESS_MBPS:g}] Mbit/s, got {v!r}")
            else:
                rates[no] = float(v)

        if errs:
            raise ConfigError("\n".join(errs))
        return cls(name=name, ports=dict(sorted(ports.items())), stats_path=paths["stats_path"],
                   ready_path=paths["ready_path"], forwarding=list(fwd), flood=flood,
                   impairments=imps, seed=seed, pcap_dir=paths["pcap_dir"], pcap_snaplen=snaplen,
                   batch=batch, pipeline=pipeline, p4runtime_addr=p4addr, io_impl=io_impl,
                   io_spin_us=spin, inter_switch_ports=frozenset(inter), ingress_mbps=rates,
                   raw=dict(d))

    @classmethod
    def load(cls, path: str | Path) -> "SwitchConfig":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"{path}: cannot read config: {e.strerror}") from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON: {e}") from None
        return cls.from_dict(d, str(path))
