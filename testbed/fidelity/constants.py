"""Hardware profiles: the named constants the network model reads, each with its source.

A profile is a YAML file (`testbed/fidelity/profiles/<name>.yaml`):

    name: tofino1-100g
    version: 1
    description: "..."
    constants:
      link_rate: {value: 100, unit: Gbit/s, tag: D, source: "IEEE 802.3 100GBASE-R"}
      switch_pipeline_latency: {value: 600, unit: ns, tag: I, range: [400, 1000],
                                source: "..."}

Tags (research/time-fidelity.md's legend): V = verified in the named source,
D = vendor data sheet or standard quoted, A = our assumption, I = inference or
recall not checked. A and I constants must carry `range: [lo, hi]` (in the
constant's own unit, lo <= value <= hi): the sensitivity bands sweep it.

Values are written in readable units (ns, Gbit/s, ...) and converted once at
load: `profile[name]` is always SI (seconds, bit/s, bytes, metres, s/m, B/s).
`with_overrides({name: value})` takes values in the constant's *file* unit, the
same unit as its range, so an override reads like the file it changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

PROFILES_DIR = Path(__file__).with_name("profiles")
TAGS = ("V", "D", "A", "I")
UNCERTAIN_TAGS = ("A", "I")

# unit -> factor to SI. One table, so a profile cannot invent a unit silently.
UNITS: dict[str, float] = {
    "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9,
    "bit/s": 1.0, "Mbit/s": 1e6, "Gbit/s": 1e9,
    "B/s": 1.0, "MB/s": 1e6, "GB/s": 1e9,
    "B": 1.0, "m": 1.0, "ns/m": 1e-9, "count": 1.0,
}

# What the network model reads (name -> the SI dimension its unit must convert to).
REQUIRED: dict[str, str] = {
    "link_rate": "bit/s",             # line rate of every host and switch port
    "preamble_ifg_bytes": "B",        # preamble+SFD (8) + inter-frame gap (12) per frame
    "fcs_bytes": "B",                 # Ethernet frame check sequence, not in our frame bytes
    "min_frame_bytes": "B",           # shortest Ethernet frame, FCS included
    "p2p_mtu_bytes": "B",             # IP MTU of host-to-host messages (ring, PS)
    "nic_latency": "s",               # one NIC traversal (tx side or rx side)
    "host_stack_latency": "s",        # software cost per message end to end (send + receive)
    "cable_length": "m",              # host <-> switch cable
    "propagation_delay": "s/m",       # signal delay per metre of cable
    "switch_pipeline_latency": "s",   # one pass through the switch pipeline, port to port
    "switch_ports": "count",          # ports at link_rate: workers per switch level
    "ina_window_packets": "count",    # in-switch aggregation packets outstanding per worker
    "reduce_rate": "B/s",             # host/device summation rate (ring, PS)
}
_DIMENSION = {"s": "s", "ms": "s", "us": "s", "ns": "s", "bit/s": "bit/s", "Mbit/s": "bit/s",
              "Gbit/s": "bit/s", "B/s": "B/s", "MB/s": "B/s", "GB/s": "B/s", "B": "B", "m": "m",
              "ns/m": "s/m", "count": "count"}


class ProfileError(ValueError):
    """A profile file or an override is wrong; the message names file and field."""


@dataclass(frozen=True)
class Constant:
    name: str
    value: float                       # in `unit`
    unit: str
    tag: str
    source: str
    range: tuple[float, float] | None = None   # in `unit`; required for A and I

    @property
    def si(self) -> float:
        return self.value * UNITS[self.unit]

    @property
    def uncertain(self) -> bool:
        return self.tag in UNCERTAIN_TAGS

    def to_dict(self) -> dict[str, Any]:
        d = {"value": self.value, "unit": self.unit, "tag": self.tag, "source": self.source}
        if self.range is not None:
            d["range"] = list(self.range)
        return d


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    version: int
    description: str
    constants: Mapping[str, Constant]
    path: str = ""
    overrides: Mapping[str, float] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        """The constant's value in SI units."""
        try:
            return self.constants[name].si
        except KeyError:
            raise KeyError(f"profile {self.name!r} has no constant {name!r} "
                           f"(it has: {', '.join(sorted(self.constants))})") from None

    def constant(self, name: str) -> Constant:
        self[name]  # same error for an unknown name
        return self.constants[name]

    def uncertain(self) -> list[Constant]:
        """The A/I constants, in file order: what sensitivity sweeps."""
        return [c for c in self.constants.values() if c.uncertain]

    def with_overrides(self, overrides: Mapping[str, float]) -> "HardwareProfile":
        """A copy with some values replaced (in each constant's file unit)."""
        consts = dict(self.constants)
        for name, value in overrides.items():
            if name not in consts:
                raise ProfileError(f"profile {self.name!r}: override of unknown constant {name!r} "
                                   f"(known: {', '.join(sorted(consts))})")
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise ProfileError(f"profile {self.name!r}: override {name}={value!r} is not a number") from None
            _check_value(f"override {name}", name, v)
            consts[name] = replace(consts[name], value=v)
        return replace(self, constants=consts, overrides={**self.overrides, **overrides})

    def label(self) -> str:
        """'tofino1-100g v1' (+ overrides) for figure and table labels."""
        s = f"{self.name} v{self.version}"
        if self.overrides:
            s += " [" + ", ".join(f"{k}={v:g}" for k, v in self.overrides.items()) + "]"
        return s

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "description": self.description,
                "overrides": dict(self.overrides),
                "constants": {k: c.to_dict() for k, c in self.constants.items()}}


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A profile by name (a file in testbed/fidelity/profiles) or by path to a YAML file."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = PROFILES_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ProfileError(f"no hardware profile {str(name_or_path)!r}: known profiles are "
                               f"{', '.join(list_profiles())} (or give a path to a .yaml file)")
    if not path.exists():
        raise ProfileError(f"{path}: no such profile file")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ProfileError(f"{path}: not valid YAML: {e}") from None
    return _parse(doc, str(path))


