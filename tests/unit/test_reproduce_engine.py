"""The reproduction engine's rules: verdicts computed from the numbers, the
envelope and the constants that reach a paper's value, what moves a headline,
the report's fields, statistics over seeds."""
from __future__ import annotations

import json
import math

import pytest

from testbed.reproduce import engine, report
from testbed.reproduce.model import (AssumedConstant, Baseline, Baselines, EmulatedValues, Headline, Paper, Regime,
                                     SettingItem)
from testbed.reproduce.verdict import decide, envelope, reachable, within
from testbed.stats import mean_ci95, smooth, time_to_target

pytestmark = pytest.mark.unit

LAUNCH = AssumedConstant("launch_s", 5.0, 3.0, 10.0, "us", "documented range 3-10 us")
LINK = AssumedConstant("link_gbps", 100.0, 40.0, 100.0, "Gbit/s", "assumed")


def ratio(over: dict[str, float]) -> float:
    """A toy projection: GPU time over FPGA time; launch cost slows the GPU."""
    launch = over.get("launch_s", LAUNCH.nominal)
    link = over.get("link_gbps", LINK.nominal)
    return (4 * launch + 4.0) / (2.0 + 100.0 / link)


def headline(paper_value: float, applies: bool = False, values=None) -> Headline:
    return Headline(
        id="speedup", claim="converges faster", paper_value=paper_value, unit="x", paper_source="abstract",
        setting=[SettingItem("workers", 8, "verified", "abstract")], project=ratio, constants=[LAUNCH, LINK],
        emulated=(lambda runs: EmulatedValues(list(values), len(values), "ratio at 8 workers")) if values else None,
        emulated_applies=applies,
        regimes=[Regime("launch", "us", 5.0, [1, 2, 5, 10, 20, 40], lambda v: ratio({"launch_s": v}))])


def test_within_and_reachable_are_one_rule():
    assert within(6.5, 5.2) and not within(6.5, 5.1)          # 5.2 * 1.25 = 6.5
    assert reachable(6.5, 1.0, 5.2) and not reachable(6.5, 1.0, 5.1)
    assert reachable(2.0, 2.66, 9.0) and not reachable(2.0, 2.67, 9.0)   # 2 / 0.75 = 2.667


def test_reproduced_when_the_projection_is_within_25_percent():
    p = ratio({})                              # (20 + 4) / 3 = 8
    env = envelope(ratio, [LAUNCH, LINK], 7.0)
    v = decide(7.0, "x", env, None, False, [LAUNCH, LINK])
    assert math.isclose(p, 8.0) and v.verdict == "reproduced"


def test_within_envelope_names_the_constant_values_that_reach_it():
    # Nominal 8x; 13x needs launch_s near its top (4*10+4)/3 = 14.7: reachable.
    env = envelope(ratio, [LAUNCH, LINK], 13.0)
    assert env.lo < 8.0 < env.hi
    assert env.reaching is not None and within(13.0, env.reaching_value)
    v = decide(13.0, "x", env, None, False, [LAUNCH, LINK])
    assert v.verdict == "within_envelope"
    assert "launch_s" in v.reason and "nominal 5" in v.reason
    # The named values are the smallest move: just at the 25 % edge (13 / 1.25 = 10.4).
    assert env.reaching_value == pytest.approx(13.0 / 1.25, rel=1e-3)


def test_not_reproduced_when_no_constant_reaches_it():
    env = envelope(ratio, [LAUNCH, LINK], 40.0)
    v = decide(40.0, "x", env, None, False, [LAUNCH, LINK])
    assert v.verdict == "not_reproduced" and "launch_s" in v.reason and "below" in v.reason


