"""ShadowSync on Mininet with 5 % loss on every link (applied by the soft switch):
`testbed run scenarios/shadowsync/loss.yaml --quick`, 2 trainers x 2 Hogwild
workers, S-EASGD and FR-EASGD. Lookups, sparse pushes and elastic exchanges are
TCP: the embedding PS applies exactly the pushes the workers sent, at 0 % and at
5 % loss (counted on both sides and compared), and the sync PS served syncs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(500)]

ROOT = Path(__file__).resolve().parents[2]


def test_embedding_ps_applies_every_push_under_five_percent_loss(quick_run):
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    run_dir = quick_run("shadowsync/loss.yaml", "workload.iterations=24", timeout=480)
    points = [json.loads(x) for x in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok"] * 4, [pt.get("error") for pt in points]
    lossy = [pt for pt in points if pt["case"] == "loss5"]
    assert len(lossy) == 2 and all(any(i.get("applied") for i in pt["impairments"]) for pt in lossy)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = [m for m in metrics if m["type"] == "shadowsync_summary"]
    assert len(sums) == 4
    for s in sums:
        assert s["ok"], s["errors"]
        # trainers x workers x (iterations + calibration's 2 rounds x 6: loss.yaml is time_scale auto)
        assert s["pushes_sent"] == 2 * 2 * (24 + 2 * 6) and s["calibrated"]
        assert s["pushes_applied"] == s["pushes_sent"] and s["rows_applied"] == s["rows_sent"]
        assert s["pushes_match"]
        assert all(n >= 1 for n in s["syncs"])
    # the switch really dropped frames at 5 % (its per-port counters, in points.jsonl)
    for pt in lossy:
        assert sum((i.get("observed") or {}).get("dropped", 0) for i in pt["impairments"]) > 0


def test_model_averaging_through_the_switch(tmp_path):
    # S-MA and FR-MA with the in-network allreduce: every trainer ends with the same
    # replica (the switch's sum is the same bits for all), every push applied
    argv = [sys.executable, "-m", "testbed", "run", str(ROOT / "scenarios" / "shadowsync" / "throughput.yaml"),
            "--quick", "--no-plot", "--out", str(tmp_path), "--set", "workload.iterations=20",
            "--set", "workload.collective=switch",
            "--set", "sweep.quick.grid={topology.workers: [2], workload.algorithm: [ma]}"]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=480)
    assert p.returncode == 0, f"testbed run failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    (run_dir,) = [m.parent for m in tmp_path.glob("*/*/manifest.json")]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = {m["label"]: m for m in metrics if m["type"] == "shadowsync_summary"}
    assert set(sums) == {"S-MA", "FR-MA"}
    for s in sums.values():
        assert s["ok"] and s["collective"] == "switch" and s["pushes_match"], s
        ne = s["eval_ne_per_trainer"]
        assert len(ne) == 2 and ne[0] == ne[1]
    assert sums["FR-MA"]["syncs"] == [4, 4]                 # 20 iterations / k 5, per trainer