def _parse(doc: Any, where: str) -> HardwareProfile:
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: a profile is a mapping with name, version, description, constants")
    unknown = set(doc) - {"name", "version", "description", "constants"}
    if unknown:
        raise ProfileError(f"{where}: unknown top-level keys {sorted(unknown)}")
    for key in ("name", "version", "constants"):
        if key not in doc:
            raise ProfileError(f"{where}: missing `{key}`")
    if not isinstance(doc["version"], int):
        raise ProfileError(f"{where}: version: must be an integer, got {doc['version']!r}")
    raw = doc["constants"]
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: constants: must be a mapping name -> {{value, unit, tag, source}}")
    consts: dict[str, Constant] = {}
    for name, spec in raw.items():
        consts[name] = _parse_constant(f"{where}: constants.{name}", name, spec)
    missing = [n for n in REQUIRED if n not in consts]
    if missing:
        raise ProfileError(f"{where}: constants: missing {', '.join(missing)} (the network model reads them)")
    return HardwareProfile(name=str(doc["name"]), version=doc["version"],
                           description=str(doc.get("description", "")), constants=consts, path=where)


def _parse_constant(at: str, name: str, spec: Any) -> Constant:
    if not isinstance(spec, dict):
        raise ProfileError(f"{at}: must be a mapping with value, unit, tag, source")
    unknown = set(spec) - {"value", "unit", "tag", "source", "range"}
    if unknown:
        raise ProfileError(f"{at}: unknown keys {sorted(unknown)}")
    for key in ("value", "unit", "tag", "source"):
        if key not in spec:
            raise ProfileError(f"{at}: missing `{key}`")
    value = spec["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{at}.value: must be a number, got {value!r}")
    unit = spec["unit"]
    if unit not in UNITS:
        raise ProfileError(f"{at}.unit: unknown unit {unit!r} (known: {', '.join(UNITS)})")
    if name in REQUIRED and _DIMENSION[unit] != REQUIRED[name]:
        raise ProfileError(f"{at}.unit: {unit!r} is not a {REQUIRED[name]} unit")
    tag = spec["tag"]
    if tag not in TAGS:
        raise ProfileError(f"{at}.tag: must be one of {', '.join(TAGS)}, got {tag!r}")
    source = spec["source"]
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(f"{at}.source: say where the value comes from")
    rng = spec.get("range")
    if rng is not None:
        if (not isinstance(rng, list) or len(rng) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rng)):
            raise ProfileError(f"{at}.range: must be [lo, hi], got {rng!r}")
        lo, hi = float(rng[0]), float(rng[1])
        if not lo <= value <= hi:
            raise ProfileError(f"{at}.range: [{lo:g}, {hi:g}] must contain the value {value:g}")
        rng = (lo, hi)
    if tag in UNCERTAIN_TAGS and rng is None:
        raise ProfileError(f"{at}.range: an [{tag}] constant needs range: [lo, hi] for the sensitivity bands")
    _check_value(at, name, float(value))
    return Constant(name=name, value=float(value), unit=unit, tag=tag, source=source.strip(), range=rng)


def _check_value(at: str, name: str, value: float) -> None:
    # Rates, sizes and port counts must be positive; latencies may be zero.
    positive = {"link_rate", "p2p_mtu_bytes", "switch_ports", "ina_window_packets", "reduce_rate",
                "min_frame_bytes"}
    if value < 0 or (name in positive and value <= 0):
        raise ProfileError(f"{at}: {name} must be {'positive' if name in positive else '>= 0'}, got {value:g}")
