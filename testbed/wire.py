"""The in-network aggregation (INA) wire format: the one module for the protocol.

A packet is Ethernet / IPv4 (no options) / UDP / INA header / `count` values.
The UDP destination port of a contribution (worker -> switch) is one of
`INA_PORT_BASE .. INA_PORT_BASE+15`; a result (switch -> worker) comes *from*
such a port. Values are big-endian int32 (two's complement), fixed point with a
scale the workers agree on (see `exponent`).

INA header, 16 bytes, network byte order, at frame offset 42 (`INA_OFFSET`):

| off | size | field     | meaning                                                          |
|-----|------|-----------|------------------------------------------------------------------|
| 0   | 1    | version   | protocol version, `INA_VERSION` (1); others are malformed        |
| 1   | 1    | op        | SUM=0, OR=1, MAX=2 (MAX compares signed int32)                   |
| 2   | 1    | flags     | bit0 RESULT (switch -> worker), bit1 RETX (worker resend), 2-7 0 |
| 3   | 1    | job_id    | job (tenant) id; the switch's job table must know it             |
| 4   | 2    | slot      | aggregation slot, relative to the job's slot range               |
| 6   | 1    | slot_ver  | shadow copy (0/1) of the slot; flips on each reuse of the slot   |
| 7   | 1    | worker_id | 0..31: bit in the slot's worker bitmap                           |
| 8   | 4    | seq       | which chunk of the job's stream; echoed in the result (see below)|
| 12  | 1    | count     | number of int32 values that follow, 0..64                        |
| 13  | 1    | exponent  | int8: sender's max float exponent; the switch keeps the MAX, so  |
|     |      |           | the result tells every worker the shared fixed-point scale       |
| 14  | 2    | reserved  | 0                                                                |
| 16  | 4*count | values | big-endian int32                                                 |

Contract with the switch (p4/ina.p4, testbed/switch/ina):
- chunk `seq` of a job uses slot `seq % window` and `slot_ver = (seq // window) % 2`
  (any mapping works if the next rule holds);
- for one (job, slot, slot_ver), successive chunks have increasing `seq`
  (serial-number arithmetic mod 2^32, RFC 1982): keep one counter per job across
  tensors, do not restart at 0 for each tensor. The switch uses this to drop
  stale duplicates that arrive after the slot moved on, which SwitchML's design
  cannot tell apart from new contributions.
- all contributions to one chunk carry the same `count` and `op`.

UDP checksum: senders may set it to 0 (legal for UDP over IPv4). The switch
rewrites the payload of results and always sends checksum 0 rather than
recomputing it over 256 bytes; the Ethernet FCS protects the link. The IPv4
header checksum is always correct.

Hot-path API: `pack_header`, `unpack_header`, `HEADER_STRUCT`, `build_frame`,
`FRAME_DTYPE` (numpy view of bytes 0..58 of a frame, for batch parsing).
Scapy layers (`INA`, `bind_ina_layers()`) load scapy lazily on first use, so
importing this module stays cheap for the switch and the hosts.
"""
from __future__ import annotations

import ipaddress
import struct
from typing import NamedTuple

import numpy as np

# -- constants ---------------------------------------------------------------
INA_PORT_BASE = 0x5A00            # 23040
INA_PORT_COUNT = 16
INA_PORTS = range(INA_PORT_BASE, INA_PORT_BASE + INA_PORT_COUNT)
INA_PORT_MASK = 0xFFF0            # P4 parser: dst_port &&& mask == base
INA_VERSION = 1

OP_SUM, OP_OR, OP_MAX = 0, 1, 2
OP_NAMES = {OP_SUM: "SUM", OP_OR: "OR", OP_MAX: "MAX"}

FLAG_RESULT = 0x01                # set by the switch on results
FLAG_RETX = 0x02                  # set by a worker on a resend (informational)
FLAGS_OFFSET = 2                  # the flags byte's offset in the INA header

MAX_VALUES_PER_PACKET = 64
MAX_WORKERS = 32                  # worker bitmap is bit<32>

ETH_HLEN, IPV4_HLEN, UDP_HLEN, INA_HLEN = 14, 20, 8, 16
IP_OFFSET = ETH_HLEN              # 14
UDP_OFFSET = IP_OFFSET + IPV4_HLEN  # 34
INA_OFFSET = UDP_OFFSET + UDP_HLEN  # 42
VALUES_OFFSET = INA_OFFSET + INA_HLEN  # 58
MAX_FRAME_LEN = VALUES_OFFSET + 4 * MAX_VALUES_PER_PACKET  # 314
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17
DEFAULT_TTL = 64

HEADER_FORMAT = "!BBBBHBBIBbH"
HEADER_STRUCT = struct.Struct(HEADER_FORMAT)
assert HEADER_STRUCT.size == INA_HLEN

