"""The INA worker's UDP GSO sends (hosts/ina/_mmsg.py, and the compiled loop's
in hosts/ina/_hostpath.c) on a real loopback socket: a receiver gets exactly the
datagrams, in order, that one message per datagram gives; a kernel that refuses
GSO costs no datagram and turns GSO off."""
from __future__ import annotations

import ctypes
import errno
import socket

import numpy as np
import pytest

from hosts.ina import _mmsg
from hosts.ina.chunks import RX_DTYPE

pytestmark = [pytest.mark.local,
              pytest.mark.skipif(not _mmsg.HAVE_MMSG, reason="libc has no sendmmsg")]

# runs of full chunks longer than a GSO message, a short chunk inside, two short ones, one alone
LENS = np.array([272] * 150 + [100] + [272] * 49 + [40, 40, 272], np.int64)


def test_gso_groups_are_runs_of_equal_length_at_most_the_kernel_limit():
    starts, counts = _mmsg.gso_groups(LENS)
    assert starts.tolist() == [0, 64, 128, 150, 151, 200, 202]
    assert counts.tolist() == [64, 64, 22, 1, 49, 2, 1]
    for a, k in zip(starts, counts):
        assert len(set(LENS[a:a + k].tolist())) == 1
    assert _mmsg.gso_groups(np.array([5], np.int64))[1].tolist() == [1]


def _receiver() -> socket.socket:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    r.bind(("127.0.0.1", 0))
    r.settimeout(0.3)
    return r


def _send_and_receive(gso: bool, sendmmsg=None) -> tuple[list[bytes], list[bytes], _mmsg.MmsgUdp]:
    r = _receiver()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", 0))
        mm = _mmsg.MmsgUdp(s, r.getsockname(), RX_DTYPE, 256, gso=gso)
        offs = np.cumsum(np.append(0, LENS[:-1]))
        buf = np.random.default_rng(1).integers(0, 256, int(LENS.sum()), np.uint8)
        mm.send(buf.ctypes.data, offs, LENS)
        got = []
        try:
            while True:
                got.append(r.recv(4096))
        except socket.timeout:
            pass
        return got, [buf[o:o + n].tobytes() for o, n in zip(offs, LENS)], mm
    finally:
        s.close()
        r.close()


@pytest.mark.parametrize("gso", [True, False])
def test_the_receiver_gets_the_same_datagrams_in_order(gso):
    got, want, mm = _send_and_receive(gso)
    assert got == want
    assert mm.send_errors == 0
    # with GSO: one message per group (7), without: none
    assert mm.gso_msgs == (7 if gso else 0)


def test_a_kernel_that_refuses_gso_loses_no_datagram_and_gso_goes_off(monkeypatch):
    real = _mmsg.sendmmsg
    refused = []

    def no_gso(fd, hdrs, n, flags):
        hdr = ctypes.cast(hdrs, ctypes.POINTER(_mmsg.MMsgHdr)).contents
        if hdr.msg_hdr.msg_controllen:          # a GSO message: refuse it as an old kernel would
            refused.append(n)
            ctypes.set_errno(errno.EINVAL)
            return -1
        return real(fd, hdrs, n, flags)

    monkeypatch.setattr(_mmsg, "sendmmsg", no_gso)
    got, want, mm = _send_and_receive(True)
    assert got == want and mm.send_errors == 0
    assert refused and not mm.gso and mm.gso_msgs == 0
