"""LHC codec: decode(sum encode(g_i)) == sum g_i exactly (fixed point), for random
sparse gradients, worker counts and sketch sizes, including sizes far below the
peeling threshold and a dense union support; plus the pieces it is built from."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hosts.lhc import codec, rounds, scale, sizing

pytestmark = pytest.mark.unit


def sparse_grads(seed: int, world: int, n: int, density: float, overlap: float = 0.0,
                 magnitude: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shared = rng.random(n) < density
    out = []
    for _ in range(world):
        own = rng.random(n) < density
        mask = np.where(rng.random(n) < overlap, shared, own)
        g = np.zeros(n, np.float32)
        g[mask] = (rng.standard_normal(int(mask.sum())) * magnitude).astype(np.float32)
        out.append(g)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), world=st.integers(1, 8), n=st.integers(1, 5000),
       density=st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.3, 1.0]),
       overlap=st.sampled_from([0.0, 0.5, 1.0]),
       lanes=st.sampled_from([None, 1, 7, 64, 1024]),
       rows=st.one_of(st.none(), st.integers(1, 12).map(lambda r: 3 * r)),
       support=st.sampled_from(["or", "nibbles"]), compact=st.booleans(),
       magnitude=st.sampled_from([1e-6, 1.0, 3e4]))
def test_decode_of_summed_sketches_is_the_exact_sum(seed, world, n, density, overlap, lanes, rows,
                                                    support, compact, magnitude):
    grads = sparse_grads(seed, world, n, density, overlap, magnitude)
    y, rs = rounds.local_allreduce(grads, support=support, lanes=lanes, rows=rows, compact=compact)
    ref, k = rounds.exact_fixed_sum(grads)
    assert all(r.k == k for r in rs)
    assert np.array_equal(rs[0].int_sum.astype(np.int64), ref)          # bit for bit, fixed point
    assert np.array_equal(y, scale.dequantize(ref, k))
    assert all(np.array_equal(r.int_sum, rs[0].int_sum) for r in rs)    # every worker decodes alike


def test_dense_union_support_is_still_exact_and_says_it_did_not_compress():
    grads = sparse_grads(3, 4, 20000, density=1.0)
    y, rs = rounds.local_allreduce(grads)
    ref, k = rounds.exact_fixed_sum(grads)
    assert np.array_equal(rs[0].int_sum.astype(np.int64), ref)
    w = rs[0].wire()
    assert w["union"] == 20000 and w["sketch_values"] + w["core_values"] >= 20000


def test_below_threshold_plain_peeling_fails_and_completion_pays_in_bytes():
    grads = sparse_grads(5, 4, 1 << 16, density=0.02)
    union = np.any(np.stack(grads) != 0, axis=0)
    small = codec.make_plan(union, rows=3 * 2, lanes=64)       # ~0.08 counters per nonzero
    ample = codec.make_plan(union)
    fixed = codec.make_plan(union, lanes=1024)                  # ~5 positions per lane
    assert small.core.size > 0.5 * small.union and not small.peeled
    assert ample.core.size < 0.05 * ample.union < fixed.core.size
    assert small.counters / small.union < 1 < ample.counters / ample.union
    _, rs = rounds.local_allreduce(grads, rows=6, lanes=64)
    ref, _ = rounds.exact_fixed_sum(grads)
    assert np.array_equal(rs[0].int_sum.astype(np.int64), ref)


def test_peeling_recovers_everything_above_threshold_on_large_lanes():
    union = np.random.default_rng(1).random(64 * 4000) < 0.5   # 64 lanes of ~2000 positions
    plan = codec.make_plan(union, lanes=64)
    assert plan.peeled and plan.counters / plan.union < 1.4


def test_a_corrupted_sketch_is_refused_not_estimated():
    grads = sparse_grads(2, 3, 4096, density=0.05)
    rs = [rounds.LhcRound(3, lanes=256) for _ in grads]
    agg = np.bitwise_or.reduce(np.stack([r.support_message(g) for r, g in zip(rs, grads)]), axis=0)
    total = rounds._wrapping_sum([r.encode(agg, g) for r, g in zip(rs, grads)])
    assert rs[0].plan.rows > 0
    total[0] += 1
    with pytest.raises(codec.DecodeError, match="nonzero after peeling"):
        rs[0].decode(total)
    with pytest.raises(codec.DecodeError, match="payload has"):
        rs[0].decode(total[:-1])


def test_support_that_misses_a_nonzero_is_refused():
    g = np.zeros(100, np.float32)
    g[7] = 1.0
    r = rounds.LhcRound(2, lanes=16)
    r.support_message(g)
    empty = codec.pack_bits(np.concatenate([np.zeros(100, bool), scale.exponent_bits(g)]))
    with pytest.raises(codec.DecodeError, match="misses"):
        r.encode(empty, g)


@given(st.lists(st.booleans(), min_size=0, max_size=300))
def test_bit_and_nibble_packing_round_trip(bits):
    b = np.array(bits, dtype=bool)
    assert np.array_equal(codec.unpack_bits(codec.pack_bits(b), b.size), b)
    assert np.array_equal(codec.unpack_nibbles(codec.pack_nibbles(b), b.size), b)


def test_nibble_counts_sum_without_carry_up_to_15_workers():
    b = np.ones(17, dtype=bool)
    s = rounds._wrapping_sum([codec.pack_nibbles(b)] * 15)
    assert codec.unpack_nibbles(s, 17).all()
    with pytest.raises(ValueError, match="at most 15"):
        rounds.LhcRound(16, support="nibbles")


def test_scale_cannot_overflow_int32_for_n_workers():
    world = 8
    grads = [np.full(10, np.float32(3.0e38 / 2**100)) for _ in range(world)]
    ref, k = rounds.exact_fixed_sum(grads)
    assert np.abs(ref).max() <= 2**30


def test_sizing_rule():
    assert sizing.sketch_rows(0, 1024) == 3
    r = sizing.sketch_rows(100 * 1024, 1024)
    assert r % 3 == 0 and 1.23 * 100 <= r <= 1.23 * (100 + 2 * 10) + 3
    with pytest.raises(ValueError):
        sizing.sketch_rows(-1, 4)
    with pytest.raises(ValueError, match="multiple of 3"):
        codec.block_hashes(4, 4)


def test_hash_rows_are_distinct_per_block_and_shared():
    row, sign = codec.block_hashes(500, 30)
    assert (row[0] != row[1]).all() and (row[1] != row[2]).all() and (row[0] != row[2]).all()
    assert set(np.unique(sign)) <= {-1, 1}
    r2, s2 = codec.block_hashes(500, 30)
    assert np.array_equal(row, r2) and np.array_equal(sign, s2)


def _plan_both_ways(union, rows, lanes):
    """(compiled, python) plans of one union: the same inputs through each peeling."""
    plan = codec.make_plan(union, rows=rows, lanes=lanes)
    ref = codec.Plan(plan.n, plan.lanes, plan.rows, plan.positions, plan.cells, plan.signs)
    codec._peel_python(ref)
    return plan, ref


@pytest.mark.skipif(codec.PEEL_IMPL != "compiled", reason="hosts/lhc/_peel.c is not built (make setup builds it)")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 6000), density=st.floats(0.0, 1.0),
       lanes=st.sampled_from([1, 2, 7, 64]), rows_scale=st.floats(0.2, 2.0))
def test_compiled_peeling_gives_the_references_rounds_and_core(seed, n, density, lanes, rows_scale):
    rng = np.random.default_rng(seed)
    union = rng.random(n) < density
    m = int(union.sum())
    # rows around the sizing rule's and below it: plans that stall and leave a 2-core too
    rows = max(codec.K, int(round(rows_scale * sizing.sketch_rows(max(1, m), lanes) / codec.K)) * codec.K)
    plan, ref = _plan_both_ways(union, rows, lanes)
    assert len(plan.rounds) == len(ref.rounds)
    for (sel, j), (want_sel, want_j) in zip(plan.rounds, ref.rounds):
        assert sel.dtype == want_sel.dtype and j.dtype == want_j.dtype
        assert np.array_equal(sel, want_sel) and np.array_equal(j, want_j)
    assert np.array_equal(plan.core, ref.core) and plan.core.dtype == ref.core.dtype
    assert np.array_equal(plan.sketched, ref.sketched)


@pytest.mark.skipif(codec.PEEL_IMPL != "compiled", reason="hosts/lhc/_peel.c is not built (make setup builds it)")
def test_compiled_peeling_agrees_at_full_size_near_the_threshold_and_refuses_bad_cells():
    # one lane of the reproduction's size at the sizing rule's load (papers/lhc.py _peel):
    # many rounds that free a few positions each
    rng = np.random.default_rng(7)
    blocks, load = 140_301, 47_021
    union = np.zeros(blocks, bool)
    union[rng.choice(blocks, size=load, replace=False)] = True
    plan, ref = _plan_both_ways(union, sizing.sketch_rows(46_341 * 1024, 1024), 1)
    assert len(plan.rounds) == len(ref.rounds) > 40
    assert all(np.array_equal(a, b) and np.array_equal(x, y) for (a, x), (b, y) in zip(plan.rounds, ref.rounds))
    with pytest.raises(ValueError, match="out of"):
        codec._peelc.peel(np.array([0, 5], np.int64), 2, 1, 3, np.empty(2, np.int32), np.empty(2, np.int8),
                          np.empty(2, np.int64))
