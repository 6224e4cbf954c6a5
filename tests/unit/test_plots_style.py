"""Figures a reader can parse: colour per system, hollow invalid points, bounds,
captions from what ran, 'did not reach target', projections dashed and labelled.

Each test draws a figure from a synthetic results folder and inspects the
matplotlib figure before it is closed (style._close is replaced).
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.colors as mcolors
import pytest

from testbed import results as res
from testbed.plots import style as st
from testbed.plots.allreduce import goodput_bound_mbps, payload_efficiency
from testbed.plots.captions import Resolution

sys.path.insert(0, str(Path(__file__).parent))
import plot_fixtures as fx  # noqa: E402

pytestmark = pytest.mark.unit


def _data_lines(ax):
    """Lines with data drawn from measurements (not axhline bounds, not legend proxies)."""
    return [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 0]


def _hex(c):
    return mcolors.to_hex(c)


def test_allreduce_colour_is_per_algorithm_and_style_per_case(tmp_path, drawn):
    fig = drawn(fx.allreduce_run(tmp_path), ["goodput_vs_size"])["goodput_vs_size"]
    ax = fig.axes[0]
    solid = [ln for ln in _data_lines(ax) if ln.get_marker() == "o" and ln.get_markerfacecolor() != "none"]
    # 3 algorithms x 3 cases: 9 lines but only 3 colours and 3 line styles.
    assert len(solid) == 9
    assert {_hex(ln.get_color()) for ln in solid} == {st.color_of(a) for a in fx.ALGS}
    assert len({ln.get_linestyle() for ln in solid}) == 3
    # The same algorithm keeps its colour in every case.
    ring = st.color_of("ring")
    assert sum(_hex(ln.get_color()) == ring for ln in solid) == 3


def test_invalid_points_are_hollow_and_out_of_the_line(tmp_path, drawn):
    run_dir = fx.allreduce_run(tmp_path, invalid=(4,))   # baseline, ring, repeat 1
    fig = drawn(run_dir, ["goodput_vs_size"])["goodput_vs_size"]
    ax = fig.axes[0]
    hollow = [ln for ln in _data_lines(ax) if ln.get_markerfacecolor() == "none"]
    assert hollow, "an invalid point must be drawn with a hollow marker"
    assert all(_hex(ln.get_markeredgecolor()) == st.color_of("ring") for ln in hollow)
    assert all(ln.get_linestyle() == "None" for ln in hollow)   # not joined to a line
    assert len(hollow[0].get_xdata()) == 4                       # one per tensor size
    text = st.caption_of(fig)
    assert "INVALID: 1 of 27" in text and "net slowdown p50 950" in text


def test_valid_run_has_no_hollow_marker_or_invalid_note(tmp_path, drawn):
    fig = drawn(fx.allreduce_run(tmp_path), ["goodput_vs_size"])["goodput_vs_size"]
    assert not [ln for ln in _data_lines(fig.axes[0]) if ln.get_markerfacecolor() == "none"]
    assert "INVALID" not in st.caption_of(fig)


def test_goodput_bounds_are_drawn_in_the_algorithms_colours(tmp_path, drawn):
    fig = drawn(fx.allreduce_run(tmp_path), ["goodput_vs_size"])["goodput_vs_size"]
    ax = fig.axes[0]
    # axhline: a 2-point line spanning the axes at the bound value.
    horizontal = {(_hex(ln.get_color()), round(ln.get_ydata()[0], 6)) for ln in ax.get_lines()
                  if list(ln.get_xdata()) == [0, 1]}
    for alg in fx.ALGS:
        assert (st.color_of(alg), round(goodput_bound_mbps(alg, 100.0, 4), 6)) in horizontal
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "analytical bound" in labels
    assert any(t.startswith("ring, bound 63.8") for t in labels)


def test_bound_formulas():
    eff_tcp = payload_efficiency("ring")
    assert goodput_bound_mbps("ring", 100, 4) == pytest.approx(100 * 4 / 6 * eff_tcp)
    assert goodput_bound_mbps("ps", 100, 4) == pytest.approx(25 * eff_tcp)
    # 64 values = 256 B per 314 B frame; on a real wire 24 B more.
    assert goodput_bound_mbps("switch", 100, 4) == pytest.approx(100 * 256 / 314)
    assert payload_efficiency("switch", on_wire=True) == pytest.approx(256 / 338)


def test_local_mode_draws_no_bound_and_says_why(tmp_path, drawn):
    run_dir = fx.allreduce_run(tmp_path)
    lines = (run_dir / "points.jsonl").read_text().replace('"applied": true', '"applied": false')
    (run_dir / "points.jsonl").write_text(lines)
    fig = drawn(run_dir, ["goodput_vs_size"])["goodput_vs_size"]
    assert not [ln for ln in fig.axes[0].get_lines() if list(ln.get_xdata()) == [0, 1]]
    assert "links were not shaped" in st.caption_of(fig)


def test_caption_follows_quick_set_and_case_set(tmp_path, drawn):
    fig = drawn(fx.convergence_run(tmp_path, quick=True), ["p4sgd_convergence"])["p4sgd_convergence"]
    text = st.caption_of(fig)
    assert "synthetic dense 1024 x 1024" in text           # the quick dataset, not the file's 4096 x 2048
    assert "4096 x 2048" not in text
    assert "epochs 2" in text and "epochs 100" not in text  # quick set wins over dp's case set
    assert "p4sgd: B=16" in text and "dp: B=1024" in text   # per-case batch from the case sets
    assert "QUICK run" in text


def test_caption_without_quick_shows_the_files_values(tmp_path, drawn):
    fig = drawn(fx.convergence_run(tmp_path, quick=False), ["p4sgd_convergence"])["p4sgd_convergence"]
    text = st.caption_of(fig)
    assert "synthetic dense 4096 x 2048" in text and "QUICK" not in text
    assert "dp: " in text and "epochs 100" in text           # dp's case set applies without --quick


def test_resolution_applies_non_sweep_cli_overrides_after_case_sets(tmp_path):
    run_dir = fx.convergence_run(tmp_path, quick=False)
    import json
    m = json.loads((run_dir / "manifest.json").read_text())
    m["cli"]["overrides"] = ["workload.batch=32", "sweep.repeats=2"]
    (run_dir / "manifest.json").write_text(json.dumps(m))
    r = Resolution(res.load_run(run_dir))
    assert r.error is None
    assert [r.get(i, "workload.batch") for i in range(3)] == [32, 32, 32]   # as the sweep resolves it
    assert r.get(1, "workload.mode") == "data_parallel"


def test_convergence_names_the_best_lr_and_the_missed_target(tmp_path, drawn):
    fig = drawn(fx.convergence_run(tmp_path), ["p4sgd_convergence"])["p4sgd_convergence"]
    text = st.caption_of(fig)
    # dp lr 16 ends at 0.60, lr 1024 at 0.45: neither reaches 0.35, 1024 has the lower final loss.
    assert "lr grid {16, 1024}: best lr 1024" in text
    # Times in hardware seconds (the summaries carry tdf=500): 2.0 s emulated -> 0.004 s.
    assert "did not reach target loss 0.35 in 0.004 s" in text   # legend, and the NOT REACHED caption line
    assert "NOT REACHED" in text
    assert "target at 0.0016 s" in text                          # p4sgd reached it at 0.8 s emulated
    assert "hardware-equivalent" in fig.axes[0].get_xlabel()


def test_scaling_projection_is_dashed_labelled_and_disagreement_noted(tmp_path, drawn):
    fig = drawn(fx.scaling_run(tmp_path), ["p4sgd_scaling"])["p4sgd_scaling"]
    ax_t = fig.axes[0]
    dashed = [ln for ln in _data_lines(ax_t) if ln.get_marker() == "x"]   # projected: thin, crosses
    assert {_hex(ln.get_color()) for ln in dashed} == {st.color_of("p4sgd"), st.color_of("dp")}
    assert all(max(ln.get_xdata()) == 256 for ln in dashed)      # projected-only counts included
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "P4SGD projected (model profile tofino1-100g)" in labels
    text = st.caption_of(fig)
    assert "DISAGREE" in text and "P4SGD N=8: emulated" in text and "data-parallel N=" not in text
    assert "samples / hardware s" in ax_t.get_ylabel()
    ax_t.set_ylim(150, 900)          # less than a decade, as a throughput often spans
    fig.canvas.draw()
    lo, hi = ax_t.get_ylim()
    labelled = [t for t in ax_t.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]
    assert len(labelled) >= 2, [t.get_text() for t in ax_t.get_yticklabels()]   # not one lone label


def test_scaling_caption_says_where_model_parallelism_beats_data_parallelism(tmp_path, drawn):
    fig = drawn(fx.scaling_run(tmp_path), ["p4sgd_scaling"])["p4sgd_scaling"]
    text = st.caption_of(fig)
    # The fixture projects P4SGD at 1.9^log2(N) (x1.5 at N=8, its disagreement case: 8^(log2 1.9 - 1) x 1.5
    # = 129 %), data-parallel at 1.5^log2(N).
    assert "Where model parallelism beats data parallelism (projected scaling efficiency): 8192 features: " \
           "P4SGD 129% vs data-parallel 42% at 8 workers, P4SGD 74% vs data-parallel 18% at 64 workers; " \
           "at 8 model parallelism (P4SGD) wins" in text


def test_scaling_invalid_point_hollow(tmp_path, drawn):
    fig = drawn(fx.scaling_run(tmp_path, invalid_point=22), ["p4sgd_scaling"])["p4sgd_scaling"]
    hollow = [ln for ln in _data_lines(fig.axes[0]) if ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [8]
    assert _hex(hollow[0].get_markeredgecolor()) == st.color_of("dp")
    assert "ratio p50 0.4" in st.caption_of(fig)


def test_scaling_without_projection_records_draws_emulated_only(tmp_path, drawn):
    fig = drawn(fx.scaling_run(tmp_path, projection=False), ["p4sgd_scaling"])["p4sgd_scaling"]
    assert not [ln for ln in _data_lines(fig.axes[0]) if ln.get_marker() == "x"]
    text = st.caption_of(fig)
    assert "projected" not in text.lower() and "DISAGREE" not in text


def test_band_stats_min_max_below_six_repeats_and_ci_above():
    assert st.band_stats([3, 1, 2]) == (2.0, 1.0, 3.0)
    med, lo, hi = st.band_stats(list(range(1, 21)))   # n=20: ranks 6 and 15
    assert (med, lo, hi) == (10.5, 6.0, 15.0)


def test_latency_cdf_says_which_sizes_it_draws(tmp_path, drawn):
    fig = drawn(fx.allreduce_run(tmp_path, repeats=1), ["latency_cdf"])["latency_cdf"]
    assert [ax.get_title() for ax in fig.axes] == ["64 float32 values", "262144 float32 values"]
    assert "the smallest and the largest of the 4 sizes that ran (64, 1024, 16384, 262144 values)" \
        in st.caption_of(fig)


def _one_figure_run(tmp_path, name: str, kind: str) -> Path:
    """A results folder of workload `kind` whose scenario lists the one figure `name`."""
    run_dir = res.new_run_dir(name, tmp_path)
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "mininet", "scenario": {"name": name, "workload": {"kind": kind},
                                                       "topology": {"workers": 4, "kind": "star"},
                                                       "switch": {"backend": "soft"}, "figures": [name]},
        "points": [], "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    return run_dir


def test_phub_server_marks_its_invalid_point(tmp_path, drawn):
    run_dir = _one_figure_run(tmp_path, "phub_server", "phub")
    for idx, valid in enumerate([True, False]):
        res.append_jsonl(run_dir / "points.jsonl", {
            "index": idx, "label": f"{idx:03d}-p", "status": "ok", "case": "", "impairments": [],
            "fidelity": {"valid": valid, "reasons": [] if valid else ["network 1.3x the dilation"]}})
        res.append_jsonl(run_dir / "metrics.jsonl", {
            "point": idx, "type": "phub_summary", "algorithm": "phub", "workers": 4, "model": "cnn",
            "size_scale": 1.0, "jobs": 1, "server_cores": 2, "tdf": 100.0, "chunk_bytes": 32768,
            "server_agg_gbps_per_core": 1.5, "numpy_sum_gbps_per_core": 4.0, "valid": valid})
    fig = drawn(run_dir, ["phub_server"])["phub_server"]
    outlined = [p for p in fig.axes[0].patches if not p.get_fill()]
    assert len(outlined) == 1 and outlined[0].get_linestyle() == "--"
    assert "INVALID" in st.caption_of(fig) and "invalid point" in st.caption_of(fig)


def test_lhc_throughput_plots_the_codec_inclusive_metric_first(tmp_path, drawn):
    run_dir = _one_figure_run(tmp_path, "lhc_throughput", "lhc")
    for idx, (algo, density, codec, net) in enumerate([("lhc", 0.05, 3.0, 20.0), ("lhc", 0.01, 9.0, 60.0),
                                                       ("dense_switch", 0.05, 10.0, 10.0),
                                                       ("dense_switch", 0.01, 10.0, 10.0)]):
        res.append_jsonl(run_dir / "points.jsonl", {"index": idx, "label": f"{idx:03d}", "status": "ok",
                                                     "case": "", "impairments": []})
        res.append_jsonl(run_dir / "metrics.jsonl", {
            "point": idx, "type": "lhc_summary", "algorithm": algo, "gradient": {"density": density},
            "agg_gbps": codec, "agg_network_gbps": net, "dense_over_sent": 5.0, "valid": True, "workers": 4,
            "tdf": 100.0, "decode_errors": 0, "checked_iterations": 5})
    fig = drawn(run_dir, ["lhc_throughput"])["lhc_throughput"]
    left, middle = fig.axes[0], fig.axes[1]
    assert "codec included" in left.get_ylabel() and "network rounds only" in middle.get_ylabel()
    lhc_left = next(ln for ln in _data_lines(left) if _hex(ln.get_color()) == _hex(st.color_of("lhc")))
    assert sorted(lhc_left.get_ydata()) == [3.0, 9.0]          # agg_gbps, not the network rounds' 20 and 60
    lhc_mid = next(ln for ln in _data_lines(middle) if _hex(ln.get_color()) == _hex(st.color_of("lhc")))
    assert sorted(lhc_mid.get_ydata()) == [20.0, 60.0]         # the second panel: agg_network_gbps
    assert not _empty_axes(fig)
    text = st.caption_of(fig)
    assert "Left, the headline" in text and "middle: the network rounds alone" in text
    assert "hardware-equivalent time" in text and "modeled V100" in text


def _empty_axes(fig) -> list[str]:
    """Visible axes with nothing drawn from data (no line with points, no bar, no band)."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        drawn = any(len(ln.get_xdata()) for ln in ax.get_lines()) or ax.patches or ax.collections
        if not drawn:
            out.append(ax.get_title() or ax.get_ylabel() or "?")
    return out


