"""The EASGD master: holds the centre variable and serves the workers' exchanges.

    python -m hosts.easgd.master --config master.config.json

How it serves (hosts/easgd/config.py VARIANTS):
  round_robin  the original EASGD as You et al. describe it: the master takes
               workers in rank order 1, 2, ..., P, 1, ...; a worker whose turn it
               is not waits in its socket, however early it came.
  fcfs         Async EASGD / MEASGD, Async SGD / momentum SGD: whoever's message
               is complete first is served first (one process, one at a time).
  hogwild      Hogwild EASGD / SGD: `servers` processes, each serving its own
               workers first come first served, all reading and adding into one
               centre in shared memory (multiprocessing.shared_memory) with no
               lock. Python threads would serialize on the interpreter lock, so
               the overlap would be nil; processes really run at once.

What it applies is one rule of hosts/easgd/rules.py per message: elastic
(receive W_j, add e = alpha (W_j - C) into C, reply e), sgd (receive g, add
-eta g into C, reply C), msgd (receive g, momentum at the master, reply C).
Every message travels on TCP (hosts/common/tcp.py framing): a lost packet is
retransmitted by the kernel, so packet loss changes timing, never the sums.
A zero-length message is a worker's end of stream.

Output: one `exchange` record per served message (rank, seq, server, when the
message was complete, when the centre was read and written, when the reply
left) and a `summary` (exchanges per rank); the centre over time in an .npz.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import select
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hosts.collectives import check_hello, make_hello
from hosts.common import program, start_gate
from hosts.common.calibration import CalibrationRefused, decide_messages
from hosts.common.results import JsonlWriter
from hosts.common.tcp import (KIND_BARRIER, KIND_DATA, Conn, NetError, RecvOp, SendOp, accept_one,
                              exchange, listen, recv_array, recv_json, send_array, send_json)
from hosts.easgd import rules
from hosts.easgd.timing import REFUSED_TDF, MasterClock, master_agreement, master_host, worst_ratio
from hosts.easgd.config import (ConfigError, EasgdSettings, MasterConfig, load, master_rule,
                                server_of, server_port, serving)
from hosts.easgd.model import initial_weights

EXIT_OK = 0
log = logging.getLogger("easgd.master")


class Centre:
    """The centre variable and the rule the master applies to it."""

    def __init__(self, c: torch.Tensor, settings: EasgdSettings):
        self.c = c                          # a tensor over private or shared memory
        self.s = settings
        self.rule = master_rule(settings.variant)
        self.v = torch.zeros_like(c) if self.rule == "msgd" else None

    def apply(self, payload: torch.Tensor) -> tuple[np.ndarray, float, float]:
        """(reply, t when the centre was read, t when the write finished)."""
        s = self.s
        t0 = time.perf_counter()
        if self.rule == "elastic":
            e = rules.elastic_difference(payload, self.c, s.alpha)
            rules.add_into(self.c, e)
            reply = e
        elif self.rule == "sgd":
            rules.add_into(self.c, -s.lr * payload)
            reply = self.c.clone()
        else:
            c2, self.v = rules.async_msgd_apply(self.c, self.v, payload, s.lr, s.momentum)
            self.c.copy_(c2)
            reply = self.c.clone()
        return reply.numpy(), t0, time.perf_counter()


def accept_workers(server, ranks: list[int], cfg: MasterConfig, settings: EasgdSettings,
                   ident: dict) -> dict[int, Conn]:
    """One connection per rank in `ranks`; each says hello, all get the reply once all are in."""
    deadline = time.monotonic() + cfg.connect_timeout_s
    conns: dict[int, Conn] = {}
    hello = make_hello(cfg.host, -1, ident)
    while len(conns) < len(ranks):
        sock = accept_one(server, waiting_for=f"workers {sorted(set(ranks) - set(conns))}",
                          timeout_s=max(0.1, deadline - time.monotonic()))
        conn = Conn(sock, "a worker", cfg.timeout_s)
        theirs = recv_json(conn, timeout_s=max(1.0, deadline - time.monotonic()))
        check_hello(theirs, mine=hello, peer=f"worker {theirs.get('host') if isinstance(theirs, dict) else '?'}")
        rank = theirs["rank"]
        if rank not in ranks or rank in conns:
            raise NetError(f"unexpected worker rank {rank} (this server expects {ranks})")
        conn.peer = f"worker {theirs['host']} (rank {rank})"
        conns[rank] = conn
    for conn in conns.values():
        send_json(conn, hello)
    return conns


def serve(conns: dict[int, Conn], centre: Centre, order: str, server: int, t0: float,
          snap: "Snapshots | None", clock: MasterClock, names: dict[int, str]
          ) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Serve every worker to its end of stream; (exchange log, exchanges per rank).
    Each served message is traced (clock): received from `names[rank]` since the master
    began waiting for it (FCFS: since its previous reply; round robin: since its turn
    came), the update, the reply."""
    n = centre.c.numel()
    counts = {r: 0 for r in conns}
    log_: list[dict[str, Any]] = []
    active = sorted(conns)
    pending = {r: RecvOp(conns[r], KIND_DATA) for r in active}
    waiting_since = {r: time.perf_counter() for r in active}
    turn = 0

    def handle(rank: int, op: RecvOp) -> None:
        t_in = time.perf_counter()
        arr = op.array
        if arr.size == 0:                    # end of stream
            active.remove(rank)
            del pending[rank]
            return
        if arr.size != n:
            raise NetError(f"{conns[rank].peer} sent {arr.size} values, the centre has {n}")
        clock.received(names[rank], waiting_since[rank], t_in, n)
        reply, ta, tb = clock.update(lambda: centre.apply(torch.from_numpy(arr)))
        t_send = time.perf_counter()
        send_array(conns[rank], reply)
        t_out = time.perf_counter()
        clock.replied(names[rank], t_send, t_out, n)
        log_.append({"type": "exchange", "rank": rank, "seq": counts[rank], "server": server,
                     "t_in": t_in - t0, "t_read": ta - t0, "t_write": tb - t0, "t_out": t_out - t0})
        counts[rank] += 1
        pending[rank] = RecvOp(conns[rank], KIND_DATA)
        waiting_since[rank] = time.perf_counter()
        if snap is not None:
            snap.maybe(centre.c)

    last_progress = time.monotonic()
    while active:
        if order == "round_robin":
            # Only the worker whose turn it is is read; the others wait in their sockets.
            rank = active[turn % len(active)]
            op = pending[rank]
            waiting_since[rank] = time.perf_counter()
            ready = [rank] if _drive(op, conns[rank].timeout_s) else []
        else:
            ready = _ready(pending, conns, active)
        for rank in ready:
            was = len(active)
            handle(rank, pending[rank])
            if order == "round_robin" and len(active) == was:
                turn += 1
            last_progress = time.monotonic()
        if not ready and time.monotonic() - last_progress > max(c.timeout_s for c in conns.values()):
            raise NetError(f"no exchange for {conns[active[0]].timeout_s:g} s from "
                           f"{', '.join(conns[r].peer for r in active)}")
    return log_, counts


