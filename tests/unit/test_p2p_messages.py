"""Point-to-point messages in the trace format and the network model."""
import pytest

from hosts.common.trace import TraceRecorder, p2p_group
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import collective_time, message_cost, message_time


def test_send_and_recv_share_a_group_and_sequence():
    w = TraceRecorder(None, host="w1", rank=0, world=2, tdf=1.0)
    m = TraceRecorder(None, host="master", rank=1, world=2, tdf=1.0)
    for k in range(2):
        w.send(0.0, 0.1, peer="master", values=10, tag="push")
        m.recv(0.0, 0.2, peer="w1", values=10, tag="push")
    ws, ms = w.nodes[-1], m.nodes[-1]
    assert ws["group"] == ms["group"] == p2p_group("push", "w1", "master") == "p2p:push:w1>master"
    assert (ws["op"], ms["op"]) == ("send", "recv")
    assert ws["seq"] == ms["seq"] == 1
    assert ws["algo"] == ms["algo"] == "p2p" and ws["bytes"] == 40
    # The reply runs in its own group: the other direction.
    m.send(0.3, 0.4, peer="w1", values=10, tag="push")
    assert m.nodes[-1]["group"] == "p2p:push:master>w1" and m.nodes[-1]["seq"] == 0


def test_a_message_to_oneself_is_refused():
    w = TraceRecorder(None, host="w1", rank=0, world=1, tdf=1.0)
    with pytest.raises(ValueError, match="two different hosts"):
        w.send(0.0, 0.1, peer="w1", values=1)


def test_message_time_grows_with_size_and_matches_a_ring_step():
    p = load_profile("tofino1-100g")
    small, big = message_cost(4096, p), message_cost(1 << 20, p)
    assert 0 < small.link_busy_s < small.total_s < big.total_s
    # 1 MiB at 100 Gbit/s: at least the payload's serialization, less than twice it plus latency.
    assert 8 * (1 << 20) / p["link_rate"] < big.total_s < 2 * 8 * (1 << 20) / p["link_rate"] + 1e-5
    # A 2-rank ring is two steps of one half-size message plus the reduction of one chunk.
    values = 1 << 18
    chunk = values // 2 * 4
    ring = collective_time("allreduce", "ring", values, 4, 2, p)
    assert ring == pytest.approx(2 * message_time(chunk, p) + chunk / p["reduce_rate"])
