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
    # the other baselines' network: what the workload charges the same op
    for algo in ("dense_ring", "dense_ps"):
        assert lhc.aggregation_s(algo, 1 << 22, 0, 4, {}) == hw_op_time(LhcWorkload(algorithm=algo), 1 << 22, 4)
    from hosts.lhc.worker import topk_block_values, topk_kept
    block = topk_block_values(topk_kept(lhc.TOPK_RATIO.nominal, 1 << 22))
    assert lhc.topk_aggregation_s(1 << 22, 4, {})["allgather"] == hw_op_time(LhcWorkload(algorithm="topk_ring"),
                                                                             block, 4)
    with pytest.raises(ValueError, match="no projection"):
        lhc.aggregation_s("dense_fixed_ring", 1 << 22, 0, 4, {})


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


def test_baselines_at_the_demos_setting_recomputed_from_the_network_model():
    """Every system's projected aggregation of the demo's data, by hand from the network
    model's message time and hosts/lhc/timing.py's device, and the ratios against LHC."""
    from hosts.lhc.timing import LhcDevice
    from testbed.fidelity.constants import load_profile
    from testbed.fidelity.network_model import collective_time, message_time

    net, n, w = load_profile("tofino1-100g"), lhc.DEMO_SIZE, lhc.WORKERS
    table = engine.baseline_table(lhc.AGG_BASELINES)
    got = {r["system"]: r["seconds"][lhc.DEMO_CASE] for r in table["rows"]}
    assert list(got) == list(lhc.SYSTEMS)
    # the host ring: 2 (N-1) steps of one chunk + the reduce-scatter's (N-1) chunk reductions
    chunk = math.ceil(n / w) * 4
    ring = 2 * (w - 1) * message_time(chunk, net) + (w - 1) * chunk / net["reduce_rate"]
    assert got["dense_ring"] == pytest.approx(ring, rel=1e-12)
    assert got["dense_switch"] == collective_time("allreduce", "switch", n, 4, w, net, scale_round=True)
    assert got["dense_ps"] == collective_time("allreduce", "ps", n, 4, w, net)
    # top-k at the workload's default share: select, (N-1) ring steps of a 2k-word block, the sum
    dev = LhcDevice("gpu", sleep=False)
    k = round(0.01 * n)
    topk = (dev.hw_time("topk", {"n": n, "k": k}) + (w - 1) * message_time(8 * k, net)
            + dev.hw_time("topk_sum", {"n": n, "k": k, "world": w}))
    assert got["topk_ring"] == pytest.approx(topk, rel=1e-12)
    # LHC over the ring: LHC in the switch's codec, both rounds int32 ring allreduces, the support as nibbles
    u = lhc.demo_union({})
    p = lhc.lhc_plan(n, u)
    sw = lhc.lhc_aggregation_s(n, u, w, {})
    nibbles = -(-(n + 256) // 8)
    lhc_ring = (sw["support"] + sw["encode"] + sw["decode"] + collective_time("allreduce", "ring", nibbles, 4, w, net)
                + collective_time("allreduce", "ring", p["sketch_values"], 4, w, net))
    assert got["lhc_ring"] == pytest.approx(lhc_ring, rel=1e-12) and got["lhc_switch"] == sw["total"]
    # ratios: the system's time over LHC's; dense in-switch's is the headline's projection
    rows = {r["system"]: r for r in table["rows"]}
    for system, s in got.items():
        assert rows[system]["ratio_vs_subject"][lhc.DEMO_CASE] == pytest.approx(s / got["lhc_switch"])
    assert rows["dense_switch"]["ratio_vs_subject"][lhc.DEMO_CASE] == pytest.approx(_headline(
        "aggregation_throughput").project({}))
    assert rows["dense_ring"]["ratio_vs_also"][lhc.DEMO_CASE] == pytest.approx(ring / lhc_ring)
    # only top-k has its own constant (the kept share): its range spans its ends, the others have none
    lo, hi = rows["topk_ring"]["range_s"][lhc.DEMO_CASE]
    assert lo < got["topk_ring"] < hi and all(rows[s]["range_s"] is None for s in got if s != "topk_ring")
    assert hi == pytest.approx(lhc.topk_aggregation_s(n, w, {lhc.TOPK_RATIO.name: lhc.TOPK_RATIO.hi})["total"])


def test_iteration_baselines_add_the_same_compute_to_each_system():
    table = engine.baseline_table(lhc.ITER_BASELINES)
    assert table["cases"] == list(lhc.MODELS)
    rows = {r["system"]: r for r in table["rows"]}
    per = lhc.iteration_speedups({})
    for m in lhc.MODELS:
        assert rows["lhc_switch"]["seconds"][m] == pytest.approx(per[m]["compute_s"] + per[m]["lhc_s"])
        assert rows["dense_switch"]["ratio_vs_subject"][m] == pytest.approx(per[m]["speedup"])
    assert max(rows["dense_switch"]["ratio_vs_subject"].values()) == pytest.approx(
        _headline("iteration_speedup").project({}))


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
    # a dense gradient cannot gain: VGG19 dense (its densities' upper end) sends the support bitmap on top
    dense = lhc.iteration_speedups({lhc.VGG_CONV.name: 1.0, lhc.VGG_FC.name: 1.0})["vgg19"]
    assert dense["union_share"] == 1.0 and dense["speedup"] < 1.0


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


def _point(label, algo, repeat, agg_ms, tdf=1000.0, valid=True, hw_iter_us=None, density=0.01, model="ncf",
           n=65536):
    """A point as the engine keeps it: the runtime's summary row (summary_row) and the
    sweep's params (the throughput sweep varies the density, the iteration sweep the model)."""
    row = {"algorithm": algo, "n": n, "agg_ms": agg_ms, "iter_ms": agg_ms, "tdf": tdf,
           "hw_iter_us": hw_iter_us, "valid": valid}
    if not valid:
        row["invalid_reasons"] = ["net too slow"]
    params = {"workload.algorithm": algo, "workload.gradient.density": density, "workload.gradient.model": model}
    return engine.PointResult(label, "", params, repeat, 10 + repeat, "ok", None, [row])


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


def test_emulated_ratios_of_a_full_sweep_pair_only_the_points_at_the_checks_setting():
    """The full throughput sweep runs 5 densities per algorithm and seed, the iteration
    sweep 4 models: only density 1 % (NCF) pairs, and the description names the size
    that ran (a full run once paired the last density's points and called them 65,536 values)."""
    pts = []
    for rep in range(2):
        for d, (a, b) in {0.1: (900.0, 100.0), 0.01: (100.0, 400.0), 0.001: (20.0, 400.0)}.items():
            pts += [_point(f"l{d}{rep}", "lhc_switch", rep, a, density=d, n=262144),
                    _point(f"d{d}{rep}", "dense_switch", rep, b, density=d, n=262144)]
    ev = lhc._emulated_throughput({"throughput": engine.EmulatedRun("throughput", "x", None, pts)})
    assert ev.values == [4.0, 4.0] and ev.n_points == 2 and "262,144 values at 1% per-worker" in ev.what
    it = [_point(f"{m}{a}", a, 0, 1.0, hw_iter_us=u, model=m, n=n)
          for m, n, us in (("ncf", 159000, (50.0, 100.0)), ("vgg19", 7000, (300.0, 100.0)))
          for a, u in zip(("lhc_switch", "dense_switch"), us)]
    ev = lhc._emulated_iteration({"iteration": engine.EmulatedRun("iteration", "x", None, it)})
    assert ev.values == [2.0] and "159,000 values" in ev.what
    dup = pts + [_point("again", "lhc_switch", 0, 100.0, density=0.01)]
    with pytest.raises(ValueError, match="a second lhc_switch point of repeat 0"):
        lhc._emulated_throughput({"throughput": engine.EmulatedRun("throughput", "x", None, dup)})


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
        b = h["baselines"]
        assert [r["system"] for r in b["rows"]] == list(lhc.SYSTEMS) and b["paper_baseline"] == "dense_switch"
        dense = next(r for r in b["rows"] if r["paper_baseline"])
        assert max(dense["ratio_vs_subject"].values()) == pytest.approx(h["projected"])
    md = (rep.report_dir / "report.md").read_text()
    assert md.count("Baselines on the same data") == 2 and "| **dense_switch** |" in md


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


# -- the ranges the H100 measurement gives (testbed/reproduce/measurements/gpu_h100.py) -------------
def test_launch_and_hbm_ranges_cover_the_h100_measurement():
    from testbed.reproduce.measurements import gpu_h100
    from testbed.reproduce.measurements import lhc as codec_rows
    la, st = gpu_h100.launch(), gpu_h100.stream()
    assert (lhc.LAUNCH.lo, lhc.LAUNCH.hi) == (la.graph_per_kernel_us, la.roundtrip_us)
    assert lhc.LAUNCH.lo <= la.async_per_kernel_us <= lhc.LAUNCH.hi
    # the codec's efficiency reaches down to the least the torch port's whole codec reached, in the model's terms;
    # its upper end is above what a streaming read or copy reached on the same H100
    effs = [codec_rows.h100_codec_efficiency(name) for name in gpu_h100.codec_cases()]
    assert lhc.HBM_EFF.lo == pytest.approx(min(effs)) and max(effs) < lhc.HBM_EFF.nominal
    assert max(st.read_GBps, st.copy_GBps) / 3350 <= lhc.HBM_EFF.hi
    # the DNN's HBM efficiency is its own constant (the codec's measurement does not move a DNN layer)
    assert lhc.DNN_HBM_EFF in lhc.ITER_CONSTANTS and lhc.DNN_HBM_EFF not in lhc.AGG_CONSTANTS
    base = lhc.compute_s("ncf", {})
    assert lhc.compute_s("ncf", {lhc.HBM_EFF.name: lhc.HBM_EFF.lo}) == base
    assert lhc.compute_s("ncf", {lhc.DNN_HBM_EFF.name: lhc.DNN_HBM_EFF.lo}) > base


def _projection_rounds(case: str) -> tuple[int, int]:
    """(union, peeling rounds) the projection gives the measured case's setting: the demo's from its own
    density; a profile's at the case's n and union (the H100 ran the profiles' densities as assumed
    before lhc_density.py measured them, so the profiles' present unions are another setting)."""
    from testbed.reproduce.measurements import gpu_h100
    if case.startswith("demo"):
        n = lhc.DEMO_SIZE
        u = int(round(lhc.union_density(lhc.DEMO_DENSITY, lhc.DEMO_OVERLAP.nominal, lhc.WORKERS) * n))
    else:
        c = gpu_h100.codec_cases()[case]
        n, u = c.n, c.union
    return u, lhc.lhc_plan(n, u)["rounds"]


def test_peel_pass_share_covers_the_measured_plans_alive_passes():
    """The plans of the H100 run (make_plan's bit for bit) touch rounds x alive-share union passes when
    each round touches only the positions still alive; the projection charges its own rounds x
    peel_pass_share. The lower end covers the least ratio, rounded down to 0.01, no further."""
    from testbed.reproduce.measurements import gpu_h100
    equiv, rounds = {}, {}
    for name, c in gpu_h100.codec_cases().items():
        u, r = _projection_rounds(name)
        rounds[name] = (r, c.rounds)
        if abs(u / c.union - 1) < 0.01:          # the same union
            equiv[name] = c.alive_passes / r
    assert set(equiv) == {"ncf", "lstm", "bert", "vgg19", "demo_2^27"}
    assert lhc.PEEL_PASSES.lo <= min(equiv.values()) < lhc.PEEL_PASSES.lo + 0.01
    assert max(equiv.values()) <= lhc.PEEL_PASSES.hi
    # the round counts the constant's text quotes are these
    text = lhc.PEEL_PASSES.source
    assert f"NCF {rounds['ncf'][0]} against {rounds['ncf'][1]}" in text
    for label, name in (("BERT", "bert"), ("VGG19", "vgg19"), ("demo", "demo_2^27"), ("LSTM", "lstm")):
        assert f"{label} {rounds[name][0]}/{rounds[name][1]}" in text, label
    assert f"{lhc.PEEL_PASSES.lo:.2f} (demo) to {max(equiv.values()):.2f} (VGG19)" in text


def test_flops_efficiency_covers_the_h100_forward_backward():
    """The share of the H100's fp32 peak at which DnnDevice's step of the projection's NCF and LSTM takes
    the measured forward+backward (TF32 off): the lower end covers it, rounded down to 0.01."""
    from hosts.dnn.device import DnnDevice
    from testbed.reproduce.measurements import gpu_h100

    def equivalent(net: str, file_name: str, batch: int) -> float:
        measured = gpu_h100.fwd_bwd_ms(file_name, batch, "fp32") * 1e-3
        lo, hi = 1e-3, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            dev = DnnDevice("h100", "fp32", efficiency=mid, sleep=False)
            dev.model = lhc._dnn_profile(net)[0]
            lo, hi = (mid, hi) if dev.hw_time(batch, "step") > measured else (lo, mid)
        return lo

    eff = {"ncf": equivalent("ncf", "ncf_neumf", 65_536), "lstm": equivalent("lstm", "lstm_lm", lhc.LSTM_BATCH)}
    assert lhc.FLOPS_EFF.lo <= min(eff.values()) < lhc.FLOPS_EFF.lo + 0.01
    assert f"NCF {eff['ncf']:.2f}, LSTM {eff['lstm']:.2f}" in lhc.FLOPS_EFF.source


def test_compute_scale_states_the_h100_lower_bound():
    from hosts.lhc.profiles import get_profile
    from testbed.reproduce.measurements import gpu_h100
    for model, ms in lhc._PROFILE_MS.items():
        assert get_profile(model).compute_ms == ms
    vgg = gpu_h100.fwd_bwd_ms("vgg19", 32, "fp32") / lhc._PROFILE_MS["vgg19"]
    bert = gpu_h100.fwd_bwd_ms("bert_base", 32, "fp32") / lhc._PROFILE_MS["bert"]
    assert f"at least {vgg:.2f} and {bert:.2f} in fp32" in lhc.COMPUTE_SCALE.source
    # the range is not narrowed by a bound that holds only in fp32 (the paper's precision is not known)
    bf16 = min(gpu_h100.fwd_bwd_ms(f, 32, "bf16") / lhc._PROFILE_MS[k] for k, f in (("vgg19", "vgg19"),
                                                                                   ("bert", "bert_base")))
    assert lhc.COMPUTE_SCALE.lo < min(vgg, bert) and bf16 < lhc.COMPUTE_SCALE.nominal



def test_compact_row_is_the_compact_plan_beside_the_papers_sketch():
    """The baselines show LHC with compact (U's values) beside the paper's sketch: fewer
    values in the SUM round, no peeling, its time the compact plan's; the headline stays
    the sketch's."""
    u = lhc.demo_union({})
    sketch, compact = lhc.lhc_plan(lhc.DEMO_SIZE, u), lhc.lhc_plan(lhc.DEMO_SIZE, u, compact=True)
    assert compact["sketch_values"] == u < sketch["sketch_values"] and compact["rounds"] == 0
    got = lhc.aggregation_s("lhc_switch_compact", lhc.DEMO_SIZE, u, lhc.WORKERS, {})
    assert got == lhc.lhc_aggregation_s(lhc.DEMO_SIZE, u, lhc.WORKERS, {}, compact=True)["total"]
    assert got < lhc.aggregation_s("lhc_switch", lhc.DEMO_SIZE, u, lhc.WORKERS, {})
    row = next(r for r in lhc.AGG_BASELINES.rows if r.system == "lhc_switch_compact")
    assert row.also_vs == "lhc_switch" and f"{sketch['sketch_values']:,}" in row.how
    assert _headline("aggregation_throughput").project({}) == pytest.approx(
        lhc.dense_switch_s(lhc.DEMO_SIZE, lhc.WORKERS) / lhc.aggregation_s("lhc_switch", lhc.DEMO_SIZE, u,
                                                                            lhc.WORKERS, {}))
