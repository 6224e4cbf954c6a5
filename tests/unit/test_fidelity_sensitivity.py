"""Sensitivity bands over the [A]/[I] constants' ranges."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import collective_time
from testbed.fidelity.sensitivity import projection_sensitivity, sensitivity

TOFINO = load_profile("tofino1-100g")
HOST = load_profile("tor-100g-host")


def test_small_switch_allreduce_band():
    band = sensitivity(lambda p: collective_time("allreduce", "switch", 64, 4, 8, p), TOFINO)
    assert band.lo <= band.nominal <= band.hi
    # nominal 1.884 us; NIC 300..1000 ns per side swings it by 1.4 us, the pipeline by 0.6 us
    assert band.most_sensitive == "nic_latency"
    lo_nic, hi_nic = band.per_constant["nic_latency"]
    assert hi_nic - lo_nic == pytest.approx(2 * (1000e-9 - 300e-9), rel=1e-9)
    # every latency at its low end: NIC 300 ns x 2 + 1 m cable x 2 + pipeline 400 ns, no host stack
    assert band.fast_corner == pytest.approx(600e-9 + 10e-9 + 400e-9 + 2 * 338 * 8 / 100e9, rel=1e-9)
    assert band.lo == band.fast_corner and band.hi == band.slow_corner
    assert band.per_constant["reduce_rate"][0] == band.per_constant["reduce_rate"][1] == band.nominal


def test_large_ring_band_is_led_by_the_reduction_rate():
    band = sensitivity(lambda p: collective_time("allreduce", "ring", 1 << 20, 4, 8, p), HOST)
    assert band.lo <= band.nominal <= band.hi
    assert band.most_sensitive == "reduce_rate"
    at_lo, at_hi = band.per_constant["reduce_rate"]
    assert at_lo > at_hi            # a slower reduction is the slow end: corners are oriented


def test_constant_function_has_an_empty_band():
    band = sensitivity(lambda p: 1.0, TOFINO)
    assert band.lo == band.nominal == band.hi == 1.0
    assert band.most_sensitive is None and band.fast_corner is None


def test_projection_band():
    ranks = []
    for k in range(2):
        r = TraceRecorder(None, host=f"w{k}", rank=k, world=2, tdf=100.0)
        for _ in range(20):
            r.compute(0, 0, hw_s=1e-6, real_s=0)
            m = r.comm(0, 0, op="allreduce", algo="switch", values=8)
            r.waited(m)
            r.compute(0, 0, hw_s=2e-6, real_s=0)
        ranks.append((r.header, r.nodes))
    band = projection_sensitivity(ranks, TOFINO, world=64)
    assert band.lo < band.nominal < band.hi
    assert band.most_sensitive == "nic_latency"
    assert band.to_dict()["per_constant"]["nic_latency"][0] == band.per_constant["nic_latency"][0]
