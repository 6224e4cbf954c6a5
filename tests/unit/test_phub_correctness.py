"""Every PHub point's correctness check, without a network: the profile models'
gradients read the weights (hosts/phub/objective.py); PHub's server driven in
process (hosts/phub/server.py JobState, messages in random orders) ends at the
in-process plain PS replay's weights (hosts/phub/reference.py) bit for bit in rank
order and within float rounding in arrival order; so do the sharded_ps baseline's
servers (MXNet kvstore's placement, chunking.kvstore_plan, checked part by part
against kvstore_dist.h's rule); the workload's check (testbed/workloads/phub.py
weights_check) catches a perturbed weight and fails the point with the reason."""
from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from hosts.common.tcp import ProtocolError
from hosts.phub import objective
from hosts.phub.chunking import kvstore_plan
from hosts.phub.config import JobSpec
from hosts.phub.model import ProfileModel
from hosts.phub.optimizer import OptimizerSpec
from hosts.phub.reference import ARRIVAL_REL_TOL, compare, plain_ps_weights, replay_layers
from hosts.phub.server import JobState, Stages

SIZES = [700, 37, 2500, 3, 900]
NESTEROV = OptimizerSpec("nesterov", 0.05, 0.9, 1e-4)


def phub_in_process(sizes, world: int, steps: int, spec: OptimizerSpec, order: str, seed: int = 1,
                    cores: int = 2, chunk_bytes: int = 1024, shuffle: int = 0,
                    stale: tuple[int, int] | None = None, bigarray_bound: int | None = None) -> list[np.ndarray]:
    """PHub's server (one JobState per core) and `world` workers training the profile
    objective: each step every worker computes its gradients from its own weights and
    pushes each key's chunks per owning core; the messages reach the cores in a random
    order (`shuffle` seeds it); an UPDATE lands in every worker's weights. `stale`
    (rank, step): that rank computes that step's gradients from the weights before the
    previous step's update (a worker that did not wait). `bigarray_bound`: the sharded_ps
    baseline instead, `cores` kvstore servers with MXNet's placement of the keys (that
    bound). Each worker's final flat weights."""
    kv = {} if bigarray_bound is None else {"placement": "kvstore", "bigarray_bound": bigarray_bound}
    sp = JobSpec(1, world, list(sizes), chunk_bytes, spec, [f"w{r}" for r in range(world)], **kv)
    states = [JobState(sp, c, cores, order=order) for c in range(cores)]
    plan = states[0].plan
    starts = np.cumsum([0, *sizes])
    w0 = np.concatenate(objective.initial_weights(seed, sizes))
    for c, s in enumerate(states):
        ids = np.array(plan.owned(c, cores))
        s.init(ids, np.concatenate([w0[starts[plan.chunks[i].key] + plan.chunks[i].offset:][:plan.chunks[i].length]
                                    for i in ids]))
    flat = [w0.copy() for _ in range(world)]
    before = [w0.copy() for _ in range(world)]
    bases = [[objective.noise_base(seed, r, k, n) for k, n in enumerate(sizes)] for r in range(world)]
    rng = random.Random(shuffle)
    for t in range(steps):
        msgs = []
        for r in range(world):
            src = before[r] if stale == (r, t) else flat[r]
            before[r] = flat[r].copy()
            g = np.concatenate([objective.gradient(src[starts[k]:starts[k + 1]], bases[r][k], t,
                                                   np.empty(n, np.float32)) for k, n in enumerate(sizes)])
            for c in range(cores):
                ids = plan.owned(c, cores)
                for k in range(len(sizes)):
                    mine = [i for i in ids if plan.chunks[i].key == k]
                    if mine:
                        payload = np.concatenate([g[starts[k] + plan.chunks[i].offset:][:plan.chunks[i].length]
                                                  for i in mine])
                        msgs.append((c, r, np.array(mine), payload))
        rng.shuffle(msgs)
        for c, r, ids, payload in msgs:
            for cid in states[c].push(r, t, ids, payload, Stages()):
                ch = plan.chunks[cid]
                at = starts[ch.key] + ch.offset
                for f in flat:
                    f[at:at + ch.length] = states[c].w[states[c].local[cid]]
    return flat


def _profile_model(seed=3, rank=1):
    cfg = SimpleNamespace(device={"type": "v100", "time_scale": 1.0}, batch_size=1, seed=seed, rank=rank,
                          straggler=None)
    m = ProfileModel(cfg, {"kind": "profile", "name": "resnet50", "size_scale": 0.0005})
    m.trace = SimpleNamespace(compute=lambda *a, **k: None)
    return m


