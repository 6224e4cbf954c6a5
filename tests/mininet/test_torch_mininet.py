"""`kind: torch` on Mininet: the LeNet example with DDP, its gradient buckets
through the soft switch's in-network SUM, at 0 % and 5 % loss per link.

One `testbed run scenarios/torch/lenet.yaml --quick` pinned to collective
switch, 2 workers, 12 steps, with the quick grid over loss 0 and 5 %, at a fixed
TDF of 12000 (network dilated to it by the soft switch). Checked:
both points ok on every host; 5 % loss was applied and recovered by
retransmissions; the training loss of every step and the final accuracy are
the same at 5 % as at 0 % (the switch adds integers with an agreed scale, so
what was lost and resent cannot change a bit); every worker left a trace."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(240)]


def test_torch_lenet_over_the_switch_is_exact_under_loss(quick_run):
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    run_dir = quick_run("torch/lenet.yaml", "workload.collective=switch",
                        # a fixed TDF: calibration on a lossy network would measure loss recovery (refused)
                        "workload.device={type: v100, time_scale: 12000}",
                        "workload.args=[--model, lenet, --epochs, '1', --max-steps, '12']",
                        "sweep.quick.grid.links.loss_pct=[0, 5]", timeout=230)
    points = [json.loads(x) for x in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok", "ok"], [pt.get("error") for pt in points]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = {m["links.loss_pct"]: m for m in metrics if m["type"] == "torch_summary"}
    assert sorted(sums) == [0, 5]
    for s in sums.values():
        assert s["ok"] and s["iterations"] == 12 and s["collective"] == "switch", s
        assert s["network_dilated"] and s["tdf"] == 12000 and s["calibration_iterations"] == 0
    assert sums[5]["retransmissions"] > 0
    losses = {pct: [m["loss"] for m in sorted((m for m in metrics if m["type"] == "torch_iter"
                                               and m["links.loss_pct"] == pct and m["rank"] == 0),
                                              key=lambda m: m["iter"])] for pct in (0, 5)}
    assert len(losses[0]) == 12 and losses[0] == losses[5]
    assert sums[0]["final_acc_per_rank"] == sums[5]["final_acc_per_rank"]
    for pt in points:
        work = run_dir / "points" / pt["label"]
        assert {f.name for f in work.glob("*.trace.jsonl")} == {"w1.trace.jsonl", "w2.trace.jsonl"}
