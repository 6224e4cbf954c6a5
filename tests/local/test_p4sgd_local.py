"""P4SGD end to end on loopback: the shipped scenarios' quick sweeps through
`testbed run --net local` (ring / PS collectives, no impairments), and the
in-switch collective against the soft switch's UDP mode started by hand.

Checked: every point completes with identical allreduce results on all
workers, the results folder has the loss curves and figures, and the final
assembled model's training loss matches an in-process run of the same
algorithm (hosts.glm.training.simulate_*) within a stated tolerance.
"""
from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.switch.soft.process import SoftSwitchProcess
from testbed.switch.soft.udp_io import loopback_switch_config

from hosts.glm.datasets import load_dataset
from hosts.glm.models import get_model
from hosts.glm.training import evaluate, simulate_data_parallel, simulate_model_parallel
from testbed.results import load_run

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
# Ring and PS sum in float32 (relative error ~6e-8 per partial sum) where the
# reference sums in float64; over these short runs the training loss moves by
# < 1e-9. The switch sums round(q * 2^16) integers: <= N * 2^-17 per sum.
LOSS_TOL_FLOAT32 = 1e-6
LOSS_TOL_FIXED_POINT = 1e-3


def run_cli(quick_run, scenario: str, *sets: str, timeout: float = 400) -> Path:
    """`testbed run scenarios/p4sgd/<scenario> --net local --quick` with its figures drawn:
    the session's one run of it (tests/quick_runs.py), which the figure check reads too."""
    return quick_run(f"p4sgd/{scenario}", *sets, net="local", plot=True, timeout=timeout)


def reference_loss(summary: dict, wl: dict) -> float:
    """Training loss of the same algorithm run in-process with exact sums."""
    spec = dict(wl["dataset"])
    if spec["source"] != "builtin":          # labels follow the GLM (P4sgdWorkload.dataset_spec)
        spec.setdefault("model", wl["glm"])
    ds = load_dataset(spec)
    model = get_model(wl["glm"], wl["l2"])
    M = summary["workers"]
    if summary["mode"] == "model_parallel":
        x, _ = simulate_model_parallel(ds, M, model, wl["lr"], summary["batch"], wl["micro_batch"],
                                       wl["epochs"], wl["seed"], balance=wl["balance"], eval_every=0)
    else:
        x, _ = simulate_data_parallel(ds, M, model, wl["lr"], summary["batch"] // M, wl["epochs"],
                                      wl["seed"], eval_every=0)
    return evaluate(ds, x, model)["loss"]


def point_workload(run, summary: dict) -> dict:
    """The point's workload params: the scenario's, with its case's and quick settings."""
    from testbed.scenario import expand_points, load_scenario
    m = run.manifest
    scn = load_scenario(m["cli"]["scenario"], m["cli"]["overrides"])
    point = next(p for p in expand_points(scn, quick=True) if p.index == summary["point"])
    return point.scenario.workload.model_dump()


def check_run(run_dir: Path, figure: str, tol: float) -> list[dict]:
    run = load_run(run_dir)
    assert all(p["status"] == "ok" for p in run.points), [p.get("error") for p in run.points]
    sums = sorted(run.metrics_of("p4sgd_summary"), key=lambda s: s["point"])
    assert len(sums) == len(run.points)
    for s in sums:
        assert s["all_correct"] and s["ok"], s
        curve = [c for c in run.metrics_of("p4sgd_curve") if c["point"] == s["point"]]
        assert len(curve) >= 2 and curve[0]["iter"] == 0 and curve[-1]["iter"] == s["iterations"]
        label = next(p["label"] for p in run.points if p["index"] == s["point"])
        assert (run_dir / "points" / label / "model.npy").exists()
        ref = reference_loss(s, point_workload(run, s))
        assert abs(s["final_loss"] - ref) <= tol, (s["point"], s["final_loss"], ref)
    for ext in ("png", "pdf"):
        assert (run_dir / "figures" / f"{figure}.{ext}").stat().st_size > 1000
    return sums


def test_scaling_quick_ring(quick_run):
    # The shipped width at 1, 2 and 4 workers (the quick set's 8-worker and wide points cost minutes locally).
    sums = check_run(run_cli(quick_run, "scaling.yaml", "workload.collective=ring",
                             "sweep.quick.grid={topology.workers: [1, 2, 4]}", "sweep.quick.cases=[p4sgd, dp]"),
                     "p4sgd_scaling", LOSS_TOL_FLOAT32)
    assert sorted((s["mode"], s["workers"]) for s in sums) == sorted(
        (m, w) for m in ("model_parallel", "data_parallel") for w in (1, 2, 4))
    # Model parallelism is exact whatever the worker count: same model at 1, 2, 4 workers.
    mp = [s["final_loss"] for s in sums if s["mode"] == "model_parallel"]
    assert max(mp) - min(mp) < 1e-6
    for s in sums:  # numbers for the record (pytest -s)
        print(f"{s['mode']:15s} M={s['workers']} thr={s['throughput_sps']:.0f} samples/s "
              f"iter={s['iter_ms_p50']:.2f} ms comm={s['comm_share']:.2f} dilation={s['dilation']:g}")


