"""EASGD figures on a synthetic run of scenarios/easgd/period.yaml's shape: Sync
EASGD at tau 1 and 4, one point reaching the target accuracy and one not.

The quick run of period.yaml reaches the target at no tau: its time-to-target
figure had no data at all (a "not reached" note per point) and all taus in one
column. Points now stay apart by what the scenario sweeps, and a point that
missed the target draws its run length as a lower bound."""
from __future__ import annotations

import pytest

from testbed import results as res
from testbed.plots import style as st

pytestmark = pytest.mark.unit


def _period_run(tmp_path):
    run_dir = res.new_run_dir("easgd-period", tmp_path)
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "mininet", "machine": {"cpus": 2}, "git": {"commit": "abc"},
        "scenario": {"name": "easgd-period", "topology": {"kind": "star", "workers": 2},
                     "switch": {"backend": "soft"}, "figures": ["easgd_time_to_target"],
                     "workload": {"kind": "easgd", "variant": "sync_easgd", "steps": 128, "tau": 4,
                                  "target_acc": 0.85, "device": {"type": "v100", "time_scale": "auto"}},
                     "sweep": {"grid": {"workload.tau": [1, 4]}}}})
    for idx, (tau, ttt) in enumerate([(1, 0.004), (4, None)]):
        res.append_jsonl(run_dir / "points.jsonl", {"index": idx, "label": f"00{idx}-base-tau={tau}-r0",
                                                    "case": "base", "params": {"workload.tau": tau},
                                                    "repeat": 0, "status": "ok", "impairments": []})
        res.append_jsonl(run_dir / "metrics.jsonl", {
            "point": idx, "type": "easgd_summary", "variant": "sync_easgd", "workers": 2, "tau": tau,
            "tdf": 500.0, "target_acc": 0.85, "hw_time_to_target_s": ttt, "hw_wall_s": 0.010,
            "comm_share": 0.2, "valid": True})
    return run_dir


def test_time_to_target_keeps_swept_values_apart_and_bounds_a_missed_target(tmp_path, drawn):
    fig = drawn(_period_run(tmp_path), ["easgd_time_to_target"])["easgd_time_to_target"]
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["Sync EASGD\n(tau=1)", "Sync EASGD\n(tau=4)"], ticks
    bound = [ln for ln in ax.get_lines() if ln.get_marker() == "^"]
    assert len(bound) == 1 and list(bound[0].get_xdata()) == [1] and list(bound[0].get_ydata()) == [10.0]
    reached = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and list(ln.get_xdata()) == [0]]
    assert reached and reached[0].get_ydata()[0] == pytest.approx(4.0)
    assert ax.get_ylim()[0] == 0
    assert "not reached: run length" in st.caption_of(fig)