def test_profile_gradients_read_the_current_weights():
    m = _profile_model()
    m.iteration(2, None, None)
    k = len(m.weights) - 1                                   # the fc layer
    g0 = m.grads[k].copy()
    assert g0.tobytes() == objective.gradient(m.weights[k], objective.noise_base(3, 1, k, g0.size), 2,
                                              np.empty_like(g0)).tobytes()
    m.weights[k][5] += np.float32(0.25)                      # only that weight moves
    m.iteration(2, None, None)
    diff = np.flatnonzero(m.grads[k] != g0)
    assert diff.tolist() == [5]
    assert m.grads[k][5] - g0[5] == pytest.approx(0.25 * float(objective.CURVATURE), rel=1e-5)
    other = _profile_model(rank=2)                           # another rank: its own noise
    other.iteration(2, None, None)
    assert not np.array_equal(other.grads[0], _grads_at(m, 0))


def _grads_at(m, k):
    m.iteration(2, None, None)
    return m.grads[k].copy()


@pytest.mark.parametrize("kind", ["nesterov", "sgd"])
@pytest.mark.parametrize("world", [2, 3, 5])
def test_phub_in_rank_order_ends_at_the_plain_ps_replay_bit_for_bit(kind, world):
    spec = OptimizerSpec(kind, 0.05, 0.9 if kind == "nesterov" else 0.0, 1e-4)
    ref = np.concatenate(plain_ps_weights(SIZES, 1, world, 4, spec))
    for shuffle in range(2):
        finals = phub_in_process(SIZES, world, 4, spec, "rank", shuffle=shuffle)
        chk = compare(ref, {f"w{r}": f for r, f in enumerate(finals)}, "bit_exact")
        assert chk.match and chk.ok and chk.max_abs_diff == 0.0, chk
    assert not np.array_equal(ref, np.concatenate(objective.initial_weights(1, SIZES)))


def test_a_worker_that_used_stale_weights_is_caught():
    """The gradients read the weights, so one step from stale weights shows in the end."""
    ref = np.concatenate(plain_ps_weights(SIZES, 1, 3, 4, NESTEROV))
    finals = phub_in_process(SIZES, 3, 4, NESTEROV, "rank", stale=(1, 2))
    chk = compare(ref, {f"w{r}": f for r, f in enumerate(finals)}, "bit_exact")
    assert not chk.match and not chk.ok and chk.max_abs_diff > 0
    assert "expected bit for bit" in chk.reason and "w0" in chk.reason    # every worker got the same update


@pytest.mark.parametrize("world", [3, 8])
def test_arrival_order_differs_from_the_plain_ps_only_by_rounding(world):
    steps = 12          # a calibrated point's 6 + 1 + 5 steps
    ref = np.concatenate(plain_ps_weights(SIZES, 1, world, steps, NESTEROV))
    finals = phub_in_process(SIZES, world, steps, NESTEROV, "arrival", shuffle=7)
    assert all(f.tobytes() == finals[0].tobytes() for f in finals)         # one server, one sum
    chk = compare(ref, {f"w{r}": f for r, f in enumerate(finals)}, "rounding")
    assert not chk.match                     # really summed in arrival order, not rank order
    assert chk.ok and 0 < chk.max_rel_diff < ARRIVAL_REL_TOL / 10, chk
    assert chk.max_ulp_diff >= 1 and 0 < chk.differing_share < 1, chk       # some values, a few steps
    # two copies: float addition commutes, so arrival order is the plain PS's bit for bit
    two = phub_in_process(SIZES, 2, 4, NESTEROV, "arrival", shuffle=3)
    assert two[0].tobytes() == np.concatenate(plain_ps_weights(SIZES, 1, 2, 4, NESTEROV)).tobytes()


def test_ulp_distance_counts_float32_steps_across_zero():
    from hosts.phub.reference import ulp_distance
    one = np.float32(1.0)
    a = np.array([one, one, 0.0, -0.0, 2.0], np.float32)
    tiny = np.float32(1e-45)                                 # the smallest subnormal
    b = np.array([one, np.nextafter(one, np.float32(2)), tiny, -tiny, np.nextafter(np.nextafter(
        np.float32(2.0), np.float32(0)), np.float32(0))], np.float32)
    assert ulp_distance(a, b).tolist() == [0, 1, 1, 1, 2]
    assert ulp_distance(np.array([-tiny], np.float32), np.array([tiny], np.float32)).tolist() == [2]
    assert ulp_distance(np.array([0.0], np.float32), np.array([-0.0], np.float32)).tolist() == [0]
    chk = compare(a, {"w0": a, "w1": b}, "rounding")
    assert chk.max_ulp_diff == 2 and chk.differing_share == 0.8


