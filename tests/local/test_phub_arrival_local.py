"""`testbed run scenarios/phub/arrival.yaml --quick --net local` (4 workers): PHub's
server and the MXNet-kvstore-like sharded PS (4 colocated servers), each summing in
rank order and in arrival order, end to end. Rank order ends at the plain PS's
weights bit for bit; arrival order within float rounding, and it really moved some
weights (the share of values that differ and the largest float32 step distance are
reported per point)."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.local, pytest.mark.timeout(600)]


def test_rank_order_is_exact_and_arrival_order_rounds(quick_run):
    # The session's one run of it (tests/shipped_figure_runs.py: the figure check reads it too).
    run_dir = quick_run("phub/arrival.yaml", "workload.model.size_scale=0.002", net="local", timeout=590)
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok"] * 4, [pt.get("error") for pt in points]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = {(s["algorithm"], s["aggregation_order"]): s for s in metrics if s["type"] == "phub_summary"}
    assert sorted(sums) == [("phub", "arrival"), ("phub", "rank"), ("sharded_ps", "arrival"), ("sharded_ps", "rank")]
    for alg in ("phub", "sharded_ps"):
        rank, arrival = sums[(alg, "rank")], sums[(alg, "arrival")]
        assert rank["weights_check"] == "bit_exact" and rank["weights_match_plain_ps"] is True, (alg, rank)
        assert rank["weights_max_ulp_diff"] == 0 and rank["weights_differing_share"] == 0.0
        assert arrival["weights_check"] == "within_rounding" and arrival["weights_check_ok"] is True, (alg, arrival)
        # 4 copies summed in whatever order they came: some sums round differently
        assert arrival["weights_match_plain_ps"] is False and 0 < arrival["weights_differing_share"] < 1, arrival
        assert arrival["weights_max_ulp_diff"] > 0
        assert all(s["weights_agree"] for s in (rank, arrival))     # one server sum per value: one weight set
    assert sums[("sharded_ps", "rank")]["kv_servers"] == 4 and sums[("phub", "rank")]["kv_servers"] is None
    # each kvstore server ran beside its worker and served its shard
    label = next(pt["label"] for pt in points if pt["case"] == "sharded-rank")
    for h in ("w1", "w2", "w3", "w4"):
        recs = [json.loads(x) for x in (run_dir / "points" / label / f"{h}.kv.jsonl").read_text().splitlines()]
        (summary,) = [r for r in recs if r["type"] == "summary"]
        assert summary["ok"] and summary["shards"] == 4, summary
        (core,) = [r for r in recs if r["type"] == "core"]
        assert core["chunks_done"] > 0 and core["bytes_in"] > 0, core
