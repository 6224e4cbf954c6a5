"""Forwarding benchmark: the soft switch against the Linux bridge, side by side.

One run, inside a private network namespace: the same Mininet topology
(h1 - s1 - h2, static ARP, offloads off) is built with a Linux bridge and then
with the soft switch; a UDP sender in h1 sends at several fixed rates and
unlimited, a receiver in h2 counts. Reports delivered pps and loss per rate,
the soft/bridge ratio, and the soft switch's CPU time per packet. The soft
switch runs in both port I/O implementations (`io_impl`: mmap_ring, the packet
ring, and mmsg, recvmmsg/sendmmsg), each at normal and raised priority.
Then each of NDR_KINDS' no-drop rate (bench/ndr.py: the highest paced rate
forwarded with at most 0.1 % loss), since an unpaced sender cannot overrun the
bridge, which forwards in the sender's own system call, but can overrun a
switch process.

    python -m bench.switch_forwarding run [--kinds K,..] [--rates R,..] [--ndr K,..|'']

This is a measurement, not a test: nothing here asserts timings.

Also the traffic tools used by the Mininet tests:
  python -m bench.switch_forwarding send --dst IP --port P [--rate PPS] (--duration S | --count N)
  python -m bench.switch_forwarding recv --port P --out result.json [--ready file]
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import ndr

ROOT = Path(__file__).resolve().parent.parent
RATES = [10_000, 50_000, 100_000, 200_000, 0]  # pps; 0 = as fast as the sender can
PAYLOAD = 172          # UDP payload: 214-byte Ethernet frames, as in research/feasibility.md
DURATION = 3.0         # seconds per rate
NDR_KINDS = ["bridge", "soft_fast", "soft_prio_fast"]   # whose no-drop rate `run` searches
NDR_TRIAL_S = 2.0      # seconds per no-drop-rate trial
NDR_STEPS = 6          # halvings after the first trial: resolution ~1/64 of the range
UDP_PORT = 5001


# --- traffic tools (run inside Mininet hosts) --------------------------------------

def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def cmd_send(a: argparse.Namespace) -> dict:
    """UDP sender: sendmmsg of a fixed buffer whose first 8 bytes per packet are a
    sequence number; paced on a cumulative schedule when --rate > 0."""
    from testbed.switch.soft.dataplane import MmsgTx

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.connect((a.dst, a.port))
    sock.setblocking(False)
    nb = 64 if a.rate <= 0 else int(min(64, max(1, a.rate // 4000)))
    size = max(8, a.size)
    buf = np.zeros(nb * size, np.uint8)
    seqv = buf.reshape(nb, size)[:, :8].view(">u8")[:, 0]
    tx = MmsgTx(sock.fileno(), nb)
    tx.point_at(buf.ctypes.data + np.arange(nb, dtype=np.uint64) * size,
                np.full(nb, size, np.uint64))
    limit = a.count if a.count else None
    sent = errors = 0
    cpu0, t0 = _cpu(), time.monotonic()
    end = t0 + a.duration if not limit else float("inf")
    while True:
        now = time.monotonic()
        if now >= end or (limit is not None and sent >= limit):
            break
        if a.rate > 0:
            due = t0 + sent / a.rate
            if due > now:
                time.sleep(due - now)
        k = nb if limit is None else min(nb, limit - sent)
        seqv[:k] = np.arange(sent, sent + k, dtype=np.uint64)
        r = tx.send_prepared(0, k)
        if r > 0:
            sent += r
        elif -r == errno.EAGAIN:
            select.select([], [sock], [], 0.01)
        else:
            errors += 1  # e.g. ECONNREFUSED from an earlier ICMP: keep going
    dur = time.monotonic() - t0
    sock.close()
    return {"sent": sent, "duration_s": dur, "rate_target": a.rate, "errors": errors,
            "cpu_s": _cpu() - cpu0, "size": size}


def cmd_recv(a: argparse.Namespace) -> dict:
    """UDP receiver: recvmmsg, count; ends `--idle` s after the last packet or at --max-time."""
    from testbed.switch.soft.dataplane import MmsgRx

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
    sock.bind(("0.0.0.0", a.port))
    rx = MmsgRx(sock.fileno(), 256, 2048)
    if a.ready:
        Path(a.ready).write_text(str(os.getpid()))
    count = nbytes = 0
    first = last = None
    max_seq = -1
    cpu0, t0 = _cpu(), time.monotonic()
    while True:
        now = time.monotonic()
        if now - t0 > a.max_time or (last is not None and now - last > a.idle):
            break
        r, _, _ = select.select([sock], [], [], 0.05)
        if not r:
            continue
        frames, b = rx.recv()
        if frames:
            last = time.monotonic()
            if first is None:
                first = last
            count += len(frames)
            nbytes += b
            max_seq = max(max_seq, int.from_bytes(frames[-1][:8], "big"))
    sock.close()
    return {"received": count, "bytes": nbytes, "max_seq": max_seq,
            "active_s": (last - first) if first is not None else 0.0,
            "cpu_s": _cpu() - cpu0}


# --- the experiment (runs inside a private network namespace) ------------------------

def _host_setup(h) -> None:
    intf = h.defaultIntf().name
    h.cmd(f"ethtool -K {intf} tx off rx off tso off gso off gro off >/dev/null 2>&1")
    h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")


# Both switches live in one network, each with its own host pair, so that the
# two are measured alternately under the same machine load.
# soft_prio: the soft switch with a raised scheduling priority (nice -10 on the
# process and its autogroup), since the bridge's forwarding runs in softirq,
# ahead of every process, while the soft switch competes with the hosts.
PAIRS = {"bridge": ("s1", "h1", "h2"), "soft": ("s2", "h3", "h4"), "soft_prio": ("s3", "h5", "h6"),
         "soft_mmsg": ("s4", "h7", "h8"), "soft_prio_mmsg": ("s5", "h9", "h10"),
         "soft_fast": ("s6", "h11", "h12"), "soft_prio_fast": ("s7", "h13", "h14")}
# The soft kinds' io_impl (switch.options.io_impl): *_fast = ring_fastpath (the compiled
# loop, no Python per frame), plain = mmap_ring (the Python loop over the rings),
# *_mmsg = recvmmsg/sendmmsg.
IO_IMPL = {"soft": "mmap_ring", "soft_prio": "mmap_ring", "soft_mmsg": "mmsg",
           "soft_prio_mmsg": "mmsg", "soft_fast": "ring_fastpath", "soft_prio_fast": "ring_fastpath"}
PRIO_NICE = -10


def _ip(h: str) -> str:
    return f"10.0.0.{int(h[1:])}"


def _mac(h: str) -> str:
    return f"00:00:00:00:00:{int(h[1:]):02x}"


def build_net(kinds: list[str], work: Path, batch: int = 256, own_netns: bool = False):
    from mininet.link import Link
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    from testbed.switch.soft.node import OFFLOADS_OFF, SoftSwitchNode

    if own_netns:
        # Our own namespace: bridged frames need not cross iptables (as a plain switch).
        for table in ("arptables", "iptables", "ip6tables"):
            try:
                Path(f"/proc/sys/net/bridge/bridge-nf-call-{table}").write_text("0")
            except OSError:
                pass
    net = Mininet(topo=None, build=False, controller=None, link=Link, autoSetMacs=False)
    for kind in kinds:
        sw, a, b = PAIRS[kind]
        hosts = [net.addHost(h, ip=_ip(h) + "/24", mac=_mac(h)) for h in (a, b)]
        if kind == "bridge":
            s = net.addSwitch(sw, cls=LinuxBridge)
        else:
            cfg = {"forwarding": [{"dst_mac": _mac(a), "port": 1}, {"dst_mac": _mac(b), "port": 2}],
                   "flood": True, "seed": 1, "pcap_dir": None, "batch": batch,
                   "pipeline": "forward", "io_impl": IO_IMPL[kind]}
            s = net.addSwitch(sw, cls=SoftSwitchNode, switch_config=cfg, run_dir=work / sw,
                              log_path=work / f"{sw}.log",
                              nice=PRIO_NICE if kind.startswith("soft_prio") else None)
        for h in hosts:
            net.addLink(h, s)  # a -> port 1, b -> port 2
    net.build()
    for sw in net.switches:
        if not hasattr(sw, "snapshot"):
            for intf in sw.intfNames():
                if intf != "lo":
                    sw.cmd(f"ethtool -K {intf} {OFFLOADS_OFF} >/dev/null 2>&1")
    for h in net.hosts:
        _host_setup(h)
    net.staticArp()
    net.start()
    for kind in kinds:  # warm up: a bridge drops the first ~0.5 s after it comes up
        _, a, b = PAIRS[kind]
        ha = net.get(a)
        deadline = time.monotonic() + 10
        while "1 received" not in ha.cmd(f"ping -c1 -W1 {_ip(b)}"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: {a} cannot reach {b}")
    return net


def _py_popen(h, args: list[str], log: Path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    with open(log, "ab") as lf:
        return h.popen([sys.executable, "-m", "bench.switch_forwarding", *args], cwd=str(ROOT),
                       env=env, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)


def _wait_file(path: Path, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"receiver did not start (rc={proc.poll()}); see its log")
        time.sleep(0.02)


def _machine_busy() -> tuple[float, float]:
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v), idle


def measure(net, kind: str, rate: int, duration: float, size: int, work: Path,
            rep: int = 0) -> dict:
    sw, a, b = PAIRS[kind]
    src, dst, s1 = net.get(a), net.get(b), net.get(sw)
    tag = f"{kind}_{rate or 'max'}_{rep}"
    ready, rout, sout = (work / f"{tag}.recv.ready", work / f"{tag}.recv.json",
                         work / f"{tag}.send.json")
    for p in (ready, rout, sout):
        p.unlink(missing_ok=True)
    recv = _py_popen(dst, ["recv", "--port", str(UDP_PORT), "--idle", "1.0", "--max-time",
                           str(duration + 30), "--ready", str(ready), "--out", str(rout)],
                     work / f"{tag}.recv.log")
    _wait_file(ready, recv, 20)
    soft = kind.startswith("soft")
    snap0 = s1.snapshot() if soft else None
    tot0, idle0 = _machine_busy()
    send = _py_popen(src, ["send", "--dst", _ip(b), "--port", str(UDP_PORT), "--rate",
                           str(rate), "--duration", str(duration), "--size", str(size),
                           "--out", str(sout)], work / f"{tag}.send.log")
    send.wait(timeout=duration + 30)
    tot1, idle1 = _machine_busy()
    recv.wait(timeout=60)
    snap1 = s1.snapshot() if soft else None
    s, r = json.loads(sout.read_text()), json.loads(rout.read_text())
    res = {"switch": kind, "rate_target_pps": rate, "repeat": rep, "sent": s["sent"],
           "received": r["received"], "send_duration_s": s["duration_s"],
           "sent_pps": s["sent"] / s["duration_s"] if s["duration_s"] else 0.0,
           "delivered_pps": r["received"] / s["duration_s"] if s["duration_s"] else 0.0,
           "loss_pct": 100.0 * (1 - r["received"] / s["sent"]) if s["sent"] else 0.0,
           "sender_cpu_s": s["cpu_s"], "receiver_cpu_s": r["cpu_s"],
           "machine_busy_pct": 100.0 * (1 - (idle1 - idle0) / max(1e-9, tot1 - tot0))}
    # Every process's CPU (sender, switch, receiver, softirqs), per frame delivered: what
    # a path costs the machine, the bound on its rate when the cores are all busy.
    res["machine_cpu_us_per_delivered"] = (1e6 * res["machine_busy_pct"] / 100 * (os.cpu_count() or 1)
                                           * s["duration_s"] / r["received"] if r["received"] else None)
    if snap0 and snap1:
        p1, p2 = snap1["ports"]["1"], snap1["ports"]["2"]
        rx = p1["rx"] - snap0["ports"]["1"]["rx"]
        tx = p2["tx"] - snap0["ports"]["2"]["tx"]
        cpu = snap1["cpu_time_s"] - snap0["cpu_time_s"]
        usr = snap1["cpu_user_s"] - snap0["cpu_user_s"]
        sched = ((snap1.get("cpu_sched_s") or 0) - (snap0.get("cpu_sched_s") or 0)) or None
        rq_wait = (snap1.get("runqueue_wait_s") or 0) - (snap0.get("runqueue_wait_s") or 0)
        vol = snap1["ctx_switches"]["voluntary"] - snap0["ctx_switches"]["voluntary"]
        kd = p1["rx_kernel_drops"] - snap0["ports"]["1"]["rx_kernel_drops"]
        batches = snap1["loop"]["rx_batches"] - snap0["loop"]["rx_batches"]
        res.update({"switch_rx": rx, "switch_tx": tx, "switch_cpu_s": cpu,
                    "switch_cpu_us_per_pkt": 1e6 * cpu / rx if rx else None,
                    "switch_user_us_per_pkt": 1e6 * usr / rx if rx else None,
                    "switch_sched_us_per_pkt": 1e6 * sched / rx if rx and sched else None,
                    "switch_cpu_pct": 100.0 * cpu / s["duration_s"] if s["duration_s"] else None,
                    # Time the switch was runnable but had no CPU: the machine's share, not ours.
                    "switch_runqueue_wait_pct": 100.0 * rq_wait / s["duration_s"] if s["duration_s"] else None,
                    "switch_sleeps": vol,
                    "switch_rx_kernel_drops": kd,
                    "switch_mean_rx_batch": rx / batches if batches else 0,
                    "switch_io_mode": snap1["io_mode"],
                    # what the switch says it ran (a silent fallback would show here)
                    "switch_io_impl": snap1.get("io_impl"),
                    "switch_spin_hits": snap1["loop"].get("spin_hits", 0) - snap0["loop"].get("spin_hits", 0)})
    return res


def inner(a: argparse.Namespace) -> dict:
    from mininet.log import setLogLevel
    setLogLevel("warning")
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rates = [int(x) for x in a.rates.split(",")]
    kinds = a.kinds.split(",")
    rows: list[dict] = []
    t0, load0 = time.time(), os.getloadavg()
    net = build_net(kinds, work, a.batch, a.own_netns)
    try:
        for rep in range(a.repeats):
            for rate in rates:
                # Rotate which switch goes first, so drifting load hits all alike.
                k = (rep + rates.index(rate)) % len(kinds)
                for kind in kinds[k:] + kinds[:k]:
                    rows.append(measure(net, kind, rate, a.duration, a.size, work, rep))
                    print(_fmt_row(rows[-1]), file=sys.stderr, flush=True)
        no_drop = no_drop_rates(net, a, rows, work) if a.ndr else {}
    finally:
        net.stop()
        for sw in net.switches:
            if getattr(sw, "stats", None):
                (work / f"{sw.name}.final_stats.json").write_text(json.dumps(sw.stats, indent=1))
    return {"benchmark": "switch_forwarding", "started": t0, "wall_s": time.time() - t0,
            "frame_bytes": a.size + 42, "duration_s_per_rate": a.duration, "repeats": a.repeats,
            "batch": a.batch, "prio_nice": PRIO_NICE, "cpus": os.cpu_count(),
            "loadavg_start": load0, "loadavg_end": os.getloadavg(),
            "rows": rows, "summary": summarize(rows, rates, kinds), "ndr": no_drop}


def no_drop_rates(net, a: argparse.Namespace, rows: list[dict], work: Path) -> dict:
    """Each of --ndr's kinds' no-drop rate (bench/ndr.py), --repeats times in a
    rotating order, searched up to --ndr-max or 1.05 x the bridge's unpaced rate."""
    kinds = a.ndr.split(",")
    hi = a.ndr_max
    if not hi:
        unpaced = [r["delivered_pps"] for r in rows if r["switch"] == "bridge" and r["rate_target_pps"] == 0]
        if not unpaced:
            raise SystemExit("--ndr needs --ndr-max, or the bridge measured unpaced (rate 0 in --rates)")
        hi = 1.05 * max(unpaced)
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for rep in range(a.repeats):
        for kind in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:
            res = ndr.search(lambda rate, kind=kind: measure(net, kind, rate, a.ndr_duration, a.size, work,
                                                             rep=100 + rep),
                             hi, a.ndr_steps)
            runs[kind].append(res)
            print(f"{kind:<15} no-drop rate {res['ndr_pps'] / 1e3:7.1f}k/s ({res['limited_by']}-bound, "
                  f"+-{res['resolution_pps'] / 1e3:.0f}k, {len(res['trials'])} trials)",
                  file=sys.stderr, flush=True)
    out: dict = {"hi_pps": hi, "trial_s": a.ndr_duration, "steps": a.ndr_steps,
                 "loss_ok_pct": ndr.LOSS_OK_PCT, "kinds": {}}
    for kind, rr in runs.items():
        out["kinds"][kind] = {"ndr_pps": float(np.mean([r["ndr_pps"] for r in rr])),
                              "ndr_pps_runs": [r["ndr_pps"] for r in rr],
                              "limited_by": [r["limited_by"] for r in rr],
                              **_cost_at_ndr(rr), "searches": rr}
    b = out["kinds"].get("bridge", {})
    for kind in kinds:
        if kind == "bridge":
            continue
        if b.get("ndr_pps"):
            out[f"ratio_{kind}_over_bridge"] = out["kinds"][kind]["ndr_pps"] / b["ndr_pps"]
        own = out["kinds"][kind].get("machine_cpu_us_per_frame")
        if own and b.get("machine_cpu_us_per_frame"):
            # The ratio the two paths' CPU costs alone allow with both cores busy.
            out[f"cpu_cost_ratio_{kind}_over_bridge"] = b["machine_cpu_us_per_frame"] / own
    return out