def test_arrival_order_sums_every_copy_as_it_comes_and_holds_none():
    world, n = 4, 300
    sp = JobSpec(1, world, [n], 4 * n, OptimizerSpec("sgd", 1.0, 0.0), [f"w{r}" for r in range(world)])
    copies = [np.random.default_rng(r).standard_normal(n).astype(np.float32) for r in range(world)]
    got = {}
    for order in ("rank", "arrival"):
        s = JobState(sp, 0, 1, order=order)
        s.init(np.array([0]), np.zeros(n, np.float32))
        done = [s.push(r, 0, np.array([0]), copies[r], Stages()) for r in (3, 1, 0, 2)]
        assert done == [[], [], [], [0]], order                 # complete with the 4th copy either way
        got[order] = -s.w * np.float32(world)                    # sgd, lr 1, from 0: w = -sum / 4 (exact)
        assert s.copies_held == (2 if order == "rank" else 0)   # ranks 3 and 1 waited for rank 0
    assert got["rank"].tobytes() == (((copies[0] + copies[1]) + copies[2]) + copies[3]).tobytes()
    assert got["arrival"].tobytes() == (((copies[3] + copies[1]) + copies[0]) + copies[2]).tobytes()
    assert got["rank"].tobytes() != got["arrival"].tobytes()    # the two orders round differently here
    exact = np.sum(np.array(copies, np.float64), axis=0)
    for order, total in got.items():                            # ... and both only by rounding
        assert np.max(np.abs(total - exact)) < 1e-6 * np.max(np.abs(exact)), order
    s = JobState(sp, 0, 1, order="arrival")
    s.push(2, 0, np.array([0]), copies[2], Stages())
    with pytest.raises(ProtocolError, match="rank 2 pushed chunk 0 twice in iteration 0"):
        s.push(2, 0, np.array([0]), copies[2], Stages())
    assert "waiting for ranks [0, 1, 3] (ranks [2] already in)" in s.incomplete()
    with pytest.raises(ValueError, match="aggregation order must be one of"):
        JobState(sp, 0, 1, order="random")


# -- sharded_ps: MXNet kvstore's placement ---------------------------------------------
def test_kvstore_placement_is_mxnets_encode_default_key():
    """kvstore_dist.h EncodeDefaultKey: a key of fewer than bigarray_bound values goes
    whole to server (key * 9973) % servers; a larger one is cut into one part per server,
    part i of round(n/k*(i+1)) - round(n/k*i) values (C's round) on server i."""
    plan = kvstore_plan([700, 37, 2500, 3, 1001, 1000], 3, bigarray_bound=1000)
    parts = [[(c.offset, c.length, plan.owners[c.id]) for c in (plan.chunks[i] for i in plan.key_chunks[k])]
             for k in range(6)]
    # 9973 % 3 = 1: key k's server is k % 3 here; keys 4 and 5 are at the bound or above: split
    assert parts[0] == [(0, 700, 0)] and parts[1] == [(0, 37, 1)] and parts[3] == [(0, 3, 0)]
    assert parts[2] == [(0, 833, 0), (833, 834, 1), (1667, 833, 2)]       # 833.3, 1666.7 -> 833, 1667
    assert parts[4] == [(0, 334, 0), (334, 333, 1), (667, 334, 2)]        # 333.67, 667.33 -> 334, 667
    assert parts[5] == [(0, 333, 0), (333, 334, 1), (667, 333, 2)]        # exactly 1000: split
    assert plan.owned(1, 3) == [1, 3, 7, 10]          # key 1 whole, and part 1 of keys 2, 4 and 5
    # the hash is not key % servers: 9973 % 7 = 5, so with 7 servers key 1 is on server 5
    seven = kvstore_plan([10] * 4, 7, bigarray_bound=1000)
    assert seven.owners == [0, 5, 3, 1] == [(k * 9973) % 7 for k in range(4)]
    # C rounds halves away from zero (Python's round would give 2, 2 for 5 / 2 at 0.5 steps)
    assert [c.length for c in kvstore_plan([5], 2, bigarray_bound=1).chunks] == [3, 2]
    with pytest.raises(ValueError, match="places keys on 3 servers, asked for 2"):
        plan.owned(0, 2)


