"""The soft switch's UDP port (testbed/switch/soft/udp_io.py) in both ways it moves
datagrams, udp_io "mmsg" (recvmmsg/sendmmsg) and "python" (recvfrom/sendto):
the same datagrams in give the same frames, the same frames out give the same
datagrams at the same destinations, and the counters agree, including frames
that are not IPv4/UDP, short frames and UDP lengths beyond the frame.
Loopback sockets only, no switch process."""
from __future__ import annotations

import socket
import time

import pytest

from testbed import wire
from testbed.linux_mmsg import HAVE_MMSG
from testbed.switch.soft.udp_io import RX_SLOT, UdpInaPort

pytestmark = [pytest.mark.local,
              pytest.mark.skipif(not HAVE_MMSG, reason="libc without recvmmsg/sendmmsg")]

SMAC, SIP = "02:00:00:00:00:fe", "10.0.0.254"
KNOWN_IP = "127.0.0.1"
MACS = {wire.ip_bytes(KNOWN_IP): wire.mac_bytes("02:00:00:00:01:01")}


def _port(impl: str) -> UdpInaPort:
    return UdpInaPort(("127.0.0.1", 0), switch_mac=SMAC, switch_ip=SIP, macs=MACS, impl=impl, batch=64)


def _udp(bind_ip: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((bind_ip, 0))
    return s


def _drain(port: UdpInaPort, want: int, max_frames: int = 64) -> list[bytes]:
    got: list[bytes] = []
    end = time.monotonic() + 5
    while len(got) < want and time.monotonic() < end:
        got += port.recv_batch(max_frames)
    return got


def _payloads(n: int) -> list[bytes]:
    return [bytes([i % 251]) * (16 + 4 * (i % 65)) for i in range(n)]


def test_receive_same_frames_both_impls():
    senders = [_udp("127.0.0.1"), _udp("127.0.1.2")]   # one known worker (its MAC), one unknown
    ports = {impl: _port(impl) for impl in ("python", "mmsg")}
    try:
        out = {}
        for impl, p in ports.items():
            dst = p.sock.getsockname()
            sent = []
            for i, pl in enumerate(_payloads(150)):   # more than one recv batch
                s = senders[i % 2]
                s.sendto(pl, dst)
                sent.append((s.getsockname(), pl))
            frames = _drain(p, len(sent), max_frames=64)
            assert len(frames) == len(sent)
            for f, ((ip, sport), pl) in zip(frames, sent):
                assert f[wire.INA_OFFSET:] == pl
                assert wire.ip_str(f[26:30]) == ip and int.from_bytes(f[34:36], "big") == sport
                assert int.from_bytes(f[38:40], "big") == wire.UDP_HLEN + len(pl)
            out[impl] = frames
            st = p.stats()
            assert (st["rx"], st["rx_bytes"], st["rx_truncated"]) == (150, sum(map(len, _payloads(150))), 0)
        assert out["python"] == out["mmsg"]
        assert out["mmsg"][0][6:12] == wire.mac_bytes("02:00:00:00:01:01")    # the registered MAC
        assert out["mmsg"][1][6:12] == b"\x02\x01" + wire.ip_bytes("127.0.1.2")
    finally:
        for s in senders:
            s.close()
        for p in ports.values():
            p.close()


def test_mmsg_counts_oversized_datagrams():
    p, s = _port("mmsg"), _udp()
    try:
        s.sendto(b"x" * (RX_SLOT - wire.INA_OFFSET + 1), p.sock.getsockname())
        s.sendto(b"y" * 20, p.sock.getsockname())
        frames = _drain(p, 1)
        time.sleep(0.05)
        frames += p.recv_batch(64)
        assert [f[wire.INA_OFFSET:] for f in frames] == [b"y" * 20]
        assert p.stats()["rx_truncated"] == 1 and p.stats()["rx"] == 1
    finally:
        s.close()
        p.close()


def _frames_to(receivers: list[socket.socket]) -> list[bytes]:
    """Results as the pipeline emits them, to several destinations, with misfits mixed in."""
    out = []
    for i, pl in enumerate(_payloads(300)):          # more than one sendmmsg batch
        ip, port = receivers[i % len(receivers)].getsockname()
        out.append(wire.eth_ip_udp(b"\x02" * 6, wire.mac_bytes(SMAC), wire.ip_bytes(SIP), wire.ip_bytes(ip),
                                   wire.INA_PORT_BASE, port, len(pl)) + pl)
    ip, port = receivers[0].getsockname()
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)
    short = out[0][:30]
    # a UDP length beyond the frame: the payload is what the frame holds
    long_ulen = bytearray(out[1])
    long_ulen[38:40] = (len(out[1]) + 100).to_bytes(2, "big")
    # a UDP length below the header: an empty datagram
    tiny = bytearray(out[2])
    tiny[38:40] = (4).to_bytes(2, "big")
    return out[:5] + [arp, short, bytes(long_ulen), bytes(tiny)] + out[5:]


def _receive_all(receivers: list[socket.socket]) -> list[list[bytes]]:
    got = []
    for r in receivers:
        r.settimeout(0.2)
        xs = []
        try:
            while True:
                xs.append(r.recv(65535))
        except (TimeoutError, socket.timeout):
            pass
        got.append(xs)
    return got


def test_send_same_datagrams_both_impls():
    receivers = [_udp("127.0.0.1"), _udp("127.0.1.3"), _udp("127.0.1.4")]
    results = {}
    try:
        for r in receivers:
            r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        frames = _frames_to(receivers)
        for impl in ("python", "mmsg", "mmsg_few"):
            p = _port(impl.split("_")[0])
            try:
                if impl == "mmsg_few":   # batches of a few frames: the frame-by-frame fill
                    sent = [f for i in range(0, len(frames), 7) for f in p.send_batch(frames[i:i + 7])]
                else:
                    sent = p.send_batch(frames)
                got = _receive_all(receivers)
                st = p.stats()
                results[impl] = (sent, got, {k: st[k] for k in ("tx", "tx_bytes", "tx_dropped", "tx_not_udp")})
            finally:
                p.close()
    finally:
        for r in receivers:
            r.close()
    (sent_py, got_py, st_py), (sent_mm, got_mm, st_mm) = results["python"], results["mmsg"]
    assert results["mmsg_few"] == results["mmsg"]
    assert sent_py == sent_mm
    assert st_py == st_mm and st_mm["tx_not_udp"] == 2 and st_mm["tx"] == 302
    assert got_py == got_mm
    assert sum(map(len, got_mm)) == 302 and b"" in got_mm[2]


def test_unknown_udp_io_is_an_error():
    from testbed.switch.soft.config import ConfigError
    with pytest.raises(ConfigError, match="udp_io"):
        _port("fast")
