"""The PHub server: `cores` processes, each owning a fixed share of every job's
chunks (chunking.owner), with its own listening port (port + core) and one
connection per worker: no state is shared between cores, so nothing is locked
(PHub's core/queue-pair affinity, research/seeds.md §5.2).

    python -m hosts.phub.server --config phub.config.json

Tall aggregation: a chunk is summed as the workers' copies arrive, in one of two
orders (config `aggregation_order`):
  rank     (default) the sum is taken in rank order so that it is the plain PS's bit
           for bit (hosts/collectives/ps.py sums ranks 0, 1, ... in float32): rank
           r's copy is added as soon as ranks < r are in; one that comes earlier
           waits in a per-chunk slot until then (counted: `copies_held`).
  arrival  PHub's own behaviour: each copy is added as it arrives, nothing is held;
           float addition is not associative, so from 3 workers on the sum differs
           from the plain PS's by rounding (hosts/phub/reference.py bounds it).
When the chunk has all N copies its optimizer step runs at once (optimizer.step)
and the new weights go to every worker of the job (UPDATE; no pull requests).
Several jobs share the server: each message carries its job id.

Sharded (config `shards` > 0: the sharded_ps baseline, MXNet kvstore's servers):
this process is server `shard` of `shards`, one core, on a worker's host; the
job's placement is MXNet's (chunking.kvstore_plan); its port is port + shard, its
messages' tags and chunk ownership use the shard index, its trace names the
worker's host as its NIC (`nic`). Same sum (either order), optimizer
(update_on_kvstore) and updates: the updates answer the workers' pulls.

Time: a core's work per PUSH is modeled (`modeled_work_s`: a per-message cost
and the bytes it sums and optimizes at a modeled core's memory rate, [A] below)
and paced like a device (hosts/common/device.py PacedDevice): the core sleeps
TDF x the modeled time minus what Python took, before the updates leave. The
TDF is the config's, then whatever rank 0 sends (TDF message: time_scale auto).
Python slower than the dilated model is an overrun (the core's `device` record;
the monitor counts it from the trace).

Output (JSON lines): `core` per core (bytes, messages, seconds per stage:
receive, aggregate, optimize, send, idle; GB/s of aggregation beside a plain
numpy sum of the same bytes), and a `summary`. With a trace path, one trace of
the whole server (role "server", reply_after "all": a chunk is answered once
every worker's copy is in; `cores`: K, and every node names its `core`, so the
projector plays the cores in parallel): per PUSH a recv node, a compute node
(aggregate + optimize: hw_s modeled, real_s measured) and the update's send
nodes; messages of iterations before `trace_from` (calibration) are not traced.
"""
from __future__ import annotations

import heapq
import logging
import multiprocessing as mp
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from hosts.collectives import check_hello, make_hello
from hosts.common import program, start_gate
from hosts.common.device import PacedDevice
from hosts.common.results import JsonlWriter
from hosts.common.tcp import Conn, NetError, ProtocolError, accept_until, listen, recv_json
from hosts.common.trace import TraceRecorder
from hosts.phub import protocol as P
from hosts.phub.chunking import ChunkPlan, owner
from hosts.phub.config import AGGREGATION_ORDERS, JobSpec, ServerConfig, load_server

log = logging.getLogger("phub.server")

# The modeled server core: it sums incoming gradient bytes at the network profile's
# `reduce_rate` (the same [A] rate the plain PS's model sums at, 50 GB/s in
# tofino1-100g; passed in the config as reduce_bytes_per_s), and every core has that
# rate (PHub's tall aggregation spreads chunks over cores to scale the server). The
# optimizer reads and writes the weights, momentum and sum: 20 (Nesterov) or 12 (SGD)
# bytes per value at the same rate [A]. Plus 1 us per message [A: PHub's per-chunk
# queue-pair polling and completion; range 0.5-5 us; the PS model has none].
CORE_MESSAGE_S = 1e-6


def modeled_work_s(summed_values: int, optimized_values: int, has_momentum: bool,
                   bytes_per_s: float) -> float:
    """Hardware seconds of one PUSH on a modeled core (constants above)."""
    opt_bytes = (20 if has_momentum else 12) * optimized_values
    return CORE_MESSAGE_S + (4 * summed_values + opt_bytes) / bytes_per_s


