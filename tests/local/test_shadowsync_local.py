"""ShadowSync end to end on loopback through `testbed run --net local`: every
sparse update a worker pushed is applied by the embedding PS (counts compared),
model averaging really leaves the trainers with one model, and the shadow
process does not slow the workers (their iteration rate measured with and
without it)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from testbed.results import load_run

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]


def run_cli(tmp: Path, *sets: str, plot: bool = True) -> object:
    argv = [sys.executable, "-m", "testbed", "run", str(ROOT / "scenarios" / "shadowsync" / "throughput.yaml"),
            "--net", "local", "--quick", "--out", str(tmp)] + ([] if plot else ["--no-plot"])
    for s in sets:
        argv += ["--set", s]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"testbed run failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    runs = sorted(tmp.glob("*/*/manifest.json"))
    assert len(runs) == 1
    return load_run(runs[0].parent)


@pytest.fixture(scope="module")
def run(quick_run):
    # 2 trainers x 2 Hogwild workers, 2 embedding PSs; every algorithm, both modes, + no sync.
    # A fixed TDF: the shadow's cost is compared between points (calibrated points differ).
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    return load_run(quick_run("shadowsync/throughput.yaml", "workload.iterations=20", "workload.k=5",
                              "workload.device={type: v100, time_scale: 400}",
                              "workload.embedding_servers=2",
                              "sweep.quick.grid={topology.workers: [2], workload.algorithm: [easgd, ma, bmuf, none]}",
                              "sweep.quick.cases=[shadow, foreground]", net="local", plot=True, timeout=600))


def summaries(run) -> dict[str, dict]:
    assert all(p["status"] == "ok" for p in run.points), [p.get("error") for p in run.points]
    return {s["label"] + ("" if s["algorithm"] != "none" else "-" + s["mode"]): s
            for s in run.metrics_of("shadowsync_summary")}


def test_every_sparse_update_is_applied(run):
    for label, s in summaries(run).items():
        assert s["ok"], (label, s["errors"])
        # 2 trainers x 2 workers x 20 iterations, each PUSH to both embedding PSs
        assert s["pushes_sent"] == 2 * 2 * 20 * 2, label
        assert s["pushes_applied"] == s["pushes_sent"] and s["rows_applied"] == s["rows_sent"], label
        assert s["pushes_match"], label
        assert s["rows_sent"] == 2 * 2 * 20 * 64 * 26, label     # batch 64 x 26 tables
        assert all(0 <= x < 1 for x in s["emb_ps_load"]), label


def test_servers_agree_with_each_trainers_own_count(run):
    # the END message carries the worker's own count; each server compared it with its count
    recs = [r for r in run.metrics_of("shadowsync_server") if r["role"] == "embedding_ps"]
    assert recs and all(r["pushes_match"] for r in recs if r["client_pushes"] is not None)
    # per point: 2 trainers x (2 workers + the eval connection) x 2 servers
    assert sum(1 for r in recs if r["client_pushes"] is not None) == len(run.points) * 2 * 3 * 2
    assert sum(r["pushes"] for r in recs) == len(run.points) * 2 * 2 * 20 * 2


def test_model_averaging_leaves_one_model(run):
    s = summaries(run)
    for label in ("S-MA", "FR-MA"):
        ne = s[label]["eval_ne_per_trainer"]
        assert len(ne) == 2 and ne[0] == ne[1], label       # the last average is everyone's replica
    # without sync the two trainers' replicas (and so their eval NE) differ
    none = s["no-sync-shadow"]["eval_ne_per_trainer"]
    assert none[0] != none[1]
    assert s["S-EASGD"]["syncs"] and all(n >= 1 for n in s["S-EASGD"]["syncs"])
    # FR syncs exactly every k=5 of 20 iterations, on every trainer
    assert s["FR-BMUF"]["syncs"] == [4, 4] and s["FR-BMUF"]["avg_sync_gap"] == 5 * 2


def worker_iteration_s(run, point_index: int) -> float:
    """Median seconds per worker iteration, without the iteration's sync wait."""
    its = [r for r in run.metrics_of("shadowsync_iter") if r["point"] == point_index]
    assert its
    return float(np.median([r["lookup_s"] + r["compute_s"] + r["push_s"] for r in its]))


