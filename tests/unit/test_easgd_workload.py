"""The easgd workload's schema, host configs and pure collect helpers."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hosts.easgd.config import ConfigError, EasgdSettings, VARIANTS, parse_worker, parse_worker_timing
from testbed.scenario import ScenarioError, expand_points, load_scenario_text
from testbed.workloads.base import PointContext
from testbed.workloads.calibrated import ITERATION_WALL_S
from testbed.workloads.easgd import (EasgdRuntime, EasgdWorkload, comm_share, hogwild_overlap,
                                     projected_comm_share, time_to_target)

pytestmark = pytest.mark.unit

BASE = """
name: t
topology: {kind: star, workers: 4}
workload: {kind: easgd, variant: %s}
"""


def test_every_variant_loads_and_names_its_hosts():
    for v in VARIANTS:
        scn = load_scenario_text(BASE % v, "t.yaml")
        extra = scn.workload.extra_hosts()
        assert extra == ([] if v.startswith("sync") else ["master"])
        assert scn.hosts()[:4] == ["w1", "w2", "w3", "w4"]


def test_bad_variant_is_a_one_line_error_naming_the_field():
    with pytest.raises(ScenarioError) as e:
        load_scenario_text(BASE % "async_easdg", "t.yaml")
    msg = str(e.value)
    assert "t.yaml" in msg and "variant" in msg and "async_easdg" in msg, msg


def test_bad_device_and_profile_fail_before_anything_starts():
    with pytest.raises(ScenarioError, match="device"):
        load_scenario_text("name: t\nworkload: {kind: easgd, device: {type: tpu}}\n", "t.yaml")
    with pytest.raises(ScenarioError, match="hardware"):
        load_scenario_text("name: t\nworkload: {kind: easgd, hardware: no-such-profile}\n", "t.yaml")


def test_defaults_alpha_from_beta_and_momentum_lr():
    wl = EasgdWorkload(variant="async_measgd", lr=0.2, momentum=0.75)
    assert wl.alpha_for(4) == pytest.approx(0.225)          # beta = P alpha = 0.9
    assert wl.lr_for() == pytest.approx(0.05)               # lr (1 - momentum)
    assert EasgdWorkload(variant="async_easgd", lr=0.2).lr_for() == 0.2
    assert EasgdWorkload(variant="sync_sgd", collective="ps").extra_hosts() == ["ps"]


def test_host_settings_reject_bad_and_unknown_keys():
    good = {"variant": "easgd", "steps": 1, "tau": 1, "lr": 0.1, "alpha": 0.2, "momentum": 0.0,
            "batch_size": 4, "seed": 0, "model": {"c1": 1, "c2": 1, "hidden": 1}, "snapshot_every_s": 1.0,
            "dataset": {"source": "digits"}, "exchange_order": "step_then_exchange", "pack": True}
    assert EasgdSettings.parse(good, "x").variant == "easgd"
    with pytest.raises(ConfigError) as e:
        EasgdSettings.parse(dict(good, alpha=1.5, extra=1), "cfg.json")
    assert "alpha" in str(e.value) and "extra: unknown key" in str(e.value)
    with pytest.raises(ConfigError, match="master"):
        parse_worker({"torch": {}, "master": {"name": "m"}, "servers": 1, "snapshots": None}, "w.json")


def test_hogwild_overlap_counts_only_pairs_from_different_servers():
    ex = [{"rank": 0, "seq": 0, "server": 0, "t_read": 0.0, "t_write": 1.0},
          {"rank": 1, "seq": 0, "server": 1, "t_read": 0.5, "t_write": 1.5},   # overlaps the first
          {"rank": 0, "seq": 1, "server": 0, "t_read": 1.2, "t_write": 1.3},   # overlaps the second
          {"rank": 1, "seq": 1, "server": 1, "t_read": 2.0, "t_write": 2.1}]   # alone
    ov = hogwild_overlap(ex)
    assert ov == {"servers": 2, "exchanges": 4, "overlapping_pairs": 2, "exchanges_overlapped": 3}
    assert hogwild_overlap([dict(r, server=0) for r in ex]) is None


def test_time_to_target_is_where_the_smoothed_curve_crosses():
    # One lucky point at t=1 does not count; the smoothed curve crosses 0.85 once it stays there.
    acc = [0.1, 0.9, 0.5, 0.86, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    curve = [{"t_s": float(t), "acc": a} for t, a in enumerate(acc)]
    t = time_to_target(curve, 0.85)
    assert t is not None and 6.0 < t <= 8.0
    assert time_to_target(curve, 0.95) is None


def test_comm_share_ends_each_worker_at_its_own_last_step():
    # A fast worker (1 s in exchanges, done at 10 s) beside a straggler (1 s, done at
    # 40 s): 2 / 50. Counting the fast worker's idle 30 s to the makespan as
    # communication would give 1 - (9 + 39) / 2 / 40 = 0.4.
    assert comm_share({"w1": 1.0, "w2": 1.0}, {"w1": 10.0, "w2": 40.0}) == pytest.approx(2 / 50)
    assert comm_share({"w1": 1.0}, {"w1": 0.0}) is None          # no span: no share
    assert comm_share({}, {"w1": 5.0}) is None                   # no exchanges recorded: no share


def test_projected_comm_share_uses_worker_finish_and_skips_the_master():
    from testbed.fidelity.projector import Projection
    # ranks 0, 1 workers (0 finishes early, 1 is a straggler), rank 2 the master
    proj = Projection(profile="p", world=2, makespan_s=40.0, finish_s={0: 10.0, 1: 40.0, 2: 40.0},
                      compute_s={0: 9.0, 1: 39.0, 2: 5.0}, comm_exposed_s={}, collectives=0,
                      nodes=0, nodes_total=0, events=0)
    assert projected_comm_share(proj, 2) == pytest.approx((1.0 + 1.0) / (10.0 + 40.0))


def test_device_overruns_name_the_host_and_the_worst_ratio():
    from testbed.workloads.easgd import device_overruns
    hosts = {"w1": {"validity": {"violations": 0, "steps": 200, "worst_ratio": 0.4}},
             "w2": {"validity": {"violations": 2, "steps": 200, "worst_ratio": 1.05}}}
    master = {"validity": {"0": {"violations": 1, "steps": 800, "worst_ratio": 1.1719}, "1": None}}
    assert device_overruns(["w1", "w2"], hosts, master) == [
        "w2: 2 of 200 steps (worst 1.05x)", "master server 0: 1 of 800 updates (worst 1.17x)"]
    assert device_overruns(["w1"], hosts, None) == []


def test_worker_calibration_needs_the_iteration_deadline():
    cal = {"rounds": 2, "iterations": 1, "hw_op_s": 1e-5, "iteration_wall_s": 30.0}
    assert parse_worker_timing({"timing": {"calibration": cal}}, "w.json") == (cal, None)
    for bad in ({k: v for k, v in cal.items() if k != "iteration_wall_s"}, dict(cal, iteration_wall_s=0)):
        with pytest.raises(ConfigError, match=r"calibration: must be null or .*iteration_wall_s > 0"):
            parse_worker_timing({"timing": {"calibration": bad}}, "w.json")


def test_workers_get_the_iteration_deadline_that_the_point_deadline_allows(tmp_path):
    """Calibrated workers refuse a TDF at which an iteration would outrun ITERATION_WALL_S;
    the point's deadline allows that to every step and calibration iteration."""
    scn = load_scenario_text("name: t\ntopology: {kind: star, workers: 2}\nworkload: {kind: easgd, steps: 10, "
                             "calibration_rounds: 2, calibration_iterations: 3, timeout_s: 100}\n", "t.yaml")
    point = expand_points(scn)[0]
    hosts = {h: SimpleNamespace(name=h, ip=f"127.0.1.{i}", mac=None) for i, h in enumerate(scn.hosts(), 1)}
    ctx = PointContext(point=point, hosts=hosts, work_dir=tmp_path, net_mode="local", start_at=1000.0)
    progs = {p.host: json.loads(Path(p.argv[-1]).read_text()) for p in EasgdRuntime().programs(ctx)}
    cc, _ = parse_worker_timing(progs["w1"]["worker"], "w1.json")
    assert cc["iteration_wall_s"] == ITERATION_WALL_S
    assert EasgdRuntime().timeout_s(ctx) == 100 + ITERATION_WALL_S * (10 + 2 * 3) + 60
