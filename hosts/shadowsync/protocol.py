"""What trainers and the ShadowSync servers say to each other, on TCP
(hosts/common/tcp.py framing; a lost packet is retransmitted by the kernel, so
loss changes timing, never what is applied).

Every connection opens with HELLO both ways (make_hello / check_hello with the
run's Settings.identity()). Then requests, each one int64 header frame
[op, n] followed by its payload frames:
  LOOKUP  ids int64 (n x tables-on-this-server)  -> reply float32 rows (n x tables x dim)
  PUSH    ids int64, grads float32 (n x tables x dim); no reply (asynchronous):
          the server applies table[ids] -= lr_embed * grads
  ELASTIC w float32 (the dense replica)           -> reply d = alpha (w - w~)   (sync PS)
  AGREE   v float64 (n) -> reply the SUM of every trainer's v for this round (embedding
          PS 0 only; time_scale auto: the trainers' calibration agreement,
          hosts.common.calibration.encode_messages/decide_messages; trainers
          without an allreduce have no other channel)
  MEASURE n = 0: calibration is over for this client; the server traces its messages
          from here on (its trace, like the client's, is the measured run only)
  UNTRACE n = 0: the server stops tracing this client (the shadow's trace ends after
          its first syncs, hosts/shadowsync/trainer.py SHADOW_TRACED_SYNCS_PER_ITER)
  END     n = number of PUSH requests this client sent (the server checks its count)
"""
from __future__ import annotations

import time

import numpy as np
import torch

from hosts.collectives import check_hello, make_hello
from hosts.common.tcp import Conn, NetError, connect_with_retry, recv_array, recv_json, send_array, send_json

LOOKUP, PUSH, ELASTIC, AGREE, MEASURE, UNTRACE, END = 1, 2, 3, 4, 5, 6, 0
OP_NAMES = {LOOKUP: "lookup", PUSH: "push", ELASTIC: "elastic", AGREE: "agree", MEASURE: "measure",
            UNTRACE: "untrace", END: "end"}

# Client names (the HELLO's `host`), one per connection so that a server's trace
# groups (p2p:<tag>:<client>><server>) match one client's trace. Traced: Hogwild
# worker 0 (the trainer's own name) and the shadow ("<host>-shadow", its own trace).
# Not traced: Hogwild workers 1.. ("<host>-h<j>") and the final eval ("<host>-eval"):
# only worker 0 writes a trace (docs/shadowsync.md, Time).
SHADOW_SUFFIX, EVAL_SUFFIX = "-shadow", "-eval"


def worker_client(host: str, j: int) -> str:
    return host if j == 0 else f"{host}-h{j}"


def shadow_client(host: str) -> str:
    return host + SHADOW_SUFFIX


def eval_client(host: str) -> str:
    return host + EVAL_SUFFIX


def trainer_of(client: str) -> str:
    """The trainer host a client name belongs to (push accounting is per trainer)."""
    return client.split("-", 1)[0]


def traced_client(client: str) -> bool:
    return "-" not in client or client.endswith(SHADOW_SUFFIX)


def header(op: int, n: int) -> np.ndarray:
    return np.array([op, n], np.int64)


def recv_header(conn: Conn) -> tuple[int, int]:
    h = recv_array(conn, np.empty(2, np.int64))
    op, n = int(h[0]), int(h[1])
    if op not in OP_NAMES:
        raise NetError(f"{conn.peer} sent unknown op {op}")
    return op, n


def open_link(ip: str, port: int, *, peer: str, me: str, my_ip: str, rank: int, ident: dict,
              connect_timeout_s: float, timeout_s: float) -> Conn:
    conn = connect_with_retry(ip, port, peer=peer, connect_timeout_s=connect_timeout_s,
                              io_timeout_s=timeout_s, src_ip=my_ip)
    hello = make_hello(me, rank, ident)
    send_json(conn, hello)
    check_hello(recv_json(conn, timeout_s=connect_timeout_s + 5), mine=hello, peer=peer)
    return conn


