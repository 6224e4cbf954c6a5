"""PHub's time pieces: the server core model, the calibration table, the workload's
checks, and the projection of a multi-core server at other worker counts."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from hosts.phub.server import CORE_MESSAGE_S, merge_cores, modeled_key_s, modeled_work_s
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import collective_time
from testbed.fidelity.projector import project, project_world
from testbed.workloads.phub import PhubWorkload, hw_table

TOFINO = load_profile("tofino1-100g")


def test_a_core_sums_at_the_given_rate_and_pays_per_message():
    assert modeled_work_s(0, 0, True, 50e9) == CORE_MESSAGE_S
    assert modeled_work_s(1000, 0, True, 50e9) == pytest.approx(1e-6 + 4000 / 50e9)
    assert modeled_work_s(0, 1000, True, 50e9) == pytest.approx(1e-6 + 20000 / 50e9)     # Nesterov
    assert modeled_work_s(0, 1000, False, 50e9) == pytest.approx(1e-6 + 12000 / 50e9)    # SGD
    # a key's chunks on 2 cores in parallel: 4 copies of half the key summed, then optimized
    assert modeled_key_s(1000, 4, 2, True, 50e9) == pytest.approx(4 * (1e-6 + 2000 / 50e9) + 10000 / 50e9)


def test_calibration_table_adds_the_servers_work_for_phub_only():
    phub = PhubWorkload(model={"kind": "profile", "name": "alexnet", "size_scale": 0.001})
    ps = phub.model_copy(update={"algorithm": "wide_ps"})
    tp, tw = hw_table(phub, 4), hw_table(ps, 4)
    assert tp["values"] == tw["values"] and tp["values"][-1] >= max(round(4096 * 9216 * 0.001), 1)
    i = tp["values"].index(1000.0) if 1000.0 in tp["values"] else len(tp["values"]) // 2
    v = int(tp["values"][i])
    assert tw["hw_s"][i] == pytest.approx(collective_time("allreduce", "ps", v, 4, 4, TOFINO))
    assert tp["hw_s"][i] == pytest.approx(tw["hw_s"][i] + modeled_key_s(v, 4, 2, True, TOFINO["reduce_rate"]))


def test_workload_refuses_calibrating_two_jobs():
    with pytest.raises(ValueError, match="time_scale auto with jobs > 1"):
        PhubWorkload(jobs=2)
    assert PhubWorkload(jobs=2, device={"type": "v100", "time_scale": 4000.0}).jobs == 2
    assert not PhubWorkload(model={"kind": "cnn"}).calibrated          # measured CPU: nothing to calibrate


def two_core_job(iters=3, workers=2, service_s=5e-6):
    """Workers push one layer to two cores and wait for both updates. Each core
    records its own nodes; the server's trace merges them by time (merge_cores):
    w0's push to core 0 is in first, but core 1 has both copies first and answers
    first (reply_after all, as PHub's server does)."""
    ws = [TraceRecorder(None, host=f"w{k}", rank=k, world=workers + 1, tdf=1.0) for k in range(workers)]
    cores = [TraceRecorder(None, host="ps", rank=workers, world=workers + 1, tdf=1.0) for _ in (0, 1)]
    t = 0.0
    for it in range(iters):
        for w in ws:
            w.compute(0, 0, hw_s=50e-6, real_s=0)
            for c in (0, 1):
                w.send(0, 0, peer="ps", values=1000, tag=f"push.j1.c{c}")
        order = [("w0", 0), *[(f"w{k}", 1) for k in range(workers)], *[(f"w{k}", 0) for k in range(1, workers)]]
        done = {0: 0, 1: 0}
        for w, c in order:
            ps, t = cores[c], t + 1
            ps.waited(ps.recv(t, t, peer=w, values=1000, tag=f"push.j1.c{c}", core=c))
            n = ps.compute(t, t, hw_s=service_s, real_s=0)
            ps.nodes[n]["core"] = c
            done[c] += 1
            if done[c] == workers:                 # the core's round is complete: its updates
                for k in range(workers):
                    ps.send(t, None, peer=f"w{k}", values=1000, tag=f"update.j1.c{c}", core=c)
        for w in ws:
            for c in (1, 0):
                w.waited(w.recv(0, 0, peer="ps", values=1000, tag=f"update.j1.c{c}"))
    header = dict(cores[0].header, role="server", reply_after="all", cores=2)
    return [*((r.header, r.nodes) for r in ws), (header, merge_cores({c: r.nodes for c, r in enumerate(cores)}))]


def test_the_server_model_plays_the_cores_of_a_multi_core_server_in_parallel():
    tr = two_core_job()
    groups = {n["group"] for _, nodes in tr for n in nodes if n.get("kind") == "comm"}
    assert groups == {f"p2p:{t}.c{c}:{a}>{b}" for c in (0, 1) for k in (0, 1) for t, a, b in
                      (("push.j1", f"w{k}", "ps"), ("update.j1", "ps", f"w{k}"))}
    at2, at8 = (project_world(tr, n, TOFINO) for n in (2, 8))     # per-core tags: no stall
    assert at2.messages == 2 * 2 * 2 * 3 and at8.messages == 2 * 2 * 8 * 3
    # 8 workers' pushes queue on the server: slower than 2, and the own-count replay agrees at 2
    assert at8.makespan_s > at2.makespan_s
    assert project(tr, TOFINO).makespan_s == pytest.approx(
        project_world(tr, 2, TOFINO, replay_recorded=False).makespan_s, rel=0.1)
    # a server-bound load (1 ms per push): the two cores overlap, so the own-count
    # replay takes about half of serving all 2 x 2 pushes per iteration one after another
    slow = project(two_core_job(service_s=1e-3), TOFINO).makespan_s
    assert 3 * 2 * 1e-3 < slow < 0.6 * 3 * 4 * 1e-3


def test_stages_in_hardware_time_come_from_the_server_trace_and_its_core_model():
    from hosts.phub.server import merge_cores  # noqa: PLC0415
    from testbed.fidelity.network_model import message_cost  # noqa: PLC0415
    from testbed.workloads.phub import hw_stages  # noqa: PLC0415
    rate, iters = 50e9, 2
    cores = [TraceRecorder(None, host="ps", rank=2, world=3, tdf=1.0) for _ in (0, 1)]
    for it in range(iters):
        for c, values in ((0, 1000), (1, 10)):          # core 0 is the busiest
            ps = cores[c]
            for k in range(2):
                ps.waited(ps.recv(it, it, peer=f"w{k}", values=values, tag=f"push.j1.c{c}", core=c))
                n = ps.compute(it, it, hw_s=modeled_work_s(values, values if k == 1 else 0, True, rate), real_s=0,
                               work={"values": values})
                ps.nodes[n]["core"] = c
            for k in range(2):
                ps.send(it, it, peer=f"w{k}", values=values, tag=f"update.j1.c{c}", core=c)
    header = dict(cores[0].header, role="server", workload="phub", cores=2,
                  device={"bytes_per_s": rate})
    tr = [(header, merge_cores({c: r.nodes for c, r in enumerate(cores)}))]
    st = hw_stages(tr, TOFINO, iters)
    port = message_cost(4000, TOFINO).link_busy_s
    assert st["agg"] == pytest.approx(2 * (CORE_MESSAGE_S + 4000 / rate) * 1e6)
    assert st["opt"] == pytest.approx(20 * 1000 / rate * 1e6)                     # Nesterov, once per chunk
    assert st["recv"] == pytest.approx(2 * port * 1e6) and st["send"] == pytest.approx(2 * port * 1e6)
    assert hw_stages([(dict(header, role="worker"), [])], TOFINO, iters) is None


def test_a_core_is_paced_by_a_deadline_and_catches_up_on_its_own_lateness():
    from hosts.phub.server import CoreDevice  # noqa: PLC0415
    dev = CoreDevice(tdf=1000.0, measured_from=0)
    # idle core: the work starts when the message was in (10.0), ends TDF x 1 ms later
    assert dev.work(arrived=10.0, c0=10.2, hw_s=1e-3, real_s=0.01) == pytest.approx(11.0)
    # the next message was in at 10.5, served late (11.3): it starts at the core's 11.0
    assert dev.work(arrived=10.5, c0=11.3, hw_s=2e-3, real_s=0.01) == pytest.approx(13.0)
    # Python slower than the dilated model: an overrun, the work takes Python's time
    assert dev.work(arrived=20.0, c0=20.0, hw_s=1e-6, real_s=0.5) == pytest.approx(20.5)
    v = dev.validity()
    assert v["steps"] == 3 and v["violations"] == 1 and not v["valid"]


def test_in_switch_table_charges_the_scale_agreement_round():
    """The in-switch baseline sums floats with a scale agreed per tensor (one MAX pass
    first): its calibration table charges that pass, as the monitor does for the trace's
    scale_round nodes; a fixed scale (ina.scale_exp) has none."""
    from testbed.workloads.phub import scale_round
    sw = PhubWorkload(algorithm="switch")
    assert scale_round(sw, {}) and scale_round(sw, {"scale_exp": None})
    assert not scale_round(sw, {"scale_exp": 12})
    assert not scale_round(sw.model_copy(update={"algorithm": "ring"}), {})
    plain, agreed = hw_table(sw, 4), hw_table(sw, 4, agreed_scale=True)
    assert plain["values"] == agreed["values"] and agreed["hw_s"][0] == plain["hw_s"][0]   # 0 values: no pass
    for v, p, a in zip(plain["values"][1:], plain["hw_s"][1:], agreed["hw_s"][1:]):
        assert p == pytest.approx(collective_time("allreduce", "switch", int(v), 4, 4, TOFINO))
        assert a == pytest.approx(collective_time("allreduce", "switch", int(v), 4, 4, TOFINO, scale_round=True))
        assert a > p


def test_a_round_that_would_crawl_is_refused_with_what_it_measured():
    """A stalled op in a one-op round 0 picks a TDF at which an iteration takes
    minutes (CI once saw TDF 160,000 and 5.5-minute rounds; its cause is not known):
    such a TDF is refused at once, naming the op times and the budget, from the same
    agreed numbers on every worker."""

    from hosts.common import calibration as cal
    from hosts.phub.timing import PhubTiming

    class Device:
        time_scale, real_s_total, modeled_s_total = 500.0, 0.0, 0.0

        def _reset_stats(self):
            pass

    class Model:
        time_scale, device = 500.0, Device()

    cc = {"rounds": 2, "iterations": 1, "hw_table": {"values": [1.0, 1000.0], "hw_s": [1e-6, 50e-6]},
          "iteration_wall_s": 30.0}

    def round_with(op_s: float) -> float:
        m = Model()
        t = PhubTiming(cc, None, 0, 1, m)
        m.device.modeled_s_total += 500.0 * 5e-3          # 5 ms of modeled compute per iteration
        return t.end_round([(10.0, 10.0 + op_s, 1000)], lambda v: v)

    assert round_with(4e-3) == pytest.approx(80.0)      # 4 ms / 50 us, undilated network
    with pytest.raises(cal.CalibrationRefused) as e:
        round_with(0.5)                                 # a stalled op: TDF 10,000, 50 s per iteration
    msg = str(e.value)
    assert "TDF 10000" in msg and "1 op(s) took 0.5" in msg and "beyond the 30 s" in msg
