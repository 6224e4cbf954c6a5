"""Time dilation of a torch worker (hosts/dnn/timing.py) with a stand-in collective:
calibration on the script's first iterations, the probe for scripts without
report.compute, a fixed TDF dilating the network, and the workload's tables."""
from __future__ import annotations

import json
import re
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from hosts.common.network_dilation import ack_path  # noqa: E402
from hosts.dnn.config import TorchWorkerConfig  # noqa: E402
from hosts.dnn.runtime import Runtime  # noqa: E402

pytestmark = pytest.mark.unit

OP_S = 0.004          # the stand-in network's time per op
HW_S = 1e-5           # the hardware table's time per op (any size)


class SlowSum:
    """One worker's collective (world 1): the sum is the input, after OP_S (call k:
    after stall[k] instead, an op that stalled)."""

    def __init__(self, stall: dict[int, float] | None = None):
        self.sizes: list[int] = []
        self.stall = stall or {}

    def allreduce(self, x):
        time.sleep(self.stall.get(len(self.sizes), OP_S))
        a = np.asarray(x, np.float32).reshape(-1)
        self.sizes.append(a.size)
        return a.copy()

    def barrier(self):
        pass

    def close(self):
        pass


def cfg(tmp_path, **over):
    c = {"host": "w1", "role": "worker", "rank": 0, "world": 1, "collective": "ring",
         "peers": [{"name": "w1", "ip": "127.0.0.1"}], "ps": None, "port": 5000,
         "master_addr": "127.0.0.1", "master_port": 5060, "gloo_ifname": None, "script": "x.py",
         "args": [], "batch_size": 8, "seed": 1,
         "device": {"type": "v100", "time_scale": 500.0, "launch_s": 0.0}, "straggler": None,
         "start_at": None, "connect_timeout_s": 5, "timeout_s": 5, "out": str(tmp_path / "w1.jsonl"),
         "trace": str(tmp_path / "w1.trace.jsonl"), "ina": None,
         "calibration": {"rounds": 2, "iteration_wall_s": 30.0}, "hw_table": {"values": [0, 1e7], "hw_s": [HW_S, HW_S]}}
    c.update(over)
    return TorchWorkerConfig.from_json(c)


def records(tmp_path):
    return [json.loads(x) for x in (tmp_path / "w1.jsonl").read_text().splitlines()]


def test_auto_calibrates_on_the_first_iterations_then_runs_at_the_agreed_tdf(tmp_path):
    from hosts.common.trace import read_trace
    rt = Runtime(cfg(tmp_path))
    coll = rt._coll = SlowSum()
    rt.device.profile(nn.Linear(64, 64), torch.zeros(2, 64))
    for _ in range(5):
        rt.compute(lambda: rt.comm(lambda: coll.allreduce(np.ones(100, np.float32)), 100))
        rt.record_iteration(loss=1.0)
    rt.close(True)
    recs = records(tmp_path)
    its = [r for r in recs if r["type"] == "iteration"]
    # one warm-up iteration, then one per round
    assert [bool(r.get("calibration")) for r in its] == [True, True, True, False, False]
    (c,) = [r for r in recs if r["type"] == "calibration"]
    assert c["mode"] == "iterations" and len(c["rounds"]) == 2 and not c["network_dilated"]
    # round 0: the network's own slowdown (op time / hardware time), at least OP_S / HW_S
    r0 = c["rounds"][0]
    assert r0["tdf_net"] >= 0.9 * OP_S / HW_S and r0["ops"] == 1
    assert rt.device.time_scale == c["tdf"] == its[-1]["tdf"]
    # the agreement vectors went through the collective: 1 op + 1 agreement per round (none in warm-up)
    assert coll.sizes[:2] == [100, 100] and coll.sizes[2] != 100 and coll.sizes.count(100) == 5
    summ = recs[-1]
    assert summ["calibration_complete"] and summ["tdf"] == c["tdf"] and summ["calibration_mode"] == "iterations"
    header, nodes = read_trace(tmp_path / "w1.trace.jsonl")
    assert header["tdf"] == c["tdf"]
    assert [n["kind"] for n in nodes] == ["comm", "compute", "comm", "compute"]   # the 2 measured ones
    assert summ["validity"]["steps"] == 2        # device statistics restarted after calibration


