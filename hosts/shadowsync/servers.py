"""The ShadowSync servers: embedding parameter servers and the sync PS.

    python -m hosts.shadowsync.servers --role embedding_ps --config emb1.config.json
    python -m hosts.shadowsync.servers --role sync_ps --config syncps.config.json

Both accept `clients` connections (HELLO checked against the run's settings),
then serve each connection in its own thread (the work is I/O and torch
kernels, which release the interpreter lock; see docs/shadowsync.md).

Embedding PS e holds the tables t with t mod E == e, serves LOOKUP (the rows'
current values) and applies every PUSH as it arrives: table[ids] -=
lr_embed * grads, Hogwild-style (index_add_, no lock, shared by all trainers).
It counts every request; at END the client says how many PUSHes it sent and the
server records whether its own count agrees.

The sync PS holds the centre w~ of S-/FR-EASGD and answers ELASTIC: d = alpha
(w - w~), w~ += d, reply d (rules.s_easgd).

Output: one `server` record per connection (counts, busy time) and a `summary`;
a trace with role "server" (p2p recv/send nodes per message).
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from typing import Any

import numpy as np
import torch

from hosts.collectives import check_hello, make_hello
from hosts.common import program
from hosts.common.results import JsonlWriter
from hosts.common.tcp import Conn, NetError, accept_one, listen, recv_array, recv_json, send_array, send_json
from hosts.common.trace import TraceRecorder
from hosts.shadowsync import protocol as P
from hosts.shadowsync import rules
from hosts.shadowsync.config import ConfigError, load
from hosts.shadowsync.replica import initial_flat, initial_table

log = logging.getLogger("shadowsync.server")


class Served:
    """One client connection's counters."""

    def __init__(self, host: str, rank: int):
        self.host, self.rank = host, rank
        self.c = {"lookups": 0, "pushes": 0, "rows_looked_up": 0, "rows_applied": 0, "elastic": 0,
                  "bytes_in": 0, "bytes_out": 0, "busy_s": 0.0}
        self.client_pushes: int | None = None
        self.measuring = True            # False until MEASURE while the trainers calibrate
        self.traced = True               # False after UNTRACE


class Agreement:
    """Rounds of a SUM over the trainers' vectors (AGREE): each trainer's call
    returns once every trainer sent its vector of that round."""

    def __init__(self, parties: int):
        self.parties = parties
        self.cv = threading.Condition()
        self.round, self.acc, self.got = 0, None, set()
        self.results: dict[int, np.ndarray] = {}

    def add(self, v: np.ndarray, who: str, timeout_s: float) -> np.ndarray:
        with self.cv:
            r = self.round
            if who in self.got:
                raise NetError(f"{who} sent two AGREE vectors in round {r}")
            if self.acc is not None and self.acc.size != v.size:
                raise NetError(f"{who} sent an AGREE vector of {v.size} values, others {self.acc.size}")
            self.acc = v.copy() if self.acc is None else self.acc + v
            self.got.add(who)
            if len(self.got) == self.parties:
                self.results[r], self.acc, self.got = self.acc, None, set()
                self.round += 1
                self.cv.notify_all()
            elif not self.cv.wait_for(lambda: r in self.results, timeout=timeout_s):
                raise NetError(f"AGREE round {r}: {len(self.got)} of {self.parties} trainers after {timeout_s} s")
            return self.results[r]


