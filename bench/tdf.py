"""`python -m bench tdf`: the dilation each calibrated point pays, under the older fixed
headroom rule (TDF = 16 x the emulator's median slowdown) and the measured rule
(`network_headroom: auto`, hosts/common/calibration.py: what the fidelity monitor's
validity rule needs given the per-operation slowdowns of calibration's undilated
round), side by side in one run on the same points; and a fixed 4 x, the validity
band's edge alone, which the measured rule's agreement bound exceeds.

Points (issue 34): P4SGD at 4 workers, PHub at 4 workers with its PS and with in-switch
aggregation, LHC in-switch, PyTorch LeNet in-switch (2 workers, the quick run), Sync
EASGD (4 workers). Each runs once per rule, the two rules back to back per point after
the machine quietened (the machine is shared: what compares is the pair, not the
absolute wall time). Per point and rule the table gives the TDF, round 0's median
slowdown and the TDF's multiple of it, the point's wall time, its validity (and
reasons), the run-long network ratio (p50, p99) and emulated / projected.

    python -m bench tdf                      # every point, both rules
    python -m bench.tdf --points lhc_switch --rules auto 16
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.testbed_runs import (ROOT, RunData, source_fingerprint, testbed_argv, unavailable_reason,
                                wait_for_quiet)

# name: (scenario, --set overrides picking the one point). The overrides are the shipped
# scenario's own quick settings where it has them, so the points are the quick runs' points.
POINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "p4sgd_4w": ("scenarios/p4sgd/scaling.yaml", (
        "sweep.grid={topology.workers: [4]}", "sweep.cases=[{name: p4sgd}]", "sweep.quick.cases=[p4sgd]",
        "sweep.repeats=1",
        "workload.calibration_rounds=2", "workload.snapshot_every=8")),
    "phub_4w_ps": ("scenarios/phub/workers.yaml", (
        "sweep.grid={topology.workers: [4]}", "sweep.cases=[{name: phub}]", "workload.iterations=2",
        "workload.calibration_rounds=2", "workload.calibration_iterations=1")),
    "phub_4w_switch": ("scenarios/phub/workers.yaml", (
        "sweep.grid={topology.workers: [4]}", "sweep.cases=[{name: switch, set: {workload.algorithm: switch}}]",
        "workload.iterations=2", "workload.calibration_rounds=2", "workload.calibration_iterations=1")),
    "lhc_switch": ("scenarios/lhc/throughput.yaml", (
        "sweep.grid={workload.algorithm: [lhc_switch], workload.gradient.density: [0.01]}",
        "workload.gradient={kind: synthetic, size: 65536, density: 0.01}", "workload.iterations=3")),
    "torch_lenet_switch": ("scenarios/torch/lenet.yaml", (
        "sweep.grid={workload.collective: [switch]}", "sweep.cases=[{name: baseline}]", "topology.workers=2")),
    "easgd_sync": ("scenarios/easgd/variants.yaml", (
        "sweep.grid={workload.variant: [sync_easgd]}", "sweep.repeats=1", "workload.steps=200")),
}
# the older fixed headroom; 4 x the median slowdown, what the validity band's edge alone
# asks (1 / (1.25 - 1)), kept to show what it costs; and the measured rule
RULES = ("16", "4", "auto")
TIMEOUT_S = 1500.0


def run_point(name: str, rule: str, work: Path) -> dict[str, Any]:
    """One `testbed run` of point `name` under headroom `rule`, read back."""
    scenario, sets = POINTS[name]
    head = rule if rule == "auto" else float(rule)
    argv = testbed_argv() + ["run", scenario, "--out", str(work / "runs" / f"{name}-{rule}"), "--no-plot"]
    for s in (*sets, f"workload.network_headroom={head}"):
        argv += ["--set", s]
    quiet = wait_for_quiet()
    print(f"--- {name} headroom {rule}: {shlex.join(argv)}", file=sys.stderr, flush=True)
    log = work / f"{name}-{rule}.log"
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rc: Any = proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.terminate()          # the runner turns SIGTERM into a clean teardown
            rc = f"timeout after {TIMEOUT_S:g} s (rc {proc.wait()})"
    wall = time.time() - t0
    m = re.findall(r"^results: (.+)$", log.read_text(errors="replace"), re.M)
    row = {"point": name, "rule": rule, "command": shlex.join(argv), "returncode": rc, "run_wall_s": round(wall, 1),
           "quiet_wait": quiet, "log": str(log), "run_dir": m[-1].strip() if m else None}
    row.update(read_point(row["run_dir"]))
    return row


def read_point(run_dir: str | None) -> dict[str, Any]:
    """TDF, round 0's slowdowns, validity, network ratios and emulated/projected of the
    run's one point."""
    data = RunData(run_dir)
    if not data.points:
        return {"valid": None, "reasons": ["no point finished"]}
    p = data.points[0]
    recs = data.records.get(p["label"], [])
    fid = p.get("fidelity") or {}
    cal = next((r for r in recs if r.get("type") == "calibration" and r.get("rounds")), None)
    r0 = (cal or {}).get("rounds", [{}])[0]
    slow = r0.get("tdf_net")
    summary = next((r for r in recs if "emulated_over_projected" in r), {})
    tdf = fid.get("tdf")
    return {"label": p["label"], "status": p.get("status"), "point_wall_s": p.get("wall_s"),
            "tdf": tdf, "slowdown_p50": slow, "slowdown": (r0.get("headroom") or {}).get("slowdown"),
            "tdf_over_slowdown": (tdf / slow) if tdf and slow else None,
            "headroom_by": (r0.get("headroom") or {}).get("by") or ("fixed" if cal else None),
            "valid": fid.get("valid"), "reasons": fid.get("reasons") or [],
            "ratio_p50": fid.get("ratio_p50"), "ratio_p99": fid.get("ratio_p99"),
            "emulated_over_projected": fid.get("emulated_vs_projected", summary.get("emulated_over_projected"))}


