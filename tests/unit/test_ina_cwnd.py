"""The INA client's congestion window (hosts/ina/cwnd.py and its use in
hosts/ina/transport.py): against a switch that serves few packets per tick and
loses what overflows its input buffer (BMv2 behind its packet sockets), the
window shrinks until bursts fit, so resends stop; random loss below LOSS_CUT
never shrinks it; held chunks never deadlock the workers."""
from __future__ import annotations

import numpy as np
import pytest

from hosts.ina import cwnd as C
from hosts.ina.transport import InaClient, InProcessSwitch
from testbed.switch.ina import InaPipeline

import ina_harness as H

pytestmark = pytest.mark.unit


class VClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# --- the window's rules ------------------------------------------------------------------

def test_window_grows_by_rounds_and_halves_on_burst_loss_only():
    w = C.CongestionWindow(256, initial=8)
    w.on_answers(8)
    assert w.cwnd == 16                     # slow start: a clean round doubles
    w.on_answers(15)
    assert w.cwnd == 16                     # the round is not over yet
    w.on_answers(1)
    assert w.cwnd == 32
    for _ in range(3):                      # 3 of 32 lost (9 %): random loss, kept
        w.on_loss()
    w.on_answers(29)
    assert w.cwnd == 64 and w.cuts == 0
    for _ in range(16):                     # half a round lost: a slow switch
        w.on_loss()
    w.on_answers(48)
    assert w.cwnd == 32 == w.ssthresh and w.cuts == 1
    w.on_answers(32)
    assert w.cwnd == 33                     # above ssthresh: +1 per round
    assert w.room(30) == 3 and w.room(40) == -7


def test_window_stays_within_min_and_the_protocol_window():
    w = C.CongestionWindow(4)
    assert w.cwnd == 4
    w.on_answers(4)
    assert w.cwnd == 4                      # never above the slots
    for _ in range(20):
        for _ in range(int(w.cwnd)):
            w.on_loss()
    assert w.cwnd == C.MIN_CWND


# --- a client against a switch that drops what it cannot queue -----------------------------

def overflow(pending: list, queue: int) -> None:
    """Keep at most `queue` waiting frames per switch port (one socket buffer per
    port, as BMv2 reads each port with its own packet socket); the rest is lost."""
    seen: dict[int, int] = {}
    keep = []
    for frame, port in pending:
        seen[port] = seen.get(port, 0) + 1
        if seen[port] <= queue:
            keep.append((frame, port))
    pending[:] = keep


def slow_switch_run(n: int, window: int, values: int, ops: int, *, queue: int, per_tick: int,
                    tick_s: float, cwnd_initial: int | None = None) -> tuple[list[InaClient], float]:
    """n workers allreduce `ops` vectors through the real pipeline behind an input
    buffer of `queue` frames per port (the rest of a burst is lost) served `per_tick` frames
    per `tick_s` of virtual time. Returns the clients and the virtual time taken
    (results checked here)."""
    job = H.job_config(1, n, slot_count=window)
    pipe = InaPipeline(H.pipeline_config(job))
    clock = VClock()
    net = InProcessSwitch(pipe, switch_mac=H.SWITCH_MAC, switch_ip=H.SWITCH_IP, clock=clock,
                          batch=True)
    clients = [InaClient(net.endpoint(w["worker_id"], mac=w["mac"], ip=w["ip"],
                                      switch_port=w["port"]), 1, w["worker_id"], n,
                         window=window, clock=clock, timeout_s=0.05, max_retries=10_000,
                         scale_exp=16, congestion_window=True)
               for w in job["workers"]]
    if cwnd_initial is not None:           # the client without congestion control
        for c in clients:
            c._cc = C.CongestionWindow(window, initial=cwnd_initial)
            c._cc.on_loss = lambda: None
    rng = np.random.default_rng(1)
    for op in range(ops):
        vecs = [rng.integers(-100, 100, values).astype(np.float32) for _ in clients]
        hs = [c.submit(v) for c, v in zip(clients, vecs)]
        for _ in range(200_000):
            if all(h.done for h in hs):
                break
            for c in clients:
                c.poll()
            overflow(net.pending, queue)
            net.flush(per_tick)
            clock.t += tick_s
        else:
            raise AssertionError(f"op {op} not done")
        for h in hs:
            assert np.array_equal(h.result, np.sum(vecs, axis=0))
    return clients, clock.t


def test_slow_switch_window_adapts_and_resends_stop():
    kw = dict(n=4, window=64, values=64 * 64, ops=8, queue=12, per_tick=4, tick_s=0.001)
    adaptive, t_adaptive = slow_switch_run(**kw)
    fixed, t_fixed = slow_switch_run(**kw, cwnd_initial=64)
    resent = sum(c.stats.retransmissions for c in adaptive)
    resent_fixed = sum(c.stats.retransmissions for c in fixed)
    assert resent_fixed > 4 * max(resent, 1)          # the open window resends a lot
    assert all(c._cc.cwnd <= 2 * 12 for c in adaptive)      # bursts (about) fit the buffer
    assert all(c.stats.window_cuts >= 1 for c in adaptive)
    assert t_adaptive < t_fixed                       # virtual time: no timing noise


def test_fast_switch_keeps_the_window_open():
    clients, _ = slow_switch_run(n=4, window=64, values=64 * 64, ops=4, queue=10_000,
                              per_tick=10_000, tick_s=0.001)
    assert all(c._cc.cwnd == 64 and c.stats.retransmissions == 0 for c in clients)


