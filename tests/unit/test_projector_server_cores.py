"""A multi-core server in the projector (server_model.py, projector.py: `cores`):
each core is its own queue, so a server-bound load spread over two cores takes
half the time of one core, at the recorded worker count and projected beyond."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.projector import project, project_world
from testbed.fidelity.server_model import service_model

TOFINO = load_profile("tofino1-100g")
SERVICE_S = 50e-6


def hub_job(cores: int, workers: int = 4, iters: int = 10, chunks: int = 4, values: int = 256):
    """Each iteration every worker pushes `chunks` messages (one per chunk, chunk c
    owned by core c mod `cores`) and waits for every update (tall aggregation: the
    server answers a chunk once all workers' copies are in). The server spends
    SERVICE_S per push. Server-bound: the workers compute 1 us per iteration."""
    world = workers + 1
    ws = [TraceRecorder(None, host=f"w{k}", rank=k, world=world, tdf=1.0) for k in range(workers)]
    per_core = [TraceRecorder(None, host="ps", rank=workers, world=world, tdf=1.0) for _ in range(cores)]
    for it in range(iters):
        for w in ws:
            w.compute(0, 0, hw_s=1e-6, real_s=0)
            for c in range(chunks):
                w.send(0, 0, peer="ps", values=values, tag=f"push.c{c % cores}")
            for c in range(chunks):
                w.waited(w.recv(0, 0, peer="ps", values=values, tag=f"update.c{c % cores}"))
        for c in range(chunks):
            core = c % cores
            ps = per_core[core]
            for k in range(workers):
                ps.waited(ps.recv(0, 0, peer=f"w{k}", values=values, tag=f"push.c{core}", core=core))
                n = ps.compute(0, 0, hw_s=SERVICE_S, real_s=0)
                ps.nodes[n]["core"] = core
            for k in range(workers):
                ps.send(0, 0, peer=f"w{k}", values=values, tag=f"update.c{core}", core=core)
    # one server trace: the cores' nodes one core after the other, ids and deps renumbered
    nodes, new_id = [], {}
    for core, rec in enumerate(per_core):
        for n in rec.nodes:
            new_id[(core, n["id"])] = len(nodes)
            nodes.append(dict(n, id=len(nodes), deps=[new_id[(core, d)] for d in n["deps"]]))
    header = dict(per_core[0].header, role="server", reply_after="all", cores=cores)
    return [*((w.header, w.nodes) for w in ws), (header, nodes)]


def test_two_cores_owning_alternate_chunks_halve_a_server_bound_makespan():
    one, two = hub_job(cores=1), hub_job(cores=2)
    bound = 10 * 4 * 4 * SERVICE_S             # one core serves every push of every worker
    own1, own2 = project(one, TOFINO), project(two, TOFINO)
    assert bound < own1.makespan_s < 1.1 * bound
    assert own2.makespan_s / own1.makespan_s == pytest.approx(0.5, rel=0.05)
    # beyond the recorded count, the service model keeps the cores parallel
    at8_1, at8_2 = (project_world(t, 8, TOFINO).makespan_s for t in (one, two))
    assert 2 * bound < at8_1 < 1.1 * 2 * bound
    assert at8_2 / at8_1 == pytest.approx(0.5, rel=0.05)
    # and at the recorded count the service model agrees with the per-core replay
    assert project_world(two, 4, TOFINO, replay_recorded=False).makespan_s == pytest.approx(
        own2.makespan_s, rel=0.03)


def test_the_service_model_reads_each_tags_core_and_pairs_replies_within_it():
    h, nodes = hub_job(cores=2, iters=2)[-1]
    m = service_model(h, nodes, rank=4)
    assert m.cores == 2 and m.core_of == {"push.c0": 0, "push.c1": 1}
    assert m.service_s == {"push.c0": pytest.approx(SERVICE_S), "push.c1": pytest.approx(SERVICE_S)}
    # core 1's updates answer core 1's pushes, though core 0's nodes come first in the trace
    assert {t: r.tag for t, r in m.replies.items()} == {"push.c0": "update.c0", "push.c1": "update.c1"}


def test_a_multi_core_trace_without_cores_on_its_nodes_or_with_cross_core_deps_is_refused():
    tr = hub_job(cores=2, iters=1)
    h, nodes = tr[-1]
    bad = [dict(n) for n in nodes]
    del bad[3]["core"]
    with pytest.raises(ValueError, match=r"node 3 has core None; a trace of cores: 2 needs core 0..1"):
        service_model(h, bad, 0)
    with pytest.raises(ValueError, match=r"node 3 has core None"):
        project([*tr[:-1], (h, bad)], TOFINO)
    last = len(nodes) - 1              # a core-1 send; make it wait for core 0's first compute
    cross = [dict(n) for n in nodes]
    first_c0_compute = next(n["id"] for n in nodes if n["kind"] == "compute" and n["core"] == 0)
    cross[last] = dict(cross[last], deps=[first_c0_compute])
    with pytest.raises(ValueError, match=rf"node {last} \(core 1\) depends on node {first_c0_compute} of core 0"):
        project([*tr[:-1], (h, cross)], TOFINO)
    mixed = [dict(n) for n in nodes]
    i = next(n["id"] for n in nodes if n["kind"] == "comm" and n["op"] == "recv" and n["core"] == 1)
    mixed[i] = dict(mixed[i], group=mixed[i]["group"].replace("push.c1", "push.c0"))
    with pytest.raises(ValueError, match=r"'push.c0' messages received on cores 0 and 1"):
        service_model(h, mixed, 0)