def test_kvstore_placement_is_part_of_the_hello():
    """A worker and a server that place the keys differently refuse each other."""
    base = JobSpec(1, 2, [700, 2500], 1024, NESTEROV, ["w0", "w1"])
    kv = JobSpec(1, 2, [700, 2500], 1024, NESTEROV, ["w0", "w1"], placement="kvstore", bigarray_bound=1000)
    other = JobSpec(1, 2, [700, 2500], 1024, NESTEROV, ["w0", "w1"], placement="kvstore", bigarray_bound=2600)
    assert len({str(base.identity(2)), str(kv.identity(2)), str(other.identity(2))}) == 3
    assert base.identity(2) == JobSpec(1, 2, [700, 2500], 1024, NESTEROV, ["w0", "w1"]).identity(2)


# sizes with keys below and above the bound (1000 values), parts that do not divide
KV_SIZES = [700, 37, 2500, 3, 1001, 900, 4099]


@pytest.mark.parametrize("servers_per_worker", [0.5, 1.0])
@pytest.mark.parametrize("world", [2, 3, 5, 8])
def test_sharded_ps_in_rank_order_ends_at_the_plain_ps_replay_bit_for_bit(world, servers_per_worker):
    import math
    servers = math.ceil(servers_per_worker * world)
    ref = np.concatenate(plain_ps_weights(KV_SIZES, 1, world, 4, NESTEROV))
    for shuffle in range(2):
        finals = phub_in_process(KV_SIZES, world, 4, NESTEROV, "rank", cores=servers, shuffle=shuffle,
                                 bigarray_bound=1000)
        chk = compare(ref, {f"w{r}": f for r, f in enumerate(finals)}, "bit_exact")
        assert chk.match and chk.ok, (servers, chk)


def test_sharded_ps_in_arrival_order_differs_only_by_rounding_and_a_stale_worker_is_caught():
    world, steps = 5, 12
    ref = np.concatenate(plain_ps_weights(KV_SIZES, 1, world, steps, NESTEROV))
    finals = phub_in_process(KV_SIZES, world, steps, NESTEROV, "arrival", cores=3, shuffle=7, bigarray_bound=1000)
    chk = compare(ref, {f"w{r}": f for r, f in enumerate(finals)}, "rounding")
    assert not chk.match and chk.ok and 0 < chk.max_rel_diff < ARRIVAL_REL_TOL / 10, chk
    # a worker that pushed gradients of stale weights (its server's sum is not the plain PS's) is caught
    stale = phub_in_process(KV_SIZES, world, 4, NESTEROV, "rank", cores=3, bigarray_bound=1000, stale=(2, 1))
    bad = compare(np.concatenate(plain_ps_weights(KV_SIZES, 1, world, 4, NESTEROV)),
                  {f"w{r}": f for r, f in enumerate(stale)}, "bit_exact")
    assert not bad.match and not bad.ok


def test_a_replay_of_some_layers_gives_those_layers_exactly():
    full = plain_ps_weights(SIZES, 5, 3, 3, NESTEROV)
    layers = replay_layers(SIZES, 3, 3, budget=3 * 3 * 1700)
    assert layers == [0, 1, 3, 4]              # 700 + 37 + 3 + 900 fit; the 2500-value layer does not
    part = plain_ps_weights(SIZES, 5, 3, 3, NESTEROV, layers)
    assert all(a.tobytes() == full[k].tobytes() for a, k in zip(part, layers))
    assert replay_layers(SIZES, 3, 3) == list(range(len(SIZES)))


# -- the workload's check ------------------------------------------------------------
def _workload(**kw):
    from testbed.workloads.phub import PhubWorkload
    return PhubWorkload.model_validate({"kind": "phub", "iterations": 2, "warmup": 1,
                                        "model": {"kind": "profile", "name": "resnet50", "size_scale": 0.0005},
                                        "device": {"type": "v100", "time_scale": 100.0}, **kw})


