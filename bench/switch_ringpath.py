"""Soft switch CPU per packet in the running loop, per packet path, in process.

Inside a private network namespace (`unshare -n`, re-executed by `run`): one
veth pair per worker (h<i> <-> s1p<i>), a SoftSwitch on the s1p* ends with the
compiled INA program (or the forward program), its loop in a thread. The
worker ends first fill the switch's receive rings (contributions of one job of
N workers, 64 int32 each, every slot completing; or plain UDP frames for the
forward program), then the loop runs until it has read them all. The loop
thread's own CPU time (CLOCK_THREAD_CPUTIME_ID) divided by the frames it read
is the switch's CPU per packet, free of the sender's cost and of scheduling
noise (a thread's CPU clock only runs while it runs).

`batch` is the switch's per-port read limit: with the rings full, every loop
iteration reads `batch` frames per port, so small values stand in for the
small batches real traffic produces.

    .venv/bin/python -m bench.switch_ringpath [--paths python,rings] [--batches 4,16,64]
        [--workers 4] [--frames 2000] [--program ina|forward] [--pcaps off,on]
        [--profile] [--out FILE]

--pcaps on: the switch writes its per-port pcaps (as `switch.capture` does in
scenario runs), in the work directory.

Nothing here asserts a timing.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWITCH_MAC = "02:00:00:00:00:fe"
SWITCH_IP = "10.0.0.254"
WINDOW = 128            # slots the workers cycle through
# path -> the switch's io_impl: the Python loop over the rings, or the compiled ring engine
IO_IMPL = {"python": "mmap_ring", "rings": "ring_fastpath"}


def _sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _mac(i: int) -> str:
    return f"02:00:00:00:01:{i + 1:02x}"


def _frames(program: str, n_workers: int, per_worker: int) -> list[list[bytes]]:
    """Per worker, the frames it sends: contributions to slot seq % WINDOW."""
    import numpy as np

    from testbed import wire
    rng = np.random.default_rng(5)
    out = []
    for w in range(n_workers):
        fl = []
        for seq in range(per_worker):
            vals = rng.integers(-1000, 1000, 64).tolist()
            if program == "ina":
                fl.append(wire.build_frame(_mac(w), SWITCH_MAC, f"10.1.0.{w + 1}", SWITCH_IP,
                                           40000 + w, wire.INA_PORT_BASE, op=wire.OP_SUM, job_id=1,
                                           slot=seq % WINDOW, slot_ver=(seq // WINDOW) % 2,
                                           worker_id=w, seq=seq, values=vals))
            else:   # same size, plain UDP to the next worker's MAC
                dst = _mac((w + 1) % n_workers)
                f = wire.build_frame(_mac(w), dst, f"10.1.0.{w + 1}", "10.1.0.99",
                                     40000 + w, 5001, op=wire.OP_SUM, job_id=1, slot=0,
                                     slot_ver=0, worker_id=w, seq=seq, values=vals)
                fl.append(f)
        out.append(fl)
    return out


def _config(program: str, n: int, batch: int, path: str, work: Path, pcap: bool = False) -> dict:
    ports = {str(i + 1): f"s1p{i + 1}" for i in range(n)}
    raw = {"name": "s1", "ports": ports, "io_impl": IO_IMPL[path], "pipeline": program,
           "batch": batch, "seed": 1, "flood": True,
           "forwarding": [{"dst_mac": _mac(i), "port": i + 1} for i in range(n)],
           "stats_path": str(work / "stats.json"), "ready_path": str(work / "ready")}
    if pcap:
        raw["pcap_dir"] = str(work / "pcap")
    if program == "ina":
        raw.update(pipeline_impl="compiled", switch_mac=SWITCH_MAC, switch_ip=SWITCH_IP,
                   jobs=[{"job_id": 1, "slot_base": 0, "slot_count": WINDOW,
                          "workers": [{"worker_id": i, "mac": _mac(i), "ip": f"10.1.0.{i + 1}",
                                       "port": i + 1} for i in range(n)]}])
    return raw


def one(program: str, n: int, per_worker: int, batch: int, path: str, profile: bool,
        work: Path, pcap: bool = False) -> dict:
    from testbed.switch.soft.config import SwitchConfig
    from testbed.switch.soft.node import OFFLOADS_OFF
    from testbed.switch.soft.switch import SoftSwitch

    for i in range(1, n + 1):
        _sh(f"ip link add h{i} type veth peer name s1p{i}")
        for intf in (f"h{i}", f"s1p{i}"):
            _sh(f"ethtool -K {intf} {OFFLOADS_OFF} || true")
            _sh(f"ip link set {intf} up")
    try:
        sw = SoftSwitch(SwitchConfig.from_dict(_config(program, n, batch, path, work, pcap)))
        frames = _frames(program, n, per_worker)
        for i, fl in enumerate(frames):
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            tx.setsockopt(socket.SOL_SOCKET, 32, 16 << 20)
            tx.bind((f"h{i + 1}", 0))
            for f in fl:
                tx.send(f)
            tx.close()
        total = n * per_worker
        cpu: list[float] = []
        prof = cProfile.Profile() if profile else None

        def loop() -> None:
            c0 = time.thread_time()
            if prof:
                prof.enable()
            sw.run()
            if prof:
                prof.disable()
            cpu.append(time.thread_time() - c0)

        th = threading.Thread(target=loop)
        t0 = time.monotonic()
        th.start()
        # sw.stats(): the compiled loop's counts are folded into the ports there
        while sum(p["rx"] for p in sw.stats()["ports"].values()) < total \
                and time.monotonic() - t0 < 60:
            time.sleep(0.01)
        sw.request_stop()
        th.join()
        st = sw.close()
        rx = sum(p["rx"] for p in st["ports"].values())
        tx = sum(p["tx"] for p in st["ports"].values())
        res = {"program": program, "workers": n, "batch": batch, "path": path, "pcap": pcap,
               "frames_in": rx, "frames_out": tx, "loop_cpu_s": cpu[0],
               "us_per_packet": round(cpu[0] / max(rx, 1) * 1e6, 3),
               "kernel_drops": sum(p["rx_kernel_drops"] for p in st["ports"].values()),
               "switch_ring_path": st.get("packet_path"), "loop": st["loop"]}
        if program == "ina":
            c = st["pipeline"]["counters"]
            res["results"] = c.get("Ingress.ina_results", {}).get("packets") if isinstance(
                c.get("Ingress.ina_results"), dict) else None
        if prof:
            s = pstats.Stats(prof)
            s.sort_stats("tottime")
            rows = []
            for (fn, line, name), (cc, nc, tt, ct, _) in sorted(
                    s.stats.items(), key=lambda kv: -kv[1][2])[:15]:
                rows.append({"fn": f"{Path(fn).name}:{line}:{name}", "calls": nc,
                             "tottime_us_per_packet": round(tt / max(rx, 1) * 1e6, 3),
                             "cumtime_us_per_packet": round(ct / max(rx, 1) * 1e6, 3)})
            res["profile"] = rows
        return res
    finally:
        for i in range(1, n + 1):
            subprocess.run(f"ip link del h{i}", shell=True, stderr=subprocess.DEVNULL)


def inner(a: argparse.Namespace) -> list[dict]:
    _sh("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
    work = Path(a.work)
    rows = []
    for rep in range(a.repeats):
        for batch in [int(x) for x in a.batches.split(",")]:
            for path, pcap in [(p, c) for c in a.pcaps.split(",") for p in a.paths.split(",")]:
                # alternate: same machine state for all
                r = one(a.program, a.workers, a.frames, batch, path, a.profile, work, pcap == "on")
                r["repeat"] = rep
                rows.append(r)
                print(f"{a.program} N={a.workers} batch={batch:>3} {path:>6} pcap {pcap}: "
                      f"{r['us_per_packet']:.2f} us/pkt ({r['frames_in']} in, "
                      f"{r['frames_out']} out, path {r['switch_ring_path']})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.switch_ringpath", description=__doc__.split("\n")[0])
    ap.add_argument("--paths", default="python,rings")
    ap.add_argument("--batches", default="4,16,64")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--frames", type=int, default=2000, help="per worker (ring: 4096 slots)")
    ap.add_argument("--program", default="ina", choices=["ina", "forward"])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--pcaps", default="off", help="off, on or off,on: the switch writes pcaps")
    ap.add_argument("--profile", action="store_true", help="cProfile the loop thread")
    ap.add_argument("--out", default=None, help="JSON file")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if not set(a.pcaps.split(",")) <= {"off", "on"}:
        ap.error(f"--pcaps {a.pcaps!r}: a comma list of off, on")
    if a.inner:
        json.dump(inner(a), sys.stdout)
        return 0
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        argv2 = [sys.executable, "-m", "bench.switch_ringpath", "--inner", "--work", work,
                 *(argv if argv is not None else sys.argv[1:])]
        load0 = os.getloadavg()
        p = subprocess.run(["unshare", "-n", *argv2], capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if p.returncode:
            print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
            return p.returncode
    rows = json.loads(p.stdout[p.stdout.index("["):])
    res = {"benchmark": "switch_ringpath", "loadavg_before": load0,
           "loadavg_after": os.getloadavg(), "cpus": os.cpu_count(),
           "command": "python -m bench.switch_ringpath " + " ".join(argv or sys.argv[1:]),
           "rows": rows}
    for r in rows:
        print(f"{r['program']} N={r['workers']} batch={r['batch']:>3} {r['path']:>6} "
              f"pcap {'on' if r.get('pcap') else 'off'}: "
              f"{r['us_per_packet']:.2f} us/pkt  in {r['frames_in']} out {r['frames_out']} "
              f"kdrops {r['kernel_drops']} ring_path={r['switch_ring_path']}")
        for row in r.get("profile", []):
            print(f"    {row['tottime_us_per_packet']:7.3f} {row['cumtime_us_per_packet']:7.3f} "
                  f"{row['calls']:>7} {row['fn']}")
    print(f"load {res['loadavg_before']} -> {res['loadavg_after']}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
