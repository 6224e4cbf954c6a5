"""LHC workload: params validation (clear errors), the point summary's exactness
and throughput arithmetic, gradient sources and profiles, the device model."""
from __future__ import annotations

import numpy as np
import pytest

from hosts.lhc import profiles
from hosts.lhc.gradients import make_source
from hosts.lhc.timing import LhcDevice
from hosts.lhc.worker import sum_topk, topk_block_values, topk_contribution, topk_kept

pytestmark = pytest.mark.unit


def _scenario(text: str):
    from testbed.scenario import load_scenario_text
    return load_scenario_text(text, "t.yaml")


def test_bad_workload_fields_are_named():
    from testbed.scenario import ScenarioError
    base = "name: x\ntopology: {kind: star, workers: 2}\nworkload: {kind: lhc, %s}\n"
    with pytest.raises(ScenarioError, match="rows must be a multiple of 3"):
        _scenario(base % "sketch: {rows: 10}")
    with pytest.raises(ScenarioError, match="unknown gradient keys"):
        _scenario(base % "gradient: {kind: synthetic, size: 10, densty: 0.1}")
    with pytest.raises(ScenarioError, match="unknown model profile"):
        _scenario(base % "gradient: {kind: profile, model: resnet}")
    with pytest.raises(ScenarioError, match="algorithm"):
        _scenario(base % "algorithm: lhc_tree")
    scn = _scenario(base % "algorithm: dense_ps, gradient: {kind: profile, model: bert}")
    assert scn.workload.extra_hosts() == ["ps"]
    bert = profiles.PROFILES["bert"]
    # a shrunk model computes proportionally less (its default size_scale, or the one given)
    assert scn.workload.modeled_compute_ms() == pytest.approx(bert.compute_ms * bert.size_scale)
    scn = _scenario(base % "gradient: {kind: profile, model: bert, size_scale: 0.01}")
    assert scn.workload.modeled_compute_ms() == pytest.approx(bert.compute_ms * 0.01)


def _iter(rank, it, *, ok=True, digest="a", agg=0.01, comm=0.005, warm=False):
    return {"type": "lhc_iter", "rank": rank, "iter": it, "warmup": warm, "checked": rank == 0, "ok": ok,
            "digest": digest, "n": 1000, "agg_s": agg, "comm_s": comm, "iter_s": agg, "encode_s": 0.001,
            "decode_s": 0.001, "values_sent": 100, "union": 50, "rows": 3, "core_values": 2,
            "sketch_values": 60, "support_values": 38, "peeled": False, "rel_err": 0.0}


def test_summary_counts_wrong_sums_and_digest_mismatches():
    from testbed.workloads.lhc import LhcWorkload, point_summary
    wl = LhcWorkload()
    sums = {"w1": {"ok": True, "tdf": 250.0}, "w2": {"ok": True, "tdf": 250.0}}
    good = [_iter(r, i) for r in (0, 1) for i in range(3)]
    s = point_summary(wl, ["w1", "w2"], good, sums)
    assert s["decode_errors"] == 0 and s["exact"] and s["checked_iterations"] == 3
    assert s["dense_over_sent"] == pytest.approx(4000 / 400)
    # Throughput on hardware-equivalent time: the workers' (calibrated) TDF divides it out.
    assert s["tdf"] == 250.0 and s["hw_net_us"] == pytest.approx(5000 / 250)
    assert s["agg_network_gbps"] == pytest.approx(4000 * 8 / (0.005 / 250) / 1e9)
    with pytest.raises(ValueError, match="different TDFs"):
        point_summary(wl, ["w1", "w2"], good, {"w1": {"ok": True, "tdf": 250.0}, "w2": {"ok": True, "tdf": 260.0}})
    skew = [dict(_iter(r, 0), comm_s=0.005 + 0.01 * r) for r in (0, 1)]   # w2 waited for w1
    assert point_summary(wl, ["w1", "w2"], skew, sums)["net_ms"] == pytest.approx(5.0)
    bad = good[:-1] + [_iter(1, 2, digest="b")] + [dict(good[0], iter=3, ok=False)]
    s = point_summary(wl, ["w1", "w2"], bad, sums)
    assert s["decode_errors"] == 2 and not s["exact"] and s["digest_mismatches"] == 1


def test_sources_are_deterministic_and_hit_their_density():
    src = make_source({"kind": "synthetic", "size": 100_000, "density": 0.02, "cluster": 8, "overlap": 0.5})
    g = src.gradient(1, 3)
    assert np.array_equal(g, src.gradient(1, 3)) and not np.array_equal(g, src.gradient(2, 3))
    assert 0.015 < np.count_nonzero(g) / g.size <= 0.02
    shared = (src.gradient(0, 3) != 0) & (g != 0)
    assert shared.sum() > 0.2 * np.count_nonzero(g)        # overlap: common runs
    for name, prof in profiles.PROFILES.items():
        s = make_source({"kind": "profile", "model": name, "size_scale": 1e-3})
        d = np.count_nonzero(s.gradient(0, 0)) / s.size
        assert abs(d - prof.density) < 0.05, (name, d, prof.density)


def test_topk_with_error_feedback_sums_alike_on_every_rank():
    rng = np.random.default_rng(0)
    acc = rng.standard_normal(50).astype(np.float32)
    idx, vals = topk_contribution(acc, 5)
    assert set(idx) == set(np.argsort(-np.abs(acc))[:5])
    blocks = np.stack([np.concatenate([idx, vals.view(np.int32)])] * 2)
    assert blocks.shape[1] == topk_block_values(5)          # what the projection allgathers (papers/lhc.py)
    assert topk_kept(0.1, 50) == 5 and topk_kept(1e-6, 50) == 1 and topk_kept(1.0, 50) == 50
    y = sum_topk(blocks, 5, 50)
    assert np.array_equal(y[idx], 2 * vals) and np.count_nonzero(y) == 5


def test_device_model_time_grows_with_work_and_dilation():
    d = LhcDevice("gpu", time_scale=10, sleep=False)
    small = d.hw_time("encode", {"n": 1000, "union": 10, "rounds": 3})
    big = d.hw_time("encode", {"n": 10**6, "union": 10**4, "rounds": 3})
    assert 0 < small < big
    with pytest.raises(ValueError, match="unknown LHC device step"):
        d.hw_time("compress", {})


def test_compact_is_a_system_of_its_own_run_as_lhc_switch_with_compact():
    """lhc_switch_compact: the hosts run lhc_switch with sketch.compact set (through the
    switch, the same network model), its rows keep their own name and colour."""
    from hosts.lhc import worker
    from testbed.plots import lhc as lhc_plots
    from testbed.workloads.lhc import (COMPACT_ALGOS, SWITCH_ALGOS, LhcWorkload, op_algo, op_kind,
                                       sketch_spec)
    wl = LhcWorkload(algorithm="lhc_switch_compact")
    assert sketch_spec(wl)["compact"] is True and wl.sketch.compact is False
    assert sketch_spec(LhcWorkload(algorithm="lhc_switch"))["compact"] is False
    assert COMPACT_ALGOS[wl.algorithm] in worker.ALGORITHMS and wl.algorithm in SWITCH_ALGOS
    assert (op_algo(wl), op_kind(wl)) == ("switch", "allreduce")
    assert lhc_plots.colour("lhc_switch_compact") not in {lhc_plots.colour(a) for a in
                                                          ("lhc_switch", "dense_switch", "lhc_ring", "dense_ring",
                                                           "dense_ps", "topk_ring")}
