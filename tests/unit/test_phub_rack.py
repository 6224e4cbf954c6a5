"""Cross-rack PHub's server logic (hosts/phub/rack.py RackState), without a network:
racks chaining their rank-ordered partial sums give the single PHub server's
weights bit for bit, whatever order the messages arrive in; bad messages are
refused with the reason."""
from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from hosts.common.tcp import ProtocolError
from hosts.phub import protocol as P
from hosts.phub.config import JobSpec
from hosts.phub.optimizer import OptimizerSpec
from hosts.phub.rack import WORKERS, RackState
from hosts.phub.server import JobState, Stages

SIZES = [1000, 37, 5000, 3]


def spec(world: int, kind: str = "nesterov") -> JobSpec:
    return JobSpec(1, world, SIZES, 1024, OptimizerSpec(kind, 0.05, 0.9, 0.01), [f"w{i}" for i in range(world)])


def grads(world: int, iters: int, seed: int = 3) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(sum(SIZES)).astype(np.float32) * np.float32(10.0) ** int(rng.integers(-3, 3))
             for _ in range(world)] for _ in range(iters)]


def single_server(sp: JobSpec, w0: np.ndarray, g) -> np.ndarray:
    s = JobState(sp, 0, 1)
    ids = np.arange(s.plan.n_chunks)
    s.init(ids, w0)
    for it, per_rank in enumerate(g):
        for rank in reversed(range(sp.world)):          # arrival order does not matter here either
            s.push(rank, it, ids, per_rank[rank], Stages())
    return s.w.copy()


def racks_run(sp: JobSpec, w0: np.ndarray, g, bounds: list[int], seed: int) -> list[np.ndarray]:
    """Racks of ranks [bounds[r], bounds[r+1]); messages delivered in a random order
    (each link first in first out). Returns each rack's workers' final weights."""
    rng = random.Random(seed)
    R = len(bounds) - 1
    states = [RackState(sp, r, R, range(bounds[r], bounds[r + 1])) for r in range(R)]
    flat = [np.concatenate([w0]) for _ in range(R)]            # what each rack's workers hold
    links: dict[tuple, deque] = {}
    ids = list(range(states[0].plan.n_chunks))

    def send(src, actions):
        for dest, kind, it, cids, payload in actions:
            if dest == WORKERS:
                assert kind == P.UPDATE
                for cid, part in zip(cids, states[src]._parts(cids, payload)):
                    flat[src][states[src].sl[cid]] = part
            else:
                links.setdefault((src, dest), deque()).append((kind, it, cids, payload))

    send(0, states[0].init(ids, w0))
    for it, per_rank in enumerate(g):
        for r in range(R):
            for rank in range(bounds[r], bounds[r + 1]):
                links.setdefault((("w", rank), r), deque()).append((P.PUSH, it, ids, per_rank[rank]))
        while any(links.values()):
            (src, dest), q = rng.choice([(k, q) for k, q in links.items() if q])
            kind, mit, cids, payload = q.popleft()
            st = states[dest]
            if kind == P.PUSH:
                send(dest, st.push(src[1], mit, cids, payload))
            elif kind == P.PREFIX:
                send(dest, st.prefix(mit, cids, payload))
            elif kind == P.SUM:
                send(dest, st.complete_sum(mit, cids, payload))
            elif kind == P.XUPDATE:
                send(dest, st.xupdate(mit, cids, payload))
            else:
                send(dest, st.init(cids, payload))
    return flat


@pytest.mark.parametrize("bounds", [[0, 2, 4], [0, 3, 5], [0, 1, 3, 6]])
@pytest.mark.parametrize("kind", ["nesterov", "sgd"])
def test_chained_racks_give_the_single_servers_weights_bit_for_bit(bounds, kind):
    world = bounds[-1]
    sp = spec(world, kind)
    w0 = np.random.default_rng(0).standard_normal(sum(SIZES)).astype(np.float32)
    g = grads(world, iters=3)
    ref = single_server(sp, w0, g)
    for seed in range(3):
        out = racks_run(sp, w0, g, bounds, seed)
        for r, w in enumerate(out):
            assert w.tobytes() == ref.tobytes(), (seed, r)
    # the racks' own partial sums added up give other bits: the chain is what makes it exact
    lo, mid, hi = bounds[0], bounds[1], bounds[-1]
    tree = np.sum(g[0][lo:mid], axis=0, dtype=np.float32) + np.sum(g[0][mid:hi], axis=0, dtype=np.float32)
    chain = g[0][0].copy()
    for x in g[0][1:]:
        chain += x
    assert tree.tobytes() != chain.tobytes()


