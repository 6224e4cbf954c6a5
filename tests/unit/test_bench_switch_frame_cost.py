"""bench/switch_frame_cost.py: its Mininet scenario is a valid two-point sweep (the
in-switch and the ring allreduce of the same tensor) and its table reads the
ratios and per-frame costs off a result."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import switch_frame_cost as sfc

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_the_mininet_scenario_is_the_two_algorithms_of_one_point(tmp_path):
    scen = tmp_path / "frame_cost.yaml"
    scen.write_text(sfc.mininet_yaml(16384, 10))
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scen), "--dry-run", "--summary"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert ": 2 point(s)," in r.stdout, r.stdout
    assert "algorithm=switch" in r.stdout and "algorithm=ring" in r.stdout


def test_the_table_shows_each_path_its_ratio_and_the_mininet_rows():
    res = {"values": 16384, "iters": 30, "rounds": 2,
           "summary": {"ring": {"allreduce_ms": 1.0},
                       "switch:mmsg": {"allreduce_ms": 12.0, "ratio_to_ring": 12.0, "switch_us_per_frame": 7.5,
                                       "host_us_per_frame": 8.8, "switch_frames_in_per_s": 43700.0,
                                       "frames_per_rx_batch": 30.0}},
           "mininet": {"ratio_switch_to_ring": 1.82,
                       "points": {"switch": {"iteration_ms": 9.88, "switch_us_per_frame": 3.79,
                                             "hosts_us_per_frame": 14.89, "switch_frames_in_per_s": 78833.5},
                                  "ring": {"status": "failed", "error": "x"}}}}
    t = sfc.table(res)
    assert "switch:mmsg" in t and "12.00" in t and "7.50" in t and "43700" in t
    assert "in-switch / ring 1.82" in t and "3.79" in t and "14.89" in t
    assert sfc.table({**res, "mininet": {"skipped": "no mininet"}}).endswith("mininet: skipped (no mininet)")
