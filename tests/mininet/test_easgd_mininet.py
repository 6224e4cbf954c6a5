"""The EASGD family on Mininet with 5 % loss on every link (applied by the soft
switch): `testbed run scenarios/easgd/loss.yaml --quick`, 2 workers. Every
exchange is TCP, so loss changes no result: the master counts exactly the
exchanges its workers made (nothing lost, nothing doubled), and Sync EASGD's
weights are the same bits at 5 % loss as at 0 %."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(400)]


def test_easgd_exchanges_survive_five_percent_loss(quick_run):
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    run_dir = quick_run("easgd/loss.yaml", "workload.steps=32", timeout=380)
    points = [json.loads(x) for x in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok"] * 4, [pt.get("error") for pt in points]
    lossy = [pt for pt in points if pt["params"]["links.loss_pct"] == 5]
    assert lossy and all(any(i.get("applied") for i in pt["impairments"]) for pt in lossy)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sums = {(m["workload.variant"], m["links.loss_pct"]): m for m in metrics if m["type"] == "easgd_summary"}
    for loss in (0, 5):
        a = sums[("async_easgd", loss)]
        assert a["exchanges_worker"] == {"0": 8, "1": 8}                 # 32 steps / tau 4
        assert a["exchanges_master"] == a["exchanges_worker"], a
    s0, s5 = sums[("sync_easgd", 0)], sums[("sync_easgd", 5)]
    assert s0["ok"] and s5["ok"]
    assert s0["c_sha256"] == s5["c_sha256"] and s0["w_sha256"] == s5["w_sha256"]
