"""The INA worker's compiled loops (hosts/ina/_hostpath.c) against the numpy
reference (that `make setup` built them: test_cext.py): both paths send the
same frames and get the same results, stats and RTT estimate, whatever the
network does (loss, duplication, reordering), and convert hostile floats identically."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hosts.ina import fixed_point as fp
from hosts.ina import hostpath, receive
from hosts.ina.transport import InaClient

from ina_clients import ACTIONS, make_net, run_all, scheduled

pytestmark = pytest.mark.unit

SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXAMPLES = int(os.environ.get("INA_DIFF_EXAMPLES", "60"))   # more for a long offline run


def test_the_client_runs_the_compiled_path_when_built():
    """(That `make setup` built it: tests/unit/test_cext.py.)"""
    c = InaClient(None, 1, 0, 2)
    assert c.stats.impl == "compiled" and c.stats.summary()["impl"] == "compiled"
    assert InaClient(None, 1, 0, 2, impl="python").stats.impl == "python"
    with pytest.raises(ValueError, match="impl must be one of"):
        InaClient(None, 1, 0, 2, impl="fast")


def _simulate(impl, n, window, tensors, schedule, flush, first_seq, vec_min=None):
    """Every worker submits `tensors` (its own values) under one impairment schedule;
    the frames each sends, its results and its stats. vec_min: bursts of at least
    this many results take the burst path (compiled: accept_block + scatter)."""
    if vec_min is not None:
        old, receive._VEC_MIN = receive._VEC_MIN, vec_min
        try:
            return _simulate(impl, n, window, tensors, schedule, flush, first_seq)
        finally:
            receive._VEC_MIN = old
    net, clients, clock, _ = make_net(n, window, impair=scheduled(schedule), batch=True,
                                      max_retries=400, first_seq=first_seq, impl=impl)
    sent = [[] for _ in clients]
    for c, log in zip(clients, sent):
        send = c.io.send
        c.io.send = lambda p, send=send, log=log: (log.append(bytes(p)), send(p))
    hs = [[c.submit(x, op, **kw) for x, op, kw in ts] for c, ts in zip(clients, tensors)]
    run_all(net, clients, clock, [h for row in hs for h in row], flush)
    results = [[h.result.tobytes() for h in row] for row in hs]
    stats = [{**c.stats.summary(), "impl": None, "srtt": c.timers.srtt, "rttvar": c.timers.rttvar}
             for c in clients]
    return sent, results, stats


KINDS = st.sampled_from(["agreed", "fixed", "int", "uint_or", "int_max"])


@settings(SLOW, max_examples=EXAMPLES)
@given(n=st.integers(1, 3), window=st.sampled_from([1, 2, 5, 16]),
       sizes=st.lists(st.tuples(st.integers(1, 64 * 24), KINDS), min_size=1, max_size=3),
       schedule=st.lists(st.tuples(ACTIONS, st.integers(1, 6)), max_size=120),
       flush=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       first_seq=st.sampled_from([0, 2**32 - 9]), seed=st.integers(0, 2**16),
       vec_min=st.sampled_from([1, 2, None]))
def test_compiled_and_numpy_paths_send_the_same_frames(n, window, sizes, schedule, flush,
                                                       first_seq, seed, vec_min):
    rng = np.random.default_rng(seed)
    tensors = [[] for _ in range(n)]
    for size, kind in sizes:
        for w in range(n):
            if kind in ("agreed", "fixed"):
                x = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
                tensors[w].append((x, "sum", {"scale_exp": 14} if kind == "fixed" else {}))
            elif kind == "int":
                tensors[w].append((rng.integers(-2**20, 2**20, size).astype(np.int32), "sum", {}))
            elif kind == "uint_or":
                tensors[w].append((rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32),
                                   "or", {}))
            else:
                tensors[w].append((rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32),
                                   "max", {}))
    ref = _simulate("python", n, window, tensors, schedule, flush, first_seq, vec_min)
    got = _simulate("compiled", n, window, tensors, schedule, flush, first_seq, vec_min)
    assert got[0] == ref[0]                      # the frames, in order, worker by worker
    assert got[1] == ref[1]                      # results, bit for bit
    assert got[2] == ref[2]                      # stats, latencies, RTT estimate


HOSTILE = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.0**-149, -2.0**-149,
                     3.4028235e38, -3.4028235e38, 2.0**30 + 0.5, 2.0**-20 * 1.5]))


@settings(SLOW, max_examples=4 * EXAMPLES)
@given(x=st.lists(HOSTILE, min_size=1, max_size=200), k=st.integers(-160, 200),
       n=st.integers(1, 32), f64=st.booleans())
def test_quantize_and_back_match_the_numpy_reference(x, k, n, f64):
    a = np.array(x, np.float64 if f64 else np.float32)
    ref, nref = fp.quantize(a, k, n, "saturate")
    got, ngot = hostpath.quantize(hostpath._hostpath, a, k, n)
    assert (got.tobytes(), ngot) == (ref.tobytes(), nref)
    out = np.empty(ref.size, np.float32)
    hostpath._hostpath.from_fixed(ref, k, out)
    assert out.tobytes() == fp.from_fixed(ref, k, np.float32).tobytes()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_quantize_rejects_non_finite_values_like_the_reference(bad):
    a = np.array([1.0, 2.0, bad], np.float32)
    with pytest.raises(ValueError, match="non-finite value .* at index 2"):
        hostpath.quantize(hostpath._hostpath, a, 10, 4)
