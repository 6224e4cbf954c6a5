"""A calibrated point whose run-long network slowdown left the band is run once
more (WorkloadRuntime.retune, testbed/runner.py) at a TDF chosen by calibration's
own rule (hosts.common.calibration.retune_tdf): on the dilated network headroom x
the emulator's own slowdown, so the retried point lands in the band. Re-running at
the measured slowdown itself (no headroom) left the emulator's share on top of the
new TDF again and the retried point stayed invalid."""
from __future__ import annotations

import json

import pytest
import yaml

from hosts.common.calibration import AGREEMENT_TOLERANCE, retune_tdf
from testbed.fidelity.monitor import DEFAULT_BAND
from testbed.scenario import expand_points, load_scenario_text
from testbed.workloads.p4sgd import P4sgdRuntime

pytestmark = pytest.mark.unit

TINY = {"source": "synthetic", "kind": "dense", "samples": 96, "features": 40, "seed": 3}


def point(workload: str = ""):
    wl = {"kind": "p4sgd", "dataset": dict(TINY), "batch": 16, "micro_batch": 4, "epochs": 1}
    wl.update(yaml.safe_load("{" + workload + "}") or {})
    scn = load_scenario_text(f"name: t\ntopology: {{workers: 2}}\nworkload: {json.dumps(wl)}\n", "t.yaml")
    (p,) = expand_points(scn)
    return p


def dilated_network(tdf: float, own: float, compensation: float = 0.0) -> float:
    """What the monitor measures on the soft switch's delay line (docs/time-fidelity.md):
    the network held tdf x the hardware time, the emulator's own time (slowdown `own`)
    in series with it, less the calibrated compensation (none on a fixed-TDF retry)."""
    return tdf + own - compensation


def in_band(net_slowdown: float, tdf: float) -> bool:
    lo, hi = DEFAULT_BAND
    return lo <= net_slowdown / tdf <= hi


def fidelity(tdf: float, net_slowdown: float, dilated: bool = True, hw_train_s: float | None = 1e-4) -> dict:
    return {"tdf": tdf, "net_slowdown_p50": net_slowdown, "flags": ["dilation_mismatch"],
            "network_dilated": dilated, "hw_train_s": hw_train_s}


def test_a_retuned_dilated_point_lands_in_the_band():
    # Calibration: round 0 measured the undilated emulator at 200x, TDF = 16 x 200; the
    # compensation took that share off. Over the whole run the emulator was 10x slower
    # (other work on the shared cores): the point left the band.
    own_cal, own_run = 200.0, 2000.0
    tdf0 = 16 * own_cal
    measured = dilated_network(tdf0, own_run, compensation=own_cal)
    assert not in_band(measured, tdf0)
    p = point("network_headroom: auto")
    assert p.scenario.workload.calibrated
    retry = P4sgdRuntime().retune(p, fidelity(tdf0, measured))
    assert retry is not None and not retry.scenario.workload.calibrated
    tdf1 = retry.scenario.workload.time_scale
    # the retry runs at a fixed TDF, its network dilated to it with no compensation
    assert in_band(dilated_network(tdf1, own_run), tdf1), (tdf0, measured, tdf1)
    # "auto": the validity rule's agreement bound, the emulator's own
    # slowdown / 0.15 (the retry has no compensation: the bound counts none)
    assert tdf1 == pytest.approx((measured - tdf0) / AGREEMENT_TOLERANCE, rel=0.05)
    # a fixed headroom is the workload's: half of it, half the TDF (one rule, calibration's)
    full = P4sgdRuntime().retune(point("network_headroom: 16.0"), fidelity(tdf0, measured))
    half = P4sgdRuntime().retune(point("network_headroom: 8.0"), fidelity(tdf0, measured))
    assert full.scenario.workload.time_scale == pytest.approx(16 * (measured - tdf0), rel=0.05)
    assert half.scenario.workload.time_scale == pytest.approx(full.scenario.workload.time_scale / 2, rel=0.05)
    assert in_band(dilated_network(half.scenario.workload.time_scale, own_run), half.scenario.workload.time_scale)


def test_undilated_points_retune_to_the_measured_slowdown():
    # Calibration's undilated rule: the TDF is the network's own slowdown.
    retry = P4sgdRuntime().retune(point(), fidelity(300.0, 612.34, dilated=False))
    assert retry.scenario.workload.time_scale == 612.0


