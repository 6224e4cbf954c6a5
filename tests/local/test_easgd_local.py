"""EASGD end to end on loopback through `testbed run --net local`: Sync EASGD
gives the same bits run after run with the same seed (ring allreduce) and one
centre on every rank through the tree, tensor by tensor; an
asynchronous variant's master counts exactly the exchanges its workers made, and
a calibration that would crawl fails the point at once, naming the refusal."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.results import load_run

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]


def run_cli(tmp: Path, *sets: str, scenario: str = "variants.yaml") -> object:
    argv = [sys.executable, "-m", "testbed", "run", str(ROOT / "scenarios" / "easgd" / scenario),
            "--net", "local", "--quick", "--out", str(tmp)]
    for s in sets:
        argv += ["--set", s]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, f"testbed run failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    runs = sorted(tmp.glob("*/*/manifest.json"))
    assert len(runs) == 1
    return load_run(runs[0].parent)


def summaries(run) -> list[dict]:
    assert all(p["status"] == "ok" for p in run.points), [p.get("error") for p in run.points]
    return list(run.metrics_of("easgd_summary"))


FAST = ("workload.steps=24", "workload.tau=4", "topology.workers=2")


def test_sync_easgd_is_bit_identical_across_repeats(tmp_path):
    a_run = run_cli(tmp_path / "a", "workload.variant=sync_easgd", *FAST)
    a = summaries(a_run)[0]
    b = summaries(run_cli(tmp_path / "b", "workload.variant=sync_easgd", *FAST))[0]
    assert a["ok"] and b["ok"]
    # every worker's centre replica is the same bits, and so is every repeat's
    assert len(set(a["c_sha256"].values())) == 1
    assert a["c_sha256"] == b["c_sha256"] and a["w_sha256"] == b["w_sha256"]
    c = summaries(run_cli(tmp_path / "c", "workload.variant=sync_easgd", "workload.seed=2", *FAST))[0]
    assert c["c_sha256"] != a["c_sha256"]          # the digest does see the weights
    # time_scale auto (the scenario's): calibrated on the allreduces, every worker at one TDF,
    # and the sync variant's allreduces are projected at 1..256 workers
    # (or, its run-long slowdown out of the band, run once more uncalibrated at the TDF that
    # run measured: WorkloadRuntime.retune, the first attempt kept in the point's record)
    retried = bool((a_run.points[0].get("fidelity") or {}).get("earlier_attempts"))
    assert a["calibrated"] != retried and a["tdf"] > 1
    assert a["hw_wall_s"] == pytest.approx(a["wall_s"] / a["tdf"])
    assert a["projection"] == "projected" and a["projected_hw_train_s"] > 0


def test_sync_easgd_through_the_tree_per_tensor_keeps_one_centre(tmp_path):
    """collective tree, pack false, 3 workers (rank 0's children 1 and 2): every
    rank's centre is the same bits; every exchange is one tree allreduce per
    parameter tensor in each worker's trace, and the point is projected."""
    from hosts.common.trace import read_trace  # noqa: PLC0415
    from hosts.easgd.model import Task  # noqa: PLC0415
    run = run_cli(tmp_path, "workload.variant=sync_easgd", "workload.collective=tree", "workload.pack=false",
                  "workload.steps=8", "workload.tau=4", "topology.workers=3")
    s = summaries(run)[0]
    assert s["ok"] and s["collective"] == "tree" and s["pack"] is False
    assert len(set(s["c_sha256"].values())) == 1 and len(s["c_sha256"]) == 3
    assert s["exchanges_worker"] == {"0": 2, "1": 2, "2": 2}
    sizes = Task(1, {"c1": 16, "c2": 32, "hidden": 64}, 0, 3, 32).tensor_sizes()
    for path in sorted(tmp_path.rglob("w*.trace.jsonl")):
        _, nodes = read_trace(path)
        ops = [n for n in nodes if n["kind"] == "comm"]
        assert {n["algo"] for n in ops} == {"tree"}, path
        assert [n["values"] for n in ops] == sizes * 2, path
    assert s["projection"] == "projected" and s["projected_hw_train_s"] > 0


def test_async_master_counts_every_exchange_and_records_time(tmp_path):
    from hosts.common.trace import read_trace  # noqa: PLC0415
    run = run_cli(tmp_path, "workload.variant=async_easgd", *FAST)
    s = summaries(run)[0]
    assert s["exchanges_worker"] == {"0": 6, "1": 6}          # 24 steps / tau 4
    assert s["exchanges_master"] == s["exchanges_worker"] and s["exchanges_match"]
    assert 0 < s["comm_share"] < 1
    # calibrated through the master: both workers wrote 3 rounds and chose one TDF (unless
    # the run-long slowdown left the band and the point ran once more, uncalibrated, at the
    # TDF that run measured: WorkloadRuntime.retune)
    cals = [m for m in run.metrics_of("calibration")]
    if (run.points[0].get("fidelity") or {}).get("earlier_attempts"):
        assert not cals and not s["calibrated"]
    else:
        assert len(cals) == 2 and all(len(c["rounds"]) == 3 for c in cals)
        assert {c["tdf"] for c in cals} == {s["tdf"]}
    # every exchange is a p2p message pair in the worker's trace and the master's
    traces = sorted(tmp_path.rglob("*.trace.jsonl"))
    by_host = {p.name.split(".trace")[0]: read_trace(p) for p in traces}
    assert set(by_host) == {"w1", "w2", "master"}, traces
    h, nodes = by_host["master"]
    assert h["role"] == "server" and h["serve_order"] == "fcfs" and h["world"] == 3 and h["tdf"] == s["tdf"]
    assert sum(n.get("op") == "recv" for n in nodes) == 12
    hw, wnodes = by_host["w1"]
    assert hw["role"] == "worker" and hw["world"] == 3
    assert [n["group"] for n in wnodes if n.get("op") == "send"] == ["p2p:push:w1>master"] * 6
    assert [n["group"] for n in wnodes if n.get("op") == "recv"] == ["p2p:reply:master>w1"] * 6
    # the master's p2p messages are network-checked and projected (server model at 16-256)
    proj = [m for m in run.metrics_of("projection") if m.get("workload") == "easgd"]
    assert s["projection"] == "projected"
    assert sorted(m["workers"] for m in proj) == [1, 2, 16, 32, 64, 128, 256]
    fid = next(m for m in run.metrics_of("fidelity"))
    assert fid["comm_ops"] > 0 and fid["net_slowdown_p50"] > 0
    assert (run.path / "figures" / "easgd_accuracy_vs_time.png").is_file()
    # every easgd figure draws from this run, the weak-scaling one with the paper's line
    from testbed.plots import draw_figures, style  # noqa: PLC0415
    drawn: list = []
    orig = style._close
    style._close = lambda fig: (drawn.append(style.caption_of(fig)), orig(fig))
    try:
        paths = draw_figures(run, ["easgd_time_to_target", "easgd_comm_share", "easgd_weak_scaling"])
    finally:
        style._close = orig
    assert {p.name for p in paths} >= {"easgd_weak_scaling.png", "easgd_comm_share.pdf"}
    assert "paper: 91.5 %" in drawn[-1] and "tau 4" in drawn[0]
    assert "workers that ran: 2" in drawn[0]          # the override's count, not the scenario's 4


def test_mnist_format_files_train_end_to_end(tmp_path):
    # tiny synthetic MNIST idx files (tests/unit/test_easgd_datasets.py writes them):
    # the loader, the resized LeNet and the master all agree on the 28x28 model
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from test_easgd_datasets import write_mnist  # noqa: PLC0415
    folder = write_mnist(tmp_path / "mnist", n_train=128, n_test=32)
    run = run_cli(tmp_path / "run", "workload.variant=async_easgd", *FAST,
                  f"workload.dataset={{source: mnist, path: {folder}}}", "workload.batch_size=16")
    s = summaries(run)[0]
    assert s["ok"] and s["exchanges_match"] and s["exchanges_worker"] == {"0": 6, "1": 6}
    assert s["final_acc"] is not None


REFUSED = ("name: refused\ntopology: {kind: star, workers: 2}\nworkload: {kind: easgd, variant: %s, steps: 4, "
           "tau: 2, calibration_rounds: 2, calibration_iterations: 1, model: {c1: 4, c2: 8, hidden: 16}}\n")


@pytest.mark.parametrize("variant", ["async_easgd", "hogwild_easgd", "sync_easgd"])
def test_a_calibration_that_would_crawl_is_refused_by_every_host(tmp_path, monkeypatch, variant):
    """The workload's host programs, run on loopback with a budget no iteration fits (1 ns):
    every worker refuses round 0's TDF (the same agreed numbers) and, through the master
    variants' TDF message, so does the master; each exits EXIT_REFUSED with the refusal in
    its summary, nobody waits for a peer's timeout."""
    import json  # noqa: PLC0415
    import time  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    import testbed.workloads.easgd as easgd  # noqa: PLC0415
    from hosts.common.program import EXIT_REFUSED  # noqa: PLC0415
    from testbed.scenario import expand_points, load_scenario_text  # noqa: PLC0415
    from testbed.workloads.base import PointContext  # noqa: PLC0415

    monkeypatch.setattr(easgd, "ITERATION_WALL_S", 1e-9)
    (point,) = expand_points(load_scenario_text(REFUSED % variant, "refused.yaml"))
    hosts = {h: SimpleNamespace(name=h, ip=f"127.0.1.{i}", mac=None) for i, h in enumerate(point.scenario.hosts(), 1)}
    progs = easgd.EasgdRuntime().programs(PointContext(point, hosts, tmp_path, "local", time.time()))
    procs = {}
    for p in sorted(progs, key=lambda p: p.phase):
        with open(tmp_path / f"{p.host}.log", "w") as log:
            procs[p.host] = subprocess.Popen(p.argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        rcs = {h: p.wait(timeout=60) for h, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    logs = {h: (tmp_path / f"{h}.log").read_text()[-2000:] for h in procs}
    assert set(rcs.values()) == {EXIT_REFUSED}, (rcs, logs)
    assert set(procs) == ({"w1", "w2"} if variant == "sync_easgd" else {"w1", "w2", "master"})
    for h in procs:
        summary = next(json.loads(x) for x in (tmp_path / f"{h}.jsonl").read_text().splitlines()
                       if json.loads(x)["type"] == "summary")
        assert not summary["ok"], summary
        assert summary["error"].startswith("CalibrationRefused: calibration round 0" +
                                           (": the workers refused" if h == "master" else " chose TDF")), summary


def test_a_calibration_that_would_crawl_fails_the_point_at_once_naming_the_refusal(tmp_path, monkeypatch):
    """time_scale auto through the master: with a budget no iteration fits (1 ns), every
    worker refuses round 0's TDF and tells the master, which refuses too; the point fails
    at once (not at its deadline) and its record's first line names the refusal."""
    import json  # noqa: PLC0415

    import testbed.workloads.easgd as easgd  # noqa: PLC0415
    from testbed import runner  # noqa: PLC0415
    from testbed.scenario import expand_points, load_scenario_text  # noqa: PLC0415

    monkeypatch.setenv("INNET_TESTBED_REGISTRY", str(tmp_path / "registry"))
    monkeypatch.setenv("INNET_TESTBED_RUN", "")
    monkeypatch.setattr(easgd, "ITERATION_WALL_S", 1e-9)
    scn = load_scenario_text(REFUSED % "async_easgd", "refused.yaml")
    out = runner.run_points(scn, expand_points(scn), net_mode="local", quick=False, out_dir=tmp_path, cli={})
    (point,) = [json.loads(x) for x in (out.run_dir / "points.jsonl").read_text().splitlines()]
    first = point["error"].splitlines()[0]
    assert point["status"] == "failed" and point["wall_s"] < 60, point
    assert re.match(r"host (master|w1|w2) refused the point \(exit code 4\): CalibrationRefused: "
                    r"calibration round 0", first), first
    master = next(json.loads(x) for x in (out.run_dir / "points" / point["label"] / "master.jsonl")
                  .read_text().splitlines() if json.loads(x)["type"] == "summary")
    assert not master["ok"] and "the workers refused the TDF chosen from their 2 round trips (" in master["error"], master
