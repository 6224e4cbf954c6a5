"""Network dilation settings and how a host asks the soft switch for them.

The soft switch can hold every frame until the modeled hardware, slowed by the
point's time-dilation factor (TDF), would have delivered it
(testbed/switch/soft/dilation.py says how). Calibration picks the TDF on the
built network, so the settings reach the running switch through a JSON file in
its run folder: the host writes `dilation.json`, the switch applies it and
answers in `dilation.json.applied`. This module is that file protocol, shared by
both ends (hosts are below the switch in the layers, so it lives here).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hosts.common.json_files import write_json_atomic

CONTROL_FILE = "dilation.json"
ACK_SUFFIX = ".applied"

_FIELDS = {"version": int, "tdf": float, "latency_s": float, "transit_latency_s": float,
           "link_rate_bps": float,
           "fcs_bytes": float, "preamble_ifg_bytes": float, "min_frame_bytes": float,
           "compensate_s": float, "impairments": float}


@dataclass(frozen=True)
class DilationSettings:
    version: int
    tdf: float                    # >= 1; 0 turns dilation off
    latency_s: float              # L0 of one hop, hardware seconds
    link_rate_bps: float
    # What a switch forwarding to another switch adds besides a serialization
    # (cable + pipeline, network_model.transit_latency_s); None: not given, and a
    # switch with inter-switch ports refuses such settings.
    transit_latency_s: float | None = None
    fcs_bytes: float = 4.0
    preamble_ifg_bytes: float = 20.0
    min_frame_bytes: float = 64.0         # incl. FCS
    compensate_s: float = 0.0             # wall seconds taken off every frame's latency
    # 1: the switch applies its configured impairments (loss, delay, ...); 0: it holds
    # them off. Calibration holds them: it measures the emulator, not the impairment
    # under study (a lost packet in every calibration op made TDF 50x too high).
    impairments: float = 1.0

    @classmethod
    def from_dict(cls, d: Any, where: str = CONTROL_FILE) -> "DilationSettings":
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_FIELDS))
        missing = sorted({"version", "tdf", "latency_s", "link_rate_bps"} - set(d))
        if unknown or missing:
            raise ValueError(f"{where}: unknown keys {unknown}, missing keys {missing}")
        vals = {}
        for k, v in d.items():
            try:
                vals[k] = _FIELDS[k](v)
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{k}: {v!r} is not a number") from None
            if not math.isfinite(vals[k]) or vals[k] < 0:
                raise ValueError(f"{where}.{k}: {v!r} must be a finite number >= 0")
        s = cls(**vals)
        if s.tdf and (s.tdf < 1 or s.link_rate_bps <= 0):
            raise ValueError(f"{where}: tdf must be 0 (off) or >= 1 and link_rate_bps > 0, got {d}")
        return s

    @property
    def active(self) -> bool:
        return self.tdf > 0

    @property
    def impairments_held(self) -> bool:
        return self.impairments < 0.5

    def serialization_s(self, frame_len: int) -> float:
        """Hardware serialization of a frame of frame_len bytes (without FCS)."""
        wire = max(frame_len + self.fcs_bytes, self.min_frame_bytes) + self.preamble_ifg_bytes
        return wire * 8.0 / self.link_rate_bps



def ack_path(control: str | Path) -> Path:
    control = Path(control)
    return control.with_name(control.name + ACK_SUFFIX)


def request(paths: list[str | Path], settings: dict[str, Any], timeout_s: float = 5.0) -> None:
    """Write `settings` to every switch's control file and wait until each applied it.

    Raises TimeoutError naming the switch that did not answer, or ValueError with
    the switch's own reason when it refused the settings."""
    DilationSettings.from_dict(settings)          # refuse bad settings here, not in the switch
    acks = []
    for p in paths:
        path = Path(p)
        ack = ack_path(path)
        ack.unlink(missing_ok=True)
        write_json_atomic(path, settings)
        acks.append(ack)
    deadline = time.monotonic() + timeout_s
    for ack in acks:
        while True:
            try:
                got = json.loads(ack.read_text())
            except (FileNotFoundError, ValueError):
                got = None
            if got is not None:
                if not got.get("applied"):
                    raise ValueError(f"switch refused network dilation: {got.get('error')}")
                if got.get("version") == settings["version"]:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no switch acknowledged network dilation in {timeout_s:g} s "
                                   f"({ack}); is the soft switch running?")
            time.sleep(0.005)


def _is_headroom(h) -> bool:
    """hosts.common.calibration.network_headroom's argument: "auto" or a number >= 1."""
    return h == "auto" or (isinstance(h, (int, float)) and not isinstance(h, bool) and h >= 1)


def parse_network_dilation(c) -> dict | None:
    """The hosts' optional `network_dilation` config block (hosts.common.config.Checker `c`):
    {control: [switch control files], hardware: {DilationSettings keys}, headroom, hw_op_s}."""
    if "network_dilation" not in c.data:       # optional: only soft-switch networks have it
        return None
    ok, val = c.value("network_dilation", True)
    if not ok or val is None:
        return None
    if (not isinstance(val, dict) or set(val) != {"control", "hardware", "headroom", "hw_op_s"}
            or not isinstance(val["control"], list) or not val["control"]
            or not _is_headroom(val["headroom"])):
        c.error("network_dilation", f"must be null or {{control: [paths], hardware: {{...}}, "
                                    f"headroom (\"auto\" or >= 1), hw_op_s}}, got {val!r}")
        return None
    try:
        DilationSettings.from_dict({"version": 0, "tdf": 1, **val["hardware"]}, "network_dilation.hardware")
    except (TypeError, ValueError) as e:
        c.error("network_dilation", str(e))
        return None
    return dict(val)
