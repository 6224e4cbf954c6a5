"""Network dilation: the soft switch delivers frames when the dilated hardware would.

Time dilation (docs/time-fidelity.md) slows every modeled device by a factor
TDF. The network must be slowed by the same factor, but the emulator's own speed
(Python hosts and switch on shared cores) is an accident of the machine, not a
setting. So the switch holds every frame it sends until the modeled hardware,
TDF times slower, would have delivered it:

    in_at   = max(arrival, up_free) + TDF * s(f);   up_free = in_at    (per ingress port)
    ready   = in_at + TDF * L0 - compensate
    send_at = max(ready, port_free) + TDF * s(f);   port_free = send_at (per egress port)

(for a frame going to a host port; see "Trees" below for one going to another
switch) with L0 the hop's fixed latency (host stack, NICs, cables, pipeline;
testbed.fidelity.network_model.hop_latency_s), s(f) a frame's serialization at
the link rate and `compensate` the emulator's own time in series with the delay
(host send and receive paths), measured by calibration so that it is not
counted twice. A frame is serialized twice, store and forward: on its sender's
uplink (the switch holds it at ingress until `in_at`, so the pipeline sees it
when the hardware would: an aggregation completes when the last contribution
would have arrived) and on the receiver's downlink. Both queue: a host that
sends to many (a parameter server's replies) is limited by its one uplink, and
many hosts sending to one by its one downlink. (Uplinks were once a fixed
s(f) with no queue: a PS's N replies left in parallel and the PS ran at 0.65x
its model.) The emulator is then a lower bound: when it is slower than the
dilated hardware, frames leave late and the fidelity monitor says so.

Trees: a frame crossing several switches is charged L0 once, not per switch
(an extra switch on real hardware adds its cable, its pipeline and one more
store-and-forward serialization, not another host stack and two NICs). The
switch config names its `inter_switch_ports` (set by the network builder,
testbed/net/mininet_net.py). A frame received on one is not serialized again at
ingress (the switch that sent it already charged that cable's serialization on
its egress); a frame sent out of one waits TDF * transit (cable + pipeline,
network_model.transit_latency_s) instead of TDF * L0 - compensate. So a path
host, s_a, ..., s_b, host charges the sender's uplink once, transit and a
serialization per inter-switch cable, and L0 - compensate plus the receiver's
downlink at the last switch: network_model.message_cost(..., switches=k). A
switch with no inter-switch port (a star) runs exactly the formulas above.

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

from hosts.common.json_files import write_json_atomic
from hosts.common.network_dilation import CONTROL_FILE, DilationSettings, ack_path

POLL_S = 0.02          # how often the switch looks at the control file (idle wake-ups)
# In UDP mode the ports carry INA payloads without Ethernet/IP/UDP headers.
UDP_MODE_HEADER_BYTES = 42


class DelayLine:
    """Per-port departure times of dilated frames (pure logic: the caller passes now)."""

    def __init__(self, settings: DilationSettings, header_bytes: int = 0,
                 inter_switch_ports: frozenset[int] = frozenset()):
        if inter_switch_ports and settings.active and settings.transit_latency_s is None:
            raise ValueError(f"{CONTROL_FILE}: transit_latency_s missing; this switch has "
                             f"inter-switch ports {sorted(inter_switch_ports)} (a tree) and needs it")
        self.settings = settings
        self.header_bytes = header_bytes      # added to every frame's length (UDP mode)
        self.inter_switch_ports = frozenset(inter_switch_ports)   # module docstring: Trees
        self._port_free: dict[int, float] = {}   # egress: the receiver's downlink
        self._up_free: dict[int, float] = {}     # ingress: the sender's uplink
        self.frames = 0
        self.max_hold_s = 0.0

    def uplink(self, port: int, frames: list[bytes], now: float) -> list[tuple[float, tuple[int, bytes]]]:
        """When each frame received on `port` is fully in on the dilated hardware: the
        sender's uplink serializes its frames one after another. From another switch
        they are in already: that switch's egress serialized them on this cable."""
        if port in self.inter_switch_ports:
            return [(now, (port, f)) for f in frames]
        s = self.settings
        free = self._up_free.get(port, 0.0)
        out = []
        for f in frames:
            free = max(now, free) + s.tdf * s.serialization_s(len(f) + self.header_bytes)
            out.append((free, (port, f)))
        self._up_free[port] = free
        return out

    def schedule(self, port: int, frames: list[bytes], now: float) -> list[tuple[float, tuple[int, bytes]]]:
        """When each frame leaves egress `port`; `now` is when it was fully in (`uplink`)."""
        s = self.settings
        if port in self.inter_switch_ports:      # on to the next switch: cable + pipeline
            tdf, fixed = s.tdf, s.tdf * s.transit_latency_s
        else:
            tdf, fixed = s.tdf, s.tdf * s.latency_s - s.compensate_s
        free = self._port_free.get(port, 0.0)
        out = []
        for f in frames:
            ser = tdf * s.serialization_s(len(f) + self.header_bytes)
            ready = now + max(0.0, fixed)
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

    def __init__(self, run_dir: str | Path, header_bytes: int = 0,
                 inter_switch_ports: frozenset[int] = frozenset()):
        self.path = Path(run_dir) / CONTROL_FILE
        self.ack_path = ack_path(self.path)
        self.header_bytes = header_bytes
        self.inter_switch_ports = frozenset(inter_switch_ports)
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
            line = (DelayLine(settings, self.header_bytes, self.inter_switch_ports)
                    if settings.active else None)
        except (OSError, ValueError) as e:        # json.JSONDecodeError is a ValueError
            write_json_atomic(self.ack_path, {"applied": False, "error": str(e)})
            return False
        if self.line is not None:
            self.history.append(self.line.stats())
        self.line = line
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
