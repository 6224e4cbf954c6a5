"""The INA client on a machine whose CPU it shares (issue 10 part 3): a worker
descheduled for longer than its retransmission timeout must not resend the
chunks whose results arrived while it was away.

`PausingNet` is a virtual-clock simulator of one worker, the real switch
pipeline (InaPipeline) and a lossless link of fixed one-way latency. The
client's own clock is the simulator's: every `pause_every`-th time the client
reads it, the process "was descheduled" for `pause_s`, during which the
network keeps going (contributions reach the switch, results queue up in the
worker's socket). The client's blocking `wait` is what runs, as in a worker.
"""
from __future__ import annotations

import heapq

import numpy as np
import pytest

from hosts.ina import fixed_point as fp
from hosts.ina.timers import RetransmitTimers
from hosts.ina.transport import LANES, InaClient, InaTimeoutError
from testbed import wire
from testbed.switch.ina import InaPipeline

import ina_harness as H

pytestmark = pytest.mark.unit


class PausingNet:
    def __init__(self, *, latency_s: float, pause_s: float, pause_every: int, window: int,
                 drop_first=(), stalls=(), **client_kw):
        self.job = H.job_config(1, 1, slot_count=window)
        self.w = self.job["workers"][0]
        self.pipe = InaPipeline(H.pipeline_config(self.job), vectorized=True, scalar_below=1)
        self.t, self.latency_s = 0.0, latency_s
        self.pause_s, self.pause_every, self.reads, self.pauses = pause_s, pause_every, 0, 0
        self.events: list = []               # (time, order, kind, payload)
        self.order = 0
        self.rxq: list[bytes] = []           # the worker's socket receive queue
        self.sends: list[tuple[int, bool]] = []    # (seq, retx) in send order
        self.drop_first = set(drop_first)    # seqs whose first send is lost
        self.stalls = list(stalls)           # (start, end): the switch (or a peer) is stalled
        self.client = InaClient(self, 1, 0, 1, window=window, clock=self.clock, **client_kw)

    # -- the client's clock: a read may come after a pause -----------------------------
    def clock(self) -> float:
        self.reads += 1
        if self.pause_every and self.reads % self.pause_every == 0:
            self.pauses += 1
            self.run_until(self.t + self.pause_s)
        return self.t

    # -- the network ----------------------------------------------------------------------
    def run_until(self, t: float) -> None:
        while self.events and self.events[0][0] <= t:
            te, _, kind, payload = heapq.heappop(self.events)
            self.t = max(self.t, te)
            if kind == "out":
                self.rxq.append(payload)
                continue
            stall_end = next((b for a, b in self.stalls if a <= te < b), None)
            if stall_end is not None:        # nothing is aggregated until the stall ends
                self.push(stall_end, kind, payload)
                continue
            frame = wire.eth_ip_udp(self.w["mac"], H.SWITCH_MAC, self.w["ip"], H.SWITCH_IP,
                                    wire.INA_PORT_BASE, wire.INA_PORT_BASE, len(payload)) + payload
            for _, out in self.pipe.process_batch([frame], [self.w["port"]], te):
                self.push(te + self.latency_s, "out", out[wire.INA_OFFSET:])
        self.t = max(self.t, t)

    def push(self, t: float, kind: str, payload: bytes) -> None:
        self.order += 1
        heapq.heappush(self.events, (t, self.order, kind, payload))

    # -- the io the client sees -------------------------------------------------------------
    def send(self, payload: bytes) -> None:
        hd = wire.unpack_header(payload, 0)
        retx = bool(hd.flags & wire.FLAG_RETX)
        self.sends.append((hd.seq, retx))
        if not retx and hd.seq in self.drop_first:
            return
        self.push(self.t + self.latency_s, "in", payload)

    def recv(self, timeout: float) -> bytes | None:
        if not self.rxq and timeout > 0:        # block: time passes until a result or the timeout
            end = self.t + timeout
            while not self.rxq and self.events and self.events[0][0] <= end:
                self.run_until(self.events[0][0])
            if not self.rxq:
                self.t = max(self.t, end)
        return self.rxq.pop(0) if self.rxq else None

    def close(self) -> None:
        pass


