"""`testbed show` on a run folder: impairments with their direction, no 'nan'
for a point with no network operation to time (one worker)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from testbed.cli import main

pytestmark = pytest.mark.unit


def test_show_names_directions_and_says_when_no_network_op_was_timed(tmp_path):
    run = tmp_path / "scn" / "20260101-000000"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "status": "ok", "net": "mininet", "switch_backend": "soft", "scenario": {"name": "scn"},
        "points": [{}, {}], "git": {"commit": "abc"}, "warnings": []}))
    imp = [{"link": "w1-s1", "direction": "w1->s1", "parameter": "loss_pct", "value": 1.0,
            "mechanism": "switch", "applied": True},
           {"link": "w1-s1", "direction": "s1->w1", "parameter": "loss_pct", "value": 1.0,
            "mechanism": "switch", "applied": True}]
    points = [{"index": 0, "label": "000-one-worker", "status": "ok", "wall_s": 1.0, "impairments": imp,
               "fidelity": {"valid": True, "tdf": 100.0, "ratio_p50": None}},
              {"index": 1, "label": "001-two-workers", "status": "ok", "wall_s": 1.0, "impairments": [],
               "fidelity": {"valid": True, "tdf": 100.0, "ratio_p50": 1.02}}]
    (run / "points.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    (run / "metrics.jsonl").write_text("")
    out = CliRunner().invoke(main, ["show", str(run)])
    assert out.exit_code == 0, out.output
    assert "nan" not in out.output
    assert "w1->s1 loss_pct=1.0 via switch" in out.output and "s1->w1 loss_pct=1.0 via switch" in out.output
    assert "no network op timed" in out.output and "net/tdf p50 1.02" in out.output


def test_show_prints_where_a_points_wall_time_went(tmp_path):
    run = tmp_path / "scn" / "20260101-000000"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "status": "ok", "net": "mininet", "switch_backend": "soft", "scenario": {"name": "scn"},
        "points": [{}], "git": {"commit": "abc"}, "warnings": []}))
    point = {"index": 0, "label": "000-a", "status": "ok", "wall_s": 9.0, "impairments": [],
             "phases_s": {"network_start": 1.2, "programs_start": 0.1, "programs_run": 4.0,
                          "teardown": 0.5, "collect": 3.2}}
    (run / "points.jsonl").write_text(json.dumps(point) + "\n")
    (run / "metrics.jsonl").write_text("")
    out = CliRunner().invoke(main, ["show", str(run)])
    assert out.exit_code == 0, out.output
    assert "wall time: network start 1.2s, programs start 0.1s, programs run 4.0s, teardown 0.5s, collect 3.2s" \
        in out.output


def test_phase_clock_adds_up_laps_in_order():
    from testbed.runner import PhaseClock
    clock = PhaseClock()
    clock.lap("a")
    clock.lap("b")
    clock.lap("b", only_if_new=True)        # the finally after a completed phase adds nothing
    assert list(clock.laps) == ["a", "b"] and all(v >= 0 for v in clock.laps.values())
