"""testbed.net planning: addresses, ports, forwarding tables, impairment
mechanisms, the run registry and clean-up (no network is built here)."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from testbed.net import impairments as imp
from testbed.net import registry as reg
from testbed.net.topology import (
    SWITCH_VIP_MAC, TopologyError, addresses, forwarding_tables, plan_topology, split_workers,
)

pytestmark = pytest.mark.unit

SOFT = imp.Capabilities(switch_impairs=True, netem=False, nftables=True, backend="soft")
BRIDGE = imp.Capabilities(switch_impairs=False, netem=False, nftables=True, backend="bmv2")
NETEM = imp.Capabilities(switch_impairs=False, netem=True, nftables=True, backend="bmv2")
DROPSIM = imp.Capabilities(switch_impairs=False, netem=False, nftables=True, backend="bmv2",
                           drop_simulator=True)


def workers(n: int) -> list[str]:
    return [f"w{i}" for i in range(1, n + 1)]


# --- addresses ----------------------------------------------------------------
def test_address_and_mac_scheme():
    a = {h.name: h for h in addresses(["w1", "w2", "w12", "ps", "extra"])}
    assert (a["w1"].ip, a["w1"].mac) == ("10.0.0.1", "00:00:00:00:00:01")
    assert (a["w12"].ip, a["w12"].mac) == ("10.0.0.12", "00:00:00:00:00:0c")
    assert (a["ps"].ip, a["ps"].mac) == ("10.0.0.200", "00:00:00:00:00:c8")
    assert a["extra"].ip == "10.0.0.201"
    assert len({h.mac for h in a.values()}) == len(a)


def test_address_errors():
    with pytest.raises(TopologyError, match="at most 199 workers"):
        addresses(["w200"])
    with pytest.raises(TopologyError, match="twice"):
        addresses(["w1", "w1"])


# --- topology and forwarding ------------------------------------------------------
def test_star_ports():
    plan = plan_topology("star", [*workers(3), "ps"])
    assert plan.switches == ["s1"]
    assert plan.switch_ports("s1") == {1: "w1", 2: "w2", 3: "w3", 4: "ps"}


def test_tree_contiguous_blocks_and_ports():
    plan = plan_topology("tree", [*workers(5), "ps"], leaves=2)
    assert plan.switches == ["s1", "s2", "s3"]
    assert plan.switch_ports("s2") == {1: "w1", 2: "w2", 3: "w3", 4: "s1"}
    assert plan.switch_ports("s3") == {1: "w4", 2: "w5", 3: "s1"}
    assert plan.switch_ports("s1") == {1: "s2", 2: "s3", 3: "ps"}
    assert split_workers(workers(7), 3) == [["w1", "w2", "w3"], ["w4", "w5"], ["w6", "w7"]]


def test_tree_needs_a_worker_per_leaf():
    with pytest.raises(TopologyError, match="leaves <= topology.workers"):
        plan_topology("tree", workers(2), leaves=3)
    with pytest.raises(TopologyError, match="star or tree"):
        plan_topology("ring", workers(2))


def _walk(plan, tables, switch: str, mac: str) -> list[str]:
    """Follow the tables from switch until a host is reached; the path."""
    path = [switch]
    for _ in range(10):
        port = {e["dst_mac"]: e["port"] for e in tables[path[-1]]}[mac]
        nxt = plan.switch_ports(path[-1])[port]
        path.append(nxt)
        if plan.is_host(nxt):
            return path
    raise AssertionError(f"loop: {path}")


@pytest.mark.parametrize("kind,n,leaves", [("star", 1, 1), ("star", 8, 1), ("tree", 2, 2),
                                           ("tree", 5, 2), ("tree", 8, 3), ("tree", 16, 4)])
def test_every_host_reachable_from_every_switch(kind, n, leaves):
    plan = plan_topology(kind, [*workers(n), "ps"], leaves=leaves)
    tables = forwarding_tables(plan)
    for sw in plan.switches:
        assert len(tables[sw]) == len({e["dst_mac"] for e in tables[sw]})
        for h in plan.hosts:
            path = _walk(plan, tables, sw, h.mac)
            assert path[-1] == h.name
            assert len(path) <= 4  # leaf -> spine -> leaf -> host at most


def test_switch_vip_goes_up_to_the_spine():
    plan = plan_topology("tree", workers(4), leaves=2)
    tables = forwarding_tables(plan)
    assert {"dst_mac": SWITCH_VIP_MAC, "port": 3} in tables["s2"]
    assert all(e["dst_mac"] != SWITCH_VIP_MAC for e in tables["s1"])


# --- impairments: mechanism and direction mapping -----------------------------------
def test_auto_with_soft_switch_maps_directions_to_ports():
    plan = plan_topology("tree", workers(4), leaves=2)
    p = imp.plan_impairments(plan, {"loss_pct": 2, "hosts": {"w3": {"delay_ms": 5}}}, SOFT)
    assert p.mechanism == "switch"
    # host -> switch at the switch port's ingress, switch -> host at its egress
    assert p.switch_ports["s2"][1]["ingress"]["loss_pct"] == 2
    assert p.switch_ports["s2"][1]["egress"]["loss_pct"] == 2
    assert p.switch_ports["s3"][1]["ingress"]["delay_ms"] == 5   # w3 is s3 port 1
    assert p.switch_ports["s3"][1]["egress"]["delay_ms"] == 5
    assert p.switch_ports["s2"][1]["ingress"]["delay_ms"] == 0
    # switch <-> switch: each sender's egress, never an ingress
    assert p.switch_ports["s2"][3]["egress"]["loss_pct"] == 2
    assert p.switch_ports["s1"][1]["egress"]["loss_pct"] == 2
    assert p.switch_ports["s2"][3]["ingress"]["loss_pct"] == 0
    rows = {(r["direction"], r["parameter"]): r for r in p.rows}
    assert rows[("w1->s2", "loss_pct")]["where"] == "s2 port 1 ingress"
    assert rows[("s2->w1", "loss_pct")]["where"] == "s2 port 1 egress"
    assert rows[("s1->s2", "loss_pct")]["where"] == "s1 port 1 egress"
    assert all(r["applied"] and r["mechanism"] == "switch" for r in p.rows)
    assert p.nft_loss == {} and p.netem == []


def test_no_impairments_no_rows_any_backend():
    plan = plan_topology("star", workers(2))
    for caps in (SOFT, BRIDGE):
        for mech in imp.MECHANISMS:
            p = imp.plan_impairments(plan, {"mechanism": mech}, caps)
            assert p.rows == [] and p.switch_ports == {} and p.mechanism == "none"


def test_bandwidth_rows_are_htb():
    plan = plan_topology("star", workers(2))
    p = imp.plan_impairments(plan, {"bandwidth_mbps": 100, "hosts": {"w2": {"bandwidth_mbps": None}}}, BRIDGE)
    assert {(r["direction"], r["mechanism"]) for r in p.rows} == {("w1->s1", "htb"), ("s1->w1", "htb")}


def test_soft_switch_shapes_host_uplinks_itself_unless_asked_for_htb():
    """links.shaper auto on a soft switch with rings: each host's uplink is shaped at the
    switch port's ingress (no htb at the host), its downlink by htb on the switch port;
    switch<->switch links by htb at both ends. shaper htb, or a switch without rings, or
    BMv2: htb everywhere."""
    rings = imp.Capabilities(switch_impairs=True, netem=False, backend="soft", switch_shapes=True)
    tree = plan_topology("tree", workers(4), 2)
    p = imp.plan_impairments(tree, {"bandwidth_mbps": 100, "hosts": {"w3": {"bandwidth_mbps": 20}}}, rings)
    rows = {r["direction"]: r for r in p.rows}
    up = {d: r for d, r in rows.items() if d.startswith("w")}
    assert len(up) == 4 and all(r["mechanism"] == "switch" and "ingress (receive ring)" in r["where"]
                                for r in up.values()), up
    assert {r["mechanism"] for d, r in rows.items() if not d.startswith("w")} == {"htb"}
    leaf = {ln.node1: (ln.node2, ln.port2) for ln in tree.links if tree.is_host(ln.node1)}
    sw3, port3 = leaf["w3"]
    assert p.switch_shaping[sw3][port3] == 20.0 and imp.shaped_by_switch(p, sw3, port3)
    assert sum(len(v) for v in p.switch_shaping.values()) == 4
    spine = next(ln for ln in tree.links if not tree.is_host(ln.node1))
    assert not imp.shaped_by_switch(p, spine.node2, spine.port2)
    for links, caps in (({"bandwidth_mbps": 100, "shaper": "htb"}, rings), ({"bandwidth_mbps": 100}, SOFT),
                        ({"bandwidth_mbps": 100}, BRIDGE)):
        p = imp.plan_impairments(tree, links, caps)
        assert p.switch_shaping == {} and {r["mechanism"] for r in p.rows} == {"htb"}, (links, caps)
    with pytest.raises(imp.ImpairmentError, match="links.shaper: unknown shaper 'tbf'"):
        imp.plan_impairments(tree, {"bandwidth_mbps": 100, "shaper": "tbf"}, rings)


def test_a_switch_shaper_the_switch_does_not_report_is_not_applied():
    rings = imp.Capabilities(switch_impairs=True, netem=False, backend="soft", switch_shapes=True)
    p = imp.plan_impairments(plan_topology("star", workers(2)), {"bandwidth_mbps": 50}, rings)
    shaper = {"rate_bps": 50e6, "slack_s": 2.56e-4, "frames": 9, "queued": 3}
    stats = {"s1": {"ports": {"1": {"ingress_shaper": shaper}, "2": {"ingress_shaper": None}}}}
    rows = {r["direction"]: r for r in imp.fill_observed(p.rows, stats, {})}
    assert rows["w1->s1"]["applied"] and rows["w1->s1"]["observed"] == shaper
    assert rows["w2->s1"]["applied"] is False and "not 50 Mbit/s" in rows["w2->s1"]["note"]
    assert rows["s1->w2"]["applied"] and rows["s1->w2"]["mechanism"] == "htb"


def test_nftables_covers_host_links_both_ways():
    plan = plan_topology("tree", workers(2), leaves=2)
    p = imp.plan_impairments(plan, {"mechanism": "nftables", "loss_pct": 1}, BRIDGE)
    assert p.nft_loss == {"w1": 1, "w2": 1}
    assert p.nft_egress == {"w1": {"intf": "w1-eth0", "loss_pct": 1}, "w2": {"intf": "w2-eth0", "loss_pct": 1}}
    rows = {(r["direction"], r["parameter"]): r for r in p.rows}
    assert rows[("s2->w1", "loss_pct")]["applied"] and rows[("s2->w1", "loss_pct")]["mechanism"] == "nftables"
    assert rows[("w1->s2", "loss_pct")]["applied"] and rows[("w1->s2", "loss_pct")]["where"] == \
        "w1-eth0 egress (nft netdev egress)"
    for d in ("s2->s1", "s1->s2"):
        r = rows[(d, "loss_pct")]
        assert r["applied"] is False and "host links only" in r["note"] and "switch" in r["note"]


def test_auto_loss_on_bmv2_without_aggregation_traffic_is_nftables_both_ways():
    """The drop simulators drop aggregation traffic only: a point without it (a
    ring, a parameter server) gets real link loss from nftables on a star, and is
    refused on a tree, where switch<->switch links cannot be impaired."""
    star = imp.plan_impairments(plan_topology("star", workers(2)), {"loss_pct": 5}, BRIDGE)
    assert star.mechanism == "nftables" and star.drop_simulator == {}
    assert {r["direction"] for r in star.rows if r["applied"]} == {"w1->s1", "s1->w1", "w2->s1", "s1->w2"}
    assert star.nft_egress["w2"] == {"intf": "w2-eth0", "loss_pct": 5}
    with pytest.raises(imp.ImpairmentError, match="loss alone on host links"):
        imp.plan_impairments(plan_topology("tree", workers(2), leaves=2), {"loss_pct": 5}, BRIDGE)
    # with aggregation traffic (and the program's simulators), the P4 program drops
    assert imp.plan_impairments(plan_topology("star", workers(2)), {"loss_pct": 5},
                                DROPSIM).mechanism == "drop_simulator"


def test_nft_egress_ruleset_steals_rather_than_drops():
    text = imp.nft_egress_ruleset("w3-eth0", 5)
    assert f"table netdev {imp.NFT_EGRESS_TABLE}" in text
    assert 'hook egress device "w3-eth0"' in text
    assert 'numgen random mod 1000000 < 50000 counter fwd to "lo"' in text and "drop" not in text


@pytest.mark.parametrize("links,caps,needles", [
    ({"mechanism": "nftables", "delay_ms": 3}, SOFT, ["delay_ms=3", "only drop", "mechanism switch"]),
    ({"mechanism": "netem", "loss_pct": 1}, SOFT, ["no sch_netem", "mechanism switch"]),
    ({"delay_ms": 1}, BRIDGE, ["delay_ms=1", "bmv2", "backend soft", "nftables"]),
    ({"mechanism": "switch", "jitter_ms": 1}, BRIDGE, ["needs the soft switch", "bmv2"]),
    ({"mechanism": "netem", "reorder_pct": 5}, NETEM, ["reorder", "delay_ms > 0"]),
    ({"bandwidth_mbps": 5000}, SOFT, ["1000 Mbit/s", "null for unlimited"]),
    ({"hosts": {"w9": {"loss_pct": 1}}}, SOFT, ["unknown host", "w9"]),
    ({"mechanism": "nftables", "loss_pct": 1}, imp.Capabilities(True, False, nftables=False),
     ["apt-get install nftables"]),
])
def test_refusals_say_what_and_instead(links, caps, needles):
    plan = plan_topology("star", workers(2))
    with pytest.raises(imp.ImpairmentError) as e:
        imp.plan_impairments(plan, links, caps)
    msg = str(e.value)
    assert msg.startswith("cannot apply") or "unknown host" in msg
    for n in needles:
        assert n in msg, msg


def test_bmv2_loss_goes_through_both_drop_simulators():
    """Loss alone on a BMv2 whose program has the drop simulators: host->switch
    at DropSimulator (ingress port), switch->host at EgressDropSimulator (egress
    port), each row applied and saying it covers aggregation traffic only."""
    plan = plan_topology("star", workers(2))
    p = imp.plan_impairments(plan, {"loss_pct": 5, "hosts": {"w2": {"loss_pct": 1}}}, DROPSIM)
    assert p.mechanism == "drop_simulator" and p.switch_ports == {} and p.nft_loss == {}
    assert sorted((c["port"], c["direction"], c["p"]) for c in p.drop_simulator["s1"]) == [
        (1, "egress", 0.05), (1, "ingress", 0.05), (2, "egress", 0.01), (2, "ingress", 0.01)]
    rows = {r["direction"]: r for r in p.rows}
    assert rows["w1->s1"]["where"] == "s1 port 1 ingress DropSimulator"
    assert rows["s1->w2"]["where"] == "s1 port 2 egress EgressDropSimulator"
    assert all(r["applied"] and "aggregation traffic only" in r["note"] for r in p.rows)
    counters = {"s1": {"DropSimulator.dropped": {"1": {"packets": 7, "bytes": 0}},
                       "EgressDropSimulator.dropped": {"2": {"packets": 3, "bytes": 0}}}}
    seen = {r["direction"]: r["observed"] for r in imp.fill_drop_simulator_observed(p.rows, counters)}
    assert seen["w1->s1"] == {"dropped": 7, "counter": "DropSimulator.dropped[1]"}
    assert seen["s1->w2"] == {"dropped": 3, "counter": "EgressDropSimulator.dropped[2]"}
    assert seen["w2->s1"]["dropped"] == 0


@pytest.mark.parametrize("kind,links,needles", [
    ("star", {"loss_pct": 1, "delay_ms": 2}, ["no sch_netem"]),     # not loss alone: no drop simulator
    ("tree", {"loss_pct": 1}, ["drop simulator", "star"]),
])
def test_bmv2_drop_simulator_refusals(kind, links, needles):
    plan = plan_topology(kind, workers(2), **({"leaves": 2} if kind == "tree" else {}))
    with pytest.raises(imp.ImpairmentError) as e:
        imp.plan_impairments(plan, links, DROPSIM)
    for n in needles:
        assert n in str(e.value), str(e.value)


def test_netem_plan_and_command():
    plan = plan_topology("star", workers(2))
    p = imp.plan_impairments(plan, {"delay_ms": 2, "jitter_ms": 1, "reorder_pct": 5,
                                    "bandwidth_mbps": 10}, NETEM)
    assert p.mechanism == "netem"
    intfs = {e["intf"]: e for e in p.netem}
    assert set(intfs) == {"w1-eth0", "w2-eth0", "s1-eth1", "s1-eth2"}
    cmd = imp.netem_command("w1-eth0", intfs["w1-eth0"]["impair"], shaped=True)
    assert cmd == ["tc", "qdisc", "add", "dev", "w1-eth0", "parent", "5:1", "handle", "10:", "netem",
                   "delay", "2.0ms", "1.0ms", "reorder", "5.0%"]
    assert imp.netem_command("x", {**imp.ZERO_IMPAIR, "loss_pct": 1}, False)[5] == "root"


def test_resolve_links_from_scenario_model():
    from testbed.scenario.models import Links
    links = Links.model_validate({"loss_pct": 1, "bandwidth_mbps": 100,
                                  "hosts": {"w2": {"loss_pct": 5, "bandwidth_mbps": None}}})
    base, per_host, mech = imp.resolve_links(links, ["w1", "w2"])
    assert mech == "auto" and base.loss_pct == 1
    assert per_host["w1"] == imp.LinkValues(100, 1)
    assert per_host["w2"] == imp.LinkValues(None, 5)  # explicit null = unlimited


# --- nftables script and counters; observed values -----------------------------------
def test_nft_ruleset_and_counters():
    text = imp.nft_ruleset(1.5)
    assert "hook prerouting" in text and "numgen random mod 1000000 < 15000 counter drop" in text
    listing = {"nftables": [{"metainfo": {}}, {"table": {"name": imp.NFT_TABLE}},
                            {"rule": {"comment": "seen", "expr": [{"counter": {"packets": 1000, "bytes": 1}}]}},
                            {"rule": {"comment": "loss", "expr": [{"numgen": {}}, {"counter": {"packets": 14, "bytes": 1}},
                                                                  {"drop": None}]}}]}
    assert imp.parse_nft_counters(json.dumps(listing)) == {"seen": 1000, "dropped": 14}


def test_fill_observed_from_switch_stats_and_nft():
    plan = plan_topology("star", workers(2))
    p = imp.plan_impairments(plan, {"loss_pct": 10}, SOFT)
    stats = {"s1": {"ports": {"1": {"impairments": {"ingress": {"seen": 200, "dropped": 19},
                                                    "egress": {"seen": 100, "dropped": 11}}}}}}
    rows = {r["direction"]: r for r in imp.fill_observed(p.rows, stats, {})}
    assert rows["w1->s1"]["observed_rate"] == pytest.approx(0.095)
    assert rows["s1->w1"]["observed"]["dropped"] == 11
    assert rows["w2->s1"]["observed"] is None  # no counters, nothing claimed
    assert all(r["observed"] is None for r in p.rows)  # planned rows untouched

    p = imp.plan_impairments(plan, {"mechanism": "nftables", "loss_pct": 10}, SOFT)
    rows = {r["direction"]: r for r in imp.fill_observed(p.rows, {}, {"w2": {"seen": 50, "dropped": 5}})}
    assert rows["s1->w2"]["observed_rate"] == 0.1


# --- local mode -----------------------------------------------------------------------
def test_local_network_refuses_impairments(tmp_path):
    from testbed.net.local_net import LocalNetwork
    net = LocalNetwork(["w1", "w2", "ps"], tmp_path)
    assert net.hosts["w2"].ip == "127.0.1.2" and net.hosts["ps"].ip == "127.0.1.200"
    for links in ({"loss_pct": 1}, {"bandwidth_mbps": 10}, {"hosts": {"w2": {"delay_ms": 1}}}):
        with pytest.raises(imp.ImpairmentError, match="use --net mininet"):
            LocalNetwork(["w1", "w2"], tmp_path, links=links)


def test_local_network_runs_and_stops_processes(tmp_path):
    from testbed.net.local_net import LocalNetwork
    net = LocalNetwork(["w1", "w2"], tmp_path, registry=reg.RunRegistry.create(base=tmp_path / "reg"))
    with net:
        p = net.popen("w1", ["sh", "-c", "echo hi $INNET_TESTBED_RUN; sleep 60"], tmp_path / "w1.log")
        time.sleep(0.3)
    assert p.poll() is not None
    assert (tmp_path / "w1.log").read_text().startswith("hi ")


# --- isolation --------------------------------------------------------------------------
def test_enter_private_netns_refuses_when_threads_run():
    from testbed.net.isolation import IsolationError, enter_private_netns
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        with pytest.raises(IsolationError, match="before any thread"):
            enter_private_netns()
    finally:
        stop.set()
        t.join()


# --- registry and clean ---------------------------------------------------------------------
def _dead_runner_record(r: reg.RunRegistry) -> None:
    """Make the record look like its runner crashed (start time of another process)."""
    r.record["runner"]["start"] = -1
    r._save()


def test_registry_records_and_leftovers(tmp_path):
    base = tmp_path / "reg"
    r = reg.RunRegistry.create(results_dir=tmp_path / "res", base=base)
    assert oct(base.stat().st_mode & 0o777) == "0o700"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r.register_pid(sleeper.pid, role="dummy")
        rec = json.loads(r.path.read_text())
        assert rec["runner"] == {"pid": os.getpid(), "start": reg.proc_start_time(os.getpid())}
        assert rec["children"][0]["pid"] == sleeper.pid and rec["children"][0]["start"] > 0
        assert rec["netns_inode"] and rec["results_dir"] == str(tmp_path / "res")
        assert reg.leftovers(base) == []  # our runner (this process) is alive
        _dead_runner_record(r)
        assert [x["run_id"] for x in reg.leftovers(base)] == [r.run_id]

        dry = reg.kill_leftovers(base, dry_run=True)
        assert dry[0]["would_kill"] == [{"pid": sleeper.pid, "role": "dummy"}]
        assert sleeper.poll() is None and r.path.exists()

        acts = reg.kill_leftovers(base, grace_s=2)
        assert acts[0]["killed"] == [{"pid": sleeper.pid, "role": "dummy", "signal": "SIGTERM"}]
        assert sleeper.wait(timeout=5) == -15
        assert not r.path.exists() and reg.leftovers(base) == []
    finally:
        sleeper.kill()
        sleeper.wait()


def test_registry_never_kills_a_reused_pid(tmp_path):
    base = tmp_path / "reg"
    r = reg.RunRegistry.create(base=base)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # Same PID, different start time: another process now, not ours.
        r.record["children"].append({"pid": sleeper.pid, "start": reg.proc_start_time(sleeper.pid) + 1,
                                     "role": "impostor"})
        _dead_runner_record(r)
        acts = reg.kill_leftovers(base, grace_s=0.2)
        assert acts[0]["killed"] == [] and acts[0]["already_gone"] == 1
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_registry_sigkills_what_ignores_sigterm(tmp_path):
    base = tmp_path / "reg"
    r = reg.RunRegistry.create(base=base)
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; sleep 60"],
                                stdout=subprocess.PIPE, start_new_session=True)
    try:
        stubborn.stdout.readline()  # the trap is set
        r.register_pid(stubborn.pid, role="stubborn")
        _dead_runner_record(r)
        acts = reg.kill_leftovers(base, grace_s=0.3)
        assert acts[0]["killed"][0]["signal"] == "SIGKILL"
        assert stubborn.wait(timeout=5) == -9
    finally:
        stubborn.kill()
        stubborn.wait()


def test_clean_reports_kills_and_incomplete_results(tmp_path):
    from testbed.clean import clean
    base = tmp_path / "reg"
    res = tmp_path / "results" / "x" / "20250101-000000"
    res.mkdir(parents=True)
    (res / "manifest.json").write_text(json.dumps({"status": "running"}))
    r = reg.RunRegistry.create(results_dir=res, base=base)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r.register_pid(sleeper.pid, role="w1: sleep")
        assert clean(base=base) == []  # runner alive: not a leftover
        _dead_runner_record(r)
        lines = clean(dry_run=True, base=base)
        assert f"would kill {sleeper.pid} (w1: sleep)" in lines[0] and sleeper.poll() is None
        lines = clean(base=base)
        assert f"killed {sleeper.pid} (w1: sleep, SIGTERM)" in lines[0]
        assert "incomplete" in lines[1] and str(res) in lines[1]
        assert (res / "manifest.json").exists()  # reported, never touched
        sleeper.wait(timeout=5)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_frames_the_switch_lost_unasked_are_each_a_warning():
    """A full receive ring (the shaped uplink's queue) or send buffer loses frames no
    modeled link loses: the run says which port and how many; silence otherwise."""
    from testbed.net.impairments import unconfigured_switch_drops

    stats = {"s1": {"ports": {"1": {"rx_kernel_drops": 0, "tx_dropped": 0},
                              "10": {"rx_kernel_drops": 7, "tx_dropped": 0},
                              "2": {"rx_kernel_drops": 0, "tx_dropped": 3}}},
             "s2": {"ports": {"1": {}}}}
    w = unconfigured_switch_drops(stats)
    assert w == ["switch s1 port 2 lost frames no impairment asked for: 0 on receive (its ring was full), "
                 "3 on send (its buffer stayed full)",
                 "switch s1 port 10 lost frames no impairment asked for: 7 on receive (its ring was full), "
                 "0 on send (its buffer stayed full)"]
    assert unconfigured_switch_drops({}) == [] and unconfigured_switch_drops(None) == []