def test_the_emulated_interval_decides_where_it_applies():
    env = envelope(ratio, [LAUNCH, LINK], 8.0)
    inside = mean_ci95([7.8, 8.3, 8.0])
    outside = mean_ci95([3.0, 3.1, 3.2])
    assert decide(8.0, "x", env, inside, True, [LAUNCH, LINK]).verdict == "reproduced"
    v = decide(8.0, "x", env, outside, True, [LAUNCH, LINK])
    assert v.verdict != "reproduced" and "excludes" in v.reason
    assert decide(8.0, "x", env, outside, False, [LAUNCH, LINK]).verdict == "reproduced"
    none = decide(8.0, "x", env, None, True, [LAUNCH, LINK])
    assert none.verdict == "not_reproduced" and "no valid emulated value" in none.reason
    wide = mean_ci95([2.0, 8.0, 14.0])              # contains 8, but +-15: wider than 25 % of 8
    undecided = decide(8.0, "x", env, wide, True, [LAUNCH, LINK])
    assert undecided.verdict == "not_reproduced" and "too few seeds to decide" in undecided.reason


def test_what_moves_finds_the_regime_value_nearest_the_paper_setting():
    h = headline(13.0)
    r = engine.what_moves(h, h.regimes[0])
    assert r.reaching == 10 and "≥ 10" in r.sentence
    never = engine.what_moves(headline(1000.0), h.regimes[0])
    assert never.reaching is None and "never" in never.sentence


def test_mean_ci95_is_student_t():
    iv = mean_ci95([1.0, 2.0, 3.0])
    assert iv.mean == 2.0 and iv.hi - iv.mean == pytest.approx(4.302653 * 1.0 / math.sqrt(3), rel=1e-5)
    assert mean_ci95([]) is None and mean_ci95([5.0]).lo == 5.0


def test_time_to_target_uses_the_smoothed_curve_and_says_never():
    t = list(range(10))
    loss = [1.0, 0.2, 1.0, 1.0, 0.5, 0.4, 0.3, 0.3, 0.3, 0.3]   # one lucky dip at t=1
    assert time_to_target(t, loss, 0.35, window=1) == pytest.approx(0.8125)   # raw curve: the dip
    assert time_to_target(t, loss, 0.35, window=3) > 6                          # smoothed: when it stays
    assert time_to_target(t, loss, 0.01) is None
    assert smooth([2, 4, 6], 2).tolist() == [2.0, 3.0, 5.0]


def test_the_report_has_every_field_and_draws_its_figures(tmp_path):
    paper = Paper("toy", "A toy paper", "Doe et al. 2024", [headline(13.0, True, [7.0, 9.0, 8.0]),
                                                          headline(8.0)], notes=["nothing verified"])
    flagged = {"x": "only 1"}
    paper.headlines[0].profiles.append("x")
    results = [engine.evaluate(h, {}, flagged) for h in paper.headlines]
    rep = engine.ReproductionReport(paper, tmp_path, True, results, {}, [], 0.0, 1.0)
    report.write(rep)
    d = json.loads((tmp_path / "report.json").read_text())
    h0 = d["headlines"][0]
    for key in ("id", "claim", "paper_value", "paper_source", "setting", "projected", "envelope", "emulated",
                "verdict", "reason"):
        assert key in h0
    assert set(h0["emulated"]) >= {"mean", "ci95", "n_valid", "n_points"}
    # 13x is reachable with launch_s high, but the emulated interval (at nominal constants) excludes it.
    assert h0["emulated"]["n_valid"] == 3 and h0["verdict"] == "within_envelope" and "excludes" in h0["reason"]
    assert "hardware model x" in h0["reason"]
    assert h0["what_moves"] and d["headlines"][1]["verdict"] == "reproduced"
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Reproduction report") and "| claim | paper |" in md and "## What ran" in md
    assert (tmp_path / "figures" / "reproduce_headlines.png").exists()
    assert (tmp_path / "figures" / "reproduce_what_moves.png").exists()


def _toy_baselines() -> Baselines:
    def secs(base: float, per_launch: float = 0.0):
        return lambda over: {"small": base + per_launch * over.get("launch_s", LAUNCH.nominal),
                             "large": 10 * base}
    return Baselines("seconds of one exchange", "ours", "switch", (
        Baseline("ours", "the paper's system", secs(1.0)),
        Baseline("switch", "dense in-switch", secs(2.0)),
        Baseline("ring", "host ring", secs(1.0, per_launch=1.0), (LAUNCH,), also_vs="switch")))


