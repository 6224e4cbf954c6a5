"""Projector: processes of one host share its cores (testbed/fidelity/host_cpu.py)."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.projector import project

pytestmark = pytest.mark.unit
TOFINO = load_profile("tofino1-100g")


def trainer_and_shadow(cores, workers, step_s, steps, update_s, updates):
    """A trainer of `workers` threads computing `steps` steps and, on the same host, a
    shadow of one thread computing `updates` updates, both from t = 0."""
    meta = {} if cores is None else {"host_cores": cores}
    w = TraceRecorder(None, host="t1", rank=0, world=2, tdf=1.0, threads=workers, **meta)
    s = TraceRecorder(None, host="t1-shadow", rank=1, world=2, tdf=1.0, nic="t1", role="shadow")
    for _ in range(steps):
        w.compute(0, 0, hw_s=step_s, real_s=0)
    for _ in range(updates):
        s.compute(0, 0, hw_s=update_s, real_s=0)
    return [(w.header, w.nodes), (s.header, s.nodes)]


def test_a_free_core_leaves_the_trainer_at_its_modeled_time():
    pr = project(trainer_and_shadow(5, 4, 1e-3, 10, 1e-3, 5), TOFINO)
    assert pr.finish_s[0] == pytest.approx(10e-3, rel=1e-12)
    assert pr.finish_s[1] == pytest.approx(5e-3, rel=1e-12)


def test_without_host_cores_nothing_is_shared():
    pr = project(trainer_and_shadow(None, 4, 1e-3, 10, 1e-3, 5), TOFINO)
    assert pr.finish_s[0] == pytest.approx(10e-3, rel=1e-12)


def test_scarce_cores_stretch_the_trainer_while_the_shadow_computes():
    # 4 workers on 4 cores: while the shadow computes, 5 threads share 4 cores, each at
    # 4/5: the trainer at 4/5 of its rate (the shadow too). The shadow's 5 ms of work
    # take 6.25 ms, in which the trainer does 5 ms of its 10; the rest at full speed.
    pr = project(trainer_and_shadow(4, 4, 1e-3, 10, 1e-3, 5), TOFINO)
    assert pr.finish_s[1] == pytest.approx(5e-3 * 5 / 4, rel=1e-9)
    assert pr.finish_s[0] == pytest.approx(5e-3 * 5 / 4 + 5e-3, rel=1e-9)
    assert pr.compute_s[0] == pytest.approx(pr.finish_s[0], rel=1e-9)


def test_a_host_whose_traces_disagree_on_its_cores_is_refused():
    tr = trainer_and_shadow(4, 4, 1e-3, 1, 1e-3, 1)
    tr[1] = ({**tr[1][0], "host_cores": 8}, tr[1][1])
    with pytest.raises(ValueError, match="disagree"):
        project(tr, TOFINO)


def test_an_idle_pause_takes_time_but_no_core():
    # 4 workers on 4 cores and a shadow that only pauses (idle steps): the trainer keeps
    # its modeled time, the shadow finishes after its pauses, with no device time
    w = TraceRecorder(None, host="t1", rank=0, world=2, tdf=1.0, threads=4, host_cores=4)
    s = TraceRecorder(None, host="t1-shadow", rank=1, world=2, tdf=1.0, nic="t1", role="shadow")
    for _ in range(10):
        w.compute(0, 0, hw_s=1e-3, real_s=0)
    for _ in range(5):
        s.compute(0, 0, hw_s=1e-3, real_s=0, idle=True)
    assert all(n["idle"] for n in s.nodes) and not any("idle" in n for n in w.nodes)
    pr = project([(w.header, w.nodes), (s.header, s.nodes)], TOFINO)
    assert pr.finish_s[0] == pytest.approx(10e-3, rel=1e-12)
    assert pr.finish_s[1] == pytest.approx(5e-3, rel=1e-12)
    assert pr.compute_s[1] == 0.0
