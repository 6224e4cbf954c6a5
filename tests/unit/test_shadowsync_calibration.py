"""time_scale auto for ShadowSync (hosts/shadowsync/timing.py, the AGREE round on the
embedding PS, the workload's blocks, the refusal of a TDF that would crawl): pure
parts, no processes (tests/local/test_shadowsync_refused.py runs the refusal's)."""
from __future__ import annotations

import json
import multiprocessing as mp
import queue
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hosts.common.calibration import CalibrationRefused
from hosts.common.tcp import NetError
from hosts.shadowsync.config import ConfigError, load
from hosts.shadowsync.servers import Agreement
from hosts.shadowsync.timing import Round, Shared
from testbed.scenario import load_scenario_text
from testbed.scenario.sweep import expand_points
from testbed.workloads import shadowsync as ss
from testbed.workloads.base import PointContext
from testbed.workloads.calibrated import ITERATION_WALL_S

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
    hw = 1e-6
    ctx = mp.get_context("fork")

    def spans(period):
        out = [(k * period, k * period + 1e-3) for k in range(12)]
        out[0] = (0.0, 0.6)
        return out
    vectors, tdfs = {}, {}
    for rank in (1, 0):
        sh = Shared(ctx, {"rounds": 2, "iterations": 6, "lookup_hw_s": [hw], "iteration_wall_s": 30.0}, 1, 100.0)
        sh.ratio[0] = 0.0
        rnd = Round(sh, None, rank, 2, compute_hw_s=1e-4)

        def agree(v, rank=rank):
            vectors[rank] = v
            return v if rank == 1 else v + vectors[1]
        tdfs[rank] = rnd.decide(spans(0.010 if rank == 0 else 0.013), agree)
    assert tdfs[0] == pytest.approx(1e-3 / hw, rel=0.01)
    assert rnd.c.rounds[0]["tdf_net"] == pytest.approx(1000.0, rel=0.01)


def test_a_round_whose_lookups_stalled_is_refused_with_what_it_measured():
    """One lookup per round (one iteration, one embedding PS) that stalled for 2 s picks
    TDF 40,000, at which one iteration on the hardware (1 ms of compute and a 50 us
    lookup) would take 42 s, beyond the 30 s the point's deadline allows it: refused at
    once, naming the TDF, the op times and the budget, and the trainer's other workers,
    waiting at the round's barrier, are released (broken barrier, `refused` set). A
    round of 4 ms lookups (TDF 80) passes."""
    cc = {"rounds": 2, "iterations": 1, "lookup_hw_s": [50e-6], "iteration_wall_s": 30.0}

    def worker_0() -> tuple[Shared, Round]:
        sh = Shared(mp.get_context("fork"), cc, 2, 400.0)          # 2 Hogwild workers
        return sh, Round(sh, None, 0, 1, compute_hw_s=1e-3)

    sh, rnd = worker_0()
    assert rnd.decide([(10.0, 10.0 + 4e-3)], lambda v: v) == pytest.approx(80.0)
    assert sh.tdf.value == pytest.approx(80.0) and not sh.refused.value and not sh.barrier.broken
    sh, rnd = worker_0()
    with pytest.raises(CalibrationRefused) as e:
        rnd.decide([(10.0, 12.0)], lambda v: v)
    msg = str(e.value)
    assert "TDF 40000" in msg and "1 op(s) took 2" in msg and "beyond the 30 s" in msg
    assert sh.refused.value == 1 and sh.barrier.broken
    assert sh.tdf.value == 400.0                     # nothing published


def test_the_trainer_config_needs_the_calibration_budget(tmp_path):
    """The hosts get the budget the point's deadline allows an iteration (iteration_wall_s,
    required > 0), and the deadline allows it per calibration and measured iteration."""
    scn = load_scenario_text(BASE % "{type: v100, time_scale: auto}" + "  iterations: 40\n", "t.yaml")
    point = expand_points(scn)[0]
    hosts = {h: SimpleNamespace(name=h, ip=f"127.0.1.{i + 1}") for i, h in enumerate(point.scenario.hosts())}
    ctx = PointContext(point=point, hosts=hosts, work_dir=tmp_path, net_mode="local", start_at=0.0)
    rt = ss.ShadowSyncRuntime()
    progs = {p.host: json.loads(Path(p.argv[-1]).read_text()) for p in rt.programs(ctx)}
    cfg, _ = load(progs["w1"], "trainer")
    assert cfg.calibration["iteration_wall_s"] == ITERATION_WALL_S
    # 40 measured iterations and 2 rounds of 6 calibration iterations (+ their AGREE)
    assert rt.timeout_s(ctx) >= ITERATION_WALL_S * (40 + 2 * (6 + 1))
    for bad in ({}, {"iteration_wall_s": 0}, {"iteration_wall_s": "30"}):
        c = {k: v for k, v in progs["w1"]["trainer"]["calibration"].items() if k != "iteration_wall_s"}
        with pytest.raises(ConfigError, match=r"calibration: must be .*iteration_wall_s > 0"):
            load({**progs["w1"], "trainer": {**progs["w1"]["trainer"], "calibration": {**c, **bad}}}, "trainer")


@pytest.mark.parametrize("which", ["calibration", "foreground"])
def test_a_failed_worker_releases_the_others_from_their_barriers(which):
    """Any worker that fails (not only a refusal) aborts the trainer's barriers: a worker
    waiting at the calibration round's or the foreground sync's barrier stops at once and
    says which worker failed, rather than waiting out timeout_s and reporting a broken
    barrier; the first to fail is the cause."""
    from hosts.shadowsync.trainer import failure

    ctx = mp.get_context("fork")
    sh = Shared(ctx, {"rounds": 1, "iterations": 1, "lookup_hw_s": [1e-5], "iteration_wall_s": 30.0}, 2, 100.0)
    foreground = ctx.Barrier(2)
    barrier = sh.barrier if which == "calibration" else foreground
    said = ctx.Queue()

    def worker_1():
        try:
            barrier.wait(timeout=60)
            said.put("passed the barrier")
        except threading.BrokenBarrierError as e:
            sh.fail(1, foreground)
            said.put(failure("worker 1", e, sh))

    p = ctx.Process(target=worker_1)
    p.start()
    try:
        time.sleep(0.3)                                  # worker 1 waits at the barrier
        assert sh.fail(0, foreground) is True            # worker 0 failed first
        try:
            got = said.get(timeout=10)
        except queue.Empty:
            got = "still waiting"
        assert got == "worker 1: stopped: worker 0 failed"
        assert sh.failed.value == 0 and sh.fail(1) is False
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