def test_baseline_table_computes_ratios_and_ranges_from_the_rows():
    t = engine.baseline_table(_toy_baselines())
    rows = {r["system"]: r for r in t["rows"]}
    assert t["cases"] == ["small", "large"] and rows["switch"]["paper_baseline"] and rows["ours"]["subject"]
    assert rows["switch"]["ratio_vs_subject"] == {"small": 2.0, "large": 2.0}
    assert rows["ring"]["seconds"]["small"] == 6.0 and rows["ring"]["ratio_vs_subject"]["small"] == 6.0
    assert rows["ring"]["range_s"]["small"] == [4.0, 11.0] and rows["ring"]["range_s"]["large"] == [10.0, 10.0]
    assert rows["ring"]["ratio_vs_also"] == {"small": 3.0, "large": 0.5} and rows["switch"]["range_s"] is None
    with pytest.raises(ValueError, match="include"):
        Baselines("x", "ours", "missing", (Baseline("ours", "", lambda over: {"a": 1.0}),))


def test_the_report_carries_the_baselines_block(tmp_path):
    h = headline(8.0)
    h.baselines = _toy_baselines()
    rep = engine.ReproductionReport(Paper("toy", "A toy paper", "Doe", [h]), tmp_path, True,
                                    [engine.evaluate(h, None, {})], None, [], 0.0, 1.0)
    report.write(rep)
    d = json.loads((tmp_path / "report.json").read_text())
    assert [r["system"] for r in d["headlines"][0]["baselines"]["rows"]] == ["ours", "switch", "ring"]
    md = (tmp_path / "report.md").read_text()
    assert "Baselines on the same data (seconds of one exchange" in md
    assert "| **switch** | dense in-switch. | 2 s (2x) | 20 s (2x) |" in md
    assert "6 s (6x) [4 s–11 s]; 3x vs switch" in md


def test_per_seed_takes_valid_points_only_and_names_the_others():
    ok = engine.PointResult("000-a-r0", "a", {"w": 8}, 0, 1, "ok", None, [{"type": "s", "v": 2.0, "valid": True}])
    bad = engine.PointResult("001-a-r1", "a", {"w": 8}, 1, 2, "ok", None,
                             [{"type": "s", "v": 9.0, "valid": False, "invalid_reasons": ["net too slow"]}])
    failed = engine.PointResult("002-a-r2", "a", {"w": 8}, 2, 3, "failed", "host w1 died", [])
    run = engine.EmulatedRun("k", "x.yaml", None, [ok, bad, failed])
    ev = run.per_seed(lambda s: s["v"], type="s", w=8)
    assert ev.values == [2.0] and ev.n_points == 2
    assert any("net too slow" in r for r in ev.invalid_reasons)


def test_every_paper_is_listed_and_loads():
    for name in engine.PAPERS:
        paper = engine.load_paper(name)
        assert paper.name == name and paper.headlines
        ids = [h.id for h in paper.headlines]
        assert len(ids) == len(set(ids))
    with pytest.raises(engine.ReproduceError, match="unknown paper"):
        engine.load_paper("nope")


def test_from_keeps_what_ran_and_recomputes_the_verdicts(tmp_path, monkeypatch):
    """--from rewrites a report from its kept emulated results: the earlier run's
    quick flag, wall time, seeds and scenarios stand; the verdicts are recomputed."""
    paper = Paper("toy", "A toy paper", "Doe", [headline(13.0, True, [7.0, 9.0, 8.0])])
    monkeypatch.setattr(engine, "load_paper", lambda name: paper)
    ran = {"started_at": "2026-01-01T00:00:00+0000", "wall_s": 321.0, "git": {"commit": "old"},
           "machine": {"cpus": 2, "mem_gib": 24, "kernel": "k", "loadavg": [0, 0, 0]}, "net": "mininet",
           "seeds": 3, "scenarios": [{"key": "k", "path": "x.yaml", "run_dir": None, "points": 1, "valid": 1,
                                      "seeds": [1], "wall_s": 300.0}]}
    (tmp_path / "report.json").write_text(json.dumps({"quick": True, "ran": ran}))
    point = engine.PointResult("000-a-r0", "a", {}, 0, 1, "ok", None, [{"v": 8.0, "valid": True}])
    (tmp_path / engine.EMULATED_FILE).write_text(json.dumps(point.to_dict("k")) + "\n")
    rep = engine.reproduce("toy", from_dir=tmp_path)
    d = json.loads((tmp_path / "report.json").read_text())
    assert d["quick"] is True and d["ran"]["wall_s"] == 321.0 and d["ran"]["scenarios"][0]["wall_s"] == 300.0
    assert d["ran"]["rewritten_at"] and d["ran"]["git"]["commit"] != "old"
    assert rep.headlines[0].verdict in ("within_envelope", "not_reproduced", "reproduced")
    assert "Verdicts recomputed from the kept results" in (tmp_path / "report.md").read_text()


