"""Trace inspection: what `testbed pcap <file>` shows.

The summary (hosts, flows, packets, bytes, retransmissions seen) parses frames
with struct for speed; decoding of the in-network aggregation protocol lives in
testbed.pcap_ina and uses the one wire-format module.

Truncated captures (a snaplen: `switch.capture_bytes`, tcpdump -s) keep each
frame's first bytes and its length on the wire (the record's orig_len): bytes
and TCP segment lengths are counted from the wire length, headers are read from
the captured bytes only, and the summary says how the frames were cut.
"""
from __future__ import annotations

import socket
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from scapy.utils import RawPcapReader


class PcapError(Exception):
    pass


@dataclass
class Frame:
    ts: float
    data: bytes               # the captured bytes: the frame's first wire_len bytes at most
    wire_len: int = -1        # the frame's length on the wire (-1: len(data), not truncated)
    src_ip: str | None = None
    dst_ip: str | None = None
    proto: str = "other"      # tcp | udp | arp | icmp | other
    sport: int = 0
    dport: int = 0
    payload_off: int = 0      # offset of the L4 payload in data
    tcp_seq: int = 0
    tcp_flags: int = 0

    def __post_init__(self) -> None:
        if self.wire_len < len(self.data):
            self.wire_len = len(self.data)

    @property
    def truncated(self) -> bool:
        """Captured shorter than it was on the wire (the capture's snaplen cut it)."""
        return self.wire_len > len(self.data)


def read_frames(path: str | Path) -> Iterator[Frame]:
    p = Path(path)
    if not p.exists():
        raise PcapError(f"{p}: no such file (pcaps live in results/<scenario>/<run>/pcaps/<point>/)")
    try:
        reader = RawPcapReader(str(p))
    except Exception as e:  # noqa: BLE001 - scapy raises bare Scapy_Exception
        raise PcapError(f"{p}: not a pcap file ({e})") from None
    with reader:
        for data, meta in reader:
            ts = meta.sec + meta.usec / 1e6 if hasattr(meta, "sec") else float(meta[0]) + meta[1] / 1e6
            yield parse_frame(bytes(data), ts, getattr(meta, "wirelen", -1))


def parse_frame(data: bytes, ts: float = 0.0, wire_len: int = -1) -> Frame:
    """The frame's addresses and ports, read from the captured bytes only;
    wire_len: its length on the wire when the capture cut it (-1: not cut)."""
    f = Frame(ts, data, wire_len)
    if len(data) < 14:
        return f
    ethertype = struct.unpack_from("!H", data, 12)[0]
    if ethertype == 0x0806:
        f.proto = "arp"
        return f
    if ethertype != 0x0800 or len(data) < 34:
        return f
    ihl = (data[14] & 0x0F) * 4
    proto = data[23]
    f.src_ip = socket.inet_ntoa(data[26:30])
    f.dst_ip = socket.inet_ntoa(data[30:34])
    l4 = 14 + ihl
    if proto == 6 and len(data) >= l4 + 20:
        f.proto = "tcp"
        f.sport, f.dport, f.tcp_seq = struct.unpack_from("!HHI", data, l4)
        f.tcp_flags = data[l4 + 13]
        f.payload_off = l4 + (data[l4 + 12] >> 4) * 4
    elif proto == 17 and len(data) >= l4 + 8:
        f.proto = "udp"
        f.sport, f.dport = struct.unpack_from("!HH", data, l4)
        f.payload_off = l4 + 8
    elif proto == 1:
        f.proto = "icmp"
    return f


@dataclass
class FlowStats:
    packets: int = 0
    bytes: int = 0
    first_ts: float = 0.0
    last_ts: float = 0.0
    retransmissions: int = 0
    seen: set = field(default_factory=set)


@dataclass
class TraceSummary:
    path: str
    packets: int
    bytes: int
    duration_s: float
    protocols: dict[str, int]
    hosts: dict[str, dict[str, int]]
    flows: dict[str, FlowStats]
    truncated: int = 0              # frames captured shorter than on the wire
    snaplen: int | None = None      # what those were cut to (None: none was cut)

    def to_dict(self) -> dict:
        return {
            "path": self.path, "packets": self.packets, "bytes": self.bytes,
            "truncated_frames": self.truncated, "snaplen": self.snaplen,
            "duration_s": round(self.duration_s, 6), "protocols": self.protocols, "hosts": self.hosts,
            "flows": {k: {"packets": v.packets, "bytes": v.bytes, "retransmissions": v.retransmissions,
                          "duration_s": round(v.last_ts - v.first_ts, 6)} for k, v in self.flows.items()},
            "retransmissions": sum(v.retransmissions for v in self.flows.values()),
        }


