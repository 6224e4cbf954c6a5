"""Worker side of PHub: one connection per server core, driven by a background
thread, so gradient chunks leave while backpropagation goes on and updated
weights land while the next forward pass runs.

push(key, grad, it) cuts a layer's gradient into its chunks and queues one PUSH
per owning core (a batch of that layer's chunks per core: one message, not one
per chunk); UPDATE messages are written straight into the worker's weights
(`weights[key]`, flat float32 views of the model's own tensors). wait_key(key, it)
blocks until every chunk of `key` holds the weights after iteration it - 1.

Messages of iterations before `trace_from` (time_scale auto's calibration
iterations) are not traced: the trace is the measured run. `spans(its)` gives
calibration what it measures: per iteration, from the push of the first key to
the arrival of its last updated chunk.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Sequence

import numpy as np

from hosts.collectives import check_hello, make_hello
from hosts.common.config import HostAddr
from hosts.common.tcp import NetError, connect_with_retry, recv_json, send_json
from hosts.phub import protocol as P
from hosts.phub.config import JobSpec


class PHubClient:
    def __init__(self, links: list[P.Link], job: JobSpec, cores: int, rank: int,
                 weights: Sequence[np.ndarray], server_name: str | list[str], trace: Any = None,
                 timeout_s: float = 60.0,
                 trace_from: int = 0):
        self.links, self.job, self.cores, self.rank = links, job, cores, rank
        self.plan = job.plan(cores)
        self.weights = list(weights)
        # the peer each core's messages name in the trace: the server, or (shards) each server
        self.peers = list(server_name) if isinstance(server_name, list) else [server_name] * cores
        self.server_name = server_name if isinstance(server_name, str) else "kvstore servers " + ", ".join(server_name)
        self.trace, self.timeout_s = trace, timeout_s
        self.trace_from = trace_from
        # calibration's measurements: (iteration, key) -> push time, last update's arrival
        self._pushed_at: dict[tuple[int, int], float] = {}
        self._done_at: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()               # guards the trace and the outbox
        self._cond = threading.Condition()
        self._outbox: list[tuple[int, np.ndarray, np.ndarray, Any]] = []
        # per key: chunks updated in the current round, and the last complete iteration
        self._got = [0] * len(job.sizes)
        self._done_it = [-1] * len(job.sizes)
        self._recv_nodes: list[list[int]] = [[] for _ in job.sizes]
        self.error: str | None = None
        self._stop = False
        self._ended: set[int] = set()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, name="phub-io", daemon=True)

    @classmethod
    def connect(cls, *, server: HostAddr | None, port: int, cores: int, job: JobSpec, host: str, my_ip: str,
                rank: int, weights, trace=None, connect_timeout_s: float, timeout_s: float,
                trace_from: int = 0, shards: Sequence[HostAddr] | None = None) -> "PHubClient":
        """Core c of `server` listens on port + c; with `shards` (sharded_ps: one
        single-core server per host, MXNet kvstore's servers) server c is shards[c],
        listening on port + c."""
        if (server is None) == (shards is None) or (shards is not None and len(shards) != cores):
            raise ValueError(f"give one server or {cores} shards, got server {server} and shards {shards}")
        hello = make_hello(host, rank, job.identity(cores))
        links: list[P.Link] = []
        try:
            for c in range(cores):
                at = server if shards is None else shards[c]
                name = f"PHub server {at.name} core {c}" if shards is None else f"kvstore server {at.name}"
                conn = connect_with_retry(at.ip, port + c, peer=name, connect_timeout_s=connect_timeout_s,
                                          io_timeout_s=timeout_s, src_ip=my_ip)
                links.append(P.Link(conn))
                send_json(conn, hello)
                check_hello(recv_json(conn, timeout_s=connect_timeout_s + 5), mine=hello, peer=name)
        except BaseException:
            for ln in links:
                ln.conn.close()
            raise
        cl = cls(links, job, cores, rank, weights, server.name if shards is None else [s.name for s in shards],
                 trace, timeout_s, trace_from)
        cl._thread.start()
        return cl

    # -- called by the training loop (main thread) ---------------------------------
    def init_weights(self) -> None:
        """Rank 0 sends the starting weights of each core's chunks (the server's model)."""
        for c in range(self.cores):
            ids = self.plan.owned(c, self.cores)
            payload = np.concatenate([self._chunk_view(cid) for cid in ids]) if ids else np.zeros(0, np.float32)
            self._post(c, P.header(P.INIT, self.job.job, 0, ids), payload.astype(np.float32, copy=False), None)

    def send_tdf(self, tdf: float) -> None:
        """Rank 0: every core paces its modeled work at this TDF from now on."""
        for c in range(self.cores):
            self._post(c, P.header(P.TDF, self.job.job, 0, []), np.array([tdf], np.float32), None)

    def spans(self, its: Sequence[int]) -> list[tuple[float, float, int]]:
        """(push, last update in, values) of the first key pushed in each iteration of
        `its` (the last layer: backward's first gradient). It is the one exchange that
        meets an idle server and network: later keys queue behind it, which hardware
        would do too but the exchange's modeled time (one key alone) does not have."""
        out = []
        k = len(self.job.sizes) - 1
        with self._cond:
            for it in its:
                if (it, k) in self._done_at and (it, k) in self._pushed_at:
                    out.append((self._pushed_at[(it, k)], self._done_at[(it, k)], self.job.sizes[k]))
        return out

    def push(self, key: int, grad: np.ndarray, it: int) -> None:
        parts: dict[int, list[tuple[int, np.ndarray]]] = {}
        for cid, view in self.plan.split(key, np.ascontiguousarray(grad, np.float32).reshape(-1)):
            parts.setdefault(self.plan.owner_of(cid, self.cores), []).append((cid, view))
        t0 = time.perf_counter()
        with self._cond:
            self._pushed_at[(it, key)] = t0
        for c, items in parts.items():
            payload = np.concatenate([v for _, v in items])      # a copy: the grad buffer gets reused
            node = None
            if self.trace is not None and it >= self.trace_from:
                with self._lock:
                    node = self.trace.send(t0, None, peer=self.peers[c], values=payload.size,
                                           tag=P.message_tag("push", self.job.job, c), iteration=it, key=key)
            self._post(c, P.header(P.PUSH, self.job.job, it, [cid for cid, _ in items]), payload, node)

    def wait_key(self, key: int, it: int) -> list[int]:
        """Block until key's weights are those after iteration `it` (all chunks updated);
        the trace's recv nodes of that key's updates (the caller waited for them)."""
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while self._done_it[key] < it:
                if self.error:
                    raise NetError(self.error)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NetError(f"no update of key {key} (iteration {it}) from {self.server_name} "
                                   f"for {self.timeout_s:g} s")
                self._cond.wait(min(left, 0.5))
            nodes, self._recv_nodes[key] = self._recv_nodes[key], []
        return nodes

    def close(self) -> None:
        """END to every core; the thread stops once it is out (errors raise here)."""
        if self.error is None:
            for c in range(self.cores):
                self._post(c, P.header(P.END, self.job.job, 0, []), None, ("end", c))
            with self._cond:
                self._stop = True
            os.write(self._wake_w, b"x")
            self._thread.join(self.timeout_s + 5)
        for ln in self.links:
            ln.conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self.error:
            raise NetError(self.error)

    # -- the I/O thread ----------------------------------------------------------
    def _chunk_view(self, cid: int) -> np.ndarray:
        c = self.plan.chunks[cid]
        return self.weights[c.key][c.offset:c.offset + c.length]

    def _post(self, core: int, hdr, payload, node) -> None:
        with self._lock:
            self._outbox.append((core, hdr, payload, node))
        os.write(self._wake_w, b"x")

    def _loop(self) -> None:
        stall = P.Stall(self.timeout_s)
        try:
            while True:
                with self._lock:
                    box, self._outbox = self._outbox, []
                for core, hdr, payload, node in box:
                    self.links[core].queue(hdr, payload, self._sent_cb(node))
                progressed = bool(box)
                for c, ln in enumerate(self.links):
                    if ln.busy:
                        progressed |= ln.pump_send()
                    if c in self._ended:
                        continue
                    for hdr, payload, t0, t1 in ln.pump_recv():
                        progressed = True
                        self._apply(ln, hdr, payload, t0, t1)
                with self._cond:
                    stop = self._stop
                if stop and not any(ln.busy for ln in self.links) and not self._outbox:
                    return
                waiting = any(d < 0 for d in self._done_it) or any(ln.busy for ln in self.links)
                if waiting:
                    stall.check(progressed, lambda: f"updates or sends to {self.server_name}")
                else:
                    stall.check(True, str)
                if not progressed:
                    P.poll_links([ln for c, ln in enumerate(self.links) if c not in self._ended or ln.busy],
                                 0.2, self._wake_r)
        except (NetError, OSError) as e:
            with self._cond:
                self.error = f"{type(e).__name__}: {e}"
                self._cond.notify_all()

    def _sent_cb(self, node):
        if isinstance(node, tuple):             # END is out: the core may close this link now
            return lambda t1, c=node[1]: self._ended.add(c)
        if node is None or self.trace is None:
            return None

        def done(t1: float) -> None:
            with self._lock:
                self.trace.done(node, t1)
        return done

    def _apply(self, ln: P.Link, hdr, payload, t0: float, t1: float) -> None:
        kind, job, it, ids = P.parse(hdr, ln.conn.peer)
        if kind != P.UPDATE or job != self.job.job:
            raise NetError(f"{ln.conn.peer} sent {P.KINDS[kind]} for job {job}; expected UPDATE for job "
                           f"{self.job.job}")
        off = 0
        keys: dict[int, int] = {}
        for cid in ids.tolist():
            view = self._chunk_view(cid)
            view[:] = payload[off:off + view.size]
            off += view.size
            k = self.plan.chunks[cid].key
            keys[k] = keys.get(k, 0) + 1
        node = None
        if self.trace is not None and it >= self.trace_from:
            core = self.links.index(ln)
            with self._lock:
                node = self.trace.recv(t0, t1, peer=self.peers[core], values=payload.size,
                                       tag=P.message_tag("update", self.job.job, core), iteration=it)
        with self._cond:
            for k, n in keys.items():
                self._got[k] += n
                if node is not None:
                    self._recv_nodes[k].append(node)
                if self._got[k] == len(self.plan.key_chunks[k]):
                    self._got[k] = 0
                    self._done_it[k] = it
                    self._done_at[(it, k)] = t1
            self._cond.notify_all()
