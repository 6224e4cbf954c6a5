"""PHub's chunking and in-server optimizer (hosts/phub/chunking.py, optimizer.py)."""
import numpy as np
import pytest

from hosts.phub.chunking import ChunkPlan, owner
from hosts.phub.optimizer import OptimizerSpec, step


def test_chunks_cover_keys_with_a_short_last_chunk():
    plan = ChunkPlan([10, 8, 3], chunk_bytes=16)          # 4 values per chunk
    assert [(c.key, c.offset, c.length) for c in plan.chunks] == [
        (0, 0, 4), (0, 4, 4), (0, 8, 2), (1, 0, 4), (1, 4, 4), (2, 0, 3)]
    assert [list(r) for r in plan.key_chunks] == [[0, 1, 2], [3, 4], [5]]
    assert plan.total_values == 21


def test_split_is_views_that_reassemble_the_key():
    plan = ChunkPlan([10], chunk_bytes=12)
    flat = np.arange(10, dtype=np.float32)
    parts = plan.split(0, flat)
    assert [cid for cid, _ in parts] == [0, 1, 2, 3]
    assert np.array_equal(np.concatenate([p for _, p in parts]), flat)
    parts[1][1][0] = -1.0                                   # a view, not a copy
    assert flat[3] == -1.0
    with pytest.raises(ValueError, match="key 0 has 10 values"):
        plan.split(0, flat[:9])


def test_default_chunk_is_32_kib_and_bad_sizes_are_refused():
    assert ChunkPlan([1]).chunk_values == 8192
    with pytest.raises(ValueError, match="multiple of 4"):
        ChunkPlan([5], chunk_bytes=6)
    with pytest.raises(ValueError, match="at least one value"):
        ChunkPlan([5, 0])


def test_owner_is_round_robin_and_partitions_the_chunks():
    plan = ChunkPlan([100, 37], chunk_bytes=16)
    owned = [plan.owned(c, 3) for c in range(3)]
    assert sorted(sum(owned, [])) == list(range(plan.n_chunks))
    assert owned[1][:3] == [1, 4, 7]
    assert owner(7, 3) == 1


def test_sgd_exact_values():
    w = np.array([1.0, -2.0, 0.5], np.float32)
    gsum = np.array([2.0, 4.0, -8.0], np.float32)          # 2 workers: mean 1, 2, -4
    step(OptimizerSpec("sgd", lr=0.5, momentum=0.0), w, None, gsum, world=2)
    assert w.tolist() == [0.5, -3.0, 2.5]


def test_nesterov_exact_values_over_two_steps():
    spec = OptimizerSpec("nesterov", lr=0.5, momentum=0.5)
    w = np.array([1.0, 0.0], np.float32)
    v = np.zeros(2, np.float32)
    step(spec, w, v, np.array([2.0, -4.0], np.float32), world=2)   # g = 1, -2
    assert v.tolist() == [1.0, -2.0]                                 # v = 0.5*0 + g
    assert w.tolist() == [0.25, 1.5]                                 # w - 0.5 * (g + 0.5 v)
    step(spec, w, v, np.array([0.0, 4.0], np.float32), world=2)    # g = 0, 2
    assert v.tolist() == [0.5, 1.0]
    assert w.tolist() == [0.125, 0.25]


def test_weight_decay_and_bad_specs():
    w = np.array([2.0], np.float32)
    step(OptimizerSpec("sgd", lr=0.25, weight_decay=0.5), w, None, np.array([1.0], np.float32), world=1)
    assert w.tolist() == [1.5]                                       # 2 - 0.25 * (1 + 1)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        OptimizerSpec("adam")
    with pytest.raises(ValueError, match="momentum"):
        OptimizerSpec("nesterov", momentum=1.0)


def test_chunked_update_equals_whole_tensor_update_bit_for_bit():
    rng = np.random.default_rng(0)
    spec = OptimizerSpec("nesterov", lr=0.037, momentum=0.9, weight_decay=1e-4)
    w0 = rng.standard_normal(1000).astype(np.float32)
    grads = [rng.standard_normal(1000).astype(np.float32) for _ in range(3)]
    whole_w, whole_v = w0.copy(), np.zeros(1000, np.float32)
    chunk_w, chunk_v = w0.copy(), np.zeros(1000, np.float32)
    plan = ChunkPlan([1000], chunk_bytes=4 * 96)
    for g in grads:
        step(spec, whole_w, whole_v, g, world=3)
        for (_, wc), (_, vc), (_, gc) in zip(plan.split(0, chunk_w), plan.split(0, chunk_v), plan.split(0, g)):
            step(spec, wc, vc, gc, world=3)
    assert whole_w.tobytes() == chunk_w.tobytes()
    assert whole_v.tobytes() == chunk_v.tobytes()
