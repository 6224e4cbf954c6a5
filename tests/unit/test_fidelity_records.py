"""testbed.fidelity.records: the fidelity and projection records every workload writes."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import collective_time
from testbed.fidelity.records import fidelity_and_projection

TDF = 100.0
PROFILE = "tofino1-100g"


def write_point(folder, iters=10, slow=1.0, algo="switch"):
    """Two workers: compute 2 us, allreduce of 64 values at slow x TDF, waited for."""
    t_op = collective_time("allreduce", algo, 64, 4, 2, load_profile(PROFILE))
    for k in range(2):
        r = TraceRecorder(folder / f"w{k}.trace.jsonl", host=f"w{k}", rank=k, world=2, tdf=TDF)
        t = 0.0
        for _ in range(iters):
            r.compute(t, t + TDF * 2e-6, hw_s=2e-6, real_s=1e-6)
            t += TDF * 2e-6
            r.waited(r.comm(t, t + slow * TDF * t_op, op="allreduce", algo=algo, values=64))
            t += slow * TDF * t_op
        r.close()
    return 2e-6 + t_op


def test_a_valid_point_gets_both_records_and_the_summary_fields(tmp_path):
    per_iter = write_point(tmp_path)
    summary = {"valid": True, "iter_ms": 1.1 * TDF * per_iter * 1e3}    # emulated 10 % over the model
    pf = fidelity_and_projection(tmp_path, PROFILE, TDF, "demo", 10, summary, extra={"algorithm": "x"})
    fid, proj = pf.records
    assert fid["type"] == "fidelity" and fid["valid"] and summary["valid"]
    assert fid["ratio_p50"] == pytest.approx(1.0, rel=1e-9) == summary["net_ratio_p50"]
    assert proj["type"] == "projection" and proj["workload"] == "demo" and proj["workers"] == 2
    assert proj["algorithm"] == "x" and proj["emulated"] and not proj["truncated"]
    assert proj["hw_iter_ms"] == pytest.approx(per_iter * 1e3, rel=1e-9) == summary["projected_hw_iter_ms"]
    assert summary["emulated_over_projected"] == pytest.approx(1.1, rel=1e-9)
    assert summary["invalid_reasons"] == []


def test_an_emulation_off_its_own_projection_is_invalid_with_the_reason(tmp_path):
    per_iter = write_point(tmp_path)
    summary = {"valid": True, "iter_ms": 2 * TDF * per_iter * 1e3,      # emulated twice the model
               "invalid_reasons": ["the workload's own reason"]}
    pf = fidelity_and_projection(tmp_path, PROFILE, TDF, "demo", 10, summary)
    assert summary["emulated_over_projected"] == pytest.approx(2.0, rel=1e-9)
    assert not summary["valid"] and not pf.fidelity["valid"]
    assert summary["invalid_reasons"][0] == "the workload's own reason"
    assert "emulated time is 2.00x the projection of its own trace (tolerance 15%)" in summary["invalid_reasons"]
    assert "projection_disagrees" in pf.fidelity["flags"]


def test_device_failure_and_a_slow_network_are_named(tmp_path):
    write_point(tmp_path, slow=3.0)
    summary = {"valid": False}
    pf = fidelity_and_projection(tmp_path, PROFILE, TDF, "demo", 10, summary, device_reason="device over budget")
    assert not pf.fidelity["valid"] and not summary["valid"]
    assert summary["invalid_reasons"][0] == "device over budget"
    assert "dilation_mismatch" in pf.fidelity["flags"] and len(summary["invalid_reasons"]) >= 2
    assert "emulated_over_projected" not in summary                   # no iter_ms given


def test_no_traces_is_invalid_without_a_projection(tmp_path):
    summary = {"valid": True}
    pf = fidelity_and_projection(tmp_path, PROFILE, TDF, "demo", 10, summary)
    assert pf.projection is None and len(pf.records) == 1
    assert not summary["valid"] and summary["invalid_reasons"][0].startswith("no traces:")


def test_a_trace_the_projector_refuses_is_an_error_record(tmp_path):
    write_point(tmp_path, algo="ps")
    # drop rank 1's file: rank 0's "world" collectives now miss a member
    (tmp_path / "w1.trace.jsonl").unlink()
    r = TraceRecorder(tmp_path / "w1.trace.jsonl", host="w1", rank=1, world=2, tdf=TDF)
    r.compute(0.0, TDF * 1e-6, hw_s=1e-6, real_s=1e-7)
    r.close()
    summary = {"valid": True}
    pf = fidelity_and_projection(tmp_path, PROFILE, TDF, "demo", 10, summary)
    assert "never reach it" in pf.projection["error"] and pf.projected is None
    assert pf.fidelity["projection_error"] == pf.projection["error"]
    assert summary["projected_hw_iter_ms"] is None