def _run(net: PausingNet, chunks: int) -> np.ndarray:
    x = np.random.default_rng(1).uniform(-1, 1, chunks * LANES).astype(np.float32)
    y = net.client.wait(net.client.submit(x, scale_exp=20))
    assert np.array_equal(y, fp.from_fixed(fp.quantize(x, 20, 1)[0], 20))
    return y


@pytest.mark.parametrize("pause_every", [1, 2, 3, 5, 7])   # where in the loop the pauses land
def test_a_descheduled_worker_reads_its_socket_before_firing_timers(pause_every):
    """Lossless link, 1 ms each way, a 16-chunk window, the worker descheduled for
    60 ms (6x its 10 ms timeout) every pause_every-th clock read: every result it
    waited for is in its socket when it wakes. Nothing may be resent (the old
    client fired its timers first and resent the whole window after a pause)."""
    net = PausingNet(latency_s=1e-3, pause_s=0.06, pause_every=pause_every, window=16,
                     timeout_s=0.01, min_timeout_s=0.01)
    _run(net, 256)
    st = net.client.stats
    assert net.pauses >= 4                        # the schedule did deschedule it
    assert st.results == 256 and st.retransmissions == 0, st.summary()
    assert [s for s, r in net.sends if r] == []


def test_a_descheduled_worker_still_resends_what_was_lost():
    """The same pauses with two first sends lost: the lost chunks are resent
    (the socket read before the timers does not hide a real loss), and only they."""
    lost = {37, 200}
    net = PausingNet(latency_s=1e-3, pause_s=0.06, pause_every=5, window=16,
                     timeout_s=0.01, min_timeout_s=0.01, drop_first=lost)
    _run(net, 256)
    resent = {s for s, r in net.sends if r}
    assert resent == lost
    assert net.client.stats.results == 256


def test_losses_inside_one_burst_are_found_by_send_order_not_by_silence():
    """One window sent in one burst at one clock reading (a 64-value x 64-chunk tensor
    into a 64-chunk window: the quickstart's 16384 values at 1 % loss), six first
    sends lost in its middle. The rest are answered, so each lost chunk has a later
    chunk of the same burst answered: RACK resends all six at their first timeout,
    one round. By send time they tie with the answered ones; the old rule then saw
    "silence" and probed 1, 2, 4 chunks at backed-off timeouts (634 ms p50 for that
    point of the quickstart, against about one timeout)."""
    lost = {3, 11, 20, 31, 42, 50}
    net = PausingNet(latency_s=1e-3, pause_s=0, pause_every=0, window=64,
                     timeout_s=0.01, min_timeout_s=0.01, drop_first=lost)
    _run(net, 64)
    st = net.client.stats
    assert {s for s, r in net.sends if r} == lost and st.retransmissions == len(lost), st.summary()
    assert st.retx_silent == 0
    assert net.t < 0.01 + 4 * 1e-3 + 1e-3, net.t      # one timeout and one round trip after the burst


@pytest.mark.parametrize("compiled_loop", [True, False])
def test_a_loss_behind_answered_chunks_is_resent_after_a_round_trip_and_a_quarter(compiled_loop):
    """RACK's reordering timer: 2 ms round trips, a 10 ms retransmission timeout (its
    floor), one first send lost among 64 sent at once. Once later chunks are answered,
    the lost one is resent 1.25 round trips after it was sent, long before its 10 ms
    timeout (the op used to take one timeout and a round trip, 12 ms)."""
    net = PausingNet(latency_s=1e-3, pause_s=0, pause_every=0, window=64,
                     timeout_s=0.01, min_timeout_s=0.01, drop_first={5})
    if not compiled_loop:
        net.client._loop = None
    _run(net, 64)
    assert [s for s, r in net.sends if r] == [5]
    assert net.t < 0.0025 + 0.002 + 1e-3, net.t      # resent at ~2.5 ms, answered 2 ms later


