"""The hardware-model validation table (testbed/reproduce/validation.py, measurements/network.py,
measurements/devices.py, measurements/knl.py, measurements/lhc.py; the rows citing the project's own H100
measurement, measurements/gpu_h100.py, are tested in test_gpu_h100_measurements.py): every prediction comes
from the model, every row has a source, the
errors are what an independent recomputation gives, and the flagging rule flags what it should.

Whether a model is within ±25 % of its measurements is a finding, not a test: nothing here
asserts it."""
from __future__ import annotations

import math

import pytest

from testbed.fidelity.constants import load_profile
from testbed.reproduce import validation
from testbed.reproduce.measurements import MEASUREMENTS, Measurement
from testbed.reproduce.measurements import devices, gpu_h100, knl, lhc, network

OURS = network.MEASUREMENTS + devices.MEASUREMENTS + knl.MEASUREMENTS + lhc.MEASUREMENTS + gpu_h100.MEASUREMENTS
MODELS = sorted({m.model for m in OURS})
COVERED = ["tofino1-100g", "tor-100g-host", "device:u280", "device:glm-gpu", "device:dnn-v100", "device:dnn-a100",
           "device:dnn-h100", "device:knl", "aries-dragonfly", "device:lhc-codec-v100"]


def test_our_measurements_are_registered_and_well_formed():
    ids = [m.id for m in MEASUREMENTS]
    assert len(ids) == len(set(ids)), "measurement ids are unique"
    for m in OURS:
        assert m in MEASUREMENTS
        assert m.model in COVERED
        assert m.source.strip() and m.quantity.strip() and m.setting.strip() and m.unit.strip(), m.id
        assert m.published > 0 and math.isfinite(m.published), m.id
        assert callable(m.predict)
    assert set(MODELS) == set(COVERED)


def test_rows_recompute_the_error_from_the_prediction():
    rows = {r["id"]: r for r in validation.validation_rows(COVERED)}
    for m in OURS:
        r = rows[m.id]
        p = m.predict()
        assert p > 0 and math.isfinite(p)
        assert r["predicted"] == pytest.approx(p)
        assert r["error"] == pytest.approx(p / m.published - 1)
        assert r["within"] == (abs(r["error"]) <= validation.ERROR_TOLERANCE)


# -- the predictions are the models' own numbers (recomputed independently) ------------
def _on_wire_s(frame: int, prof) -> float:
    return (max(frame + prof["fcs_bytes"], prof["min_frame_bytes"]) + prof["preamble_ifg_bytes"]) * 8 / prof["link_rate"]


@pytest.mark.parametrize("name", ["tofino1-100g", "tor-100g-host"])
def test_network_predictions_match_the_alpha_beta_formula(name):
    prof = load_profile(name)
    l0 = (prof["host_stack_latency"] + 2 * prof["nic_latency"] + 2 * prof["cable_length"] * prof["propagation_delay"]
          + prof["switch_pipeline_latency"])
    hdr = 14 + 20 + 8
    # a one-frame message: L0 + its serialization twice (sender's link, then the switch's)
    assert network.one_way_us(name, 32) == pytest.approx((l0 + 2 * _on_wire_s(hdr + 32, prof)) * 1e6)
    # one switch more: its cable and pipeline and one more serialization; a direct cable: one switch less
    prop = prof["cable_length"] * prof["propagation_delay"]
    s_min = _on_wire_s(hdr, prof)                       # a 0-B payload: the minimum frame
    assert network.switch_increment_us(name, 0) == pytest.approx((prop + prof["switch_pipeline_latency"] + s_min) * 1e6)
    direct = prof["host_stack_latency"] + 2 * prof["nic_latency"] + prop + s_min
    assert network.direct_one_way_us(name, 0) == pytest.approx(direct * 1e6)
    assert network.round_trip_us(name, 0, 0, direct=True) == pytest.approx(2 * direct * 1e6)
    # 64 KiB streamed in MTU-sized UDP/IP datagrams
    per = int(prof["p2p_mtu_bytes"]) - 28
    full, last = divmod(65536, per)
    busy = full * _on_wire_s(hdr + per, prof) + (_on_wire_s(hdr + last, prof) if last else 0.0)
    assert network.streaming_gbps(name, 65536) == pytest.approx(65536 * 8 / busy / 1e9)


