"""Exactly-once aggregation under any loss / duplication / reordering, in both
directions, for the soft switch's INA pipeline (batched and one-by-one), and
equivalence of the batched path with the one-by-one reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed import wire
from testbed.switch.ina import CompiledInaPipeline, InaPipeline

import ina_harness as H

pytestmark = pytest.mark.unit

steps = st.lists(st.builds(H.Step, st.sampled_from(H.STEP_KINDS),
                           st.integers(0, 10_000), st.integers(1, 12)), max_size=250)


def factory(impl: str):
    if impl == "compiled":          # testbed/switch/ina/fastpath.py (C hot loop)
        return CompiledInaPipeline
    # scalar_below=1: even one-frame batches take the vectorized path
    return lambda cfg: InaPipeline(cfg, vectorized=impl == "vector", scalar_below=1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_workers=st.integers(1, 4), chunks=st.integers(1, 9), k=st.sampled_from([0, 1, 3, 64]),
       window=st.integers(1, 3), op=st.sampled_from([wire.OP_SUM, wire.OP_OR, wire.OP_MAX]),
       impl=st.sampled_from(["vector", "scalar", "compiled"]), seed=st.integers(0, 2**16),
       schedule=steps)
def test_exactly_once_under_any_schedule(n_workers, chunks, k, window, op, impl, seed,
                                         schedule):
    fab = H.make_job_run(factory(impl), n_workers=n_workers, chunks=chunks, k=k,
                         window=window, op=op, seed=seed)
    fab.run(schedule)
    assert fab.drain(), "workers did not finish: the protocol deadlocked"
    H.check_exactly_once(fab)


@settings(max_examples=40, deadline=None)
@given(schedule=steps, seed=st.integers(0, 2**16))
def test_two_jobs_interleaved(schedule, seed):
    """Two jobs share the switch and the network; each gets exact results."""
    rng = np.random.default_rng(seed)
    j1 = H.job_config(1, 2, slot_base=0, slot_count=2)
    j2 = H.job_config(2, 3, slot_base=2, slot_count=2, first_port=3)
    pipe = InaPipeline(H.pipeline_config(j1, j2), scalar_below=1)
    d1 = rng.integers(-100, 100, size=(2, 5, 4)).astype(np.int32)
    d2 = rng.integers(-100, 100, size=(3, 5, 4)).astype(np.int32)
    workers = [H.ModelWorker(j1, w, d1[w], window=2) for w in range(2)] + \
              [H.ModelWorker(j2, w, d2[w], window=2) for w in range(3)]
    want = {(1, c): H.expected(wire.OP_SUM, d1[:, c]) for c in range(5)}
    want.update({(2, c): H.expected(wire.OP_SUM, d2[:, c]) for c in range(5)})
    fab = H.Fabric(pipe, workers, want)
    fab.run(schedule)
    assert fab.drain()
    assert not fab.bad_results
    for w in workers:
        for c in range(5):
            assert np.array_equal(w.results[c], want[(w.job["job_id"], c)])
    assert pipe.counters_by_name["Ingress.ina_results"].read(1) == 5
    assert pipe.counters_by_name["Ingress.ina_results"].read(2) == 5


# -- batched path == one-by-one path -------------------------------------------------
JOB = H.job_config(1, 3, slot_count=4)
OTHER = H.job_config(2, 2, slot_base=4, slot_count=2, first_port=4)


@st.composite
def traffic(draw):
    """Frames a switch could see: contributions with colliding slots, versions,
    seqs, duplicates and mixed ops/counts, plus junk."""
    frames, ports = [], []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["ina"] * 8 + ["other_job", "junk", "result", "dup"]))
        if kind == "dup" and frames:
            i = draw(st.integers(0, len(frames) - 1))
            frames.append(frames[i])
            ports.append(ports[i])
            continue
        job = OTHER if kind == "other_job" else JOB
        wid = draw(st.integers(0, len(job["workers"]) - 1))
        slot = draw(st.integers(0, 2))
        seq = draw(st.integers(0, 6))
        cnt = draw(st.sampled_from([2, 2, 2, 1, 64]))
        vals = draw(st.lists(st.integers(-2**31, 2**31 - 1), min_size=cnt, max_size=cnt))
        f = H.contribution(job, wid, slot=slot, seq=seq, slot_ver=draw(st.integers(0, 1)),
                           values=vals, op=draw(st.sampled_from([0, 0, 0, 1, 2])),
                           exponent=draw(st.integers(-128, 127)),
                           flags=wire.FLAG_RESULT if kind == "result" else 0)
        if kind == "junk":
            f = f[:draw(st.integers(0, len(f) - 1))]
        frames.append(f)
        ports.append(H.port_of(job, wid))
    return frames, ports


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(traffic(), min_size=1, max_size=4))
def test_batched_equals_one_by_one(batches):
    cfg = H.pipeline_config(JOB, OTHER)
    vec = InaPipeline(cfg, vectorized=True, scalar_below=1)
    ref = InaPipeline(cfg, vectorized=False)
    for frames, ports in batches:
        assert vec.process_batch(frames, ports, 0.0) == ref.process_batch(frames, ports, 0.0)
    for name, reg in ref.registers.items():
        assert np.array_equal(reg.array, vec.registers[name].array), name
    assert vec.counters() == ref.counters()
