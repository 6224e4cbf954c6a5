"""Projector: point-to-point messages (send/recv) and server traces beside workers."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import collective_time, message_cost, message_time
from testbed.fidelity.projector import project

TOFINO = load_profile("tofino1-100g")
MIB = 1 << 20


def host(name, rank, world, role=None):
    meta = {"role": role} if role else {}
    return TraceRecorder(None, host=name, rank=rank, world=world, tdf=100.0, **meta)


def traces_of(*recorders):
    return [(r.header, r.nodes) for r in recorders]


def test_push_and_reply_by_hand():
    w, ps = host("w0", 0, 2), host("ps", 1, 2, "server")
    w.compute(0, 0, hw_s=1e-6, real_s=0)
    w.send(0, 0, peer="ps", values=1024, tag="push")            # 4096 B
    ps.waited(ps.recv(0, 0, peer="w0", values=1024, tag="push"))
    ps.compute(0, 0, hw_s=2e-6, real_s=0)
    ps.send(0, 0, peer="w0", values=256, tag="pull")            # 1024 B
    w.waited(w.recv(0, 0, peer="ps", values=256, tag="pull"))
    w.compute(0, 0, hw_s=1e-6, real_s=0)
    pr = project(traces_of(w, ps), TOFINO)
    expect = 1e-6 + message_time(4096, TOFINO) + 2e-6 + message_time(1024, TOFINO) + 1e-6
    assert pr.makespan_s == pytest.approx(expect, rel=1e-12)
    assert pr.finish_s[0] == pr.makespan_s
    assert pr.messages == 2 and pr.collectives == 0
    assert pr.world == 1                                        # the server is not a worker
    assert pr.compute_s[1] == pytest.approx(2e-6, rel=1e-12)


def fan_in(n, nbytes, sender_compute=0.0, wait_send=False):
    """n workers each send one message to `ps` at t = 0; the server waits for all."""
    ws = [host(f"w{k}", k, n + 1) for k in range(n)]
    ps = host("ps", n, n + 1, "server")
    for k, w in enumerate(ws):
        w.compute(0, 0, hw_s=0.0, real_s=0)
        s = w.send(0, 0, peer="ps", values=nbytes // 4, tag="push")
        if wait_send:
            w.waited(s)
        w.compute(0, 0, hw_s=sender_compute, real_s=0)
        ps.waited(ps.recv(0, 0, peer=f"w{k}", values=nbytes // 4, tag="push"))
    ps.compute(0, 0, hw_s=0.0, real_s=0)
    return traces_of(*ws, ps)


def test_senders_to_one_receiver_serialize_on_its_downlink():
    c = message_cost(MIB, TOFINO)
    pr = project(fan_in(4, MIB), TOFINO)
    # the k-th message is in after k link-busy times plus one message's latency tail
    assert pr.finish_s[4] == pytest.approx(4 * c.link_busy_s + (c.total_s - c.link_busy_s), rel=1e-12)
    alone = project(fan_in(4, MIB), TOFINO, contention=False)
    assert alone.finish_s[4] == pytest.approx(c.total_s, rel=1e-12)
    # each sender's bytes left its own uplink at line rate (the switch buffers what the
    # server's port cannot take yet): no sender waits for the others' turns
    assert pr.finish_s[3] == pytest.approx(c.link_busy_s, rel=1e-12)
    assert pr.finish_s[0] == pytest.approx(c.link_busy_s, rel=1e-12)


def test_a_busy_receiver_does_not_block_its_senders_other_messages():
    """w0 sends to the busy `ps` (three others push to it at once), then to the idle
    `ps2`: its second message leaves after its own first one only (one link-busy
    time) and is in at link_busy + message_time, not behind the queue on ps's port
    (fabric.py used to hold w0's uplink until ps's downlink took the first message)."""
    c = message_cost(MIB, TOFINO)
    ws = [host(f"w{k}", k, 6) for k in range(4)]
    ps, ps2 = host("ps", 4, 6, "server"), host("ps2", 5, 6, "server")
    for k in (1, 2, 3, 0):                 # w0's message to ps is the last in the queue
        ws[k].compute(0, 0, hw_s=0.0 if k else 1e-9, real_s=0)
        ws[k].send(0, 0, peer="ps", values=MIB // 4, tag="push")
        ps.waited(ps.recv(0, 0, peer=f"w{k}", values=MIB // 4, tag="push"))
    ws[0].send(0, 0, peer="ps2", values=MIB // 4, tag="push")
    ps2.waited(ps2.recv(0, 0, peer="w0", values=MIB // 4, tag="push"))
    ps.compute(0, 0, hw_s=0.0, real_s=0)
    ps2.compute(0, 0, hw_s=0.0, real_s=0)
    pr = project(traces_of(*ws, ps, ps2), TOFINO)
    assert pr.finish_s[5] == pytest.approx(1e-9 + c.link_busy_s + c.total_s, rel=1e-9)
    assert pr.finish_s[4] == pytest.approx(4 * c.link_busy_s + (c.total_s - c.link_busy_s), rel=1e-9)


def test_a_sender_that_does_not_wait_overlaps_its_compute_with_the_transfer():
    c = message_cost(MIB, TOFINO)
    assert c.link_busy_s < 200e-6
    pr = project(fan_in(1, MIB, sender_compute=200e-6), TOFINO)
    assert pr.finish_s[0] == pytest.approx(200e-6, rel=1e-12)          # compute hid the send
    assert pr.finish_s[1] == pytest.approx(c.total_s, rel=1e-12)
    waits = project(fan_in(1, MIB, sender_compute=200e-6, wait_send=True), TOFINO)
    assert waits.finish_s[0] == pytest.approx(c.link_busy_s + 200e-6, rel=1e-12)


def test_the_receiver_not_yet_waiting_does_not_delay_the_message():
    w, ps = host("w0", 0, 2), host("ps", 1, 2, "server")
    w.compute(0, 0, hw_s=1e-6, real_s=0)
    w.send(0, 0, peer="ps", values=1024, tag="push")
    ps.compute(0, 0, hw_s=50e-6, real_s=0)                  # busy while the message arrives
    ps.waited(ps.recv(0, 0, peer="w0", values=1024, tag="push"))
    ps.compute(0, 0, hw_s=1e-6, real_s=0)
    pr = project(traces_of(w, ps), TOFINO)
    assert message_time(4096, TOFINO) < 49e-6
    assert pr.finish_s[1] == pytest.approx(51e-6, rel=1e-12)


def test_allreduce_beside_a_server_trace_is_costed_with_the_workers():
    ws = [host(f"w{k}", k, 3) for k in range(2)]
    ps = host("ps", 2, 3, "server")
    for w in ws:
        w.compute(0, 0, hw_s=1e-6, real_s=0)
        w.waited(w.comm(0, 0, op="allreduce", algo="ring", values=4096))
        w.compute(0, 0, hw_s=1e-6, real_s=0)
    ps.compute(0, 0, hw_s=1e-6, real_s=0)
    pr = project(traces_of(*ws, ps), TOFINO)
    ring2 = collective_time("allreduce", "ring", 4096, 4, 2, TOFINO)
    assert ring2 != collective_time("allreduce", "ring", 4096, 4, 3, TOFINO)
    assert pr.makespan_s == pytest.approx(2e-6 + ring2, rel=1e-12)


def test_mismatched_messages_are_refused_before_running():
    w, ps = host("w0", 0, 2), host("ps", 1, 2, "server")
    w.send(0, 0, peer="ps", values=10, tag="push")
    ps.recv(0, 0, peer="w0", values=12, tag="push")
    with pytest.raises(ValueError, match=r"message p2p:push:w0>ps#0: recv of 12x4 B on ps, send of 10x4 B"):
        project(traces_of(w, ps), TOFINO)
    w, ps = host("w0", 0, 2), host("ps", 1, 2, "server")
    w.compute(0, 0, hw_s=1e-6, real_s=0)
    ps.recv(0, 0, peer="w0", values=10, tag="push")
    with pytest.raises(ValueError, match=r"message p2p:push:w0>ps#0: no send node"):
        project(traces_of(w, ps), TOFINO)
    w = host("w0", 0, 1)
    w.send(0, 0, peer="nobody", values=10)
    with pytest.raises(ValueError, match="peer nobody has no trace"):
        project(traces_of(w), TOFINO)


def test_an_allgather_is_projected_with_its_ring_time():
    ws = [host(f"w{k}", k, 4) for k in range(4)]
    for w in ws:
        w.compute(0, 0, hw_s=1e-6, real_s=0)
        w.waited(w.comm(0, 0, op="allgather", algo="ring", values=5000))
        w.compute(0, 0, hw_s=1e-6, real_s=0)
    pr = project(traces_of(*ws), TOFINO)
    assert pr.makespan_s == pytest.approx(2e-6 + collective_time("allgather", "ring", 5000, 4, 4, TOFINO),
                                          rel=1e-12)


def test_a_collective_and_a_message_share_the_members_links():
    """w0 and w1 allreduce 1 MiB (ring) while w0 also sends 1 MiB to `ps`: one link per
    host whatever the traffic, so one of the two waits for the other's serialization
    (fabric.py used to give collectives a link of their own: both ran as if alone)."""
    from testbed.fidelity.network_model import collective_cost
    coll = collective_cost("allreduce", "ring", MIB // 4, 4, 2, TOFINO)
    msg = message_cost(MIB, TOFINO)
    w0, w1, ps = host("w0", 0, 3), host("w1", 1, 3), host("ps", 2, 3, "server")
    for w in (w0, w1):
        w.compute(0, 0, hw_s=0.0, real_s=0)
    w0.send(0, 0, peer="ps", values=MIB // 4, tag="push")
    ps.waited(ps.recv(0, 0, peer="w0", values=MIB // 4, tag="push"))
    ps.compute(0, 0, hw_s=0.0, real_s=0)
    for w in (w0, w1):
        w.waited(w.comm(0, 0, op="allreduce", algo="ring", values=MIB // 4))
        w.compute(0, 0, hw_s=0.0, real_s=0)
    tr = traces_of(w0, w1, ps)
    alone = project(tr, TOFINO, contention=False)
    assert alone.makespan_s == pytest.approx(max(coll.total_s, msg.total_s), rel=1e-12)
    shared = project(tr, TOFINO)
    # the message took w0's uplink first: the allreduce starts when it is out
    assert shared.finish_s[1] == pytest.approx(msg.link_busy_s + coll.total_s, rel=1e-9)
    assert shared.finish_s[2] == pytest.approx(msg.total_s, rel=1e-9)


def test_an_endpoint_on_another_hosts_nic_shares_its_links():
    """A trace whose header names `nic: w0` (a process on w0's host under its own name)
    queues on w0's uplink: two 1 MiB sends to two servers, one from w0 and one from
    w0-shadow, leave one after the other; without `nic` they leave together."""
    c = message_cost(MIB, TOFINO)

    def job(nic):
        w, sh = host("w0", 0, 4), host("w0-shadow", 1, 4)
        if nic:
            sh.header["nic"] = "w0"
        a, b = host("a", 2, 4, "server"), host("b", 3, 4, "server")
        for src, dst in ((w, a), (sh, b)):
            src.compute(0, 0, hw_s=0.0, real_s=0)
            src.send(0, 0, peer=dst.header["host"], values=MIB // 4, tag="push")
            dst.waited(dst.recv(0, 0, peer=src.header["host"], values=MIB // 4, tag="push"))
            dst.compute(0, 0, hw_s=0.0, real_s=0)
        return traces_of(w, sh, a, b)
    apart, shared = project(job(False), TOFINO), project(job(True), TOFINO)
    assert apart.makespan_s == pytest.approx(c.total_s, rel=1e-12)
    assert shared.makespan_s == pytest.approx(c.link_busy_s + c.total_s, rel=1e-9)
