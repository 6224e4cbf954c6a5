"""Trees: a path through k switches is charged L0 once, plus transit and one
serialization per extra switch, by the delay line, the model, the monitor and
the projector alike; on a star (k = 1) nothing changes, bit for bit."""
from __future__ import annotations

import json

import pytest

from hosts.common.network_dilation import DilationSettings
from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.monitor import fidelity_report, load_traces
from testbed.fidelity.paths import PATHS_FILE, collective_switches, write_path_table
from testbed.fidelity.network_model import (P2P_HEADER_BYTES, collective_cost, collective_time,
                                            dilation_hardware, hop_latency_s, ina_stream, message_cost,
                                            message_time, p2p_stream, propagation_s, serialization_s,
                                            transit_latency_s)
from testbed.fidelity.projector import project
from testbed.net.topology import plan_topology
from testbed.switch.soft.config import ConfigError, SwitchConfig
from testbed.switch.soft.dilation import DelayLine, DilationControl

pytestmark = pytest.mark.unit

TOFINO = load_profile("tofino1-100g")
HOST = load_profile("tor-100g-host")
TDF = 1000.0
UPLINK = 9                      # a switch's port cabled to another switch


def old_message_cost(payload, p):
    """message_cost as it was before trees (copied formula: L0 + sum s + s_last)."""
    st = p2p_stream(payload, p)
    busy = st.serialization_s(p)
    return hop_latency_s(p) + busy + serialization_s(st.last, p), busy


# -- model ---------------------------------------------------------------------
@pytest.mark.parametrize("profile", [TOFINO, HOST])
@pytest.mark.parametrize("payload", [0, 100, 1458, 1459, 4096, 100_000])
def test_one_switch_message_is_the_old_model_bit_for_bit(profile, payload):
    total, busy = old_message_cost(payload, profile)
    for c in (message_cost(payload, profile), message_cost(payload, profile, 1)):
        assert (c.total_s, c.link_busy_s) == (total, busy)          # ==, not approx
    assert message_time(payload, profile, 1) == total


def test_two_switches_one_frame_by_hand():
    """L0 once, one transit (cable + pipeline), and the frame serialized on each of
    its three links (host-leaf, leaf-spine, spine-host): store and forward."""
    p = TOFINO
    s = (100 + P2P_HEADER_BYTES + p["fcs_bytes"] + p["preamble_ifg_bytes"]) * 8 / p["link_rate"]
    transit = p["cable_length"] * p["propagation_delay"] + p["switch_pipeline_latency"]
    assert transit_latency_s(p) == pytest.approx(transit, rel=1e-15)
    assert transit < hop_latency_s(p) / 2       # an extra switch is not another host hop
    assert message_time(100, p, 2) == pytest.approx(hop_latency_s(p) + transit + 3 * s, rel=1e-12)
    assert message_time(100, p, 3) == pytest.approx(hop_latency_s(p) + 2 * transit + 4 * s, rel=1e-12)
    # the links are busy as long as on a star: the serialization of the message once
    assert message_cost(100_000, p, 3).link_busy_s == message_cost(100_000, p).link_busy_s


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_switch_count_is_refused(bad):
    with pytest.raises(ValueError, match="switches must be an integer >= 1"):
        message_cost(10, TOFINO, bad)


# -- delay line ------------------------------------------------------------------
def settings(profile=TOFINO, **kw):
    return DilationSettings(version=1, tdf=TDF, **{**dilation_hardware(profile), **kw})


def cross(switches, port_in, port_out, frames, now):
    """Frames from a host through a chain of delay lines (one per switch), on a
    virtual clock: each switch's egress time is the next one's arrival."""
    out = [(now, f) for f in frames]
    for k, line in enumerate(switches):
        pin = port_in if k == 0 else UPLINK
        pout = port_out if k == len(switches) - 1 else UPLINK
        nxt = []
        for t, f in out:
            for t_in, (_, g) in line.uplink(pin, [f], t):
                nxt += [(due, g) for due, (_, g) in line.schedule(pout, [g], t_in)]
        out = nxt
    return [t for t, _ in out]


