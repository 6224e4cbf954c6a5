"""Host allreduce baselines, pure logic: chunking and ring schedule, tensors and
tolerance, latency summaries, frame headers, config validation. No sockets."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hosts.collectives import check_hello, make_hello
from hosts.collectives.ring import allgather_step, chunk_bounds, owned_chunk, reduce_scatter_step
from hosts.collectives.tree import tree_children, tree_depth, tree_parent
from hosts.common.config import AllreduceConfig, ConfigError, ps_port, ring_port
from hosts.common.results import JsonlWriter, latency_summary, percentile
from hosts.common.tcp import (HEADER, KIND_BARRIER, KIND_DATA, ProtocolError, pack_header,
                              unpack_header)
from hosts.common.tensors import (check_allreduce, make_tensor, reference_sum, relative_error,
                                  tolerance)

pytestmark = pytest.mark.unit


# --- chunking and the ring schedule --------------------------------------------

@given(n=st.integers(0, 5000), parts=st.integers(1, 64))
def test_chunk_bounds_cover_contiguously_and_balance(n, parts):
    b = chunk_bounds(n, parts)
    assert len(b) == parts
    assert b[0][0] == 0 and b[-1][1] == n
    assert all(b[i][1] == b[i + 1][0] for i in range(parts - 1))
    lens = [hi - lo for lo, hi in b]
    assert min(lens) >= 0 and max(lens) - min(lens) <= 1


def test_chunk_bounds_examples():
    assert chunk_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert chunk_bounds(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 2)]   # empty chunks are fine
    assert chunk_bounds(5, 1) == [(0, 5)]


@pytest.mark.parametrize("world", range(2, 9))
def test_schedule_neighbours_agree(world):
    # What rank r receives at a step is exactly what its left neighbour sends.
    for step in range(world - 1):
        for r in range(world):
            left = (r - 1) % world
            assert reduce_scatter_step(left, world, step)[0] == reduce_scatter_step(r, world, step)[1]
            assert allgather_step(left, world, step)[0] == allgather_step(r, world, step)[1]
        # Allgather starts by sending the chunk reduce-scatter left fully reduced.
        assert all(allgather_step(r, world, 0)[0] == owned_chunk(r, world) for r in range(world))


def simulate_ring(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The ring algorithm with in-memory 'sends', same schedule and arithmetic as ring.py."""
    world = len(inputs)
    bufs = [x.astype(np.float32).copy() for x in inputs]
    bounds = chunk_bounds(bufs[0].size, world)
    for step in range(world - 1):
        sent = [bufs[r][slice(*bounds[reduce_scatter_step(r, world, step)[0]])].copy() for r in range(world)]
        for r in range(world):
            lo, hi = bounds[reduce_scatter_step(r, world, step)[1]]
            bufs[r][lo:hi] += sent[(r - 1) % world]
    for step in range(world - 1):
        sent = [bufs[r][slice(*bounds[allgather_step(r, world, step)[0]])].copy() for r in range(world)]
        for r in range(world):
            lo, hi = bounds[allgather_step(r, world, step)[1]]
            bufs[r][lo:hi] = sent[(r - 1) % world]
    return bufs


@settings(max_examples=60, deadline=None)
@given(world=st.integers(1, 8), size=st.integers(1, 300), seed=st.integers(0, 2**31))
def test_ring_schedule_computes_the_sum_identically_everywhere(world, size, seed):
    assert_one_sum_everywhere(simulate_ring, world, size, seed)


def assert_one_sum_everywhere(simulate, world: int, size: int, seed: int) -> None:
    """simulate(inputs) gives every rank the same bits, and they are the allreduce's sum."""
    inputs = [make_tensor(seed, r, size, 0) for r in range(world)]
    out = simulate(inputs)
    for r in range(world):
        assert out[r].tobytes() == out[0].tobytes()
    ok, err = check_allreduce(out[0], seed, world, size, 0)
    assert ok, err


# --- the binomial tree ---------------------------------------------------------------

def test_tree_shape_by_hand():
    assert [tree_parent(r) for r in range(8)] == [None, 0, 0, 2, 0, 4, 4, 6]
    assert [tree_children(r, 8) for r in range(8)] == [[1, 2, 4], [], [3], [], [5, 6], [], [7], []]
    assert [tree_children(r, 5) for r in range(5)] == [[1, 2, 4], [], [3], [], []]
    assert [tree_depth(n) for n in (1, 2, 3, 4, 5, 8, 9, 63, 64)] == [0, 1, 2, 2, 3, 3, 4, 6, 6]


@pytest.mark.parametrize("world", range(1, 34))
def test_tree_parents_and_children_agree_and_span_every_rank(world):
    for r in range(world):
        assert all(tree_parent(c) == r for c in tree_children(r, world))
    assert sorted(c for r in range(world) for c in tree_children(r, world)) == list(range(1, world))
    assert len(tree_children(0, world)) == tree_depth(world)     # the root: one child per round


