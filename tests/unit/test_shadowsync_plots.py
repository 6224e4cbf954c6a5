"""The ShadowSync figures draw from a results folder shaped like the runner's:
throughput with the linear-scaling line, NE of S-X vs FR-X in % (paired by
repeat), sync gap; captions from what ran."""
from __future__ import annotations

import numpy as np
import pytest

from testbed import results as res

pytestmark = pytest.mark.unit


def shadowsync_run(tmp_path):
    run_dir = res.new_run_dir("shadowsync-throughput", tmp_path)
    scenario = {"name": "shadowsync-throughput", "topology": {"workers": 2, "kind": "star"},
                "switch": {"backend": "soft"},
                "workload": {"kind": "shadowsync", "algorithm": "easgd", "mode": "shadow", "k": 5,
                             "iterations": 60, "device": {"type": "v100", "time_scale": 400}},
                "sweep": {"grid": {"topology.workers": [1, 2], "workload.algorithm": ["easgd", "ma"]},
                          "cases": [{"name": "shadow", "set": {"workload.mode": "shadow"}},
                                    {"name": "foreground", "set": {"workload.mode": "foreground"}}],
                          "repeats": 2, "seed": 1},
                "figures": ["shadowsync_throughput", "shadowsync_ne", "shadowsync_sync_gap"]}
    points, sums, idx = [], [], 0
    for mode in ("shadow", "foreground"):
        for n in (1, 2):
            for alg in ("easgd", "ma"):
                for r in range(2):
                    points.append({"index": idx, "label": f"{idx:03d}-{mode}-workers={n}-algorithm={alg}-r{r}",
                                   "case": mode, "params": {"topology.workers": n, "workload.algorithm": alg},
                                   "repeat": r, "seed": idx})
                    ne = 0.80 * (1.01 if mode == "shadow" and alg == "easgd" else 1.0) + 0.01 * r
                    sums.append({"point": idx, "case": mode, "type": "shadowsync_summary", "algorithm": alg,
                                 "mode": mode, "label": ("S-" if mode == "shadow" else "FR-") + alg.upper(),
                                 "trainers": n, "embedding_servers": 1, "examples_per_s": 1000.0 * n,
                                 "hw_examples_per_s": 4e5 * n, "tdf": 400.0, "calibrated": False,
                                 **({"projected_hw_examples_per_s": 4e5 * n,
                                     "projected": {"16": 4e5 * 16 * (1.0 if mode == "shadow" else 0.5)},
                                     "projected_servers": {"16": {"embedding_ps": 2,
                                                                  **({"sync_ps": 2} if alg == "easgd" else {})}}}
                                    if n == 2 else {}),
                                 "eval_ne": ne, "avg_sync_gap": 0.5 * n if mode == "shadow" else 10.0,
                                 "device_valid": not (idx == 3), "valid": not (idx == 3),
                                 "invalid_reasons": ["1 step(s) where the CPU was slower"] if idx == 3 else [],
                                 "network_fidelity": "not modeled: p2p"})
                    idx += 1
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "local", "scenario": scenario, "points": points,
        "cli": {"scenario": "x.yaml", "overrides": [], "net": "local", "quick": False},
        "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    for p in points:
        res.append_jsonl(run_dir / "points.jsonl", dict(p, status="ok", impairments=[]))
    for s in sums:
        res.append_jsonl(run_dir / "metrics.jsonl", s)
    return run_dir


def test_figures_draw_with_captions_and_the_ne_difference(tmp_path):
    from testbed.plots import draw_figures, style  # noqa: PLC0415
    run = res.load_run(shadowsync_run(tmp_path))
    drawn: list = []
    orig = style._close

    def grab(fig):
        ax = fig.axes[0]
        drawn.append((style.caption_of(fig), [(line.get_xdata(), line.get_ydata()) for line in ax.lines]))
        orig(fig)
    style._close = grab
    try:
        paths = draw_figures(run)
    finally:
        style._close = orig
    assert {p.name for p in paths} >= {"shadowsync_throughput.png", "shadowsync_ne.pdf", "shadowsync_sync_gap.png"}
    tp, ne, gap = drawn
    assert "linear scaling from 1 trainer" in tp[0] and "S-EASGD" in tp[0] and "FR-MA" in tp[0]
    assert "INVALID: 1 of 16" in tp[0] and "60 iterations/worker" in tp[0]
    assert "TDF 400 (fixed)" in tp[0]
    # the projection from the 2-trainer point to 16: a thin line with crosses; S/FR ratio 2 in the caption
    assert ([2.0, 16.0], [8e5, 6.4e6]) in [(list(np.ravel(x)), list(np.ravel(y))) for x, y in tp[1]]
    assert "projected S/FR EASGD 1.00/2.00 at 2/16" in tp[0]
    assert "projected with 2 emb PS, 2 sync PS at 16 trainers" in tp[0]
    # S-EASGD is 1 % worse than FR-EASGD in every repeat, S-MA equal
    ys = sorted(float(np.ravel(y)[0]) for _, y in ne[1] if len(np.ravel(y)) == 1)
    assert any(y == pytest.approx(1.0, abs=0.05) for y in ys)
    assert any(y == pytest.approx(0.0, abs=1e-9) for y in ys)
    assert "drawn all the same" in ne[0]            # NE does not depend on timing
    assert "Sync gap:" in gap[0]
    # the shadow's gap grows with trainers here (0.5 n); FR's is k x workers
    lines = [(list(np.ravel(x)), list(np.ravel(y))) for x, y in gap[1]]
    assert ([1.0, 2.0], [0.5, 1.0]) in lines and ([1.0, 2.0], [10.0, 10.0]) in lines