def _point(tmp_path, wl, workers: int, flats=None):
    """A finished point's records as the workload reads them: each worker's final
    weights file and summary, the server's summary."""
    from hosts.phub.optimizer import OptimizerSpec as Spec
    from testbed.workloads.phub import key_sizes
    steps = wl.iterations + wl.warmup
    ref = np.concatenate(plain_ps_weights(key_sizes(wl), wl.seed, workers, steps, Spec(**wl.optimizer.model_dump())))
    names = [f"w{i + 1}" for i in range(workers)]
    for i, h in enumerate(names):
        np.save(tmp_path / f"{h}.weights.npy", ref if flats is None else flats[i])
    sums = {h: {"ok": True, "steps": steps} for h in names}
    ssums = ({"ps": {"ok": True, "aggregation_order": wl.aggregation_order}} if wl.algorithm == "phub"
             else {f"w{s + 1}.kv": {"ok": True, "aggregation_order": wl.aggregation_order} for s in range(workers)}
             if wl.algorithm == "sharded_ps" else {})
    return ref, names, sums, ssums


def _check(tmp_path, wl, names, sums, ssums):
    from testbed.workloads.phub import weights_check
    return weights_check(wl, tmp_path, groups=[names], sums=sums, ssums=ssums, run_ok=True)


def test_the_workloads_check_passes_the_plain_ps_weights_and_catches_a_perturbed_one(tmp_path):
    from testbed.outcomes import PointFailed
    from testbed.workloads.phub import PhubRuntime
    wl = _workload()
    ref, names, sums, ssums = _point(tmp_path, wl, 3)
    ok = _check(tmp_path, wl, names, sums, ssums)
    assert ok["weights_match_plain_ps"] is True and ok["weights_check"] == "bit_exact", ok
    assert ok["weights_check_ok"] is True and ok["aggregation_order"] == "rank"
    assert ok["weights_replayed_values"] == ref.size and ok["weights_replayed_layers"] == "54 of 54"
    bad = ref.copy()
    bad[1234] = np.nextafter(bad[1234], np.float32(np.inf))        # one weight, one ulp
    np.save(tmp_path / "w2.weights.npy", bad)
    out = _check(tmp_path, wl, names, sums, ssums)
    assert out["weights_match_plain_ps"] is False and out["weights_check"] == "MISMATCH"
    assert out["weights_check_ok"] is False and 0 < out["weights_max_abs_diff"] < 1e-8
    assert "w2 by up to" in out["weights_check_error"] and "expected bit for bit" in out["weights_check_error"]
    with pytest.raises(PointFailed, match="w2 by up to"):
        PhubRuntime().summarize(None, [{"type": "phub_summary", **out}])
    # arrival order: one ulp is rounding; 1e-4 of the largest weight is not
    wl_a = _workload(aggregation_order="arrival")
    ssums_a = {"ps": {"ok": True, "aggregation_order": "arrival"}}      # what an arrival-order server writes
    out = _check(tmp_path, wl_a, names, sums, ssums_a)
    assert out["weights_check"] == "within_rounding" and out["weights_check_ok"] is True, out
    assert out["weights_expected"] == "rounding" and out["aggregation_order"] == "arrival"
    bad[99] += np.float32(1e-4) * np.max(np.abs(ref))
    np.save(tmp_path / "w2.weights.npy", bad)
    out = _check(tmp_path, wl_a, names, sums, ssums_a)
    assert out["weights_check_ok"] is False and "more than float rounding" in out["weights_check_error"]


def test_the_workloads_check_names_what_it_cannot_compare(tmp_path):
    wl = _workload()
    _, names, sums, ssums = _point(tmp_path, wl, 2)
    out = _check(tmp_path, wl, names, dict(sums, w2={"ok": True, "steps": 2}), ssums)
    assert out["weights_check_ok"] is False and "report ['2', '3'] optimizer steps, the workload ran 3" in \
        out["weights_check_error"]
    (tmp_path / "w1.weights.npy").unlink()
    out = _check(tmp_path, wl, names, sums, ssums)
    assert "w1 wrote no final weights" in out["weights_check_error"]
    out = _check(tmp_path, wl, names, sums, {"ps": {"ok": True}})
    assert "name no single aggregation order: ['None']" in out["weights_check_error"]
    from testbed.workloads.phub import weights_check
    assert weights_check(wl, tmp_path, groups=[names], sums=sums, ssums=ssums, run_ok=False)["weights_check"] == \
        "not run: the run failed"
    ring = _workload(algorithm="ring")
    _, names, sums, _ = _point(tmp_path, ring, 2)
    out = _check(tmp_path, ring, names, sums, {})
    assert out["weights_check"].startswith("reported") and out["weights_check_ok"] is None
    assert out["weights_match_plain_ps"] is True and out["aggregation_order"] is None