def test_convergence_quick_ps(quick_run):
    sums = check_run(run_cli(quick_run, "convergence.yaml", "workload.collective=ps", "sweep.repeats=1"),
                     "p4sgd_convergence", LOSS_TOL_FLOAT32)
    p4, dp = (next(s for s in sums if s["mode"] == m) for m in ("model_parallel", "data_parallel"))
    # Real data (digits): P4SGD's small batch reaches the target within the quick run
    # (its loss then bounces with SGD noise, so the final loss is not the test).
    assert p4["time_to_target_s"] is not None and p4["time_to_target_s"] > 0
    assert dp["replicas_identical"] is True


# ----------------------------------------------------------------- in-switch collective
def _free_udp_base(n: int) -> int:
    for _ in range(100):
        base = random.randrange(30000, 50000)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free UDP port range")


def test_switch_collective_over_the_soft_switch_udp_mode(tmp_path):
    """hosts.p4sgd over the real INA transport and switch pipeline (soft switch,
    UDP ports on loopback): pipelined, exact up to fixed point, identical sums."""
    from testbed.scenario import load_scenario_text
    from testbed.workloads.p4sgd import collect_point

    world, base = 2, _free_udp_base(4)
    wport = base + 3                                   # where workers receive results
    sw = loopback_switch_config(world, base, wport, job_id=3, slot_count=16, flood=False)
    wl = {"kind": "p4sgd", "collective": "switch", "mode": "model_parallel", "lr": 16.0, "batch": 32,
          "micro_batch": 8, "epochs": 1, "pipeline_depth": 4, "snapshot_every": 4, "time_scale": 500.0,
          "dataset": {"source": "synthetic", "kind": "dense", "samples": 512, "features": 2048, "seed": 7}}
    scn = load_scenario_text(f"name: t\ntopology: {{workers: {world}}}\nworkload: {json.dumps(wl)}\n", "t")
    w = scn.workload
    peers = [{"name": f"w{r + 1}", "ip": f"127.0.1.{r + 1}"} for r in range(world)]
    procs = []
    switch = SoftSwitchProcess(sw, tmp_path, ready_timeout=20).start()
    try:
        for r in range(world):
            cfg = {"host": f"w{r + 1}", "role": "worker", "rank": r, "world": world, "mode": w.mode,
                   "glm": w.glm, "l2": w.l2, "lr": w.lr, "batch": w.batch, "micro_batch": w.micro_batch,
                   "epochs": w.epochs, "pipeline_depth": w.pipeline_depth, "seed": w.seed,
                   "dataset": w.dataset_spec(), "balance": w.balance, "collective": "switch",
                   "peers": peers, "ps": None, "port": 47400, "fixed_point_exp": w.fixed_point_exp,
                   "device": w.device_spec(), "snapshot_every": w.snapshot_every, "straggler": None,
                   "start_at": None, "connect_timeout_s": 20, "timeout_s": 20,
                   "trace": None, "calibration": None,
                   # A long first timeout: no spurious retransmissions on a loaded 2-core machine.
                   "ina": {"switch_ip": "127.0.0.1", "switch_port": base + r + 1, "worker_port": wport,
                           "job_id": 3, "window": 16, "retx_timeout_s": 1.0},
                   "out": str(tmp_path / f"w{r + 1}.jsonl")}
            (tmp_path / f"w{r + 1}.json").write_text(json.dumps(cfg))
            procs.append(subprocess.Popen([sys.executable, "-m", "hosts.p4sgd", "--config",
                                           str(tmp_path / f"w{r + 1}.json")], cwd=ROOT,
                                          stderr=open(tmp_path / f"w{r + 1}.log", "w")))
        for r, p in enumerate(procs):
            assert p.wait(timeout=60) == 0, (tmp_path / f"w{r + 1}.log").read_text()[-2000:]
    finally:
        for p in procs:           # only what this test started
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
        switch.stop()
    s = collect_point(scn, tmp_path)[-1]
    assert s["all_correct"] and s["ok"]
    assert s["hidden_share"] > 0.0            # asynchronous: some latency overlapped compute
    summary = {"workers": world, "mode": w.mode, "batch": w.batch}
    ref = reference_loss(summary, w.model_dump())
    assert abs(s["final_loss"] - ref) <= LOSS_TOL_FIXED_POINT, (s["final_loss"], ref)