class CoreDevice(PacedDevice):
    """A core's paced modeled work; its statistics (overruns) restart at the first
    measured iteration (calibration's round 0 runs unpaced: every step overruns).

    Paced by a deadline, not a sleep (`busy_until`): while the modeled work of a
    message runs, the core's loop keeps receiving (the next messages wait in a
    backlog, as a NIC's receive queue fills while the CPU computes) and sending
    what is already queued; the work's results leave at its end. A core that slept
    stopped reading its sockets, so workers' pushes took the core's compute time
    on top of the network's, and the monitor read that as a slow network."""

    def __init__(self, tdf: float, measured_from: int):
        super().__init__(tdf)
        self.measured_from, self.measuring = measured_from, measured_from == 0
        self.busy_until = 0.0             # perf_counter time the modeled work in progress ends

    def at_iteration(self, it: int) -> None:
        if not self.measuring and it >= self.measured_from:
            self._reset_stats()
            self.measuring = True

    def work(self, arrived: float, c0: float, hw_s: float, real_s: float) -> float:
        """A message's modeled work (hw_s, undilated), processed from c0 in real_s: it
        starts when the core is free and the message was in (never later than c0),
        and ends TDF x hw_s later, or real_s later when Python was slower (an
        overrun). Sets and returns busy_until."""
        modeled = hw_s * self.time_scale
        self._record(modeled, real_s)
        start = min(c0, max(self.busy_until, arrived))
        self.busy_until = start + max(modeled, real_s)
        return self.busy_until


class Backlog:
    """A core's messages in, waiting for the core (CoreDevice), and the results of
    the work in progress, held until it ends (`release`)."""

    def __init__(self):
        self.waiting: deque = deque()
        self.held: list[Callable[[float], None]] = []

    def release(self, now: float) -> bool:
        held, self.held = self.held, []
        for fn in held:
            fn(now)
        return bool(held)


def pump_links(links: Sequence[tuple[tuple, P.Link]], rx_done: set, work: Backlog, dev: CoreDevice,
               handle: Callable[..., None], st: "Stages") -> bool:
    """One pass of a server's event loop over its links, the ONE loop a PHub core and
    a rack server share: read what came in into the backlog as (*key, header, payload,
    t0, t1, peer) (after an END the peer may close: its link is read no more), release
    the held results once the core's modeled work ended, serve waiting messages
    (`handle(*entry)`) while the core is free, and push out what is queued. True if
    anything moved."""
    progressed = False
    for key, ln in links:
        if key in rx_done:
            continue
        t0 = time.perf_counter()
        msgs = ln.pump_recv()
        st.recv_s += time.perf_counter() - t0
        for hdr, payload, m0, m1 in msgs:
            progressed = True
            work.waiting.append((*key, hdr, payload, m0, m1, ln.conn.peer))
            if hdr.size and int(hdr[0]) == P.END:
                rx_done.add(key)
    if work.held and time.perf_counter() >= dev.busy_until:
        progressed |= work.release(time.perf_counter())
    while work.waiting and not work.held and time.perf_counter() >= dev.busy_until:
        handle(*work.waiting.popleft())
        progressed = True
        if work.held and time.perf_counter() >= dev.busy_until:
            work.release(time.perf_counter())          # an overrun: Python was the slower
    for _, ln in links:
        if ln.busy:
            t0 = time.perf_counter()
            progressed |= ln.pump_send()
            st.send_s += time.perf_counter() - t0
    return progressed


def idle_wait(links: Sequence[tuple[tuple, P.Link]], rx_done: set, work: Backlog, dev: CoreDevice) -> None:
    """Nothing moved: sleep until a link is ready or the core's work ends (0.2 s at most)."""
    wait = dev.busy_until - time.perf_counter() if work.held or work.waiting else 0.2
    P.poll_links([ln for key, ln in links if ln.busy or key not in rx_done], min(0.2, max(0.0, wait)))


