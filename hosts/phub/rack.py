"""Cross-rack PHub: one PHub server per rack (tree topology), chunks sharded over the
racks' servers (chunk id mod racks owns the optimizer step), the racks exchanging
partial sums (the SoCC'18 version's hierarchical cross-rack exchange,
research/seeds.md §5.2 item 7).

    python -m hosts.phub.rack --config w1.config.json

Each worker pushes every chunk to its own rack's server (one connection, one
"core"): the bytes of N pushes and N updates no longer cross the spine, only
one partial sum and one update per rack and chunk do.

The partial sums travel as a chain, so the sum is the single server's (and the
plain PS's) bit for bit: rack 0's server sums its workers' copies in rank order
and sends the running sum (PREFIX) to rack 1's server, which continues it with
its own ranks, ... (racks hold contiguous ranks). Float addition is not
associative: racks that summed locally and then added the racks' sums would
give other bits. The last rack has the complete sum and sends it (SUM) to the
chunk's owner rack, which runs the optimizer on it and sends the new weights to
its workers (UPDATE) and to every other rack's server (XUPDATE), which forward
them to theirs. The price of exactness: a chunk's sum crosses the racks one
after another, not all at once.

Time: each handled PUSH / PREFIX / SUM is the modeled core's work
(server.modeled_work_s: its values summed, the owner's optimizer bytes), paced
at the TDF like a PHub server core (server.CoreDevice). Rank 0's rack server
forwards the starting weights of other racks' chunks (INIT) and the TDF.

Output: `core` (one per rack server, `core` = rack; stages as server.py's) and a
`summary`; with a trace path, the server's trace (role "server"): its messages
with the workers (tags push/update as the one-rack server's core 0) and the
other rack servers (prefix, sum, xupdate), and a compute node per handled
message. Messages before `trace_from` (calibration) are not traced.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

import numpy as np

from hosts.collectives import check_hello, make_hello
from hosts.common import program, start_gate
from hosts.common.tcp import (Conn, NetError, ProtocolError, accept_until, connect_with_retry, listen, recv_json,
                              send_json)
from hosts.common.trace import TraceRecorder
from hosts.phub import protocol as P
from hosts.phub.chunking import ChunkPlan
from hosts.phub.config import JobSpec, RackServerConfig, load_rack
from hosts.phub.server import (CORE_MESSAGE_S, Backlog, CoreDevice, Stages, accept_links, idle_wait,
                               modeled_work_s, numpy_sum_reference, pump_links)

log = logging.getLogger("phub.rack")

RACK_PORT_OFFSET = 70        # the rack servers' own port: above the cores' (port + core), below the ring's (+80)
WORKERS = -1                 # an action's destination: this rack's workers

TRACED = (P.PUSH, P.UPDATE, P.PREFIX, P.SUM, P.XUPDATE)     # INIT, TDF, END are set-up and teardown
Action = tuple[int, int, int, list[int], np.ndarray]     # (rack or WORKERS, kind, iteration, chunk ids, payload)


class RackState:
    """One rack server's chunks: the chained rank-order sum and, for the chunks it
    owns, weights, momentum and the optimizer. Pure (no I/O): every handler returns
    the messages to send (module docstring)."""

    def __init__(self, spec: JobSpec, rack: int, racks: int, ranks: range):
        self.spec, self.rack, self.racks, self.ranks = spec, rack, racks, ranks
        self.plan = ChunkPlan(spec.sizes, spec.chunk_bytes)
        starts = np.cumsum([0, *spec.sizes])
        self.sl = [slice(int(starts[c.key]) + c.offset, int(starts[c.key]) + c.offset + c.length)
                   for c in self.plan.chunks]
        total = int(starts[-1])
        self.acc = np.zeros(total, np.float32)
        self.w = np.zeros(total, np.float32)
        self.v = np.zeros(total, np.float32) if spec.optimizer.has_state else None
        n = self.plan.n_chunks
        # positions of a chunk's chain here: the previous rack's running sum (racks > 0), then our ranks
        self.first = 1 if rack > 0 else 0
        self.n_pos = self.first + len(ranks)
        self.next_pos = [0] * n
        self.round = [0] * n
        self.early: list[dict[int, np.ndarray]] = [{} for _ in range(n)]
        self.initialized = np.zeros(n, bool)
        self.pending: dict[int, tuple[int, np.ndarray]] = {}     # chunk -> (iteration, sum) awaiting INIT
        self.summed_values = self.optimized_values = self.optimized_chunks = 0

    def owner(self, cid: int) -> int:
        return cid % self.racks

    # -- handlers --------------------------------------------------------------
    def push(self, rank: int, it: int, ids, payload: np.ndarray) -> list[Action]:
        if rank not in self.ranks:
            raise ProtocolError(f"rank {rank} pushed to rack {self.rack}, which serves ranks {self.ranks}")
        return self._contribute(self.first + rank - self.ranks.start, it, ids, payload)

    def prefix(self, it: int, ids, payload: np.ndarray) -> list[Action]:
        if self.rack == 0:
            raise ProtocolError("rack 0 got a PREFIX: the chain starts there")
        return self._contribute(0, it, ids, payload)

    def complete_sum(self, it: int, ids, payload: np.ndarray) -> list[Action]:
        """SUM: the complete sum of chunks this rack owns, from the last rack."""
        return self._optimize(it, [int(c) for c in ids], self._parts(ids, payload))

    def xupdate(self, it: int, ids, payload: np.ndarray) -> list[Action]:
        return [(WORKERS, P.UPDATE, it, [int(c) for c in ids], payload)]

    def init(self, ids, payload: np.ndarray) -> list[Action]:
        """Starting weights: ours are kept, the others' are forwarded to their owners."""
        out: dict[int, list[tuple[int, np.ndarray]]] = {}
        late: dict[int, list[tuple[int, np.ndarray]]] = {}
        for cid, data in zip([int(c) for c in ids], self._parts(ids, payload)):
            o = self.owner(cid)
            if o == self.rack:
                self.w[self.sl[cid]] = data
                self.initialized[cid] = True
                if cid in self.pending:               # its sum came first: optimize it now
                    it, gsum = self.pending.pop(cid)
                    late.setdefault(it, []).append((cid, gsum))
            else:
                out.setdefault(o, []).append((cid, data))
        actions = [(o, P.INIT, 0, [c for c, _ in items], np.concatenate([d for _, d in items]))
                   for o, items in sorted(out.items())]
        for it, items in sorted(late.items()):
            actions += self._optimize(it, [c for c, _ in items], [g for _, g in items])
        return actions

    # -- the chain -------------------------------------------------------------
    def _parts(self, ids, payload: np.ndarray) -> list[np.ndarray]:
        out, off = [], 0
        for cid in ids:
            n = self.sl[int(cid)].stop - self.sl[int(cid)].start
            out.append(payload[off:off + n])
            off += n
        if off != payload.size:
            raise ProtocolError(f"rack {self.rack}: payload of {payload.size} values for chunks holding {off}")
        return out

    def _contribute(self, pos: int, it: int, ids, payload: np.ndarray) -> list[Action]:
        done = []
        for cid, data in zip([int(c) for c in ids], self._parts(ids, payload)):
            if it != self.round[cid]:
                raise ProtocolError(f"rack {self.rack}: chunk {cid} got iteration {it}'s copy at position {pos}, "
                                    f"the chunk is at iteration {self.round[cid]}")
            if pos != self.next_pos[cid]:
                self.early[cid][pos] = data            # waits for the positions before it (rank order)
                continue
            self._add(cid, pos, data)
            while self.next_pos[cid] in self.early[cid]:
                self._add(cid, self.next_pos[cid], self.early[cid].pop(self.next_pos[cid]))
            if self.next_pos[cid] == self.n_pos:
                self.next_pos[cid] = 0
                self.round[cid] += 1
                done.append(cid)
        return self._chain_done(it, done) if done else []

    def _add(self, cid: int, pos: int, data: np.ndarray) -> None:
        sl = self.sl[cid]
        if pos == 0:
            np.copyto(self.acc[sl], data)
        else:
            self.acc[sl] += data
        self.next_pos[cid] = pos + 1
        self.summed_values += data.size

    def _chain_done(self, it: int, done: list[int]) -> list[Action]:
        if self.rack < self.racks - 1:          # the running sum goes on to the next rack
            return [(self.rack + 1, P.PREFIX, it, done, np.concatenate([self.acc[self.sl[c]] for c in done]))]
        out: list[Action] = []
        mine = [c for c in done if self.owner(c) == self.rack]
        for o in sorted({self.owner(c) for c in done} - {self.rack}):
            ids = [c for c in done if self.owner(c) == o]
            out.append((o, P.SUM, it, ids, np.concatenate([self.acc[self.sl[c]] for c in ids])))
        if mine:
            out += self._optimize(it, mine, [self.acc[self.sl[c]] for c in mine])
        return out

    def _optimize(self, it: int, ids: list[int], sums: list[np.ndarray]) -> list[Action]:
        """The owner's optimizer step on complete sums, then the new weights to every
        rack; a chunk whose starting weights (INIT, forwarded by rack 0) are not in
        yet waits for them (`pending`: the chain can outrun the forwarded INIT)."""
        from hosts.phub.optimizer import step  # noqa: PLC0415 - light
        ready = []
        for cid, gsum in zip(ids, sums):
            if self.owner(cid) != self.rack:
                raise ProtocolError(f"rack {self.rack} got the sum of chunk {cid}, owned by rack {self.owner(cid)}")
            if not self.initialized[cid]:
                if cid in self.pending:
                    raise ProtocolError(f"rack {self.rack}: chunk {cid} completed iteration {it} while iteration "
                                        f"{self.pending[cid][0]} still waits for its starting weights (INIT)")
                self.pending[cid] = (it, gsum.copy())
                continue
            ready.append(cid)
            sl = self.sl[cid]
            step(self.spec.optimizer, self.w[sl], None if self.v is None else self.v[sl], gsum, self.spec.world)
            self.optimized_values += sl.stop - sl.start
            self.optimized_chunks += 1
        if not ready:
            return []
        new = np.concatenate([self.w[self.sl[c]] for c in ready])
        return [(WORKERS, P.UPDATE, it, ready, new),
                *((r, P.XUPDATE, it, ready, new) for r in range(self.racks) if r != self.rack)]

    def incomplete(self) -> str:
        waiting = [(c, self.next_pos[c], sorted(self.early[c])) for c in range(len(self.next_pos))
                   if self.next_pos[c] or self.early[c]]
        if not waiting:
            return "no chunk in flight"
        c, nxt, early = waiting[0]
        what = "the previous rack's PREFIX" if nxt == 0 and self.first else f"rank {self.ranks.start + nxt - self.first}"
        return (f"{len(waiting)} chunk(s) in flight, e.g. chunk {c} at iteration {self.round[c]} waiting for "
                f"{what} (positions {early} already in)")