def test_a_script_without_report_compute_is_calibrated_by_a_probe_of_its_buckets(tmp_path):
    rt = Runtime(cfg(tmp_path))
    coll = rt._coll = SlowSum()
    rt.bucket_sizes = [300, 50]                  # as ddp_hook.register sets them
    rt.comm(lambda: coll.allreduce(np.ones(300, np.float32)), 300)
    rt.close(True)
    (c,) = [r for r in records(tmp_path) if r["type"] == "calibration"]
    assert c["mode"] == "probe" and len(c["rounds"]) == 2 and c["rounds"][0]["ops"] == 2
    assert c["rounds"][0]["tdf_cmp"] is None     # no modeled compute: the network's TDF
    # per round: the two buckets, then the agreement; then the script's own call
    assert coll.sizes[0:2] == [300, 50] and coll.sizes[3:5] == [300, 50] and coll.sizes[-1] == 300


def test_calibration_that_never_finishes_is_reported(tmp_path):
    rt = Runtime(cfg(tmp_path, calibration={"rounds": 5, "iteration_wall_s": 30.0}))
    rt._coll = SlowSum()
    rt.device.profile(nn.Linear(8, 8), torch.zeros(2, 8))
    rt.compute(lambda: None)
    rt.comm(lambda: rt._coll.allreduce(np.ones(4, np.float32)), 4)
    rt.record_iteration(loss=1.0)
    rt.close(True)
    assert records(tmp_path)[-1]["calibration_complete"] is False


def test_a_round_whose_op_stalled_is_refused_with_what_it_measured(tmp_path):
    """One stalled op (a retransmission timeout) in an undilated round reads as an
    emulator thousands of times slower; the TDF it picks, at which one iteration (its
    modeled compute and ops) would outrun the wall time the point allows an iteration,
    is refused at once, naming the op times and the budget. Without the stall it passes."""
    from hosts.common.calibration import CalibrationRefused
    batch = 2500                                 # ~10 us of modeled compute, as much as the op

    def first_round(where, stall_s: float) -> Runtime:
        rt = Runtime(cfg(where, calibration={"rounds": 2, "iteration_wall_s": 0.1}))
        rt._coll = SlowSum(stall={1: stall_s})   # call 0: the warm-up's op, 1: round 0's
        rt.device.profile(nn.Linear(64, 64), torch.zeros(2, 64))
        try:
            for _ in range(2):                   # the warm-up iteration, round 0
                rt.compute(lambda: rt.comm(lambda: rt._coll.allreduce(np.ones(100, np.float32)), 100), batch)
                rt.record_iteration(loss=1.0)
        finally:
            rt.writer.close()
        return rt

    ok = first_round(tmp_path / "ok", OP_S)
    r0 = ok.dilation.calibrator.rounds[0]
    assert r0["tdf_out"] * (ok.device.hw_time(batch) + HW_S) < 0.1          # 4 ms / 10 us: TDF ~400
    with pytest.raises(CalibrationRefused) as e:
        first_round(tmp_path / "stalled", 0.5)                            # TDF ~50,000: 1 s an iteration
    msg = str(e.value)
    step_ms = (ok.device.hw_time(batch) + HW_S) * 1e3
    assert re.search(r"calibration round 0 chose TDF [5-9]\d{4} ", msg), msg
    assert f"one step of {step_ms:.4g} ms" in msg and "1 op(s) took 0.5" in msg and "beyond the 0.1 s" in msg


