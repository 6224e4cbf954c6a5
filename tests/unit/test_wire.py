"""The INA wire format: struct packing, frames, the numpy batch view, scapy layers."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed import wire

pytestmark = pytest.mark.unit

A = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:fe",
         src_ip="10.0.0.1", dst_ip="10.0.0.254", sport=40000, dport=wire.INA_PORT_BASE + 3)


def frame(values=(1, -2, 3), **kw):
    fields = dict(op=wire.OP_SUM, job_id=7, slot=513, slot_ver=1, worker_id=5,
                  seq=0xDEADBEEF, exponent=-3, flags=wire.FLAG_RETX)
    fields.update(kw)
    return wire.build_frame(A["src_mac"], A["dst_mac"], A["src_ip"], A["dst_ip"], A["sport"],
                            A["dport"], values=values, **fields)


def test_constants():
    assert wire.INA_HLEN == wire.HEADER_STRUCT.size == wire.HEADER_DTYPE.itemsize == 16
    assert wire.FRAME_DTYPE.itemsize == wire.VALUES_OFFSET == 58
    assert wire.MAX_VALUES_PER_PACKET == 64
    assert wire.MAX_FRAME_LEN == 58 + 256
    assert list(wire.INA_PORTS) == list(range(0x5A00, 0x5A10))
    assert all((p & wire.INA_PORT_MASK) == wire.INA_PORT_BASE for p in wire.INA_PORTS)
    assert wire.is_ina_port(wire.INA_PORT_BASE + 15) and not wire.is_ina_port(wire.INA_PORT_BASE + 16)
    assert (wire.OP_SUM, wire.OP_OR, wire.OP_MAX) == (0, 1, 2)


@given(op=st.integers(0, 255), flags=st.integers(0, 255), job=st.integers(0, 255),
       slot=st.integers(0, 0xFFFF), ver=st.integers(0, 255), wid=st.integers(0, 255),
       seq=st.integers(0, 2**32 - 1), count=st.integers(0, 255), exp=st.integers(-128, 127))
def test_header_roundtrip(op, flags, job, slot, ver, wid, seq, count, exp):
    b = wire.pack_header(op=op, flags=flags, job_id=job, slot=slot, slot_ver=ver,
                         worker_id=wid, seq=seq, count=count, exponent=exp)
    h = wire.unpack_header(b, 0)
    assert h == wire.InaHeader(wire.INA_VERSION, op, flags, job, slot, ver, wid, seq, count, exp, 0)
    # the numpy dtype reads the same bytes the same way
    rec = np.frombuffer(b, wire.HEADER_DTYPE)[0]
    assert tuple(int(x) for x in rec.tolist()) == tuple(h)


def test_header_layout_is_the_documented_one():
    b = wire.pack_header(op=2, flags=3, job_id=4, slot=0x0506, slot_ver=1, worker_id=8,
                         seq=0x090A0B0C, count=13, exponent=-2)
    assert b == bytes([1, 2, 3, 4, 5, 6, 1, 8, 9, 10, 11, 12, 13, 0xFE, 0, 0])


def test_build_frame_addresses_lengths_checksum():
    f = frame()
    assert len(f) == 42 + 16 + 12
    assert f[0:6] == bytes.fromhex("0200000000fe") and f[6:12] == bytes.fromhex("020000000001")
    assert f[12:14] == b"\x08\x00" and f[14] == 0x45 and f[23] == 17
    total, = struct.unpack_from("!H", f, 16)
    assert total == len(f) - 14
    assert wire.ipv4_checksum(f[14:34]) == 0              # checksum over a valid header is 0
    sport, dport, ulen, csum = struct.unpack_from("!HHHH", f, 34)
    assert (sport, dport, ulen, csum) == (40000, wire.INA_PORT_BASE + 3, len(f) - 34, 0)
    assert np.array_equal(wire.values_from_bytes(f, 3), [1, -2, 3])
    assert f[58:70] == struct.pack("!iii", 1, -2, 3)       # big-endian int32


def test_build_frame_rejects_too_many_values_unless_count_forced():
    with pytest.raises(ValueError):
        frame(values=np.zeros(65))
    f = frame(values=np.zeros(2), count=9)                  # malformed on purpose
    assert wire.unpack_header(f).count == 9 and wire.parse_frame(f) is None


def test_parse_frame():
    p = wire.parse_frame(frame())
    assert p.header.job_id == 7 and p.header.slot == 513 and p.header.seq == 0xDEADBEEF
    assert p.header.exponent == -3 and p.header.flags == wire.FLAG_RETX
    assert wire.ip_str(p.src_ip) == "10.0.0.1" and wire.mac_str(p.dst_mac) == "02:00:00:00:00:fe"
    assert (p.sport, p.dport) == (40000, wire.INA_PORT_BASE + 3)
    assert wire.parse_frame(frame()[:60]) is None            # values cut off
    assert wire.parse_frame(frame(version=2)) is None
    non_ina = wire.eth_ip_udp(A["src_mac"], A["dst_mac"], A["src_ip"], A["dst_ip"], 1, 53, 16)
    assert wire.parse_frame(non_ina + bytes(16)) is None


def test_parse_frame_of_a_truncated_capture_reads_only_captured_bytes():
    """A pcap record cut at a snaplen: the header decodes as in the whole frame;
    `values` holds the values captured whole, none read past the captured bytes."""
    vals = list(range(-5, 5))
    f = frame(values=vals)                                    # 58 + 40 bytes
    whole = wire.parse_frame(f)
    for snap in (58, 61, 62, 96, len(f) - 1):
        cut = wire.parse_frame(f[:snap], wire_len=len(f))
        assert cut is not None and cut.header == whole.header, snap
        assert cut[:6] == whole[:6]                           # addresses and ports
        assert list(cut.values) == vals[:(snap - 58) // 4], snap
    assert wire.parse_frame(f[:57], wire_len=len(f)) is None  # the header itself cut
    assert wire.parse_frame(f[:60]) is None                   # without wire_len: values missing
    # Checks on whole frames hold for cut ones: count beyond the wire length, a
    # count over 64, another version, not INA.
    short = frame(values=np.zeros(2), count=9)
    assert wire.parse_frame(short[:60], wire_len=len(short)) is None
    assert wire.parse_frame(frame(values=np.zeros(2), count=65)[:60], wire_len=58 + 4 * 65) is None
    assert wire.parse_frame(frame(version=2)[:58], wire_len=70) is None
    non_ina = wire.eth_ip_udp(A["src_mac"], A["dst_mac"], A["src_ip"], A["dst_ip"], 1, 53, 16)
    assert wire.parse_frame(non_ina + bytes(16), wire_len=200) is None
    # A wire length shorter than the captured bytes cannot be: the bytes count.
    assert wire.parse_frame(f, wire_len=10).header == whole.header
    assert list(wire.parse_frame(f, wire_len=10).values) == vals


def test_values_wrap_like_int32():
    f = frame(values=[2**31 - 1, -2**31, -1])
    assert np.array_equal(wire.values_from_bytes(f, 3), np.array([2**31 - 1, -2**31, -1], np.int32))


def test_frame_dtype_batch_view():
    frames = [frame(slot=i, seq=100 + i, values=np.arange(64)) for i in range(5)]
    mat = np.frombuffer(b"".join(frames), np.uint8).reshape(5, -1)
    h = mat[:, :wire.VALUES_OFFSET].view(wire.FRAME_DTYPE)[:, 0]
    assert list(h["ina"]["slot"]) == [0, 1, 2, 3, 4]
    assert list(h["ina"]["seq"]) == [100, 101, 102, 103, 104]
    assert set(h["ethertype"]) == {0x0800} and set(h["udp_dport"]) == {wire.INA_PORT_BASE + 3}
    assert set(h["ina"]["exponent"]) == {-3}
    assert set(h["ip_src"]) == {0x0A000001}


def test_address_helpers():
    assert wire.mac_bytes("02-00-00-00-00-0A") == bytes.fromhex("02000000000a")
    assert wire.mac_bytes(0x0200000000FE) == bytes.fromhex("0200000000fe")
    assert wire.ip_bytes("10.0.0.254") == bytes([10, 0, 0, 254]) == wire.ip_bytes(0x0A0000FE)
    with pytest.raises(ValueError):
        wire.mac_bytes("02:00")


def test_scapy_layer_decodes_both_directions():
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    INA = wire.INA
    assert wire.bind_ina_layers() is INA                     # defined once
    p = Ether(frame(values=[5, -6]))
    assert p.haslayer(INA)
    ina = p[INA]
    assert (ina.job_id, ina.slot, ina.slot_ver, ina.worker_id, ina.seq) == (7, 513, 1, 5, 0xDEADBEEF)
    assert ina.count == 2 and ina.values == [5, -6] and ina.exponent == -3
    assert "RETX" in str(ina.flags) and ina.op == wire.OP_SUM
    # a result comes *from* an INA port to the worker's port
    res = wire.build_frame(A["dst_mac"], A["src_mac"], A["dst_ip"], A["src_ip"],
                           wire.INA_PORT_BASE, 40000, op=wire.OP_MAX, job_id=1, slot=0,
                           slot_ver=0, worker_id=0, seq=1, values=[1], flags=wire.FLAG_RESULT)
    assert Ether(res)[INA].flags.RESULT
    # scapy builds the same bytes as build_frame
    built = bytes(Ether(dst=A["dst_mac"], src=A["src_mac"]) /
                  IP(src=A["src_ip"], dst=A["dst_ip"], flags="DF", id=0) /
                  UDP(sport=A["sport"], dport=A["dport"], chksum=0) /
                  INA(op=0, flags="RETX", job_id=7, slot=513, slot_ver=1, worker_id=5,
                      seq=0xDEADBEEF, exponent=-3, values=[1, -2, 3]))
    assert built == frame()


def test_scapy_padding_is_not_values():
    from scapy.layers.l2 import Ether
    INA = wire.INA
    p = Ether(frame(values=[9]) + bytes(8))                   # Ethernet padding
    assert p[INA].values == [9]