def pause_run(tmp_path):
    """dlrm_pause.yaml's shape: 2 trainers, S-EASGD, the shadow's pause swept, 2 repeats.
    The gap falls with the pause (4, 2, 1 iterations); repeats differ by 0.2."""
    run_dir = res.new_run_dir("shadowsync-dlrm-pause", tmp_path)
    scenario = {"name": "shadowsync-dlrm-pause", "topology": {"workers": 2, "kind": "star"},
                "switch": {"backend": "soft"},
                "workload": {"kind": "shadowsync", "algorithm": "easgd", "mode": "shadow", "iterations": 60,
                             "device": {"type": "v100", "time_scale": "auto"}},
                "sweep": {"grid": {"workload.shadow_pause_ms": [0, 5, 20]}, "repeats": 2, "seed": 1},
                "figures": ["shadowsync_sync_gap"]}
    points, sums = [], []
    for idx, (pause, r) in enumerate((p, r) for p in (0, 5, 20) for r in range(2)):
        points.append({"index": idx, "label": f"{idx:03d}-shadow_pause_ms={pause}-r{r}",
                       "params": {"workload.shadow_pause_ms": pause}, "repeat": r, "seed": idx})
        sums.append({"point": idx, "type": "shadowsync_summary", "algorithm": "easgd", "mode": "shadow",
                     "label": "S-EASGD", "trainers": 2, "embedding_servers": 1, "tdf": 1800.0, "calibrated": True,
                     "hw_examples_per_s": 8e5, "eval_ne": 0.8, "valid": True, "device_valid": True,
                     "avg_sync_gap": {0: 4.0, 5: 2.0, 20: 1.0}[pause] + 0.2 * r})
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "local", "scenario": scenario, "points": points,
        "cli": {"scenario": "x.yaml", "overrides": [], "net": "local", "quick": False},
        "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    for p in points:
        res.append_jsonl(run_dir / "points.jsonl", dict(p, status="ok", impairments=[]))
    for s in sums:
        res.append_jsonl(run_dir / "metrics.jsonl", s)
    return run_dir


def test_sync_gap_takes_the_pause_as_its_axis_when_the_run_sweeps_it(tmp_path):
    """Pauses are a parameter, not repeats: one point per pause on the x axis (ms of
    modeled hardware), the band from the real repeats, the caption names both."""
    from testbed.plots import shadowsync, style  # noqa: PLC0415
    run = res.load_run(pause_run(tmp_path))
    drawn: list = []
    orig = style._close

    def grab(fig):
        ax = fig.axes[0]
        drawn.append((style.caption_of(fig), ax.get_xlabel(),
                      [(list(np.ravel(line.get_xdata())), list(np.ravel(line.get_ydata()))) for line in ax.lines]))
        orig(fig)
    style._close = grab
    try:
        (tmp_path / "figs").mkdir()
        shadowsync.sync_gap(run, tmp_path / "figs")
    finally:
        style._close = orig
    caption, xlabel, lines = drawn[0]
    assert ([0.0, 5.0, 20.0], [pytest.approx(4.1), pytest.approx(2.1), pytest.approx(1.1)]) in lines
    assert "pause" in xlabel and "ms of modeled hardware" in xlabel
    assert "x = workload.shadow_pause_ms 0/5/20 ms" in caption and "2 trainers" in caption
    assert "2 repeats: line = median" in caption


def test_the_caption_names_the_servers_of_the_projected_counts_drawn_only():
    """A series' line is projected from its largest emulated point; a smaller point's own
    projection (1 trainer on 1 PS) is not drawn, so the caption does not list its count."""
    from testbed.plots.shadowsync import projected_servers_text, projection_sources, projections  # noqa: PLC0415

    def summary(n, counts):
        return {"algorithm": "ma", "mode": "shadow", "trainers": n, "projected_hw_examples_per_s": 1e6 * n,
                "projected": {str(c): 1e5 * c for c in counts},
                "projected_servers": {str(c): {"embedding_ps": max(1, c // 8)} for c in counts}}
    sums = {0: summary(1, [1, 16, 32]), 1: summary(2, [2, 16, 32]), 2: summary(2, [2, 16, 32])}
    sources = projection_sources(sums, lambda i: "base")
    assert [s["trainers"] for s in sources[("ma", "shadow", "base")]] == [2, 2]
    assert projections(sources) == {("ma", "shadow", "base"): {2: 2e5, 16: 1.6e6, 32: 3.2e6}}
    assert projected_servers_text(s for ss in sources.values() for s in ss) == \
        "projected with 1/2/4 emb PS at 2/16/32 trainers"
    assert "at 1/2/16/32 trainers" in projected_servers_text(sums.values())   # every point's, as before
