"""Network dilation: the soft switch delivers frames when the dilated hardware would.

Time dilation (docs/time-fidelity.md) slows every modeled device by a factor
TDF. The network must be slowed by the same factor, but the emulator's own speed
(Python hosts and switch on shared cores) is an accident of the machine, not a
setting. So the switch holds every frame it sends until the modeled hardware,
TDF times slower, would have delivered it:

    ready   = arrival + TDF * (L0 + s(f)) - compensate
    send_at = max(ready, port_free) + TDF * s(f);   port_free = send_at

per egress port, with L0 the hop's fixed latency (host stack, NICs, cables,
pipeline; testbed.fidelity.network_model.hop_latency_s), s(f) a frame's
serialization at the link rate (the uplink copy, then the downlink one: a store
and forward hop) and `compensate` the emulator's own time in series with the
delay (host send and receive paths), measured by calibration so that it is not
counted twice. The emulator is then a lower bound: when it is slower than the
dilated hardware, frames leave late and the fidelity monitor says so.

The settings arrive while the switch runs (calibration picks TDF on the built
network): `DilationControl` watches a JSON file in the switch's run folder,
applies each new version and acknowledges it in `<file>.applied`, so that the
writer knows when the dilated network is in place. A version may also hold the
switch's impairments off (`impairments: 0`): calibration does, so that it
measures the emulator and not the loss under study; the last version it writes
turns them back on before the measured run.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hosts.common.network_dilation import (CONTROL_FILE, DilationSettings, ack_path,
                                          write_json_atomic)

POLL_S = 0.02          # how often the switch looks at the control file (idle wake-ups)
# In UDP mode the ports carry INA payloads without Ethernet/IP/UDP headers.
UDP_MODE_HEADER_BYTES = 42


class DelayLine:
    """Per-port departure times of dilated frames (pure logic: the caller passes now)."""

    def __init__(self, settings: DilationSettings, header_bytes: int = 0):
        self.settings = settings
        self.header_bytes = header_bytes      # added to every frame's length (UDP mode)
        self._port_free: dict[int, float] = {}
        self.frames = 0
        self.max_hold_s = 0.0

    def schedule(self, port: int, frames: list[bytes], now: float) -> list[tuple[float, tuple[int, bytes]]]:
        s = self.settings
        tdf, fixed = s.tdf, s.tdf * s.latency_s - s.compensate_s
        free = self._port_free.get(port, 0.0)
        out = []
        for f in frames:
            ser = tdf * s.serialization_s(len(f) + self.header_bytes)
            ready = now + max(0.0, fixed + ser)
            free = max(ready, free) + ser
            out.append((free, (port, f)))
        self._port_free[port] = free
        self.frames += len(frames)
        if out:
            self.max_hold_s = max(self.max_hold_s, free - now)
        return out

    def stats(self) -> dict[str, Any]:
        return {**asdict(self.settings), "frames": self.frames, "max_hold_s": self.max_hold_s}


class DilationControl:
    """Watch `<run_dir>/dilation.json`; apply new versions; acknowledge them."""

    def __init__(self, run_dir: str | Path, header_bytes: int = 0):
        self.path = Path(run_dir) / CONTROL_FILE
        self.ack_path = ack_path(self.path)
        self.header_bytes = header_bytes
        self.line: DelayLine | None = None
        self.impairments_held = False              # calibration runs without the impairments
        self.held_versions: list[int] = []
        self.history: list[dict[str, Any]] = []    # every version applied, with its frame count
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the last file read
        self._next_poll = 0.0

    def poll(self, now: float) -> bool:
        """Re-read the file if it changed (at most every POLL_S); True if settings changed."""
        if now < self._next_poll:
            return False
        self._next_poll = now + POLL_S
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        key = (st.st_mtime_ns, st.st_size)
        if key == self._seen:
            return False
        self._seen = key
        try:
            settings = DilationSettings.from_dict(json.loads(self.path.read_text()), str(self.path))
        except (OSError, ValueError) as e:        # json.JSONDecodeError is a ValueError
            write_json_atomic(self.ack_path, {"applied": False, "error": str(e)})
            return False
        if self.line is not None:
            self.history.append(self.line.stats())
        self.line = DelayLine(settings, self.header_bytes) if settings.active else None
        self.impairments_held = settings.impairments_held
        if settings.impairments_held:
            self.held_versions.append(settings.version)
        write_json_atomic(self.ack_path, {"applied": True, "version": settings.version})
        return True

    def stats(self) -> dict[str, Any]:
        versions = self.history + ([self.line.stats()] if self.line is not None else [])
        return {"control": str(self.path), "versions": versions,
                "impairments_held_in_versions": self.held_versions,
                "impairments_held_now": self.impairments_held}