def summarize(path: str | Path) -> TraceSummary:
    """Count packets/bytes per host, protocol and flow, and retransmissions seen.

    A TCP retransmission is a data segment whose (seq, length) this flow already
    carried. An aggregation-protocol retransmission is a contribution its worker
    marked as resent (the header's RETX flag: the count testbed.pcap_ina and
    tshark's `ina.flags.retx == 1` give). Another UDP retransmission is a
    datagram whose payload this flow already carried; of a truncated datagram,
    its length and the payload bytes captured.
    Bytes are lengths on the wire, also of truncated frames.
    """
    from testbed import wire  # noqa: PLC0415

    packets = nbytes = 0
    first = last = None
    protocols: dict[str, int] = defaultdict(int)
    hosts: dict[str, dict[str, int]] = defaultdict(lambda: {"tx_packets": 0, "rx_packets": 0, "tx_bytes": 0, "rx_bytes": 0})
    flows: dict[str, FlowStats] = {}
    truncated, snaplen = 0, None
    for fr in read_frames(path):
        packets += 1
        nbytes += fr.wire_len
        if fr.truncated:
            truncated += 1
            snaplen = max(snaplen or 0, len(fr.data))
        first = fr.ts if first is None else first
        last = fr.ts
        proto = fr.proto
        if proto == "udp" and wire.is_ina_port(fr.dport) or proto == "udp" and wire.is_ina_port(fr.sport):
            proto = "ina"
        protocols[proto] += 1
        if fr.src_ip is None:
            continue
        hosts[fr.src_ip]["tx_packets"] += 1
        hosts[fr.src_ip]["tx_bytes"] += fr.wire_len
        hosts[fr.dst_ip]["rx_packets"] += 1
        hosts[fr.dst_ip]["rx_bytes"] += fr.wire_len
        if fr.proto not in ("tcp", "udp"):
            continue
        key = f"{fr.proto} {fr.src_ip}:{fr.sport} > {fr.dst_ip}:{fr.dport}"
        st = flows.get(key)
        if st is None:
            st = flows[key] = FlowStats(first_ts=fr.ts)
        st.packets += 1
        st.bytes += fr.wire_len
        st.last_ts = fr.ts
        payload_len = fr.wire_len - fr.payload_off
        if proto == "ina":
            flags_at = fr.payload_off + wire.FLAGS_OFFSET
            if len(fr.data) > flags_at and fr.data[flags_at] & wire.FLAG_RETX:
                st.retransmissions += 1
            continue
        if fr.proto == "tcp" and payload_len > 0:
            sig = (fr.tcp_seq, payload_len)
        elif fr.proto == "udp":
            sig = hash((payload_len, fr.data[fr.payload_off:]))
        else:
            continue
        if sig in st.seen:
            st.retransmissions += 1
        else:
            st.seen.add(sig)
    return TraceSummary(str(path), packets, nbytes, (last - first) if first is not None else 0.0,
                        dict(protocols), dict(hosts), flows, truncated, snaplen)


def format_summary(s: TraceSummary, max_flows: int = 20) -> str:
    lines = [f"{s.path}: {s.packets} packets, {s.bytes} bytes, {s.duration_s:.3f} s"]
    if s.truncated:
        lines.append(f"truncated: frames captured to {s.snaplen} bytes (snaplen), {s.truncated} of "
                     f"{s.packets} cut; bytes are wire lengths, payloads were not captured whole")
    lines.append("protocols: " + ", ".join(f"{k}={v}" for k, v in sorted(s.protocols.items())))
    if s.hosts:
        lines.append("hosts:")
        lines.append(f"  {'address':<16}{'tx pkts':>10}{'tx bytes':>12}{'rx pkts':>10}{'rx bytes':>12}")
        for ip, h in sorted(s.hosts.items()):
            lines.append(f"  {ip:<16}{h['tx_packets']:>10}{h['tx_bytes']:>12}{h['rx_packets']:>10}{h['rx_bytes']:>12}")
    flows = sorted(s.flows.items(), key=lambda kv: -kv[1].bytes)
    if flows:
        lines.append(f"flows ({len(flows)}, largest first):")
        for k, f in flows[:max_flows]:
            lines.append(f"  {k:<52} {f.packets:>7} pkts {f.bytes:>10} B  retx {f.retransmissions}")
        if len(flows) > max_flows:
            lines.append(f"  ... {len(flows) - max_flows} more (use --json for all)")
    lines.append(f"retransmissions seen: {sum(f.retransmissions for f in s.flows.values())}")
    return "\n".join(lines)
