"""Projector at other worker counts with a server: the service model (server_model.py)."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import message_time
from testbed.fidelity.projector import project, project_world, synthesize_world
from testbed.fidelity.server_model import service_model

TOFINO = load_profile("tofino1-100g")


def host(name, rank, world, **meta):
    return TraceRecorder(None, host=name, rank=rank, world=world, tdf=100.0, **meta)


def ps_job(workers=4, iters=20, service=(45e-6, 50e-6, 55e-6), values=1024, reply=True, **server_meta):
    """Workers: compute, push to ps, (wait for the reply), compute. The ps serves
    in arrival order: recv, compute (varying around 50 us), reply."""
    ws = [host(f"w{k}", k, workers + 1) for k in range(workers)]
    ps = host("ps", workers, workers + 1, role="server", **server_meta)
    ps.compute(0, 0, hw_s=1e-3, real_s=0)               # setup: not part of any service
    for it in range(iters):
        for k, w in enumerate(ws):
            w.compute(0, 0, hw_s=2e-6, real_s=0)
            w.send(0, 0, peer="ps", values=values, tag="push")
            if reply:
                w.waited(w.recv(0, 0, peer="ps", values=values, tag="pull"))
            ps.waited(ps.recv(0, 0, peer=f"w{k}", values=values, tag="push"))
            ps.compute(0, 0, hw_s=service[(it + k) % len(service)], real_s=0)
            if reply:
                ps.send(0, 0, peer=f"w{k}", values=values, tag="pull")
    return [(r.header, r.nodes) for r in (*ws, ps)]


def test_the_service_model_is_read_from_the_server_trace():
    tr = ps_job()
    h, nodes = tr[-1]
    m = service_model(h, nodes, rank=9)
    assert m.host == "ps" and m.rank == 9 and m.order == "fcfs"
    recorded = [(45e-6, 50e-6, 55e-6)[(it + k) % 3] for it in range(20) for k in range(4)]
    assert m.service_s == {"push": pytest.approx(sum(recorded) / 80, rel=1e-12)}   # the mean, no setup
    assert (m.replies["push"].tag, m.replies["push"].values) == ("pull", 1024)
    assert service_model(*ps_job(reply=False)[-1], rank=0).replies == {}


def test_at_the_recorded_count_the_model_replays_the_server():
    tr = ps_job(workers=4)
    replay = project(tr, TOFINO)
    model = project_world(tr, 4, TOFINO, replay_recorded=False)
    assert model.world == replay.world == 4
    # the replay also pays the server's 1 ms setup; the model does not have it
    assert model.makespan_s == pytest.approx(replay.makespan_s - 1e-3, rel=0.03)
    assert model.messages == replay.messages == 2 * 4 * 20


def test_a_server_bound_job_takes_twice_as_long_with_twice_the_workers():
    tr = ps_job(workers=4)
    at4, at8 = (project_world(tr, w, TOFINO, replay_recorded=False).makespan_s for w in (4, 8))
    assert 20 * 4 * 50e-6 < at4 < 1.1 * 20 * 4 * 50e-6      # the server is the bottleneck
    assert at8 / at4 == pytest.approx(2.0, rel=0.05)


def test_replicated_workers_talk_to_the_same_server_under_their_own_names():
    synth = synthesize_world(ps_job(workers=2, iters=1), 5)
    assert [h["host"] for h, _ in synth] == [f"projected{r}" for r in range(5)]
    sends = [[n["group"] for n in nodes if n["kind"] == "comm"] for _, nodes in synth]
    assert sends[3] == ["p2p:push:projected3>ps", "p2p:pull:ps>projected3"]
    assert {h["recorded_world"] for h, _ in synth} == {2}        # the workers, not the server


def test_messages_without_a_reply_are_served_and_the_worker_goes_on():
    tr = ps_job(workers=2, iters=10, reply=False)
    pr = project_world(tr, 2, TOFINO)
    worker_end = 10 * 2e-6
    assert pr.finish_s[0] < 2 * worker_end                     # the workers never wait for the ps
    assert pr.finish_s[2] == pr.makespan_s > 0.95 * 20 * 50e-6      # the ps serves all 20 pushes


def two_unequal_workers(order, **server_meta):
    """w0 computes 100 us before its push, w1 pushes at once; the ps serves 50 us each."""
    tr = ps_job(workers=2, iters=1, service=(50e-6,), values=1, serve_order=order, **server_meta)
    w0 = host("w0", 0, 3)
    w0.compute(0, 0, hw_s=100e-6, real_s=0)
    w0.send(0, 0, peer="ps", values=1, tag="push")
    w0.waited(w0.recv(0, 0, peer="ps", values=1, tag="pull"))
    w0.compute(0, 0, hw_s=2e-6, real_s=0)
    tr[0] = (w0.header, w0.nodes)
    h, nodes = tr[2]
    return project(tr[:2], TOFINO, services=[service_model(h, nodes, rank=2)])


def test_round_robin_waits_for_the_next_worker_in_rank_order():
    t = message_time(4, TOFINO)
    fcfs, rr = two_unequal_workers("fcfs"), two_unequal_workers("round_robin")
    # first come first served: w1 is served while w0 still computes
    assert fcfs.finish_s[0] == pytest.approx(100e-6 + t + 50e-6 + t + 2e-6, rel=1e-9)
    assert fcfs.finish_s[1] == pytest.approx(2e-6 + t + 50e-6 + t, rel=1e-9)
    # round robin: the server waits for w0 first, w1 is served after it
    assert rr.finish_s[0] == fcfs.finish_s[0]
    assert rr.finish_s[1] == pytest.approx(100e-6 + t + 2 * 50e-6 + t, rel=1e-9)


def test_an_aggregating_server_replies_once_every_worker_is_in():
    t = message_time(4, TOFINO)
    each, barrier = two_unequal_workers("fcfs"), two_unequal_workers("fcfs", reply_after="all")
    # w1's push is served at once, but its reply waits for w0's copy (served 100 + t .. 150 + t us)
    assert barrier.finish_s[1] >= 100e-6 + t + 50e-6 + t
    assert barrier.finish_s[1] == pytest.approx(100e-6 + t + 50e-6 + t, abs=0.5e-6)
    assert each.finish_s[1] < 60e-6 + 2 * t                     # without the barrier it did not wait
    assert barrier.finish_s[0] == pytest.approx(each.finish_s[0], abs=0.5e-6)
    # at other counts the rounds hold: with 8 replicas every push round waits for all 8
    tr = ps_job(workers=4, iters=5, reply_after="all")
    assert project_world(tr, 8, TOFINO).messages == 2 * 8 * 5
    h, nodes = ps_job(iters=1, reply_after="some")[-1]
    with pytest.raises(ValueError, match="reply_after 'some'"):
        service_model(h, nodes, 0)


def test_what_the_model_cannot_play_is_refused_with_the_reason():
    h, nodes = ps_job(iters=1, serve_order="random")[-1]
    with pytest.raises(ValueError, match="serve_order 'random'"):
        service_model(h, nodes, 0)
    ps = host("ps", 2, 3, role="server")
    for k in range(2):
        ps.recv(0, 0, peer=f"w{k}", values=1, tag="push")
    ps.send(0, 0, peer="w0", values=1, tag="pull")            # answers one push of two
    with pytest.raises(ValueError, match="answered 1 of 2 'push' messages"):
        service_model(ps.header, ps.nodes, 0)
    tr = ps_job(workers=1, iters=1)
    w = host("w0", 0, 2)
    w.send(0, 0, peer="ps", values=1024, tag="other")
    with pytest.raises(ValueError, match="server ps never received a 'other' message"):
        project_world([(w.header, w.nodes), tr[1]], 2, TOFINO)


def test_messages_the_server_never_answers_are_left_out_of_the_reply_pairing():
    """An embedding PS: per peer, a lookup (answered with rows) then a push (no reply).
    Without `unanswered_tags` the second rows reply pairs with the first push."""
    def emb_ps(**meta):
        ps = host("emb", 1, 2, role="server", **meta)
        for _ in range(3):
            ps.recv(0, 0, peer="w0", values=8, tag="lookup")
            ps.send(0, 0, peer="w0", values=64, tag="rows")
            ps.recv(0, 0, peer="w0", values=64, tag="push")
        return ps
    with pytest.raises(ValueError, match="answered 2 of 3 'lookup' messages"):
        service_model(emb_ps().header, emb_ps().nodes, 0)
    ps = emb_ps(unanswered_tags=["push"])
    m = service_model(ps.header, ps.nodes, 0)
    assert set(m.replies) == {"lookup"} and m.replies["lookup"].values == 64
    assert set(m.service_s) == {"lookup", "push"}
