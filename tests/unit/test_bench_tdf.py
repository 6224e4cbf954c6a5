"""bench/tdf.py: its points are real scenario points (each a one-point sweep) and its
verdict reads issue 34's targets off the rows."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import tdf

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(tdf.POINTS))
def test_each_point_is_one_point_of_a_shipped_scenario_and_takes_every_rule(name):
    scenario, sets = tdf.POINTS[name]
    for rule in tdf.RULES:
        head = rule if rule == "auto" else float(rule)
        argv = [sys.executable, "-m", "testbed.cli", "run", scenario, "--dry-run", "--summary"]
        for s in (*sets, f"workload.network_headroom={head}"):
            argv += ["--set", s]
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert ": 1 point(s)," in r.stdout, r.stdout


def _row(point, rule, factor, valid, wall):
    return {"point": point, "rule": rule, "tdf_over_slowdown": factor, "valid": valid, "point_wall_s": wall}


def test_the_verdict_names_points_a_rule_made_invalid_and_its_speedup():
    rows = [_row("a", "16", 16.0, True, 20.0), _row("a", "auto", 6.7, True, 8.0),
            _row("b", "16", 16.0, True, 30.0), _row("b", "auto", 6.6, False, 10.0),
            _row("c", "16", 16.0, False, 9.0), _row("c", "auto", 6.8, False, 3.0)]
    v = tdf.verdict(rows)["auto"]
    assert v["median_tdf_over_slowdown"] == pytest.approx(6.7)
    assert v["valid_under_16_invalid_here"] == ["b"]          # c was invalid already
    assert v["point_wall_speedup_over_16"] == {"a": 2.5, "b": 3.0, "c": 3.0}
    assert "| b | auto |" in tdf.table(rows)


def test_bad_rules_are_refused_before_anything_runs():
    with pytest.raises(SystemExit):
        tdf.main(["--rules", "fast"])
    with pytest.raises(SystemExit):
        tdf.main(["--rules", "0.5"])