@pytest.mark.parametrize("calibration", [{"rounds": 2}, {"rounds": 2, "iteration_wall_s": 0}])
def test_the_worker_config_needs_the_calibration_deadline(tmp_path, calibration):
    from hosts.common.config import ConfigError
    with pytest.raises(ConfigError, match="calibration: must be null or {rounds >= 1, iteration_wall_s > 0}"):
        cfg(tmp_path, calibration=calibration)


def test_the_point_deadline_allows_each_calibration_iteration_the_refusal_budget():
    from testbed.scenario import expand_points, load_scenario_text
    from testbed.workloads.base import PointContext, get_runtime
    from testbed.workloads.calibrated import ITERATION_WALL_S
    text = ("name: t\ntopology: {kind: star, workers: 2}\nworkload: {kind: torch, script: scenarios/torch/train.py, "
            "timeout_s: 100, calibration_rounds: 3, device: %s}\n")

    def deadline(device):
        (point,) = expand_points(load_scenario_text(text % device, "t.yaml"))
        return get_runtime("torch").timeout_s(PointContext(point, {}, None, "local", 0.0))
    assert deadline("{type: v100, time_scale: 50}") == 160.0
    assert deadline("{type: v100}") == 160.0 + ITERATION_WALL_S * (1 + 3)    # the warm-up and 3 rounds


def fake_switch(control, stop):
    """Acknowledge every dilation request (what the soft switch does)."""
    seen = []
    while not stop.is_set():
        try:
            got = json.loads(control.read_text())
        except (FileNotFoundError, ValueError):
            got = None
        if got and (not seen or seen[-1]["version"] != got["version"]):
            seen.append(got)
            ack_path(control).write_text(json.dumps({"applied": True, "version": got["version"]}))
        time.sleep(0.002)
    return seen


def test_fixed_time_scale_dilates_the_network_to_it(tmp_path):
    control = tmp_path / "dilation.json"
    nd = {"control": [str(control)], "headroom": 16.0, "hw_op_s": 1e-6,
          "hardware": {"latency_s": 1e-6, "link_rate_bps": 1e11}}
    rt = Runtime(cfg(tmp_path, calibration=None, network_dilation=nd,
                     device={"type": "v100", "time_scale": 321.0}))
    stop, seen = threading.Event(), []
    t = threading.Thread(target=lambda: seen.extend(fake_switch(control, stop)))
    t.start()
    try:
        rt.dilation.dilate_fixed()
    finally:
        stop.set()
        t.join()
    assert [s["tdf"] for s in seen] == [321.0] and seen[0]["latency_s"] == 1e-6


def test_workload_tables_and_device_defaults():
    from testbed.scenario import load_scenario_text
    from testbed.workloads.torch import hw_op_time, hw_table
    text = """
name: t
topology: {kind: star, workers: 4}
workload: {kind: torch, script: scenarios/torch/train.py, collective: %s, device: %s}
"""
    s = load_scenario_text(text % ("gloo", "{type: v100}"), "t.yaml")
    wl = s.workload
    assert wl.calibrated and wl.device_spec()["time_scale"] == 500.0
    ring = load_scenario_text(text % ("ring", "{type: v100, time_scale: 50}"), "t.yaml").workload
    assert not ring.calibrated and ring.device_spec()["time_scale"] == 50.0
    # gloo has its own model (a receive-ready rendezvous per round): slower than the ring here
    from testbed.fidelity.constants import load_profile
    from testbed.fidelity.network_model import collective_time
    assert hw_op_time(wl, 10_000, 4) == collective_time("allreduce", "gloo", 10_000, 4, 4, load_profile("tofino1-100g"))
    assert hw_op_time(wl, 10_000, 4) > 1.3 * hw_op_time(ring, 10_000, 4) > 0
    t = hw_table(wl, 4)
    assert t["values"][-1] >= 2 ** 26 and all(np.diff(t["values"]) > 0) and min(t["hw_s"][1:]) > 0
    from testbed.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="time_scale must be auto or a number"):
        load_scenario_text(text % ("ring", "{type: v100, time_scale: fast}"), "t.yaml")