def test_one_random_loss_in_a_small_round_does_not_halve():
    w = C.CongestionWindow(256, initial=8)
    w.on_loss()                             # 1 of 8 lost: 12.5 %, but a single loss
    w.on_answers(7)
    assert w.cuts == 0 and w.cwnd == 16
    for _ in range(3):                      # 3 of 16 (19 %): a burst, halved
        w.on_loss()
    w.on_answers(13)
    assert w.cuts == 1 and w.cwnd == 8


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_random_loss_both_ways_never_deadlocks_the_held_chunks(seed):
    """4 workers, window 32, 5 % of frames lost in each direction, the sizes of
    tests/local/test_ina_local.py: every op completes, exactly. A held chunk
    (cwnd full) waits for its worker's older chunks, which wait for the peers'
    contributions; the silent probe must be the oldest chunk in sequence order.
    It once was the lowest slot among equal send times (a whole window leaves at
    one instant): a newer chunk was probed forever and the job deadlocked (seed 5)."""
    import random

    from ina_clients import make_net, run_all

    rng = random.Random(seed)
    net, clients, clock, _ = make_net(4, 32, impair=lambda d, w, f: [] if rng.random() < 0.05 else [0],
                                      timeout_s=0.05, congestion_window=True)
    for it in range(2):
        for size in (1, 300, 4096):
            xs = [np.random.default_rng(100 * it + r).standard_normal(size).astype(np.float32)
                  for r in range(4)]
            hs = [c.submit(x, "sum") for c, x in zip(clients, xs)]
            run_all(net, clients, clock, hs, max_steps=200_000)
            want = np.sum([x.astype(np.float64) for x in xs], axis=0)
            for h in hs:
                np.testing.assert_allclose(h.result, want, atol=1e-4)


def test_the_window_adapts_only_where_the_network_asks_for_it():
    """Off by default (the soft switch keeps up: every chunk of the window goes,
    none is held); BMv2's switch info turns it on for every worker's INA block."""
    from hosts.common.config import InaSettings
    from testbed.workloads.base import ina_settings

    assert InaSettings().congestion_window is False
    net, clients, clock = make_net_plain(window=64)
    h = clients[0].submit(np.ones(64 * 64, np.float32), "sum")
    assert clients[0].win.in_flight == 64 and not clients[0]._held.any() and not h.done
    cc = C.CongestionWindow(64, adaptive=False)
    for _ in range(100):
        cc.on_loss()
    assert cc.cwnd == 64 and cc.cuts == 0
    assert ina_settings({"ina": {"congestion_window": True}}, "w1")["congestion_window"] is True
    assert "congestion_window" not in ina_settings({"ip": "10.0.0.254"}, "w1")


def make_net_plain(window: int):
    from ina_clients import make_net
    return make_net(2, window, scale_exp=16)[:3]


def starved_peers_run(*, cap_resends: bool) -> float:
    """4 workers on the slow switch of slow_switch_run; workers 0 and 2 are
    descheduled 150 of every 300 ticks (a loaded machine), so the others' whole
    windows time out together. Returns the largest resend burst of one poll,
    relative to the sender's congestion window at that moment."""
    window, queue, per_tick, tick_s = 64, 12, 4, 0.001
    job = H.job_config(1, 4, slot_count=window)
    pipe = InaPipeline(H.pipeline_config(job))
    clock = VClock()
    net = InProcessSwitch(pipe, switch_mac=H.SWITCH_MAC, switch_ip=H.SWITCH_IP, clock=clock,
                          batch=True)
    clients = [InaClient(net.endpoint(w["worker_id"], mac=w["mac"], ip=w["ip"],
                                      switch_port=w["port"]), 1, w["worker_id"], 4,
                         window=window, clock=clock, timeout_s=0.05, max_retries=10_000,
                         scale_exp=16, congestion_window=True)
               for w in job["workers"]]
    if not cap_resends:                     # the client before the cap
        for c in clients:
            c._cc.resend_cap = lambda: None
    rng = np.random.default_rng(1)
    worst, tick = 0.0, 0
    for op in range(3):
        vecs = [rng.integers(-100, 100, 2 * 64 * 64).astype(np.float32) for _ in clients]
        hs = [c.submit(v) for c, v in zip(clients, vecs)]
        while not all(h.done for h in hs):
            tick += 1
            assert tick < 400_000, f"op {op} not done"
            for i, c in enumerate(clients):
                if i in (0, 2) and tick % 300 < 150:
                    continue
                before, cw = c.stats.retransmissions, c._cc.cwnd
                c.poll()
                worst = max(worst, (c.stats.retransmissions - before) / max(C.MIN_CWND, int(cw)))
            overflow(net.pending, queue)
            net.flush(per_tick)
            clock.t += tick_s
        for h in hs:
            assert np.array_equal(h.result, np.sum(vecs, axis=0))
    return worst


def test_resends_stay_within_the_congestion_window():
    """On BMv2 under load (ina/loss.yaml, 0 % loss) two workers fell behind and
    the other two resent their whole window every silence for 27 s; each burst
    overflowed the switch again and the job timed out. A timer pass now resends
    at most the window, oldest first. Without the cap this run resends 2.5 windows
    in one poll."""
    assert starved_peers_run(cap_resends=False) > 1.0
    assert starved_peers_run(cap_resends=True) <= 1.0
