"""Issue 9 part 3 on loopback: PyTorch NCF trained data-parallel with its gradients
aggregated by LHC (lhc_ring), by dense fixed-point sums (dense_fixed_ring) and by
top-k. LHC is lossless: same weights and accuracy curve as dense, bit for bit;
top-k's differ."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.local, pytest.mark.timeout(240)]


def test_ncf_curves_identical_with_lhc_and_dense_different_with_topk(quick_run):
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    run_dir = quick_run("lhc/train.yaml", net="local", timeout=230)
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok"] * 3, [pt.get("error") for pt in points]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = {m["algorithm"]: m for m in metrics if m["type"] == "lhc_summary"}
    assert sorted(sums) == ["dense_fixed_ring", "lhc_ring", "topk_ring"]
    for algo, s in sums.items():     # every step's sum checked against rank 0's recomputation
        assert s["decode_errors"] == 0 and s["exact"] and s["checked_iterations"] == 20, (algo, s)
        assert len(s["test_acc_curve"]) == 20
        # Every rank holds the same weights after every step.
        per_rank = {}
        for m in metrics:
            if m["type"] == "lhc_iter" and m["algorithm"] == algo:
                per_rank.setdefault(m["iter"], set()).add(m["weights_digest"])
        assert all(len(d) == 1 for d in per_rank.values()), algo
    lhc, dense, topk = sums["lhc_ring"], sums["dense_fixed_ring"], sums["topk_ring"]
    assert lhc["union"] and lhc["sketch_values"]                    # it really went through the sketch
    assert lhc["test_acc_curve"] == dense["test_acc_curve"]
    assert lhc["train_loss_curve"] == dense["train_loss_curve"]
    assert lhc["weights_digests"] == dense["weights_digests"]       # bit for bit, every step
    assert topk["weights_digests"][0] != dense["weights_digests"][0]
    assert topk["test_acc_curve"] != dense["test_acc_curve"]
    assert dense["final_test_acc"] > dense["test_acc_curve"][0]     # it trains
