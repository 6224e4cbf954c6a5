"""P4SGD on Mininet over the soft switch's in-network SUM: exact under packet loss.

One `testbed run scenarios/p4sgd/loss.yaml --quick` with 3 workers and its
quick grid pinned to 0 % and 5 % loss (per link and direction, applied by the
soft switch on its ports): model-parallel P4SGD, per-micro-batch allreduce of
the partial dot products through the switch, pipeline depth 4, fixed-point
scale 2^16.

Checked:
  * both points ok, every worker got identical sums (all_correct);
  * 5 % loss was applied (drops counted on the switch ports) and recovered by
    retransmissions;
  * the final model at 5 % loss equals the one at 0 %, bit for bit: the switch
    adds integers, so the sums are exact whatever was lost and resent;
  * the assembled model matches an in-process run of the same algorithm with
    the same quantizer (hosts.glm.training.simulate_model_parallel with
    fixed scale 2^16 for 3 workers): training loss within LOSS_TOL, model
    within MODEL_TOL (see below; in practice they are bit-identical).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hosts.glm.datasets import load_dataset
from hosts.glm.models import get_model
from hosts.glm.training import evaluate, simulate_model_parallel
from hosts.ina import fixed_point as fp

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
LOSS_PCT = 5
# Tolerances against the in-process reference. Both sides sum the same integers
# round(q * 2^16) (exact), so they can only differ where the float64 forward/
# backward products are rounded differently (BLAS kernels / summation order,
# ~1e-16 relative) AND that flips the rounding of one q * 2^16 (an error of
# 2^-16 ~ 1.5e-5 in one sample's dot product). Over the 8 updates of this run
# that moves the model by < lr * 1.5e-5 * max|a| / batch ~ 1e-5 per weight and
# the loss by far less; the bounds below leave room for that and nothing more.
MODEL_TOL = 1e-4
LOSS_TOL = 1e-6


def fixed_scale_sum(scale_exp: int, n_workers: int):
    """The switch's arithmetic for P4SGD partial sums: each worker sends
    round(q * 2^k) (fixed k, no scale round), the switch adds int32s, workers
    read sum * 2^-k as float32 (hosts/ina/transport.py)."""
    def reduce(vectors):
        total = np.zeros(np.shape(vectors[0]), dtype=np.int64)
        for v in vectors:
            ints, n_sat = fp.quantize(v, scale_exp, n_workers, "raise")
            total += ints
        assert np.max(np.abs(total)) <= fp.INT32_MAX
        return fp.from_fixed(total, scale_exp, np.float32)
    return reduce


def test_p4sgd_exact_under_loss_and_matches_reference(quick_run):
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    run_dir = quick_run("p4sgd/loss.yaml", f"topology.workers={WORKERS}",
                        f"sweep.quick.grid.links.loss_pct=[0, {LOSS_PCT}]", timeout=85)
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok", "ok"], [pt.get("error") for pt in points]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = {s["links.loss_pct"]: s for s in metrics if s["type"] == "p4sgd_summary"}
    assert sorted(sums) == [0, LOSS_PCT]
    clean, lossy = sums[0], sums[LOSS_PCT]
    for s in (clean, lossy):
        assert s["ok"] and s["all_correct"], s
        assert s["mode"] == "model_parallel" and s["collective"] == "switch" and s["workers"] == WORKERS

    # The loss really happened (counted by the switch) and was recovered by resends.
    lossy_pt = next(pt for pt in points if pt["params"].get("links.loss_pct") == LOSS_PCT)
    imp = [i for i in lossy_pt["impairments"] if i["parameter"] == "loss_pct"]
    assert imp and all(i["applied"] for i in imp), imp
    dropped = sum(i["observed"]["dropped"] for i in imp)
    assert dropped > 0, imp
    assert lossy["retransmissions"] >= dropped // 2, (lossy["retransmissions"], dropped)
    assert clean["retransmissions"] <= lossy["retransmissions"]

    # Exact under loss: the same final model, bit for bit.
    labels = {pt["params"]["links.loss_pct"]: pt["label"] for pt in points}
    x0 = np.load(run_dir / "points" / labels[0] / "model.npy")
    x5 = np.load(run_dir / "points" / labels[LOSS_PCT] / "model.npy")
    assert x0.dtype == x5.dtype and x0.shape == x5.shape
    assert x0.tobytes() == x5.tobytes(), f"models differ: max |diff| {np.max(np.abs(x0 - x5))}"
    assert clean["model_digest"] == lossy["model_digest"]
    assert clean["final_loss"] == lossy["final_loss"]

    # The same algorithm in-process, with the switch's fixed-point arithmetic.
    from testbed.scenario import expand_points, load_scenario
    scn = load_scenario(ROOT / "scenarios" / "p4sgd" / "loss.yaml",
                        [f"topology.workers={WORKERS}", f"sweep.quick.grid.links.loss_pct=[0, {LOSS_PCT}]"])
    wl = expand_points(scn, quick=True)[0].scenario.workload
    assert wl.fixed_point_exp is not None
    ds = load_dataset(wl.dataset_spec())
    model = get_model(wl.glm, wl.l2)
    x_ref, _ = simulate_model_parallel(ds, WORKERS, model, wl.lr, wl.batch, wl.micro_batch, wl.epochs,
                                       wl.seed, quantize=fixed_scale_sum(wl.fixed_point_exp, WORKERS),
                                       pipeline_depth=wl.pipeline_depth, balance=wl.balance,
                                       eval_every=0)
    assert x_ref.shape == x0.shape
    ref_loss = evaluate(ds, x_ref, model)["loss"]
    diff = float(np.max(np.abs(x0 - x_ref)))
    print(f"\nP4SGD {WORKERS} workers: final loss {clean['final_loss']:.9f} (0 % and {LOSS_PCT} % loss, "
          f"{lossy['retransmissions']} retransmissions for {dropped} drops), reference {ref_loss:.9f}, "
          f"max |x - x_ref| = {diff:.3g}, bit-identical to reference: {x0.tobytes() == x_ref.tobytes()}")
    assert diff <= MODEL_TOL, diff
    assert abs(clean["final_loss"] - ref_loss) <= LOSS_TOL, (clean["final_loss"], ref_loss)
    # Training did something: the loss fell from log 2 (the zero model).
    assert clean["final_loss"] < 0.69
