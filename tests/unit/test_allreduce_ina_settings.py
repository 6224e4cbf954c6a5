"""The allreduce workload turns the network's INA asks into its workers' "ina"
block through ina_settings, as the other workloads do: BMv2's switch info asks
for the congestion window and gets it; the soft switch's does not, and the
worker's InaSettings keep it off. The scenario's own settings win."""
from __future__ import annotations

import json
import types

import pytest

from hosts.common.config import AllreduceConfig
from testbed.scenario import expand_points, load_scenario_text
from testbed.workloads.allreduce import AllreduceRuntime
from testbed.workloads.base import PointContext

pytestmark = pytest.mark.unit

SCENARIO = """\
name: t
topology: {kind: star, workers: 4}
workload: {kind: allreduce, algorithm: switch, sizes: [64], jobs: 2, ina: {window: 32}}
"""
# What the networks' switch_info() says (testbed/net/mininet_net.py), less what
# ina_settings does not read.
SOFT = {"ip": "10.0.0.254", "mac": "02:00:00:00:00:fe", "backend": "soft"}
BMV2 = {**SOFT, "backend": "bmv2", "ina": {"congestion_window": True}}


def worker_configs(tmp_path, switch: dict) -> dict[str, AllreduceConfig]:
    point = expand_points(load_scenario_text(SCENARIO, "t.yaml"))[0]
    hosts = {f"w{i}": types.SimpleNamespace(name=f"w{i}", ip=f"10.0.0.{i}") for i in range(1, 5)}
    ctx = PointContext(point=point, hosts=hosts, work_dir=tmp_path, net_mode="mininet",
                       start_at=0.0, switch=switch)
    progs = AllreduceRuntime().programs(ctx)
    assert [p.host for p in progs] == ["w1", "w2", "w3", "w4"]
    return {h: AllreduceConfig.from_json(json.loads((tmp_path / f"{h}.config.json").read_text()))
            for h in hosts}


@pytest.mark.parametrize("switch,window_adapts", [(BMV2, True), (SOFT, False)], ids=["bmv2", "soft"])
def test_the_network_asks_for_the_congestion_window(tmp_path, switch, window_adapts):
    cfgs = worker_configs(tmp_path, switch)
    for h, cfg in cfgs.items():
        assert cfg.ina.congestion_window is window_adapts, h
        assert cfg.ina.window == 32                                  # the scenario's setting
        assert cfg.ina.job_id == (1 if h in ("w1", "w2") else 2)     # two jobs of two workers
        assert (cfg.ina.switch_ip, cfg.ina.switch_mac) == (switch["ip"], switch["mac"])


def test_gso_is_what_the_network_says_per_host_and_off_otherwise(tmp_path):
    cfgs = worker_configs(tmp_path, {**SOFT, "workers": {"w1": {"gso": True}, "w2": {"gso": False}}})
    assert [cfgs[h].ina.gso for h in ("w1", "w2", "w3", "w4")] == [True, False, False, False]
