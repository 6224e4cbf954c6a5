"""`Egress`: how results leave the switch, mirroring `control Egress` in ina.p4
plus the packet replication engine (PRE) that P4Runtime programs separately.

- `multicast_groups`: group id -> [(egress port, rid)], as P4Runtime's
  MulticastGroupEntry (replica = egress_port + instance).
- `Egress.replica_rewrite`: rid -> `Egress.rewrite_dst(dst_mac, dst_ip, dst_port)`;
  miss -> `Egress.drop_replica`.
- `Egress.switch_address` (keyless): `Egress.set_switch_address(mac, ip)` is the
  source of every result; it also sets TTL 64, id 0, DF, lengths from `count`,
  UDP checksum 0, as the P4 action does.

Result frames are `prefix + INA header + values`. The 42-byte Eth/IPv4/UDP
prefix depends only on (rid, UDP source port, count), so it is built once with
its IPv4 checksum and cached; table changes clear the cache.
"""
from __future__ import annotations

import threading

from testbed import wire

from .tables import Table

REWRITE_DST = "Egress.rewrite_dst"
DROP_REPLICA = "Egress.drop_replica"
SET_SWITCH_ADDRESS = "Egress.set_switch_address"
RID_JOB_FLAG = 0x8000


def replica_id(job_id: int, worker_id: int) -> int:
    """rid of a job's replica for one worker: non-zero (0 means 'not a replica')."""
    return RID_JOB_FLAG | (job_id << 5) | worker_id


class MulticastGroups:
    """The PRE's multicast groups. A replica must name one of the switch's ports
    (`ports`; when the switch has none configured, any port below NUM_PORTS)."""

    NUM_PORTS = 512               # egress ports are bit<9> in v1model

    def __init__(self, lock: threading.Lock, on_change, ports=()):
        self._groups: dict[int, tuple[tuple[int, int], ...]] = {}
        self._lock = lock
        self._on_change = on_change
        self.ports = frozenset(int(p) for p in ports)

    def _replicas(self, group_id: int, replicas) -> tuple[tuple[int, int], ...]:
        out = tuple((int(p), int(r)) for p, r in replicas)
        for port, _ in out:
            if not 0 <= port < self.NUM_PORTS or (self.ports and port not in self.ports):
                raise ValueError(f"multicast group {group_id}: replica port {port} does not exist "
                                 f"(the switch's ports: {sorted(self.ports) or f'0..{self.NUM_PORTS - 1}'})")
        return out

    def insert(self, group_id: int, replicas: list[tuple[int, int]]) -> None:
        reps = self._replicas(group_id, replicas)
        with self._lock:
            if group_id in self._groups:
                raise KeyError(f"multicast group {group_id} already exists (use modify)")
            self._groups[group_id] = reps
            self._on_change()

    def modify(self, group_id: int, replicas: list[tuple[int, int]]) -> None:
        reps = self._replicas(group_id, replicas)
        with self._lock:
            if group_id not in self._groups:
                raise KeyError(f"no multicast group {group_id}")
            self._groups[group_id] = reps
            self._on_change()

    def delete(self, group_id: int) -> None:
        with self._lock:
            if self._groups.pop(group_id, None) is None:
                raise KeyError(f"no multicast group {group_id}")
            self._on_change()

    def read(self) -> dict[int, list[tuple[int, int]]]:
        with self._lock:
            return {g: list(r) for g, r in self._groups.items()}

    def get(self, group_id: int) -> tuple[tuple[int, int], ...]:
        return self._groups.get(group_id, ())


class Egress:
    REPLICA_REWRITE = "Egress.replica_rewrite"
    SWITCH_ADDRESS = "Egress.switch_address"

    def __init__(self, switch_mac: str, switch_ip: str, lock: threading.Lock, ports=()):
        self.replica_rewrite = Table(
            self.REPLICA_REWRITE, {"egress_rid": 16},
            {REWRITE_DST: {"dst_mac": 48, "dst_ip": 32, "dst_port": 16}, DROP_REPLICA: {}},
            (DROP_REPLICA, {}), size=8192, const_default=True,
            default_only=frozenset({DROP_REPLICA}),
            lock=lock, on_change=self._invalidate)
        self.switch_address = Table(
            self.SWITCH_ADDRESS, {}, {SET_SWITCH_ADDRESS: {"mac": 48, "ip": 32}},
            (SET_SWITCH_ADDRESS, {"mac": switch_mac, "ip": switch_ip}), size=1,
            lock=lock, on_change=self._invalidate)
        self.multicast_groups = MulticastGroups(lock, self._invalidate, ports)
        self._prefix: dict[tuple[int, int, int], bytes | None] = {}
        self._replicas: dict[tuple[int, int, int], list[tuple[int, bytes]]] = {}
        # The compiled path's memo of replicas(), keyed by one int
        # (group << 24 | sport << 8 | count); replaced, like the others, on any change.
        self.replicas_by_key: dict[int, list[tuple[int, bytes]]] = {}

    def _invalidate(self, *_args) -> None:
        self._prefix = {}
        self._replicas = {}
        self.replicas_by_key = {}

    def _src(self) -> tuple[bytes, bytes]:
        _, p = self.switch_address.default
        return p["mac"].to_bytes(6, "big"), p["ip"].to_bytes(4, "big")

    def prefix(self, rid: int, sport: int, count: int) -> bytes | None:
        """Eth/IPv4/UDP prefix of a replica, or None when the replica is dropped."""
        key = (rid, sport, count)
        pre = self._prefix.get(key, b"")
        if pre == b"":
            action, p = self.replica_rewrite.lookup(rid)
            if action != REWRITE_DST:
                pre = None
            else:
                mac, ip = self._src()
                pre = wire.eth_ip_udp(mac, p["dst_mac"].to_bytes(6, "big"), ip,
                                      p["dst_ip"].to_bytes(4, "big"), sport, p["dst_port"],
                                      wire.INA_HLEN + 4 * count)
            self._prefix[key] = pre
        return pre

    def replicas(self, group: int, sport: int, count: int) -> list[tuple[int, bytes]]:
        """[(egress port, prefix)] for a multicast result, cached."""
        key = (group, sport, count)
        reps = self._replicas.get(key)
        if reps is None:
            reps = []
            for port, rid in self.multicast_groups.get(group):
                pre = self.prefix(rid, sport, count)
                if pre is not None:
                    reps.append((port, pre))
            self._replicas[key] = reps
        return reps

    def unicast_prefix(self, frame: bytes, count: int) -> bytes:
        """Prefix of the reply to a retransmission: back to the sender's MAC, IP
        and UDP port, from the switch address and the INA port it was sent to."""
        mac, ip = self._src()
        sport = (frame[34] << 8) | frame[35]
        dport = (frame[36] << 8) | frame[37]
        return wire.eth_ip_udp(mac, frame[6:12], ip, frame[26:30], dport, sport,
                               wire.INA_HLEN + 4 * count)
