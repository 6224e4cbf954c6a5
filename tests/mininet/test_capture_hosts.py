"""switch.capture_hosts: a host's own interface captured beside the switch ports,
decoded as its own capture point (a frame seen at the host and at the switch
counts once in each, never twice in one)."""
from __future__ import annotations

import json
import os
import subprocess

from e2e_harness import QUICKSTART, ROOT, TESTBED


def test_a_host_capture_sees_what_the_switch_port_sees(tmp_path):
    env = {**os.environ, "INNET_TESTBED_REGISTRY": str(tmp_path / "registry")}
    res = subprocess.run([TESTBED, "run", QUICKSTART, "--quick", "--no-plot", "--out", str(tmp_path),
                          "--set", "sweep.quick.cases=[baseline]", "--set", "sweep.grid.workload.algorithm=[switch]",
                          "--set", "switch.capture_hosts=[w1]"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    point = next((tmp_path / "quickstart").glob("*/pcaps/*"))
    assert (point / "w1-eth0.pcap").exists() and not (point / "w2-eth0.pcap").exists()
    out = subprocess.run([TESTBED, "pcap", str(point), "--json"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    at_switch, at_host = d["ina"], d["ina_at_hosts"]
    w1_switch = at_switch["per_worker"]["job1/w1"]
    w1_host = at_host["per_worker"]["job1/w1"]
    run_dir = point.parent.parent
    warnings = [w for line in (run_dir / "points.jsonl").read_text().splitlines()
                for w in json.loads(line).get("warnings", [])]
    tcpdump_log = next(run_dir.glob("logs/*/tcpdump-w1-eth0.log")).read_text()
    # lossless baseline: the same frames; a capture that lost frames says so
    assert w1_host["contributions"] == w1_switch["contributions"] > 0, (warnings, tcpdump_log)
    assert not [w for w in warnings if w.startswith("teardown:")], warnings
    assert at_switch["duplicates"] == 0
    text = subprocess.run([TESTBED, "pcap", str(point)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300).stdout
    assert "--- captured at the switch ports ---" in text and "--- captured at the hosts' interfaces" in text
