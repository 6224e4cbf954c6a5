"""Host INA transport on loopback: N=4 worker processes + the soft switch (UDP mode).

The soft switch runs `python -m testbed.switch.soft` with UDP ports (InaPipeline, one
UDP "port" per worker, as tests/local/test_ina_local.py); every worker is a
process with an `InaClient` over `UdpIo`. Per size, each worker does `warmup`
+ `iters` allreduces, each after a small in-switch barrier so skew between
workers is not charged to the allreduce, and records per allreduce:
wall time, the process's CPU time (time.process_time: user+sys of the whole
worker, including the kernel's UDP send/recv work) and packets sent/received.
`run()` measures the current transport at window 64 (the config default) and
256 (the switch's default slot_count per job).

Reported per size (median over workers x iterations):
- `allreduce_ms`: wall time of one allreduce;
- `pkts_per_s_per_worker`: packets the worker sent (contributions) per second;
- `cpu_us_per_packet`: worker CPU per chunk (one packet out + one result in),
  median over allreduces; `cpu_user/sys_us_per_packet`: totals split into
  user and kernel time (os.times, 10 ms tick: only meaningful for the bulk size).
Sizes: 64 values with the agreed scale (MAX round + 1 chunk), 64 values with a
fixed scale (`scale_exp`, the P4SGD latency path: one packet), 262144 values
(1 MiB, 4096 chunks per worker). Everything shares this machine's cores with the
switch process, so the 1 MiB number is partly the switch's per-packet cost.

`run()` measures the packet paths side by side in one run, `impl` "python"
(the numpy reference), "compiled_noloop" (the compiled packet loops of
hosts/ina/_hostpath.c with the receive/send loop in Python) and "compiled"
(with the C receive/send loop, hosts/ina/hostloop.py; its counts of results
taken in, bursts, ppoll waits and naps in `loop`), "compiled_nogso" (the same
with one message per datagram instead of UDP GSO messages), at each window,
and per impl the client alone (`client_only`): the same 1 MiB allreduce in
process against an io that answers every chunk at once (no kernel, no switch),
so worker CPU per packet minus client_only is the system calls' share.
Each entry records the load average around it.

`BASELINE` holds the numbers of the transport before the batched bulk path
(first run of this benchmark, same machine); the JSON has both.

    python -m bench ina_transport
    python -m bench.ina_transport [--window W] [--iters K] [--impl python|compiled] [--no-loop]
                                  [--coalesce N]
                                  [--module hosts.ina.transport]
    (--module: any importable copy of the transport, e.g. the old one, for A/B;
    INA_BENCH_PROFILE=DIR: cProfile every worker into DIR)
"""
from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from testbed.switch.soft.process import SoftSwitchProcess
from testbed.loopback_ports import bindable
from testbed.switch.soft.udp_io import free_loopback_ports, loopback_ip, loopback_switch_config

ROOT = Path(__file__).resolve().parent.parent
N = 4
SLOT_COUNT = 256          # testbed/switch/jobs.py DEFAULT_SLOTS_PER_JOB
SIZES = [("64_agreed", 64, None), ("64_fixed", 64, 20), ("262144", 262144, None)]