def test_network_predictions_move_with_the_profile(monkeypatch):
    base_lat = network.one_way_us("tofino1-100g", 32)
    base_bw = network.streaming_gbps("tofino1-100g", 65536)
    slower = load_profile("tofino1-100g").with_overrides({"nic_latency": 1000, "link_rate": 50})   # in the profile's units (ns, Gbit/s)
    monkeypatch.setattr(network, "_profile", lambda name: slower)
    assert network.one_way_us("tofino1-100g", 32) > base_lat + 0.7
    assert network.streaming_gbps("tofino1-100g", 65536) == pytest.approx(base_bw / 2)


def test_memory_bound_device_predictions_are_the_models_bandwidth(monkeypatch):
    from hosts.glm.devices import GpuDevice, U280Device
    u, g = U280Device(sleep=False), GpuDevice(sleep=False)
    # a 1-GiB step: the 4 launches (20 us) and the pipeline latency are under 1 % of it
    assert devices.u280_streaming_GBps() == pytest.approx(u.effective_Bps / 1e9, rel=1e-2)
    assert devices.glm_gpu_streaming_GBps() == pytest.approx(g.effective_Bps / 1e9, rel=1e-2)
    assert devices.glm_gpu_kernel_us() == pytest.approx(g.launch_s * 1e6, rel=1e-3)

    class HalfU280(U280Device):
        def __init__(self, **kw):
            super().__init__(hbm_efficiency=0.25, **kw)
    monkeypatch.setattr(devices, "U280Device", HalfU280)
    assert devices.u280_streaming_GBps() == pytest.approx(u.effective_Bps / 2e9, rel=1e-3)


def test_dnn_predictions_come_from_the_profiled_network(monkeypatch):
    from hosts.dnn import device as dnn
    rn50 = devices.model_profile("resnet50")
    # ResNet-50 at 224x224: ~4.1 G multiply-adds forward (He et al. 2016, table 1: 3.8e9 for v1;
    # v1.5 moves the stride to the 3x3 conv, ~4.1e9): the builder is the real network
    assert 7.6e9 < rn50.flops_per_sample < 8.6e9
    rx = devices.model_profile("resnext101-32x4d")
    assert 15e9 < rx.flops_per_sample < 17e9              # ~8.0 G multiply-adds (Xie et al. 2017)
    for arch, prof in (("resnet50", rn50), ("resnext101-32x4d", rx)):
        for acc, prec in (("v100", "fp32"), ("v100", "fp16"), ("a100", "tf32")):
            rate = dnn.PEAK_FLOPS[acc][prec] * dnn.DEFAULT_EFFICIENCY
            hbm = dnn.HBM_BPS[acc] * dnn.DEFAULT_HBM_EFFICIENCY
            b, k = 128, len(prof.layers)
            t = 3 * prof.flops_per_sample * b / rate + 2 * prof.bytes_per_sample * b / hbm + 3 * k * dnn.DEFAULT_LAUNCH_S
            assert devices.images_per_s(acc, prec, arch, b) == pytest.approx(b / t)

    base = devices.images_per_s("v100", "fp32", "resnet50", 112)

    class Slow(dnn.DnnDevice):
        def __init__(self, acc, prec, **kw):
            super().__init__(acc, prec, efficiency=0.2, **kw)
    monkeypatch.setattr(devices, "DnnDevice", Slow)
    assert devices.images_per_s("v100", "fp32", "resnet50", 112) < 0.55 * base


