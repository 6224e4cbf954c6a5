"""The switch's pcap files when both packet paths write them: PcapWriter
(pcap.py) formats the Python path's records, _pktio's pcap_record (the same
C code as the compiled loop's Engine) the compiled path's, handed to the same
writer with write_records. Read back with scapy's RawPcapReader.
(The Engine writing real frames: tests/mininet/test_ring_fastpath.py.)"""
from __future__ import annotations

import random

import pytest
from scapy.utils import RawPcapReader

from testbed.switch.soft import dataplane
from testbed.switch.soft.pcap import PcapWriter

pytestmark = pytest.mark.unit

needs_pktio = pytest.mark.skipif(not dataplane.ring_available(), reason="_pktio not built (make setup)")
SNAP = 100


def batches(seed: int, n: int):
    """n batches of frames 14..300 bytes (some longer than SNAP), with batch times
    that exercise the microsecond split (fractions near .0 and .999999)."""
    rng = random.Random(seed)
    t = 1_700_000_000.0
    out = []
    for i in range(n):
        t += rng.choice([0.0, 1e-6, 0.25, 0.9999995, 3.000001])
        frames = [i.to_bytes(4, "big") + rng.randbytes(rng.randint(10, 296))
                  for _ in range(rng.randint(0, 40))]
        out.append((t, frames))
    return out


def expected_records(bs):
    """What a reader must find: per frame (captured bytes, original length, sec, usec)."""
    rec = []
    for ts, frames in bs:
        sec = int(ts)
        usec = int((ts - sec) * 1e6)
        rec.extend((f[:SNAP], len(f), sec, usec) for f in frames)
    return rec


def read_back(path):
    with RawPcapReader(str(path)) as r:
        assert r.linktype == 1                   # LINKTYPE_ETHERNET
        assert r.snaplen == SNAP
        return [(data, meta.wirelen, meta.sec, meta.usec) for data, meta in r]


def test_python_writer_truncates_at_snaplen(tmp_path):
    bs = batches(1, 30)
    with PcapWriter(tmp_path / "p.pcap", snaplen=SNAP, flush_bytes=512) as w:
        for ts, frames in bs:
            w.write_batch(frames, ts)
    got = read_back(tmp_path / "p.pcap")
    assert got == expected_records(bs)
    assert any(wl > SNAP for _, wl, _, _ in got) and any(wl <= SNAP for _, wl, _, _ in got)


@needs_pktio
def test_compiled_records_are_byte_identical_to_the_python_writers(tmp_path):
    pktio = dataplane._pktio
    bs = batches(2, 60)
    with PcapWriter(tmp_path / "py.pcap", snaplen=SNAP) as w:
        for ts, frames in bs:
            w.write_batch(frames, ts)
    with PcapWriter(tmp_path / "c.pcap", snaplen=SNAP) as w:
        for ts, frames in bs:
            w.write_records(pktio.pcap_records(frames, ts, SNAP), len(frames))
    assert (tmp_path / "c.pcap").read_bytes() == (tmp_path / "py.pcap").read_bytes()
    assert len(read_back(tmp_path / "c.pcap")) == sum(len(f) for _, f in bs)


@needs_pktio
def test_python_and_compiled_batches_alternate_in_order_on_one_file(tmp_path):
    pktio = dataplane._pktio
    bs = batches(3, 400)
    rng = random.Random(3)
    w = PcapWriter(tmp_path / "mix.pcap", snaplen=SNAP, flush_bytes=4096)  # flushes mid-run
    compiled = 0
    for ts, frames in bs:
        if rng.random() < 0.5:
            w.write_batch(frames, ts)
        else:
            compiled += 1
            w.write_records(pktio.pcap_records(frames, ts, SNAP), len(frames))
    w.close()
    assert 100 < compiled < 300
    assert w.frames == sum(len(f) for _, f in bs)
    assert read_back(tmp_path / "mix.pcap") == expected_records(bs)


@needs_pktio
def test_pcap_records_rejects_what_is_not_bytes():
    with pytest.raises(TypeError):
        dataplane._pktio.pcap_records([b"\x00" * 20, 5], 1.0, SNAP)