def test_no_retry_where_it_cannot_help_or_would_outrun_the_deadline():
    rt, p = P4sgdRuntime(), point("timeout_s: 10.0, network_headroom: auto")
    # a dilated network faster than its TDF: the emulator is not what is slow
    assert rt.retune(p, fidelity(3000.0, 2000.0)) is None
    # 3000 + 1000: retry at 1000 / 0.15 = 6700; 2 ms of hardware time x 6700 = 13 s > timeout_s 10 s
    assert rt.retune(p, fidelity(3000.0, 4000.0, hw_train_s=2e-3)) is None
    assert rt.retune(p, fidelity(3000.0, 4000.0, hw_train_s=1e-4)).scenario.workload.time_scale == 6700.0
    # within the band, or fixed TDF: nothing to retune
    assert rt.retune(p, {**fidelity(3000.0, 4000.0), "flags": []}) is None
    fixed = point("time_scale: 500.0")
    assert not fixed.scenario.workload.calibrated and rt.retune(fixed, fidelity(500.0, 900.0)) is None


def first_calibrated_point(path: str):
    from testbed.scenario import load_scenario  # noqa: PLC0415
    pts = [p for p in expand_points(load_scenario(path)) if p.scenario.workload.calibrated]
    assert pts, f"{path}: no calibrated point"
    return pts[0]


@pytest.mark.parametrize("path", ["scenarios/phub/workers.yaml", "scenarios/lhc/throughput.yaml",
                                  "scenarios/easgd/weak_scaling.yaml", "scenarios/torch/lenet.yaml"])
def test_workloads_whose_calibration_trains_are_not_retried(path):
    """Their calibration rounds train (the weights move): a fixed-TDF retry, without them,
    would train fewer iterations than the first attempt (a retried PHub point ended at
    other weights than the wide PS at the same seed), so the one rule makes no retry."""
    from testbed.workloads.base import get_runtime  # noqa: PLC0415
    p = first_calibrated_point(path)
    assert p.scenario.workload.at_fixed_tdf(1000.0) is None
    fid = {**fidelity(3000.0, 4000.0), "hw_iter_s": 1e-3}
    assert get_runtime(p.scenario.workload.kind).retune(p, fid) is None


def test_the_deadline_of_a_retry_is_the_workloads():
    """retry_fits: the default is calibration's own refusal (the projection's hardware
    iteration x the TDF within ITERATION_WALL_S); P4SGD's, timeout_s over hw_train_s."""
    from testbed.workloads.calibrated import ITERATION_WALL_S  # noqa: PLC0415
    wl = first_calibrated_point("scenarios/lhc/throughput.yaml").scenario.workload
    assert wl.retry_fits(1000.0, {"hw_iter_s": ITERATION_WALL_S / 1000.0})
    assert not wl.retry_fits(1000.0, {"hw_iter_s": 1.01 * ITERATION_WALL_S / 1000.0})
    assert not wl.retry_fits(1000.0, {"hw_iter_s": None})


def test_shadowsync_is_not_retried_at_a_fixed_tdf():
    """Its hosts dilate the network only while calibrating: a fixed-TDF retry would run
    undilated, so none is made."""
    from testbed.workloads.base import get_runtime  # noqa: PLC0415
    p = first_calibrated_point("scenarios/shadowsync/throughput.yaml")
    assert get_runtime("shadowsync").retune(p, {**fidelity(3000.0, 4000.0), "hw_iter_s": 1e-4}) is None


def test_a_point_with_impaired_links_is_not_retried():
    """Calibration holds impairments off; the run-long slowdown includes what loss or
    delay costs, and a TDF chosen from it would dilate that cost away."""
    base = point("network_headroom: auto")
    assert P4sgdRuntime().retune(base, fidelity(3000.0, 4000.0)) is not None
    for links in ({"loss_pct": 5.0}, {"delay_ms": 1.0}, {"hosts": {"w2": {"loss_pct": 1.0}}}):
        scn = base.scenario.model_copy(update={"links": base.scenario.links.model_validate(
            {**base.scenario.links.model_dump(), **links})})
        p = base.__class__(**{**base.__dict__, "scenario": scn})
        assert P4sgdRuntime().retune(p, fidelity(3000.0, 4000.0)) is None, links