def calibrate(conns: dict[int, Conn], centre: Centre, clock: MasterClock, rounds: int,
              iterations: int) -> float:
    """The master's side of hosts/easgd/timing.py calibrate_master: one worker at a time
    ("go", its probe, the update on a scratch copy of the centre, paced, the reply);
    after each round the sum of the workers' agreement vectors to every worker, and
    the TDF they will run at (they must agree; REFUSED_TDF: they refused the round's,
    CalibrationRefused). Returns the TDF; the centre is unchanged."""
    scratch = Centre(centre.c.clone(), centre.s)
    n = centre.c.numel()
    timeout = max(c.timeout_s for c in conns.values())
    for r in range(rounds):
        reals = []
        for _ in range(iterations):
            for rank in sorted(conns):
                exchange([SendOp(conns[rank], KIND_BARRIER)], [], timeout)
                arr = recv_array(conns[rank], np.empty(n, np.float32))
                reply = clock.update(lambda: scratch.apply(torch.from_numpy(arr))[0], traced=False)
                reals.append(clock.last_real_s)
                send_array(conns[rank], reply)
        vecs = [recv_array(conns[rank]) for rank in sorted(conns)]
        if len({v.size for v in vecs}) != 1:
            raise NetError(f"calibration round {r}: workers sent agreement vectors of sizes "
                           f"{[v.size for v in vecs]}")
        try:     # the master's own update enters the compute ratio (timing.master_agreement)
            mine = master_agreement(vecs[0].size, len(conns), worst_ratio(reals, clock.update_hw_s))
        except ValueError as e:
            raise NetError(f"calibration round {r}: {e}") from None
        total = np.sum(np.stack([v.astype(np.float64) for v in vecs] + [mine]), axis=0)
        for rank in sorted(conns):
            send_array(conns[rank], total)
        tdfs = {float(recv_array(conns[rank])[0]) for rank in sorted(conns)}
        if REFUSED_TDF in tdfs:
            # What was measured (the workers' round trips), for the point's record: the
            # first host to exit with the refusal is the one the runner names.
            parties = len(conns) + 1
            _, why = decide_messages(total, total.size // parties - 2, parties, 1.0, fallback=1.0)
            t = why["op_net_s"]
            trips = (f"their {t['n']} round trips ({t['min']:.4g} .. {t['max']:.4g} s, median {t['p50']:.4g} s)"
                     if t["n"] else "no measured round trip")
            raise CalibrationRefused(
                f"calibration round {r}: the workers refused the TDF chosen from {trips}: one iteration "
                f"would outrun the point's deadline (their logs say by how much). If one trip stalled (a "
                f"retransmission timeout), run the point again.")
        if len(tdfs) != 1:
            raise NetError(f"calibration round {r}: workers chose different TDFs {sorted(tdfs)}")
        clock.set_tdf(tdfs.pop())
    return clock.device.time_scale


def _drive(op: RecvOp, timeout_s: float) -> bool:
    """Block until op completes (round robin waits for exactly this worker)."""
    exchange([], [op], timeout_s)
    return True


def _ready(pending: dict[int, RecvOp], conns: dict[int, Conn], active: list[int]) -> list[int]:
    """Ranks whose message completed, in completion order (waits up to 1 s for one)."""
    done = []
    poller = select.poll()
    fds = {}
    for r in active:
        fds[conns[r].sock.fileno()] = r
        poller.register(conns[r].sock.fileno(), select.POLLIN)
    for fd, _ in poller.poll(1000):
        r = fds[fd]
        op = pending[r]
        op.advance()
        if op.done:
            done.append(r)
    return done


class Snapshots:
    """The centre every `every_s` seconds (and at start and end), for accuracy vs time.
    Times are time.perf_counter() (CLOCK_MONOTONIC, one clock for every process of
    the machine), so the collector puts them on the workers' training clock."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.times: list[float] = []
        self.values: list[np.ndarray] = []
        self.last = -1e18

    def maybe(self, c: torch.Tensor, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self.last >= self.every_s:
            self.times.append(now)
            self.values.append(c.numpy().copy())
            self.last = now

    def save(self, path: str) -> None:
        np.savez(path, t_perf=np.asarray(self.times), centre=np.stack(self.values))


def make_clock(cfg: MasterConfig, settings: EasgdSettings, server: int, servers: int, tdf: float,
               traced: bool = True) -> MasterClock:
    name = master_host(servers, server)
    path = str(Path(cfg.trace) / f"{name}.trace.jsonl") if cfg.trace and traced else None
    order = "round_robin" if serving(settings.variant) == "round_robin" else "fcfs"
    return MasterClock(path, server=server, servers=servers, workers=len(cfg.workers), tdf=tdf,
                       update_hw_s=cfg.timing["update_hw_s"], serve_order=order)


def worker_names(cfg: MasterConfig, ranks) -> dict[int, str]:
    return {r: cfg.workers[r].name for r in ranks}


# -- one process (round robin, fcfs) ------------------------------------------------
def run_single(cfg: MasterConfig, settings: EasgdSettings, ident: dict, writer: JsonlWriter) -> dict:
    centre = Centre(initial_weights(settings.seed, settings.model, settings.dataset), settings)
    server = listen(cfg.ip, cfg.port)
    try:
        conns = accept_workers(server, list(range(len(cfg.workers))), cfg, settings, ident)
    finally:
        server.close()
    clock = make_clock(cfg, settings, 0, 1, cfg.timing["time_scale"])
    try:
        cal = cfg.timing["calibration"]
        if cal is not None:
            calibrate(conns, centre, clock, cal["rounds"], cal["iterations"])
            log.info("calibrated with the workers: TDF %g", clock.device.time_scale)
        log.info("all %d workers connected; serving %s", len(conns), serving(settings.variant))
        t0 = time.perf_counter()
        snap = Snapshots(settings.snapshot_every_s)
        snap.maybe(centre.c, force=True)
        try:
            records, counts = serve(conns, centre, serving(settings.variant), 0, t0, snap, clock,
                                    worker_names(cfg, conns))
        finally:
            for c in conns.values():
                c.close()
    finally:
        clock.close()
    snap.maybe(centre.c, force=True)
    snap.save(cfg.snapshots)
    for r in records:
        writer.write(r)
    return {"exchanges": counts, "t0_perf": t0, "tdf": clock.device.time_scale,
            "validity": {"0": clock.device.validity()}}


# -- Hogwild: several processes over one shared centre ------------------------------------
def calibrate_hogwild(cfg: MasterConfig, settings: EasgdSettings, ident: dict, servers: int) -> float:
    """Every worker calibrates with the parent process on the base port first (the
    agreement needs all of them in one place); the server processes start after."""
    cal = cfg.timing["calibration"]
    if cal is None:
        return cfg.timing["time_scale"]
    centre = Centre(initial_weights(settings.seed, settings.model, settings.dataset), settings)
    server = listen(cfg.ip, cfg.port)
    try:
        conns = accept_workers(server, list(range(len(cfg.workers))), cfg, settings, ident)
    finally:
        server.close()
    clock = make_clock(cfg, settings, 0, servers, cfg.timing["time_scale"], traced=False)
    try:
        tdf = calibrate(conns, centre, clock, cal["rounds"], cal["iterations"])
    finally:
        for c in conns.values():
            c.close()
    log.info("calibrated with the workers: TDF %g", tdf)
    return tdf


def _hogwild_server(s: int, shm_name: str, n: int, cfg: MasterConfig, settings: EasgdSettings,
                    ident: dict, tdf: float, t0_box, out_q) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    torch.set_num_threads(1)
    shm = shared_memory.SharedMemory(name=shm_name)
    clock = make_clock(cfg, settings, s, cfg.servers, tdf)
    try:
        c = torch.from_numpy(np.ndarray((n,), dtype=np.float32, buffer=shm.buf))
        ranks = [r for r in range(len(cfg.workers)) if server_of(r, cfg.servers) == s]
        server = listen(cfg.ip, server_port(cfg.port, s))
        try:
            conns = accept_workers(server, ranks, cfg, settings, ident)
        finally:
            server.close()
        with t0_box.get_lock():
            if t0_box.value == 0.0:
                t0_box.value = time.perf_counter()
        records, counts = serve(conns, Centre(c, settings), "fcfs", s, t0_box.value, None, clock,
                                worker_names(cfg, ranks))
        for conn in conns.values():
            conn.close()
        del c
        out_q.put({"server": s, "records": records, "counts": counts, "error": None,
                   "validity": clock.device.validity()})
    except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the run
        out_q.put({"server": s, "records": [], "counts": {}, "error": f"{type(e).__name__}: {e}",
                   "validity": None})
    finally:
        clock.close()
        shm.close()


def run_hogwild(cfg: MasterConfig, settings: EasgdSettings, ident: dict, writer: JsonlWriter) -> dict:
    init = initial_weights(settings.seed, settings.model, settings.dataset).numpy()
    servers = min(cfg.servers, len(cfg.workers))
    cfg = MasterConfig(**{**cfg.__dict__, "servers": servers})
    tdf = calibrate_hogwild(cfg, settings, ident, servers)
    shm = shared_memory.SharedMemory(create=True, size=init.nbytes)
    ctx = mp.get_context("fork")      # children share the loaded torch; no threads run yet
    try:
        shared = np.ndarray(init.shape, dtype=np.float32, buffer=shm.buf)
        shared[:] = init
        t0_box, out_q = ctx.Value("d", 0.0), ctx.Queue()
        procs = [ctx.Process(target=_hogwild_server, name=f"hogwild-server-{s}",
                             args=(s, shm.name, init.size, cfg, settings, ident, tdf, t0_box, out_q))
                 for s in range(servers)]
        for p in procs:
            p.start()
        log.info("%d Hogwild server processes over one shared centre (%d values)", servers, init.size)
        while t0_box.value == 0.0 and any(p.is_alive() for p in procs):
            time.sleep(0.005)
        snap = Snapshots(settings.snapshot_every_s)
        c_view = torch.from_numpy(shared)
        snap.maybe(c_view, force=True)
        results = []
        while len(results) < servers:
            try:
                results.append(out_q.get(timeout=settings.snapshot_every_s))
            except Exception:  # noqa: BLE001 - queue.Empty: take a snapshot and keep waiting
                if not any(p.is_alive() for p in procs) and out_q.empty():
                    raise NetError("a Hogwild server process died without a report (see this log)")
            snap.maybe(c_view)
        for p in procs:
            p.join(10)
        snap.maybe(c_view, force=True)
        snap.save(cfg.snapshots)
        del c_view, shared
        errors = [f"server {r['server']}: {r['error']}" for r in results if r["error"]]
        if errors:
            raise NetError("; ".join(errors))
        counts: dict[int, int] = {}
        for r in sorted(results, key=lambda r: r["server"]):
            counts.update(r["counts"])
            for rec in r["records"]:
                writer.write(rec)
        return {"exchanges": dict(sorted(counts.items())), "servers": servers, "t0_perf": t0_box.value,
                "tdf": tdf, "validity": {str(r["server"]): r["validity"] for r in results}}
    finally:
        shm.close()
        shm.unlink()


def main(argv: list[str] | None = None) -> int:
    torch.set_num_threads(1)      # 2 shared cores; the centre update is one vector op
    try:
        cfg_path = _config_path(argv)
        cfg, settings, _ = load(cfg_path, "master")
    except ConfigError as e:
        logging.basicConfig(stream=sys.stderr)
        log.error("bad config: %s", e)
        return program.EXIT_CONFIG
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    writer = JsonlWriter(cfg.out)
    ident = settings.identity() | {"workers": len(cfg.workers),
                                   "calibrated": cfg.timing["calibration"] is not None}
    start_gate.begin(cfg.start_at, cfg.host)
    error, info = None, {}
    try:
        run = run_hogwild if serving(settings.variant) == "hogwild" else run_single
        info = run(cfg, settings, ident, writer)
        log.info("done: %s exchanges", info["exchanges"])
        return EXIT_OK
    except (NetError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        log.error("%s", error)
        return program.EXIT_NET
    except CalibrationRefused as e:
        error = f"{type(e).__name__}: {e}"
        log.error("%s", error)
        return program.EXIT_REFUSED
    finally:
        writer.write({"type": "summary", "host": cfg.host, "role": "master", "variant": settings.variant,
                      "serving": serving(settings.variant), "ok": error is None, "error": error,
                      "exchanges": {str(k): v for k, v in (info.get("exchanges") or {}).items()},
                      "servers": info.get("servers", 1), "tdf": info.get("tdf"),
                      "validity": info.get("validity")})
        writer.close()


def _config_path(argv: list[str] | None) -> str:
    import argparse  # noqa: PLC0415
    p = argparse.ArgumentParser(prog="python -m hosts.easgd.master", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    return p.parse_args(argv).config


if __name__ == "__main__":
    sys.exit(main())