def test_rtt_is_learned_only_from_chunks_answered_without_a_resend():
    """Karn's rule: the answer to a resent chunk may be either copy's, so it
    never feeds the RTT estimate (nor RACK's latest answered send order)."""
    t = RetransmitTimers(4, timeout_s=0.5, backoff=2.0, max_timeout_s=None, adaptive_rto=True,
                         min_timeout_s=0.001)
    t.arm_one(0, 0.0, 0.5)
    t.answered_one(0, 0.01)                            # clean: 10 ms
    assert t.srtt == pytest.approx(0.01)
    srtt, var, rto, rack = t.srtt, t.rttvar, t.rto_cache, t.rack
    t.arm_one(1, 1.0, t.rto_cache)
    t.resent(1, 1.1)
    t.answered_one(1, 1.3)                             # resent: no sample
    t.arm_many(np.array([2, 3]), 2.0, t.rto_cache)
    t.resent(3, 2.1)
    t.answered_many(np.array([2, 3]), 2.02)            # only slot 2's 20 ms counts
    # sends in order: 0, 1, 1 again, 2, 3, 3 again: RACK is slot 2's order, not 3's resend
    assert (t.srtt, t.rack) == (pytest.approx(srtt + 0.125 * (0.02 - srtt)), 3.0)
    assert t.order.tolist() == [0.0, 2.0, 3.0, 5.0]
    t2 = RetransmitTimers(4, timeout_s=0.5, backoff=2.0, max_timeout_s=None, adaptive_rto=True,
                          min_timeout_s=0.001)
    t2.srtt, t2.rttvar, t2.rto_cache, t2.rack = srtt, var, rto, rack
    t2.update_rtt(0.02)
    assert (t.srtt, t.rttvar, t.rto_cache) == pytest.approx((t2.srtt, t2.rttvar, t2.rto_cache))


def test_a_stalled_switch_gets_probes_not_windows():
    """The switch (as well: a peer worker, whose contributions every slot needs)
    stalls for 200 ms, 20 timeouts: nothing comes back. Resending the whole window
    at every expiry (the old rule) sends the switch 16 x 4 copies during one stall;
    in silence the client sends probes, one per expiry, and the whole window only
    once answers to its resends show the network delivers."""
    net = PausingNet(latency_s=1e-3, pause_s=0, pause_every=0, window=16, timeout_s=0.01,
                     min_timeout_s=0.01, stalls=[(0.005, 0.205)])
    _run(net, 256)
    st = net.client.stats
    assert st.results == 256
    assert 1 <= st.retransmissions <= 5, st.summary()       # probes at 10, 30, 70, 150 ms
    assert st.retx_silent == st.retransmissions


def test_a_dead_switch_is_given_up_on_after_max_retries_probes():
    """Silence that never ends (the switch is gone): the same oldest chunk is the
    probe every time, so after max_retries of its resends the client fails with
    the usual diagnosis; a 64-chunk window does not multiply that time by 64."""
    net = PausingNet(latency_s=1e-3, pause_s=0, pause_every=0, window=64, timeout_s=0.01,
                     min_timeout_s=0.01, max_retries=4, stalls=[(0.0, 1e9)])
    x = np.ones(64 * 64, np.float32)
    with pytest.raises(InaTimeoutError, match="no result for seq 0 .* after 4 retransmissions") as e:
        net.client.wait(net.client.submit(x, scale_exp=8))
    assert e.value.seq == 0 and e.value.retries == 4
    assert [s for s, r in net.sends if r] == [0] * 4
    assert net.t < 0.01 * (1 + 2 + 4 + 8 + 16) + 0.01      # the probe's own backoff, once