def modeled_key_s(values: int, world: int, cores: int, has_momentum: bool, bytes_per_s: float) -> float:
    """Hardware seconds the server adds to one key's exchange: its chunks spread over
    `cores` cores working in parallel, each summing `world` copies of its share and
    optimizing it once (what calibration adds to the network's time of the key)."""
    share = -(-values // max(1, cores))
    return (world * modeled_work_s(share, 0, has_momentum, bytes_per_s)
            + modeled_work_s(0, share, has_momentum, bytes_per_s) - CORE_MESSAGE_S)


@dataclass
class Stages:
    recv_s: float = 0.0
    agg_s: float = 0.0
    opt_s: float = 0.0
    send_s: float = 0.0
    agg_bytes: int = 0
    messages_in: int = 0
    messages_out: int = 0
    chunks_done: int = 0


class JobState:
    """One job's chunks on one core: weights, momentum, running sums."""

    def __init__(self, spec: JobSpec, core: int, cores: int, reduce_bytes_per_s: float = 50e9,
                 order: str = "rank"):
        if order not in AGGREGATION_ORDERS:
            raise ValueError(f"aggregation order must be one of {AGGREGATION_ORDERS}, got {order!r}")
        self.spec, self.reduce_bytes_per_s, self.order = spec, reduce_bytes_per_s, order
        self.plan = spec.plan(cores)
        ids = self.plan.owned(core, cores)
        self.local: dict[int, slice] = {}
        off = 0
        for cid in ids:
            n = self.plan.chunks[cid].length
            self.local[cid] = slice(off, off + n)
            off += n
        self.values = off
        self.w = np.zeros(off, np.float32)
        self.v = np.zeros(off, np.float32) if spec.optimizer.has_state else None
        self.acc = np.zeros(off, np.float32)
        self.next_rank = {cid: 0 for cid in ids}
        self.round = {cid: 0 for cid in ids}
        self.early: dict[int, dict[int, np.ndarray]] = {cid: {} for cid in ids}
        self.arrived: dict[int, set[int]] = {cid: set() for cid in ids}     # arrival order: ranks in
        self.copies_held = 0
        self.initialized = False
        self.ended: set[int] = set()

    def init(self, ids: np.ndarray, payload: np.ndarray) -> None:
        off = 0
        for cid in ids.tolist():
            sl = self._slice(cid)
            n = sl.stop - sl.start
            self.w[sl] = payload[off:off + n]
            off += n
        self.initialized = True

    def _slice(self, cid: int) -> slice:
        try:
            return self.local[cid]
        except KeyError:
            raise ProtocolError(f"job {self.spec.job}: chunk {cid} is not owned by this core") from None

    def push(self, rank: int, it: int, ids: np.ndarray, payload: np.ndarray, st: Stages) -> list[int]:
        """Add rank's copies; the chunks whose sum completed (and were optimized)."""
        done: list[int] = []
        off = 0
        world = self.spec.world
        for cid in ids.tolist():
            sl = self._slice(cid)
            n = sl.stop - sl.start
            data = payload[off:off + n]
            off += n
            if it != self.round[cid]:
                raise ProtocolError(f"job {self.spec.job} rank {rank} pushed chunk {cid} for iteration {it}, "
                                    f"the chunk is at iteration {self.round[cid]}")
            t0 = time.perf_counter()
            if self.order == "arrival":
                self._add_arrived(cid, sl, rank, data, st)
            elif rank != self.next_rank[cid]:
                self.early[cid][rank] = data          # waits for the ranks before it (rank-order sum)
                self.copies_held += 1
                st.agg_s += time.perf_counter() - t0
                continue
            else:
                self._add(cid, sl, data, st)
                while self.next_rank[cid] in self.early[cid]:
                    self._add(cid, sl, self.early[cid].pop(self.next_rank[cid]), st)
            st.agg_s += time.perf_counter() - t0
            if self.next_rank[cid] == world:
                if not self.initialized:
                    raise ProtocolError(f"job {self.spec.job}: chunk {cid} complete before rank 0's INIT")
                t1 = time.perf_counter()
                from hosts.phub.optimizer import step  # noqa: PLC0415 - light
                step(self.spec.optimizer, self.w[sl], None if self.v is None else self.v[sl], self.acc[sl], world)
                st.opt_s += time.perf_counter() - t1
                self.next_rank[cid] = 0
                self.arrived[cid].clear()
                self.round[cid] += 1
                st.chunks_done += 1
                done.append(cid)
        if off != payload.size:
            raise ProtocolError(f"job {self.spec.job} rank {rank}: payload of {payload.size} values for "
                                f"chunks holding {off}")
        return done

    def _add(self, cid: int, sl: slice, data: np.ndarray, st: Stages) -> None:
        """The next copy joins the chunk's sum (the first starts it). `next_rank` counts
        the copies in: in rank order it is also the next rank to add."""
        if self.next_rank[cid] == 0:
            np.copyto(self.acc[sl], data)
        else:
            self.acc[sl] += data
        self.next_rank[cid] += 1
        st.agg_bytes += data.nbytes

    def _add_arrived(self, cid: int, sl: slice, rank: int, data: np.ndarray, st: Stages) -> None:
        """Arrival order: the copy joins the sum now; `next_rank` counts the copies in."""
        if rank in self.arrived[cid]:
            raise ProtocolError(f"job {self.spec.job} rank {rank} pushed chunk {cid} twice in iteration "
                                f"{self.round[cid]}")
        self.arrived[cid].add(rank)
        self._add(cid, sl, data, st)

    def incomplete(self) -> str:
        if self.order == "arrival":
            waiting = [(cid, sorted(set(range(self.spec.world)) - self.arrived[cid]), sorted(self.arrived[cid]))
                       for cid in self.next_rank if self.next_rank[cid]]
            if not waiting:
                return "no chunk in flight"
            cid, missing, got = waiting[0]
            return (f"{len(waiting)} chunk(s) in flight, e.g. chunk {cid} at iteration {self.round[cid]} "
                    f"waiting for ranks {missing} (ranks {got} already in)")
        waiting = [(cid, self.next_rank[cid], sorted(self.early[cid])) for cid in self.next_rank
                   if self.next_rank[cid] or self.early[cid]]
        if not waiting:
            return "no chunk in flight"
        cid, nxt, early = waiting[0]
        return (f"{len(waiting)} chunk(s) in flight, e.g. chunk {cid} at iteration {self.round[cid]} "
                f"waiting for rank {nxt} (ranks {early} already in)")


def accept_links(cfg: ServerConfig, core: int, ranks: range | None = None) -> dict[tuple[int, int], P.Link]:
    """One link per worker (job, rank); `ranks`: only those ranks connect (a rack server's)."""
    expected = {(j.job, r) for j in cfg.jobs for r in (range(j.world) if ranks is None else ranks)}
    jobs = {j.job: j for j in cfg.jobs}

    def handshake(conn: Conn, timeout_s: float) -> tuple[tuple[int, int], dict]:
        theirs = recv_json(conn, timeout_s=timeout_s)
        run = theirs.get("run") if isinstance(theirs, dict) else None
        job = jobs.get(run.get("job")) if isinstance(run, dict) else None
        if job is None:
            raise ProtocolError(f"a worker sent HELLO for an unknown job: {theirs!r}")
        mine = make_hello(cfg.host, -1, job.identity(cfg.total_cores))
        conn.peer = f"worker {theirs.get('host')} (job {job.job}, rank {theirs.get('rank')})"
        check_hello(theirs, mine=mine, peer=conn.peer)
        return (job.job, theirs["rank"]), mine

    server = listen(cfg.ip, cfg.port + cfg.core_index(core))
    try:
        conns = accept_until(server, expected, handshake, what="workers (job, rank)",
                             connect_timeout_s=cfg.connect_timeout_s, io_timeout_s=cfg.timeout_s)
    finally:
        server.close()
    return {key: P.Link(conn) for key, conn in conns.items()}


def serve_core(core: int, cfg: ServerConfig, trace_on: bool) -> dict[str, Any]:
    """Serve every job's chunks this core owns until every worker sent END."""
    links = accept_links(cfg, core)
    states = {j.job: JobState(j, cfg.core_index(core), cfg.total_cores, cfg.reduce_bytes_per_s, cfg.aggregation_order)
              for j in cfg.jobs}
    st = Stages()
    nodes: list[dict[str, Any]] = []
    tr = _CoreTrace(nodes, cfg.host, core, cfg.trace_from, cfg.core_index(core)) if trace_on else None
    dev = CoreDevice(cfg.tdf, cfg.trace_from)
    t_start = time.perf_counter()
    try:
        serve_links(links, states, st, tr, dev, cfg.timeout_s)
    finally:
        for ln in links.values():
            ln.conn.close()
    wall = time.perf_counter() - t_start
    values = sum(s.values for s in states.values())
    worlds = max(s.spec.world for s in states.values())
    return {"type": "core", "core": core, "wall_s": wall, **st.__dict__,
            "idle_s": max(0.0, wall - st.recv_s - st.agg_s - st.opt_s - st.send_s),
            "bytes_in": sum(ln.bytes_in for ln in links.values()),
            "bytes_out": sum(ln.bytes_out for ln in links.values()),
            "agg_gbps": st.agg_bytes / st.agg_s / 1e9 if st.agg_s else None, "tdf": dev.time_scale,
            "aggregation_order": cfg.aggregation_order, "copies_held": sum(s.copies_held for s in states.values()),
            "device": dev.validity(), **numpy_sum_reference(values, worlds), "nodes": nodes}


def serve_links(links: dict[tuple[int, int], P.Link], states: dict[int, JobState], st: Stages,
                tr: "_CoreTrace | None", dev: CoreDevice, timeout_s: float) -> None:
    """A core's event loop over its connected links (one per worker (job, rank)) until
    every worker sent END and the last updates left. The links stay open (the caller
    closes them); testbed/reproduce/measurements/phub_server.py runs this loop on
    socket pairs to measure the core's CPU cost."""
    stall = P.Stall(timeout_s)
    by_link = list(links.items())
    work = Backlog()
    rx_done: set[tuple[int, int]] = set()      # links whose END is in: the worker may close them
    try:
        while any(len(s.ended) < s.spec.world for s in states.values()) or work.waiting or work.held:
            progressed = pump_links(by_link, rx_done, work, dev, lambda job, rank, hdr, payload, m0, m1, peer: _handle(
                states[job], links, job, rank, hdr, payload, m0, m1, st, tr, peer, dev, work), st)
            stall.check(progressed or bool(work.held), lambda: "; ".join(
                f"job {j}: {s.incomplete()}" for j, s in states.items()))
            if not progressed:
                idle_wait(by_link, rx_done, work, dev)
        # The last updates leave before the links close.
        while any(ln.busy for _, ln in by_link):
            t0 = time.perf_counter()
            moved = any([ln.pump_send() for _, ln in by_link if ln.busy])
            st.send_s += time.perf_counter() - t0
            stall.check(moved, lambda: "the last updates to leave")
            if not moved:
                P.poll_links([ln for _, ln in by_link], 0.2)
    except NetError as e:
        detail = "; ".join(f"job {j}: {s.incomplete()}" for j, s in states.items())
        raise NetError(f"{e} [{detail}]") from None


def _handle(s: JobState, links, job: int, rank: int, hdr, payload, m0: float, m1: float, st: Stages,
            tr: "_CoreTrace | None", peer: str, dev: CoreDevice, work: Backlog) -> None:
    """Serve one message; its updates go to `work.held`, leaving when the core's
    modeled work on it ends (dev.busy_until)."""
    kind, hjob, it, ids = P.parse(hdr, peer)
    if hjob != job:
        raise ProtocolError(f"{peer} sent a message for job {hjob} on its job-{job} connection")
    st.messages_in += 1
    if kind == P.INIT:
        if rank != 0:
            raise ProtocolError(f"{peer} sent INIT; only rank 0 initializes the weights")
        s.init(ids, payload)
        return
    if kind == P.END:
        s.ended.add(rank)
        return
    if kind == P.TDF:
        if rank != 0 or payload.size != 1 or not payload[0] >= 1:
            raise ProtocolError(f"{peer} sent TDF {payload[:2].tolist()}; only rank 0 sends one value >= 1")
        dev.time_scale = float(payload[0])
        return
    if kind != P.PUSH:
        raise ProtocolError(f"{peer} sent {P.KINDS[kind]}, a server-to-worker message")
    dev.at_iteration(it)
    if tr:
        tr.recv(m0, m1, peer_rank=(job, rank), values=payload.size, it=it)
    c0 = time.perf_counter()
    done = s.push(rank, it, ids, payload, st)
    real = time.perf_counter() - c0
    hw = modeled_work_s(payload.size, sum(s.local[c].stop - s.local[c].start for c in done), s.v is not None,
                        s.reduce_bytes_per_s)
    dev.work(m1, c0, hw, real)
    node = tr.compute(c0, dev.busy_until, hw, real, it,
                      work={"chunks": len(ids), "completed": len(done), "values": int(payload.size)}) if tr else None
    if node is not None:          # its end: when the work's results leave
        work.held.append(lambda t1, n=node: tr.rec.nodes[n].__setitem__("t1", t1))
    if not done:
        return
    out = np.concatenate([s.w[s.local[c]] for c in done])
    h = P.header(P.UPDATE, job, it, done)

    def send(t0: float) -> None:
        for r in range(s.spec.world):
            cb = tr.send(t0, (job, r), out.size, it) if tr else None
            links[(job, r)].queue(h, out, cb)
            st.messages_out += 1
        st.send_s += time.perf_counter() - t0
    work.held.append(send)


class _CoreTrace:
    """One core's trace nodes (merged into the server's trace by the parent); nodes of
    iterations before `trace_from` (calibration) are not recorded."""

    def __init__(self, nodes: list[dict[str, Any]], host: str, core: int, trace_from: int = 0,
                 tag_core: int | None = None):
        self.rec = TraceRecorder(None, host=host, rank=0, world=1, tdf=1.0)
        self.rec.nodes = nodes
        self.core, self.trace_from = core, trace_from
        # the messages' tags name the core the workers address (a shard: its index)
        self.tag_core = core if tag_core is None else tag_core

    def _peer(self, job_rank: tuple[int, int]) -> str:
        return _worker_names[job_rank]

    def recv(self, t0, t1, *, peer_rank, values, it) -> None:
        if it < self.trace_from:
            return
        n = self.rec.recv(t0, t1, peer=self._peer(peer_rank), values=values,
                          tag=P.message_tag("push", peer_rank[0], self.tag_core), iteration=it, core=self.core)
        self.rec.waited(n)

    def compute(self, t0, t1, hw_s, real_s, it, work) -> int | None:
        if it < self.trace_from:
            return None
        n = self.rec.compute(t0, t1, hw_s, real_s, dict(work, core=self.core, step="aggregate+optimize"))
        self.rec.nodes[n]["core"] = self.core     # every node names its core (header `cores`)
        return n

    def send(self, t0, peer_rank, values, it):
        if it < self.trace_from:
            return None
        n = self.rec.send(t0, None, peer=self._peer(peer_rank), values=values,
                          tag=P.message_tag("update", peer_rank[0], self.tag_core), iteration=it, core=self.core)
        return lambda t1: self.rec.done(n, t1)


_worker_names: dict[tuple[int, int], str] = {}


def numpy_sum_reference(values: int, world: int, repeats: int = 3) -> dict[str, Any]:
    """A plain numpy sum of `world` arrays of `values` float32 (what one iteration's
    aggregation on this core adds), timed here: the same bytes, one big op each."""
    if values == 0:
        return {"numpy_gbps": None}
    arrs = [np.full(values, r + 1, np.float32) for r in range(world)]
    acc = np.empty(values, np.float32)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(acc, arrs[0])
        for a in arrs[1:]:
            acc += a
        best = min(best, time.perf_counter() - t0)
    return {"numpy_gbps": values * 4 * world / best / 1e9, "numpy_bytes": values * 4 * world}


def _core_main(core: int, cfg: ServerConfig, trace_on: bool, q) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    try:
        q.put(serve_core(core, cfg, trace_on))
    except (NetError, OSError) as e:
        q.put({"type": "core", "core": core, "error": f"{type(e).__name__}: {e}"})
    except Exception as e:  # noqa: BLE001 - any failure is reported to the parent, which fails the run
        q.put({"type": "core", "core": core, "error": f"{type(e).__name__}: {e}"})


def run(cfg: ServerConfig, writer: JsonlWriter) -> list[dict[str, Any]]:
    """Fork the core processes and wait for all; NetError names the first failure
    (the other cores are stopped: nothing is left behind)."""
    for j in cfg.jobs:
        for r, name in enumerate(j.workers):
            _worker_names[(j.job, r)] = name
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_core_main, args=(c, cfg, bool(cfg.trace), q), name=f"phub-core-{c}")
             for c in range(cfg.cores)]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    error = None
    try:
        while len(results) < len(procs):
            try:
                r = q.get(timeout=1.0)
            except Exception:  # noqa: BLE001 - queue.Empty: check for cores that died silently
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead and q.empty():
                    raise NetError(f"server core process {dead[0].name} died (exit {dead[0].exitcode}) "
                                   "without a report") from None
                continue
            results.append(r)
            if r.get("error"):
                # One dead worker closes every core's link to it, and cores then close
                # theirs: the others' reports (up to 3 s) name the first cause too.
                end = time.monotonic() + 3.0
                while len(results) < len(procs) and time.monotonic() < end:
                    try:
                        results.append(q.get(timeout=max(0.05, end - time.monotonic())))
                    except Exception:  # noqa: BLE001 - queue.Empty
                        break
                error = "; ".join(f"core {x['core']}: {x['error']}" for x in sorted(results, key=lambda x: x["core"])
                                  if x.get("error"))
                break
    finally:
        for p in procs:
            if error is not None and p.is_alive():
                p.terminate()          # our own children: the failed run stops here
            p.join(10)
    if error is not None:
        raise NetError(error)
    results.sort(key=lambda r: r["core"])
    return results