# numpy dtype of the INA header alone (big-endian, no padding).
HEADER_DTYPE = np.dtype([
    ("version", "u1"), ("op", "u1"), ("flags", "u1"), ("job_id", "u1"),
    ("slot", ">u2"), ("slot_ver", "u1"), ("worker_id", "u1"), ("seq", ">u4"),
    ("count", "u1"), ("exponent", "i1"), ("reserved", ">u2"),
])
assert HEADER_DTYPE.itemsize == INA_HLEN

# numpy dtype of frame bytes 0..58 (Eth/IPv4/UDP/INA): view a (n, 58) uint8 block
# with it to read every header field of a batch at once.
FRAME_DTYPE = np.dtype([
    ("eth_dst", "V6"), ("eth_src", "V6"), ("ethertype", ">u2"),
    ("ip_vihl", "u1"), ("ip_tos", "u1"), ("ip_len", ">u2"), ("ip_id", ">u2"),
    ("ip_frag", ">u2"), ("ip_ttl", "u1"), ("ip_proto", "u1"), ("ip_csum", ">u2"),
    ("ip_src", ">u4"), ("ip_dst", ">u4"),
    ("udp_sport", ">u2"), ("udp_dport", ">u2"), ("udp_len", ">u2"), ("udp_csum", ">u2"),
    ("ina", HEADER_DTYPE),
])
assert FRAME_DTYPE.itemsize == VALUES_OFFSET


class InaHeader(NamedTuple):
    version: int
    op: int
    flags: int
    job_id: int
    slot: int
    slot_ver: int
    worker_id: int
    seq: int
    count: int
    exponent: int
    reserved: int = 0


def is_ina_port(port: int) -> bool:
    return INA_PORT_BASE <= port < INA_PORT_BASE + INA_PORT_COUNT


def pack_header(*, op: int, job_id: int, slot: int, slot_ver: int, worker_id: int,
                seq: int, count: int, flags: int = 0, exponent: int = 0,
                version: int = INA_VERSION, reserved: int = 0) -> bytes:
    return HEADER_STRUCT.pack(version, op, flags, job_id, slot, slot_ver, worker_id,
                              seq & 0xFFFFFFFF, count, exponent, reserved)


def unpack_header(buf: bytes, offset: int = INA_OFFSET) -> InaHeader:
    """Header at `offset` (default: its place in a frame; pass 0 for a bare header)."""
    return InaHeader._make(HEADER_STRUCT.unpack_from(buf, offset))


# -- addresses and checksums -------------------------------------------------
def mac_bytes(mac: str | bytes | int) -> bytes:
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise ValueError(f"MAC must be 6 bytes, got {len(mac)}")
        return bytes(mac)
    if isinstance(mac, int):
        return mac.to_bytes(6, "big")
    parts = mac.replace("-", ":").split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC {mac!r}: expected aa:bb:cc:dd:ee:ff")
    return bytes(int(p, 16) for p in parts)


def mac_str(mac: bytes | int) -> str:
    b = mac.to_bytes(6, "big") if isinstance(mac, int) else bytes(mac)
    return ":".join(f"{x:02x}" for x in b)


def ip_bytes(ip: str | bytes | int) -> bytes:
    if isinstance(ip, (bytes, bytearray)):
        if len(ip) != 4:
            raise ValueError(f"IPv4 address must be 4 bytes, got {len(ip)}")
        return bytes(ip)
    if isinstance(ip, int):
        return ip.to_bytes(4, "big")
    return ipaddress.IPv4Address(ip).packed


def ip_str(ip: bytes | int) -> str:
    return str(ipaddress.IPv4Address(ip if isinstance(ip, int) else bytes(ip)))


def ipv4_checksum(header: bytes) -> int:
    """RFC 791 one's-complement sum over a header whose checksum field is 0."""
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


_IP_FMT = struct.Struct("!BBHHHBBH4s4s")
_UDP_FMT = struct.Struct("!HHHH")


def eth_ip_udp(src_mac, dst_mac, src_ip, dst_ip, sport: int, dport: int,
               payload_len: int, *, ttl: int = DEFAULT_TTL, ident: int = 0) -> bytes:
    """The 42-byte Eth/IPv4/UDP prefix for a UDP payload of `payload_len` bytes.
    IPv4: DF set, no options, correct checksum; UDP checksum 0 (see module doc)."""
    s_ip, d_ip = ip_bytes(src_ip), ip_bytes(dst_ip)
    total = IPV4_HLEN + UDP_HLEN + payload_len
    ip = _IP_FMT.pack(0x45, 0, total, ident, 0x4000, ttl, IPPROTO_UDP, 0, s_ip, d_ip)
    csum = ipv4_checksum(ip)
    ip = ip[:10] + csum.to_bytes(2, "big") + ip[12:]
    eth = mac_bytes(dst_mac) + mac_bytes(src_mac) + b"\x08\x00"
    return eth + ip + _UDP_FMT.pack(sport, dport, UDP_HLEN + payload_len, 0)


def values_to_bytes(values) -> bytes:
    return np.asarray(values).astype(">i4", casting="unsafe").tobytes()


