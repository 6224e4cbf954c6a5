"""The soft switch in Mininet: a 3-host star inside a private network namespace.

pytest runs this file again as a script under `unshare -n` (the "inner" part,
which drives Mininet and writes what it saw to a JSON file); the test then
checks that record and the pcaps. Traffic: `python -m bench.switch_forwarding
send|recv` in the hosts.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.mininet

LOSS_PCT = 10.0
BURST = 5000
LOSS_PKTS = 20000


def mac(i: int) -> str:
    return f"00:00:00:00:00:{i:02x}"


# --- inner part: runs as root inside the private netns ---------------------------

def _build(work: Path, name: str, impairments: dict, pcap: bool, io_impl: str):
    from mininet.link import Link
    from mininet.net import Mininet

    from testbed.switch.soft.node import SoftSwitchNode

    net = Mininet(topo=None, build=False, controller=None, link=Link, autoSetMacs=False)
    hosts = [net.addHost(f"h{i}", ip=f"10.0.0.{i}/24", mac=mac(i)) for i in (1, 2, 3)]
    cfg = {"forwarding": [{"dst_mac": mac(i), "port": i} for i in (1, 2, 3)], "flood": True,
           "impairments": impairments, "seed": 7, "batch": 256, "pipeline": "forward",
           "io_impl": io_impl,
           "pcap_dir": str(work / name / "pcaps") if pcap else None}
    s1 = net.addSwitch("s1", cls=SoftSwitchNode, switch_config=cfg, run_dir=work / name,
                       log_path=work / name / "s1.log")
    for h in hosts:
        net.addLink(h, s1)  # h<i> on switch port i
    net.build()
    for h in hosts:
        h.cmd(f"ethtool -K {h.defaultIntf()} tx off rx off tso off gso off gro off >/dev/null 2>&1")
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
    net.staticArp()
    net.start()
    return net


def _traffic(net, work: Path, tag: str, src: str, dst: str, count: int, rate: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    mod = [sys.executable, "-m", "bench.switch_forwarding"]
    ready, rout, sout = work / f"{tag}.ready", work / f"{tag}.recv.json", work / f"{tag}.send.json"
    with open(work / f"{tag}.log", "ab") as log:
        kw = dict(cwd=str(REPO), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        recv = net.get(dst).popen(mod + ["recv", "--idle", "0.5", "--max-time", "30", "--ready",
                                         str(ready), "--out", str(rout)], **kw)
        deadline = time.monotonic() + 15
        while not ready.exists():
            assert recv.poll() is None and time.monotonic() < deadline, "receiver did not start"
            time.sleep(0.02)
        send = net.get(src).popen(mod + ["send", "--dst", net.get(dst).IP(), "--count", str(count),
                                         "--rate", str(rate), "--out", str(sout)], **kw)
        assert send.wait(timeout=30) == 0
        assert recv.wait(timeout=30) == 0
    return {"send": json.loads(sout.read_text()), "recv": json.loads(rout.read_text())}


def _delta(a: dict, b: dict, port: int, key: str) -> int:
    return b["ports"][str(port)][key] - a["ports"][str(port)][key]


def _proc_with(text: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if text in Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def inner(work: Path, io_impl: str) -> dict:
    from mininet.log import setLogLevel

    from testbed.switch.soft.process import pid_alive
    setLogLevel("warning")
    res: dict = {}

    # Phase A: plain forwarding with capture.
    net = _build(work, "a", {}, pcap=True, io_impl=io_impl)
    s1 = net.get("s1")
    try:
        res["connected"] = s1.connected()
        res["ping_loss_pct"] = net.pingAll(timeout="1")
        snap0 = s1.snapshot()
        res["burst"] = _traffic(net, work, "burst", "h1", "h2", BURST, 20000)
        snap1 = s1.snapshot()
        res["burst_switch"] = {k: _delta(snap0, snap1, p, f) for k, p, f in (
            ("rx1", 1, "rx"), ("kdrops1", 1, "rx_kernel_drops"), ("tx2", 2, "tx"),
            ("tx_dropped2", 2, "tx_dropped"))}
        pid = s1.process.pid
        cfg_path = str(s1.process.config_path)
    finally:
        net.stop()
    res["a_stats"] = s1.stats
    res["a_pid_alive_after_stop"] = pid_alive(pid)
    res["a_procs_after_stop"] = _proc_with(cfg_path)
    res["pcap_dir"] = str(work / "a" / "pcaps")

    # Phase B: 10 % loss on the egress of h3's port.
    net = _build(work, "b", {"3": {"egress": {"loss_pct": LOSS_PCT}}}, pcap=False, io_impl=io_impl)
    s1 = net.get("s1")
    try:
        snap0 = s1.snapshot()
        res["loss"] = _traffic(net, work, "loss", "h1", "h3", LOSS_PKTS, 40000)
        snap1 = s1.snapshot()
        e0 = snap0["ports"]["3"]["impairments"]["egress"]
        e1 = snap1["ports"]["3"]["impairments"]["egress"]
        res["loss_switch"] = {"seen": e1["seen"] - e0["seen"], "dropped": e1["dropped"] - e0["dropped"],
                              "tx3": _delta(snap0, snap1, 3, "tx"),
                              "rx1": _delta(snap0, snap1, 1, "rx"),
                              "kdrops1": _delta(snap0, snap1, 1, "rx_kernel_drops")}
        pid = s1.process.pid
        cfg_path = str(s1.process.config_path)
    finally:
        net.stop()
    res["b_stats"] = s1.stats
    res["b_pid_alive_after_stop"] = pid_alive(pid)
    res["b_procs_after_stop"] = _proc_with(cfg_path)
    return res


# --- the test ------------------------------------------------------------------------

@pytest.mark.parametrize("io_impl", ["mmap_ring", "mmsg"])
def test_soft_switch_star(tmp_path, io_impl):
    sys.path.insert(0, str(HERE))
    import netns

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "inner.json"
    t0 = time.monotonic()
    proc = netns.run_in_private_netns([sys.executable, str(Path(__file__)), str(tmp_path), str(out),
                                       io_impl], timeout=180)
    wall = time.monotonic() - t0
    detail = f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0 and out.exists(), detail
    r = json.loads(out.read_text())

    assert r["connected"]
    assert r["ping_loss_pct"] == 0, f"pingAll lost {r['ping_loss_pct']}%\n{detail}"

    # UDP burst: sender, switch and receiver agree packet for packet.
    sent, got = r["burst"]["send"]["sent"], r["burst"]["recv"]["received"]
    sw = r["burst_switch"]
    assert sent == BURST
    assert sw["rx1"] + sw["kdrops1"] == sent, sw
    assert sw["tx2"] == got, (sw, got)
    assert sw["tx2"] == sw["rx1"] and sw["tx_dropped2"] == 0, sw

    # 10 % switch-side loss: close to configured, and counters match the receiver.
    ls, lr = r["loss_switch"], r["loss"]["recv"]["received"]
    assert ls["rx1"] + ls["kdrops1"] == LOSS_PKTS and ls["seen"] == ls["rx1"], ls
    assert ls["tx3"] == lr == ls["seen"] - ls["dropped"], (ls, lr)
    p, n = LOSS_PCT / 100, ls["seen"]
    observed = ls["dropped"] / n
    assert abs(observed - p) < 4.5 * math.sqrt(p * (1 - p) / n), f"loss {observed:.4f} vs {p}"

    # Stats written at stop; no switch process left.
    for phase in ("a", "b"):
        st = r[f"{phase}_stats"]
        assert st and st["final"] and st["io_mode"] == st["io_impl"] == io_impl, st
        assert not r[f"{phase}_pid_alive_after_stop"]
        assert r[f"{phase}_procs_after_stop"] == []
    assert r["b_stats"]["ports"]["3"]["impairments"]["egress"]["active"]

    # pcaps exist and scapy reads them: the burst is in h1's "in" and h2's "out" capture.
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    pdir = Path(r["pcap_dir"])
    names = sorted(p.name for p in pdir.glob("*.pcap"))
    assert names == sorted(f"s1-eth{i}_{d}.pcap" for i in (1, 2, 3) for d in ("in", "out")), names
    cap_in = [p for p in rdpcap(str(pdir / "s1-eth1_in.pcap")) if UDP in p and p[UDP].dport == 5001]
    cap_out = [p for p in rdpcap(str(pdir / "s1-eth2_out.pcap")) if UDP in p and p[UDP].dport == 5001]
    assert len(cap_in) == sw["rx1"] and len(cap_out) == got
    assert bytes(cap_in[0]) == bytes(cap_out[0])
    print(f"mininet soft switch test: inner run {wall:.1f}s")


if __name__ == "__main__":
    work_dir, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    result = inner(work_dir, sys.argv[3])
    out_path.write_text(json.dumps(result, indent=1, default=str))
