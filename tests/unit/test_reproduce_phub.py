"""testbed reproduce phub: the projections at the paper's setting come from the
project's models (layer profiles, the DNN device formula, the shared network model
on the cloud profiles, PHub's server model), move with every assumed constant,
the cloud profiles are checked against published measurements, the emulated
extractor keeps valid points only, and the report has every field."""
from __future__ import annotations

import json
import math

import pytest

from testbed.fidelity.constants import UNCERTAIN_TAGS, load_profile
from testbed.reproduce import engine, validation
from testbed.reproduce.measurements import cloud
from testbed.reproduce.papers import phub

pytestmark = pytest.mark.unit

PAPER = phub.PAPER


def _headline(hid: str):
    return next(h for h in PAPER.headlines if h.id == hid)


def test_the_paper_declares_its_abstract_numbers_with_sources():
    ids = {h.id: h for h in PAPER.headlines}
    assert ids["speedup_sysml18"].paper_value == 3.8 and "1801.09805" in ids["speedup_sysml18"].paper_source
    assert ids["speedup_socc18"].paper_value == 2.7 and "1805.07891" in ids["speedup_socc18"].paper_source
    assert ids["throughput_per_dollar"].paper_value == 25.0 and ids["throughput_per_dollar"].unit == "%"
    for h in PAPER.headlines:
        assert h.setting and h.constants and h.regimes and h.profiles
        for item in h.setting:
            assert item.status in ("verified", "assumed") and item.source.strip()
        for c in h.constants:
            assert c.lo <= c.nominal <= c.hi and c.source.strip() and c.unit.strip()
        assert not h.emulated_applies          # the emulation runs 4 workers at 1 % size
        assert {"cloud-10g", "cloud-25g"} <= set(h.profiles)
    # no price is sourced: the PBox's price is an assumption with a wide range
    box = next(c for c in ids["throughput_per_dollar"].constants if c.name == "pbox_cost_per_worker")
    assert box.hi / box.lo >= 4


def test_without_communication_an_iteration_is_the_device_models_compute():
    from hosts.dnn.device import DEFAULT_EFFICIENCY, DEFAULT_HBM_EFFICIENCY, DEFAULT_LAUNCH_S, HBM_BPS, PEAK_FLOPS
    from hosts.phub.profiles import get_profile
    prof = get_profile("resnet50")
    rate = PEAK_FLOPS["v100"]["fp32"] * DEFAULT_EFFICIENCY
    mem = HBM_BPS["v100"] * DEFAULT_HBM_EFFICIENCY
    # forward + backward: 3 x FLOPs, 3 x activations (in + out, fp32), 3 x weights (read; read + dW written)
    expect = sum(3 * (x.flops * 32 / rate + 4 * (32 * (x.in_values + x.out_values) + x.params) / mem
                      + DEFAULT_LAUNCH_S) for x in prof.layers)
    assert phub.GPU.nominal == pytest.approx(rate / 1e12, rel=1e-3)
    assert phub.GPU_MEM.nominal == pytest.approx(mem / 1e9, rel=1e-3)
    over = {"gpu_tflops": rate / 1e12, "gpu_mem_gbs": mem / 1e9, "workers": 1}
    for system in ("phub", "sharded_ps", "ring"):
        assert phub.iteration_s(system, "resnet50", over) == pytest.approx(expect, rel=1e-9)
    for system in ("phub", "sharded_ps", "ring"):     # communication only adds
        assert phub.iteration_s(system, "resnet50") > expect


def test_a_fully_connected_layers_backward_pays_its_weight_traffic_per_batch():
    """fc6 of AlexNet (37.8 M parameters): its backward reads the weights and writes the
    weight gradient once per batch, so even at batch 1 it takes at least 2 x 4 B x params
    over the memory bandwidth; and the weight traffic does not grow with the batch."""
    fc6 = next(i for i, x in enumerate(phub._layers("alexnet")) if x.name == "fc6")
    params = phub._layers("alexnet")[fc6].params
    mem = phub.GPU_MEM.nominal * 1e9
    fast = {"gpu_tflops": 1e6}                     # FLOPs free: what is left is memory and launches
    one = phub.compute_times("alexnet", phub._c({**fast, "batch_per_worker": 1}))
    assert one[1][fc6] >= 2 * 4 * params / mem
    assert one[0][fc6] >= 4 * params / mem        # forward reads them
    many = phub.compute_times("alexnet", phub._c({**fast, "batch_per_worker": 64}))
    x = phub._layers("alexnet")[fc6]               # 63 more samples add their activations only (+2 %)
    assert many[1][fc6] - one[1][fc6] == pytest.approx(2 * 4 * 63 * (x.in_values + x.out_values) / mem, rel=1e-3)
    # at the nominal GPU and batch, the weight traffic is a large part of fc6's backward
    nominal = phub.compute_times("alexnet", phub._c({}))[1][fc6]
    flops_only = 2 * phub._layers("alexnet")[fc6].flops * phub.BATCH.nominal / (phub.GPU.nominal * 1e12)
    assert nominal >= flops_only + 2 * 4 * params / mem


