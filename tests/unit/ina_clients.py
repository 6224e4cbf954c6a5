"""InaClients of one job on the real switch pipeline in process (InaPipeline
behind hosts.ina's InProcessSwitch) with a shared virtual clock, and a
network that impairs frames by a schedule: the set-up of the transport's
exactly-once tests (test_ina_transport.py), the compiled-vs-numpy host path
differential (test_ina_hostpath.py) and the congestion window's (test_ina_cwnd.py).

    net, clients, clock, pipe = make_net(3, 16, impair=scheduled(schedule), batch=True)
    hs = [c.submit(x) for c, x in zip(clients, xs)]; run_all(net, clients, clock, hs)
"""
from __future__ import annotations

from hypothesis import strategies as st

from hosts.ina.transport import InaClient, InProcessSwitch
from testbed.switch.ina import InaPipeline

import ina_harness as H

# What the network does to one frame (hypothesis draws (action, k) pairs): pass,
# lose, duplicate (the copy k-1 frames later) or hold (deliver it k frames later).
ACTIONS = st.sampled_from(["ok"] * 5 + ["drop", "dup", "hold"])


def scheduled(schedule):
    """An InProcessSwitch `impair` that treats frames, in order, as `schedule`
    ([(action, k)]) says; frames after its end pass."""
    sched = list(schedule)

    def impair(direction, wid, frame):
        if not sched:
            return [0]
        what, k = sched.pop(0)
        return {"ok": [0], "drop": [], "dup": [0, k - 1], "hold": [k]}[what]
    return impair


class VClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, to: float) -> None:
        self.t = max(self.t, to)


def make_net(n: int, window: int, *, impair=None, batch: bool = False, vectorized: bool = True,
             job_id: int = 1, **client_kw):
    """One job of n workers on a fresh InaPipeline; clients on a shared virtual clock."""
    job = H.job_config(job_id, n, slot_count=window)
    pipe = InaPipeline(H.pipeline_config(job), vectorized=vectorized, scalar_below=1)
    clock = VClock()
    net = InProcessSwitch(pipe, switch_mac=H.SWITCH_MAC, switch_ip=H.SWITCH_IP, impair=impair,
                          clock=clock, batch=batch)
    kw = dict(window=window, clock=clock, timeout_s=0.01, max_retries=10_000)
    kw.update(client_kw)
    clients = [InaClient(net.endpoint(w["worker_id"], mac=w["mac"], ip=w["ip"],
                                      switch_port=w["port"]), job_id, w["worker_id"], n, **kw)
               for w in job["workers"]]
    return net, clients, clock, pipe


def run_all(net, clients, clock, handles, flush_sizes=(64,), max_steps=50_000) -> None:
    """Deliver, flush switch batches, release held frames, then fire timers."""
    sizes = list(flush_sizes) or [64]
    for step in range(max_steps):
        if all(h.done for h in handles):
            return
        progress = sum(c.poll() for c in clients)
        if net.pending:
            net.flush(sizes[step % len(sizes)])
        elif not progress:
            if net.held:
                net.release_held()
            else:
                clock.advance(min(d for d in (c.next_deadline() for c in clients) if d is not None))
    raise AssertionError("not done: the transport deadlocked")


def completions(pipe, job_id: int = 1) -> int:
    return pipe.counters_by_name["Ingress.ina_results"].read(job_id)