def write_trace(cfg: ServerConfig, cores: list[dict[str, Any]]) -> None:
    tdf = cores[0].get("tdf") or cfg.tdf          # the TDF rank 0 sent last (every core got each one)
    rec = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.trace_rank, world=cfg.trace_world, tdf=tdf,
                        workload="phub", role="server", reply_after="all", cores=cfg.cores,
                        **({"nic": cfg.nic} if cfg.nic else {}),
                        device={"kind": "phub server core", "bytes_per_s": cfg.reduce_bytes_per_s,
                                "message_s": CORE_MESSAGE_S})
    rec.nodes = merge_cores({c["core"]: c.pop("nodes") for c in cores})
    rec.close()


def merge_cores(nodes_by_core: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The cores' nodes as one trace, merged by start time (each core's own order
    kept; ids and deps renumbered). Every node names its core and the header says
    `cores`: the projector replays each core as its own program and the service
    model gives each core its own queue (testbed/fidelity/server_model.py)."""
    streams = [[(core, n) for n in nodes] for core, nodes in sorted(nodes_by_core.items())]
    out: list[dict[str, Any]] = []
    new_id: dict[tuple[int, int], int] = {}
    for core, n in heapq.merge(*streams, key=lambda cn: cn[1]["t0"]):
        new_id[(core, n["id"])] = len(out)
        out.append(dict(n, id=len(out), deps=[new_id[(core, d)] for d in n["deps"]]))
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, writer, log_ = program.start("phub.server", __doc__, _Loader, argv)
    except program.SetupFailed as e:
        return e.code
    start_gate.begin(cfg.start_at, cfg.host)
    error, cores = None, []
    try:
        cores = run(cfg, writer)
        if cfg.trace:
            write_trace(cfg, cores)
        for c in cores:
            c.pop("nodes", None)
            writer.write(c)
        return 0
    except (NetError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        log_.error("%s", error)
        return program.EXIT_NET
    finally:
        writer.write({"type": "summary", "host": cfg.host, "role": "server", "ok": error is None, "error": error,
                      "cores": cfg.cores, "jobs": [j.job for j in cfg.jobs],
                      **({"shard": cfg.shard, "shards": cfg.shards} if cfg.shards else {}),
                      "aggregation_order": cfg.aggregation_order})
        writer.close()


class _Loader:
    from_json = staticmethod(load_server)


if __name__ == "__main__":
    sys.exit(main())
