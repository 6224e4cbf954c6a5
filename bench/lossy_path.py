"""Loss on the compiled path: the soft switch's C ring loop against its Python path
under 1 % loss, side by side.

The quickstart's 1 MiB allreduce (4 workers, star, 100 Mbit/s links, 1 % loss on
every link, capture off), in-switch and ring, run alternately with the switch's
`io_impl` at ring_fastpath (the default: loss alone is applied in C, with the
Python path's random streams) and mmap_ring (every frame on the Python path, the
reference), `repeats` times each. Reports the p50 of each point, each algorithm's
ratio of the two paths, and the frames each path ran (from the switch's stats:
proof of which path did the work).

Nothing here asserts a timing: it reports.

    .venv/bin/python -m bench lossy_path
    .venv/bin/python -m bench.lossy_path [--repeats N] [--iterations K] [--out DIR]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bench.testbed_runs import ROOT, measure, p50_by_algorithm, repeats_main, save, unavailable_reason

NAME = "lossy_path"
IO_IMPLS = ("ring_fastpath", "mmap_ring")
SIZE = 262144          # float32 values: 1 MiB
WORKERS, MBPS, LOSS_PCT = 4, 100.0, 1.0


def scenario(io_impl: str, iterations: int) -> str:
    return f"""name: lossy-path-{io_impl}
topology: {{kind: star, workers: {WORKERS}}}
links: {{bandwidth_mbps: {MBPS:g}, loss_pct: {LOSS_PCT:g}}}
switch: {{backend: soft, program: ina, capture: false, options: {{io_impl: {io_impl}}}}}
workload: {{kind: allreduce, algorithm: switch, sizes: [{SIZE}], iterations: {iterations}, warmup: 2}}
sweep:
  grid: {{workload.algorithm: [switch, ring]}}
"""


def packet_paths(run_dir: str | None) -> dict[str, dict]:
    """{point label: the switch's frames per packet path} of a run."""
    out = {}
    for f in sorted(Path(run_dir or "/nonexistent").glob("points/*/switch_stats.json")):
        for st in json.loads(f.read_text()).values():
            out[f.parent.name] = (st.get("packet_path") or {}).get("frames")
    return out


def run(out_dir: str | Path = ROOT / "results" / "bench", repeats: int = 3, iterations: int = 10) -> dict:
    why = unavailable_reason()
    if why:
        return {"benchmark": NAME, "skipped": why}
    runs = {f"{io}-{i}": (scenario(io, iterations), 300.0) for i in range(repeats) for io in IO_IMPLS}
    res, _ = measure(NAME, out_dir, {"size": SIZE, "workers": WORKERS, "mbps": MBPS, "loss_pct": LOSS_PCT,
                                     "repeats": repeats, "iterations": iterations}, runs)
    p50 = {k: p50_by_algorithm(r["run_dir"]) for k, r in res["runs"].items()}
    res["packet_paths"] = {k: packet_paths(r["run_dir"]) for k, r in res["runs"].items()}
    summary = {}
    for alg in ("switch", "ring"):
        per = {io: [p50[f"{io}-{i}"].get(alg) for i in range(repeats)] for io in IO_IMPLS}
        med = {io: statistics.median([x for x in xs if x is not None]) if any(x is not None for x in xs) else None
               for io, xs in per.items()}
        summary[alg] = {"p50_ms": per, "median_p50_ms": med,
                        "compiled_over_python": (med["ring_fastpath"] / med["mmap_ring"])
                        if med["ring_fastpath"] and med["mmap_ring"] else None}
    res["summary"] = summary
    lines = [f"{NAME}: 1 MiB allreduce, {WORKERS} workers, {MBPS:g} Mbit/s links, {LOSS_PCT:g} % loss, "
             "p50 ms per run", "algorithm  io_impl        p50 per run              median  compiled/python"]
    for alg, s in summary.items():
        for io in IO_IMPLS:
            txt = ", ".join("-" if x is None else f"{x:.1f}" for x in s["p50_ms"][io])
            m = s["median_p50_ms"][io]
            ratio = s["compiled_over_python"] if io == "ring_fastpath" else None
            lines.append(f"{alg:<10} {io:<14} {txt:<24} {m or float('nan'):>7.1f}" + (f"  {ratio:.2f}" if ratio else ""))
    res["table"] = "\n".join(lines)
    return save(res)


def main(argv: list[str] | None = None) -> int:
    return repeats_main(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