class EmbeddingClient:
    """One worker's connections to every embedding PS (tables sharded table-wise)."""

    def __init__(self, settings, servers, port: int, *, me: str, my_ip: str, rank: int,
                 connect_timeout_s: float, timeout_s: float, trace=None):
        self.s = settings
        self.dim = settings.model["dim"]
        self.servers = servers
        self.tables = [settings.tables_of(e) for e in range(len(servers))]
        ident = settings.identity()
        self.conns = [open_link(h.ip, port, peer=f"embedding PS {h.name}", me=me, my_ip=my_ip, rank=rank,
                                ident=ident, connect_timeout_s=connect_timeout_s, timeout_s=timeout_s)
                      for h in servers]
        self.pushes = 0          # PUSH requests sent (over all servers)
        self.rows_pushed = 0
        self.lookups = 0
        self.trace = trace
        self.spans: list[tuple[float, float]] | None = None   # calibration: (submit, done) per LOOKUP

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """B x T ids -> B x T x dim rows (the servers' current values)."""
        b = ids.shape[0]
        out = torch.empty(b, ids.shape[1], self.dim)
        for conn, tables, h in zip(self.conns, self.tables, self.servers):
            mine = ids[:, tables].contiguous().numpy()
            t0 = time.perf_counter()
            send_array(conn, header(LOOKUP, b))
            send_array(conn, mine.reshape(-1))
            t1 = time.perf_counter()
            rows = recv_array(conn, np.empty(b * len(tables) * self.dim, np.float32))
            t2 = time.perf_counter()
            if self.spans is not None:
                self.spans.append((t0, t2))
            if self.trace is not None:
                self.trace.send(t0, t1, peer=h.name, values=mine.size, value_bytes=8, tag="lookup")
                self.trace.waited(self.trace.recv(t1, t2, peer=h.name, values=rows.size, tag="rows"))
            out[:, tables, :] = torch.from_numpy(rows).view(b, len(tables), self.dim)
            self.lookups += 1
        return out

    def push(self, ids: torch.Tensor, grads: torch.Tensor) -> None:
        """Sparse gradients of the looked-up rows (B x T x dim), fire and forget."""
        b = ids.shape[0]
        for conn, tables, h in zip(self.conns, self.tables, self.servers):
            g = grads[:, tables, :].contiguous().numpy().astype(np.float32, copy=False)
            t0 = time.perf_counter()
            send_array(conn, header(PUSH, b))
            send_array(conn, ids[:, tables].contiguous().numpy().reshape(-1))
            send_array(conn, g.reshape(-1))
            if self.trace is not None:
                self.trace.send(t0, time.perf_counter(), peer=h.name, values=g.size, tag="push")
            self.pushes += 1
            self.rows_pushed += b * len(tables)

    def measure(self) -> None:
        for conn in self.conns:
            send_array(conn, header(MEASURE, 0))

    def agree(self, v: np.ndarray) -> np.ndarray:
        """The SUM of every trainer's `v` (AGREE on embedding PS 0): calibration's agreement."""
        v = np.ascontiguousarray(v, dtype=np.float64)
        send_array(self.conns[0], header(AGREE, v.size))
        send_array(self.conns[0], v)
        return recv_array(self.conns[0], np.empty(v.size, np.float64))

    def close(self) -> None:
        for conn in self.conns:
            try:
                send_array(conn, header(END, self.pushes_to(conn)))
            finally:
                conn.close()

    def pushes_to(self, conn: Conn) -> int:
        # every PUSH goes to every server, so each got the same count
        return self.pushes // len(self.conns)


class SyncLink:
    """A trainer's connection to the sync PS (S-/FR-EASGD)."""

    def __init__(self, settings, sync_ps, port: int, *, me: str, my_ip: str, rank: int,
                 connect_timeout_s: float, timeout_s: float):
        self.peer = sync_ps.name
        self.conn = open_link(sync_ps.ip, port, peer=f"sync PS {sync_ps.name}", me=me, my_ip=my_ip,
                              rank=rank, ident=settings.identity(), connect_timeout_s=connect_timeout_s,
                              timeout_s=timeout_s)
        self.count = 0

    def measure(self) -> None:
        send_array(self.conn, header(MEASURE, 0))

    def untrace(self) -> None:
        send_array(self.conn, header(UNTRACE, 0))

    def elastic(self, w: np.ndarray) -> np.ndarray:
        send_array(self.conn, header(ELASTIC, w.size))
        send_array(self.conn, w)
        d = recv_array(self.conn, np.empty(w.size, np.float32))
        self.count += 1
        return d

    def close(self) -> None:
        try:
            send_array(self.conn, header(END, self.count))
        finally:
            self.conn.close()