@pytest.mark.parametrize("comp", [0.0, 2e-4])
def test_star_paths_are_scheduled_as_before_even_on_a_switch_with_uplinks(comp):
    """A host-to-host path through one switch: the same times, bit for bit, whether
    or not the switch has inter-switch ports (and whatever the compensation)."""
    frames = [b"a" * 1476, b"b" * 1476, b"c" * 90]
    old = DelayLine(settings(compensate_s=comp))
    new = DelayLine(settings(compensate_s=comp), inter_switch_ports=frozenset({UPLINK}))
    assert cross([new], 1, 2, frames, 3.0) == cross([old], 1, 2, frames, 3.0)
    s = settings(compensate_s=comp)
    ser = [TDF * s.serialization_s(len(f)) for f in frames]
    # one frame alone, by hand: TDF (s + L0 + s) - compensation
    one = DelayLine(settings(compensate_s=comp), inter_switch_ports=frozenset({UPLINK}))
    assert cross([one], 1, 2, frames[:1], 0.0)[0] == pytest.approx(
        TDF * s.latency_s - comp + 2 * ser[0], rel=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_delay_line_through_k_switches_equals_the_model(k):
    """A message of full frames through k switches (virtual clock) is in when
    message_time(..., switches=k) x TDF says; a one-frame message too."""
    per = int(TOFINO["p2p_mtu_bytes"]) - 28
    for payload in (100, 3 * per):
        st = p2p_stream(payload, TOFINO)
        frames = [b"x" * st.full] * st.n_full + [b"x" * st.last]
        assert len({len(f) for f in frames}) == 1          # 1 frame, or 3 full ones
        lines = [DelayLine(settings(), inter_switch_ports=frozenset({UPLINK})) for _ in range(k)]
        done = cross(lines, 1, 2, frames, 0.0)[-1]
        assert done == pytest.approx(TDF * message_time(payload, TOFINO, k), rel=1e-12)
    # before: every switch charged L0 and the inter-switch cable twice
    assert message_time(100, TOFINO, k) < k * message_time(100, TOFINO)


def test_a_tree_switch_refuses_settings_without_transit_latency(tmp_path):
    hw = dilation_hardware(TOFINO)
    del hw["transit_latency_s"]
    bare = DilationSettings(version=1, tdf=TDF, **hw)
    DelayLine(bare)                                   # a star needs none
    with pytest.raises(ValueError, match="transit_latency_s missing"):
        DelayLine(bare, inter_switch_ports=frozenset({UPLINK}))
    ctl = DilationControl(tmp_path, inter_switch_ports=frozenset({UPLINK}))
    (tmp_path / "dilation.json").write_text(json.dumps({"version": 1, "tdf": TDF, **hw}))
    assert not ctl.poll(1.0) and ctl.line is None
    ack = json.loads((tmp_path / "dilation.json.applied").read_text())
    assert not ack["applied"] and "transit_latency_s missing" in ack["error"]


def test_switch_config_names_its_inter_switch_ports():
    base = {"name": "s2", "ports": {"1": "s2-eth1", "3": "s2-eth3"}, "stats_path": "x", "ready_path": "y"}
    assert SwitchConfig.from_dict(base).inter_switch_ports == frozenset()
    assert SwitchConfig.from_dict({**base, "inter_switch_ports": [3]}).inter_switch_ports == {3}
    with pytest.raises(ConfigError, match=r"inter_switch_ports\[0\]: 7 is not a port"):
        SwitchConfig.from_dict({**base, "inter_switch_ports": [7]})


# -- topology ------------------------------------------------------------------
def test_topology_counts_switches_per_host_pair():
    tree = plan_topology("tree", ["w1", "w2", "w3", "w4", "ps"], leaves=2)
    paths = tree.path_switches()
    assert paths["w1"]["w2"] == 1 and paths["w1"]["w3"] == 3
    assert paths["w1"]["ps"] == paths["ps"]["w4"] == 2
    assert {sw: tree.inter_switch_ports(sw) for sw in tree.switches} == {"s1": [1, 2], "s2": [3], "s3": [3]}
    star = plan_topology("star", ["w1", "w2", "ps"])
    assert star.inter_switch_ports("s1") == []
    assert {k for row in star.path_switches().values() for k in row.values()} == {1}


# -- monitor and projector -----------------------------------------------------
def spine_messages(folder, slow=1.0, n=10, nbytes=4096):
    """w1 (on a leaf) -> ps (on the spine), each taking slow x TDF x the 2-switch model."""
    w = TraceRecorder(folder / "w1.trace.jsonl", host="w1", rank=0, world=1, tdf=TDF)
    ps = TraceRecorder(folder / "ps.trace.jsonl", host="ps", rank=1, world=1, tdf=TDF, role="server")
    t_msg = message_time(nbytes, HOST, 2) * TDF
    t = 0.0
    for _ in range(n):
        w.send(t, t + 0.1 * t_msg, peer="ps", values=nbytes // 4, tag="push")
        ps.recv(t, t + slow * t_msg, peer="w1", values=nbytes // 4, tag="push")
        t += 100 * t_msg
    w.close()
    ps.close()


def test_monitor_reads_the_switch_count_beside_the_traces(tmp_path):
    spine_messages(tmp_path)
    # Without paths.json (an old run): one switch, as before; the spine's extra hop
    # reads as a slower network.
    before = fidelity_report(tmp_path, HOST)
    assert before.ratio_p50 == pytest.approx(message_time(4096, HOST, 2) / message_time(4096, HOST), rel=1e-9)
    write_path_table(tmp_path / PATHS_FILE, plan_topology("tree", ["w1", "w2", "ps"], 2).path_switches())
    rep = fidelity_report(tmp_path, HOST)
    assert rep.valid and rep.ratio_p50 == pytest.approx(1.0, rel=1e-9), rep.reasons
    assert load_traces(tmp_path)[0][0]["path_switches"]["ps"] == 2


def test_a_bad_path_table_is_refused_naming_the_field(tmp_path):
    spine_messages(tmp_path)
    (tmp_path / PATHS_FILE).write_text(json.dumps({"switches": {"w1": {"ps": 0}}}))
    with pytest.raises(ValueError, match=r"paths.json: switches.w1.ps: 0 is not an integer >= 1"):
        load_traces(tmp_path)


def test_projector_costs_messages_through_their_switches(tmp_path):
    w = TraceRecorder(None, host="w1", rank=0, world=1, tdf=TDF)
    ps = TraceRecorder(None, host="ps", rank=1, world=1, tdf=TDF, role="server")
    w.compute(0, 0, hw_s=1e-6, real_s=0)
    w.send(0, 0, peer="ps", values=1024, tag="push")
    ps.waited(ps.recv(0, 0, peer="w1", values=1024, tag="push"))
    ps.compute(0, 0, hw_s=2e-6, real_s=0)
    ps.send(0, 0, peer="w1", values=256, tag="pull")
    w.waited(w.recv(0, 0, peer="ps", values=256, tag="pull"))
    w.compute(0, 0, hw_s=1e-6, real_s=0)
    star = project([(w.header, w.nodes), (ps.header, ps.nodes)], TOFINO)
    assert star.makespan_s == pytest.approx(message_time(4096, TOFINO) + message_time(1024, TOFINO) + 4e-6,
                                            rel=1e-12)
    w.header["path_switches"] = {"ps": 2}
    ps.header["path_switches"] = {"w1": 2}
    tree = project([(w.header, w.nodes), (ps.header, ps.nodes)], TOFINO)
    assert tree.makespan_s == pytest.approx(
        message_time(4096, TOFINO, 2) + message_time(1024, TOFINO, 2) + 4e-6, rel=1e-12)
    assert propagation_s(TOFINO) > 0 and tree.makespan_s > star.makespan_s


# -- collectives -----------------------------------------------------------------
TREE = plan_topology("tree", ["w1", "w2", "w3", "w4", "ps"], leaves=2)
TREE_TABLE = {(a, b): k for a, row in TREE.path_switches().items() for b, k in row.items()}


def test_collective_switches_per_algorithm():
    hosts = ["w1", "w2", "w3", "w4"]
    assert collective_switches("ring", hosts, TREE_TABLE) == 3        # w2 -> w3 crosses the spine
    assert collective_switches("ring", ["w1", "w2"], TREE_TABLE) == 1  # one leaf
    assert collective_switches("ps", hosts, TREE_TABLE) == 2           # ps on the spine
    assert collective_switches("switch", hosts, TREE_TABLE) == 3
    assert collective_switches("tree", hosts, TREE_TABLE) == 3        # rank 2 (w3) -> rank 0 (w1)
    assert collective_switches("tree", ["w1", "w2"], TREE_TABLE) == 1
    assert collective_switches("tree", ["w1", "w3", "w2", "w4"], TREE_TABLE) == 3   # w3 -> w1
    assert collective_switches("ring", hosts, {}) == 1                 # no table: a star


@pytest.mark.parametrize("op,algo", [("allreduce", "ring"), ("allreduce", "ps"), ("allreduce", "gloo"),
                                     ("allreduce", "switch"), ("allreduce", "tree"), ("allgather", "ring"),
                                     ("allgather", "ps")])
def test_collectives_on_one_switch_are_unchanged_and_grow_with_the_path(op, algo):
    args = (op, algo, 3000, 4, 4, TOFINO)
    one = collective_cost(*args)
    assert collective_cost(*args, switches=1) == one                  # the same numbers, ==
    assert collective_cost(*args, switches=3).total_s > one.total_s
    assert collective_cost(*args, switches=3).link_busy_s == one.link_busy_s


def test_ps_and_ring_through_the_tree_by_hand():
    p, n = TOFINO, 3000 * 4
    st = p2p_stream(n, p)
    extra2 = transit_latency_s(p) + serialization_s(st.first, p)          # one more switch, one way
    assert collective_time("allreduce", "ps", 3000, 4, 4, p, switches=2) == pytest.approx(
        collective_time("allreduce", "ps", 3000, 4, 4, p) + 2 * extra2, rel=1e-12)
    chunk = p2p_stream(3000 // 4 * 4, p)
    per_step = 2 * (transit_latency_s(p) + serialization_s(chunk.first, p))   # k = 3
    assert collective_time("allreduce", "ring", 3000, 4, 4, p, switches=3) == pytest.approx(
        collective_time("allreduce", "ring", 3000, 4, 4, p) + 6 * per_step, rel=1e-12)
    # the in-switch allreduce on a two-leaf tree: two levels, one more pass up and down
    st_ina = ina_stream(3000)
    assert collective_time("allreduce", "switch", 3000, 4, 4, p, switches=3) == pytest.approx(
        collective_time("allreduce", "switch", 3000, 4, 4, p)
        + 2 * (serialization_s(st_ina.first, p) + transit_latency_s(p)), rel=1e-12)


def test_monitor_costs_a_ps_collective_through_the_spine(tmp_path):
    t_op = collective_time("allreduce", "ps", 3000, 4, 4, HOST, switches=2) * TDF
    recs = [TraceRecorder(tmp_path / f"{h}.trace.jsonl", host=h, rank=r, world=4, tdf=TDF)
            for r, h in enumerate(["w1", "w2", "w3", "w4"])]
    for it in range(5):
        for rec in recs:
            rec.comm(it * 100 * t_op, it * 100 * t_op + t_op, op="allreduce", algo="ps", values=3000)
    for rec in recs:
        rec.close()
    assert fidelity_report(tmp_path, HOST).ratio_p50 > 1.01                # one hop: reads slow
    write_path_table(tmp_path / PATHS_FILE, TREE.path_switches())
    rep = fidelity_report(tmp_path, HOST)
    assert rep.comm_ops == 20 and rep.ratio_p50 == pytest.approx(1.0, rel=1e-9), rep.reasons


def test_projector_costs_a_collective_through_its_paths():
    rows = TREE.path_switches()
    recs = [TraceRecorder(None, host=h, rank=r, world=4, tdf=TDF) for r, h in enumerate(["w1", "w2", "w3", "w4"])]
    for rec in recs:
        rec.waited(rec.comm(0, 0, op="allreduce", algo="ring", values=3000))
    traces = [(rec.header, rec.nodes) for rec in recs]
    assert project(traces, TOFINO).makespan_s == pytest.approx(
        collective_time("allreduce", "ring", 3000, 4, 4, TOFINO), rel=1e-12)
    for rec in recs:
        rec.header["path_switches"] = rows[rec.header["host"]]
    assert project(traces, TOFINO).makespan_s == pytest.approx(
        collective_time("allreduce", "ring", 3000, 4, 4, TOFINO, switches=3), rel=1e-12)
