"""The soft switch's ingress link shaper (_pktio.c RxRing.shape), on real interfaces:
a link into a switch port that serializes at a rate, modeled at the port's
receive ring.

In a private network namespace (pytest runs this file again as a script under
`unshare -n`): veth pairs h1 <-> s1 and h2 <-> s2. A burst of frames sent on h1
lands in s1's ring at once; the shaped ring must hand frame k (0-based, all of
size S) out no earlier than the link would have delivered it: at t0 + (k + 1) x
S x 8 / rate, less the slack, t0 being the time the burst started. Checked as a
lower bound on time, so a slow machine cannot fail it: for every read, the
frames it got must have been due by the time it returned. The same through
Engine.run (the compiled loop, forwarding s1's frames out of s2), and through
RxRing.recv (the Python path). Unshaped, the whole burst is there at once.
A soft switch gives a shaped port the ring its link's queue needs, an unshaped
one a deeper ring.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.mininet

RATE = 10e6          # bit/s: 1000-byte frames take 0.8 ms each
SIZE = 1000
N = 40
SLACK = 1600 * 8 / RATE
ETH_P_ALL = 0x0003
SOL_PACKET, PACKET_IGNORE_OUTGOING = 263, 23


def _sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _frame(k: int, dst: bytes) -> bytes:
    # dst, src, an experimental ethertype, the index, padding to SIZE
    return dst + bytes.fromhex("020000000001") + b"\x88\xb5" + k.to_bytes(4, "big") + bytes(SIZE - 18)


def _burst(sock: socket.socket, dst: bytes) -> float:
    t0 = time.time()             # the shaper's clock: the kernel's receive timestamps (realtime)
    for k in range(N):
        sock.send(_frame(k, dst))
    return t0


def _early(reads: list[tuple[float, int]], t0: float) -> list[str]:
    """Reads (time it returned, frames handed out so far) that got a frame before the
    link could have delivered it."""
    ser = SIZE * 8 / RATE
    return [f"{n} frames by t0 + {(t - t0) * 1e3:.3f} ms (at most {int((t - t0 + SLACK) / ser)})"
            for t, n in reads if n * ser > t - t0 + SLACK + 1e-6]


def inner() -> dict:
    from testbed.switch.soft.dataplane import _pktio

    for i in (1, 2):
        _sh(f"ip link add h{i} type veth peer name s{i}")
        _sh(f"ip link set h{i} up && ip link set s{i} up")
        _sh(f"sysctl -qw net.ipv6.conf.h{i}.disable_ipv6=1 net.ipv6.conf.s{i}.disable_ipv6=1")
    socks, rings = {}, {}
    for name in ("s1", "s2"):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)    # as the switch's ports: not its own sends
        s.bind((name, 0))
        rings[name] = _pktio.RxRing(s.fileno(), 2048, 256)
        socks[name] = s
    tx = {}
    for name in ("h1", "h2"):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((name, 0))
        s.settimeout(0.2)
        tx[name] = s
    r1 = rings["s1"]
    out: dict = {}

    # Unshaped: the whole burst is handed out at once.
    assert r1.shaper is None and r1.due_in() is None
    _burst(tx["h1"], b"\x02" * 6)
    deadline = time.monotonic() + 2
    while r1.pending() < N and time.monotonic() < deadline:
        time.sleep(0.001)
    got, _ = r1.recv(256)
    out["unshaped"] = len(got)

    # Shaped, read by RxRing.recv (the Python path).
    r1.shape(RATE, SLACK)
    t0 = _burst(tx["h1"], b"\x02" * 6)
    frames, reads, dues = [], [], []
    deadline = time.monotonic() + 5
    while len(frames) < N and time.monotonic() < deadline:
        d = r1.due_in()
        if d is not None:
            dues.append(d)
        got, _ = r1.recv(256)
        t = time.time()
        frames += got
        reads.append((t, len(frames)))
    out["recv"] = {"n": len(frames), "order": [int.from_bytes(f[14:18], "big") for f in frames] == list(range(N)),
                   "intact": all(f == _frame(k, b"\x02" * 6) for k, f in enumerate(frames)),
                   "early": _early(reads, t0), "span_s": reads[-1][0] - t0 if reads else None,
                   "held_some": any(d > 0 for d in dues), "shaper": r1.shaper}

    # Shaped, read by Engine.run (the compiled loop): s1 -> L2 -> s2 -> h2.
    eng_tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    eng = _pktio.Engine([(1, r1, socket.if_nametoindex("s1")), (2, rings["s2"], socket.if_nametoindex("s2"))],
                        eng_tx.fileno())
    dst = bytes.fromhex("0200000000aa")
    eng.set_l2(int.from_bytes(dst, "big").to_bytes(8, sys.byteorder) + (2).to_bytes(8, sys.byteorder, signed=True),
               False, [1, 2])
    t0 = _burst(tx["h1"], dst)
    n, reads = 0, []
    deadline = time.monotonic() + 5
    while n < N and time.monotonic() < deadline:
        got = eng.run(256, None, None, None)
        n += got if isinstance(got, int) else got[0]
        reads.append((time.time(), n))
    arrived = []
    while len(arrived) < N:
        try:
            f = tx["h2"].recv(4096)
        except TimeoutError:
            break
        if f[:6] == dst:
            arrived.append(int.from_bytes(f[14:18], "big"))
    out["engine"] = {"n": n, "early": _early(reads, t0), "arrived": arrived == list(range(N))}
    for r in rings.values():
        r.close()
    for so in socks.values():
        so.close()
    out["ring_frames"] = _switch_ring_frames(Path(sys.argv[1]))
    out["bad_shape"] = []
    for args in ((-1.0, 0.0), (1e6, -1.0), (1e6, 2.0)):
        try:
            r1.shape(*args)
            out["bad_shape"].append(f"accepted {args}")
        except ValueError:
            pass
    return out


def _switch_ring_frames(work: Path) -> dict:
    """A soft switch on s1 (its link shaped) and s2: each port's ring slots."""
    from testbed.switch.soft.config import SwitchConfig
    from testbed.switch.soft.switch import SoftSwitch
    sw = SoftSwitch(SwitchConfig.from_dict({
        "name": "s1", "ports": {"1": "s1", "2": "s2"}, "io_impl": "ring_fastpath", "ingress_mbps": {"1": 10},
        "stats_path": str(work / "stats.json"), "ready_path": str(work / "ready")}))
    try:
        return {no: io.stats()["ring_frames"] for no, io in sw.ports.items()}
    finally:
        sw.close()


