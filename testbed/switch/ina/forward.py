"""`Forward`: plain L2 forwarding for every frame that is not an INA
contribution, mirroring `control Forward` in ina.p4.

The soft switch's `ForwardingPipeline` does the work; this module exposes it as
the P4 table `Forward.l2_forward` (dst_addr -> `Forward.set_egress(port)`,
default `Forward.flood`). `Forward.flood` on a specific MAC is the same as no
entry (a miss floods), so it is stored as a deletion in the forwarder.
"""
from __future__ import annotations

import threading

from testbed.switch.pipeline import ForwardingPipeline

from .tables import Table

SET_EGRESS = "Forward.set_egress"
FLOOD = "Forward.flood"


class Forward:
    NAME = "Forward.l2_forward"

    def __init__(self, config: dict, lock: threading.Lock):
        ports = [int(p) for p in (config.get("ports") or {})]
        self.forwarder = ForwardingPipeline({}, ports, bool(config.get("flood", True)))
        self.l2_forward = Table(self.NAME, {"dst_addr": 48},
                                {SET_EGRESS: {"port": 9}, FLOOD: {}}, (FLOOD, {}),
                                const_default=True, size=4096, lock=lock, on_change=self._on_change)
        for i, e in enumerate(config.get("forwarding") or []):
            try:
                self.l2_forward.insert({"dst_addr": e["dst_mac"]}, SET_EGRESS, {"port": e["port"]})
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"forwarding[{i}]: {err}; expected {{dst_mac: 'aa:bb:..', port: N}}") from None

    def _on_change(self, key: tuple, entry) -> None:
        if not key:
            return                                  # const default: flood
        mac = key[0].to_bytes(6, "big")
        if entry is not None and entry[0] == SET_EGRESS:
            self.forwarder.add_entry(mac, entry[1]["port"])
        else:
            self.forwarder.delete_entry(mac)

    def process_batch(self, frames, in_ports, now):
        return self.forwarder.process_batch(frames, in_ports, now)

    def counters(self) -> dict:
        return self.forwarder.counters()