def test_u280_gemv_predictions_are_the_models_forward_phase(monkeypatch):
    from hosts.glm.devices import U280Device
    u = U280Device(sleep=False)
    for m, n in ((8192, 8192), (512, 256)):
        # float64 slice streamed once at HBM peak x efficiency, + half the pipeline latency
        expect = (m * n * 8 / u.effective_Bps + u.latency_s / 2) * 1e3
        assert devices.u280_gemv_ms(m, n) == pytest.approx(expect)
    rows = {r["id"]: r for r in validation.validation_rows(["device:u280"])}
    assert rows["device:u280:vitis-blas-gemv-8192x8192"]["predicted"] == pytest.approx(devices.u280_gemv_ms(8192, 8192))
    base = devices.u280_gemv_ms(8192, 8192)

    class HalfU280(U280Device):
        def __init__(self, **kw):
            super().__init__(hbm_efficiency=0.25, **kw)
    monkeypatch.setattr(devices, "U280Device", HalfU280)
    assert devices.u280_gemv_ms(8192, 8192) == pytest.approx(2 * base, rel=1e-3)


def test_knl_deepbench_predictions_come_from_the_knl_model(monkeypatch):
    from hosts.dnn import device as dnn
    rate = dnn.PEAK_FLOPS["knl"]["fp32"] * dnn.DEFAULT_EFFICIENCY
    launch = dnn.DEFAULT_LAUNCH_S
    # 3x3 conv, C=128 -> K=256 on 56x56 (pad 1): 2*C*9 FLOPs per output element; a step is 3x forward, 3 launches
    fwd = 2 * 128 * 9 * 256 * 56 * 56 * 16
    assert knl._knl_conv_ms(56, 56, 128, 16, 256, 3, 3, 1, 1) == pytest.approx((3 * fwd / rate + 3 * launch) * 1e3)
    # SGEMM forward: 2*M*N*K FLOPs, one launch
    assert knl._knl_gemm_ms(5124, 9124, 2560) == pytest.approx((2 * 5124 * 9124 * 2560 / rate + launch) * 1e3)
    ids = {m.id: m for m in knl.MEASUREMENTS}
    base = ids["knl-deepbench-sgemm-5124x9124x2560"].predict()
    monkeypatch.setitem(dnn.PEAK_FLOPS["knl"], "fp32", dnn.PEAK_FLOPS["knl"]["fp32"] / 2)
    assert ids["knl-deepbench-sgemm-5124x9124x2560"].predict() == pytest.approx(2 * base, rel=1e-3)
    assert ids["knl-deepbench-conv3x3-56x56x128-k256-n16"].predict() > 1.9 * (3 * fwd / rate) * 1e3


def test_lhc_codec_predictions_come_from_lhc_device(monkeypatch):
    from hosts.lhc import timing
    n = lhc.N_STREAM
    bw = timing.V100_HBM_PEAK_BPS * timing.GPU_EFFICIENCY
    support = 4 * n + n / 8
    assert lhc.support_stream_GBps() == pytest.approx(support / (timing.GPU_LAUNCH_S + support / bw) / 1e9)
    assert lhc.dense_write_GBps() == pytest.approx(4 * n / (timing.GPU_LAUNCH_S + 4 * n / bw) / 1e9)
    assert lhc.empty_kernel_us() == pytest.approx(timing.GPU_LAUNCH_S * 1e6)
    rows = {r["id"]: r for r in validation.validation_rows(["device:lhc-codec-v100"])}
    assert rows["lhc-codec:support-vs-read-stream"]["predicted"] == pytest.approx(lhc.support_stream_GBps())
    base_bw, base_launch = lhc.support_stream_GBps(), lhc.empty_kernel_us()
    # the model's constants move: half the HBM peak halves the bandwidth; a 10-us launch doubles the empty kernel
    monkeypatch.setattr(timing, "V100_HBM_PEAK_BPS", timing.V100_HBM_PEAK_BPS / 2)
    assert lhc.support_stream_GBps() == pytest.approx(base_bw / 2, rel=1e-2)
    defaults = list(timing.LhcDevice.__init__.__defaults__)
    defaults[3] = 2 * timing.GPU_LAUNCH_S          # (type, time_scale, efficiency, launch_s, sleep)
    monkeypatch.setattr(timing.LhcDevice.__init__, "__defaults__", tuple(defaults))
    assert lhc.empty_kernel_us() == pytest.approx(2 * base_launch)


