"""time_scale auto for ShadowSync (hosts/shadowsync/timing.py, the AGREE round on the
embedding PS, the workload's blocks): pure parts, no processes."""
from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

from hosts.common.tcp import NetError
from hosts.shadowsync.servers import Agreement
from hosts.shadowsync.timing import Shared
from testbed.scenario import load_scenario_text
from testbed.workloads import shadowsync as ss

pytestmark = pytest.mark.unit


def test_agreement_returns_every_trainers_sum_round_after_round():
    ag, out = Agreement(3), {}

    def trainer(k):
        out[k] = [ag.add(np.full(4, float(k + 10 * r)), f"w{k}", 10.0).tolist() for r in range(2)]
    ts = [threading.Thread(target=trainer, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(out[k] == [[3.0] * 4, [33.0] * 4] for k in range(3))


def test_agreement_refuses_a_second_vector_and_names_a_missing_trainer():
    ag = Agreement(2)
    with pytest.raises(NetError, match="1 of 2 trainers"):
        ag.add(np.zeros(2), "w1", 0.05)
    with pytest.raises(NetError, match="w1 sent two AGREE vectors"):
        ag.add(np.zeros(2), "w1", 0.05)


def test_calibration_rounds_come_before_the_measured_iterations():
    sh = Shared(mp.get_context("fork"), {"rounds": 2, "iterations": 3, "lookup_hw_s": [1e-6]}, 2, 400.0)
    assert sh.iterations == 6 and sh.measuring.value == 0 and sh.tdf.value == 400.0
    assert [i for i in range(10) if sh.round_end(i)] == [2, 5]
    assert [i for i in range(10) if sh.last_round(i)] == [5]
    plain = Shared(mp.get_context("fork"), None, 2, 400.0)
    assert plain.iterations == 0 and plain.measuring.value == 1 and not plain.round_end(0)


BASE = """
name: t
topology: {kind: star, workers: 2}
workload:
  kind: shadowsync
  algorithm: ma
  device: %s
"""


def test_time_scale_auto_gives_the_hosts_a_start_and_the_lookup_times():
    wl = load_scenario_text(BASE % "{type: v100, time_scale: auto}", "t.yaml").workload
    assert wl.calibrated and wl.device_spec()["time_scale"] == ss.CALIBRATION_START
    hw = ss.lookup_hw_s(wl)
    assert len(hw) == 1 and 0 < hw[0] < 1e-3
    two = load_scenario_text(BASE % "{type: v100, time_scale: auto}" + "  embedding_servers: 2\n", "t.yaml").workload
    assert len(ss.lookup_hw_s(two)) == 2 and max(ss.lookup_hw_s(two)) < hw[0]     # 13 tables each, not 26
    assert ss.network_dilation(wl, {}, 2) is None                     # no soft switch: nothing to dilate
    nd = ss.network_dilation(wl, {"dilation_control": ["/x/dilation.json"]}, 2)
    assert nd["headroom"] == 16.0 and nd["hw_op_s"] >= hw[0]
    fixed = load_scenario_text(BASE % "{type: v100, time_scale: 400}", "t.yaml").workload
    assert ss.network_dilation(fixed, {"dilation_control": ["/x"]}, 2) is None


def test_auto_on_the_measured_cpu_is_refused():
    from testbed.scenario.loader import ScenarioError  # noqa: PLC0415
    with pytest.raises(ScenarioError, match="time_scale auto needs a modeled device"):
        load_scenario_text(BASE % "{type: cpu, time_scale: auto}", "t.yaml")


def test_lookups_are_timed_as_each_trainers_own_round_trips():
    """Two trainers whose lookups drift apart (one every 10 ms, one every 13 ms), each
    1 ms long except a 0.6 s stall on the first: the TDF follows the 1 ms lookups. The
    collective statistic (last submit to completion across trainers) clipped every
    later lookup to zero and took its TDF from the stall (590,000 in a CI run)."""
    from hosts.shadowsync.timing import Round  # noqa: PLC0415
    hw = 1e-6
    ctx = mp.get_context("fork")

    def spans(period):
        out = [(k * period, k * period + 1e-3) for k in range(12)]
        out[0] = (0.0, 0.6)
        return out
    vectors, tdfs = {}, {}
    for rank in (1, 0):
        sh = Shared(ctx, {"rounds": 2, "iterations": 6, "lookup_hw_s": [hw]}, 1, 100.0)
        sh.ratio[0] = 0.0
        rnd = Round(sh, None, rank, 2)

        def agree(v, rank=rank):
            vectors[rank] = v
            return v if rank == 1 else v + vectors[1]
        tdfs[rank] = rnd.decide(spans(0.010 if rank == 0 else 0.013), agree)
    assert tdfs[0] == pytest.approx(1e-3 / hw, rel=0.01)
    assert rnd.c.rounds[0]["tdf_net"] == pytest.approx(1000.0, rel=0.01)
