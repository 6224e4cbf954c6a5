"""A reusable harness for the INA protocol: switch pipeline + workers + an
adversarial network between them, all in-process and deterministic.

- `job_config(...)`, `pipeline_config(...)`, `contribution(...)`: build a switch
  config and worker frames the way a test wants them.
- `ModelWorker`: the smallest correct worker (SwitchML-style): a window of
  slots, chunk `seq` -> slot `seq % window`, version `(seq // window) % 2`,
  next chunk for a slot only after that slot's result, resend everything
  outstanding on timeout. The real host transport can be dropped in instead:
  anything with the `WorkerProtocol` methods works.
- `Fabric`: frames in flight in both directions. A schedule of `Step`s decides
  which frames are delivered (in any order, several in one switch batch), lost
  or duplicated, and when workers time out. `drain()` then delivers everything
  and fires timeouts until every worker is done, which checks liveness.
- Every result the switch emits is checked against the exact aggregate of its
  chunk (`Fabric.bad_results` must stay empty), and each worker keeps the
  first result per chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from testbed import wire

SWITCH_MAC = "02:00:00:00:00:fe"
SWITCH_IP = "10.0.0.254"


# -- configs and frames -------------------------------------------------------------
def worker_spec(job_id: int, worker_id: int, port: int, udp_port: int | None = None) -> dict:
    w = {"worker_id": worker_id, "mac": f"02:00:00:00:{job_id:02x}:{worker_id + 1:02x}",
         "ip": f"10.{job_id}.0.{worker_id + 1}", "port": port}
    if udp_port is not None:
        w["udp_port"] = udp_port
    return w


def job_config(job_id: int = 1, n_workers: int = 2, *, slot_base: int = 0, slot_count: int = 16,
               first_port: int = 1, **extra) -> dict:
    workers = [worker_spec(job_id, i, first_port + i) for i in range(n_workers)]
    return {"job_id": job_id, "workers": workers, "slot_base": slot_base,
            "slot_count": slot_count, **extra}


def pipeline_config(*jobs: dict, extra_ports: int = 1, **extra) -> dict:
    ports = sorted({w["port"] for j in jobs for w in j["workers"]})
    last = max(ports, default=0)
    ports += list(range(last + 1, last + 1 + extra_ports))
    return {"ports": {p: f"s1-eth{p}" for p in ports}, "jobs": list(jobs),
            "switch_mac": SWITCH_MAC, "switch_ip": SWITCH_IP, **extra}


def contribution(job: dict, worker_id: int, *, slot: int, seq: int, values=(),
                 slot_ver: int | None = None, op: int = wire.OP_SUM, flags: int = 0,
                 exponent: int = 0, sport: int = 40000, dport: int = wire.INA_PORT_BASE,
                 window: int | None = None, **kw) -> bytes:
    """A frame from worker `worker_id` of `job` to the switch."""
    w = next(x for x in job["workers"] if x["worker_id"] == worker_id)
    if slot_ver is None:
        slot_ver = (seq // window) % 2 if window else 0
    return wire.build_frame(w["mac"], SWITCH_MAC, w["ip"], SWITCH_IP, sport, dport, op=op,
                            job_id=job["job_id"], slot=slot, slot_ver=slot_ver,
                            worker_id=worker_id, seq=seq, values=values, flags=flags,
                            exponent=exponent, **kw)


def port_of(job: dict, worker_id: int) -> int:
    return next(x["port"] for x in job["workers"] if x["worker_id"] == worker_id)


def expected(op: int, contributions: np.ndarray) -> np.ndarray:
    """The switch's aggregate of (n_workers, k) int32 contributions (int32 wrap)."""
    c = np.asarray(contributions)
    if op == wire.OP_SUM:
        return c.astype(np.int64).sum(axis=0).astype(np.int32)
    if op == wire.OP_OR:
        return np.bitwise_or.reduce(c.astype(np.int32), axis=0)
    return c.astype(np.int32).max(axis=0)


# -- workers ------------------------------------------------------------------------
class WorkerProtocol(Protocol):
    port: int
    done: bool
    results: dict[int, np.ndarray]

    def start(self) -> list[bytes]: ...
    def on_frame(self, frame: bytes) -> list[bytes]: ...
    def on_timeout(self) -> list[bytes]: ...