def _f(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| point | rule | TDF | slowdown p50 | TDF / slowdown | set by | point wall s | valid | "
             "net/TDF p50 | p99 | emulated / projected |", "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r['point']} | {r['rule']} | {_f(r.get('tdf'), '.4g')} | {_f(r.get('slowdown_p50'), '.4g')} | "
                     f"{_f(r.get('tdf_over_slowdown'), '.2f')} | {r.get('headroom_by') or '-'} | "
                     f"{_f(r.get('point_wall_s'), '.1f')} | {r.get('valid')} | {_f(r.get('ratio_p50'), '.2f')} | "
                     f"{_f(r.get('ratio_p99'), '.2f')} | {_f(r.get('emulated_over_projected'), '.2f')} |")
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 34's targets read off the rows, per rule other than the older 16: the median
    TDF / median slowdown, the points valid under 16 that are not under it, and the
    wall-time ratio per point (16 / it)."""
    by = {(r["point"], r["rule"]): r for r in rows}
    out: dict[str, Any] = {}
    for rule in sorted({r["rule"] for r in rows} - {"16"}):
        factors = [r["tdf_over_slowdown"] for r in rows if r["rule"] == rule and r.get("tdf_over_slowdown")]
        lost, speedups = [], {}
        for name in sorted({r["point"] for r in rows}):
            old, new = by.get((name, "16")), by.get((name, rule))
            if not old or not new:
                continue
            if old.get("valid") and not new.get("valid"):
                lost.append(name)
            if old.get("point_wall_s") and new.get("point_wall_s"):
                speedups[name] = round(old["point_wall_s"] / new["point_wall_s"], 2)
        out[rule] = {"median_tdf_over_slowdown": float(np.median(factors)) if factors else None,
                     "valid_under_16_invalid_here": lost, "point_wall_speedup_over_16": speedups}
    return out


def run(out_dir: str | Path, points: list[str] | None = None, rules: tuple[str, ...] = RULES) -> dict[str, Any]:
    why = unavailable_reason()
    if why:
        return {"benchmark": "tdf", "skipped": why}
    out_dir = Path(out_dir).resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = out_dir / f"tdf-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"benchmark": "tdf", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "cpus": os.cpu_count(), "sources": source_fingerprint(), "rules": list(rules),
                           "rows": [], "json_path": str(out_dir / f"tdf-{stamp}.json")}
    for name in points or list(POINTS):
        for rule in rules:
            res["rows"].append(run_point(name, rule, work))
            res["verdict"] = verdict(res["rows"])
            res["table"] = table(res["rows"])
            Path(res["json_path"]).write_text(json.dumps(res, indent=1, default=str))   # a point at a time
    print(res["table"], flush=True)
    print(json.dumps(res["verdict"], indent=1), flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", nargs="+", choices=list(POINTS), default=list(POINTS))
    ap.add_argument("--rules", nargs="+", default=list(RULES), help="headroom rules: auto and/or numbers")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    a = ap.parse_args(argv)
    for r in a.rules:
        if r != "auto":
            try:
                if not 1 <= float(r) <= 100:
                    raise ValueError
            except ValueError:
                ap.error(f"--rules: {r!r} is neither auto nor a number in [1, 100]")
    res = run(a.out, a.points, tuple(a.rules))
    if res.get("skipped"):
        print(f"skipped: {res['skipped']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