# -- the server process ----------------------------------------------------------
def connect_racks(cfg: RackServerConfig) -> dict[int, P.Link]:
    """A link to every other rack's server: connect to the higher racks, accept the
    lower ones (no two servers wait on each other)."""
    job = cfg.jobs[0]
    ident = dict(job.identity(1), racks=len(cfg.servers))
    mine = make_hello(cfg.host, cfg.rack, ident)
    lst = listen(cfg.ip, cfg.port + RACK_PORT_OFFSET)
    links: dict[int, P.Link] = {}
    try:
        for r in range(cfg.rack + 1, len(cfg.servers)):
            peer = f"rack {r} server {cfg.servers[r]['name']}"
            conn = connect_with_retry(cfg.servers[r]["ip"], cfg.port + RACK_PORT_OFFSET, peer=peer,
                                      connect_timeout_s=cfg.connect_timeout_s, io_timeout_s=cfg.timeout_s,
                                      src_ip=cfg.ip)
            links[r] = P.Link(conn)
            send_json(conn, mine)
            check_hello(recv_json(conn, timeout_s=cfg.connect_timeout_s + 5), mine=mine, peer=peer,
                        expected_rank=r)

        def handshake(conn: Conn, timeout_s: float) -> tuple[int | None, dict]:
            theirs = recv_json(conn, timeout_s=timeout_s)
            r = theirs.get("rank") if isinstance(theirs, dict) else None
            conn.peer = f"rack {r} server {theirs.get('host') if isinstance(theirs, dict) else '?'}"
            check_hello(theirs, mine=mine, peer=conn.peer)
            return r, mine

        lower = accept_until(lst, set(range(cfg.rack)), handshake, what="rack servers",
                             connect_timeout_s=cfg.connect_timeout_s, io_timeout_s=cfg.timeout_s)
        links.update((r, P.Link(conn)) for r, conn in lower.items())
    except BaseException:
        for ln in links.values():
            ln.conn.close()
        raise
    finally:
        lst.close()
    return links


