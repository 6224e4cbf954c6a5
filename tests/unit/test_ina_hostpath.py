"""The INA worker's compiled loops (hosts/ina/_hostpath.c) against the numpy
reference (that `make setup` built them: test_cext.py): both paths send the
same frames and get the same results, stats and RTT estimate, whatever the
network does (loss, duplication, reordering), and convert hostile floats
identically. The compiled path includes the steady-state loop (`Loop`,
hosts/ina/hostloop.py), which must take most results of a bulk tensor in, not
hand them all back."""
from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hosts.ina import fixed_point as fp
from hosts.ina import hostpath, receive
from hosts.ina.transport import RX_DTYPE, RX_STRIDE, InaClient
from testbed import wire

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


def _simulate(impl, n, window, tensors, schedule, flush, first_seq, vec_min=None, taken=None):
    """Every worker submits `tensors` (its own values) under one impairment schedule;
    the frames each sends, its results and its stats. vec_min: bursts of at least
    this many results take the burst path (compiled: accept_block + scatter).
    taken: a list told how many results each worker's compiled Loop took in."""
    if vec_min is not None:
        old, receive._VEC_MIN = receive._VEC_MIN, vec_min
        try:
            return _simulate(impl, n, window, tensors, schedule, flush, first_seq, taken=taken)
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
    results = [[(h.result.tobytes(), h.max_exp) for h in row] for row in hs]
    if taken is not None:
        taken.extend(0 if c._loop is None else c._loop.taken for c in clients)
    stats = [{**c.stats.summary(), "impl": None, "srtt": c.timers.srtt, "rttvar": c.timers.rttvar}
             for c in clients]
    return sent, results, stats


KINDS = st.sampled_from(["agreed", "fixed", "int", "uint_or", "int_max"])


