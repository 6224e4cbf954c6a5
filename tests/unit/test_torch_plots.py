"""The torch figures: loss vs hardware time (emulated / TDF) with the projection
as a thin line with crosses, invalid points hollow and named in the caption,
the compute/communication split in hardware ms, and a footer giving the worker
count that ran (a --quick override, not the scenario file's)."""
from __future__ import annotations

import pytest

from testbed import results as res
from testbed.plots import style as st

pytestmark = pytest.mark.unit

TDF = 1000.0


def torch_run(tmp_path):
    """A --quick run whose quick set ran 2 workers (the file says 4): switch valid, gloo invalid."""
    run_dir = res.new_run_dir("torch-lenet", tmp_path)
    scenario = {"name": "torch-lenet", "topology": {"workers": 4, "kind": "star"}, "switch": {"backend": "soft"},
                "workload": {"kind": "torch", "script": "scenarios/torch/train.py", "args": ["--model", "lenet"],
                             "collective": "ring", "device": {"type": "v100"}},
                "sweep": {"grid": {"workload.collective": ["switch", "gloo"]}, "cases": [], "seed": 1,
                          "quick": {"set": {"topology.workers": 2}}},
                "figures": ["torch_loss_vs_time", "torch_iteration_time"]}
    points = [{"index": i, "label": f"00{i}-collective={c}", "case": "baseline",
               "params": {"workload.collective": c}, "repeat": 0, "seed": 1} for i, c in enumerate(["switch", "gloo"])]
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "mininet", "scenario": scenario, "points": points,
        "cli": {"scenario": "x.yaml", "overrides": [], "net": "mininet", "quick": True},
        "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    for p in points:
        res.append_jsonl(run_dir / "points.jsonl", dict(p, status="ok", impairments=[]))
        coll = p["params"]["workload.collective"]
        invalid = coll == "gloo"
        for it in range(5):
            res.append_jsonl(run_dir / "metrics.jsonl", {
                "point": p["index"], "case": "baseline", "type": "torch_iter", "rank": 0, "iter": it,
                "t_s": 0.1 * (it + 1), "loss": 2.0 - 0.1 * it})
        res.append_jsonl(run_dir / "metrics.jsonl", {
            "point": p["index"], "case": "baseline", "type": "torch_summary", "collective": coll, "workers": 2,
            "device": "v100", "time_scale": TDF, "tdf": TDF, "calibrated": True, "network_dilated": True,
            "hw_compute_ms": 0.06, "hw_comm_ms": 0.04, "hw_iter_ms": 0.1, "projected_hw_iter_ms": 0.09,
            "valid": not invalid,
            "invalid_reasons": ["network slowdown p50 is 1.4x the compute dilation"] if invalid else []})
    return run_dir


def test_loss_vs_hardware_time_with_projection_and_hollow_invalid(tmp_path, drawn):
    fig = drawn(torch_run(tmp_path), ["torch_loss_vs_time"])["torch_loss_vs_time"]
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    solid = [ln for ln in lines if ln.get_marker() in ("None", None, "") and ln.get_linestyle() != "None"]
    crosses = [ln for ln in lines if ln.get_marker() == "x"]
    hollow = [ln for ln in lines if ln.get_markerfacecolor() == "none"]
    assert len(solid) == 1 and len(crosses) == 2 and len(hollow) == 1
    # emulated / TDF, in ms: the whole run is under a second of hardware time
    assert solid[0].get_xdata()[-1] == pytest.approx(0.5 / TDF * 1e3)
    assert crosses[0].get_xdata()[-1] == pytest.approx(5 * 0.09e-3 * 1e3)  # 5 x projected per iteration
    assert "(ms)" in ax.get_xlabel()
    assert all(ln.get_linewidth() < solid[0].get_linewidth() for ln in crosses)
    text = st.caption_of(fig)
    assert "INVALID: 1 of 2" in text and "1.4x the compute dilation" in text
    assert "gloo (TDF 1000): network slowdown p50" in text              # named, with its reason
    assert hollow[0].get_linestyle() == "-"                              # the case's style, thin
    assert "hardware time" in text and "2 workers (star)" in text and "4 workers" not in text


def test_iteration_split_in_hardware_ms(tmp_path, drawn):
    fig = drawn(torch_run(tmp_path), ["torch_iteration_time"])["torch_iteration_time"]
    ax = fig.axes[0]
    heights = sorted(round(b.get_height(), 6) for b in ax.patches)
    assert heights == [0.04, 0.04, 0.06, 0.06]
    assert "hardware ms" in ax.get_ylabel()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["switch\nTDF 1000", "gloo (invalid)\nTDF 1000"]     # each bar's TDF under it
    # the legend's entries are neutral (grey): colour is the collective, not a bar part
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"compute (device model)", "communication (hatched)", "invalid point (hollow)"} <= legend
    assert "2 workers (star)" in st.caption_of(fig)


def test_points_that_share_collective_and_case_are_told_apart_by_their_args(tmp_path, drawn):
    """hook_overhead sweeps --bucket-cap-mb: without it in the label its three
    gloo bars would all read 'gloo'."""
    import json

    run_dir = torch_run(tmp_path)
    man = json.loads((run_dir / "manifest.json").read_text())
    caps = ["0.005", "0.1"]
    for p, cap in zip(man["points"], caps):
        p["params"] = {"workload.args": ["--model", "lenet", "--bucket-cap-mb", cap]}
    man["scenario"]["sweep"]["grid"] = {"workload.args": [p["params"]["workload.args"] for p in man["points"]]}
    man["scenario"]["workload"]["collective"] = "gloo"
    (run_dir / "manifest.json").write_text(json.dumps(man))
    lines = (run_dir / "metrics.jsonl").read_text().replace('"collective": "switch"', '"collective": "gloo"')
    (run_dir / "metrics.jsonl").write_text(lines)
    fig = drawn(run_dir, ["torch_iteration_time"])["torch_iteration_time"]
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["gloo --bucket-cap-mb 0.005\nTDF 1000", "gloo --bucket-cap-mb 0.1 (invalid)\nTDF 1000"]
