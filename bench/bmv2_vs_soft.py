"""BMv2 against the soft switch, side by side: the same scenario (quickstart's
topology and traffic: 4 workers, one switch, 100 Mbit/s links) run once per
backend, then allreduce latency (p50/p99) and goodput per algorithm and size,
and the in-switch aggregation rate (values aggregated per second at p50).
The host ring/PS points go through the switch as plain L2 forwarding, so they
compare the two switches' forwarding; the `switch` points compare aggregation.

Needs BMv2 and p4c (testbed/switch/bmv2_tools.py finds them: PATH or
$P4TOOLS_PREFIX); without them the result says so and nothing runs. BMv2
should be the performance build (--disable-logging-macros, -O3): its
simple_switch_grpc --version is recorded. A measurement, not a test.

    python -m bench bmv2_vs_soft [--out results/bench]
    BENCH_BMV2_SET="workload.ina.window=16" python -m bench bmv2_vs_soft   # extra --set for both
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "quickstart.yaml"
BACKENDS = ("soft", "bmv2")
# the quick sweep's sizes, baseline case only (loss needs the soft switch's impairments)
SETS = ["workload.iterations=10", "workload.sizes=[64,1024,16384]"]


def _run(backend: str, out: Path, extra: list[str]) -> Path:
    argv = [sys.executable, "-m", "testbed", "run", str(SCENARIO), "--quick", "--out", str(out),
            "--set", f"switch.backend={backend}"]
    for s in SETS + extra:
        argv += ["--set", s]
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    (out / f"{backend}-console.txt").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"{backend}: testbed run exited {res.returncode}; see {out}/{backend}-console.txt")
    runs = sorted(p for p in out.glob("*/") if (p / "summary.csv").exists())
    if not runs:
        raise RuntimeError(f"{backend}: no summary.csv under {out}")
    print(f"{backend}: {time.monotonic() - t0:.0f} s, {runs[-1]}", file=sys.stderr)
    return runs[-1]


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "summary.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("case", "baseline") == "baseline"]


def run(out_dir: str | Path) -> dict:
    from testbed.switch.bmv2_tools import bmv2_available, find_tools

    out_dir = Path(out_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ok, why = bmv2_available()
    if not ok:
        return {"name": "bmv2_vs_soft", "skipped": why}
    tools = find_tools()
    extra = [s for s in os.environ.get("BENCH_BMV2_SET", "").split() if s]
    work = out_dir / f"bmv2_vs_soft-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    by_backend = {}
    for backend in BACKENDS:
        (work / backend).mkdir(exist_ok=True)
        run_dir = _run(backend, work / backend, extra)
        by_backend[backend] = {"run": str(run_dir), "rows": _rows(run_dir)}
    side = []
    key = lambda r: (r["algorithm"], int(r["size"]))  # noqa: E731
    soft = {key(r): r for r in by_backend["soft"]["rows"]}
    for r in by_backend["bmv2"]["rows"]:
        s = soft.get(key(r))
        if s is None:
            continue
        side.append({"algorithm": r["algorithm"], "size": int(r["size"]),
                     "soft_p50_ms": float(s["p50_ms"]), "bmv2_p50_ms": float(r["p50_ms"]),
                     "bmv2_over_soft": round(float(r["p50_ms"]) / float(s["p50_ms"]), 2),
                     "soft_correct": s["all_correct"], "bmv2_correct": r["all_correct"],
                     **({"soft_values_per_s": round(int(r["size"]) / (float(s["p50_ms"]) / 1e3)),
                         "bmv2_values_per_s": round(int(r["size"]) / (float(r["p50_ms"]) / 1e3))}
                        if r["algorithm"] == "switch" else {})})
    result = {"name": "bmv2_vs_soft", "when": stamp, "scenario": str(SCENARIO.relative_to(ROOT)),
              "sets": SETS + extra, "bmv2": tools.describe(), "side_by_side": side,
              "runs": {b: v["run"] for b, v in by_backend.items()}}
    path = out_dir / f"bmv2_vs_soft-{stamp}.json"
    path.write_text(json.dumps(result, indent=1))
    result["json_path"] = str(path)
    return result
