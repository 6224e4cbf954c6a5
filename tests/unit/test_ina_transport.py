"""The host INA transport (hosts/ina): fixed point with a shared scale, and
InaClient against the real switch pipeline (InaPipeline) in-process, with a
virtual clock: exactly-once results under loss, duplication and reordering,
scale agreement, async submit/wait, timeouts and their diagnostics."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hosts.ina import fixed_point as fp
from hosts.ina.transport import (InaClient, InaError, InaTimeoutError, InProcessSwitch, LANES,
                                 drive)
from testbed import wire
from testbed.switch.ina import InaPipeline

import ina_harness as H
from ina_clients import ACTIONS, VClock, completions, make_net, run_all, scheduled

pytestmark = pytest.mark.unit

SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- fixed point
@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 32), e=st.integers(-126, 126), frac=st.floats(0.5, 1.0, exclude_max=True),
       sign=st.sampled_from([-1.0, 1.0]))
def test_agreed_scale_never_overflows_worst_case_for_32_workers(n, e, frac, sign):
    """N workers all at the largest magnitude with exponent e, same sign: the
    int32 sum still fits, and the headroom is no more than needed (>= 2^28)."""
    x = np.array([sign * frac * 2.0**e, sign * np.nextafter(2.0**e, 0)])
    k = fp.scale_from_exponent(fp.vector_exponent(x), n)
    ints, nsat = fp.quantize(x, k, n)
    assert nsat == 0 and np.abs(ints.astype(np.int64)).max() <= fp.contribution_limit(n)
    total = n * ints.astype(np.int64)
    assert np.abs(total).max() <= fp.INT32_MAX
    assert np.abs(total).max() >= 2**28
    back = fp.from_fixed(ints, k, np.float64)
    assert np.abs(back - x).max() <= 2.0 ** -(k + 1)


def test_fixed_scale_overflow_is_loud_or_counted():
    n, k = 8, 20                       # 8 workers: |x| must stay below 2^(30-3-20) = 128
    assert fp.max_exponent_for_scale(k, n) == 7
    assert fp.scale_from_exponent(fp.max_exponent_for_scale(k, n), n) == k
    ok, nsat = fp.quantize(np.array([127.9, -127.9]), k, n)
    assert nsat == 0
    with pytest.raises(fp.FixedPointOverflow, match=r"x\[1\] = 200.0.*below 2\^7"):
        fp.quantize(np.array([1.0, 200.0]), k, n)
    ints, nsat = fp.quantize(np.array([1.0, 200.0, -300.0]), k, n, on_overflow="saturate")
    assert nsat == 2 and ints[1] == fp.contribution_limit(n) and ints[2] == -fp.contribution_limit(n)
    with pytest.raises(ValueError, match="non-finite"):
        fp.vector_exponent(np.array([1.0, np.nan]))
    with pytest.raises(fp.FixedPointOverflow, match="int8"):
        fp.vector_exponent(np.array([2.0**130]))
    assert fp.vector_exponent(np.zeros(3)) == fp.EXP_ZERO
    assert fp.fixed_scale_error_bound(k, n, 0.0, np.float64) == n * 2.0 ** -(k + 1)


# ---------------------------------------------------------------- scale agreement
def test_agreed_scale_is_one_max_round_and_bit_exact():
    n = 4
    net, clients, clock, pipe = make_net(n, 8)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(300).astype(np.float32) * s for s in (1e-3, 1.0, 1e3, 1e6)]
    hs = [c.submit(x) for c, x in zip(clients, xs)]
    run_all(net, clients, clock, hs)
    want = fp.quantized_sum(xs)
    bound = fp.sum_error_bound([float(np.abs(x).max()) for x in xs], n)
    for c, h in zip(clients, hs):
        assert h.result.dtype == np.float32 and h.result.tobytes() == want.tobytes()
        assert c.stats.scale_rounds == 1 and c.stats.chunks_sent == 1 + 5   # MAX + ceil(300/64)
    exact = np.sum(np.asarray(xs, np.float64), axis=0)
    assert np.abs(hs[0].result - exact).max() <= bound
    assert hs[0].scale_exp == fp.choose_scale([float(np.abs(x).max()) for x in xs], n)


def test_fixed_scale_skips_the_max_round():
    n, k = 3, 16
    net, clients, clock, pipe = make_net(n, 4, scale_exp=k)
    rng = np.random.default_rng(2)
    xs = [rng.uniform(-100, 100, 70).astype(np.float32) for _ in range(n)]
    hs = [c.submit(x) for c, x in zip(clients, xs)]
    run_all(net, clients, clock, hs)
    ints = sum(fp.quantize(x, k, n)[0].astype(np.int64) for x in xs)
    exact = np.sum(np.asarray(xs, np.float64), axis=0)
    for c, h in zip(clients, hs):
        assert c.stats.chunks_sent == 2 and c.stats.scale_rounds == 0
        assert np.array_equal(h.result, fp.from_fixed(ints, k))
    assert np.abs(hs[0].result - exact).max() <= fp.fixed_scale_error_bound(k, n, float(np.abs(exact).max()))


@pytest.mark.parametrize("mode", ["raise", "saturate"])
def test_fixed_scale_overflow_reaches_every_worker(mode):
    n, k = 4, 20                       # |x| < 2^(30-2-20) = 256
    net, clients, clock, pipe = make_net(n, 4, scale_exp=k, on_overflow=mode)
    xs = [np.full(10, 1.5, np.float32) for _ in range(n)]
    xs[2][3] = 1000.0                  # only worker 2 overflows
    hs = [c.submit(x) for c, x in zip(clients, xs)]
    run_all(net, clients, clock, hs)
    for i, (c, h) in enumerate(zip(clients, hs)):
        assert c.stats.saturated_results == 1
        assert c.stats.saturated_values == (1 if i == 2 else 0)
        if mode == "raise":
            with pytest.raises(fp.FixedPointOverflow, match="overflowed the fixed scale 2\\^20"):
                c.wait(h)
        else:
            assert c.wait(h)[0] == 6.0


def test_integer_ops_are_unscaled():
    n = 3
    net, clients, clock, pipe = make_net(n, 2)
    bitmaps = [np.array([1 << i, 0x80000000, 0], np.uint32) for i in range(n)]
    hs = [c.submit(b, "or") for c, b in zip(clients, bitmaps)]
    run_all(net, clients, clock, hs)
    assert hs[0].result.dtype == np.uint32 and hs[0].result.tolist() == [7, 0x80000000, 0]
    hs = [c.submit(np.array([i - 5, -(2**31), 7]), "max") for i, c in enumerate(clients)]
    run_all(net, clients, clock, hs)
    assert hs[1].result.dtype == np.int32 and hs[1].result.tolist() == [-3, -(2**31), 7]
    hs = [c.submit(np.array([2**30, -1], np.int32), "sum") for c in clients]
    run_all(net, clients, clock, hs)
    assert hs[2].result.tolist() == [np.int32(3 * 2**30 - 2**32), -3]   # wraps like bit<32>
    with pytest.raises(TypeError, match="carries int32"):
        clients[0].submit(np.ones(2, np.float32), "max")
    with pytest.raises(OverflowError):
        clients[0].submit(np.array([2**33]), "sum")
    h = clients[0].submit(np.zeros(0, np.float32))
    assert h.done and h.result.shape == (0,)
    seq = clients[0].next_seq
    for bad in (np.array([1.0, np.nan], np.float32), np.array([2**40])):
        with pytest.raises((ValueError, OverflowError)):
            clients[0].submit(bad)
        with pytest.raises((ValueError, OverflowError)):
            clients[0].submit(bad, scale_exp=4)
    assert clients[0].next_seq == seq           # a rejected input takes no seq


# ---------------------------------------------------------------- exactly once
@settings(SLOW, max_examples=70)
@given(n=st.integers(1, 4), window=st.integers(1, 4),
       sizes=st.lists(st.integers(1, 150), min_size=1, max_size=3),
       schedule=st.lists(st.tuples(ACTIONS, st.integers(1, 6)), max_size=200),
       flush=st.lists(st.integers(1, 12), min_size=1, max_size=5),
       seed=st.integers(0, 2**16), vectorized=st.booleans())
def test_exactly_once_float_allreduce_under_loss_dup_reorder(n, window, sizes, schedule, flush,
                                                             seed, vectorized):
    """Any pattern of lost, duplicated and delayed frames in both directions,
    any batching at the switch: every worker gets the bit-exact fixed-point sum
    of every tensor, the switch completes each chunk once, each client accepts
    each result once."""
    net, clients, clock, pipe = make_net(n, window, impair=scheduled(schedule), batch=True,
                                         vectorized=vectorized, max_retries=300)
    rng = np.random.default_rng(seed)
    tensors = [[(rng.standard_normal(s) * 2.0 ** rng.integers(-8, 8)).astype(np.float32)
                for _ in range(n)] for s in sizes]
    handles = [[c.submit(t[i]) for i, c in enumerate(clients)] for t in tensors]   # async
    run_all(net, clients, clock, [h for row in handles for h in row], flush)
    chunks = sum(1 + -(-s // LANES) for s in sizes)          # MAX round + SUM chunks
    for t, row in zip(tensors, handles):
        want = fp.quantized_sum(t).tobytes()
        assert all(h.result.tobytes() == want for h in row)
    assert completions(pipe) == chunks
    assert all(c.stats.results == chunks for c in clients)


class ClientWorker:
    """The real InaClient as the harness's WorkerProtocol: one submit per chunk
    (<= 64 values), so chunk c is seq c, as ModelWorker numbers them."""

    def __init__(self, job, worker_id, chunks, *, window, op=wire.OP_SUM, **_):
        self.job, self.worker_id = job, worker_id
        self.port = H.port_of(job, worker_id)
        spec = next(w for w in job["workers"] if w["worker_id"] == worker_id)
        self.clock = VClock()
        self.inbox: list[bytes] = []
        self.outbox: list[bytes] = []
        self._pre = lambda n: wire.eth_ip_udp(spec["mac"], H.SWITCH_MAC, spec["ip"], H.SWITCH_IP,
                                               wire.INA_PORT_BASE, wire.INA_PORT_BASE, n)
        self.client = InaClient(self, job["job_id"], worker_id, len(job["workers"]), window=window,
                                clock=self.clock, timeout_s=1.0, max_retries=10**6)
        self.chunks = np.asarray(chunks, np.int32)
        self.op = {wire.OP_SUM: "sum", wire.OP_OR: "or", wire.OP_MAX: "max"}[op]
        self.handles: list = []

    # the client's io
    def send(self, payload: bytes) -> None:
        self.outbox.append(self._pre(len(payload)) + payload)

    def recv(self, timeout: float):
        return self.inbox.pop(0) if self.inbox else None

    def close(self) -> None:
        pass

    def _take(self) -> list[bytes]:
        out, self.outbox = self.outbox, []
        return out

    # the harness's WorkerProtocol
    def start(self) -> list[bytes]:
        self.handles = [self.client.submit(c, self.op) for c in self.chunks]
        return self._take()

    def on_frame(self, frame: bytes) -> list[bytes]:
        self.inbox.append(frame[wire.INA_OFFSET:])
        self.client.poll()
        return self._take()

    def on_timeout(self) -> list[bytes]:
        d = self.client.next_deadline()
        if d is not None:
            self.clock.advance(d)
            self.client.poll()
        return self._take()

    @property
    def done(self) -> bool:
        return all(h.done for h in self.handles)

    @property
    def results(self) -> dict:
        return {i: h.result for i, h in enumerate(self.handles) if h.done}


harness_steps = st.lists(st.builds(H.Step, st.sampled_from(H.STEP_KINDS),
                                   st.integers(0, 10_000), st.integers(1, 12)), max_size=200)


@settings(SLOW, max_examples=60)
@given(n=st.integers(1, 4), chunks=st.integers(1, 8), k=st.sampled_from([1, 3, 64]),
       window=st.integers(1, 3), op=st.sampled_from([wire.OP_SUM, wire.OP_OR, wire.OP_MAX]),
       vectorized=st.booleans(), seed=st.integers(0, 2**16), schedule=harness_steps)
def test_exactly_once_on_the_harness_fabric(n, chunks, k, window, op, vectorized, seed, schedule):
    """The shared INA harness (adversarial Steps in both directions, multi-frame
    switch batches) with the real client instead of its model worker."""
    fab = H.make_job_run(lambda cfg: InaPipeline(cfg, vectorized=vectorized, scalar_below=1),
                         n_workers=n, chunks=chunks, k=k, window=window, op=op, seed=seed,
                         worker_factory=ClientWorker)
    fab.run(schedule)
    assert fab.drain(), "the real client deadlocked on the harness"
    assert not fab.bad_results, fab.bad_results[:3]
    for w in fab.workers:
        for c in range(chunks):
            assert np.array_equal(w.results[c], fab.expected[(1, c)]), (w.worker_id, c)
        assert w.client.stats.results == chunks
    assert completions(fab.pipeline) == chunks


def test_duplicate_and_stale_results_are_ignored():
    net, clients, clock, pipe = make_net(2, 2, impair=lambda d, w, f: [0, 0] if d == "down" else [0])
    xs = [np.arange(130, dtype=np.float32) * (i + 1) for i in range(2)]
    hs = [c.submit(x) for c, x in zip(clients, xs)]
    run_all(net, clients, clock, hs)
    for c, h in zip(clients, hs):
        assert np.array_equal(h.result, np.arange(130, dtype=np.float32) * 3)
        assert c.stats.results == 4 and c.stats.duplicates_ignored == 4


# ---------------------------------------------------------------- async API
def test_async_window_and_wait_in_any_order():
    n, window, m = 3, 4, 30
    net, clients, clock, pipe = make_net(n, window, scale_exp=20, batch=True)
    vecs = [[np.full(5, (r + 1) * (i + 1), np.float32) for i in range(m)] for r in range(n)]
    handles = [[c.submit(v) for v in vecs[r]] for r, c in enumerate(clients)]
    assert all(c.in_flight == window and c.next_seq == m for c in clients)   # the window holds
    steps = 0
    while not all(h.done for row in handles for h in row):
        for c in clients:
            c.poll()
            assert c.in_flight <= window
        net.flush(3)
        steps += 1
        assert steps < 10_000
    for r, c in enumerate(clients):
        for i in reversed(range(m)):                          # any order
            assert c.wait(handles[r][i]).tolist() == [6.0 * (i + 1)] * 5
        assert c.stats.results == m and c.stats.retransmissions == 0
        assert len(c.stats.latencies_s) == m
        s = c.stats.summary()
        assert s["chunk_latency_p50_s"] is not None and s["packets_sent"] == m


def test_drive_helper_and_blocking_wait_with_threads():
    import threading
    n = 3
    job = H.job_config(1, n, slot_count=8)
    net = InProcessSwitch(InaPipeline(H.pipeline_config(job)), switch_mac=H.SWITCH_MAC,
                          switch_ip=H.SWITCH_IP)
    clients = [InaClient(net.endpoint(w["worker_id"], mac=w["mac"], ip=w["ip"], switch_port=w["port"]),
                         1, w["worker_id"], n, window=8) for w in job["workers"]]
    xs = [np.linspace(-1, 1, 1000, dtype=np.float32) * (r + 1) for r in range(n)]
    out: list = [None] * n
    ts = [threading.Thread(target=lambda r=r: out.__setitem__(r, clients[r].allreduce(xs[r])))
          for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    want = fp.quantized_sum(xs)
    assert all(o is not None and o.tobytes() == want.tobytes() for o in out)
    hs = [c.submit(np.array([r], np.int32), "max") for r, c in enumerate(clients)]
    drive(clients, hs)
    assert [h.result.tolist() for h in hs] == [[n - 1]] * n


# ---------------------------------------------------------------- failures
def test_timeout_names_job_slot_seq_and_missing_workers():
    n = 3
    net, clients, clock, pipe = make_net(n, 4, max_retries=3)
    hs = [c.submit(np.ones(3, np.int32)) for c in clients[:2]]      # worker 2 never sends
    with pytest.raises(InaTimeoutError) as ei:
        run_all(net, clients[:2], clock, hs)
    e = ei.value
    assert (e.job_id, e.slot, e.slot_ver, e.seq, e.retries) == (1, 0, 0, 0, 3)
    assert e.missing == 1 and e.present_workers == [0, 1]
    msg = str(e)
    assert "INA job 1" in msg and "seq 0 (slot 0, slot_ver 0)" in msg and "missing 1" in msg
    assert clients[0].stats.timeouts == 1
    with pytest.raises(InaTimeoutError):                              # the client stays failed
        clients[0].submit(np.ones(1, np.int32))


def test_timeout_without_switch_state_says_what_it_can():
    class Blind:                      # an io without slot_state, and a switch that never answers
        def send(self, payload):
            pass

        def recv(self, timeout):
            return None

        def close(self):
            pass

    clock = VClock()
    c = InaClient(Blind(), 7, 0, 4, window=2, clock=clock, timeout_s=0.01, max_retries=2)
    h = c.submit(np.ones(2, np.int32))
    with pytest.raises(InaTimeoutError, match=r"job 7 .*seq 0 .*1\.\.3 other workers.*no result ever"):
        while not h.done:
            clock.advance(c.next_deadline())
            c.poll()


def test_patience_keeps_retrying_for_slow_starters():
    net, clients, clock, pipe = make_net(2, 2, max_retries=1, timeout_s=0.01)
    h0 = clients[0].submit(np.ones(1, np.int32), patience_s=5.0)
    for _ in range(25):                                   # ~ 3.5 s of virtual time
        clock.advance(clients[0].next_deadline())
        clients[0].poll()
    h1 = clients[1].submit(np.ones(1, np.int32))
    run_all(net, clients, clock, [h0, h1])
    assert h0.result.tolist() == [2] and clients[0].stats.retransmissions > 1


def test_workers_submitting_different_vectors_fail_clearly():
    net, clients, clock, pipe = make_net(2, 2)
    hs = [clients[0].submit(np.ones(3, np.int32)), clients[1].submit(np.ones(5, np.int32))]
    with pytest.raises(InaError, match="same sequence of vectors"):
        run_all(net, clients, clock, hs)


# ---------------------------------------------------------------- host config
def test_allreduce_config_accepts_switch_with_ina_settings():
    from hosts.common.config import AllreduceConfig, ConfigError

    base = {"host": "w1", "role": "worker", "rank": 0, "world": 2, "peers": [
        {"name": "w1", "ip": "10.0.0.1"}, {"name": "w2", "ip": "10.0.0.2"}], "ps": None,
        "port": 47000, "sizes": [8], "iterations": 1, "warmup": 0, "compute_ms": 0, "seed": 1,
        "straggler": None, "start_at": None, "connect_timeout_s": 5, "timeout_s": 5,
        "out": "/dev/null"}
    cfg = AllreduceConfig.from_json(dict(base, algorithm="switch"))
    assert cfg.ina.switch_ip == "10.0.0.254" and cfg.ina.window == 256
    from testbed.switch.jobs import DEFAULT_SLOTS_PER_JOB  # the default window must fit a job
    assert cfg.ina.window <= DEFAULT_SLOTS_PER_JOB
    cfg = AllreduceConfig.from_json(dict(base, algorithm="switch", ina={
        "switch_ip": "127.0.0.1", "switch_port": 40001, "window": 8, "scale_exp": 12}))
    assert (cfg.ina.switch_port, cfg.ina.window, cfg.ina.scale_exp) == (40001, 8, 12)
    assert cfg.run_identity()["ina"] == {"job_id": 1, "window": 8, "scale_exp": 12}
    assert AllreduceConfig.from_json(dict(base, algorithm="ring")).ina is None   # unchanged
    with pytest.raises(ConfigError, match=r"ina.windw: unknown key(?s:.*)ina.job_id: must be"):
        AllreduceConfig.from_json(dict(base, algorithm="switch", ina={"windw": 8, "job_id": 300}))
    with pytest.raises(ConfigError, match='only used by algorithm "switch"'):
        AllreduceConfig.from_json(dict(base, algorithm="ring", ina={}))


# ---------------------------------------------------------------- bulk path
@pytest.mark.parametrize("vec_min", [1, 10**9])      # vectorized bursts / one packet at a time
@settings(SLOW, max_examples=25,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 3), window=st.sampled_from([1, 3, 5, 16]),
       size=st.integers(65, 64 * 40), scale=st.sampled_from([None, 12]),
       first_seq=st.sampled_from([0, 2**32 - 7, 2**32 - 100]),
       schedule=st.lists(st.tuples(ACTIONS, st.integers(1, 6)), max_size=150),
       flush=st.lists(st.integers(1, 40), min_size=1, max_size=4))
def test_bulk_tensor_exactly_once_both_receive_paths(monkeypatch, vec_min, n, window, size, scale,
                                                     first_seq, schedule, flush):
    """Long vectors (packets built at once, results taken in bursts), across the
    2^32 seq wrap with windows that do not divide 2^32, under loss/dup/reorder:
    bit-exact, each chunk completed and accepted once."""
    import hosts.ina.receive as T
    monkeypatch.setattr(T, "_VEC_MIN", vec_min)
    net, clients, clock, pipe = make_net(n, window, impair=scheduled(schedule), batch=True,
                                         max_retries=300, first_seq=first_seq, scale_exp=scale)
    rng = np.random.default_rng(size)
    xs = [rng.standard_normal(size).astype(np.float32) for _ in range(n)]
    ys = [rng.integers(-1000, 1000, 100).astype(np.int32) for _ in range(n)]
    hs = [(c.submit(x), c.submit(y)) for c, x, y in zip(clients, xs, ys)]
    run_all(net, clients, clock, [h for row in hs for h in row], flush)
    if scale is None:
        want = fp.quantized_sum(xs)
    else:
        want = fp.from_fixed(sum(fp.quantize(x, scale, n)[0].astype(np.int64) for x in xs), scale)
    chunks = -(-size // LANES) + (scale is None) + 2
    for c, (hx, hy) in zip(clients, hs):
        assert hx.result.tobytes() == want.tobytes()
        assert hy.result.tolist() == np.sum(ys, axis=0).tolist()
        assert c.stats.results == chunks and c.in_flight == 0
        assert c.next_seq == (first_seq % c.seq_space + chunks) % c.seq_space
    assert completions(pipe) == chunks


def test_bulk_packets_match_the_scalar_encoding():
    """The numpy-built packets of a long vector are byte for byte what
    wire.pack_header + big-endian values give, chunk by chunk."""
    sent: list[bytes] = []

    class Sink:
        def send(self, p):
            sent.append(bytes(p))

        def recv(self, timeout):
            return None

        def close(self):
            pass

    space = (2**32 // 14) * 14                  # window 7: seqs wrap at a multiple of 2 x 7
    c = InaClient(Sink(), 9, 2, 4, window=7, first_seq=space - 3, scale_exp=10)
    assert c.seq_space == space
    x = np.linspace(-3, 3, 64 * 9 + 5).astype(np.float32)
    c.submit(x)
    assert len(sent) == 7                                  # the window
    ints, _ = fp.quantize(x, 10, 4)
    for p in sent:
        hd = wire.unpack_header(p, 0)
        i = (hd.seq - (space - 3)) % space
        lo, hi = i * LANES, min(x.size, (i + 1) * LANES)
        assert hd.slot == hd.seq % 7 and hd.slot_ver == (hd.seq // 7) % 2
        want = wire.pack_header(op=wire.OP_SUM, job_id=9, slot=hd.slot, slot_ver=hd.slot_ver,
                                worker_id=2, seq=hd.seq, count=hi - lo, exponent=hd.exponent)
        assert p == want + ints[lo:hi].astype(">i4").tobytes()


@pytest.mark.parametrize("window", [1, 3, 5, 7, 16, 256, 1000])
def test_a_slots_chunks_alternate_versions_across_the_seq_wrap(window):
    """Consecutive chunks in one slot must flip slot_ver, also where seq wraps: at
    window 5 seq 2^32-4 and seq 1 both landed in slot 1 with version 0, and the
    second overwrote the first's result in the switch."""
    c = InaClient(None, 1, 0, 2, window=window)
    seqs = [(c.seq_space - 3 * window + k) % c.seq_space for k in range(6 * window)]
    last_ver: dict[int, int] = {}
    for s in seqs:
        slot, ver = s % window, (s // window) & 1
        if slot in last_ver:
            assert ver != last_ver[slot], (window, s)
        last_ver[slot] = ver
    assert c.seq_space % (2 * window) == 0 and 2**32 - c.seq_space < 2 * window


# ---------------------------------------------------------------- dilated network: per-chunk timer floor
class DilatedFabric:
    """Workers, the switch pipeline and the soft switch's own delay line
    (testbed.switch.soft.dilation.DelayLine) on a virtual clock: every frame is
    serialized on its sender's uplink, held L0 and serialized on the receiver's
    downlink, TDF x the hardware link's times, as on the dilated Mininet network.
    `drop`: (worker, seq) contributions lost on their first send."""

    def __init__(self, n: int, window: int, tdf: float, drop=(), **client_kw):
        import heapq

        from hosts.common.network_dilation import DilationSettings
        from testbed.fidelity.constants import load_profile
        from testbed.fidelity.network_model import dilation_hardware
        from testbed.switch.soft.dilation import DelayLine

        self.heapq = heapq
        self.settings = DilationSettings(version=1, tdf=tdf, **dilation_hardware(load_profile("tofino1-100g")))
        self.line = DelayLine(self.settings)
        self.job = H.job_config(1, n, slot_count=window)
        self.pipe = InaPipeline(H.pipeline_config(self.job), vectorized=True, scalar_below=1)
        self.clock = VClock()
        self.events: list = []             # (time, order, kind, port, frame)
        self.order = 0
        self.drop = set(drop)
        self.sends: list[tuple[float, int, int, bool]] = []   # (t, worker, seq, retx)
        fab = self

        class Io:
            def __init__(self, w):
                self.w, self.q = w, []

            def send(self, payload):
                hd = wire.unpack_header(payload, 0)
                retx = bool(hd.flags & wire.FLAG_RETX)
                fab.sends.append((fab.clock.t, self.w["worker_id"], hd.seq, retx))
                if not retx and (self.w["worker_id"], hd.seq) in fab.drop:
                    return                                   # lost on the uplink
                frame = H.contribution(fab.job, self.w["worker_id"], slot=0, seq=0)[:wire.INA_OFFSET]
                frame = wire.eth_ip_udp(self.w["mac"], H.SWITCH_MAC, self.w["ip"], H.SWITCH_IP,
                                        wire.INA_PORT_BASE, wire.INA_PORT_BASE, len(payload)) + payload
                for t, (port, f) in fab.line.uplink(self.w["port"], [frame], fab.clock.t):
                    fab.push(t, "in", port, f)

            def recv(self, timeout):
                return self.q.pop(0) if self.q else None

            def close(self):
                pass

        kw = dict(window=window, clock=self.clock, timeout_s=0.01, scale_exp=16)
        kw.update(client_kw)
        self.ios = {w["port"]: Io(w) for w in self.job["workers"]}
        self.clients = [InaClient(self.ios[w["port"]], 1, w["worker_id"], n, **kw) for w in self.job["workers"]]

    def push(self, t, kind, port, frame):
        self.order += 1
        self.heapq.heappush(self.events, (t, self.order, kind, port, frame))

    def run(self, handles, max_steps=200_000):
        for _ in range(max_steps):
            if all(h.done for h in handles):
                return
            if sum(c.poll() for c in self.clients):
                continue
            dls = [d for d in (c.next_deadline() for c in self.clients) if d is not None]
            t = min([self.events[0][0]] if self.events else [] + dls) if self.events else min(dls)
            if dls:
                t = min(t, min(dls))
            self.clock.advance(t)
            while self.events and self.events[0][0] <= self.clock.t:
                _, _, kind, port, frame = self.heapq.heappop(self.events)
                if kind == "in":
                    for out_port, out in self.pipe.process_batch([frame], [port], self.clock.t):
                        for t2, (p2, f2) in self.line.schedule(out_port, [out], self.clock.t):
                            self.push(t2, "out", p2, f2)
                else:
                    self.ios[port].q.append(frame[wire.INA_OFFSET:])
        raise AssertionError("not done: the transport deadlocked")


def _dilated_op(drop=(), n=4, window=16, chunks=256, tdf=1e5):
    fab = DilatedFabric(n, window, tdf, drop=drop)
    for c in fab.clients:
        c.expect_delay(fab.settings)
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-1, 1, chunks * LANES).astype(np.float32) for _ in range(n)]
    hs = [c.submit(x) for c, x in zip(fab.clients, xs)]
    fab.run(hs)
    for c, h in zip(fab.clients, hs):
        assert np.array_equal(c.wait(h), fab.clients[0].wait(hs[0]))
    return fab, hs