# Before the change (hosts/ina/transport.py at the start of this work: one
# struct.pack + sendto / recv per packet, a heap timer per chunk), 2-core AMD
# EPYC VM, iters 10 (bulk 5). "first_run": the first run of this benchmark
# (window 64, machine otherwise quiet). "loaded": medians of 3 runs interleaved
# with the new code while another job loaded the machine (load average ~5):
# compare those with the "loaded_new" numbers of the same session.
BASELINE: dict = {
    "first_run": {"window": 64, "retransmissions": 139, "sizes": {
        "64_agreed": {"allreduce_ms": 0.843, "pkts_per_s_per_worker": 2373.2, "cpu_us_per_packet": 115.04},
        "64_fixed": {"allreduce_ms": 0.63, "pkts_per_s_per_worker": 1587.5, "cpu_us_per_packet": 208.11},
        "262144": {"allreduce_ms": 260.586, "pkts_per_s_per_worker": 15805.8, "cpu_us_per_packet": 16.64}}},
    "loaded": {
        "64": {"retransmissions": [18503, 5184, 2023], "sizes": {
            "64_agreed": {"allreduce_ms": 1.32, "pkts_per_s_per_worker": 1511.3, "cpu_us_per_packet": 162.32},
            "64_fixed": {"allreduce_ms": 0.99, "pkts_per_s_per_worker": 1012.8, "cpu_us_per_packet": 363.46},
            "262144": {"allreduce_ms": 471.79, "pkts_per_s_per_worker": 9019.4, "cpu_us_per_packet": 27.28}}},
        "256": {"retransmissions": [89879, 83258, 59348], "sizes": {
            "64_agreed": {"allreduce_ms": 1.28, "pkts_per_s_per_worker": 1566.6, "cpu_us_per_packet": 167.86},
            "64_fixed": {"allreduce_ms": 1.05, "pkts_per_s_per_worker": 955.0, "cpu_us_per_packet": 354.97},
            "262144": {"allreduce_ms": 616.91, "pkts_per_s_per_worker": 10450.8, "cpu_us_per_packet": 30.94}}}},
}
# The new code in the same loaded session (medians of the 3 interleaved runs).
LOADED_NEW: dict = {
    "64": {"retransmissions": [1685, 486, 585], "sizes": {
        "64_agreed": {"allreduce_ms": 1.15, "pkts_per_s_per_worker": 1734.2, "cpu_us_per_packet": 142.51},
        "64_fixed": {"allreduce_ms": 0.71, "pkts_per_s_per_worker": 1409.9, "cpu_us_per_packet": 178.73},
        "262144": {"allreduce_ms": 379.87, "pkts_per_s_per_worker": 10785.7, "cpu_us_per_packet": 20.81}}},
    "256": {"retransmissions": [8199, 3821, 5420], "sizes": {
        "64_agreed": {"allreduce_ms": 0.94, "pkts_per_s_per_worker": 2129.4, "cpu_us_per_packet": 139.05},
        "64_fixed": {"allreduce_ms": 0.52, "pkts_per_s_per_worker": 1910.1, "cpu_us_per_packet": 162.3},
        "262144": {"allreduce_ms": 273.56, "pkts_per_s_per_worker": 15054.4, "cpu_us_per_packet": 13.22}}},
}


# -- worker process ----------------------------------------------------------------
def worker_main(cfg: dict) -> None:
    mod = importlib.import_module(cfg["module"])
    rank = cfg["rank"]
    # A/B of UDP GSO sends (an older copy of the transport given as --module has no gso)
    io_kw = {"gso": cfg["gso"]} if "gso" in inspect.signature(mod.UdpIo).parameters else {}
    io = mod.UdpIo((loopback_ip(rank), cfg["wport"]), ("127.0.0.1", cfg["base"] + rank + 1), **io_kw)
    kw = {} if cfg["window"] is None else {"window": cfg["window"]}
    if cfg.get("impl"):
        kw["impl"] = cfg["impl"]
    c = mod.InaClient(io, 1, rank, N, timeout_s=0.05, max_retries=50, **kw)
    if cfg.get("coalesce") is not None and getattr(c, "_loop", None) is not None:
        c._loop.coalesce = cfg["coalesce"]      # A/B of the compiled loop's naps
    if not cfg.get("loop", True) and getattr(c, "_loop", None) is not None:
        c._loop = None      # A/B: compiled packet loops, the receive/send loop in Python
    barrier = np.ones(1, np.int32)
    c.wait(c.submit(barrier, "sum", patience_s=30.0), timeout=40)
    rng = np.random.default_rng(rank)
    out = []
    for name, size, k in cfg["sizes"]:
        x = rng.standard_normal(size).astype(np.float32)
        iters = cfg["iters"] if size <= 4096 else cfg["bulk_iters"]
        for it in range(cfg["warmup"] + iters):
            c.wait(c.submit(barrier, "sum"), timeout=20)
            s0, r0 = c.stats.packets_sent, c.stats.results
            kw = {} if k is None else {"scale_exp": k}
            g0 = [g["collections"] for g in gc.get_stats()]
            t0, c0, p0 = time.perf_counter(), time.process_time(), os.times()
            y = c.wait(c.submit(x, "sum", **kw), timeout=60)
            t1, c1, p1 = time.perf_counter(), time.process_time(), os.times()
            g1 = [g["collections"] for g in gc.get_stats()]
            assert y.shape == x.shape
            if it >= cfg["warmup"]:
                out.append({"size": name, "wall_s": t1 - t0, "cpu_s": c1 - c0, "user_s": p1.user - p0.user,
                            "sys_s": p1.system - p0.system,
                            "sent": c.stats.packets_sent - s0, "results": c.stats.results - r0,
                            "gc": [y1 - y0 for y0, y1 in zip(g0, g1)]})
    summ = c.stats.summary()
    lp = getattr(c, "_loop", None)
    if lp is not None:          # the compiled loop's own counts (hosts/ina/hostloop.py)
        summ["loop"] = {"taken": lp.taken, "bursts": lp.bursts, "sleeps": lp.sleeps, "naps": lp.naps,
                        "gso_msgs": lp.gso_msgs, "returns_idle_timer_other_budget": lp.returns}
    summ["io_gso_msgs"] = getattr(io, "gso_msgs", 0)
    c.close()
    Path(cfg["out"]).write_text(json.dumps({"rank": rank, "records": out, "stats": summ}))