class ModelWorker:
    """One worker of `job` streaming `chunks` (C, k) int32 through the switch."""

    def __init__(self, job: dict, worker_id: int, chunks: np.ndarray, *, window: int,
                 op: int = wire.OP_SUM, seq_base: int = 0, exponents=None, udp_port: int = 40000):
        self.job, self.worker_id, self.window, self.op = job, worker_id, window, op
        self.port = port_of(job, worker_id)
        self.chunks = np.asarray(chunks, dtype=np.int32)
        self.seq_base = seq_base
        self.exponents = exponents
        self.udp_port = udp_port
        self.results: dict[int, np.ndarray] = {}
        self.result_exponents: dict[int, int] = {}
        self.outstanding: dict[int, int] = {}      # slot -> seq in flight
        self.resends = 0

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.chunks)

    def _frame(self, seq: int, flags: int = 0) -> bytes:
        c = seq - self.seq_base
        exp = int(self.exponents[c]) if self.exponents is not None else 0
        return contribution(self.job, self.worker_id, slot=seq % self.window, seq=seq,
                            slot_ver=(seq // self.window) % 2, values=self.chunks[c],
                            op=self.op, flags=flags, exponent=exp, sport=self.udp_port)

    def _send(self, seq: int) -> list[bytes]:
        if seq - self.seq_base >= len(self.chunks):
            return []
        self.outstanding[seq % self.window] = seq
        return [self._frame(seq)]

    def start(self) -> list[bytes]:
        out: list[bytes] = []
        for c in range(min(self.window, len(self.chunks))):
            out += self._send(self.seq_base + c)
        return out

    def on_frame(self, frame: bytes) -> list[bytes]:
        p = wire.parse_frame(frame)
        if p is None or not p.header.flags & wire.FLAG_RESULT or p.header.job_id != self.job["job_id"]:
            return []
        seq = p.header.seq
        slot = seq % self.window
        if self.outstanding.get(slot) != seq:
            return []                                  # stale or duplicate result
        del self.outstanding[slot]
        self.results[seq] = p.values.copy()
        self.result_exponents[seq] = p.header.exponent
        return self._send(seq + self.window)

    def on_timeout(self) -> list[bytes]:
        self.resends += len(self.outstanding)
        return [self._frame(s, wire.FLAG_RETX) for s in sorted(self.outstanding.values())]


# -- the network ----------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """kind: up (deliver `n` frames to the switch in one batch, from index `i`),
    down (deliver one frame to its worker), drop_up/drop_down (lose one),
    dup_up/dup_down (duplicate one), late_up/late_down (put a copy aside, to
    arrive much later), release (deliver every copy put aside), timeout
    (worker i % workers times out)."""
    kind: str
    i: int = 0
    n: int = 1


STEP_KINDS = ("up", "down", "drop_up", "drop_down", "dup_up", "dup_down", "late_up",
              "late_down", "release", "timeout")


@dataclass
class Fabric:
    pipeline: object
    workers: list
    expected: dict[tuple[int, int], np.ndarray]      # (job_id, seq) -> aggregate
    up: list[tuple[int, bytes]] = field(default_factory=list)      # (in port, frame)
    down: list[tuple[int, bytes]] = field(default_factory=list)    # (out port, frame)
    late_up: list[tuple[int, bytes]] = field(default_factory=list)
    late_down: list[tuple[int, bytes]] = field(default_factory=list)
    bad_results: list[str] = field(default_factory=list)
    results_seen: int = 0
    batches: int = 0

    def __post_init__(self):
        self.by_port = {w.port: w for w in self.workers}
        for w in self.workers:
            self.up += [(w.port, f) for f in w.start()]

    def _switch(self, batch: list[tuple[int, bytes]]) -> None:
        self.batches += 1
        outs = self.pipeline.process_batch([f for _, f in batch], [p for p, _ in batch], 0.0)
        for port, frame in outs:
            p = wire.parse_frame(frame)
            if p is not None and p.header.flags & wire.FLAG_RESULT:
                self.results_seen += 1
                want = self.expected.get((p.header.job_id, p.header.seq))
                if want is None or not np.array_equal(p.values, want[:p.header.count]):
                    self.bad_results.append(f"job {p.header.job_id} seq {p.header.seq}: "
                                            f"got {p.values[:4]}..., want {None if want is None else want[:4]}")
            self.down.append((port, frame))

    def _deliver_down(self, port: int, frame: bytes) -> None:
        w = self.by_port.get(port)
        if w is not None:
            self.up += [(w.port, f) for f in w.on_frame(frame)]

    def release(self) -> None:
        late, self.late_up = self.late_up, []
        if late:
            self._switch(late)
        late, self.late_down = self.late_down, []
        for port, frame in late:
            self._deliver_down(port, frame)

    def step(self, s: Step) -> None:
        if s.kind == "release":
            self.release()
            return
        if s.kind == "timeout":
            w = self.workers[s.i % len(self.workers)]
            self.up += [(w.port, f) for f in w.on_timeout()]
            return
        q = self.up if s.kind.endswith("up") else self.down
        if not q:
            return
        j = s.i % len(q)
        if s.kind == "up":
            take = [q.pop(j % len(q)) for _ in range(min(s.n, len(q)))]
            self._switch(take)
        elif s.kind == "down":
            self._deliver_down(*q.pop(j))
        elif s.kind.startswith("drop"):
            q.pop(j)
        elif s.kind.startswith("late"):
            (self.late_up if s.kind == "late_up" else self.late_down).append(q[j])
        else:
            q.insert(j, q[j])

    def run(self, steps) -> None:
        for s in steps:
            self.step(s)

    def drain(self, max_rounds: int = 10_000, batch: int = 16) -> bool:
        """Deliver everything in order, time out idle workers; True when all done.
        Copies put aside arrive last, after the workers finished."""
        for _ in range(max_rounds):
            if not (self.up or self.down) and all(w.done for w in self.workers) \
                    and (self.late_up or self.late_down):
                self.release()
            if self.up:
                take, self.up = self.up[:batch], self.up[batch:]
                self._switch(take)
            elif self.down:
                self._deliver_down(*self.down.pop(0))
            elif all(w.done for w in self.workers):
                return True
            else:
                for w in self.workers:
                    if not w.done:
                        self.up += [(w.port, f) for f in w.on_timeout()]
        return all(w.done for w in self.workers)


def make_job_run(pipeline_factory, *, n_workers: int, chunks: int, k: int, window: int,
                 op: int = wire.OP_SUM, seed: int = 0, job_id: int = 1, slot_base: int = 0,
                 worker_factory=ModelWorker) -> Fabric:
    """A pipeline with one job and its workers, wired into a Fabric."""
    rng = np.random.default_rng(seed)
    job = job_config(job_id, n_workers, slot_base=slot_base, slot_count=window)
    pipe = pipeline_factory(pipeline_config(job))
    if op == wire.OP_SUM:
        data = rng.integers(-2**31, 2**31, size=(n_workers, chunks, k)).astype(np.int32)
    elif op == wire.OP_OR:
        data = rng.integers(0, 2**31, size=(n_workers, chunks, k)).astype(np.int32) \
            & rng.integers(0, 2**31, size=(n_workers, chunks, k)).astype(np.int32)
    else:
        data = rng.integers(-1000, 1000, size=(n_workers, chunks, k)).astype(np.int32)
    if k:
        data[:, :, 0] = 1 << np.arange(n_workers)[:, None]   # lane 0 names the contributors
    exps = rng.integers(-20, 20, size=(n_workers, chunks))
    workers = [worker_factory(job, w, data[w], window=window, op=op, exponents=exps[w])
               for w in range(n_workers)]
    want = {(job_id, c): expected(op, data[:, c]) for c in range(chunks)}
    fab = Fabric(pipe, workers, want)
    fab.data, fab.exponents, fab.job = data, exps, job
    return fab


def check_exactly_once(fab: Fabric) -> None:
    """Every worker has the exact aggregate of every chunk, and the switch
    completed every chunk exactly once."""
    assert not fab.bad_results, fab.bad_results[:5]
    n_chunks = fab.data.shape[1]
    for w in fab.workers:
        assert sorted(w.results) == list(range(n_chunks))
        for c, got in w.results.items():
            want = fab.expected[(fab.job["job_id"], c)]
            assert np.array_equal(got, want), (w.worker_id, c, got[:4], want[:4])
            assert w.result_exponents[c] == int(fab.exponents[:, c].max())
    done = fab.pipeline.counters_by_name["Ingress.ina_results"].read(fab.job["job_id"])
    assert done == n_chunks, f"{done} completions for {n_chunks} chunks"