def test_dilated_network_no_spurious_resends_of_delayed_chunks():
    """A full window on the dilated links waits behind its own queue; the per-chunk
    floor (round trip + the chunks ahead of it) keeps every timer above that: no
    chunk is resent on a lossless dilated network, though the client's own
    timeout (10 ms) is far below the dilated answer time (~0.2 s)."""
    fab, hs = _dilated_op()
    assert sum(c.stats.retransmissions for c in fab.clients) == 0
    assert fab.clients[0].chunk_floor_s(0) > 10 * 0.01


def test_dilated_network_resends_a_lost_chunk_after_its_own_round_trip_not_the_ops():
    """One contribution lost in the middle of a long tensor (256 chunks through a
    window of 16) is resent after about its chunk floor (1.5 x its dilated round
    trip with a full window ahead), far sooner than the op's dilated time (model 0.9 s, here 3 s);
    a floor per operation (the old one: 1.5 x the op's dilated time) fails this."""
    from testbed.fidelity.constants import load_profile
    from testbed.fidelity.network_model import collective_time

    lost = (1, 100)
    _, base = _dilated_op()
    fab, hs = _dilated_op(drop=[lost])
    c = fab.clients[1]
    first = [t for t, w, s, r in fab.sends if (w, s) == lost and not r]
    resent = [t for t, w, s, r in fab.sends if (w, s) == lost and r]
    assert len(first) == 1 and resent, "the lost chunk was never resent"
    waited = resent[0] - first[0]
    # its first timer (at most the floor with a full window ahead), plus at most one
    # re-arm while RACK still allows for reordering (the chunks sent just after it)
    bound = c.chunk_floor_s(c.window - 1) + c.timeout_s
    assert waited <= bound
    op_s = fab.settings.tdf * collective_time("allreduce", "switch", 256 * LANES, 4, 4,
                                              load_profile("tofino1-100g"))
    assert waited < 1.5 * op_s / 2          # under half the per-op floor (1.5 x op_s = 1.3 s)
    # every worker waits for that chunk's result and resends it once; nothing else is resent
    assert {s for _, _, s, r in fab.sends if r} == {lost[1]}
    assert [x.stats.retransmissions for x in fab.clients] == [1] * 4
    # the loss costs about one chunk floor, not the op's time
    took = max(h.completed_at for h in hs)
    took0 = max(h.completed_at for h in base)
    assert took - took0 <= bound
