"""net cluster (Mininet's MininetCluster): the dry-run plan places hosts on the
named servers; no second machine here, so only the plan is tested."""
from __future__ import annotations

import pytest

from testbed import runner
from testbed.net.cluster_net import place_hosts
from testbed.scenario import expand_points, load_scenario_text

pytestmark = pytest.mark.local

SCENARIO = """
name: cluster-ring
topology: {kind: star, workers: 4}
net:
  mode: cluster
  cluster: {servers: [srv-a, srv-b], placement: {w1: srv-b}, link: gre}
workload: {kind: allreduce, algorithm: ring, sizes: [64], iterations: 2}
"""


def test_cluster_placement_and_plan():
    scn = load_scenario_text(SCENARIO, "cluster.yaml")
    assert place_hosts(scn.net.cluster, scn.hosts()) == {"w1": "srv-b", "w2": "srv-a", "w3": "srv-b",
                                                          "w4": "srv-a"}
    plan = runner.plan_points(scn, expand_points(scn), net_mode="cluster").to_dict()
    notes = plan[0]["notes"]
    assert "MininetCluster(servers=['srv-a', 'srv-b'], link=RemoteGRELink): mininet.examples.cluster" in notes
    assert "placement: w1 on srv-b" in notes
    assert any("-m hosts.allreduce" in " ".join(c["argv"]) for c in plan[0]["commands"] if c["node"] == "w2")


def test_cluster_placement_on_an_unknown_server_is_refused():
    from testbed.scenario import ScenarioError
    with pytest.raises(ScenarioError, match=r"net.cluster.placement.w1.*srv-c"):
        load_scenario_text(SCENARIO.replace("w1: srv-b", "w1: srv-c"), "cluster.yaml")
