"""`testbed net up` as a p4run user uses it: the quickstart's network kept up,
Mininet's CLI (pingall), the live switch read from another process
(`testbed switch tables|counters|read`), `testbed net down`, and nothing left
behind (processes, namespaces, interfaces, live records)."""
from __future__ import annotations

import os
import subprocess
import time

from e2e_harness import QUICKSTART, ROOT, TESTBED, netns_holders, root_interfaces


def _env(tmp_path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "INNET_TESTBED_RUN"},
            "INNET_TESTBED_REGISTRY": str(tmp_path / "registry")}


def tb(tmp_path, *args: str, timeout: float = 90, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([TESTBED, *args], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def test_net_up_keeps_the_network_until_net_down_and_switch_reads_it_live(tmp_path):
    before_intf = root_interfaces()
    own_ns = None
    up = subprocess.Popen([TESTBED, "net", "up", QUICKSTART, "--no-cli", "--name", "qs", "--out",
                           str(tmp_path / "out")], cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed = tb(tmp_path, "net", "list")
            if "qs: point 000-baseline-algorithm=switch-r0" in listed.stdout:
                own_ns = os.stat(f"/proc/{up.pid}/ns/net").st_ino     # the run's private namespace
                break
            assert up.poll() is None, up.communicate()
            time.sleep(0.5)
        else:
            raise AssertionError(f"net up never announced its network: {listed.stdout}{listed.stderr}")

        tables = tb(tmp_path, "switch", "tables")
        assert tables.returncode == 0, tables.stderr
        assert "s1 Ingress.job_table: 1 entry" in tables.stdout
        assert "s1 Forward.l2_forward: 4 entries" in tables.stdout
        assert "s1 multicast group 257: ports [1, 2, 3, 4]" in tables.stdout
        counters = tb(tmp_path, "switch", "counters", "--all")
        assert counters.returncode == 0 and "s1 Ingress.ina_packets" in counters.stdout, counters.stderr
        reg = tb(tmp_path, "switch", "read", "Aggregator.worker_count", "--index", "3")
        assert reg.returncode == 0 and "[3] 0" in reg.stdout, reg.stderr
        bad = tb(tmp_path, "switch", "read", "Aggregator.nope")
        assert bad.returncode == 2 and "no register 'Aggregator.nope'" in bad.stderr

        down = tb(tmp_path, "net", "down", "--net", "qs")
        assert down.returncode == 0 and "torn down" in down.stdout, down.stderr
        up.wait(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert up.returncode == 0, up.stderr
    assert "no live network" in tb(tmp_path, "net", "list").stdout
    assert own_ns is not None and own_ns not in netns_holders(), "net up's namespace outlived it"
    assert root_interfaces() <= before_intf
    nothing = tb(tmp_path, "switch", "tables")
    assert nothing.returncode == 2 and "no live network" in nothing.stderr


def test_net_up_opens_mininets_cli(tmp_path):
    res = tb(tmp_path, "net", "up", QUICKSTART, "--name", "qs-cli", "--out", str(tmp_path / "out"),
             stdin="pingall\nw1 ping -c1 w2\nexit\n", timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "*** Results: 0% dropped (12/12 received)" in out
    assert "1 packets transmitted, 1 received" in out
    assert "Level 25" not in out and out.count("*** Results") == 1    # Mininet's output once, plainly
    assert "torn down" in res.stderr


def test_net_up_refuses_bad_input_before_anything_starts(tmp_path):
    res = tb(tmp_path, "net", "up", QUICKSTART, "--point", "nope")
    assert res.returncode == 2 and "no point 'nope'" in res.stderr and "000-baseline" in res.stderr
    res = tb(tmp_path, "net", "up", "scenarios")
    assert res.returncode == 2 and "is a folder" in res.stderr


def test_switch_reads_a_point_while_testbed_run_runs_it(tmp_path):
    run = subprocess.Popen([TESTBED, "run", QUICKSTART, "--no-plot", "--out", str(tmp_path / "out"),
                            "--set", "sweep.grid.workload.algorithm=[switch]", "--set", "sweep.cases=[{name: baseline}]",
                            "--set", "workload.sizes=[16384]", "--set", "workload.iterations=400"],
                           cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        seen = ""
        while time.monotonic() < deadline and run.poll() is None:
            listed = tb(tmp_path, "net", "list").stdout
            if "quickstart@" in listed:
                counters = tb(tmp_path, "switch", "counters")
                assert counters.returncode == 0, counters.stderr
                seen = counters.stdout
                if "Ingress.ina_packets: [" in seen:
                    break
            time.sleep(0.5)
        assert "Ingress.ina_packets: [" in seen, f"no live counters read while the point ran: {seen!r}"
    finally:
        run.wait(timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "no live network" in tb(tmp_path, "net", "list").stdout     # withdrawn with the point
