"""testbed reproduce lhc: the projections at the paper's setting come from the
project's models (codec sizing and peeling, LhcDevice, the network model,
DnnDevice), move with every assumed constant, and the report has every field."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from testbed.reproduce import engine
from testbed.reproduce.papers import lhc

pytestmark = pytest.mark.unit

PAPER = lhc.PAPER


def _headline(hid: str):
    return next(h for h in PAPER.headlines if h.id == hid)


def test_the_paper_declares_both_abstract_numbers_with_sources():
    ids = {h.id: h for h in PAPER.headlines}
    assert ids["aggregation_throughput"].paper_value == 6.33 and ids["iteration_speedup"].paper_value == 3.74
    for h in PAPER.headlines:
        assert "2402.07529" in h.paper_source
        assert h.setting and h.constants and h.regimes and h.profiles
        for item in h.setting:
            assert item.status in ("verified", "assumed") and item.source.strip()
        for c in h.constants:
            assert c.lo <= c.nominal <= c.hi and c.source.strip()
        assert not h.emulated_applies          # the emulation runs scaled-down sizes


def test_union_density_is_the_generators_expectation():
    from hosts.lhc.gradients import SyntheticSource
    for density, overlap, workers in ((0.05, 0.0, 4), (0.3, 0.5, 4), (0.07, 0.5, 8), (0.05, 1.0, 4)):
        src = SyntheticSource(200_000, density, 1, overlap, seed=3)
        union = np.zeros(src.size, dtype=bool)
        for r in range(workers):
            union |= src.gradient(r, 0) != 0
        assert union.mean() == pytest.approx(lhc.union_density(density, overlap, workers), rel=0.03)


def test_full_size_plan_uses_the_codecs_own_sizes():
    """lhc_plan at a size the codec can run here gives the codec's lanes, rows and
    support words, and peeling rounds and a 2-core near a real plan's (the
    projection simulates the heaviest lanes only: measured within ~40 % here)."""
    from hosts.lhc import codec, rounds
    n = 1 << 22
    union = np.random.default_rng(5).random(n) < 0.1
    real = codec.make_plan(union)
    p = lhc.lhc_plan(n, real.union)
    assert p["support_values"] == rounds.LhcRound(4).support_words(n)
    assert p["rows"] == real.rows and p["lanes"] == real.lanes
    assert abs(p["rounds"] - len(real.rounds)) <= 0.5 * len(real.rounds)
    assert real.counters <= p["sketch_values"] <= real.payload_len + 0.01 * real.union
    compact = lhc.lhc_plan(n, real.union, compact=True)
    assert compact["sketch_values"] == real.union < p["sketch_values"] and compact["rounds"] == 0


def test_the_baseline_is_the_workloads_own_network_model():
    from testbed.workloads.lhc import LhcWorkload, hw_op_time
    wl = LhcWorkload(algorithm="dense_switch")
    assert lhc.dense_switch_s(1 << 22, 4) == hw_op_time(wl, 1 << 22, 4)


def test_codec_time_is_hosts_lhc_timing():
    from hosts.lhc.timing import LhcDevice, step_bytes
    # the projection's `passes` leaves the emulated default unchanged
    work = {"n": 1 << 20, "union": 40_000, "rounds": 17}
    assert step_bytes("decode", work) == step_bytes("decode", dict(work, passes=17))
    assert step_bytes("encode", work) == step_bytes("encode", dict(work, passes=17))
    parts = lhc.lhc_aggregation_s(1 << 24, 1 << 20, 4, {})
    p = lhc.lhc_plan(1 << 24, 1 << 20)
    dev = LhcDevice("gpu", sleep=False)
    assert parts["decode"] == pytest.approx(dev.hw_time("decode", {"n": 1 << 24, "union": 1 << 20,
                                                                   "rounds": p["rounds"]}))
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))


def test_pytorch_models_at_the_papers_size_match_the_profiles():
    from hosts.lhc.profiles import get_profile
    for model in ("ncf", "lstm"):
        _, params = lhc._dnn_profile(model)
        assert params == pytest.approx(get_profile(model).params, rel=1e-3)


def test_projections_at_the_papers_setting_move_with_every_constant():
    agg = _headline("aggregation_throughput")
    nominal = agg.project({})
    assert math.isfinite(nominal) and nominal > 0
    for c in agg.constants:
        assert agg.project({c.name: c.lo}) != agg.project({c.name: c.hi}), c.name
    # Iteration: each constant moves the model it concerns (the headline is their max).
    for c in _headline("iteration_speedup").constants:
        lo, hi = lhc.iteration_speedups({c.name: c.lo}), lhc.iteration_speedups({c.name: c.hi})
        assert any(lo[m]["speedup"] != hi[m]["speedup"] for m in lhc.MODELS), c.name
    best = lhc.iteration_speedups({})
    assert _headline("iteration_speedup").project({}) == max(r["speedup"] for r in best.values())
    # a dense gradient cannot gain: VGG19 sends the support bitmap on top of everything
    assert best["vgg19"]["union_share"] == 1.0 and best["vgg19"]["speedup"] < 1.0


def test_density_and_compact_move_the_projection_the_right_way():
    hi, lo = lhc.aggregation_ratio({}, density=0.1), lhc.aggregation_ratio({}, density=0.001)
    assert lo > hi
    assert lhc.aggregation_ratio({}, compact=True) > lhc.aggregation_ratio({})
    assert lhc.iteration_best({}, density_scale=0.05) > lhc.iteration_best({})


def test_the_quick_scenario_set_loads_and_expands():
    assert engine.check_scenarios(PAPER, quick=True) == 12      # 2 algorithms x 1 setting x 3 seeds, twice
    assert engine.check_scenarios(PAPER, quick=False) > 12


def test_repeats_draw_different_gradients():
    from testbed.scenario import load_scenario
    from testbed.scenario.sweep import repeat_seeded
    from testbed.workloads.lhc import gradient_spec
    scn = load_scenario(engine.res.PROJECT_ROOT / "scenarios/lhc/throughput.yaml")
    specs = [gradient_spec(repeat_seeded(scn, r).workload, 4) for r in range(3)]
    assert len({s["seed"] for s in specs}) == 3


def _point(label, algo, repeat, agg_ms, tdf=1000.0, valid=True, hw_iter_us=None):
    """A point as the engine keeps it: the runtime's summary row (summary_row)."""
    row = {"algorithm": algo, "n": 65536, "agg_ms": agg_ms, "iter_ms": agg_ms, "tdf": tdf,
           "hw_iter_us": hw_iter_us, "valid": valid}
    if not valid:
        row["invalid_reasons"] = ["net too slow"]
    return engine.PointResult(label, "", {"workload.algorithm": algo}, repeat, 10 + repeat, "ok", None, [row])