def test_each_rack_optimizes_only_its_shard():
    sp = spec(4)
    states = [RackState(sp, r, 2, range(2 * r, 2 * r + 2)) for r in range(2)]
    n = states[0].plan.n_chunks
    assert [c for c in range(n) if states[0].owner(c) == 0] == list(range(0, n, 2))
    w0 = np.zeros(sum(SIZES), np.float32)
    fwd = states[0].init(list(range(n)), w0)
    assert [(d, k, ids) for d, k, _, ids, _ in fwd] == [(1, P.INIT, list(range(1, n, 2)))]


def test_bad_messages_are_refused_with_the_reason():
    sp = spec(4)
    r0, r1 = (RackState(sp, r, 2, range(2 * r, 2 * r + 2)) for r in range(2))
    ids = list(range(r0.plan.n_chunks))
    full = np.zeros(sum(SIZES), np.float32)
    with pytest.raises(ProtocolError, match=r"rank 3 pushed to rack 0, which serves ranks range\(0, 2\)"):
        r0.push(3, 0, ids, full)
    with pytest.raises(ProtocolError, match="rack 0 got a PREFIX"):
        r0.prefix(0, ids, full)
    with pytest.raises(ProtocolError, match="chunk 0 got iteration 1's copy at position 1"):
        r1.push(2, 1, ids, full)
    with pytest.raises(ProtocolError, match="payload of 3 values for chunks holding"):
        r0.push(0, 0, ids, full[:3])
    r0.push(0, 0, ids, full)
    (prefix,) = r0.push(1, 0, ids, full)
    assert prefix[:3] == (1, P.PREFIX, 0)
    r1.prefix(0, ids, prefix[4])
    r1.push(2, 0, ids, full)
    assert "waiting for rank 3" in r1.incomplete()
    # rack 1 owns the odd chunks and no INIT reached it yet: their sums wait for it
    out = r1.push(3, 0, ids, full)
    assert all(k == P.UPDATE and all(c % 2 == 0 for c in c_ids) for _, k, _, c_ids, _ in out if k != P.SUM)
    assert sorted(r1.pending) == list(range(1, len(ids), 2))
    late = r1.init(list(range(1, len(ids), 2)), np.zeros(len(full) - sum(
        r1.sl[c].stop - r1.sl[c].start for c in range(0, len(ids), 2)), np.float32))
    assert {(d, k) for d, k, *_ in late} == {(WORKERS, P.UPDATE), (0, P.XUPDATE)} and not r1.pending


def test_a_rack_server_takes_its_workers_through_the_servers_accept_links():
    """hosts/phub/server.py accept_links serves a ServerConfig and a RackServerConfig alike
    (its port offset and the cores its HELLO names: core_index, total_cores). A rack server
    without them failed at its first line of serving (AttributeError), in every cross-rack
    run; here with no worker to wait for, it listens and returns at once."""
    from hosts.phub.config import JobSpec, OptimizerSpec, RackServerConfig
    from hosts.phub.server import accept_links
    job = JobSpec(1, 4, [700], 1024, OptimizerSpec("sgd", 1.0, 0.0), ["w2", "w3", "w5", "w6"])
    cfg = RackServerConfig(host="w1", ip="127.0.0.1", port=0, rack=0,
                           servers=[{"name": "w1", "ip": "127.0.0.1"}, {"name": "w4", "ip": "127.0.0.1"}],
                           ranks=[0, 2], jobs=[job], out="/dev/null", connect_timeout_s=1.0, timeout_s=1.0)
    assert cfg.total_cores == 1 and cfg.core_index(0) == 0
    assert accept_links(cfg, 0, range(0)) == {}
