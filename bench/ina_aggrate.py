"""End-to-end in-switch aggregation input rate, compiled vs reference pipeline
and packet-ring vs recvmmsg port I/O, side by side in one `testbed run` on
Mininet (unlimited links, N = 2, 4 and 8).

One scenario whose grid crosses `topology.workers` with
`switch.options.pipeline_impl: [compiled, reference]` and
`switch.options.io_impl: [mmap_ring, mmsg]`, so all implementations run in the
same sweep, alternating, on the same machine state. Measured and
analysed exactly as `allreduce_ratios`' third run (input packets/s at the soft
switch, its CPU per packet from /proc, the hosts' CPU), plus which
implementation the switch reported in its stats. Nothing asserts a timing.

    .venv/bin/python -m bench ina_aggrate
    .venv/bin/python -m bench.ina_aggrate [--quick] [--repeats N] [--out DIR]
        [--workers 2,4,8] [--pipeline-impls compiled,reference] [--io-impls mmap_ring,mmsg]
        [--host-impls compiled,python]   (the workers' loops, hosts/ina/hostloop.py; default: not crossed)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.allreduce_ratios import RUN_TIMEOUT_S
from bench.allreduce_report import VALUES_PER_PACKET, analyze_aggrate, cell
from bench.testbed_runs import ROOT, RunData, measure, save, unavailable_reason

NAME = "ina_aggrate"
FULL = {"size": 1 << 20, "iterations": 3, "workers": [2, 4, 8], "repeats": 1}
QUICK = {"size": 1 << 16, "iterations": 2, "workers": [2, 4], "repeats": 1}
IMPLS = ["compiled", "reference"]           # switch.options.pipeline_impl
IO_IMPLS = ["ring_fastpath", "mmap_ring", "mmsg"]   # switch.options.io_impl


def scenario(p: dict) -> str:
    return (f"name: bench_ina_aggrate\n"
            f"description: soft-switch aggregation rate, pipeline and port I/O implementations\n"
            f"topology: {{kind: star, workers: 2}}\n"
            f"links: {{bandwidth_mbps: null}}\n"
            f"switch: {{backend: soft, program: ina, capture: false}}   # pcaps would cost switch CPU\n"
            f"workload: {{kind: allreduce, algorithm: switch, sizes: [{p['size']}], "
            f"iterations: {p['iterations']}, warmup: 0}}\n"
            f"sweep:\n  seed: 1\n  repeats: {p['repeats']}\n"
            f"  grid: {{topology.workers: {p['workers']}, switch.options.pipeline_impl: "
            f"{p['pipeline_impls']}, switch.options.io_impl: {p['io_impls']}"
            + (f", workload.ina.impl: {p['host_impls']}" if p.get("host_impls") else "") + "}\n")


def table(res: dict) -> str:
    L = [f"in-switch aggregation, unlimited links, {res['params']['size']} float32, "
         f"{VALUES_PER_PACKET} int32 per packet; load {res['loadavg_before']} -> {res['loadavg_after']}",
         f"{'N':>2} {'impl':>9} {'io':>9} {'host':>8} {'input pkt/s':>11} {'sw us/pkt':>9} {'sw cores':>8} {'hosts':>5} "
         f"{'mach':>5} {'batch':>5} {'retx%':>6}"]
    for r in res["rows"]:
        c = r.get("cpu", {})
        L.append(f"{r['workers']:>2} {r.get('impl')!s:>9} {r.get('io_impl')!s:>9} {r.get('host_impl')!s:>8} "
                 f"{cell(r.get('input_pps'), '{:,}'):>11} "
                 f"{cell(r.get('switch_cpu_us_per_packet')):>9} {cell(c.get('switch_cores')):>8} "
                 f"{cell(c.get('hosts_cores')):>5} {cell(c.get('machine_busy_cores')):>5} "
                 f"{cell((r.get('switch') or {}).get('mean_rx_batch'), '{:.1f}'):>5} "
                 f"{cell((r.get('transport') or {}).get('retx_pct'), '{:.1f}'):>6}"
                 + (f"  [{r['status']}: {r.get('error')}]" if r.get("status") != "ok" else ""))
    for n, ratio in res["ratios"].items():
        L.append(f"N={n}: compiled/reference input rate x{ratio} (io_impl {IO_IMPLS[0]})")
    for n, ratio in res.get("io_ratios", {}).items():
        L.append(f"N={n}: mmap_ring/mmsg input rate x{ratio} (pipeline compiled)")
    for n, ratio in res.get("host_ratios", {}).items():
        L.append(f"N={n}: workers compiled/python input rate x{ratio}")
    for n, ratio in res.get("fast_ratios", {}).items():
        L.append(f"N={n}: ring_fastpath/mmap_ring input rate x{ratio} (pipeline compiled)")
    return "\n".join(L)


def run(out_dir: str | Path, quick: bool = False, repeats: int | None = None,
        workers: list[int] | None = None, pipeline_impls: list[str] | None = None,
        io_impls: list[str] | None = None, host_impls: list[str] | None = None) -> dict:
    reason = unavailable_reason()
    if reason:
        return {"benchmark": NAME, "skipped": reason}
    params = dict(QUICK if quick else FULL)
    if repeats:
        params["repeats"] = repeats
    params["workers"] = workers or params["workers"]
    params["pipeline_impls"] = pipeline_impls or IMPLS
    params["io_impls"] = io_impls or IO_IMPLS
    params["host_impls"] = host_impls
    res, sampler = measure(NAME, out_dir, params, {"aggrate": (scenario(params), RUN_TIMEOUT_S["aggrate"])})
    res["run"] = res.pop("runs")["aggrate"]       # its one run, as its results have always named it
    run_data = RunData(res["run"]["run_dir"])
    rows = analyze_aggrate(run_data, sampler, params["size"])["rows"]
    by_label = {p["label"]: p for p in run_data.points}
    for r in rows:
        r["impl"] = by_label[r["label"]]["params"].get("switch.options.pipeline_impl")
        # what the switch itself says it ran (a silent fallback would show here)
        r["io_impl"] = by_label[r["label"]]["params"].get("switch.options.io_impl")
        r["host_impl"] = by_label[r["label"]]["params"].get("workload.ina.impl")
        st = run_data.switch_stats(r["label"])
        r["switch_pipeline_impl"] = st.get("pipeline_impl")
        r["switch_io_impl"] = st.get("io_impl")
        r["switch_packet_path"] = st.get("packet_path")   # frames per path: compiled / python
    res["rows"] = rows

    def best(n: int, impl: str, io: str, host: str | None = None) -> float | None:
        v = [r["input_pps"] for r in rows if r["workers"] == n and r["impl"] == impl
             and r["io_impl"] == io and r.get("input_pps") and (host is None or r["host_impl"] == host)]
        return max(v) if v else None

    res["ratios"], res["io_ratios"] = {}, {}
    for n in params["workers"]:
        c, ref = best(n, "compiled", IO_IMPLS[0]), best(n, "reference", IO_IMPLS[0])
        if c and ref:
            res["ratios"][n] = round(c / ref, 2)
        ring, mmsg = best(n, "compiled", "mmap_ring"), best(n, "compiled", "mmsg")
        if ring and mmsg:
            res["io_ratios"][n] = round(ring / mmsg, 2)
        if host_impls:
            hc, hp = (best(n, params["pipeline_impls"][0], params["io_impls"][0], h)
                      for h in ("compiled", "python"))
            if hc and hp:
                res.setdefault("host_ratios", {})[n] = round(hc / hp, 2)
        fast = best(n, "compiled", "ring_fastpath")
        if fast and ring:
            res.setdefault("fast_ratios", {})[n] = round(fast / ring, 2)
    res["command"] = res["run"]["command"]
    res["table"] = table(res)
    return save(res)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ina_aggrate", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--quick", action="store_true", help="64 Ki values, 2 iterations (smoke test)")
    ap.add_argument("--repeats", type=int, default=None, help="sweep repeats (default 1)")
    ap.add_argument("--workers", default=None, help="comma-separated N (default 2,4,8)")
    ap.add_argument("--pipeline-impls", default=",".join(IMPLS))
    ap.add_argument("--io-impls", default=",".join(IO_IMPLS))
    ap.add_argument("--host-impls", default=None, help="cross the workers' impls too (compiled,python)")
    a = ap.parse_args(argv)
    pipe, io = a.pipeline_impls.split(","), a.io_impls.split(",")
    host = a.host_impls.split(",") if a.host_impls else None
    for name, got, known in (("--pipeline-impls", pipe, IMPLS), ("--io-impls", io, IO_IMPLS),
                             ("--host-impls", host or [], ["compiled", "python"])):
        if set(got) - set(known):
            ap.error(f"{name}: unknown {sorted(set(got) - set(known))}; known: {', '.join(known)}")
    res = run(a.out, quick=a.quick, repeats=a.repeats,
              workers=[int(x) for x in a.workers.split(",")] if a.workers else None,
              pipeline_impls=pipe, io_impls=io, host_impls=host)
    if res.get("skipped"):
        print(f"skipped: {res['skipped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
