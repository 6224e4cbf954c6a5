"""EASGD's time machinery (hosts/easgd/timing.py, the workload's hardware times, the
round-trip agreement in hosts/common/calibration.py): exact values worked by hand."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from hosts.common import calibration as cal
from hosts.common.config import ConfigError
from hosts.easgd.config import MasterConfig
from hosts.easgd.timing import update_hw_s
from testbed.scenario import ScenarioError, load_scenario_text

pytestmark = pytest.mark.unit


def test_round_trip_agreement_takes_the_median_slowdown_and_the_worst_compute():
    # two workers, three round trips each (seconds), hardware round trip 1 ms
    w0 = cal.encode_messages([0.2, 0.4, 0.3], compute_ratio=10.0, rank=0, world=2)
    w1 = cal.encode_messages([0.5, 0.1, 0.6], compute_ratio=40.0, rank=1, world=2)
    assert w0.size == cal.messages_agreement_size(3, 2) == 10
    tdf, why = cal.decide_messages(w0 + w1, 3, 2, 1e-3, fallback=7.0)
    # median of {0.1 .. 0.6} s = 0.35 s -> 350; compute: max(10, 40) x headroom 2 = 80
    assert why["tdf_net"] == pytest.approx(350.0)
    assert why["tdf_cmp"] == pytest.approx(80.0)
    assert tdf == 350.0 and why["limited_by"] == "network"
    # no measured trip and no compute ratio: the fallback
    assert cal.decide_messages(np.zeros(10), 3, 2, 1e-3, fallback=7.0)[0] == 7.0


def test_master_update_time_is_one_memory_pass_per_vector():
    # V100: 900 GB/s x 0.7; elastic = 4 vectors of 4 B per value, plus one 5 us launch
    got = update_hw_s({"type": "v100"}, 1000, "elastic")
    assert got == pytest.approx(5e-6 + 4 * 4 * 1000 / (900e9 * 0.7))
    assert update_hw_s({"type": "knl", "hbm_efficiency": 0.5, "launch_s": 0.0}, 1000, "msgd") == \
        pytest.approx(5 * 4 * 1000 / (400e9 * 0.5))
    with pytest.raises(ValueError, match="modeled device"):
        update_hw_s({"type": "cpu"}, 10, "sgd")


def test_master_round_trip_is_two_messages_and_the_update():
    from testbed.fidelity.constants import load_profile
    from testbed.fidelity.network_model import collective_time, message_time
    from testbed.workloads.easgd import hw_op_s, update_hw_s as wl_update
    scn = load_scenario_text("name: t\nworkload: {kind: easgd, variant: async_easgd}\n", "t.yaml")
    wl, prof = scn.workload, load_profile("tor-100g-host")
    assert hw_op_s(wl, 5000, 4) == pytest.approx(2 * message_time(20000, prof) + wl_update(wl, 5000))
    sync = load_scenario_text("name: t\nworkload: {kind: easgd, variant: sync_easgd, collective: ring}\n", "t.yaml")
    assert hw_op_s(sync.workload, 5000, 4) == pytest.approx(collective_time("allreduce", "ring", 5000, 4, 4, prof))


def test_time_scale_auto_is_the_default_and_bad_values_fail_with_the_field():
    scn = load_scenario_text("name: t\nworkload: {kind: easgd}\n", "t.yaml")
    assert scn.workload.calibrated and scn.workload.time_scale == 200.0
    fixed = load_scenario_text("name: t\nworkload: {kind: easgd, device: {type: knl, time_scale: 500}}\n", "t.yaml")
    assert not fixed.workload.calibrated and fixed.workload.time_scale == 500.0
    with pytest.raises(ScenarioError, match="time_scale"):
        load_scenario_text("name: t\nworkload: {kind: easgd, device: {type: v100, time_scale: fast}}\n", "t.yaml")
    cpu = load_scenario_text("name: t\nworkload: {kind: easgd, device: {type: cpu}}\n", "t.yaml")
    assert not cpu.workload.calibrated


def test_master_config_rejects_a_bad_timing_block():
    base = {"host": "master", "ip": "10.0.0.9", "port": 48000, "workers": [{"name": "w1", "ip": "10.0.0.1"}],
            "servers": 1, "connect_timeout_s": 5.0, "timeout_s": 5.0, "start_at": None, "out": "m.jsonl",
            "snapshots": "c.npz", "trace": None,
            "timing": {"time_scale": 100.0, "update_hw_s": 1e-5, "calibration": {"rounds": 2, "iterations": 1}}}
    assert MasterConfig.parse(base, "m.json").timing["calibration"] == {"rounds": 2, "iterations": 1}
    bad = dict(base, timing={"time_scale": 100.0, "update_hw_s": 0, "calibration": None})
    with pytest.raises(ConfigError, match="timing"):
        MasterConfig.parse(bad, "m.json")


def test_calibration_compute_input_is_the_worst_step_and_the_master_has_a_slot():
    from hosts.easgd.timing import master_agreement, worst_ratio
    # the worst of three steps of 1 ms modeled: 50 ms real -> 50 (the mean, 20, hid it)
    assert worst_ratio([0.005, 0.005, 0.05], 1e-3) == pytest.approx(50.0)
    assert worst_ratio([], 1e-3) is None
    # two workers + the master (3 parties), three round trips each, hardware trip 1 ms
    w0 = cal.encode_messages([0.2, 0.4, 0.3], compute_ratio=10.0, rank=0, world=3)
    w1 = cal.encode_messages([0.5, 0.1, 0.6], compute_ratio=40.0, rank=1, world=3)
    m = master_agreement(w0.size, 2, 300.0)      # the master's update: 300 x modeled at worst
    assert m.size == w0.size == cal.messages_agreement_size(3, 3) == 15
    assert np.count_nonzero(m[:9]) == 0           # no round trips of its own
    tdf, why = cal.decide_messages(w0 + w1 + m, 3, 3, 1e-3, fallback=7.0)
    # network: median of {0.1 .. 0.6} s = 350 (the master's zero slots ignored); compute:
    # max(10, 40, 300) x headroom 2 = 600 -> the master's update decides
    assert why["tdf_net"] == pytest.approx(350.0)
    assert why["tdf_cmp"] == pytest.approx(600.0) and tdf == 600.0 and why["limited_by"] == "compute"
    with pytest.raises(ValueError, match="2 workers"):
        master_agreement(w0.size + 1, 2, 300.0)


OP_S, HW_OP_S = 0.004, 1e-5       # a stand-in exchange's time; its hardware time


class StandInMaster:
    """A one-worker master link (hosts/easgd/worker.py MasterLink): a round trip lasts OP_S
    (trip k: stall[k], an exchange that stalled); the agreement adds nothing of its own;
    the TDFs the worker tells are kept."""

    def __init__(self, stall: dict[int, float]):
        self.stall, self.trips, self.told = stall, 0, []

    def wait_turn(self):
        pass

    def send(self, payload):
        pass

    def recv(self, n):
        import torch
        time.sleep(self.stall.get(self.trips, OP_S))
        self.trips += 1
        return torch.zeros(n)

    def agree(self, vec):
        return vec.astype(np.float64)

    def tell_tdf(self, tdf):
        self.told.append(tdf)


class StandInAllreduce(StandInMaster):
    """A one-worker collective (world 1) for the sync variants: the sum is the input,
    after OP_S (call k: stall[k]); its agreement allreduce counts as a call."""

    def allreduce(self, t):
        time.sleep(self.stall.get(self.trips, OP_S))
        self.trips += 1
        return t.clone()

    def barrier(self):
        pass


@pytest.mark.parametrize("variant", ["master", "sync"])
def test_a_round_whose_exchange_stalled_is_refused_with_what_it_measured(tmp_path, variant):
    """One stalled exchange in an undilated round reads as an emulator thousands of times
    slower; the TDF it picks, at which one iteration on the hardware (a local gradient
    and one exchange) would outrun the wall time the point allows one, is refused at
    once, naming the op times and the budget; a master variant's worker tells the master
    (REFUSED_TDF), which then refuses too. Without the stall it calibrates."""
    from hosts.easgd.model import Task
    from hosts.easgd.timing import REFUSED_TDF, calibrate_master, calibrate_sync, open_runtime
    cc = {"rounds": 2, "iterations": 1, "hw_op_s": HW_OP_S, "iteration_wall_s": 1.0}

    def calibrate(where, link) -> tuple[dict, float]:
        """(the calibration record, one iteration's modeled compute)"""
        tcfg = {"host": "w1", "role": "worker", "rank": 0, "world": 1, "collective": "ring",
                "peers": [{"name": "w1", "ip": "127.0.0.1"}], "ps": None, "port": 5000,
                "master_addr": "127.0.0.1", "master_port": 5060, "gloo_ifname": None, "script": "x.py",
                "args": [], "batch_size": 8, "seed": 1, "device": {"type": "v100", "time_scale": 200.0},
                "straggler": None, "start_at": None, "connect_timeout_s": 5, "timeout_s": 5,
                "out": str(where / "w1.jsonl"), "trace": None, "ina": None}
        rt = open_runtime(tcfg, 2)
        task = Task(1, {"c1": 4, "c2": 8, "hidden": 16}, 0, 1, 8, {"source": "digits"})
        rt.device.profile(task.model, task.sample())
        task.gradient(task.weights(), next(task.batches()))      # autograd's first-call cost: not the device's
        try:
            if variant == "master":
                return calibrate_master(rt, link, task, cc, None), rt.device.hw_time(8)
            rt._coll = link
            return calibrate_sync(rt, task, cc, None), rt.device.hw_time(8)
        finally:
            rt.writer.close()

    stand_in = StandInMaster if variant == "master" else StandInAllreduce
    link = stand_in({})
    record, compute_s = calibrate(tmp_path / "ok", link)
    step = compute_s + HW_OP_S                                                # a gradient and an exchange
    assert len(record["rounds"]) == 2 and record["tdf"] * step < 1.0          # 4 ms / 10 us: TDF ~400
    assert link.told == ([r["tdf_out"] for r in record["rounds"]] if variant == "master" else [])
    link = stand_in({0: 0.5})                                                 # TDF ~50,000: 3.5 s an iteration
    with pytest.raises(cal.CalibrationRefused) as e:
        calibrate(tmp_path / "stalled", link)
    msg = str(e.value)
    assert re.search(r"calibration round 0 chose TDF [5-9]\d{4} ", msg), msg
    assert f"one step of {step * 1e3:.4g} ms" in msg and "1 op(s) took 0.5" in msg and "beyond the 1 s" in msg
    assert link.told == ([REFUSED_TDF] if variant == "master" else [])
    assert REFUSED_TDF < cal.MIN_TDF                                          # never a TDF to run at