def _cost_at_ndr(searches: list[dict]) -> dict:
    """What a frame costs at the no-drop rate (each search's fastest passing trial,
    where nothing was lost, so no CPU went to frames dropped): the machine's CPU
    per frame, and the switch process's own share of it (all, and in user space)."""
    best = [max((t for t in s["trials"] if ndr.passed(t)), key=lambda t: t["delivered_pps"], default=None)
            for s in searches]
    best = [t for t in best if t is not None]
    return {"machine_cpu_us_per_frame": _mean(best, "machine_cpu_us_per_delivered"),
            "switch_cpu_us_per_frame": _mean(best, "switch_cpu_us_per_pkt"),
            "switch_user_us_per_frame": _mean(best, "switch_user_us_per_pkt")}


def _mean(rr: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rr if r.get(key) is not None]
    return float(np.mean(vals)) if vals else None


def summarize(rows: list[dict], rates: list[int], kinds: list[str]) -> list[dict]:
    """Per rate: mean over repeats per switch, and each soft variant / bridge."""
    out = []
    for rate in rates:
        row: dict = {"rate_target_pps": rate}
        for kind in kinds:
            rr = [r for r in rows if r["switch"] == kind and r["rate_target_pps"] == rate]
            if not rr:
                continue
            row[kind] = {"delivered_pps": _mean(rr, "delivered_pps"), "loss_pct": _mean(rr, "loss_pct"),
                         "cpu_us_per_pkt": _mean(rr, "switch_cpu_us_per_pkt"),
                         "runqueue_wait_pct": _mean(rr, "switch_runqueue_wait_pct")}
        bd = row.get("bridge", {}).get("delivered_pps")
        for kind in kinds:
            if kind != "bridge" and kind in row and bd:
                row[f"ratio_{kind}_over_bridge"] = row[kind]["delivered_pps"] / bd
        out.append(row)
    return out


