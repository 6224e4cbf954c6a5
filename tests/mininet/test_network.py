"""End-to-end tests of testbed.net on Mininet, each network in its own private
network namespace (built by a child process, see _support.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("net_mininet_support", Path(__file__).with_name("_support.py"))
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


def _unavailable() -> str | None:
    if importlib.util.find_spec("mininet") is None:
        return "mininet is not importable from this Python (run `make setup`)"
    if shutil.which("mnexec") is None:
        return "mnexec not on PATH (apt-get install mininet)"
    from testbed.net.isolation import isolation_available
    ok, reason = isolation_available()
    return None if ok else f"needs root or unprivileged user namespaces: {reason}"


_REASON = _unavailable()
pytestmark = [pytest.mark.mininet, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

SWITCHES = ["bridge", pytest.param("soft", marks=pytest.mark.skipif(
    not support.soft_switch_available(), reason="testbed/switch/soft/node.py not present yet"))]


@pytest.fixture
def reg_env(tmp_path):
    """A private registry folder, so clean() only ever sees this test's runs."""
    d = tmp_path / "registry"
    return d, {"INNET_TESTBED_REGISTRY": str(d)}


@pytest.mark.parametrize("sw", SWITCHES)
@pytest.mark.parametrize("kind", ["star", "tree"])
def test_build_ping_shape_stop(kind, sw, tmp_path, reg_env):
    reg_dir, env = reg_env
    r = support.run_child("check", kind, sw, str(tmp_path / "run"), env=env)
    assert r["failed"] == [], f"pings failed: {r['failed']}"
    # Every host link shaped both ways, with the per-host override on w3: the downlink by
    # htb on the switch port; the uplink by htb on the host (bridge) or, on the soft
    # switch, by the switch at its port's receive ring (links.shaper auto).
    assert "rate 50Mbit" in r["switch_class"]["w1"] and "rate 20Mbit" in r["switch_class"]["w3"]
    rows = {x["direction"].split("->")[0]: x for x in r["report"]
            if x["parameter"] == "bandwidth_mbps" and x["direction"].split("->")[0] in ("w1", "w3")}
    assert all(x["applied"] for x in rows.values()), rows
    if sw == "soft":
        assert "htb" not in r["qdisc"]["w1"] and "htb" not in r["qdisc"]["w3"]
        assert r["shapers"]["w1"]["rate_bps"] == 50e6 and r["shapers"]["w3"]["rate_bps"] == 20e6
        assert r["shapers"]["w1"]["frames"] > 0        # the pings went through it
        assert rows["w1"]["mechanism"] == "switch" and rows["w1"]["observed"]["rate_bps"] == 50e6
    else:
        assert "htb" in r["qdisc"]["w1"] and "htb" in r["qdisc"]["w3"]
        assert "rate 50Mbit" in r["class"]["w1"] and "rate 20Mbit" in r["class"]["w3"]
        assert rows["w1"]["mechanism"] == "htb" and r["shapers"] == {"w1": None, "w3": None}
    # Static ARP for every host and the switch virtual IP; no IPv6; no TX offload.
    assert re.search(r"10\.0\.0\.254 .*lladdr 02:00:00:00:00:fe PERMANENT", r["neigh"])
    assert re.search(r"10\.0\.0\.200 .*lladdr 00:00:00:00:00:c8 PERMANENT", r["neigh"])
    assert r["ipv6_disabled"] == "1"
    assert r["slow_start_after_idle"] == "0"      # dilated idle gaps keep TCP's window open
    assert re.search(r"^tx-checksumming: off", r["offload"], re.M)
    # popen runs inside the host's namespace and logs to the given file.
    assert "hello from" in r["log"] and "10.0.0.1/24" in r["log"]
    # The network's own registry record is removed on a clean stop.
    assert not r["registry_exists_after"]
    if sw == "soft":
        expected = ["s1"] if kind == "star" else ["s1", "s2", "s3"]
        assert r["stats"] == expected
    assert r["errors"] == []


@pytest.mark.parametrize("sw", SWITCHES)
@pytest.mark.timeout(support.TCP_TIMEOUT_S + 180)
def test_nftables_loss_on_a_host_link_both_ways(sw, tmp_path, reg_env):
    _, env = reg_env
    r = support.run_child("nft", sw, str(tmp_path / "run"), env=env, timeout=support.TCP_TIMEOUT_S + 120)
    assert "numgen random mod 1000000 < 200000" in r["ruleset"]
    assert 'fwd to "lo"' in r["ruleset"] and "hook egress device" in r["ruleset"]
    rows = {(x["direction"], x["parameter"]): x for x in r["report"]}
    for d in ("s1->w2", "w2->s1"):
        applied = rows[(d, "loss_pct")]
        assert applied["mechanism"] == "nftables" and applied["applied"] is True, applied
        seen = applied["observed"]["seen"]
        assert seen >= 300
        assert 0.12 < applied["observed_rate"] < 0.28, applied  # 20 % requested, hundreds of draws
        assert applied["observed"]["dropped"] == round(applied["observed_rate"] * seen)
    # ping: a request lost into w2 gets no reply, a reply lost out of w2 is lost;
    # the TCP transfer afterwards adds to the counters, so count ping's alone:
    # every echo lost is one of nft's drops, and nft dropped at least that many.
    m = re.search(r"(\d+) packets transmitted, (\d+) received", r["ping"])
    assert m and int(m.group(1)) - int(m.group(2)) >= 120     # 36 % expected (1 - 0.8 * 0.8)
    # w1 has no rule; nothing else is impaired
    assert ("w1->s1", "loss_pct") not in rows
    # TCP through the lossy egress: everything arrives, and the sender resent
    # (an egress *drop* would have been taken as local congestion, no loss)
    assert r["tcp_rc"] == 0, (f"the TCP sender ended with {r['tcp_rc']} (124: still running after "
                              f"{support.TCP_TIMEOUT_S} s): {r['tcp_sent']!r}")
    assert r["tcp_received"] == r["tcp_sent"] == "60000", r
    print(f"60 kB through 20 % loss each way in {r['tcp_seconds']} s (RTO capped: {r['rto_capped']})")
    assert int(re.search(r"TcpRetransSegs\s+(\d+)", r["retrans"]).group(1)) > 0
    assert r["errors"] == []