class _Trace:
    """The rack server's trace (module docstring); nothing before `trace_from`."""

    def __init__(self, cfg: RackServerConfig):
        self.cfg, self.job = cfg, cfg.jobs[0]
        self.rec = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.trace_rank, world=cfg.trace_world,
                                 tdf=cfg.tdf, workload="phub", role="server", reply_after="all", rack=cfg.rack,
                                 device={"kind": "phub rack server core", "bytes_per_s": cfg.reduce_bytes_per_s,
                                         "message_s": CORE_MESSAGE_S})
        self.on = cfg.trace is not None

    def peer(self, dest: int, rank: int | None = None) -> str:
        return self.job.workers[rank] if dest == WORKERS else self.cfg.servers[dest]["name"]

    def tag(self, kind: int) -> str:
        j = self.job.job
        return {P.PUSH: P.message_tag("push", j, 0), P.UPDATE: P.message_tag("update", j, 0)}.get(
            kind, f"{P.KINDS[kind].lower()}.j{j}")

    def recv(self, kind, it, peer, values, t0, t1) -> None:
        if self.on and it >= self.cfg.trace_from:
            self.rec.waited(self.rec.recv(t0, t1, peer=peer, values=values, tag=self.tag(kind), iteration=it))

    def compute(self, it, t0, t1, hw, real, work) -> int | None:
        if self.on and it >= self.cfg.trace_from:
            return self.rec.compute(t0, t1, hw, real, work)
        return None

    def send(self, kind, it, peer, values, t0):
        if not self.on or it < self.cfg.trace_from or kind not in TRACED:
            return None
        n = self.rec.send(t0, None, peer=peer, values=values, tag=self.tag(kind), iteration=it)
        return lambda t1: self.rec.done(n, t1)