def test_a_shaped_port_hands_frames_out_no_faster_than_its_link(tmp_path):
    sys.path.insert(0, str(HERE))
    import netns

    from testbed.switch.soft import dataplane

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    if not dataplane.ring_available():
        pytest.fail("the ring I/O (_pktio) is not built: run `make setup`")
    p = netns.run_in_private_netns([sys.executable, __file__, str(tmp_path)], timeout=120)
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.loads((tmp_path / "result.json").read_text())
    assert r["unshaped"] == N
    rv = r["recv"]
    assert rv["n"] == N and rv["order"] and rv["intact"]
    assert rv["early"] == [], rv["early"]
    assert rv["held_some"]                          # frames did wait for the link
    assert rv["span_s"] >= N * SIZE * 8 / RATE - SLACK
    sh = rv["shaper"]
    assert sh["rate_bps"] == RATE and sh["frames"] == N and sh["queued"] >= N // 2, sh
    eg = r["engine"]
    assert eg["n"] == N and eg["arrived"] and eg["early"] == [], eg
    assert r["bad_shape"] == []
    # A shaped port's ring is its link's queue (4096 slots); an unshaped one only
    # absorbs the switch's waits for a core: deeper (dataplane.rx_ring_bytes).
    assert r["ring_frames"] == {"1": 4096, "2": 16384}, r["ring_frames"]


if __name__ == "__main__":
    work = Path(sys.argv[1])
    (work / "result.json").write_text(json.dumps(inner()))