def values_from_bytes(buf: bytes, count: int, offset: int = VALUES_OFFSET) -> np.ndarray:
    return np.frombuffer(buf, ">i4", count, offset).astype(np.int32)


def build_frame(src_mac, dst_mac, src_ip, dst_ip, sport: int, dport: int, *,
                op: int, job_id: int, slot: int, slot_ver: int, worker_id: int,
                seq: int, values=(), flags: int = 0, exponent: int = 0,
                version: int = INA_VERSION, count: int | None = None,
                ttl: int = DEFAULT_TTL, ident: int = 0) -> bytes:
    """A complete INA frame. `values`: int32 array-like (at most 64). `count`
    defaults to len(values); tests pass a different one to build malformed frames."""
    vals = np.asarray(values, dtype=np.int64)
    if vals.ndim != 1:
        raise ValueError("values must be one-dimensional")
    if count is None:
        if len(vals) > MAX_VALUES_PER_PACKET:
            raise ValueError(f"{len(vals)} values > MAX_VALUES_PER_PACKET ({MAX_VALUES_PER_PACKET})")
        count = len(vals)
    payload = pack_header(op=op, flags=flags, job_id=job_id, slot=slot, slot_ver=slot_ver,
                          worker_id=worker_id, seq=seq, count=count, exponent=exponent,
                          version=version) + values_to_bytes(vals)
    return eth_ip_udp(src_mac, dst_mac, src_ip, dst_ip, sport, dport, len(payload),
                      ttl=ttl, ident=ident) + payload


class ParsedFrame(NamedTuple):
    src_mac: bytes
    dst_mac: bytes
    src_ip: bytes
    dst_ip: bytes
    sport: int
    dport: int
    header: InaHeader
    values: np.ndarray


def parse_frame(frame: bytes, wire_len: int | None = None) -> ParsedFrame | None:
    """Decode an INA frame (either direction); None if it is not a well-formed one.

    wire_len: the frame's length on the wire when `frame` holds only its first
    bytes (a pcap record cut at the capture's snaplen). The headers must still be
    captured whole (VALUES_OFFSET bytes); `count` is checked against wire_len, and
    `values` holds only the values captured whole (fewer than header.count)."""
    if len(frame) < VALUES_OFFSET or frame[12:14] != b"\x08\x00" or frame[14] != 0x45 \
            or frame[23] != IPPROTO_UDP:
        return None
    sport, dport = struct.unpack_from("!HH", frame, UDP_OFFSET)
    if not (is_ina_port(dport) or is_ina_port(sport)):
        return None
    h = unpack_header(frame)
    # A capture never holds more than the wire carried: a shorter wire_len is ignored.
    length = len(frame) if wire_len is None else max(wire_len, len(frame))
    if h.version != INA_VERSION or h.count > MAX_VALUES_PER_PACKET \
            or length < VALUES_OFFSET + 4 * h.count:
        return None
    captured = min(h.count, (len(frame) - VALUES_OFFSET) // 4)
    return ParsedFrame(frame[6:12], frame[0:6], frame[26:30], frame[30:34], sport, dport,
                       h, values_from_bytes(frame, captured))


# -- scapy layers (lazy) -----------------------------------------------------
_scapy_cache: dict[str, type] = {}


def bind_ina_layers() -> type:
    """Define the scapy layer `INA` (once) and bind it to UDP on every INA port,
    as source and as destination. Returns the class."""
    if "INA" in _scapy_cache:
        return _scapy_cache["INA"]
    from scapy.fields import (ByteEnumField, ByteField, FieldLenField,  # noqa: PLC0415
                              FieldListField, FlagsField, IntField, ShortField,
                              SignedByteField, SignedIntField)
    from scapy.layers.inet import UDP  # noqa: PLC0415
    from scapy.packet import Packet, bind_layers  # noqa: PLC0415

    class INA(Packet):
        name = "INA"
        fields_desc = [
            ByteField("version", INA_VERSION),
            ByteEnumField("op", OP_SUM, OP_NAMES),
            FlagsField("flags", 0, 8, ["RESULT", "RETX", "F2", "F3", "F4", "F5", "F6", "F7"]),
            ByteField("job_id", 0),
            ShortField("slot", 0),
            ByteField("slot_ver", 0),
            ByteField("worker_id", 0),
            IntField("seq", 0),
            FieldLenField("count", None, fmt="B", count_of="values"),
            SignedByteField("exponent", 0),
            ShortField("reserved", 0),
            FieldListField("values", [], SignedIntField("value", 0),
                           count_from=lambda pkt: pkt.count),
        ]

        def extract_padding(self, s):
            return b"", s  # bytes after the values are Ethernet padding

    for port in INA_PORTS:
        bind_layers(UDP, INA, dport=port)
        bind_layers(UDP, INA, sport=port)
    _scapy_cache["INA"] = INA
    return INA


def __getattr__(name: str):
    # PEP 562: `from testbed.wire import INA` loads scapy only when asked.
    if name == "INA":
        return bind_ina_layers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