def test_shadow_does_not_block_or_slow_the_workers(run):
    s = summaries(run)
    shadow_pt = next(p["index"] for p in run.points if "shadow" in p["label"] and "algorithm=ma" in p["label"])
    none_pt = next(p["index"] for p in run.points if "shadow" in p["label"] and "algorithm=none" in p["label"])
    fr_pt = next(p["index"] for p in run.points if "foreground" in p["label"] and "algorithm=ma" in p["label"])
    its = list(run.metrics_of("shadowsync_iter"))
    # structurally: a shadow-mode worker never waits for a sync; a foreground one does
    assert all(r["sync_s"] == 0 for r in its if r["point"] == shadow_pt)
    assert sum(1 for r in its if r["point"] == fr_pt and r["sync_s"] > 0) == 2 * 2 * 4
    # measured: the workers' iteration time with the shadow running vs with no sync at all
    with_shadow, without = worker_iteration_s(run, shadow_pt), worker_iteration_s(run, none_pt)
    print(f"worker iteration: {with_shadow * 1e3:.2f} ms with the S-MA shadow, {without * 1e3:.2f} ms without")
    assert s["S-MA"]["syncs"][0] > 1
    # loose on purpose (2 shared cores): the shadow must not cost the workers half their rate
    assert with_shadow < 2.0 * without


def test_calibrated_run_agrees_on_one_tdf_and_traces_only_the_measured_run(tmp_path):
    """time_scale auto on loopback (nothing to dilate): every trainer ends calibration at
    the same TDF, the run's summary carries it, worker 0's trace holds the measured
    iterations only, and the servers' traces match it (the projection of the point's
    own traces plays, and so do 16 trainers)."""
    run = run_cli(tmp_path, "workload.iterations=12", "workload.calibration_rounds=2",
                  "workload.calibration_iterations=3", "workload.project_trainers=[16]",
                  "workload.k=4", "sweep.quick.grid={topology.workers: [2], workload.algorithm: [ma, easgd]}",
                  "sweep.quick.cases=[shadow, foreground]")
    assert [p["status"] for p in run.points] == ["ok"] * 4
    # FR-MA: k=4 of the 12 measured iterations (calibration's syncs are not counted), the
    # last one at the end, so both trainers end with the same replica
    fr = next(x for x in run.metrics_of("shadowsync_summary") if x["label"] == "FR-MA")
    assert fr["syncs"] == [3, 3] and fr["eval_ne_per_trainer"][0] == fr["eval_ne_per_trainer"][1]
    # S-EASGD: the shadows' ELASTIC messages (traced from MEASURE to UNTRACE) match the sync PS's
    projs = {r["label"]: r for r in run.metrics_of("projection")}
    assert set(projs) == {"S-MA", "S-EASGD", "FR-MA", "FR-EASGD"}
    assert not any("error" in r for r in projs.values()), projs
    s = next(x for x in run.metrics_of("shadowsync_summary") if x["label"] == "S-MA")
    cals = list(run.metrics_of("calibration"))
    assert sorted(c["host"] for c in cals) == ["w1"] * 4 + ["w2"] * 4 and all(len(c["rounds"]) == 2 for c in cals)
    cals = [c for c in cals if c["point"] == s["point"]]
    assert {c["tdf"] for c in cals} == {s["tdf"]} and s["calibrated"] and not cals[0]["network_dilated"]
    # calibration is training too: (3 x 2 + 12) iterations x 2 workers x 2 trainers pushed, all applied
    assert s["pushes_sent"] == (6 + 12) * 2 * 2 and s["pushes_match"]
    # the measured run only: 12 iteration records per worker, 12 steps in worker 0's trace
    assert len([r for r in run.metrics_of("shadowsync_iter") if r["point"] == s["point"]]) == 12 * 2 * 2
    from hosts.common.trace import read_trace  # noqa: PLC0415
    work = run.path / "points" / run.point(s["point"])["label"]
    header, nodes = read_trace(work / "w1.trace.jsonl")
    assert header["tdf"] == s["tdf"]
    assert sum(1 for n in nodes if n["kind"] == "compute" and (n.get("work") or {}).get("phase") == "step") == 12
    assert s["projected_hw_examples_per_s"] > 0
    # the own count is projected too, with the PS at its measured cost like 16: charging
    # that cost only slows it, and 16 trainers with 2 embedding PSs outrun 2 with 1
    assert set(s["projected"]) == {"2", "16"} and s["projected_servers"]["16"]["embedding_ps"] == 2
    assert s["projected"]["2"] <= s["projected_hw_examples_per_s"] * 1.001
    assert s["projected"]["16"] > s["projected"]["2"]


