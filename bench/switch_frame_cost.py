"""CPU per in-switch frame in a running point, and in-switch / ring raw time.

Two parts, N=4 workers, `size` float32 values per allreduce (16,384 by default:
256 frames of 64 values per worker, plus one MAX-round frame for the agreed scale).

1. Loopback (always): worker processes do `iters` back-to-back allreduces, either
   in-switch, an `InaClient` over `UdpIo` against the soft switch in UDP mode
   (`python -m testbed.switch.soft`, as tests/local and bench/ina_transport run
   it), once per switch UDP port implementation (`udp_io` "python": a
   recvfrom/sendto per datagram, the old path; "mmsg": one recvmmsg/sendmmsg
   per batch, testbed/switch/soft/udp_io.py), or ring, `RingAllreduce` over
   loopback TCP. Every worker connects, says "ready" and waits; the parent
   snapshots the switch's counters (SIGUSR1: CPU from /proc/self/schedstat, ns
   exact; frames per port; loop iterations), says "go"; the workers pass a
   barrier, run the timed loop and report wall time per allreduce and their own
   CPU over it (time.process_time); then the parent snapshots the switch again.
   Every worker's result must be bit-identical to the others' and within
   fixed-point error of the float64 sum: the run fails otherwise. Paths run
   interleaved, `rounds` times.
2. Mininet (where it runs; `testbed run` of the allreduce workload, both
   algorithms, `mininet_iters` iterations, links unlimited, no pcaps): the soft
   switch on its default compiled ring path; the switch's and the hosts' CPU in
   each point's active window from the /proc sampler of bench/testbed_runs.py,
   per frame into the switch, and the in-switch / ring ratio of the median
   per-iteration time. The hosts' CPU there includes the allreduce program's
   per-iteration work (input, reference sum, record), the same for both.

Reported: switch CPU per frame it received (us), host CPU per frame (loopback:
all workers' loop CPU / frames they sent), frames/s into the switch, median
allreduce time and its ratio to the ring's. Nothing here asserts a timing.

    python -m bench switch_frame_cost
    python -m bench.switch_frame_cost [--iters 30] [--size 16384] [--rounds 2]
        [--paths ring,switch:python,switch:mmsg] [--mininet-iters 400 | 0] [--profile DIR]

--profile DIR: cProfile the switch (SOFTSWITCH_PROFILE) and worker 0's timed
loop (CPU time) into DIR/<path>[_w0].pstats (loopback part).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
N = 4
SIZE = 16384
ITERS = 30
PATHS = ["ring", "switch:python", "switch:mmsg"]


def _inputs(rank: int, size: int) -> np.ndarray:
    return np.random.default_rng(100 + rank).standard_normal(size).astype(np.float32)


# -- worker process ----------------------------------------------------------------
def worker_main(cfg: dict) -> None:
    from hosts.collectives import make_hello
    from hosts.collectives.ring import RingAllreduce
    from hosts.common.config import HostAddr
    from hosts.ina.transport import InaClient, UdpIo
    from testbed.switch.soft.udp_io import loopback_ip

    rank, size, iters = cfg["rank"], cfg["size"], cfg["iters"]
    if cfg["kind"] == "switch":
        io = UdpIo((loopback_ip(rank), cfg["wport"]), ("127.0.0.1", cfg["base"] + rank + 1))
        c = InaClient(io, 1, rank, N, timeout_s=0.05, max_retries=50)
        barrier = np.ones(1, np.int32)
        c.wait(c.submit(barrier, "sum", patience_s=30.0), timeout=40)

        def sync():
            c.wait(c.submit(barrier, "sum"), timeout=20)

        def allreduce(x):
            return c.wait(c.submit(x), timeout=60)
        close = c.close
        sent = lambda: c.stats.packets_sent            # noqa: E731
        lp = c._loop                                     # the compiled loop's counts (hostloop.py)
        loop_counts = lambda: ({"taken": lp.taken, "bursts": lp.bursts, "sleeps": lp.sleeps,   # noqa: E731
                                "naps": lp.naps} if lp is not None else {})
    else:
        peers = tuple(HostAddr(f"w{r + 1}", loopback_ip(r)) for r in range(N))
        ring = RingAllreduce.connect(rank=rank, peers=peers, port_base=cfg["tcp_base"],
                                     hello=make_hello(f"w{rank + 1}", rank, {"bench": 1}),
                                     connect_timeout_s=30, timeout_s=60)
        sync, allreduce, close = ring.barrier, ring.allreduce, ring.close
        sent = lambda: 0                                 # noqa: E731
        loop_counts = dict                               # noqa: E731
    x = _inputs(rank, size)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    sync()
    prof = None
    if cfg.get("profile") and rank == 0:        # the timed loop of worker 0
        import cProfile
        prof = cProfile.Profile(time.process_time)   # CPU time, not time spent waiting
        prof.enable()
    walls = []
    s0, p0, c0, l0 = sent(), os.times(), time.process_time(), loop_counts()
    y = None
    for _ in range(iters):
        t0 = time.perf_counter()
        y = allreduce(x)
        walls.append(time.perf_counter() - t0)
    c1, p1, s1, l1 = time.process_time(), os.times(), sent(), loop_counts()
    if prof is not None:
        prof.disable()
        prof.dump_stats(cfg["profile"])
    sync()
    ref = np.sum([_inputs(r, size).astype(np.float64) for r in range(N)], axis=0)
    err = float(np.max(np.abs(np.asarray(y, np.float64) - ref)))
    close()
    out = {"rank": rank, "walls": walls, "cpu_s": c1 - c0, "user_s": p1.user - p0.user, "sys_s": p1.system - p0.system,
           "sent": s1 - s0, "loop": {k: l1[k] - l0[k] for k in l1}, "max_abs_err": err,
           "digest": hashlib.blake2b(np.asarray(y, np.float32).tobytes(), digest_size=8).hexdigest()}
    print("done " + json.dumps(out), flush=True)


# -- orchestration -----------------------------------------------------------------
def _switch_totals(st: dict) -> dict:
    ports = st["ports"].values()
    return {"cpu_s": st["cpu_sched_s"] if st.get("cpu_sched_s") is not None else st["cpu_time_s"],
            "user_s": st["cpu_user_s"], "sys_s": st["cpu_sys_s"],
            "rx": sum(p["rx"] for p in ports), "tx": sum(p["tx"] for p in ports),
            "iterations": st["loop"]["iterations"], "rx_batches": st["loop"]["rx_batches"],
            "vol_ctx": st["ctx_switches"]["voluntary"], "runqueue_wait_s": st.get("runqueue_wait_s") or 0.0}


def measure(path: str, *, size: int = SIZE, iters: int = ITERS, profile_dir: str | None = None) -> dict:
    """One point: `path` is "ring" or "switch:<udp_io>"."""
    from testbed.loopback_ports import free_port_base
    from testbed.switch.soft.process import SoftSwitchProcess
    from testbed.switch.soft.udp_io import free_loopback_ports, loopback_ip, loopback_switch_config

    kind, _, udp_io = path.partition(":")
    with tempfile.TemporaryDirectory(prefix="bench-frame-") as td:
        tmp = Path(td)
        sw = None
        base = wport = tcp_base = 0
        if kind == "switch":
            base, wport = free_loopback_ports(N)
            env = dict(os.environ)
            if profile_dir:
                Path(profile_dir).mkdir(parents=True, exist_ok=True)
                env["SOFTSWITCH_PROFILE"] = str(Path(profile_dir).resolve() / f"{path.replace(':', '_')}.pstats")
            sw = SoftSwitchProcess(loopback_switch_config(N, base, wport, slot_count=256, udp_io=udp_io),
                                   tmp, env=env).start()
        else:
            tcp_base = free_port_base(N + 1, [loopback_ip(r) for r in range(N)])
        procs = []
        try:
            for r in range(N):
                cfg = {"kind": kind, "rank": r, "size": size, "iters": iters, "base": base,
                       "wport": wport, "tcp_base": tcp_base,
                       "profile": (str(Path(profile_dir).resolve() / f"{path.replace(':', '_')}_w0.pstats")
                                   if profile_dir else None)}
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "bench.switch_frame_cost", "--worker", json.dumps(cfg)],
                    cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    stderr=open(tmp / f"w{r}.log", "w")))
            for r, p in enumerate(procs):
                line = p.stdout.readline().strip()
                if line != "ready":
                    raise RuntimeError(f"worker {r} did not start ({line!r}):\n"
                                       f"{(tmp / f'w{r}.log').read_text()[-3000:]}")
            before = _switch_totals(sw.snapshot()) if sw else None
            t0 = time.monotonic()
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            res = []
            for r, p in enumerate(procs):
                line = p.stdout.readline().strip()
                if not line.startswith("done "):
                    raise RuntimeError(f"worker {r} failed ({line!r}):\n"
                                       f"{(tmp / f'w{r}.log').read_text()[-3000:]}")
                res.append(json.loads(line[5:]))
            span = time.monotonic() - t0
            after = _switch_totals(sw.snapshot()) if sw else None
            for p in procs:
                p.stdin.close()
                p.wait(timeout=30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if sw is not None:
                sw.stop()
    digests = {w["digest"] for w in res}
    if len(digests) != 1:
        raise RuntimeError(f"{path}: workers' results differ: {sorted(digests)}")
    err = max(w["max_abs_err"] for w in res)
    if err > 1e-3:
        raise RuntimeError(f"{path}: result off the float64 sum by {err}")
    walls = np.concatenate([w["walls"] for w in res])
    host_cpu = sum(w["cpu_s"] for w in res)       # process_time: ns, not 10 ms ticks
    out = {"path": path, "values": size, "iters": iters, "workers": N,
           "allreduce_ms": round(float(np.median(walls)) * 1e3, 3),
           "allreduce_ms_p90": round(float(np.percentile(walls, 90)) * 1e3, 3),
           "host_cpu_s": round(host_cpu, 3),
           "host_user_s": round(sum(w["user_s"] for w in res), 3),
           "host_sys_s": round(sum(w["sys_s"] for w in res), 3),
           "max_abs_err": err, "span_s": round(span, 3), "load_avg": os.getloadavg()}
    if kind == "switch":
        d = {k: after[k] - before[k] for k in after}
        frames = sum(w["sent"] for w in res)
        out.update({
            "frames_sent_by_hosts": frames, "switch_rx": d["rx"], "switch_tx": d["tx"],
            "switch_cpu_s": round(d["cpu_s"], 4),
            "switch_us_per_frame": round(d["cpu_s"] / max(d["rx"], 1) * 1e6, 2),
            "switch_user_us_per_frame": round(d["user_s"] / max(d["rx"], 1) * 1e6, 2),
            "switch_sys_us_per_frame": round(d["sys_s"] / max(d["rx"], 1) * 1e6, 2),
            "host_us_per_frame": round(host_cpu / max(frames, 1) * 1e6, 2),
            "switch_frames_in_per_s": round(d["rx"] / span, 1),
            "switch_loop_iterations": d["iterations"], "switch_rx_batches": d["rx_batches"],
            "frames_per_rx_batch": round(d["rx"] / max(d["rx_batches"], 1), 2),
            "switch_voluntary_ctx": d["vol_ctx"],
            "switch_runqueue_wait_s": round(d["runqueue_wait_s"], 4)})
    return out


# -- the running point on Mininet -----------------------------------------------------
def mininet_yaml(size: int, iters: int) -> str:
    return (f"name: bench_switch_frame_cost\n"
            f"description: in-switch vs ring, {size} float32, N={N}, unlimited links (CPU per frame)\n"
            f"topology: {{kind: star, workers: {N}}}\n"
            f"links: {{bandwidth_mbps: null}}\n"
            f"workload: {{kind: allreduce, algorithm: switch, sizes: [{size}], iterations: {iters}, warmup: 5}}\n"
            f"switch: {{backend: soft, program: ina, capture: false}}   # pcaps would cost switch CPU\n"
            f"sweep:\n  seed: 1\n  grid: {{workload.algorithm: [switch, ring]}}\n")


def measure_mininet(out_dir, *, size: int = SIZE, iters: int = 400) -> dict:
    """One `testbed run` (Mininet, soft switch with its default compiled ring path) of both
    algorithms; the switch's and the hosts' CPU in each point's active window (common
    start -> last record, /proc sampled every 0.25 s: bench/testbed_runs.py) per frame
    the switch received, and the in-switch / ring ratio of the per-iteration time. The
    hosts' CPU includes the allreduce program's own per-iteration work (input, reference
    sum, record), the same for both algorithms."""
    from bench.allreduce_report import cpu_in_window, iteration_latencies
    from bench.testbed_runs import RunData, measure as measure_runs, unavailable_reason
    reason = unavailable_reason()
    if reason:
        return {"skipped": reason}
    res, sampler = measure_runs("switch_frame_cost_mininet", out_dir, {"size": size, "iters": iters},
                                {"mininet": (mininet_yaml(size, iters), 600)})
    run = RunData(res["runs"]["mininet"]["run_dir"])
    out: dict = {"run": res["runs"]["mininet"], "points": {}}
    for p in run.points:
        lab = p["label"]
        alg = p["params"]["workload.algorithm"]
        if p["status"] != "ok":
            out["points"][alg] = {"status": p["status"], "error": p.get("error")}
            continue
        _, per_iter = iteration_latencies(run.records[lab])
        cpu = cpu_in_window(run, lab, sampler)
        st = run.switch_stats(lab)
        rx = sum(v["rx"] for v in st.get("ports", {}).values())
        row = {"status": "ok", "iteration_ms": round(float(np.median(per_iter)) * 1e3, 3),
               "switch_frames_in": rx, "switch_io_impl": st.get("io_impl"),
               "window_s": cpu.get("window_s"), "switch_cpu_s": cpu.get("switch_cpu_s"),
               "hosts_cpu_s": cpu.get("hosts_cpu_s"), "machine_busy_cores": cpu.get("machine_busy_cores"),
               "other_cores": cpu.get("other_cores")}
        if rx and cpu.get("switch_cpu_s") is not None:
            row["switch_us_per_frame"] = round(cpu["switch_cpu_s"] / rx * 1e6, 2)
            row["hosts_us_per_frame"] = round(cpu["hosts_cpu_s"] / rx * 1e6, 2)
            row["switch_frames_in_per_s"] = round(rx / cpu["window_s"], 1)
        out["points"][alg] = row
    sw, ring = out["points"].get("switch", {}), out["points"].get("ring", {})
    if sw.get("iteration_ms") and ring.get("iteration_ms"):
        out["ratio_switch_to_ring"] = round(sw["iteration_ms"] / ring["iteration_ms"], 3)
    return out


def run(out_dir, *, paths: list[str] | None = None, size: int = SIZE, iters: int = ITERS,
        rounds: int = 2, profile_dir: str | None = None, mininet_iters: int | None = 400) -> dict:
    """Both parts: loopback (old and new switch UDP port, ring) and, where Mininet
    runs, the running point on Mininet (mininet_iters None: not)."""
    from testbed.loopback_ports import bindable
    from testbed.switch.soft.udp_io import loopback_ip
    if not bindable([(loopback_ip(0), 0)]):
        return {"benchmark": "switch_frame_cost", "skipped": "cannot bind 127.0.1.x loopback addresses"}
    paths = paths or PATHS
    pts: dict[str, list[dict]] = {p: [] for p in paths}
    for _ in range(rounds):                       # interleaved: load changes hit every path alike
        for p in paths:
            pts[p].append(measure(p, size=size, iters=iters, profile_dir=profile_dir))
    summary = {}
    for p, ms in pts.items():
        s = {"allreduce_ms": float(np.median([m["allreduce_ms"] for m in ms]))}
        for k in ("switch_us_per_frame", "host_us_per_frame", "switch_frames_in_per_s", "frames_per_rx_batch"):
            if k in ms[0]:
                s[k] = float(np.median([m[k] for m in ms]))
        summary[p] = s
    if "ring" in summary:
        for p, s in summary.items():
            if p != "ring":
                s["ratio_to_ring"] = round(s["allreduce_ms"] / summary["ring"]["allreduce_ms"], 3)
    res = {"benchmark": "switch_frame_cost", "cpu_count": os.cpu_count(), "values": size,
           "iters": iters, "rounds": rounds, "summary": summary, "points": pts}
    if mininet_iters:
        res["mininet"] = measure_mininet(out_dir, size=size, iters=mininet_iters)
    res["table"] = table(res)
    path = Path(out_dir) / f"switch_frame_cost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1))
    res["json_path"] = str(path)
    print(res["table"])
    return res


def table(res: dict) -> str:
    rows = [f"{res['values']} float32 values, {N} workers, {res['iters']} allreduces x {res['rounds']} rounds "
            f"(medians)",
            f"{'path':<16}{'ms/allreduce':>13}{'x ring':>8}{'switch us/fr':>13}{'host us/fr':>12}"
            f"{'frames/s':>10}{'fr/batch':>9}"]
    for p, s in res["summary"].items():
        f = lambda k, fmt: (format(s[k], fmt) if k in s else "-")     # noqa: E731
        rows.append(f"{p:<16}{f('allreduce_ms', '.2f'):>13}{f('ratio_to_ring', '.2f'):>8}"
                    f"{f('switch_us_per_frame', '.2f'):>13}{f('host_us_per_frame', '.2f'):>12}"
                    f"{f('switch_frames_in_per_s', '.0f'):>10}{f('frames_per_rx_batch', '.1f'):>9}")
    mn = res.get("mininet")
    if mn and not mn.get("skipped"):
        rows.append(f"mininet (soft switch, compiled ring path; CPU in the active window, per frame "
                    f"into the switch; in-switch / ring {mn.get('ratio_switch_to_ring', '-')}):")
        for alg, s in mn["points"].items():
            f = lambda k, fmt: (format(s[k], fmt) if s.get(k) is not None else "-")     # noqa: E731
            rows.append(f"  {alg:<14}{f('iteration_ms', '.2f'):>13}{'':>8}{f('switch_us_per_frame', '.2f'):>13}"
                        f"{f('hosts_us_per_frame', '.2f'):>12}{f('switch_frames_in_per_s', '.0f'):>10}")
    elif mn:
        rows.append(f"mininet: skipped ({mn['skipped']})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.switch_frame_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--size", type=int, default=SIZE)
    ap.add_argument("--iters", type=int, default=ITERS)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", metavar="DIR")
    ap.add_argument("--mininet-iters", type=int, default=400, help="0: no Mininet run")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    a = ap.parse_args(argv)
    if a.worker:
        worker_main(json.loads(a.worker))
        return 0
    run(a.out, paths=a.paths.split(","), size=a.size, iters=a.iters, rounds=a.rounds, profile_dir=a.profile,
        mininet_iters=a.mininet_iters or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
