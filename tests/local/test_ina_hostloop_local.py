"""The INA worker's compiled loop on a real UDP socket (hosts/ina/hostloop.py,
`Loop.run`: recvmmsg, ppoll and naps without the GIL, sendmmsg) against a
reflector thread on loopback that answers every contribution as a one-worker
switch does, losing the first copy of some chunks and duplicating some
answers. Same results as the numpy path, each chunk accepted once, lost
chunks resent by Python's timers while the loop runs, and most results taken
in by the loop. Each test stops the thread it started."""
from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from hosts.ina import hostpath
from hosts.ina.transport import LANES, InaClient, UdpIo
from testbed import wire

pytestmark = pytest.mark.local


class Reflector:
    """Answers each datagram to its sender with FLAG_RESULT set (the sum of one
    worker is its contribution); drops the first copy of seqs with
    seq % drop_mod == 1, sends the answer twice for seq % dup_mod == 2."""

    def __init__(self, drop_mod: int = 0, dup_mod: int = 0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.addr = self.sock.getsockname()
        self.drop_mod, self.dup_mod = drop_mod, dup_mod
        self.dropped: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                b, src = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            seq = int.from_bytes(b[8:12], "big")
            if self.drop_mod and seq % self.drop_mod == 1 and seq not in self.dropped:
                self.dropped.add(seq)
                continue
            r = bytearray(b)
            r[2] |= wire.FLAG_RESULT
            for _ in range(2 if self.dup_mod and seq % self.dup_mod == 2 else 1):
                self.sock.sendto(bytes(r), src)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def reflector():
    made = []

    def make(**kw):
        made.append(Reflector(**kw))
        return made[-1]
    yield make
    for r in made:
        r.close()


def _run(impl: str, refl: Reflector, window: int, tensors, gso: bool = True) -> tuple[list[bytes], InaClient]:
    io = UdpIo(("127.0.0.1", 0), refl.addr, gso=gso)
    c = InaClient(io, 1, 0, 1, window=window, impl=impl, timeout_s=0.02, max_retries=50)
    try:
        out = [c.allreduce(x, **kw).tobytes() for x, kw in tensors]
    finally:
        c.close()
    return out, c


@pytest.mark.skipif(not hostpath.available(), reason="hosts/ina/_hostpath.c not built (make setup)")
@pytest.mark.parametrize("window", [8, 64])
def test_the_loop_on_a_socket_matches_the_python_path_under_loss_and_duplicates(reflector, window):
    rng = np.random.default_rng(3)
    ints = rng.integers(-2**20, 2**20, 64 * 400 + 7).astype(np.int32)
    floats = rng.standard_normal(64 * 300).astype(np.float32)
    tensors = [(ints, {}), (floats, {}), (floats, {"scale_exp": 16})]
    ref, cp = _run("python", reflector(drop_mod=37, dup_mod=11), window, tensors)
    got, cc = _run("compiled", reflector(drop_mod=37, dup_mod=11), window, tensors)
    assert got == ref
    assert np.frombuffer(got[0], np.int32).tolist() == ints.tolist()    # one worker: its own values
    chunks = sum(-(-x.size // LANES) for x, _ in tensors) + 1            # + the agreed scale's MAX round
    assert cc.stats.results == cp.stats.results == chunks               # each chunk accepted once
    assert cc.stats.retransmissions > 0 and cc.stats.duplicates_ignored > 0
    lp = cc._loop
    assert lp is not None and lp.fd >= 0                                # the socket mode ran
    assert lp.taken >= 0.5 * chunks and lp.bursts > 0
    assert len(cc.stats.latencies_s) == chunks


@pytest.mark.skipif(not hostpath.available(), reason="hosts/ina/_hostpath.c not built (make setup)")
@pytest.mark.parametrize("gso", [True, False])
def test_the_loop_naps_to_take_trickling_answers_in_bursts(reflector, gso):
    """A wide window of chunks on the wire: the loop waits for answers to pile up
    (naps) instead of waking per datagram, and still gets every result right,
    with its sends as UDP GSO messages or one message per datagram."""
    x = np.arange(64 * 2000, dtype=np.int32)
    got, c = _run("compiled", reflector(), 256, [(x, {}), (x, {})], gso=gso)
    assert all(np.frombuffer(g, np.int32).tolist() == x.tolist() for g in got)
    assert c._loop.naps > 0
    assert c._loop.taken > 0.5 * c.stats.results      # at most ~87%: each last window is Python's
    # the first window of each tensor goes through UdpIo (one GSO message per 64 chunks),
    # the loop's bursts of more than one answer as GSO messages too
    assert (c.io.gso_msgs >= 2 * 256 // 64) if gso else c.io.gso_msgs == 0
    assert (c._loop.gso_msgs > 0) if gso else c._loop.gso_msgs == 0
    assert c._loop.gso == gso
