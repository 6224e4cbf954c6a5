"""Helpers for the Mininet network tests.

The networks are built in a child process (``python _support.py <mode> ...``)
because entering a private network namespace moves the whole process, and
pytest's own process must stay where it is. The child prints/writes JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def soft_switch_available() -> bool:
    return (ROOT / "testbed" / "switch" / "soft" / "node.py").exists()


def switch_cls(name: str) -> type:
    if name == "bridge":
        from mininet.nodelib import LinuxBridge
        return LinuxBridge
    from testbed.switch.soft.node import SoftSwitchNode
    return SoftSwitchNode


def netns_inodes() -> dict[int, set[int]]:
    """netns inode -> PIDs holding it, over every process we can see."""
    out: dict[int, set[int]] = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                out.setdefault(os.stat(f"/proc/{e.name}/ns/net").st_ino, set()).add(int(e.name))
            except OSError:
                pass
    return out


def pids_with_env(key: str, value: str) -> list[int]:
    """Processes whose environment says KEY=VALUE (every process of a run has
    INNET_TESTBED_RUN=<run id>)."""
    needle = f"{key}={value}".encode()
    found = []
    for e in os.scandir("/proc"):
        if e.name.isdigit() and int(e.name) != os.getpid():
            try:
                env = Path(f"/proc/{e.name}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in env:
                found.append(int(e.name))
    return found


def root_interfaces() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def run_child(mode: str, *args: str, env: dict[str, str] | None = None, timeout: float = 240
              ) -> dict:
    res = subprocess.run([PYTHON, __file__, mode, *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})
    if res.returncode != 0:
        raise AssertionError(f"child {mode} {args} failed ({res.returncode}):\n"
                             f"stdout:\n{res.stdout[-4000:]}\nstderr:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# --- child side ---------------------------------------------------------------
def _ping_all(net) -> list[str]:
    failed = []
    for a in net.hosts:
        for b in net.hosts.values():
            if a != b.name:
                rc, out = net.run(a, ["ping", "-c", "1", "-W", "2", b.ip])
                if rc != 0:
                    failed.append(f"{a}->{b.name}")
    return failed


def _child_check(kind: str, sw: str, run_dir: str) -> dict:
    """Build, ping all pairs, inspect shaping, run a program, stop."""
    from testbed.net.isolation import enter_private_netns
    from testbed.net.mininet_net import MininetNetwork

    enter_private_netns()
    hosts = ["w1", "w2", "w3", "w4", "w5", "ps"]
    links = {"bandwidth_mbps": 50, "hosts": {"w3": {"bandwidth_mbps": 20}}}
    net = MininetNetwork({"kind": kind, "workers": 5, "leaves": 2}, links, hosts, switch_cls(sw),
                         {"pipeline": "forward"}, Path(run_dir), seed=3, capture=False)
    t0 = time.monotonic()
    with net:
        up_s = time.monotonic() - t0
        failed = _ping_all(net)
        qdisc = {h: net.run(h, ["tc", "qdisc", "show", "dev", f"{h}-eth0"])[1] for h in ("w1", "w3")}
        tclass = {h: net.run(h, ["tc", "class", "show", "dev", f"{h}-eth0"])[1] for h in ("w1", "w3")}
        # the switch port facing each of them (its egress carries the host's downlink)
        facing = {ln.node1: (ln.node2, ln.port2) for ln in net.plan.links if ln.node1 in ("w1", "w3")}
        sw_class = {h: net.run(s, ["tc", "class", "show", "dev", f"{s}-eth{p}"])[1]
                    for h, (s, p) in facing.items()}
        log = Path(run_dir) / "w1.log"
        p = net.popen("w1", ["sh", "-c", "echo hello from $(hostname); ip -o -4 addr show"], log)
        p.wait(timeout=10)
        neigh = net.run("w2", ["ip", "neigh", "show"])[1]
        offload = net.run("w2", ["ethtool", "-k", "w2-eth0"])[1]
        ipv6 = net.run("w2", ["sysctl", "-n", "net.ipv6.conf.all.disable_ipv6"])[1].strip()
        slow_start = net.run("w2", ["sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle"])[1].strip()
        registry_path = str(net._registry.path)
    shapers = {h: net.switch_stats()[s]["ports"][str(p)]["ingress_shaper"] if net.switch_stats() else None
               for h, (s, p) in facing.items()}
    return {"up_s": up_s, "failed": failed, "qdisc": qdisc, "class": tclass, "switch_class": sw_class,
            "shapers": shapers, "report": net.impairment_report(),
            "log": log.read_text(), "neigh": neigh, "offload": offload, "ipv6_disabled": ipv6,
            "slow_start_after_idle": slow_start,
            "registry_path": registry_path, "registry_exists_after": Path(registry_path).exists(),
            "stats": sorted(net.switch_stats()), "errors": net.errors}


def _child_nft(sw: str, run_dir: str) -> dict:
    """Loss by nftables on w2's link, both ways (its ingress, and its egress
    through the netdev egress hook): counted and reported; TCP from w2 sees
    the egress losses as losses (it retransmits)."""
    from testbed.net.isolation import enter_private_netns
    from testbed.net.mininet_net import MininetNetwork

    enter_private_netns()
    links = {"mechanism": "nftables", "hosts": {"w2": {"loss_pct": 20}}}
    net = MininetNetwork({"kind": "star", "workers": 2}, links, ["w1", "w2"], switch_cls(sw), {},
                         Path(run_dir), seed=1)
    with net:
        ruleset = net.run("w2", ["nft", "list", "ruleset"])[1]
        ping = net.run("w1", ["ping", "-q", "-c", "500", "-i", "0.002", "-W", "1", "10.0.0.2"],
                       timeout=60)[1]
        sink = net.popen("w1", [sys.executable, "-c", _TCP_SINK], Path(run_dir) / "sink.log")
        time.sleep(0.5)
        rc, sent = net.run("w2", [sys.executable, "-c", _TCP_SEND], timeout=TCP_TIMEOUT_S)
        try:
            sink.wait(timeout=TCP_TIMEOUT_S if rc == 0 else 5)
        except subprocess.TimeoutExpired:
            pass            # the sender failed: its output says why, the teardown stops the sink
        received = (Path(run_dir) / "sink.log").read_text()
        retrans = net.run("w2", ["nstat", "-az", "TcpRetransSegs"])[1]
    words = sent.split()
    sent_ok = rc == 0 and len(words) == 3
    return {"ruleset": ruleset, "ping": ping, "report": net.impairment_report(), "errors": net.errors,
            "tcp_rc": rc, "tcp_sent": words[0] if sent_ok else sent.strip(),
            "tcp_seconds": float(words[1]) if sent_ok else None, "rto_capped": sent_ok and words[2] == "1",
            "tcp_received": received.strip(), "retrans": retrans}


# 60 kB over TCP from w2 to w1 through w2's lossy link. 20 % each way fails 36 % of
# round trips, and TCP doubles its retransmission timeout with every failure in a row,
# from timeouts its inflated RTT samples already put at 1-5 s: 82 transfers took
# 0.05-71 s (median 0.5 s), a heavy tail that once ran past the old 50 s socket timeout.
# Both ends cap the timeout at 1 s (TCP_RTO_MAX_MS, Linux 6.15+): 100 transfers took
# 0.05-15.6 s (median 0.6 s). Where the kernel lacks the option the run's own timeout
# bounds the transfer. The sender keeps its socket until the sink has read everything
# and closed (never orphaned, whose retries the kernel caps), and tries the connect
# again if all its SYNs were lost.
_CAP_RTO = ("import socket, time\n"
            "def cap_rto(s):\n"
            "    try: s.setsockopt(socket.IPPROTO_TCP, 44, 1000); return 1   # TCP_RTO_MAX_MS\n"
            "    except OSError: return 0\n")
_TCP_SINK = _CAP_RTO + (
    "l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); cap_rto(l)\n"
    "l.bind(('10.0.0.1', 7001)); l.listen(1); c, _ = l.accept(); n = 0\n"
    "while True:\n    d = c.recv(65536)\n    if not d: break\n    n += len(d)\n"
    "print(n, flush=True); c.close()")
_TCP_SEND = _CAP_RTO + (
    "t = time.monotonic()\n"
    "while True:\n"
    "    s = socket.socket(); capped = cap_rto(s)\n"
    "    try: s.connect(('10.0.0.1', 7001)); break\n"
    "    except TimeoutError: s.close()\n"
    "s.sendall(b'x' * 60_000); s.shutdown(socket.SHUT_WR); s.recv(1)\n"
    "print(60_000, round(time.monotonic() - t, 1), capped)")
TCP_TIMEOUT_S = 240


def _child_hold(sw: str, run_dir: str, info_path: str) -> None:
    """Build a network, start long-running host programs, say so, wait to be killed."""
    from testbed.net.isolation import enter_private_netns, netns_inode
    from testbed.net.mininet_net import MininetNetwork

    enter_private_netns()
    net = MininetNetwork({"kind": "tree", "workers": 4, "leaves": 2}, {"bandwidth_mbps": 100},
                         ["w1", "w2", "w3", "w4", "ps"], switch_cls(sw), {"pipeline": "forward"},
                         Path(run_dir), seed=1)
    net.start()
    for h in net.hosts:
        net.popen(h, ["sleep", "600"], Path(run_dir) / f"{h}.log")
    reg = net._registry
    info = {"run_id": reg.run_id, "registry_path": str(reg.path),
            "children": reg.record["children"],
            "netns": sorted({*reg.record["netns"], netns_inode()}),
            "interfaces": sorted(i.name for n in [*net.hosts, *net.switch_names]
                                 for i in net.node(n).intfList() if i.name != "lo")}
    tmp = Path(info_path + ".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(info_path)
    time.sleep(600)


def _child_fail(run_dir: str) -> dict:
    """A switch that fails to start: a clear error, everything torn down."""
    from mininet.nodelib import LinuxBridge

    from testbed.net.base import NetworkError
    from testbed.net.isolation import enter_private_netns
    from testbed.net.mininet_net import MininetNetwork
    from testbed.net.registry import alive

    class BrokenBridge(LinuxBridge):
        def start(self, controllers):
            raise RuntimeError("switch refused to start")

    enter_private_netns()
    net = MininetNetwork({"kind": "star", "workers": 2}, {"mechanism": "nftables", "loss_pct": 5},
                         ["w1", "w2"], BrokenBridge, {}, Path(run_dir))
    try:
        net.start()
        error = None
    except NetworkError as e:
        error = str(e)
    mine = net._mine
    return {"error": error, "report": net.impairment_report(),
            "recorded": len(mine), "alive": [c for c in mine if alive(c["pid"], c["start"])],
            "registry_exists": net._registry.path.exists()}


def _child_unshaped(sw: str, run_dir: str) -> dict:
    """A rate tc refuses (1e-9 Mbit/s; the scenario schema refuses it first, so
    this builds the network directly): start fails, nothing says it was applied."""
    from testbed.net.impairments import ImpairmentError
    from testbed.net.isolation import enter_private_netns
    from testbed.net.mininet_net import MininetNetwork
    from testbed.net.registry import alive

    enter_private_netns()
    links = {"bandwidth_mbps": 0.000000001, "hosts": {"w2": {"bandwidth_mbps": 20}}}
    net = MininetNetwork({"kind": "star", "workers": 2}, links, ["w1", "w2"], switch_cls(sw),
                         {"pipeline": "forward"}, Path(run_dir), seed=1)
    try:
        net.start()
        error = None
    except ImpairmentError as e:
        error = str(e)
    finally:
        net.stop()
    return {"error": error, "report": net.impairment_report(),
            "alive": [c for c in net._mine if alive(c["pid"], c["start"])]}


_UDP_BURST = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
              "for i in range(300): s.sendto(b'x' * 100, ('10.0.0.2', 7002))")


def _child_capture_tail(sw: str, run_dir: str) -> dict:
    """300 UDP frames from w1 just before the network stops: every tcpdump pcap
    (w1's own interface, and the switch ports where the switch class cannot
    capture) holds all of them, although libpcap had not yet handed tcpdump
    the block they sit in."""
    from testbed.net.isolation import enter_private_netns
    from testbed.net.mininet_net import MininetNetwork
    from testbed.pcap import read_frames

    enter_private_netns()
    net = MininetNetwork({"kind": "star", "workers": 2}, {}, ["w1", "w2"], switch_cls(sw),
                         {"pipeline": "forward"}, Path(run_dir), seed=1, capture=True, capture_hosts=["w1"])
    with net:
        net.popen("w1", [sys.executable, "-c", _UDP_BURST], Path(run_dir) / "w1.log").wait(timeout=30)
    frames = {p.name: list(read_frames(p)) for p in sorted(net.pcap_dir.glob("*.pcap"))}
    counts = {name: sum(1 for f in fs if f.proto == "udp" and f.dport == 7002) for name, fs in frames.items()}
    # anything but the burst and w2's ICMP port-unreachable replies (the network's own chatter)
    others = {name: sorted({f.proto for f in fs if f.proto not in ("udp", "icmp")}) for name, fs in frames.items()}
    return {"counts": counts, "others": others, "errors": net.teardown_problems()}


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "check":
        print(json.dumps(_child_check(*argv[1:4])))
    elif mode == "nft":
        print(json.dumps(_child_nft(*argv[1:3])))
    elif mode == "unshaped":
        print(json.dumps(_child_unshaped(*argv[1:3])))
    elif mode == "capture_tail":
        print(json.dumps(_child_capture_tail(*argv[1:3])))
    elif mode == "fail":
        print(json.dumps(_child_fail(argv[1])))
    elif mode == "hold":
        _child_hold(*argv[1:4])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(sys.argv[1:])