def test_time_scale_auto_on_lossy_links_is_refused_only_when_the_network_is_not_dilated():
    """Dilated, calibration holds the switch's loss off (Calibrator.start/finish);
    undilated it would measure retransmission timeouts: refused with the fix."""
    from testbed.scenario import load_scenario_text
    from testbed.workloads.torch import lossy_calibration
    text = """
name: t
topology: {kind: star, workers: 2}
links: %s
workload: {kind: torch, script: scenarios/torch/train.py, device: %s%s}
"""
    def why(links, device, extra=""):
        return lossy_calibration(load_scenario_text(text % (links, device, extra), "t.yaml"))
    assert why("{loss_pct: 0}", "{type: v100}") is None
    assert why("{loss_pct: 5}", "{type: v100}") is None                      # dilated (default)
    assert why("{loss_pct: 5}", "{type: v100, time_scale: 9000}", ", dilate_network: false") is None
    msg = why("{hosts: {w2: {loss_pct: 1}}}", "{type: v100}", ", dilate_network: false")
    assert "links.loss_pct 1 with workload.device.time_scale auto and dilate_network false" in msg
    assert "set dilate_network true" in msg


def _point(tmp_path, slow: float):
    """A 2-worker ring point whose traces follow the hardware model x TDF exactly and
    whose records' clock says `slow` x that (time the trace does not hold)."""
    from hosts.common.trace import TraceRecorder
    from testbed.fidelity.constants import load_profile
    from testbed.fidelity.network_model import collective_time
    tdf, hw_c, n, iters = 1000.0, 1e-4, 4096, 4
    hw_n = collective_time("allreduce", "ring", n, 4, 2, load_profile("tofino1-100g"))
    for rank, h in enumerate(("w1", "w2")):
        tr = TraceRecorder(tmp_path / f"{h}.trace.jsonl", host=h, rank=rank, world=2, tdf=tdf, role="worker")
        t, recs = 0.0, []
        for i in range(iters):
            tr.compute(t, t + hw_c * tdf, hw_c, hw_c * 10)
            t += hw_c * tdf
            tr.waited(tr.comm(t, t + hw_n * tdf, op="allreduce", algo="ring", values=n))
            t += hw_n * tdf
            recs.append({"type": "iteration", "host": h, "rank": rank, "iter": i, "t_s": t * slow, "loss": 1.0,
                         "compute_s": hw_c * tdf, "comm_s": hw_n * tdf, "comm_bytes": 4 * n, "comm_ops": 1})
        tr.close()
        recs.append({"type": "summary", "host": h, "rank": rank, "ok": True, "tdf": tdf, "network_dilated": True,
                     "validity": {"valid": True}, "calibration_complete": None})
        (tmp_path / f"{h}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return (hw_c + hw_n) * 1e3


@pytest.mark.parametrize("slow", [1.0, 1.5])
def test_point_summary_has_hardware_time_projection_and_verdict(tmp_path, slow):
    from testbed.scenario import load_scenario_text
    from testbed.workloads.torch import collect_point
    hw_iter_ms = _point(tmp_path, slow)
    s = load_scenario_text("name: t\ntopology: {kind: star, workers: 2}\nworkload: {kind: torch, script: "
                           "scenarios/torch/train.py, device: {type: v100, time_scale: 1000}}\n", "t.yaml")
    recs = collect_point(s, tmp_path)
    summ = recs[-1]
    assert {r["type"] for r in recs} >= {"fidelity", "projection", "torch_summary"}
    assert summ["hw_iter_ms"] == pytest.approx(hw_iter_ms * slow, rel=1e-6)
    assert summ["projected_hw_iter_ms"] == pytest.approx(hw_iter_ms, rel=0.02)
    assert summ["emulated_over_projected"] == pytest.approx(slow, rel=0.02)
    assert summ["valid"] is (slow == 1.0)
    if slow != 1.0:
        assert "emulated time is 1.50x the projection" in summ["invalid_reasons"][-1]
