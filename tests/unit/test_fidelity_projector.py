"""Projector: SimPy replay reproduces hand-computed times exactly; project_world scales."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.monitor import load_traces
from testbed.fidelity.network_model import collective_cost, collective_time, finish_after_arrivals
from testbed.fidelity.projector import (linear_compute_scaling, project, project_world,
                                        synthesize_world)

TOFINO = load_profile("tofino1-100g")
T64 = collective_time("allreduce", "switch", 64, 4, 2, TOFINO)     # 1.88408 us, see the model test


def rec(rank, world=2, path=None):
    return TraceRecorder(path, host=f"w{rank}", rank=rank, world=world, tdf=100.0)


def sync_step(r, first_s=1e-6, values=64, algo="switch"):
    """compute, allreduce (waited for), compute 2 us: the blocking pattern."""
    r.compute(0, 0, hw_s=first_s, real_s=0)
    m = r.comm(0, 0, op="allreduce", algo=algo, values=values)
    r.waited(m)
    r.compute(0, 0, hw_s=2e-6, real_s=0)


def traces_of(*recorders):
    return [(r.header, r.nodes) for r in recorders]


def test_blocking_allreduce_by_hand():
    rs = [rec(0), rec(1)]
    for r in rs:
        sync_step(r)
    pr = project(traces_of(*rs), TOFINO)
    assert pr.makespan_s == pytest.approx(1e-6 + T64 + 2e-6, rel=1e-12, abs=0)
    assert pr.finish_s == {0: pr.makespan_s, 1: pr.makespan_s}
    assert pr.compute_s[0] == pytest.approx(3e-6, rel=1e-12)
    assert pr.comm_exposed_s[0] == pytest.approx(T64, rel=1e-9)
    assert pr.collectives == 1 and pr.nodes == 6 and not pr.truncated and pr.events > 0


def test_the_collective_starts_at_the_last_arrival():
    a, b = rec(0), rec(1)
    sync_step(a, first_s=1e-6)
    sync_step(b, first_s=5e-6)                       # rank 1 is late by 4 us
    pr = project(traces_of(a, b), TOFINO)
    assert pr.finish_s[0] == pytest.approx(5e-6 + T64 + 2e-6, rel=1e-12)
    assert pr.finish_s[1] == pr.finish_s[0]
    assert pr.comm_exposed_s[0] == pytest.approx(4e-6 + T64, rel=1e-9)   # rank 0 waited for rank 1 too


def test_a_ring_with_spread_arrivals_finishes_as_the_monitor_measures_it():
    """The projector and the fidelity monitor share one measure of an op whose
    members arrive apart (network_model.finish_after_arrivals): in a ring of 4
    whose ranks join 20 us apart, the early ranks' first steps are done before
    the last joins, so each rank finishes before last arrival + the whole op."""
    values, world = 1 << 16, 4
    firsts = [1e-6 + 20e-6 * i for i in range(world)]
    rs = [rec(i, world) for i in range(world)]
    for r, first in zip(rs, firsts):
        sync_step(r, first_s=first, values=values, algo="ring")
    pr = project(traces_of(*rs), TOFINO)
    whole = collective_time("allreduce", "ring", values, 4, world, TOFINO)
    expected = finish_after_arrivals("allreduce", "ring", values, 4, firsts, TOFINO)
    for i in range(world):
        assert pr.finish_s[i] == pytest.approx(expected[i] + 2e-6, rel=1e-9)
        assert pr.finish_s[i] < max(firsts) + whole + 2e-6      # the old charge: whole op after the last
    # equal arrivals: exactly the whole op for everyone
    rs = [rec(i, world) for i in range(world)]
    for r in rs:
        sync_step(r, values=values, algo="ring")
    pr = project(traces_of(*rs), TOFINO)
    assert list(pr.finish_s.values()) == [pytest.approx(1e-6 + whole + 2e-6, rel=1e-12)] * world


def test_tree_traces_replay_each_rank_to_its_own_finish():
    """A tree allreduce's trace nodes (algo 'tree', as a `collective: tree` worker
    records them) replay with the tree's per-rank finish; of two per-tensor ops (pack
    false), each rank joins the second at its own end of the first."""
    world = 5
    firsts = [1e-6, 1e-6, 3e-6, 1e-6, 2e-6]
    rs = [rec(i, world) for i in range(world)]
    for r, first in zip(rs, firsts):
        sync_step(r, first_s=first, values=4096, algo="tree")
    pr = project(traces_of(*rs), TOFINO)
    expected = finish_after_arrivals("allreduce", "tree", 4096, 4, firsts, TOFINO)
    assert [pr.finish_s[i] for i in range(world)] == [pytest.approx(e + 2e-6, rel=1e-9) for e in expected]
    assert len(set(expected)) > 1                      # ranks get the sum at different times
    # blocking_comm: the runtime's recorder (hosts/dnn/runtime.py), one op after the other
    rs = [TraceRecorder(None, host=f"w{i}", rank=i, world=world, tdf=100.0, blocking_comm=True)
          for i in range(world)]
    for r in rs:
        r.compute(0, 0, hw_s=1e-6, real_s=0)
        for values in (1000, 3096):
            r.waited(r.comm(0, 0, op="allreduce", algo="tree", values=values))
    pr = project(traces_of(*rs), TOFINO)
    first = finish_after_arrivals("allreduce", "tree", 1000, 4, [1e-6] * world, TOFINO)
    second = finish_after_arrivals("allreduce", "tree", 3096, 4, first, TOFINO)
    assert [pr.finish_s[i] for i in range(world)] == [pytest.approx(e, rel=1e-9) for e in second]
    two = collective_time("allreduce", "tree", 1000, 4, world, TOFINO) + \
        collective_time("allreduce", "tree", 3096, 4, world, TOFINO)
    # rank 3, the last to get the first sum, is the leaf the second reduce waits for at rank 2:
    # nothing overlaps, the two trees take their whole times one after the other
    assert max(second) == pytest.approx(1e-6 + two, rel=1e-12)
    assert second[0] < max(second)


def test_async_allreduce_hidden_behind_compute():
    rs = [rec(0), rec(1)]
    for r in rs:
        r.compute(0, 0, hw_s=1e-6, real_s=0)
        m = r.comm(0, 0, op="allreduce", algo="switch", values=64)
        r.compute(0, 0, hw_s=2e-6, real_s=0)         # does not need the result: overlaps
        r.waited(m)
        r.compute(0, 0, hw_s=0.5e-6, real_s=0)       # needs it: waits only if comm is longer
    pr = project(traces_of(*rs), TOFINO)
    assert T64 < 2e-6                                # the op is hidden
    assert pr.makespan_s == pytest.approx(1e-6 + 2e-6 + 0.5e-6, rel=1e-12)
    assert pr.comm_exposed_s[0] == pytest.approx(0, abs=1e-15)
    # a larger message is not hidden: the third compute waits for it
    t_big = collective_time("allreduce", "switch", 64 * 1000, 4, 2, TOFINO)
    rs = [rec(0), rec(1)]
    for r in rs:
        r.compute(0, 0, hw_s=1e-6, real_s=0)
        m = r.comm(0, 0, op="allreduce", algo="switch", values=64 * 1000)
        r.compute(0, 0, hw_s=2e-6, real_s=0)
        r.waited(m)
        r.compute(0, 0, hw_s=0.5e-6, real_s=0)
    pr = project(traces_of(*rs), TOFINO)
    assert t_big > 2e-6
    assert pr.makespan_s == pytest.approx(1e-6 + t_big + 0.5e-6, rel=1e-12)


def test_a_trailing_async_op_ends_the_rank():
    rs = [rec(0), rec(1)]
    for r in rs:
        r.compute(0, 0, hw_s=1e-6, real_s=0)
        r.comm(0, 0, op="allreduce", algo="switch", values=64)   # never waited for
    pr = project(traces_of(*rs), TOFINO)
    assert pr.makespan_s == pytest.approx(1e-6 + T64, rel=1e-12)


def test_overlapping_collectives_share_the_link():
    values = 64 * 1000
    cost = collective_cost("allreduce", "switch", values, 4, 2, TOFINO)
    rs = [rec(0), rec(1)]
    for r in rs:
        r.compute(0, 0, hw_s=1e-6, real_s=0)
        m1 = r.comm(0, 0, op="allreduce", algo="switch", values=values)
        m2 = r.comm(0, 0, op="allreduce", algo="switch", values=values)
        r.waited(m1)
        r.waited(m2)
        r.compute(0, 0, hw_s=1e-6, real_s=0)
    shared = project(traces_of(*rs), TOFINO)
    alone = project(traces_of(*rs), TOFINO, contention=False)
    # the second op waits for the first one's serialization, then runs its own course
    assert shared.makespan_s == pytest.approx(2e-6 + cost.link_busy_s + cost.total_s, rel=1e-12)
    assert alone.makespan_s == pytest.approx(2e-6 + cost.total_s, rel=1e-12)


def test_mismatched_traces_are_refused_before_running():
    a, b = rec(0), rec(1)
    sync_step(a)
    b.compute(0, 0, hw_s=1e-6, real_s=0)
    with pytest.raises(ValueError, match=r"collective world#0: ranks \[1\] never reach it"):
        project(traces_of(a, b), TOFINO)
    a, b = rec(0), rec(1)
    sync_step(a, values=64)
    sync_step(b, values=128)
    with pytest.raises(ValueError, match="collective world#0: rank 1 has"):
        project(traces_of(a, b), TOFINO)


def test_traces_written_and_read_back(tmp_path):
    rs = [rec(k, path=tmp_path / f"w{k}.trace.jsonl") for k in range(2)]
    for r in rs:
        sync_step(r)
        r.close()
    pr = project(load_traces(tmp_path), TOFINO)
    assert pr.makespan_s == pytest.approx(1e-6 + T64 + 2e-6, rel=1e-12)


def training_trace(world=4, iters=50, algo="switch", values=8, fwd=1e-6, bwd=2e-6):
    """P4SGD-like: forward, allreduce of `values` partial activations, backward."""
    out = []
    for k in range(world):
        r = rec(k, world)
        for _ in range(iters):
            r.compute(0, 0, hw_s=fwd, real_s=0)
            m = r.comm(0, 0, op="allreduce", algo=algo, values=values)
            r.waited(m)
            r.compute(0, 0, hw_s=bwd, real_s=0)
        out.append((r.header, r.nodes))
    return out


def test_project_world_at_the_recorded_size_is_the_replay():
    tr = training_trace(world=4)
    assert project_world(tr, 4, TOFINO).makespan_s == pytest.approx(project(tr, TOFINO).makespan_s, rel=1e-12)
    synth = synthesize_world(tr, 16)
    assert [h["rank"] for h, _ in synth] == list(range(16))
    assert {h["world"] for h, _ in synth} == {16} and {h["recorded_world"] for h, _ in synth} == {4}


def test_project_world_at_the_recorded_count_keeps_a_straggler():
    """Rank 1 computes 10x longer: replicating rank 0 would hide it."""
    rs = [rec(0), rec(1)]
    sync_step(rs[0], first_s=1e-6)
    sync_step(rs[1], first_s=1e-5)
    tr = traces_of(*rs)
    assert project_world(tr, 2, TOFINO).makespan_s == pytest.approx(1e-5 + T64 + 2e-6, rel=1e-12, abs=0)
    assert project_world(tr, 4, TOFINO).makespan_s < 1e-5      # other counts: rank 0's program


def test_project_world_switch_is_flat_until_the_ports_run_out():
    tr = training_trace(world=4, iters=50)
    span = {w: project_world(tr, w, TOFINO).makespan_s for w in (16, 64, 256)}
    per_iter = 3e-6 + collective_time("allreduce", "switch", 8, 4, 16, TOFINO)
    assert span[16] == pytest.approx(50 * per_iter, rel=1e-9)
    assert span[64] == pytest.approx(span[16], rel=1e-12)           # independent of N up to 64 ports
    assert span[256] > span[64]                                     # a second switch level
    # model-parallel: compute shrinks as 1/world, the in-switch allreduce does not grow
    mp = {w: project_world(tr, w, TOFINO, linear_compute_scaling).makespan_s for w in (16, 64, 256)}
    assert mp[16] > mp[64]
    assert mp[16] == pytest.approx(50 * (3e-6 * 4 / 16 + collective_time("allreduce", "switch", 8, 4, 16, TOFINO)),
                                   rel=1e-9)


def test_project_world_ring_grows_with_n():
    tr = training_trace(world=4, iters=10, algo="ring", values=4096)
    span = [project_world(tr, w, TOFINO).makespan_s for w in (16, 64, 256)]
    assert span[0] < span[1] < span[2]


def test_truncation_extrapolates_by_rate_and_says_so():
    tr = training_trace(world=4, iters=200)
    full = project_world(tr, 64, TOFINO)
    cut = project_world(tr, 64, TOFINO, max_nodes=60)
    assert cut.truncated and not full.truncated
    assert cut.nodes == 64 * 60 and cut.nodes_total == 64 * 600 and cut.extrapolation == pytest.approx(10)
    assert cut.makespan_s == pytest.approx(full.makespan_s, rel=0.01)     # periodic trace
    assert cut.simulated_makespan_s < full.makespan_s / 5


def test_truncation_never_splits_a_collective():
    tr = training_trace(world=2, iters=10)
    a = rec(0)
    a.compute(0, 0, hw_s=1e-6, real_s=0)       # rank 0 has one more node up front
    for _ in range(10):
        sync_step(a, values=8)
    tr[0] = (a.header, a.nodes)
    # first 5 nodes: rank 0 reaches world#0 only, rank 1 also world#1: cut rank 1 before it
    pr = project(tr, TOFINO, max_nodes=5)
    assert pr.truncated and pr.nodes == 5 + 4 and pr.collectives == 1


def test_large_world_runs():
    tr = training_trace(world=4, iters=500)      # 1500 nodes per rank
    pr = project_world(tr, 256, TOFINO, linear_compute_scaling)
    assert pr.nodes == 256 * 1500 and pr.collectives == 500
    assert pr.makespan_s > 500 * collective_time("allreduce", "switch", 8, 4, 256, TOFINO)


def test_an_unmodeled_collective_is_named_before_running():
    rs = [rec(0), rec(1)]
    for r in rs:
        sync_step(r, algo="butterfly")
    with pytest.raises(ValueError, match="collective world#0: collective algo 'butterfly' is not modeled"):
        project(traces_of(*rs), TOFINO)


def test_projection_to_dict_is_plain_data():
    import json
    rs = [rec(0), rec(1)]
    for r in rs:
        sync_step(r)
    d = project(traces_of(*rs), TOFINO).to_dict()
    assert json.loads(json.dumps(d))["finish_s"]["1"] == d["simulated_makespan_s"] == d["makespan_s"]


def test_reused_preparations_give_the_fresh_projection_and_notice_an_edited_header():
    from testbed.fidelity import projector
    traces = training_trace(world=4, iters=20)
    slow = TOFINO.with_overrides({c.name: c.range[1] for c in TOFINO.uncertain()})
    fresh = [project_world(traces, n, p, max_nodes=30).makespan_s for n in (4, 16) for p in (TOFINO, slow)]
    with projector.reusing_preparations():
        again = [project_world(traces, n, p, max_nodes=30).makespan_s for n in (4, 16) for p in (TOFINO, slow)]
        assert projector._PREPARED and projector._SYNTHESIZED      # kept for the next replay
        star = project(traces, TOFINO).makespan_s
        for h, _ in traces:                                         # a tree: every path 3 switches
            h["path_switches"] = {f"w{r}": 3 for r in range(4) if f"w{r}" != h["host"]}
        tree = project(traces, TOFINO).makespan_s
    assert again == fresh                                           # bit for bit
    assert tree > star                                              # the edited header was read
    assert not projector._PREPARED and not projector._SYNTHESIZED  # nothing kept outside
