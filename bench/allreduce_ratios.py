"""In-switch vs ring allreduce, side by side on the real testbed (Mininet + soft switch).

Three `testbed run` invocations (each one run, so its points are measured side by
side on the same machine state), written as scenario files into the work folder:

1. latency  - N=8 star, no bandwidth limit, no loss, 64 float32 values:
              p50/p99 allreduce latency of switch and ring, ratio switch/ring
              (issue target <= 0.3).
2. goodput  - 1M float32 values (4 MiB) over shaped links (10 and 20 Mbit/s),
              N=4 and 8: the goodput ratio switch/ring against the algorithmic
              limit 2(N-1)/N (ring sends 2(N-1)/N x the tensor per host, in-switch
              sends it once up and once down) and against the header-adjusted
              limit (INA frames carry 256 B of values in 314 B, ring TCP 1448 B in
              1514 B). Says whether the in-switch path was link- or CPU-bound.
3. aggrate  - the switch algorithm on unlimited links, N=2, 4, 8, 1M values:
              input packets/s at the soft switch process and its CPU us per
              packet (64 int32 values per packet), from the INA counters
              (metrics.jsonl type switch_counters) and the switch's own stats.

While the runs go, a sampler thread reads /proc every 0.25 s: machine CPU
(/proc/stat) and the CPU time of this benchmark's own processes (the host
programs and soft switches whose command line names this work folder), so the
CPU used in each point's active window (common start -> last host record) is
known per host and for the switch. Nothing here asserts a timing: it reports.

    .venv/bin/python -m bench allreduce_ratios        # via the bench runner
    .venv/bin/python -m bench.allreduce_ratios [--quick] [--out DIR]
    .venv/bin/python -m bench.allreduce_ratios --retable results/bench/allreduce_ratios-<ts>.json

Each run waits (at most 45 s) for the machine to be nearly idle first, and records a
hash of the host/switch sources before and after: the result says so if the tree
changed while it ran. The measuring is bench/testbed_runs.py's, the analyses and
the table bench/allreduce_report.py's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.allreduce_report import analyze_aggrate, analyze_goodput, analyze_latency, finish
from bench.testbed_runs import ROOT, RunData, measure, save, unavailable_reason

NAME = "allreduce_ratios"

# Parameters of the three runs (full / --quick).
FULL = {"lat_iters": 300, "lat_warmup": 20, "gp_size": 1 << 20, "gp_iters": 3,
        "gp_workers": [4, 8], "gp_mbps": [10, 20], "agg_size": 1 << 20, "agg_iters": 3,
        "agg_workers": [2, 4, 8]}
QUICK = {"lat_iters": 50, "lat_warmup": 5, "gp_size": 1 << 16, "gp_iters": 2,
         "gp_workers": [4], "gp_mbps": [20], "agg_size": 1 << 16, "agg_iters": 2,
         "agg_workers": [2, 4]}
RUN_TIMEOUT_S = {"latency": 240, "goodput": 480, "aggrate": 300}


# --- scenarios ------------------------------------------------------------------------

def scenarios(p: dict) -> dict[str, str]:
    common = ("switch: {backend: soft, program: ina, capture: false}   # pcaps would cost switch CPU\n"
              "sweep:\n  seed: 1\n")
    lat = (f"name: bench_allreduce_latency\n"
           f"description: in-switch vs ring latency, 64 float32, N=8, unlimited links\n"
           f"topology: {{kind: star, workers: 8}}\n"
           f"links: {{bandwidth_mbps: null}}\n"
           f"workload: {{kind: allreduce, algorithm: switch, sizes: [64], "
           f"iterations: {p['lat_iters']}, warmup: {p['lat_warmup']}}}\n"
           + common + "  grid: {workload.algorithm: [switch, ring]}\n")
    gp = (f"name: bench_allreduce_goodput\n"
          f"description: in-switch vs ring goodput of a large tensor over shaped links\n"
          f"topology: {{kind: star, workers: 8}}\n"
          f"links: {{bandwidth_mbps: 10}}\n"
          f"workload: {{kind: allreduce, algorithm: switch, sizes: [{p['gp_size']}], "
          f"iterations: {p['gp_iters']}, warmup: 0}}\n"
          + common +
          f"  grid:\n    topology.workers: {p['gp_workers']}\n"
          f"    links.bandwidth_mbps: {p['gp_mbps']}\n"
          f"    workload.algorithm: [switch, ring]\n")
    agg = (f"name: bench_allreduce_aggrate\n"
           f"description: soft-switch aggregation rate, switch algorithm, unlimited links\n"
           f"topology: {{kind: star, workers: 2}}\n"
           f"links: {{bandwidth_mbps: null}}\n"
           f"workload: {{kind: allreduce, algorithm: switch, sizes: [{p['agg_size']}], "
           f"iterations: {p['agg_iters']}, warmup: 0}}\n"
           + common + f"  grid: {{topology.workers: {p['agg_workers']}}}\n")
    return {"latency": lat, "goodput": gp, "aggrate": agg}


# --- entry points --------------------------------------------------------------------------

def run(out_dir: str | Path, quick: bool = False) -> dict:
    """Bench entry point: <out_dir>/allreduce_ratios-<timestamp>.json (+ a work folder)."""
    reason = unavailable_reason()
    if reason:
        return {"benchmark": NAME, "skipped": reason}
    params = QUICK if quick else FULL
    yamls = scenarios(params)
    res, sampler = measure(NAME, out_dir, params, {kind: (yamls[kind], RUN_TIMEOUT_S[kind])
                                                   for kind in ("latency", "goodput", "aggrate")},
                           quick=quick)
    res["commands"] = [r["command"] for r in res["runs"].values()]
    res["run_dirs"] = [r["run_dir"] for r in res["runs"].values()]
    res["latency"] = analyze_latency(RunData(res["runs"]["latency"]["run_dir"]), sampler)
    res["goodput"] = analyze_goodput(RunData(res["runs"]["goodput"]["run_dir"]), sampler, params["gp_size"])
    res["aggrate"] = analyze_aggrate(RunData(res["runs"]["aggrate"]["run_dir"]), sampler, params["agg_size"])
    finish(res)
    return save(res)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.allreduce_ratios", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--quick", action="store_true", help="small tensors, few iterations (smoke test)")
    ap.add_argument("--retable", metavar="JSON", help="recompute verdicts, warnings and the table of "
                                                       "a saved result (no new runs); rewrites the file")
    a = ap.parse_args(argv)
    if a.retable:
        res = json.loads(Path(a.retable).read_text())
        finish(res)
        Path(a.retable).write_text(json.dumps(res, indent=1, default=str))
        print(res["table"])
        return 0
    res = run(a.out, quick=a.quick)
    if res.get("skipped"):
        print(f"skipped: {res['skipped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