def test_the_workloads_check_judges_sharded_ps_as_the_plain_ps(tmp_path):
    wl = _workload(algorithm="sharded_ps")
    ref, names, sums, ssums = _point(tmp_path, wl, 3)
    ok = _check(tmp_path, wl, names, sums, ssums)
    assert ok["weights_check"] == "bit_exact" and ok["weights_check_ok"] is True and ok["aggregation_order"] == "rank"
    bad = ref.copy()
    bad[7] = np.nextafter(bad[7], np.float32(-np.inf))
    np.save(tmp_path / "w3.weights.npy", bad)
    out = _check(tmp_path, wl, names, sums, ssums)
    assert out["weights_check"] == "MISMATCH" and "w3 by up to" in out["weights_check_error"]
    arrival = _workload(algorithm="sharded_ps", aggregation_order="arrival")
    out = _check(tmp_path, arrival, names, sums, {h: {"ok": True, "aggregation_order": "arrival"} for h in ssums})
    assert out["weights_check"] == "within_rounding" and out["weights_check_ok"] is True, out
    mixed = dict(ssums, **{"w1.kv": {"ok": True, "aggregation_order": "arrival"}})
    out = _check(tmp_path, wl, names, sums, mixed)
    assert "name no single aggregation order: ['arrival', 'rank']" in out["weights_check_error"]


def test_sharded_ps_servers_and_bound_follow_the_workload():
    from pydantic import ValidationError
    from testbed.workloads.phub import kv_servers, kvstore_bound
    hosts = [f"w{i}" for i in range(1, 9)]
    assert kv_servers(_workload(algorithm="sharded_ps"), hosts[:3]) == [("w1", "w1.kv"), ("w2", "w2.kv"),
                                                                         ("w3", "w3.kv")]
    half = _workload(algorithm="sharded_ps", servers_per_worker=0.5)
    assert [len(kv_servers(half, hosts[:n])) for n in (2, 3, 5, 8)] == [1, 2, 3, 4]
    assert kvstore_bound(half) == 500                    # 1e6 values of the full model x size_scale 0.0005
    assert kvstore_bound(_workload(algorithm="sharded_ps", model={"kind": "cnn"})) == 1_000_000
    with pytest.raises(ValidationError, match="servers_per_worker is sharded_ps's"):
        _workload(servers_per_worker=0.5)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        _workload(algorithm="sharded_ps", servers_per_worker=2.0)


def test_aggregation_order_is_checked_before_anything_runs():
    from pydantic import ValidationError
    assert _workload().aggregation_order == "rank"
    with pytest.raises(ValidationError, match="Input should be 'rank' or 'arrival'"):
        _workload(aggregation_order="random")
    with pytest.raises(ValidationError, match="arrival is the PHub server's own .* algorithm wide_ps"):
        _workload(aggregation_order="arrival", algorithm="wide_ps")
    with pytest.raises(ValidationError, match="cross-rack PHub chains the racks' rank-ordered partial sums"):
        _workload(aggregation_order="arrival", racks=2, server_cores=1)
    assert _workload(aggregation_order="arrival", algorithm="sharded_ps").aggregation_order == "arrival"


def test_the_cnn_replay_is_deterministic_and_leaves_torch_as_it_was(tmp_path):
    import torch
    from hosts.phub.reference import cnn_plain_ps_weights
    from testbed.workloads.phub import key_sizes
    threads, state = torch.get_num_threads(), torch.random.get_rng_state()
    spec = OptimizerSpec("sgd", 0.1, 0.0)
    a = cnn_plain_ps_weights(7, 3, 2, spec, 16)
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), state)
    assert a.tobytes() == cnn_plain_ps_weights(7, 3, 2, spec, 16).tobytes()
    start = cnn_plain_ps_weights(7, 3, 0, spec, 16)
    assert a.size == start.size and not np.array_equal(a, start)       # it trained
    assert not np.array_equal(a, cnn_plain_ps_weights(7, 2, 2, spec, 16))   # the world's batches count
    # the workload's check on a CNN point: the whole model, bit for bit
    wl = _workload(model={"kind": "cnn"}, optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.0}, seed=7,
                   batch_size=16, iterations=1, warmup=1)
    names = ["w1", "w2", "w3"]
    for h in names:
        np.save(tmp_path / f"{h}.weights.npy", a)
    out = _check(tmp_path, wl, names, {h: {"ok": True, "steps": 2} for h in names},
                 {"ps": {"ok": True, "aggregation_order": "rank"}})
    assert out["weights_check"] == "bit_exact" and out["weights_replayed_values"] == sum(key_sizes(wl)), out