@settings(SLOW, max_examples=EXAMPLES)
@given(n=st.integers(1, 3), window=st.sampled_from([1, 2, 5, 16]),
       sizes=st.lists(st.tuples(st.integers(1, 64 * 48), KINDS), min_size=1, max_size=3),
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


def _tensors(n, specs, seed):
    rng = np.random.default_rng(seed)
    out = [[] for _ in range(n)]
    for size, kind in specs:
        for w in range(n):
            if kind == "int":
                out[w].append((rng.integers(-2**20, 2**20, size).astype(np.int32), "sum", {}))
            else:
                x = (rng.standard_normal(size) * 100).astype(np.float32)
                if kind == "fixed_overflow":       # one chunk mid-tensor above the scale's range
                    x[size // 2] = 1e6
                out[w].append((x, "sum", {} if kind == "agreed" else {"scale_exp": 14}))
    return out


@pytest.mark.parametrize("vec_min", [None, 10**9])     # bursts / one result at a time
@pytest.mark.parametrize("window", [4, 16])
def test_the_compiled_loop_takes_the_steady_state_in_and_matches(vec_min, window):
    """Bulk tensors back to back (agreed scale, fixed scale, int, fixed scale with
    chunks out of range) under loss,
    duplication and reordering: the same frames, results and stats as the numpy
    path, and the Loop took most results in (not every burst handed back)."""
    n = 3
    tensors = _tensors(n, [(64 * 90, "agreed"), (64 * 70 + 5, "fixed"), (64 * 50, "int"),
                           (64 * 60, "fixed_overflow")], seed=7)
    sched = ([("ok", 1)] * 40 + [("drop", 1), ("ok", 1), ("dup", 3), ("ok", 1), ("hold", 4)]) * 40
    ref = _simulate("python", n, window, tensors, sched, [7, 13, 2], 0, vec_min)
    taken = []
    got = _simulate("compiled", n, window, tensors, sched, [7, 13, 2], 0, vec_min, taken)
    assert got[0] == ref[0]
    assert got[1] == ref[1]                      # values and the max header exponent
    assert got[2] == ref[2]
    assert all(st["saturated_results"] == 1 for st in got[2])       # the overflow was seen
    results = [st["results"] for st in got[2]]
    assert all(t >= 0.3 * r for t, r in zip(taken, results)), (taken, results)
    assert sum(st["duplicates_ignored"] for st in got[2]) > 0      # the schedule did bite
    assert sum(st["retransmissions"] for st in got[2]) > 0


class BurstIo:
    """A one-worker 'switch' through recv_block/send_many (UdpIo's burst API): every
    frame sent is answered, all pending answers come back as one burst."""

    def __init__(self):
        self.rec = np.zeros(512, RX_DTYPE)
        self.raw = self.rec.view(np.uint8).reshape(len(self.rec), RX_STRIDE)
        self.lens = np.zeros(len(self.rec), np.int64)
        self.pending, self.frames = [], []

    def send(self, p):
        self.frames.append(bytes(p))
        self.pending.append(bytes(p))

    def send_many(self, addr, offs, lens):
        for o, ln in zip(np.asarray(offs).tolist(), np.asarray(lens).tolist()):
            self.send(ctypes.string_at(addr + o, ln))

    def recv_block(self, timeout):
        n = min(len(self.pending), len(self.rec))
        for i, p in enumerate(self.pending[:n]):
            self.raw[i, :len(p)] = np.frombuffer(p, np.uint8)
            self.raw[i, 2] |= wire.FLAG_RESULT
            self.lens[i] = len(p)
        del self.pending[:n]
        return self.rec, self.lens[:n]

    def recv(self, timeout):
        return None

    def close(self):
        pass


def test_the_loop_takes_whole_window_bursts_through_the_burst_io():
    """Bursts of a whole window (recv_block), sends through send_many, one chunk
    out of the fixed scale's range in the middle of a burst: the max header
    exponent (the overflow flag), values, frames and stats match the numpy path."""
    x = np.random.default_rng(5).standard_normal(64 * 64).astype(np.float32)
    x[64 * 37 + 5] = 1e6                          # chunk 37: mid-burst at window 16
    out = {}
    for impl in ("python", "compiled"):
        io = BurstIo()
        c = InaClient(io, 1, 0, 1, window=16, impl=impl, clock=lambda: 1.0,
                      on_overflow="saturate")
        h = c.submit(x, scale_exp=20)
        while not h.done:
            c.poll()
        out[impl] = (io.frames, h.result.tobytes(), h.max_exp,
                     {**c.stats.summary(), "impl": None}, c._loop.taken if c._loop else None)
    ref, got = out["python"], out["compiled"]
    assert got[:4] == ref[:4]
    assert got[3]["saturated_results"] == 1
    assert got[4] >= 64 - 16 - 16                 # all but the first and last windows' bursts


def test_the_loop_is_off_with_an_adaptive_window_and_on_the_python_path():
    assert InaClient(None, 1, 0, 2)._loop is not None
    assert InaClient(None, 1, 0, 2, congestion_window=True)._loop is None
    assert InaClient(None, 1, 0, 2, impl="python")._loop is None


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


def test_the_workers_impl_is_a_checked_ina_setting():
    """workload.ina.impl (bench/ina_aggrate.py --host-impls) reaches the worker's
    config; anything but compiled/python/null is a config error naming the field."""
    from hosts.common.config import AllreduceConfig, ConfigError    # noqa: PLC0415
    base = {"host": "w1", "role": "worker", "rank": 0, "world": 2, "peers": [
        {"name": "w1", "ip": "10.0.0.1"}, {"name": "w2", "ip": "10.0.0.2"}], "ps": None,
        "port": 47000, "sizes": [8], "iterations": 1, "warmup": 0, "compute_ms": 0, "seed": 1,
        "straggler": None, "start_at": None, "connect_timeout_s": 5, "timeout_s": 5,
        "out": "/dev/null", "algorithm": "switch"}
    assert AllreduceConfig.from_json(base).ina.impl is None
    assert AllreduceConfig.from_json(dict(base, ina={"impl": "python"})).ina.impl == "python"
    with pytest.raises(ConfigError, match=r"ina.impl: must be compiled, python or null"):
        AllreduceConfig.from_json(dict(base, ina={"impl": "fast"}))