def test_the_layer_formula_is_hosts_dnn_devices_and_the_emulated_workers_use_it():
    from types import SimpleNamespace

    from hosts.dnn.device import layer_phase_s
    from hosts.phub.model import ProfileModel
    assert layer_phase_s("backward", 8, 10.0, 100.0, 1000.0, 1.0, 1.0, 0.0) == 2 * 80 + 2 * 800 + 2 * 1000
    assert layer_phase_s("forward", 8, 10.0, 100.0, 1000.0, 1.0, 1.0, 0.5) == 80 + 800 + 1000 + 0.5
    with pytest.raises(ValueError, match="phase"):
        layer_phase_s("step", 8, 10.0, 100.0, 1000.0, 1.0, 1.0, 0.0)
    from hosts.dnn.device import DEFAULT_HBM_EFFICIENCY, HBM_BPS
    scale = 0.001                                  # the emulated workers' keys at 0.1 % size
    cfg = SimpleNamespace(device={"type": "v100", "time_scale": 1.0}, batch_size=32, seed=1, rank=0,
                          straggler=None)
    m = ProfileModel(cfg, {"kind": "profile", "name": "alexnet", "size_scale": scale})
    mem = HBM_BPS["v100"] * DEFAULT_HBM_EFFICIENCY
    for k, x in enumerate(phub._layers("alexnet")):
        for phase in ("forward", "backward"):
            assert m.layer_hw(k, phase) == layer_phase_s(
                phase, 32, x.flops * scale, 4.0 * (x.in_values + x.out_values) * scale, 4.0 * m.sizes[k],
                m.device.peak_flops * m.device.efficiency, mem, m.device.launch_s)
        if x.name == "fc6":                        # the scaled key's weights are read and written
            assert m.layer_hw(k, "backward") >= 2 * 4.0 * m.sizes[k] / mem


def test_bandwidth_bound_speedup_is_the_link_load_ratio():
    """With compute free, AlexNet's exchange is its three large fc layers: a colocated
    sharded PS moves 2 (N-1)/N of the model over every link at baseline efficiency,
    PHub's workers one model each way at once at PHub's: the ratio is their quotient
    (small layers' latencies add a few %)."""
    n = phub.WORKERS
    expect = (2 * (n - 1) / n / phub.NET_EFF.nominal) / (1 / phub.PHUB_NET_EFF.nominal)
    got = phub.speedup("alexnet", {"gpu_tflops": 1e6})
    assert got == pytest.approx(expect, rel=0.05)


def test_phub_server_work_is_hosts_phub_server_model():
    """With a slow PBox CPU (few cores, slow memory) PHub's iteration grows as the
    server model's modeled_key_s says, not by a second copy of it."""
    from hosts.phub.server import modeled_key_s
    few = {"pbox_cores": 8, "reduce_gbs": 5.0, "gpu_tflops": 1e6, "link_gbps": 10_000.0}
    t = phub.iteration_s("phub", "alexnet", few)
    cpu = sum(modeled_key_s(x.params, phub.WORKERS, 8, True, 5e9) for x in phub._layers("alexnet"))
    assert t >= cpu
    assert t == pytest.approx(cpu, rel=0.25)       # compute free, links 10 Tbit/s: the cores decide


def test_projections_move_with_every_constant():
    for h in PAPER.headlines:
        nominal = h.project({})
        assert math.isfinite(nominal)
        for c in h.constants:
            if c.name == "pbox_cost_per_worker":
                assert h.project({c.name: c.lo}) != h.project({c.name: c.hi})
                continue
            # "up to" is a max over models: each constant moves some model's speedup, at the
            # nominal constants or with the baseline's server CPU-bound (copies at their top)
            base = "best" if h.id != "speedup_sysml18" else "sharded_ps"
            moved = [(m, ctx) for m in phub.MODELS for ctx in ({}, {"baseline_copies": phub.COPIES.hi})
                     if phub.speedup(m, {**ctx, c.name: c.lo}, base) != phub.speedup(m, {**ctx, c.name: c.hi}, base)]
            assert moved, f"{h.id}: {c.name} moves no model"
    sysml = _headline("speedup_sysml18")
    assert sysml.project({}) == max(phub.speedup(m) for m in phub.MODELS)