def test_the_report_names_the_code_that_ran_not_the_checkout_at_its_end(tmp_path, monkeypatch):
    # a full run lasts hours: commits made beside it must not be reported as what ran
    paper = Paper("toy", "A toy paper", "Doe", [headline(13.0, True, [7.0, 9.0, 8.0])])
    monkeypatch.setattr(engine, "load_paper", lambda name: paper)
    evaluated = []                    # the checkout changes once the run is past its start
    real_evaluate = engine.evaluate
    monkeypatch.setattr(engine, "evaluate", lambda *a, **k: evaluated.append(1) or real_evaluate(*a, **k))
    monkeypatch.setattr(engine, "git_state", lambda: {"commit": "later", "dirty": True} if evaluated
                        else {"commit": "at-start", "dirty": False})
    engine.reproduce("toy", emulate=False, out=tmp_path)
    d = json.loads(next(tmp_path.rglob("report.json")).read_text())
    assert d["ran"]["git"] == {"commit": "at-start", "dirty": False}


def _direction(values, lower_bounds=False) -> Headline:
    from testbed.reproduce.model import ComputedValues
    return Headline(
        id="faster", claim="A is faster than B", paper_value=1.0, unit="x", paper_source="abstract",
        setting=[SettingItem("workers", 4, "assumed", "a guess")], project=lambda over: sum(values) / len(values),
        direction="above", computed=lambda: ComputedValues(list(values), "B's steps / A's", lower_bounds,
                                                           detail={"tuned": "A: lr 0.1; B: lr 0.3"}))


@pytest.mark.parametrize("values, verdict, word", [
    ([1.3, 1.4, 1.35], "reproduced", "lies above"),
    ([0.8, 0.82, 0.77], "not_reproduced", "lies below"),
    ([0.9, 1.3, 1.1], "not_reproduced", "contains"),
])
def test_a_direction_claim_is_decided_on_the_interval_of_its_computed_values(values, verdict, word):
    r = engine.evaluate(_direction(values), None, {})
    assert r.verdict == verdict and word in r.reason
    d = r.to_dict()
    assert d["direction"] == "above" and d["computed"]["values"] == values
    assert d["computed"]["ci95"][0] <= d["computed"]["mean"] <= d["computed"]["ci95"][1]


def test_lower_bounds_decide_only_above_and_one_value_never_decides():
    assert engine.evaluate(_direction([2.0, 2.1, 1.9], True), None, {}).verdict == "reproduced"
    r = engine.evaluate(_direction([0.9, 1.3, 1.1], True), None, {})
    assert r.verdict == "not_reproduced" and "lower bounds" in r.reason
    assert engine.evaluate(_direction([3.0]), None, {}).verdict == "not_reproduced"


def test_a_direction_claim_needs_its_computed_values():
    with pytest.raises(ValueError, match="direction"):
        Headline(id="x", claim="faster", paper_value=1.0, unit="x", paper_source="s", setting=[],
                 project=lambda over: 1.0, direction="above")


def test_the_report_shows_a_direction_claims_computed_values(tmp_path):
    paper = Paper("toy", "A toy paper", "Doe et al. 2024", [_direction([1.3, 1.4, 1.35])])
    rep = engine.ReproductionReport(paper, tmp_path, True, [engine.evaluate(paper.headlines[0], None, {})], None,
                                    [], 0.0, 1.0)
    report.write(rep)
    md = (tmp_path / "report.md").read_text()
    assert "| > 1× | computed in process: 1.35×" in md and "- Tuned: A: lr 0.1; B: lr 0.3" in md