def _fmt_row(r: dict) -> str:
    rate = f"{r['rate_target_pps'] // 1000}k" if r["rate_target_pps"] else "max"
    cpu = r.get("switch_cpu_us_per_pkt")
    return (f"{r['switch']:<9} {rate:>5} sent {r['sent_pps'] / 1e3:8.1f}k/s "
            f"delivered {r['delivered_pps'] / 1e3:8.1f}k/s loss {r['loss_pct']:6.2f}% "
            f"busy {r['machine_busy_pct']:5.1f}%"
            + (f"  switch {cpu:.2f} us/pkt, batch {r['switch_mean_rx_batch']:.0f}, "
               f"waited for CPU {r['switch_runqueue_wait_pct']:.0f}%" if cpu else ""))


def print_table(res: dict) -> None:
    kinds = [k for k in PAIRS if any(k in row for row in res["summary"])]
    soft = [k for k in kinds if k != "bridge"]
    print(f"switch_forwarding: {res['frame_bytes']}-byte frames, {res['duration_s_per_rate']}s "
          f"per rate x {res['repeats']} repeats, {res['cpus']} CPUs, load avg "
          f"{res['loadavg_start'][0]:.1f} -> {res['loadavg_end'][0]:.1f} (means over repeats; "
          f"soft_prio* = nice {res['prio_nice']}; soft* = io_impl mmap_ring, *_mmsg = mmsg, "
          f"*_fast = ring_fastpath)")
    head = f"{'rate':>6} |" + "".join(f" {k + ' pps':>14} {'loss%':>6} |" for k in kinds)
    head += "".join(f" {k + '/bridge':>16}" for k in soft)
    head += "".join(f" {k + ' us/pkt':>16}" for k in soft)
    print(head)
    nan = float("nan")
    for row in res["summary"]:
        rate = row["rate_target_pps"]
        line = f"{(str(rate // 1000) + 'k') if rate else 'max':>6} |"
        for k in kinds:
            d = row.get(k, {})
            line += f" {d.get('delivered_pps') or nan:>14.0f} {d.get('loss_pct') or 0:>6.2f} |"
        for k in soft:
            line += f" {row.get(f'ratio_{k}_over_bridge') or nan:>16.2f}"
        for k in soft:
            line += f" {row.get(k, {}).get('cpu_us_per_pkt') or nan:>16.2f}"
        print(line)
    nd = res.get("ndr") or {}
    if nd:
        print(f"no-drop rate (loss <= {nd['loss_ok_pct']}%, {nd['trial_s']}s trials, bisection up to "
              f"{nd['hi_pps'] / 1e3:.0f}k/s):")
        for kind, d in nd["kinds"].items():
            ratio = nd.get(f"ratio_{kind}_over_bridge")
            print(f"  {kind:<15} {d['ndr_pps'] / 1e3:7.1f}k/s  runs "
                  + ", ".join(f"{x / 1e3:.0f}k ({w})" for x, w in zip(d["ndr_pps_runs"], d["limited_by"]))
                  + (f"  / bridge {ratio:.2f}" if ratio else ""))
        print("cost per frame at the no-drop rate (machine CPU: all processes and softirqs; "
              "the switch process's part of it, of which user space):")
        for kind, d in nd["kinds"].items():
            cost = nd.get(f"cpu_cost_ratio_{kind}_over_bridge")
            print(f"  {kind:<15} machine {_us(d.get('machine_cpu_us_per_frame'))}"
                  + (f"  switch {_us(d['switch_cpu_us_per_frame'])} (user {_us(d['switch_user_us_per_frame'])})"
                     if d.get("switch_cpu_us_per_frame") else "")
                  + (f"  -> bridge's cost / this cost {cost:.2f}" if cost else ""))