def test_worse_baseline_software_raises_the_speedup():
    f = _headline("speedup_sysml18").project
    assert f({"baseline_net_efficiency": 0.4}) > f({}) > f({"baseline_net_efficiency": 1.0})
    assert f({"baseline_copies": 16.0}) > f({})
    assert f({"servers_per_worker": 0.25}) > f({})
    assert f({"pbox_bw_ratio": 0.25}) < f({})          # an under-provisioned PBox loses
    dollar = _headline("throughput_per_dollar").project
    assert dollar({"pbox_cost_per_worker": 4.0}) < dollar({}) < dollar({"pbox_cost_per_worker": 0.5})


def test_one_projection_is_fast():
    import time
    h = _headline("throughput_per_dollar")
    h.project({})
    t0 = time.perf_counter()
    h.project({"gpu_tflops": 3.0, "link_gbps": 25.0})
    assert time.perf_counter() - t0 < 1.0


def test_cloud_profiles_are_sourced_and_validated():
    for name in ("cloud-10g", "cloud-25g"):
        prof = load_profile(name)
        for c in prof.constants.values():
            assert c.source.strip() and c.tag in ("V", "D", "A", "I")
            if c.tag in UNCERTAIN_TAGS:
                assert c.range is not None
        ours = [m for m in cloud.MEASUREMENTS if m.model == name]
        assert len(ours) >= validation.MIN_MEASUREMENTS
        assert not any("phub" in m.source.lower() or "1801.09805" in m.source for m in ours)
    assert load_profile("cloud-25g")["link_rate"] == 2.5 * load_profile("cloud-10g")["link_rate"]
    rows = {r["id"]: r for r in validation.validation_rows(["cloud-10g", "cloud-25g"])}
    for m in cloud.MEASUREMENTS:
        p = m.predict()
        assert rows[m.id]["predicted"] == pytest.approx(p)
        assert rows[m.id]["error"] == pytest.approx(p / m.published - 1)


def test_goodput_prediction_is_the_frame_arithmetic():
    prof = load_profile("cloud-10g")
    payload = prof["p2p_mtu_bytes"] - 28          # IPv4 + UDP headers
    wire = prof["p2p_mtu_bytes"] + 14 + prof["fcs_bytes"] + prof["preamble_ifg_bytes"]
    assert cloud._goodput_gbps("cloud-10g") == pytest.approx(10 * payload / wire, rel=2e-3)


def test_the_quick_scenario_set_loads_and_expands():
    assert engine.check_scenarios(PAPER, quick=True) == 9       # ResNet-50; phub, sharded_ps, wide_ps; 3 seeds
    assert engine.check_scenarios(PAPER, quick=False) == 27


def _point(label, case, rep, hw, fidelity="valid", valid=True, status="ok"):
    row = {"algorithm": case, "model": "resnet50", "hw_iter_ms": hw, "fidelity": fidelity, "valid": valid}
    return engine.PointResult(label, case, {"workload.model.name": "resnet50"}, rep, 100 + rep, status, None,
                              [row] if status == "ok" else [])


def test_the_emulated_ratio_pairs_valid_points_by_seed():
    # the paper's baseline (the sharded PS) is the one compared; the wide PS beside it is not
    pts = [_point("p0", "phub", 0, 8.0), _point("s0", "sharded_ps", 0, 12.0), _point("w0", "wide_ps", 0, 30.0),
           _point("p1", "phub", 1, 8.0, "invalid: network slowdown 1.3x", False),
           _point("s1", "sharded_ps", 1, 11.0),
           _point("p2", "phub", 2, 5.0), _point("s2", "sharded_ps", 2, 10.0, status="failed")]
    ev = phub._emulated_ratio({"cloud": engine.EmulatedRun("cloud", "x.yaml", None, pts)})
    assert ev.values == [1.5] and ev.n_points == 3
    assert any("network slowdown" in r for r in ev.invalid_reasons)
    assert any("no sharded_ps point" in r for r in ev.invalid_reasons)


def test_no_emulation_report_has_every_field(tmp_path):
    rep = engine.reproduce("phub", out=tmp_path, emulate=False)
    d = json.loads((rep.report_dir / "report.json").read_text())
    assert d["paper"] == "phub" and len(d["headlines"]) == 3
    for h in d["headlines"]:
        for key in ("id", "claim", "paper_value", "paper_source", "setting", "projected", "envelope", "emulated",
                    "verdict", "reason", "constants", "what_moves"):
            assert key in h, key
        assert h["verdict"] in ("reproduced", "within_envelope", "not_reproduced")
        assert h["envelope"][0] <= h["projected"] <= h["envelope"][1]
    assert {r["model"] for r in d["model_validation"]} >= {"cloud-10g", "cloud-25g"}
    assert (rep.report_dir / "report.md").exists()