@pytest.mark.parametrize("sw", SWITCHES)
def test_every_pcap_holds_the_frames_sent_just_before_the_stop(sw, tmp_path, reg_env):
    """tcpdump reads the kernel's ring a block at a time (full, or 1 s old) and drops
    the unread rest at SIGTERM: the teardown waits for the interface counters."""
    _, env = reg_env
    r = support.run_child("capture_tail", sw, str(tmp_path / "run"), env=env)
    assert r["counts"]["w1-eth0.pcap"] == 300, r
    # the switch ports: tcpdump on a bridge's (s1-eth1.pcap), the soft switch's
    # own capture (s1-eth1_in.pcap, s1-eth1_out.pcap)
    for port in ("s1-eth1", "s1-eth2"):
        assert sum(n for name, n in r["counts"].items() if name.startswith(port)) == 300, r
    # no frames of the network's own (a Linux bridge's device sent IPv6 router solicitations
    # and MLD reports through every port, one of them past the drain)
    assert all(protos == [] for protos in r["others"].values()), r["others"]
    assert r["errors"] == []


def test_shaping_tc_refused_is_never_recorded_as_applied(tmp_path, reg_env):
    """Mininet only logs a refused `tc class add` and leaves the link unshaped;
    the network reads every htb rate back and refuses to start instead."""
    _, env = reg_env
    r = support.run_child("unshaped", "bridge", str(tmp_path / "run"), env=env)
    assert r["error"] and "bandwidth_mbps=1e-09 on w1-eth0 was not applied" in r["error"], r["error"]
    assert "no htb class 5:1" in r["error"], r["error"]
    bw = [row for row in r["report"] if row["parameter"] == "bandwidth_mbps"]
    assert len(bw) == 4, r["report"]   # both directions of w1's and w2's links
    assert all(row["applied"] is False and "was not applied" in row["note"] for row in bw), bw
    assert r["alive"] == []


def test_failed_start_is_clear_and_leaves_nothing(tmp_path, reg_env):
    _, env = reg_env
    r = support.run_child("fail", str(tmp_path / "run"), env=env)
    assert r["error"] and "switch refused to start" in r["error"]
    assert r["recorded"] >= 3 and r["alive"] == []  # 2 host shells + 1 switch shell, all gone
    assert not r["registry_exists"]
    assert r["report"] and all(row["applied"] is False for row in r["report"])


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _started_after(pid: int, ticks: int) -> bool:
    from testbed.net.registry import proc_start_time
    start = proc_start_time(pid)
    return start is None or start > ticks


def _alive(pid: int, start: int) -> bool:
    from testbed.net.registry import alive
    return alive(pid, start)


@pytest.mark.parametrize("sw", SWITCHES)
def test_sigkill_leaves_nothing_after_clean(sw, tmp_path, reg_env):
    from testbed.clean import clean
    from testbed.net.registry import leftovers

    reg_dir, env = reg_env
    ns_before = set(support.netns_inodes())
    intf_before = support.root_interfaces()
    info_path = tmp_path / "info.json"
    child = subprocess.Popen([support.PYTHON, support.__file__, "hold", sw, str(tmp_path / "run"),
                              str(info_path)], cwd=support.ROOT, env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not info_path.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                out = child.stdout.read().decode(errors="replace") if child.poll() is not None else ""
                pytest.fail(f"network did not come up (rc={child.poll()}):\n{out[-3000:]}")
            time.sleep(0.1)
        info = json.loads(info_path.read_text())
        assert set(info["netns"]) <= set(support.netns_inodes()), "run namespaces should exist now"
        assert support.pids_with_env("INNET_TESTBED_RUN", info["run_id"])
    finally:
        child.send_signal(signal.SIGKILL)  # no finally blocks, no atexit: a real crash
        child.wait(timeout=30)
        killed_at = _uptime_ticks()

    assert [r["run_id"] for r in leftovers(reg_dir)] == [info["run_id"]]
    lines = clean(base=reg_dir)
    assert any(info["run_id"] in line for line in lines)
    assert leftovers(reg_dir) == [] and not Path(info["registry_path"]).exists()

    # Processes: none of the recorded ones, nor anything carrying the run's id.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        live = [c for c in info["children"] if _alive(c["pid"], c["start"])]
        tagged = support.pids_with_env("INNET_TESTBED_RUN", info["run_id"])
        if not live and not tagged:
            break
        time.sleep(0.2)
    assert live == [], f"recorded processes still alive: {live}"
    assert tagged == [], f"processes of the run still alive: {tagged}"

    # Namespaces: the run's ones are gone. (An inode the kernel reused for
    # another process's new namespace since would not be held by our run.)
    after = support.netns_inodes()
    new = set(after) - ns_before
    leaked = {ino: pids for ino in set(info["netns"]) & new
              if (pids := {p for p in after[ino] if not _started_after(p, killed_at)})}
    assert leaked == {}, f"namespaces of the run still exist: {leaked}"
    # Interfaces: nothing of the run appeared in the machine's namespace.
    appeared = support.root_interfaces() - intf_before
    assert not appeared & set(info["interfaces"]), appeared