# -- coverage and the flagging rule ----------------------------------------------------------
@pytest.mark.parametrize("model", ["tofino1-100g", "tor-100g-host", "device:glm-gpu", "device:dnn-v100",
                                   "device:dnn-a100", "device:dnn-h100", "device:u280", "device:knl",
                                   "aries-dragonfly", "device:lhc-codec-v100"])
def test_models_with_three_or_more_published_measurements(model):
    assert sum(m.model == model for m in OURS) >= validation.MIN_MEASUREMENTS
    rows = validation.validation_rows([model])
    assert sum(r["published"] is not None for r in rows) >= validation.MIN_MEASUREMENTS
    assert "fewer than" not in validation.flagged_profiles(rows).get(model, "")


@pytest.mark.parametrize(("model", "n_sources"), [("device:u280", 3), ("device:lhc-codec-v100", 4),
                                                  ("device:knl", 2)])
def test_models_once_short_count_their_sources(model, n_sources):
    """u280, knl and the LHC codec had 2, 2 and 0 measurements. Their rows now come from 3, 2 and 4
    different sources (KNL: Keuper & Pfreundt's two networks and DeepBench's three kernels; no
    third KNL source could be read; the codec: three publications and the project's own H100 run)."""
    sources = {m.source.split(",")[0] for m in OURS if m.model == model}
    assert len(sources) == n_sources, sources


def test_models_short_of_measurements_are_flagged_for_it():
    rows = validation.validation_rows(COVERED)
    flagged = validation.flagged_profiles(rows)
    for model in COVERED:
        n = sum(r["model"] == model and r["published"] is not None for r in rows)
        says_short = "fewer than" in flagged.get(model, "")
        assert says_short == (n < validation.MIN_MEASUREMENTS), model


def _fake(model: str, published: float, predicted: float, i: int) -> Measurement:
    return Measurement(id=f"{model}:{i}", model=model, quantity="q", setting="s", published=published,
                       unit="u", source="a test", predict=lambda: predicted)


def test_flagging_rule(monkeypatch):
    good = [_fake("fake-good", 10.0, 10.0 * (1 + d), i) for i, d in enumerate((0.0, 0.2, -0.25))]
    off = [_fake("fake-off", 10.0, 10.0, 0), _fake("fake-off", 10.0, 11.0, 1), _fake("fake-off", 10.0, 20.0, 2)]
    few = [_fake("fake-few", 10.0, 10.0, 0), _fake("fake-few", 10.0, 10.0, 1)]
    monkeypatch.setattr(validation, "MEASUREMENTS", good + off + few)
    rows = validation.validation_rows(["fake-good", "fake-off", "fake-few", "fake-none"])
    flagged = validation.flagged_profiles(rows)
    assert "fake-good" not in flagged
    assert "1 of 3" in flagged["fake-off"] and "fake-off:2 +100%" in flagged["fake-off"]
    assert "fewer than 3" in flagged["fake-few"] and "beyond" not in flagged["fake-few"]
    assert "only 0" in flagged["fake-none"]
    table = validation.markdown_table(rows)
    assert table.count("beyond ±25%") == 1 and "(no published measurement)" in table


def test_markdown_entry_point_prints_every_row(capsys):
    assert validation.main(["device:u280", "tofino1-100g"]) == 0
    out = capsys.readouterr().out
    n = sum(m.model in ("device:u280", "tofino1-100g") for m in MEASUREMENTS)
    assert out.count("\n| device:u280 |") + out.count("\n| tofino1-100g |") == n


def test_a_flagged_model_names_its_three_worst_misses_and_counts_the_rest():
    from testbed.reproduce.validation import flagged_profiles
    rows = [{"model": "m", "id": f"m:{i}", "published": 1.0, "within": i >= 5, "error": e}
            for i, e in enumerate([0.3, -0.9, 0.5, 2.0, -0.4, 0.1, 0.0])]
    why = flagged_profiles(rows)["m"]
    assert why == "5 of 7 measurements beyond ±25%, worst: m:3 +200%, m:1 -90%, m:2 +50% and 2 more"
