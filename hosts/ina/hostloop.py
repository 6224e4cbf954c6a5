"""The INA worker's steady-state receive/send loop, compiled (`Loop` in
hosts/ina/_hostpath.c), around the Python client's own state.

Why: with the packet loops compiled (hosts/ina/hostpath.py), a worker still spent
about 3 us of Python per packet around its system calls (receive.py's burst
handling, the window refill, the timers' arming, the mmsg wrappers). In the
steady state of a bulk tensor every result is the same few steps: check it heads
its slot, fold its round trip, copy its values, send the slot's next chunk of
the same run. `Loop` does exactly those steps for a burst in C, on the client's
own numpy arrays (window.hseq/hci/head_tag, the timers' per-slot arrays), and
with a socket (`UdpIo.loop_socket`) also the recvmmsg/sendmmsg and the wait.

It takes a burst only when every result in it is the run's (`set_run`: the
client's current bulk run, `hot`) and no slot runs out of the run's chunks, so
no handle completes and no run ends inside C; any other burst it leaves
untouched for receive.py's Python path (status OTHER), which stays the
reference (tests/unit/test_ina_hostpath.py compares both on loss, duplication
and reordering schedules). Timers, resends, the silence probes and the
congestion window stay in Python: the loop returns when a timer is due, and the
scalars it changes (RTT estimate, RACK, probe budget, next deadline, last
receive) go in and out through `sc` around each call (`push`/`pull`).
Not used with an adaptive congestion window (BMv2's): holds and releases need
the Python path.
"""
from __future__ import annotations

import math
import time
from types import ModuleType
from typing import Any

import numpy as np

from hosts.ina.chunks import LANES, RX_DTYPE

IDLE, TIMER, OTHER, BUDGET = 0, 1, 2, 3     # Loop.run / Loop.burst status
# sc: the timer scalars, in the order of _hostpath.c's SC_* (the first 9 come back)
SC_FIELDS = ("srtt", "rttvar", "rack", "rto_cache", "next_dl", "last_rx", "probes", "probe_at", "sends",
             "timeout_s", "min_timeout_s", "adaptive_rto", "floor_base_s", "floor_frame_s")
CNT_FIELDS = ("results", "sent", "foreign", "dups", "remaining", "max_exp", "send_errors", "bursts",
              "sleeps", "naps", "gso_msgs", "gso_refused")
TX_MAX = 512            # sends per burst: at most its results (<= receive.DRAIN, <= a recv batch)
RX_BATCH = 256          # datagrams per recvmmsg (UdpIo's batch)
# Loop.run naps for about this many answers' time when they trickle in with at least
# twice as many chunks on the wire (one wakeup per burst instead of per datagram or two)
COALESCE = 16
_NAN = float("nan")


class HostLoop:
    """One client's Loop: its arrays, and the run it takes results for (`run_tag`).
    `fd`: the socket the loop reads and writes itself (-1: bursts come from
    and sends go to the client's io)."""

    def __init__(self, hp: ModuleType, client: Any):
        got = hp.constants()
        if (got.get("LOOP_SC"), got.get("LOOP_CNT")) != (len(SC_FIELDS), len(CNT_FIELDS)):
            raise ImportError(f"hosts/ina/_hostpath.c's Loop state layout ({got.get('LOOP_SC')}, "
                              f"{got.get('LOOP_CNT')}) is not hostloop.py's: rebuild it (make setup)")
        win, t = client.win, client.timers
        self.sc = np.zeros(len(SC_FIELDS), np.float64)
        self.cnt = np.zeros(len(CNT_FIELDS), np.int64)
        self.txo = np.zeros(TX_MAX, np.int64)
        self.txl = np.zeros(TX_MAX, np.int64)
        sock = getattr(client.io, "loop_socket", None)
        sock = sock() if callable(sock) and client._clock is time.monotonic else None
        fd, dest = sock if sock is not None else (-1, b"")
        self.fd = fd
        self.rec = np.zeros(RX_BATCH, RX_DTYPE)
        self.lens = np.zeros(RX_BATCH, np.int64)
        self.c = hp.Loop(win.hseq, win.hci, win.head_tag, t.first, t.order, t.dl, t.rto, t.retries,
                         self.sc, self.cnt, self.txo, self.txl, win.window, client.job_id, fd, dest,
                         self.rec.view(np.uint8), self.lens)
        self.timers = t
        self.run_tag = 0
        self.taken = 0          # results taken in by the loop (the rest: the Python path)
        self.coalesce = COALESCE
        self.io = client.io
        self.gso_msgs = 0       # UDP GSO messages the loop sent
        # diagnostics of Loop.run: calls by status, bursts taken, waits in ppoll
        self.returns = [0, 0, 0, 0]
        self.bursts = self.sleeps = self.naps = 0
        # the clock Loop reads: its own CLOCK_MONOTONIC for time.monotonic, else the client's
        self.clock = None if client._clock is time.monotonic else client._clock

    def bind(self, seg: Any) -> None:
        """Take results for run `seg` (a Seg of more than `window` chunks, built)."""
        if seg.tag == self.run_tag:
            return
        h = seg.handle
        last = seg.last if seg.c0 + seg.n == h.nchunks else LANES
        self.c.set_run(seg.tag, seg.seq0, seg.n, seg.c0, seg.op, h.nchunks - 1 - seg.c0, last,
                       seg.buf, h.ints2d)
        self.run_tag = seg.tag

    @property
    def gso(self) -> bool:
        """Send runs of equal-length chunks as UDP GSO messages: the socket's setting
        (UdpIo.gso), which a refusal by the kernel, here or in UdpIo, turns off."""
        return bool(getattr(self.io, "gso", False))

    def unbind(self) -> None:
        self.c.clear_run()
        self.run_tag = 0

    def push(self, h: Any) -> None:
        """Python's timer scalars and the run's handle counters into sc/cnt."""
        t = self.timers
        self.sc[:] = (_NAN if t.srtt is None else t.srtt, t.rttvar, t.rack, t.rto_cache, t.next_dl,
                      _NAN if t.last_rx is None else t.last_rx, t.probes, t.probe_at, t.sends, t.timeout_s,
                      t.min_timeout_s, 1.0 if t.adaptive_rto else 0.0, t.floor_base_s, t.floor_frame_s)
        self.cnt[:] = (0, 0, 0, 0, h.remaining, h.max_exp, 0, 0, 0, 0, 0, 0)

    def pull(self, h: Any, stats: Any) -> int:
        """sc/cnt back into the timers, the handle and the stats; the send errors."""
        t = self.timers
        srtt, var, rack, rto_cache, next_dl, last_rx, probes, probe_at, sends = self.sc[:9].tolist()
        t.srtt = None if math.isnan(srtt) else srtt
        t.rttvar, t.rack, t.rto_cache, t.next_dl = var, rack, rto_cache, next_dl
        t.last_rx = None if math.isnan(last_rx) else last_rx
        t.probes, t.probe_at, t.sends = int(probes), probe_at, sends
        (results, sent, foreign, dups, remaining, max_exp, errors, bursts, sleeps, naps, gso_msgs,
         gso_refused) = self.cnt.tolist()
        self.naps += naps
        self.gso_msgs += gso_msgs
        if gso_refused:
            self.io.gso = False
        self.taken += results
        self.bursts += bursts
        self.sleeps += sleeps
        stats.results += results
        stats.packets_sent += sent
        stats.chunks_sent += sent
        stats.foreign_packets += foreign
        stats.duplicates_ignored += dups
        h.remaining, h.max_exp = remaining, max_exp
        return errors
