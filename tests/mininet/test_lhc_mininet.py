"""LHC on Mininet through the soft switch: the support OR round and the sketch
SUM round end to end under 5 % packet loss, bit for bit against a reference
computed here.

One `testbed run scenarios/lhc/loss.yaml --quick` with 3 workers at 0 % and 5 %
loss (each link and direction, applied by the soft switch). The test
regenerates every worker's gradient from the scenario's spec, computes the
union support and the exact fixed-point sum with numpy (no codec code), and
checks every worker's result digest, every iteration, at both loss rates.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from hosts.ina import fixed_point as fp
from hosts.lhc.gradients import make_source

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
LOSS_PCT = 5


def reference(spec: dict, world: int, it: int) -> tuple[int, str]:
    """(|union support|, digest of the exact float32 result) of iteration `it`."""
    src = make_source(spec)
    grads = [src.gradient(r, it) for r in range(world)]
    union = int(np.count_nonzero(np.any(np.stack(grads) != 0, axis=0)))
    k = fp.scale_from_exponent(max(fp.vector_exponent(g) for g in grads), world)
    total = np.zeros(grads[0].size, np.int64)
    for g in grads:                                      # what the switch adds, exactly
        total += np.rint(np.ldexp(g.astype(np.float64), k)).astype(np.int64)
    y = np.ldexp(total.astype(np.float64), -k).astype(np.float32)
    return union, hashlib.blake2b(y.tobytes(), digest_size=8).hexdigest()


def test_lhc_or_and_sum_rounds_exact_under_loss(quick_run):
    # The session's one run of it (tests/quick_runs.py): the figure check reads it too.
    run_dir = quick_run("lhc/loss.yaml", f"topology.workers={WORKERS}",
                        f"sweep.quick.grid.links.loss_pct=[0, {LOSS_PCT}]", timeout=115)
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert [pt["status"] for pt in points] == ["ok", "ok"], [pt.get("error") for pt in points]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    from testbed.scenario import expand_points, load_scenario
    scn = load_scenario(ROOT / "scenarios" / "lhc" / "loss.yaml", [f"topology.workers={WORKERS}"])
    wl = expand_points(scn, quick=True)[0].scenario.workload
    assert wl.algorithm == "lhc_switch"
    iters = wl.warmup + wl.iterations
    refs = [reference(dict(wl.gradient), WORKERS, it) for it in range(iters)]

    for pt in points:
        recs = [m for m in metrics if m.get("point") == pt["index"] and m["type"] == "lhc_iter"]
        assert len(recs) == WORKERS * iters, len(recs)
        for r in recs:
            union, digest = refs[r["iter"]]
            assert r["union"] == union, (pt["label"], r["host"], r["iter"])     # the OR round
            assert r["digest"] == digest, (pt["label"], r["host"], r["iter"])   # the SUM round + decode
        summary = next(m for m in metrics if m.get("point") == pt["index"] and m["type"] == "lhc_summary")
        assert summary["decode_errors"] == 0 and summary["exact"], summary

    lossy = next(pt for pt in points if pt["params"].get("links.loss_pct") == LOSS_PCT)
    imp = [i for i in lossy["impairments"] if i["parameter"] == "loss_pct"]
    assert imp and all(i["applied"] for i in imp), imp
    dropped = sum(i["observed"]["dropped"] for i in imp)
    assert dropped > 0, imp
    lossy_sum = next(m for m in metrics if m.get("point") == lossy["index"] and m["type"] == "lhc_summary")
    assert lossy_sum["retransmissions"] > 0, lossy_sum
