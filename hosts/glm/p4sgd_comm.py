"""P4SGD program's collectives: the opened allreduce (switch, ring or PS) as
one asynchronous interface, and TimedAllreduce, which measures what the
worker reports (exposed communication, per-op latency, result digest)."""
from __future__ import annotations

import hashlib
import time

import numpy as np

from hosts.glm.p4sgd_config import P4sgdConfig

class Comm:
    """An opened collective: async allreduce, barrier, close, per-op latency."""

    def __init__(self, aar, barrier, close, latency, blocking: bool, stats=None):
        self.aar, self.barrier, self.close = aar, barrier, close
        self.latency = latency          # (handle, submit_s) -> seconds the allreduce took
        self.blocking = blocking
        self.idle = time.sleep          # how the device waits out modeled compute
        self.stats = stats or (lambda: {})
        # seconds -> None: an operation may take this long on purpose (network dilation)
        self.expect_delay = lambda seconds: None


def open_comm(cfg: P4sgdConfig) -> Comm:
    from hosts.glm.training import BlockingAsAsync

    hello = {"host": cfg.host, "rank": cfg.rank, "run": cfg.run_identity()}
    if cfg.collective == "switch" and cfg.world == 1:
        # One worker: the sum of one vector is itself, and nothing crosses the network
        # (as on the hardware, and as testbed.fidelity.network_model charges it).
        return Comm(BlockingAsAsync(lambda v: np.array(v, dtype=np.float64)), lambda: None,
                    lambda: None, lambda h, submit_s: submit_s, blocking=True)
    if cfg.collective == "switch":
        return _open_switch(cfg)
    if cfg.collective == "ring":
        from hosts.collectives.ring import RingAllreduce
        coll = RingAllreduce.connect(rank=cfg.rank, peers=cfg.peers, port_base=cfg.port,
                                     hello=hello, connect_timeout_s=cfg.connect_timeout_s,
                                     timeout_s=cfg.timeout_s)
    else:
        from hosts.collectives.ps import PSWorker
        coll = PSWorker.connect(ps=cfg.ps, my_ip=cfg.my_ip, port_base=cfg.port, hello=hello,
                                connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    # Blocking: submit() does the whole allreduce, so its duration is the latency.
    return Comm(BlockingAsAsync(coll.allreduce), coll.barrier, coll.close,
                lambda h, submit_s: submit_s, blocking=True)


class _SwitchAsync:
    """The in-switch collective's InaClient as an AsyncAllreduce (float SUM).

    P4SGD's partial dot products use a fixed scale 2^k (no scale round trip:
    latency-centric); data-parallel gradients have no known range, so each
    vector first agrees on a scale (one MAX round)."""

    def __init__(self, client, scale_exp: int | None, timeout_s: float):
        self.client, self.timeout_s = client, timeout_s
        self.kw = {} if scale_exp is None else {"scale_exp": scale_exp}

    def submit(self, vec):
        return self.client.submit(np.asarray(vec, dtype=np.float64), "sum", **self.kw)

    def wait(self, handle):
        return self.client.wait(handle, timeout=self.timeout_s)


def switch_scale_exp(cfg: P4sgdConfig) -> int | None:
    """Fixed-point scale of in-switch sums. P4SGD's partial dot products have a known
    range (fixed 2^k); data-parallel gradients do not: None = agree per vector (a MAX
    round first, which the network model charges as `scale_round`)."""
    return cfg.fixed_point_exp if cfg.mode == "model_parallel" else None


def _open_switch(cfg: P4sgdConfig) -> Comm:
    from hosts.collectives.switch import SwitchAllreduce

    # connect() = socket + client + a first round that checks every worker runs this config.
    sw = SwitchAllreduce.connect(rank=cfg.rank, world=cfg.world, my_ip=cfg.my_ip, ina=cfg.ina,
                                 run=cfg.run_identity(), connect_timeout_s=cfg.connect_timeout_s,
                                 timeout_s=cfg.timeout_s)
    aar = _SwitchAsync(sw.client, switch_scale_exp(cfg), cfg.timeout_s)

    def latency(h, submit_s):
        done = getattr(h, "completed_at", 0.0)  # the transport's own completion time
        return done - h.submitted_at if done else None

    comm = Comm(aar, sw.barrier, sw.close, latency, blocking=False, stats=sw.stats)
    comm.idle = lambda seconds: _idle_polling(sw.client, seconds)
    comm.expect_delay = sw.client.expect_delay
    return comm


def _idle_polling(client, seconds: float) -> None:
    """Sleep `seconds` while the transport takes in results and fires its timers,
    so completion times are when results arrived, not when we next looked."""
    import select

    end = time.perf_counter() + seconds
    sock = getattr(client.io, "sock", None)
    while True:
        client.poll()
        left = end - time.perf_counter()
        if left <= 0:
            return
        deadline = client.next_deadline()
        if deadline is not None:
            left = min(left, max(0.0, deadline - time.monotonic()))
        if sock is not None:
            select.select([sock], [], [], left)
        else:
            time.sleep(left)


class TimedAllreduce:
    """AsyncAllreduce wrapper: exposed communication time, per-op latency, result digest.

    Exposed = time this worker spends inside submit/wait (the part of the
    communication compute did not hide)."""

    def __init__(self, comm: Comm, before_send=None, trace=None, algo: str = "", after_wait=None,
                 scale_round: bool = False):
        self.comm = comm
        self.scale_round = scale_round          # each op first agrees on a fixed-point scale
        self.before_send = before_send
        self.after_wait = after_wait            # e.g. WorkerDevice.mark: waiting is not glue
        self.trace, self.algo = trace, algo     # hosts.common.trace.TraceRecorder or None
        self.exposed_s = 0.0
        self.latencies: list[float] = []
        self.spans: list[tuple[float, float]] = []   # (submitted, completed) per op
        self.digest = hashlib.blake2b(digest_size=8)  # equal on all workers iff results agree

    def submit(self, vec):
        if self.before_send is not None:
            self.before_send()
        t = time.perf_counter()
        h = self.comm.aar.submit(vec)
        dt = time.perf_counter() - t
        self.exposed_s += dt
        node = (self.trace.comm(t, None, op="allreduce", algo=self.algo, values=len(vec),
                                **({"scale_round": True} if self.scale_round else {}))
                if self.trace is not None else None)
        return (h, dt, t, node)

    def wait(self, wrapped):
        h, submit_s, t_submit, node = wrapped
        t = time.perf_counter()
        result = self.comm.aar.wait(h)
        t_end = time.perf_counter()
        self.exposed_s += t_end - t
        # Blocking: the whole time inside the collective (nothing can hide it);
        # async: the collective's own completion time, else until wait returned.
        lat = submit_s + (t_end - t) if self.comm.blocking else self.comm.latency(h, submit_s)
        lat = lat if lat is not None else t_end - t_submit
        self.latencies.append(lat)
        self.spans.append((t_submit, t_submit + lat))
        if node is not None:
            self.trace.done(node, t_submit + lat)
            self.trace.waited(node)
        self.digest.update(np.ascontiguousarray(result).tobytes())
        if self.after_wait is not None:
            self.after_wait()
        return result

    def __call__(self, vec):  # blocking form, for data_parallel_sgd
        return self.wait(self.submit(vec))