def _us(x: float | None) -> str:
    return f"{x:.2f} us" if x is not None else "n/a"


# --- entry points -----------------------------------------------------------------------

def private_netns_argv(argv: list[str]) -> list[str]:
    """Run argv in a fresh network namespace (dies with it): root -> unshare -n,
    else an unprivileged user namespace."""
    flags = "-n" if os.geteuid() == 0 else "-Urnm"
    return ["unshare", flags, "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *argv]


def unavailable_reason() -> str | None:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "mininet not importable"
    for tool in ("unshare", "mnexec", "brctl", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None


def run(out_dir: str | Path, rates: list[int] | None = None, duration: float = DURATION,
        repeats: int = 2, kinds: list[str] | None = None, ndr_kinds: list[str] | None = None) -> dict:
    """Bench entry point: results/bench/switch_forwarding-<timestamp>.json."""
    reason = unavailable_reason()
    if reason:
        return {"benchmark": "switch_forwarding", "skipped": reason}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = out_dir / f"switch_forwarding-{stamp}.json"
    work = out_dir / f"switch_forwarding-{stamp}"
    argv = [sys.executable, "-m", "bench.switch_forwarding", "inner", "--out", str(out),
            "--work", str(work), "--rates", ",".join(str(r) for r in (rates or RATES)),
            "--duration", str(duration), "--repeats", str(repeats), "--own-netns",
            "--kinds", ",".join(kinds or PAIRS)]
    ndr_kinds = [k for k in (NDR_KINDS if ndr_kinds is None else ndr_kinds) if k in (kinds or PAIRS)]
    if ndr_kinds and 0 in (rates or RATES):
        argv += ["--ndr", ",".join(ndr_kinds)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(private_netns_argv(argv), cwd=ROOT, env=env, timeout=900)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"switch_forwarding failed (rc={proc.returncode}); logs in {work}")
    res = json.loads(out.read_text())
    res["json_path"] = str(out)
    print_table(res)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.switch_forwarding")
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, default=UDP_PORT)
    s.add_argument("--rate", type=int, default=0, help="packets/s, 0 = unlimited")
    s.add_argument("--duration", type=float, default=DURATION)
    s.add_argument("--count", type=int, default=0, help="send exactly N packets (overrides duration)")
    s.add_argument("--size", type=int, default=PAYLOAD, help="UDP payload bytes")
    s.add_argument("--out")
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, default=UDP_PORT)
    r.add_argument("--idle", type=float, default=1.0)
    r.add_argument("--max-time", type=float, default=60.0)
    r.add_argument("--ready")
    r.add_argument("--out")
    i = sub.add_parser("inner", help="the experiment; must already be in a private netns")
    i.add_argument("--out", required=True)
    i.add_argument("--work", required=True)
    i.add_argument("--rates", default=",".join(map(str, RATES)))
    i.add_argument("--duration", type=float, default=DURATION)
    i.add_argument("--size", type=int, default=PAYLOAD)
    i.add_argument("--kinds", default=",".join(PAIRS))
    i.add_argument("--repeats", type=int, default=2)
    i.add_argument("--batch", type=int, default=256, help="soft switch batch")
    i.add_argument("--ndr", default="", help="kinds whose no-drop rate to search (bench/ndr.py)")
    i.add_argument("--ndr-max", type=float, default=0.0,
                   help="upper end of the search (default 1.05 x the bridge's unpaced rate)")
    i.add_argument("--ndr-duration", type=float, default=NDR_TRIAL_S)
    i.add_argument("--ndr-steps", type=int, default=NDR_STEPS)
    i.add_argument("--own-netns", action="store_true",
                   help="we are in a private netns (set by `run`): may change its sysctls")
    b = sub.add_parser("run", help="the whole benchmark (enters a private netns itself)")
    b.add_argument("--out-dir", default=str(ROOT / "results" / "bench"))
    b.add_argument("--rates", default=",".join(map(str, RATES)))
    b.add_argument("--duration", type=float, default=DURATION)
    b.add_argument("--repeats", type=int, default=2)
    b.add_argument("--kinds", default=",".join(PAIRS), help=f"subset of {','.join(PAIRS)}")
    b.add_argument("--ndr", default=None,
                   help=f"kinds whose no-drop rate to search (default: those of {','.join(NDR_KINDS)} "
                        "in --kinds; '' for none; needs rate 0 in --rates)")
    a = ap.parse_args(argv)
    if a.cmd in ("send", "recv", "inner"):
        res = {"send": cmd_send, "recv": cmd_recv, "inner": inner}[a.cmd](a)
        text = json.dumps(res, indent=1)
        if a.out:
            tmp = Path(a.out + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, a.out)
        else:
            print(text)
        return 0
    if a.cmd == "run":
        kinds = a.kinds.split(",")
        unknown = sorted(set(kinds) - set(PAIRS))
        if unknown:
            ap.error(f"--kinds: unknown {unknown}; known: {', '.join(PAIRS)}")
        ndr_kinds = None if a.ndr is None else [k for k in a.ndr.split(",") if k]   # None: run() picks
        unknown = sorted(set(ndr_kinds or []) - set(kinds))
        if unknown:
            ap.error(f"--ndr: {unknown} not in --kinds")
        run(a.out_dir, [int(x) for x in a.rates.split(",")], a.duration, a.repeats, kinds, ndr_kinds)
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