def serve(cfg: RackServerConfig) -> dict[str, Any]:
    """Serve this rack's workers and exchange with the other racks until all END."""
    job = cfg.jobs[0]
    ranks = range(*cfg.ranks)
    state = RackState(job, cfg.rack, len(cfg.servers), ranks)
    racks = connect_racks(cfg)
    workers = {r: ln for (_, r), ln in accept_links(cfg, 0, ranks).items()}
    st, tr, dev = Stages(), _Trace(cfg), CoreDevice(cfg.tdf, cfg.trace_from)
    stall = P.Stall(cfg.timeout_s)
    ended: set[int] = set()                 # our workers that sent END
    racks_ended: set[int] = set()           # rack servers whose END came in
    sent_end = False
    t_start = time.perf_counter()

    def emit(actions: list[Action], t0: float | None = None) -> None:
        t0 = time.perf_counter() if t0 is None else t0
        for dest, kind, it, ids, payload in actions:
            h = P.header(kind, job.job, it, ids)
            for r, ln in (workers.items() if dest == WORKERS else [(None, racks[dest])]):
                ln.queue(h, payload, tr.send(kind, it, tr.peer(dest, r), payload.size, t0))
                st.messages_out += 1
        st.send_s += time.perf_counter() - t0

    def handle(src: int | None, rank: int | None, hdr, payload, m0: float, m1: float, peer: str) -> None:
        kind, hjob, it, ids = P.parse(hdr, peer)
        if hjob != job.job:
            raise ProtocolError(f"{peer} sent a message for job {hjob}; this server runs job {job.job}")
        st.messages_in += 1
        if kind == P.END:
            (ended if src is None else racks_ended).add(rank if src is None else src)
            return
        if kind == P.TDF:
            if not (src == 0 or rank == 0) or payload.size != 1 or not payload[0] >= 1:
                raise ProtocolError(f"{peer} sent TDF {payload[:2].tolist()}; rank 0 (or rack 0) sends one value >= 1")
            dev.time_scale = float(payload[0])
            if rank == 0:
                emit([(r, P.TDF, 0, [], payload) for r in racks])
            return
        if kind == P.INIT:
            if not (rank == 0 or (src is not None and src == 0)):
                raise ProtocolError(f"{peer} sent INIT; only rank 0 (through its rack's server) initializes")
            emit(state.init(ids, payload))
            return
        expected = {P.PUSH: src is None, P.PREFIX: src == cfg.rack - 1, P.SUM: src == len(cfg.servers) - 1,
                    P.XUPDATE: src is not None}
        if not expected.get(kind, False):
            raise ProtocolError(f"{peer} sent {P.KINDS[kind]} to rack {cfg.rack}'s server")
        dev.at_iteration(it)
        tr.recv(kind, it, tr.peer(WORKERS if src is None else src, rank), payload.size, m0, m1)
        c0 = time.perf_counter()
        s0, o0, k0 = state.summed_values, state.optimized_values, state.optimized_chunks
        if kind == P.PUSH:
            actions = state.push(rank, it, ids, payload)
        elif kind == P.PREFIX:
            actions = state.prefix(it, ids, payload)
        elif kind == P.SUM:
            actions = state.complete_sum(it, ids, payload)
        else:
            actions = state.xupdate(it, ids, payload)
        real = time.perf_counter() - c0
        summed, optimized = state.summed_values - s0, state.optimized_values - o0
        if kind == P.SUM:
            st.opt_s += real
        elif kind != P.XUPDATE:
            st.agg_s += real
            st.agg_bytes += 4 * summed
        hw = modeled_work_s(summed, optimized, state.v is not None, cfg.reduce_bytes_per_s)
        dev.work(m1, c0, hw, real)        # paced by a deadline (server.CoreDevice): results leave at its end
        node = tr.compute(it, c0, dev.busy_until, hw, real,
                          {"kind": P.KINDS[kind], "chunks": len(ids), "values": int(payload.size),
                           "summed": summed, "optimized": optimized, "core": 0, "step": "rack"})
        st.chunks_done += state.optimized_chunks - k0
        if node is not None:
            work.held.append(lambda t1, n=node: tr.rec.nodes[n].__setitem__("t1", t1))
        if actions:
            work.held.append(lambda t0, a=actions: emit(a, t0))

    links = [((None, r), ln) for r, ln in workers.items()] + [((s, None), ln) for s, ln in racks.items()]
    work = Backlog()
    rx_done: set[tuple[int | None, int | None]] = set()     # links whose END is in (the peer may close)
    try:
        while True:
            progressed = pump_links(links, rx_done, work, dev, handle, st)
            busy = any(ln.busy for _, ln in links) or work.waiting or work.held
            if len(ended) == len(ranks) and not sent_end and not busy:
                emit([(r, P.END, 0, [], np.zeros(0, np.float32)) for r in racks])   # our last message to each
                sent_end, progressed = True, True
                continue
            if sent_end and len(racks_ended) == len(racks) and not busy:
                break
            stall.check(progressed or bool(work.held), lambda: state.incomplete() + (
                f"; END from racks {sorted(set(racks) - racks_ended)}" if sent_end else ""))
            if not progressed:
                idle_wait(links, rx_done, work, dev)
    except NetError as e:
        raise NetError(f"{e} [rack {cfg.rack}: {state.incomplete()}]") from None
    finally:
        for _, ln in links:
            ln.conn.close()
    wall = time.perf_counter() - t_start
    tr.rec.set_tdf(dev.time_scale)
    tr.rec.close()
    return {"type": "core", "core": cfg.rack, "rack": cfg.rack, "wall_s": wall, **st.__dict__,
            "idle_s": max(0.0, wall - st.recv_s - st.agg_s - st.opt_s - st.send_s),
            "bytes_in": sum(ln.bytes_in for _, ln in links), "bytes_out": sum(ln.bytes_out for _, ln in links),
            "agg_gbps": st.agg_bytes / st.agg_s / 1e9 if st.agg_s else None, "tdf": dev.time_scale,
            "device": dev.validity(), **numpy_sum_reference(state.acc.size, len(ranks))}


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, writer, log_ = program.start("phub.rack", __doc__, _Loader, argv)
    except program.SetupFailed as e:
        return e.code
    start_gate.begin(cfg.start_at, cfg.host)
    error = None
    try:
        writer.write(serve(cfg))
        return 0
    except (NetError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        log_.error("%s", error)
        return program.EXIT_NET
    finally:
        writer.write({"type": "summary", "host": cfg.host, "role": "server", "rack": cfg.rack,
                      "ok": error is None, "error": error, "cores": 1, "jobs": [j.job for j in cfg.jobs],
                      "aggregation_order": "rank"})       # the chain is a rank-order sum (docstring)
        writer.close()


class _Loader:
    from_json = staticmethod(load_rack)


if __name__ == "__main__":
    sys.exit(main())