def test_emulated_ratios_pair_each_seed_and_leave_invalid_points_out():
    from testbed.workloads.lhc import summary_row
    row = summary_row({k: 1 for k in ("algorithm", "workers", "n", "iter_ms", "agg_ms", "net_ms", "agg_network_gbps",
                                      "dense_over_sent", "union", "core_values", "decode_errors", "exact",
                                      "valid", "hw_agg_us", "tdf")})
    assert {"algorithm", "hw_agg_us", "emu_agg_ms", "tdf", "hw_iter_us", "valid"} <= set(row)
    assert lhc._hw_agg_us(row) == 1.0           # the row's own hardware-equivalent aggregation time
    # throughput ratio = dense hardware time / LHC hardware time (agg_ms / tdf), per repeat
    pts = [_point("a0", "lhc_switch", 0, 100.0, tdf=1000), _point("d0", "dense_switch", 0, 600.0, tdf=2000),
           _point("a1", "lhc_switch", 1, 90.0), _point("d1", "dense_switch", 1, 300.0, valid=False),
           _point("a2", "lhc_switch", 2, 50.0), _point("d2", "dense_switch", 2, 100.0)]
    ev = lhc._emulated_throughput({"throughput": engine.EmulatedRun("throughput", "x", None, pts)})
    assert ev.values == [3.0, 2.0] and ev.n_points == 3
    # today's rows: hw_agg_us (the rows above: a report kept before, agg_ms / tdf)
    for p in pts:
        row = p.summaries[0]
        row["hw_agg_us"], row["emu_agg_ms"] = row["agg_ms"] * 1e3 / row["tdf"], row.pop("agg_ms")
    ev = lhc._emulated_throughput({"throughput": engine.EmulatedRun("throughput", "x", None, pts)})
    assert ev.values == [3.0, 2.0] and ev.n_points == 3
    assert any("net too slow" in r for r in ev.invalid_reasons)
    it = [_point("a0", "lhc_switch", 0, 1.0, hw_iter_us=50.0), _point("d0", "dense_switch", 0, 1.0, hw_iter_us=100.0)]
    assert lhc._emulated_iteration({"iteration": engine.EmulatedRun("iteration", "x", None, it)}).values == [2.0]


def test_reproduce_lhc_no_emulation_writes_every_field(tmp_path):
    rep = engine.reproduce("lhc", quick=True, out=tmp_path, emulate=False)
    d = json.loads((rep.report_dir / "report.json").read_text())
    assert d["paper"] == "lhc" and len(d["headlines"]) == 2
    for h in d["headlines"]:
        for key in ("id", "claim", "paper_value", "paper_source", "setting", "projected", "envelope",
                    "emulated", "verdict", "reason"):
            assert key in h
        assert h["verdict"] in ("reproduced", "within_envelope", "not_reproduced") and h["reason"]
        assert h["envelope"][0] <= h["projected"] <= h["envelope"][1]
        if h["verdict"] != "reproduced":
            assert h["what_moves"]
    assert (rep.report_dir / "report.md").exists()


def test_lstm_gradient_densities_measured():
    """The measurement behind lstm_softmax_density (1.0) and lstm_vocab_touch's
    6.7 %: hosts/dnn/lstm.py's LSTMLM, one backward of a 20x35 batch of uniform
    tokens over a 10k vocabulary (hosts/lhc/profiles.py assumes the softmax layer
    is as sparse as the embedding: a full softmax's gradient is dense)."""
    import torch
    from hosts.dnn.lstm import LSTMLM
    torch.manual_seed(0)
    m = LSTMLM(vocab=10_000, emb=32, hidden=32, layers=2)
    x, y = torch.randint(0, 10_000, (20, 35)), torch.randint(0, 10_000, (20, 35))
    torch.nn.functional.cross_entropy(m(x).reshape(-1, 10_000), y.reshape(-1)).backward()

    def rows(g):
        return (g.abs().sum(1) != 0).float().mean().item()
    assert rows(m.head.weight.grad) == lhc.LSTM_SOFTMAX.nominal == 1.0
    touched = rows(m.embed.weight.grad)
    assert touched == pytest.approx(1 - (1 - 1 / 10_000) ** 700, abs=0.005)     # 6.7 %: distinct of 700 uniform
    assert lhc.LSTM_TOUCH.lo <= touched <= lhc.LSTM_TOUCH.hi