# -- orchestration -----------------------------------------------------------------
def measure(*, module: str = "hosts.ina.transport", window: int | None = None, iters: int = 10,
            bulk_iters: int = 5, warmup: int = 1, impl: str | None = None,
            coalesce: int | None = None, loop: bool = True, gso: bool = True) -> dict:
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ina-") as td:
        tmp = Path(td)
        base, wport = free_loopback_ports(N)
        sw = SoftSwitchProcess(loopback_switch_config(N, base, wport, slot_count=SLOT_COUNT), tmp).start()
        procs, sw_stats = [], {}
        try:
            for r in range(N):
                cfg = {"module": module, "impl": impl, "coalesce": coalesce, "loop": loop, "gso": gso,
                       "rank": r, "base": base, "wport": wport, "window": window,
                       "iters": iters, "bulk_iters": bulk_iters, "warmup": warmup,
                       "sizes": SIZES, "out": str(tmp / f"w{r}.json")}
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "bench.ina_transport", "--worker", json.dumps(cfg)],
                    cwd=ROOT, stderr=open(tmp / f"w{r}.log", "w")))
            for r, p in enumerate(procs):
                rc = p.wait(timeout=600)
                if rc:
                    raise RuntimeError(f"worker {r} exited {rc}:\n{(tmp / f'w{r}.log').read_text()[-3000:]}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            sw_stats = sw.stop() or {}
        res = [json.loads((tmp / f"w{r}.json").read_text()) for r in range(N)]
    out: dict = {"module": module, "impl": res[0]["stats"].get("impl", "python"), "coalesce": coalesce,
                 "loop": "loop" in res[0]["stats"], "gso": gso,
                 "gso_msgs": sum(w["stats"].get("io_gso_msgs", 0) + w["stats"].get("loop", {}).get("gso_msgs", 0)
                                 for w in res),
                 "window": window or "default", "workers": N, "slot_count": SLOT_COUNT,
                 "load_avg_before": load0, "load_avg_after": os.getloadavg(), "sizes": {}}
    for name, size, k in SIZES:
        recs = [x for w in res for x in w["records"] if x["size"] == name]
        wall = np.array([x["wall_s"] for x in recs])
        user = np.array([x["user_s"] for x in recs])
        sys_ = np.array([x["sys_s"] for x in recs])
        cpu = np.array([x["cpu_s"] for x in recs])
        sent = np.array([x["sent"] for x in recs], float)
        chunks = np.array([x["results"] for x in recs], float)
        out["sizes"][name] = {
            "values": size, "scale_exp": k, "samples": len(recs),
            "allreduce_ms": round(float(np.median(wall)) * 1e3, 3),
            "allreduce_ms_p10": round(float(np.percentile(wall, 10)) * 1e3, 3),
            "allreduce_ms_p90": round(float(np.percentile(wall, 90)) * 1e3, 3),
            "packets_per_worker": float(np.median(sent)),
            "pkts_per_s_per_worker": round(float(np.median(sent / wall)), 1),
            "cpu_us_per_packet": round(float(np.median(cpu / np.maximum(chunks, 1))) * 1e6, 2),
            "cpu_user_us_per_packet": round(float(np.sum(user) / max(np.sum(chunks), 1)) * 1e6, 2),
            "cpu_sys_us_per_packet": round(float(np.sum(sys_) / max(np.sum(chunks), 1)) * 1e6, 2),
            "cpu_util": round(float(np.median(cpu / wall)), 3),
            # cyclic GC passes per allreduce, by generation (mean over workers x iterations)
            "gc_collections": [round(float(np.mean([x.get("gc", [0, 0, 0])[g] for x in recs])), 2)
                               for g in range(3)],
        }
    out["retransmissions"] = sum(w["stats"]["retransmissions"] for w in res)
    out["retx_silent"] = sum(w["stats"].get("retx_silent", 0) for w in res)
    out["duplicates_ignored"] = sum(w["stats"]["duplicates_ignored"] for w in res)
    out["switch"] = {k: v for k, v in sw_stats.items() if k not in ("pipeline",)}
    out["timeouts"] = sum(w["stats"]["timeouts"] for w in res)
    if "loop" in res[0]["stats"]:         # whole run, all sizes and barriers, summed over workers
        out["loop"] = {k: (sum(w["stats"]["loop"][k] for w in res) if k != "returns_idle_timer_other_budget"
                           else [sum(v) for v in zip(*(w["stats"]["loop"][k] for w in res))])
                       for k in res[0]["stats"]["loop"]}
    return out


# -- the client alone ----------------------------------------------------------------
class _Reflector:
    """An io that answers every chunk at once (n_workers=1: the result is the
    contribution with FLAG_RESULT), through send_many/recv_block as UdpIo's;
    its own CPU time is kept apart (`own`) and left out of the client's."""

    def __init__(self, rx_dtype, batch: int = 256):
        self.rec = np.zeros(batch, rx_dtype)
        self.raw = self.rec.view(np.uint8).reshape(batch, rx_dtype.itemsize)
        self.lens = np.zeros(batch, np.int64)
        self.pending: list[bytes] = []
        self.own = 0.0

    def send(self, p) -> None:
        self.pending.append(bytes(p))

    def send_many(self, addr, offs, lens) -> None:
        import ctypes  # noqa: PLC0415
        t0 = time.process_time()
        for o, ln in zip(np.asarray(offs).tolist(), np.asarray(lens).tolist()):
            self.pending.append(ctypes.string_at(addr + o, ln))
        self.own += time.process_time() - t0

    def recv_block(self, timeout):
        from testbed import wire  # noqa: PLC0415
        t0 = time.process_time()
        n = min(len(self.pending), len(self.rec))
        for i in range(n):
            p = self.pending[i]
            self.raw[i, :len(p)] = np.frombuffer(p, np.uint8)
            self.raw[i, 2] |= wire.FLAG_RESULT
            self.lens[i] = len(p)
        del self.pending[:n]
        self.own += time.process_time() - t0
        return self.rec, self.lens[:n]

    def recv(self, timeout):
        return None

    def close(self) -> None:
        pass


def client_only(impl: str, *, window: int = 256, size: int = 262144, iters: int = 20) -> dict:
    """Worker CPU per packet of the client's own code (no kernel, no switch)."""
    from hosts.ina.transport import RX_DTYPE, InaClient  # noqa: PLC0415
    io = _Reflector(RX_DTYPE)
    c = InaClient(io, 1, 0, 1, window=window, impl=impl)
    x = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    c.allreduce(x)
    samples = []
    for _ in range(5):
        io.own = 0.0
        t0 = time.process_time()
        for _ in range(iters // 5):
            c.allreduce(x)
        samples.append((time.process_time() - t0 - io.own) / ((iters // 5) * (-(-size // 64) + 1)))
    return {"impl": c.stats.impl, "window": window, "values": size,
            "cpu_us_per_packet": round(float(np.median(samples)) * 1e6, 3),
            "cpu_us_per_packet_min": round(float(np.min(samples)) * 1e6, 3),
            "load_avg": os.getloadavg()}


def _summary(side: dict, alone: list) -> dict:
    """Worker CPU per packet (1 MiB allreduce) per impl and window, and the
    client's own share (client_only, median of its runs)."""
    out: dict = {}
    for key, m in side.items():
        b = m["sizes"]["262144"]
        out[key] = {"cpu_us_per_packet": b["cpu_us_per_packet"],
                    "user_us": b["cpu_user_us_per_packet"], "sys_us": b["cpu_sys_us_per_packet"],
                    "allreduce_ms": b["allreduce_ms"], "retransmissions": m["retransmissions"],
                    "load_avg_1m": m["load_avg_before"][0]}
        if m.get("loop"):
            out[key]["loop"] = m["loop"]
    for impl in ("python", "compiled"):
        xs = [a["cpu_us_per_packet"] for a in alone if a["impl"] == impl]
        out[f"client_only_{impl}_us_per_packet"] = float(np.median(xs)) if xs else None
    return out


def run(out_dir) -> dict:
    if not bindable([(loopback_ip(0), 0)]):
        return {"skipped": "cannot bind 127.0.1.x loopback addresses"}
    load0 = os.getloadavg()
    side = {}
    for w in (64, 256):                         # the three back to back per window
        side[f"python_w{w}"] = measure(window=w, impl="python")
        side[f"compiled_noloop_w{w}"] = measure(window=w, impl="compiled", loop=False)
        side[f"compiled_nogso_w{w}"] = measure(window=w, impl="compiled", gso=False)
        side[f"compiled_w{w}"] = measure(window=w, impl="compiled")
    alone = [client_only(impl) for impl in ("python", "compiled", "python", "compiled")]
    res = {"benchmark": "ina_transport", "cpu_count": os.cpu_count(),
           "load_avg_before": load0, "load_avg": os.getloadavg(), "side_by_side": side,
           "client_only": alone, "summary": _summary(side, alone),
           "old": BASELINE, "new_loaded_session": LOADED_NEW}
    path = Path(out_dir) / f"ina_transport-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=1))
    res["json_path"] = str(path)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ina_transport")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--module", default="hosts.ina.transport")
    ap.add_argument("--window", type=int, default=None)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--bulk-iters", type=int, default=5)
    ap.add_argument("--impl", choices=["python", "compiled"], default=None)
    ap.add_argument("--no-loop", action="store_true",
                    help="compiled: without the C receive/send loop (hosts/ina/hostloop.py)")
    ap.add_argument("--no-gso", action="store_true", help="one message per datagram (no UDP GSO sends)")
    ap.add_argument("--coalesce", type=int, default=None,
                    help="compiled loop: answers to nap for (0: off; default hosts/ina/hostloop.py's)")
    a = ap.parse_args(argv)
    if a.worker:
        cfg = json.loads(a.worker)
        prof = os.environ.get("INA_BENCH_PROFILE")     # dir: cProfile each worker there
        if prof:
            import cProfile  # noqa: PLC0415
            cProfile.runctx("worker_main(cfg)", globals(), {"cfg": cfg},
                            f"{prof}/w{cfg['rank']}.prof")
        else:
            worker_main(cfg)
        return 0
    print(json.dumps(measure(module=a.module, window=a.window, iters=a.iters,
                             bulk_iters=a.bulk_iters, impl=a.impl, coalesce=a.coalesce,
                             loop=not a.no_loop, gso=not a.no_gso), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