def simulate_tree(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The tree allreduce with in-memory 'sends', same schedule and arithmetic as tree.py:
    rank r adds its children's partials (ascending 2^k) to its own, then rank 0's sum
    is copied down."""
    world = len(inputs)
    bufs = [x.astype(np.float32).copy() for x in inputs]
    for r in reversed(range(world)):      # a child (> its parent) is finished before its parent
        for c in tree_children(r, world):
            bufs[r] += bufs[c]
    for r in range(1, world):             # a parent (< its child) has the sum before its child
        bufs[r] = bufs[tree_parent(r)].copy()
    return bufs


@settings(max_examples=60, deadline=None)
@given(world=st.integers(1, 9), size=st.integers(1, 300), seed=st.integers(0, 2**31))
def test_tree_schedule_computes_the_sum_identically_everywhere(world, size, seed):
    assert_one_sum_everywhere(simulate_tree, world, size, seed)


@settings(max_examples=30, deadline=None)
@given(world=st.integers(2, 9), cuts=st.lists(st.integers(1, 299), max_size=6), seed=st.integers(0, 2**31))
def test_tree_sums_each_element_in_one_order_so_per_tensor_equals_packed(world, cuts, seed):
    """workload.pack false reduces the model tensor by tensor: through the tree the
    bits are the packed allreduce's (each element's additions happen in one order)."""
    inputs = [make_tensor(seed, r, 300, 0) * np.float32(1e3 ** (r % 3)) for r in range(world)]
    packed = simulate_tree(inputs)[0]
    edges = [0, *sorted(set(cuts)), 300]
    pieces = [simulate_tree([x[a:b] for x in inputs])[0] for a, b in zip(edges, edges[1:])]
    assert np.concatenate(pieces).tobytes() == packed.tobytes()


# --- tensors and tolerance --------------------------------------------------------

def test_tensors_are_deterministic_and_distinct():
    a = make_tensor(1, 0, 64, 3)
    assert a.dtype == np.float32 and a.shape == (64,)
    assert np.array_equal(a, make_tensor(1, 0, 64, 3))
    for other in [(2, 0, 64, 3), (1, 1, 64, 3), (1, 0, 64, 4)]:
        assert not np.array_equal(a, make_tensor(*other))


def test_check_rejects_wrong_sums():
    seed, world, size = 7, 4, 1000
    ref, _ = reference_sum(seed, world, size, 0)
    assert check_allreduce(ref, seed, world, size, 0)[0]
    missing_rank = sum(make_tensor(seed, r, size, 0) for r in range(world - 1))
    assert not check_allreduce(missing_rank.astype(np.float32), seed, world, size, 0)[0]
    shifted = np.roll(ref, 1)
    assert not check_allreduce(shifted, seed, world, size, 0)[0]
    assert not check_allreduce(ref[:-1], seed, world, size, 0)[0]      # wrong length
    nan = ref.copy()
    nan[5] = np.nan
    assert not check_allreduce(nan, seed, world, size, 0)[0]


def test_tolerance_survives_cancellation():
    # A size-1 sum that nearly cancels: error relative to Σ|x| stays tiny.
    x = [np.array([1.0000001], np.float32), np.array([-1.0], np.float32)]
    res = (x[0] + x[1]).astype(np.float32)
    ref = np.float32(np.float64(x[0][0]) + np.float64(x[1][0]))
    assert relative_error(res, np.array([ref]), 2.0) <= tolerance(2)


def test_tolerance_grows_with_world_only_beyond_the_floor():
    assert tolerance(2) == 1e-5 and tolerance(64) == 1e-5
    assert tolerance(1000) > 1e-5


# --- results ----------------------------------------------------------------------

def test_percentiles_interpolate_linearly():
    v = [4.0, 1.0, 3.0, 2.0]
    assert percentile(v, 50) == 2.5
    assert percentile(v, 0) == 1.0 and percentile(v, 100) == 4.0
    assert percentile(v, 90) == pytest.approx(3.7)
    assert percentile([], 50) is None


def test_latency_summary_goodput_is_bytes_over_p50():
    s = latency_summary([0.001, 0.002, 0.003], nbytes=1_000_000)
    assert s["n"] == 3 and s["p50_s"] == 0.002 and s["mean_s"] == pytest.approx(0.002)
    assert s["goodput_gbps"] == pytest.approx(1_000_000 * 8 / 0.002 / 1e9)
    empty = latency_summary([], 4)
    assert empty["p50_s"] is None and empty["goodput_gbps"] is None


def test_jsonl_writer(tmp_path):
    path = tmp_path / "sub" / "out.jsonl"
    with JsonlWriter(path) as w:
        w.write({"a": np.float32(1.5), "b": np.int64(2)})
        w.write({"c": None})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"a": 1.5, "b": 2}, {"c": None}]


# --- frame header and handshake ----------------------------------------------------

def test_header_roundtrip_and_errors():
    h = pack_header(KIND_DATA, np.dtype("<f4"), 2**32 + 5, 123)
    assert len(h) == HEADER.size == 20
    kind, dtype, seq, count = unpack_header(h)
    assert (kind, dtype, seq, count) == (KIND_DATA, np.dtype("<f4"), 5, 123)
    with pytest.raises(ProtocolError, match="magic"):
        unpack_header(b"XXXX" + h[4:])
    with pytest.raises(ProtocolError, match="kind"):
        unpack_header(h[:4] + bytes([99]) + h[5:])
    assert unpack_header(pack_header(KIND_BARRIER, np.dtype("<f4"), 0, 0))[0] == KIND_BARRIER


def test_hello_mismatch_names_the_field():
    mine = make_hello("w1", 0, {"seed": 1, "world": 2})
    check_hello(make_hello("w2", 1, {"seed": 1, "world": 2}), mine=mine, peer="w2", expected_rank=1)
    with pytest.raises(ProtocolError, match="seed: 1 here vs 2 at w2"):
        check_hello(make_hello("w2", 1, {"seed": 2, "world": 2}), mine=mine, peer="w2")
    with pytest.raises(ProtocolError, match="expected rank 1"):
        check_hello(make_hello("w3", 2, {"seed": 1, "world": 2}), mine=mine, peer="w2", expected_rank=1)
    with pytest.raises(ProtocolError, match="malformed"):
        check_hello({"nope": 1}, mine=mine, peer="w2")


# --- config -----------------------------------------------------------------------

def valid_config(**over):
    cfg = {
        "host": "w2", "role": "worker", "rank": 1, "world": 2, "algorithm": "ring",
        "peers": [{"name": "w1", "ip": "10.0.0.1"}, {"name": "w2", "ip": "10.0.0.2"}],
        "ps": None, "port": 47000, "sizes": [256, 4096], "iterations": 20, "warmup": 2,
        "compute_ms": 0, "seed": 123, "straggler": None, "start_at": None,
        "connect_timeout_s": 30, "timeout_s": 120, "out": "/tmp/x.jsonl",
    }
    cfg.update(over)
    return cfg


def errors_of(cfg) -> str:
    with pytest.raises(ConfigError) as e:
        AllreduceConfig.from_json(cfg)
    return str(e.value)


def test_valid_config_parses(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(valid_config(straggler={"start_s": 1, "slowdown": 2.0, "delay_ms": 5})))
    cfg = AllreduceConfig.from_json(path)
    assert cfg.rank == 1 and cfg.my_ip == "10.0.0.2" and cfg.sizes == (256, 4096)
    assert cfg.straggler.slowdown == 2.0
    assert cfg.run_identity()["seed"] == 123


def test_ps_role_config():
    ps = {"name": "ps", "ip": "10.0.0.200"}
    cfg = AllreduceConfig.from_json(valid_config(host="ps", role="ps", rank=-1, algorithm="ps", ps=ps))
    assert cfg.my_ip == "10.0.0.200"


def test_port_scheme_does_not_clash():
    ports = {ps_port(47000)} | {ring_port(47000, r) for r in range(16)}
    assert len(ports) == 17


def test_missing_and_unknown_keys():
    cfg = valid_config(extra_key=1)
    del cfg["seed"]
    msg = errors_of(cfg)
    assert "seed: missing" in msg and "extra_key: unknown key" in msg


@pytest.mark.parametrize("over, expected", [
    ({"rank": True}, "rank: must be an integer"),
    ({"rank": 2}, "rank: must be in 0..1"),
    ({"world": 3}, "peers: has 2 entries but world is 3"),
    ({"host": "w1"}, "peers[1] is 'w2'"),
    ({"algorithm": "bogus"}, "algorithm: must be one of ring, ps, switch"),
    ({"algorithm": "ps"}, 'algorithm "ps" needs'),
    ({"role": "ps", "ps": {"name": "w2", "ip": "10.0.0.2"}}, 'role "ps" only makes sense'),
    ({"sizes": [0]}, "sizes: must be a non-empty list of positive integers"),
    ({"sizes": []}, "sizes: must be a non-empty list"),
    ({"peers": [{"name": "w1", "ip": "10.0.0.1"}, {"name": "w2", "ip": "not-an-ip"}]}, "peers[1].ip"),
    ({"peers": [{"name": "w2", "ip": "10.0.0.1"}, {"name": "w2", "ip": "10.0.0.2"}]}, "duplicate host names"),
    ({"straggler": {"start_s": 0, "slowdown": 1}}, "straggler: must be null or an object"),
    ({"straggler": {"start_s": 0, "slowdown": 0, "delay_ms": 1}}, "straggler.slowdown: must be > 0"),
    ({"timeout_s": 0}, "timeout_s: must be > 0"),
    ({"compute_ms": "5"}, "compute_ms: must be a number"),
    ({"port": 65535}, "port + world must stay below 65536"),
    ({"out": None}, "out: must not be null"),
])
def test_config_errors_are_specific(over, expected):
    assert expected in errors_of(valid_config(**over))


def test_all_errors_reported_together():
    msg = errors_of(valid_config(iterations=0, warmup=-1, seed="x"))
    assert "iterations" in msg and "warmup" in msg and "seed" in msg


def test_unreadable_config_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        AllreduceConfig.from_json(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON at line 1"):
        AllreduceConfig.from_json(bad)
    lst = tmp_path / "list.json"
    lst.write_text("[]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        AllreduceConfig.from_json(lst)
