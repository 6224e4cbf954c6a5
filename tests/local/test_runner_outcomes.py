"""The runner records what really happened to a point, with stand-in networks
(real processes, no Mininet): a shaping the network could not apply skips the
point and is recorded as not applied; a switch process that dies ends the point
with the switch named, not a host blamed later."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import runner
from testbed.net import factory
from testbed.net.base import DeadSwitch, HostInfo, Network
from testbed.net.impairments import ImpairmentError
from testbed.scenario import expand_points, load_scenario_text

pytestmark = pytest.mark.local

SCENARIO = """
name: outcomes
topology: {workers: 2}
links: {bandwidth_mbps: 10}
workload: {kind: allreduce, algorithm: ring, sizes: [16], iterations: 1, warmup: 0, timeout_s: 600}
"""
ROW = {"link": "w1-s1", "direction": "w1->s1", "parameter": "bandwidth_mbps", "value": 10.0,
       "mechanism": "htb", "where": "w1-eth0 egress"}


class StandIn(Network):
    """Hosts w1, w2 running `sleep`; a switch s1 that a test can declare dead."""

    def __init__(self, scenario, *, logs_dir, fail_start=None, switch_dies=False, **_kw):
        self.hosts = {h: HostInfo(h, f"127.0.1.{i}", None) for i, h in enumerate(scenario.hosts(), 1)}
        self.switch_names = ["s1"]
        self.logs = Path(logs_dir)
        self.fail_start, self.switch_dies = fail_start, switch_dies
        self.procs: list[subprocess.Popen] = []
        self.report = [{**ROW, "applied": True}]
        self.polls = 0

    def start(self):
        if self.fail_start:
            self.report = [{**ROW, "applied": False, "note": f"the network failed to start: {self.fail_start}"}]
            raise ImpairmentError(self.fail_start)

    def popen(self, host, argv, log_path, env=None):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.procs.append(p)
        return p

    def dead_switches(self):
        self.polls += 1
        if self.switch_dies and self.polls > 1:
            log = self.logs / "s1.log"
            log.write_text("switch started\nKilled by the test\n")
            return [DeadSwitch("s1", -9, log)]
        return []

    def _teardown(self):        # Network.stop calls it once
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def impairment_report(self):
        return [dict(r) for r in self.report]


def _run(monkeypatch, tmp_path, **net_kw):
    # A private registry; the run id the registry puts in os.environ goes with the test.
    monkeypatch.setenv("INNET_TESTBED_REGISTRY", str(tmp_path / "registry"))
    monkeypatch.setenv("INNET_TESTBED_RUN", "")
    made = []

    def build(net_mode, scenario, *, logs_dir, **kw):
        made.append(StandIn(scenario, logs_dir=logs_dir, **net_kw))
        return made[0]

    monkeypatch.setattr(factory, "build_network", build)
    scn = load_scenario_text(SCENARIO, "s.yaml")
    out = runner.run_points(scn, expand_points(scn), net_mode="mininet", quick=False,
                            out_dir=tmp_path, cli={})
    points = [json.loads(line) for line in (out.run_dir / "points.jsonl").read_text().splitlines()]
    return out, points, made[0]


def test_shaping_that_did_not_apply_skips_and_is_recorded_as_not_applied(monkeypatch, tmp_path):
    why = "bandwidth_mbps=10 on w1-eth0 was not applied: no htb class 5:1"
    out, points, _ = _run(monkeypatch, tmp_path, fail_start=why)
    assert [o.status for o in out.outcomes] == ["skipped"]
    assert points[0]["status"] == "skipped" and why in points[0]["error"], points[0]
    assert points[0]["impairments"] and all(r["applied"] is False and why in r["note"]
                                            for r in points[0]["impairments"]), points[0]


def test_dead_switch_fails_the_point_naming_the_switch(monkeypatch, tmp_path):
    out, points, net = _run(monkeypatch, tmp_path, switch_dies=True)
    err = points[0]["error"]
    assert points[0]["status"] == "failed", points[0]
    assert err.startswith("switch s1 exited with code -9; last lines of "), err
    assert "Killed by the test" in err and "host" not in err.split(";")[0], err
    # The hosts were stopped, not left to their 600 s timeout.
    assert all(p.poll() is not None for p in net.procs)
    assert points[0]["wall_s"] < 600
