"""Who shapes the links: the soft switch's ingress shaper against htb, side by side.

The quickstart's 1 MiB allreduce (4 workers, star, 100 Mbit/s links, capture off),
in-switch and ring, run alternately with `links.shaper: auto` (host uplinks shaped
by the soft switch at its receive rings, downlinks by htb on the switch ports) and
`links.shaper: htb` (htb at both ends, Mininet's TCLink), `repeats` times each.
Reports the p50 of each point, the in-switch / ring ratio per shaper and each
algorithm's time against its link-rate bound:

- in-switch: every worker sends each of its 4096 chunks once up (314-byte frames
  for 256 bytes of values) and gets each result once down, pipelined: the uplink's
  bytes / rate;
- ring: 2 (N - 1) / N x the tensor per host over TCP (1448 bytes of payload per
  1514-byte frame).

Nothing here asserts a timing: it reports (issue target: in-switch <= ring).

    .venv/bin/python -m bench link_shaper
    .venv/bin/python -m bench.link_shaper [--repeats N] [--out DIR]
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from bench.testbed_runs import ROOT, measure, p50_by_algorithm, repeats_main, save, unavailable_reason

NAME = "link_shaper"
SHAPERS = ("auto", "htb")
SIZE = 262144          # float32 values: 1 MiB
WORKERS, MBPS = 4, 100.0
INA_FRAME, INA_VALUES_BYTES = 314, 256
TCP_FRAME, TCP_PAYLOAD = 1514, 1448


def scenario(shaper: str, iterations: int) -> str:
    return f"""name: link-shaper-{shaper}
topology: {{kind: star, workers: {WORKERS}}}
links: {{bandwidth_mbps: {MBPS:g}, shaper: {shaper}}}
switch: {{backend: soft, program: ina, capture: false}}
workload: {{kind: allreduce, algorithm: switch, sizes: [{SIZE}], iterations: {iterations}, warmup: 2}}
sweep:
  grid: {{workload.algorithm: [switch, ring]}}
"""


def link_bounds_ms() -> dict[str, float]:
    nbytes = 4 * SIZE
    ina = nbytes / INA_VALUES_BYTES * INA_FRAME
    ring = 2 * (WORKERS - 1) / WORKERS * nbytes * TCP_FRAME / TCP_PAYLOAD
    return {"switch": ina * 8 / (MBPS * 1e6) * 1e3, "ring": ring * 8 / (MBPS * 1e6) * 1e3}


def run(out_dir: str | Path = ROOT / "results" / "bench", repeats: int = 3, iterations: int = 10) -> dict:
    why = unavailable_reason()
    if why:
        return {"benchmark": NAME, "skipped": why}
    runs = {f"{sh}-{i}": (scenario(sh, iterations), 300.0) for i in range(repeats) for sh in SHAPERS}
    res, _ = measure(NAME, out_dir, {"size": SIZE, "workers": WORKERS, "mbps": MBPS, "repeats": repeats,
                                     "iterations": iterations}, runs)
    p50 = {k: p50_by_algorithm(r["run_dir"]) for k, r in res["runs"].items()}
    bounds = link_bounds_ms()
    summary = {}
    for sh in SHAPERS:
        per = {alg: [p50[f"{sh}-{i}"].get(alg) for i in range(repeats)] for alg in ("switch", "ring")}
        ok = {alg: [x for x in xs if x is not None] for alg, xs in per.items()}
        med = {alg: statistics.median(xs) if xs else None for alg, xs in ok.items()}
        summary[sh] = {"p50_ms": per, "median_p50_ms": med,
                       "switch_over_ring": (med["switch"] / med["ring"]) if med["switch"] and med["ring"] else None,
                       "over_link_bound": {alg: (m / bounds[alg]) if m else None for alg, m in med.items()}}
    res["link_bound_ms"] = bounds
    res["summary"] = summary
    lines = [f"{NAME}: 1 MiB allreduce, {WORKERS} workers, {MBPS:g} Mbit/s links, p50 ms per run "
             f"(link-rate bound: in-switch {bounds['switch']:.1f}, ring {bounds['ring']:.1f})",
             "shaper  algorithm  p50 per run              median   x bound  in-switch/ring"]
    for sh, s in summary.items():
        for alg in ("switch", "ring"):
            runs_txt = ", ".join("-" if x is None else f"{x:.1f}" for x in s["p50_ms"][alg])
            m, xb = s["median_p50_ms"][alg], s["over_link_bound"][alg]
            ratio = s["switch_over_ring"] if alg == "switch" else None
            lines.append(f"{sh:<7} {alg:<10} {runs_txt:<24} {m or float('nan'):>7.1f}  {xb or float('nan'):>6.2f}"
                         + (f"   {ratio:.2f}" if ratio else ""))
    res["table"] = "\n".join(lines)
    return save(res)


def main(argv: list[str] | None = None) -> int:
    return repeats_main(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