@pytest.mark.parametrize("make,names", [
    (fx.allreduce_run, ["goodput_vs_size", "latency_cdf"]),
    (fx.convergence_run, ["p4sgd_convergence"]),
    (fx.scaling_run, ["p4sgd_scaling"]),
])
def test_figures_drawn_from_a_run_that_feeds_them_have_no_empty_axes(tmp_path, drawn, make, names):
    figs = drawn(make(tmp_path), names)
    for name, fig in figs.items():
        assert not _empty_axes(fig), f"{name}: empty axes {_empty_axes(fig)}"


def test_a_series_with_only_invalid_repeats_is_still_in_the_legend():
    import matplotlib.pyplot as plt  # noqa: PLC0415
    fig, ax = plt.subplots()
    st.plot_repeats(ax, {1.0: [(2.0, False), (2.2, False)]}, color="C0", label="valid")
    st.plot_repeats(ax, {1.0: [(3.0, True)], 2.0: [(3.5, True)]}, color="C1", label="all invalid")
    labels = [t.get_text() for t in ax.legend().get_texts()]
    assert labels == ["valid", "all invalid (invalid only)"]
    plt.close(fig)
    assert st.band_description(0).startswith("no valid repeat")
    assert st.band_description(1) == "1 repeat per point (no band)"


def test_every_legend_is_framed_so_its_markers_are_not_read_as_data(tmp_path, drawn):
    fig = drawn(fx.allreduce_run(tmp_path), ["goodput_vs_size"])["goodput_vs_size"]
    legend = fig.axes[0].get_legend()
    assert legend.get_frame_on()
    assert legend.get_frame().get_alpha() >= 0.85
