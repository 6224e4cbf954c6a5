"""The soft switch's program interface, the plain forwarding program, and the
registry that lets a switch config pick a program by name.

A pipeline sees whole batches (bytes in, (port, bytes) out) so that programs
can vectorize per batch and the switch loop stays free of per-program logic.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, runtime_checkable

BROADCAST = b"\xff\xff\xff\xff\xff\xff"


@runtime_checkable
class Pipeline(Protocol):
    def process_batch(self, frames: list[bytes], in_ports: list[int],
                      now: float) -> list[tuple[int, bytes]]:
        """Frames received (after ingress impairments) -> (out_port, frame) to send.
        One input frame may appear on several output ports (flooding, multicast)."""
        ...

    def counters(self) -> dict:
        """JSON-serializable counters, keyed by table/counter name."""
        ...


def parse_mac(mac: str | bytes) -> bytes:
    """'aa:bb:cc:dd:ee:ff' (or '-' separated, or 6 raw bytes) -> 6 bytes."""
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise ValueError(f"MAC must be 6 bytes, got {len(mac)}")
        return bytes(mac)
    parts = mac.replace("-", ":").split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}: expected 6 hex octets like 00:00:00:00:00:01")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"bad MAC address {mac!r}: octets must be hex") from None


def format_mac(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


class ForwardingPipeline:
    """Exact-match L2 forwarding on the destination MAC (table `forward`).

    Table hit -> unicast to that port (dropped if it is the ingress port, as a
    bridge would). Miss (unknown unicast, broadcast, multicast without an entry)
    -> flood to every other port when `flood`, else drop. Entries can be changed
    while the switch runs (control plane thread): the table is a plain dict and
    single dict operations are atomic under the GIL.
    """

    def __init__(self, forwarding: dict[bytes, int] | None = None,
                 ports: Iterable[int] = (), flood: bool = True):
        self.forward: dict[bytes, int] = {}
        # Bumped on every table or port change: the soft switch's compiled loop
        # (soft/fastloop.py) copies the table into C when it changes.
        self.version = 0
        self.ports = sorted(set(int(p) for p in ports))
        self.flood = bool(flood)
        for mac, port in (forwarding or {}).items():
            self.add_entry(mac, port)
        self._hits = 0
        self._misses = 0
        self._flooded = 0          # input frames flooded
        self._flood_copies = 0     # output copies made by flooding
        self._dropped_miss = 0     # misses dropped because flood is off
        self._dropped_hairpin = 0  # hits whose port is the ingress port
        self._flood_cache: dict[int, tuple[int, ...]] = {}

    # -- table management (the control plane's view) --------------------------
    def add_entry(self, mac: str | bytes, port: int) -> None:
        port = int(port)
        if self.ports and port not in self.ports:
            raise ValueError(f"forward entry {format_mac(parse_mac(mac))} -> port {port}: "
                             f"no such port (ports: {self.ports})")
        self.forward[parse_mac(mac)] = port
        self.version += 1

    def delete_entry(self, mac: str | bytes) -> None:
        self.forward.pop(parse_mac(mac), None)
        self.version += 1

    def set_ports(self, ports: Iterable[int]) -> None:
        self.ports = sorted(set(int(p) for p in ports))
        self._flood_cache = {}
        self.version += 1

    def _flood_ports(self, in_port: int) -> tuple[int, ...]:
        out = self._flood_cache.get(in_port)
        if out is None:
            out = tuple(p for p in self.ports if p != in_port)
            self._flood_cache[in_port] = out
        return out

    # -- data plane ------------------------------------------------------------
    def process_batch(self, frames: list[bytes], in_ports: list[int],
                      now: float) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        append = out.append
        get = self.forward.get
        misses: list[tuple[int, bytes]] = []
        hairpin = 0
        # Per-packet work is one slice, one dict lookup, one compare, one append.
        for f, ip in zip(frames, in_ports):
            p = get(f[:6])
            if p is None:
                misses.append((ip, f))
            elif p != ip:
                append((p, f))
            else:
                hairpin += 1
        if hairpin:
            self._dropped_hairpin += hairpin
        self._hits += len(frames) - len(misses)
        if misses:
            self._misses += len(misses)
            if self.flood:
                for ip, f in misses:
                    fp = self._flood_ports(ip)
                    out.extend([(p, f) for p in fp])
                    self._flood_copies += len(fp)
                self._flooded += len(misses)
            else:
                self._dropped_miss += len(misses)
        return out

    def counters(self) -> dict:
        return {
            "forward": {"hits": self._hits, "misses": self._misses,
                        "entries": len(self.forward)},
            "flood": {"frames": self._flooded, "copies": self._flood_copies},
            "drops": {"miss_no_flood": self._dropped_miss, "hairpin": self._dropped_hairpin},
        }


def _forward_factory(config: dict) -> ForwardingPipeline:
    """Build from the switch config keys `forwarding`, `ports`, `flood`."""
    fwd: dict[bytes, int] = {}
    for i, entry in enumerate(config.get("forwarding") or []):
        try:
            fwd[parse_mac(entry["dst_mac"])] = int(entry["port"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"forwarding[{i}]: {e}; expected {{dst_mac: 'aa:bb:..', port: N}}") from None
    ports = [int(p) for p in (config.get("ports") or {})]
    return ForwardingPipeline(fwd, ports, bool(config.get("flood", True)))


PipelineFactory = Callable[[dict], Any]
PIPELINES: dict[str, PipelineFactory] = {"forward": _forward_factory}


def register_pipeline(name: str, factory: PipelineFactory) -> None:
    """Make a program selectable as config `pipeline: <name>`; factory(config) -> Pipeline."""
    PIPELINES[name] = factory


def make_pipeline(name: str, config: dict) -> Pipeline:
    """Build the named pipeline. Programs living in their own package (e.g. `ina`)
    register themselves on import, so try `testbed.switch.<name>` first."""
    if name not in PIPELINES and name.isidentifier():
        import importlib
        import importlib.util
        # Import errors inside an existing program package must surface, not be
        # mistaken for "unknown pipeline".
        if importlib.util.find_spec(f"testbed.switch.{name}") is not None:
            importlib.import_module(f"testbed.switch.{name}")
    if name not in PIPELINES:
        raise KeyError(f"unknown pipeline {name!r}; known: {sorted(PIPELINES)}")
    return PIPELINES[name](config)