class Server:
    def __init__(self, role: str, cfg, s):
        self.role, self.cfg, self.s = role, cfg, s
        self.lock = threading.Lock()          # guards the trace recorder only, never the tables
        self.trace = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.rank, world=cfg.world, tdf=1.0,
                                   workload="shadowsync", role="server", server=role,
                                   # PUSH has no reply (the projector's service model must know)
                                   unanswered_tags=["push"] if role == "embedding_ps" else [])
        dim = s.model["dim"]
        self.agreement = Agreement(s.trainers)
        if role == "embedding_ps":
            self.tables = {t: initial_table(s.seed, t, s.model["table_sizes"][t], dim)
                           for t in s.tables_of(cfg.index)}
            self.order = sorted(self.tables)
        else:
            self.centre = initial_flat(s)

    # -- one connection ---------------------------------------------------------
    def serve(self, conn: Conn, st: Served) -> None:
        dim = self.s.model["dim"]
        while True:
            t_wait = time.perf_counter()
            op, n = P.recv_header(conn)
            t0 = time.perf_counter()
            if op in (P.MEASURE, P.UNTRACE):
                st.measuring, st.traced = True, op == P.MEASURE
                continue
            if op == P.END:
                st.client_pushes = n if self.role == "embedding_ps" else None
                return
            if op == P.LOOKUP:
                ids = torch.from_numpy(recv_array(conn, np.empty(n * len(self.order), np.int64))).view(n, -1)
                t1 = time.perf_counter()
                rows = torch.stack([self.tables[t][ids[:, j]] for j, t in enumerate(self.order)], dim=1)
                out = rows.numpy().reshape(-1)
                send_array(conn, out)
                st.c["lookups"] += 1
                st.c["rows_looked_up"] += n * len(self.order)
                st.c["bytes_in"] += ids.numel() * 8
                st.c["bytes_out"] += out.nbytes
                self._p2p(st, t_wait, t1, "lookup", ids.numel(), 8, out.size, "rows")
            elif op == P.PUSH:
                ids = torch.from_numpy(recv_array(conn, np.empty(n * len(self.order), np.int64))).view(n, -1)
                g = torch.from_numpy(recv_array(conn, np.empty(n * len(self.order) * dim, np.float32)))
                t1 = time.perf_counter()
                g = g.view(n, len(self.order), dim)
                for j, t in enumerate(self.order):
                    self.tables[t].index_add_(0, ids[:, j], g[:, j, :], alpha=-self.s.lr_embed)
                st.c["pushes"] += 1
                st.c["rows_applied"] += n * len(self.order)
                st.c["bytes_in"] += ids.numel() * 8 + g.numel() * 4
                self._p2p(st, t_wait, t1, "push", g.numel(), 4, 0, None)
            elif op == P.AGREE:
                if self.role != "embedding_ps" or self.cfg.index != 0:
                    raise NetError(f"{conn.peer} sent AGREE to {self.cfg.host}: only embedding PS 0 agrees")
                v = recv_array(conn, np.empty(n, np.float64))
                send_array(conn, self.agreement.add(v, st.host, self.cfg.timeout_s))
            elif op == P.ELASTIC:
                if self.role != "sync_ps":
                    raise NetError(f"{conn.peer} sent ELASTIC to an embedding PS")
                w = torch.from_numpy(recv_array(conn, np.empty(n, np.float32)))
                t1 = time.perf_counter()
                if n != self.centre.numel():
                    raise NetError(f"{conn.peer} sent {n} values, the centre has {self.centre.numel()}")
                d = rules.elastic_difference_into(self.centre, w, self.s.alpha)
                send_array(conn, d.numpy())
                st.c["elastic"] += 1
                st.c["bytes_in"] += n * 4
                st.c["bytes_out"] += n * 4
                self._p2p(st, t_wait, t1, "elastic", n, 4, n, "elastic_reply")
            st.c["busy_s"] += time.perf_counter() - t0

    def _p2p(self, st: Served, t_wait: float, t_in: float, tag: str, values: int, vbytes: int,
             reply_values: int, reply_tag: str | None) -> None:
        if not self.trace.enabled or not P.traced_client(st.host) or not st.measuring or not st.traced:
            return
        with self.lock:
            got = self.trace.recv(t_wait, t_in, peer=st.host, values=values, value_bytes=vbytes, tag=tag)
            if reply_tag is not None:
                # The reply needs the request: a step that waited for it (trace dependencies
                # run through compute nodes). Its hardware time is 0: the PS's table work is
                # not modeled [A] (docs/shadowsync.md, Time), so the projection charges the
                # server only its links; real_s 0 too (no device to overrun: the monitor's
                # compute check is about modeled devices).
                t_out = time.perf_counter()
                self.trace.waited(got)
                self.trace.compute(t_in, t_out, 0.0, 0.0, {"step": tag, "unmodeled_cpu_s": t_out - t_in})
                self.trace.send(t_out, time.perf_counter(), peer=st.host, values=reply_values, tag=reply_tag)


def accept_all(cfg, s) -> list[tuple[Conn, Served]]:
    server = listen(cfg.ip, cfg.port)
    deadline = time.monotonic() + cfg.connect_timeout_s
    hello = make_hello(cfg.host, -1, s.identity())
    out = []
    try:
        while len(out) < cfg.clients:
            sock = accept_one(server, waiting_for=f"{cfg.clients - len(out)} more trainer connection(s)",
                              timeout_s=max(0.1, deadline - time.monotonic()))
            conn = Conn(sock, "a trainer", cfg.timeout_s)
            theirs = recv_json(conn, timeout_s=max(1.0, deadline - time.monotonic()))
            check_hello(theirs, mine=hello, peer=f"trainer {theirs.get('host') if isinstance(theirs, dict) else '?'}")
            conn.peer = f"trainer {theirs['host']}"
            send_json(conn, hello)
            st = Served(theirs["host"], theirs["rank"])
            st.measuring = not s.calibrated      # calibrating clients say MEASURE when they are done
            out.append((conn, st))
    finally:
        server.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hosts.shadowsync.servers", description=__doc__.split("\n")[0])
    p.add_argument("--role", required=True, choices=("embedding_ps", "sync_ps"))
    p.add_argument("--config", required=True)
    a = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    torch.set_num_threads(1)
    try:
        cfg, s = load(a.config, a.role)
    except ConfigError as e:
        log.error("bad config: %s", e)
        return program.EXIT_CONFIG
    writer = JsonlWriter(cfg.out)
    srv = Server(a.role, cfg, s)
    errors: list[str] = []
    served: list[Served] = []
    t_start = time.perf_counter()
    try:
        conns = accept_all(cfg, s)
        served = [st for _, st in conns]

        def run(conn: Conn, st: Served) -> None:
            try:
                srv.serve(conn, st)
            except (NetError, OSError, ValueError) as e:
                errors.append(f"{st.host}: {type(e).__name__}: {e}")
            finally:
                conn.close()

        threads = [threading.Thread(target=run, args=cs, daemon=True) for cs in conns]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    except (NetError, OSError) as e:
        errors.append(f"{type(e).__name__}: {e}")
    wall = time.perf_counter() - t_start
    for e in errors:
        log.error("%s", e)
    for st in served:
        writer.write({"type": "server", "role": a.role, "server": cfg.host, "client": st.host,
                      "client_rank": st.rank, **st.c, "client_pushes": st.client_pushes,
                      "pushes_match": None if st.client_pushes is None else st.client_pushes == st.c["pushes"]})
    tot = {k: sum(st.c[k] for st in served) for k in ("lookups", "pushes", "rows_applied", "elastic",
                                                      "bytes_in", "bytes_out", "busy_s")}
    writer.write({"type": "summary", "host": cfg.host, "role": a.role, "ok": not errors,
                  "error": "; ".join(errors) or None, "clients": len(served), "wall_s": wall, **tot,
                  "load": tot["busy_s"] / wall if wall > 0 else None,
                  "tables": sorted(getattr(srv, "tables", {}))})
    writer.close()
    srv.trace.close()
    return 0 if not errors else program.EXIT_NET


if __name__ == "__main__":
    sys.exit(main())