def test_collective_ps_averages_through_the_parameter_server(tmp_path):
    """S-MA and FR-BMUF with collective ps: the trainers' allreduces go through the
    torch layer's PS program on host arps, which serves every one of them (the
    trainers' sync counts), and model averaging leaves every trainer one model."""
    run = run_cli(tmp_path, "workload.iterations=12", "workload.k=4", "workload.collective=ps",
                  "workload.device={type: v100, time_scale: 400}",
                  "sweep.quick.grid={topology.workers: [2], workload.algorithm: [ma, bmuf]}",
                  "sweep.quick.cases=[shadow, foreground]")
    s = summaries(run)
    assert set(s) == {"S-MA", "FR-MA", "S-BMUF", "FR-BMUF"}
    ps = {r["point"]: r for r in run.metrics_of("shadowsync_server_host") if r["host"] == "arps"}
    for label, x in s.items():
        assert x["ok"] and x["collective"] == "ps" and x["pushes_match"], (label, x["errors"])
        # every sync of a trainer is one allreduce at the PS (the trainers sync in lockstep)
        assert x["syncs"][0] == x["syncs"][1] > 0, label
        assert ps[x["point"]]["ok"] and ps[x["point"]]["allreduces_served"] == x["syncs"][0], label
    assert s["FR-BMUF"]["syncs"] == [3, 3]
    for label in ("S-MA", "FR-MA"):
        ne = s[label]["eval_ne_per_trainer"]
        assert len(ne) == 2 and ne[0] == ne[1], label


def test_the_shadows_pause_is_hardware_time_and_traced(tmp_path):
    # S-EASGD, 2 trainers, a fixed TDF: a 2-ms (hardware) pause between syncs is slept
    # TDF x 2 ms and recorded as the shadow's own step, so syncs get rarer and the gap wider
    run = run_cli(tmp_path, "workload.device={type: v100, time_scale: 200}", "workload.iterations=20",
                  "workload.project_trainers=[]",
                  "sweep.quick.grid={topology.workers: [2], workload.algorithm: [easgd], "
                  "workload.shadow_pause_ms: [0, 2]}", "sweep.quick.cases=[shadow]",
                  plot=False)                                   # no S-/FR- pair: no NE figure
    for p in run.points:
        assert p["status"] == "ok", p.get("error")
    by_pause = {s["workload.shadow_pause_ms"]: s for s in run.metrics_of("shadowsync_summary")}
    assert sorted(by_pause) == [0, 2]
    s0, s2 = by_pause[0], by_pause[2]
    assert sum(s2["syncs"]) < sum(s0["syncs"]) and s2["avg_sync_gap"] > s0["avg_sync_gap"]
    p2 = run.point(s2["point"])["label"]
    traces = sorted(run.path.glob(f"points/{p2}/*-shadow.trace.jsonl"))
    assert len(traces) == 2
    for t in traces:
        pauses = [n for n in map(json.loads, t.read_text().splitlines()[1:])
                  if n.get("kind") == "compute" and n.get("work", {}).get("step") == "pause"]
        assert pauses and all(n["hw_s"] == 0.002 for n in pauses)
        assert all(n["t1"] - n["t0"] >= 0.002 * 200 * 0.9 for n in pauses)
