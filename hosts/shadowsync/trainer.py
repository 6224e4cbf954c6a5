"""A ShadowSync trainer host: `hogwild_workers` worker processes training one
shared dense replica, plus (mode shadow) one shadow process synchronizing it
in the background.

    python -m hosts.shadowsync.trainer --config w1.config.json

Worker j, per iteration (forked processes over hosts/shadowsync/replica.py's
shared flat tensor; no lock anywhere):
  1. LOOKUP the batch's embedding rows from every embedding PS (blocking);
  2. forward/backward of the dense tower, charged to the modeled accelerator
     (hosts/dnn/device.py: FLOPs of the tower x time_scale; the CPU's real time
     is checked against it);
  3. local dense SGD on the shared replica, in place (rules.local_sgd);
  4. PUSH the rows' gradients to the embedding PSs (no reply: asynchronous);
  5. foreground (FR-*) only: every k iterations all workers of the trainer meet
     at a barrier, worker 0 synchronizes (the same Syncer the shadow uses), and
     they meet again: the sync blocks the whole trainer.
Shadow process (S-*): loops `sync` back to back (shadow_pause_ms apart) over
the replica while the workers run, never waiting for them; it records the sync
gap (worker iterations of this trainer between two syncs). S-MA / S-BMUF stop
once every trainer's workers are done (a flag travels in each allreduce, so all
trainers run the same number of allreduces); S-EASGD stops after its first sync
that began with its own workers done.
At the end the main process evaluates the replica on the eval set (eval NE).
"""
from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hosts.common import program, start_gate
from hosts.common.calibration import CalibrationRefused
from hosts.common.results import JsonlWriter
from hosts.common.tcp import NetError
from hosts.common.trace import TraceRecorder
from hosts.dnn.device import make_device
from hosts.dnn.dlrm import tower_profile
from hosts.dnn.runtime import run_step
from hosts.shadowsync import rules
from hosts.shadowsync.config import ConfigError, load
from hosts.shadowsync.data import open_source, stream_batches
from hosts.shadowsync.protocol import EmbeddingClient, SyncLink, eval_client, shadow_client, worker_client
from hosts.shadowsync.replica import build_tower, flat_grad, share
from hosts.shadowsync.timing import Round, Shared

log = logging.getLogger("shadowsync.trainer")
EVAL_CHUNK = 1024
SHADOW_NICE = 10
# The shadow traces its first SHADOW_TRACED_SYNCS_PER_ITER x iterations syncs of the
# measured run [A]: it syncs back to back, and where a sync costs next to nothing (one
# trainer: an allreduce of one) it made 2.3 million trace nodes in a minute, which the
# projector then replayed 64 times. The workers never wait for the shadow, so its
# trace changes no projected worker time; the cut is at the same allreduce on every
# shadow (they count in lockstep), so their groups stay whole.
SHADOW_TRACED_SYNCS_PER_ITER = 4
# The trace group of the trainers' sync allreduce: its members are the shadows (S-*)
# or the trainers' worker 0 (FR-*), never every traced host ("world").
SYNC_GROUP = "trainers"


class Syncer:
    """One synchronization of the dense replica with the other trainers: the
    rule of Settings.algorithm, over the sync PS (easgd) or the allreduce (ma, bmuf).
    Used by the shadow process (S-*) and by worker 0 in the foreground (FR-*)."""

    def __init__(self, cfg, s, flat: torch.Tensor, trace: TraceRecorder | None, me: str, shared: Shared):
        self.s, self.flat, self.trace, self.shared = s, flat, trace, shared
        self.all_measuring = not s.calibrated      # every trainer past calibration (as of the last sync)
        self.paced_s = 0.0
        self.link = self.coll = None
        self.count = 0
        if s.algorithm == "easgd":
            self.link = SyncLink(s, cfg.sync_ps, cfg.port, me=me, my_ip=cfg.ip, rank=cfg.rank,
                                 connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
        else:
            from hosts.dnn.config import TorchWorkerConfig  # noqa: PLC0415
            from hosts.dnn.open_collective import open_collective  # noqa: PLC0415
            self.tcfg = TorchWorkerConfig.from_json(cfg.collective)
            self.coll = open_collective(self.tcfg)
            self.w_g = flat.clone()                     # BMUF's global model (the same on every trainer)
            self.v = torch.zeros_like(flat)

    def sync(self, finished: bool, paused: bool = False) -> bool:
        """One sync; True when every trainer said `finished` (allreduce) or this one did (easgd).
        Sets all_measuring: every trainer (allreduce) or this one (easgd) is past calibration.
        paused: the workers wait at a barrier (foreground): the result replaces the replica
        (rules.replace) instead of being added as a difference."""
        write = rules.replace if paused else rules.apply_delta
        # The network's floor: no sync is faster than the modeled hardware's, dilated like
        # compute (local mode has no network dilation; see docs/shadowsync.md).
        floor_s = self.s.sync_hw_s * self.shared.tdf.value
        measuring = bool(self.shared.measuring.value)
        snap = self.flat.clone()
        n = snap.numel()
        t0 = time.perf_counter()
        if self.trace is not None:
            # A zero-time step before each sync: trace dependencies run through compute
            # nodes, and the shadow has no other; without it the projector would start
            # all of the shadow's syncs at once instead of one after the other.
            self.trace.compute(t0, t0, 0.0, 0.0, {"step": "sync"})
        if self.link is not None:
            d = torch.from_numpy(self.link.elastic(snap.numpy()))
            t1 = time.perf_counter()
            if self.trace is not None:
                peer = self.link.peer
                self.trace.send(t0, t0, peer=peer, values=n, tag="elastic")
                self.trace.waited(self.trace.recv(t0, t1, peer=peer, values=n, tag="elastic_reply"))
            write(self.flat, snap, snap - d)
            all_done, self.all_measuring = finished, measuring
        else:
            vec = torch.cat([snap, torch.tensor([1.0 if finished else 0.0, 1.0 if measuring else 0.0])])
            tot = torch.as_tensor(self.coll.allreduce(vec)).reshape(-1)
            t1 = time.perf_counter()
            if self.trace is not None:
                self.trace.waited(self.trace.comm(t0, t1, op="allreduce", algo=self.tcfg.collective,
                                                  values=n + 2, group=SYNC_GROUP))
            sum_w, flags = tot[:-2], float(tot[-2])
            self.all_measuring = float(tot[-1]) >= self.s.trainers - 0.5
            if self.s.algorithm == "ma":
                new = rules.s_ma(sum_w, self.s.trainers)
            else:
                new, self.w_g, self.v = rules.s_bmuf(sum_w, self.s.trainers, self.w_g, self.v,
                                                     self.s.bmuf_eta, self.s.bmuf_zeta, self.s.nesterov)
            write(self.flat, snap, new)
            all_done = flags >= self.s.trainers - 0.5
        self.count += 1
        left = floor_s - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)
            self.paced_s += left
        return all_done

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
        if self.coll is not None:
            self.coll.close()


def _device(spec: dict, tower, batch: int):
    dev = make_device(spec)
    dev.model = tower_profile(tower, batch=min(batch, 4))
    return dev


def fwd_bwd(tower, b, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One Hogwild step's forward/backward on the looked-up rows: (loss, the flat dense
    gradient); pooled.grad is then the rows' gradient the PUSH sends."""
    pooled.requires_grad_(True)
    loss = F.binary_cross_entropy_with_logits(tower(b.dense, pooled), b.labels)
    tower.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach(), flat_grad(tower)


def failure(who: str, e: Exception, shared: Shared) -> str:
    """The error a trainer process reports (and logs). Worker 0's refusal names what
    calibration measured; a process that it stopped (released from the round's barrier,
    or cut off after it) says so rather than how it was stopped (a broken barrier), as
    does one released from a barrier because another worker failed (Shared.fail)."""
    if isinstance(e, CalibrationRefused):
        msg = f"{who}: {type(e).__name__}: {e}"
    elif shared.refused.value:
        msg = f"{who}: stopped: calibration was refused by worker 0"
    elif isinstance(e, threading.BrokenBarrierError) and shared.failed.value >= 0 \
            and who != f"worker {shared.failed.value}":
        msg = f"{who}: stopped: worker {shared.failed.value} failed"
    else:
        msg = f"{who}: {type(e).__name__}: {e}"
        log.error("%s\n%s", msg, traceback.format_exc())
        return msg
    log.error("%s", msg)
    return msg


def worker_main(j: int, cfg, s, tower, flat, iters, done, barrier, shared: Shared, results,
                t_start: float) -> None:
    torch.set_num_threads(1)
    out: dict[str, Any] = {"kind": "worker", "worker": j, "ok": False}
    emb = syncer = None
    trace = TraceRecorder(cfg.trace if j == 0 else None, host=cfg.host, rank=cfg.rank, world=cfg.trace_world,
                          tdf=shared.tdf.value, workload="shadowsync", role="worker",
                          hogwild_worker=j) if j == 0 and cfg.trace else None
    try:
        dev = _device(dict(cfg.device, time_scale=shared.tdf.value), tower, s.batch_size)
        if trace is not None:
            trace.header["device"] = dev.describe()
        src = open_source(s.dataset, s.model["table_sizes"], s.seed)
        batches = stream_batches(src, cfg.rank * s.hogwild_workers + j, s.trainers * s.hogwild_workers,
                                 s.batch_size)
        emb = EmbeddingClient(s, cfg.embedding_servers, cfg.port, me=worker_client(cfg.host, j), my_ip=cfg.ip,
                              rank=cfg.rank, connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s,
                              trace=trace)
        foreground = s.mode == "foreground" and s.syncs
        if foreground and j == 0:
            syncer = Syncer(cfg, s, flat, trace, cfg.host, shared)
        calib = (Round(shared, cfg.network_dilation, cfg.rank, s.trainers, dev.hw_time(s.batch_size))
                 if shared.cc and j == 0 else None)
        if calib is not None:
            emb.spans = []
        b0 = src.eval_set(min(s.batch_size, 64))
        with torch.no_grad():
            tower(b0.dense, torch.zeros(len(b0), b0.ids.shape[1], s.model["dim"]))   # warm-up: lazy init not charged
        strag = cfg.straggler
        recs, loss_sum, label_sum, n_seen = [], 0.0, 0.0, 0
        real_s = hw_s = 0.0                          # this calibration round's compute
        t_first = time.perf_counter()
        for it in range(shared.iterations + s.iterations):
            b = next(batches)
            t0 = time.perf_counter()
            pooled = emb.lookup(b.ids)
            t1 = time.perf_counter()
            slowed = bool(strag) and time.time() - t_start >= strag["start_s"]
            # forward/backward charged to the modeled accelerator (the shared torch step, run_step)
            st = run_step(dev, lambda: fwd_bwd(tower, b, pooled), s.batch_size,
                          slowdown=strag["slowdown"] if slowed else 1.0,
                          delay_ms=strag["delay_ms"] if slowed else 0.0)
            loss, g = st.result
            if st.hw_s is not None:
                real_s, hw_s = real_s + st.real_s, hw_s + st.hw_s
            t2 = st.t2
            if trace is not None:
                trace.compute(t1, t2, hw_s=st.charged_s, real_s=st.real_s,
                              work={"batch_size": s.batch_size, "phase": "step"})
            rules.local_sgd(flat, g, s.lr_dense)
            emb.push(b.ids, pooled.grad)
            t3 = time.perf_counter()
            iters[j] += 1
            sync_s = 0.0
            # every k iterations of the calibration, then every k of the measured run (so
            # the measured run ends with a sync when k divides its iterations, as uncalibrated)
            if foreground and ((it if it < shared.iterations else it - shared.iterations) + 1) % s.k == 0:
                barrier.wait(timeout=cfg.timeout_s)
                if j == 0:
                    syncer.sync(False, paused=True)
                barrier.wait(timeout=cfg.timeout_s)
                sync_s = time.perf_counter() - t3
            loss_sum += float(loss) * len(b)
            label_sum += float(b.labels.sum())
            n_seen += len(b)
            recs.append({"iter": it - shared.iterations, "t_s": time.perf_counter() - t_first, "loss": float(loss),
                         "lookup_s": t1 - t0, "compute_s": t2 - t1, "push_s": t3 - t2, "sync_s": sync_s})
            if shared.round_end(it):
                # All of the trainer's workers end the round together; worker 0 agrees on
                # the next TDF with the other trainers (hosts/shadowsync/timing.py).
                shared.ratio[j] = real_s / hw_s if hw_s > 0 else 0.0
                real_s = hw_s = 0.0
                shared.barrier.wait(timeout=cfg.timeout_s)
                if calib is not None:
                    calib.decide(emb.spans, emb.agree)
                    emb.spans = []
                    if shared.last_round(it):
                        out["calibration"] = calib.finish(cfg.host)
                        emb.spans = None
                        if trace is not None:          # the trace is the measured run only
                            trace.reset()
                            trace.header["tdf"] = shared.tdf.value
                        emb.measure()
                        if syncer is not None and syncer.link is not None:
                            syncer.link.measure()
                        shared.measuring.value = 1
                shared.barrier.wait(timeout=cfg.timeout_s)
                if shared.last_round(it):        # a fresh device: its statistics are the run's
                    dev = _device(dict(cfg.device, time_scale=shared.tdf.value), tower, s.batch_size)
                    if syncer is not None:
                        syncer.count = 0
                    recs, loss_sum, label_sum, n_seen = [], 0.0, 0.0, 0
                    t_first = time.perf_counter()
                else:
                    dev.time_scale = shared.tdf.value
        t_end = time.perf_counter()
        out.update(ok=True, iterations=s.iterations, records=recs, tdf=shared.tdf.value, t0_perf=t_first, t_end_perf=t_end,
                   loss_sum=loss_sum, label_sum=label_sum, examples=n_seen, pushes=emb.pushes,
                   rows_pushed=emb.rows_pushed, lookups=emb.lookups, validity=dev.validity(),
                   syncs=syncer.count if syncer else 0)
    except Exception as e:  # noqa: BLE001 - reported to the main process, which fails the host
        shared.fail(j, barrier)                      # nobody waits for this worker at a barrier
        out["error"] = failure(f"worker {j}", e, shared)
    finally:
        with done.get_lock():
            done.value += 1
        for c in (emb, syncer):
            try:
                if c is not None:
                    c.close()
            except (NetError, OSError) as e:
                out.setdefault("error", f"worker {j}: closing: {e}")
        if trace is not None:
            trace.close()
        results.put(out)


def shadow_main(cfg, s, flat, iters, done, shared: Shared, results) -> None:
    torch.set_num_threads(1)
    # On the hardware the shadow thread has a core of its own; here it shares the
    # machine's with the workers, so it yields to them [A] (docs/shadowsync.md).
    os.nice(SHADOW_NICE)
    out: dict[str, Any] = {"kind": "shadow", "ok": False}
    syncer = None
    # The shadow is a traced host of its own ("<host>-shadow", role shadow), ranked after
    # the trainers and the servers: world = trainers + servers + shadows.
    me = shadow_client(cfg.host)
    trace = TraceRecorder(str(Path(cfg.trace).with_name(me + ".trace.jsonl")), host=me,
                          rank=cfg.trace_world - s.trainers + cfg.rank, world=cfg.trace_world,
                          tdf=shared.tdf.value, workload="shadowsync",
                          role="shadow", trainer=cfg.host) if cfg.trace else None
    try:
        syncer = Syncer(cfg, s, flat, trace, me, shared)
        measured = not s.calibrated
        last, gaps, times = sum(iters), [], []
        pause_hw_s = s.shadow_pause_ms / 1e3      # hardware time, dilated like every modeled time
        while True:
            finished = done.value >= s.hogwild_workers
            t0 = time.perf_counter()
            all_done = syncer.sync(finished)
            if measured and syncer.trace is not None and \
                    syncer.count >= SHADOW_TRACED_SYNCS_PER_ITER * s.iterations:
                syncer.trace = None                   # the trace file keeps what was recorded
                if syncer.link is not None:
                    syncer.link.untrace()             # and the sync PS stops tracing this shadow too
            times.append(time.perf_counter() - t0)
            now = sum(iters)
            gaps.append(now - last)
            last = now
            if not measured and syncer.all_measuring:
                # Calibration is over (for every trainer: the same allreduce on every shadow):
                # the trace and the statistics are the measured run's from here.
                measured = True
                if trace is not None:
                    trace.reset()
                    trace.header["tdf"] = shared.tdf.value
                if syncer.link is not None:
                    syncer.link.measure()
                gaps, times, syncer.count, syncer.paced_s = [], [], 0, 0.0
            if all_done:
                break
            if pause_hw_s:
                t_p = time.perf_counter()
                time.sleep(pause_hw_s * shared.tdf.value)
                if syncer.trace is not None:
                    # the shadow's own time before its next sync: the projector waits it out
                    # on the shadow's rank, using no core of the trainer's host
                    syncer.trace.compute(t_p, time.perf_counter(), pause_hw_s, 0.0, {"step": "pause"},
                                         idle=True)
        out.update(ok=True, syncs=syncer.count, gaps=gaps, sync_s=times, paced_s=syncer.paced_s)
    except Exception as e:  # noqa: BLE001
        out["error"] = failure("shadow", e, shared)
    finally:
        try:
            if syncer is not None:
                syncer.close()
        except (NetError, OSError) as e:
            out.setdefault("error", f"shadow: closing: {e}")
        if trace is not None:
            trace.close()
        results.put(out)


def evaluate(tower, emb: EmbeddingClient, src, n: int) -> tuple[float, float]:
    """(eval NE, eval CTR) of the replica on the first n eval examples."""
    ev = src.eval_set(n)
    preds = []
    with torch.no_grad():
        for i in range(0, len(ev), EVAL_CHUNK):
            ids = ev.ids[i:i + EVAL_CHUNK]
            preds.append(torch.sigmoid(tower(ev.dense[i:i + EVAL_CHUNK], emb.lookup(ids))))
    p = torch.cat(preds)
    return rules.normalized_entropy(p, ev.labels), float(ev.labels.mean())


def train_ne(workers: list[dict]) -> float | None:
    n = sum(w["examples"] for w in workers)
    if not n:
        return None
    ll = sum(w["loss_sum"] for w in workers) / n
    pbar = sum(w["label_sum"] for w in workers) / n
    if not 0 < pbar < 1:
        return None
    return ll / -(pbar * np.log(pbar) + (1 - pbar) * np.log(1 - pbar))


def run(cfg, s, writer: JsonlWriter) -> dict[str, Any]:
    torch.set_num_threads(1)
    ctx = mp.get_context("fork")
    tower = build_tower(s)
    flat = share(tower)
    iters = ctx.Array("q", s.hogwild_workers, lock=False)
    done = ctx.Value("i", 0)
    barrier = ctx.Barrier(s.hogwild_workers) if s.mode == "foreground" else None
    shared = Shared(ctx, cfg.calibration, s.hogwild_workers, float(cfg.device.get("time_scale", 1.0)))
    results = ctx.Queue()
    start_gate.begin(cfg.start_at, cfg.host)
    t_start = time.time()
    procs = [ctx.Process(target=worker_main, args=(j, cfg, s, tower, flat, iters, done, barrier, shared, results,
                                                             t_start),
                         name=f"hogwild-{j}") for j in range(s.hogwild_workers)]
    if s.mode == "shadow" and s.syncs:
        procs.append(ctx.Process(target=shadow_main, args=(cfg, s, flat, iters, done, shared, results),
                                 name="shadow"))
    for p in procs:
        p.start()
    emb = EmbeddingClient(s, cfg.embedding_servers, cfg.port, me=eval_client(cfg.host), my_ip=cfg.ip,
                          rank=cfg.rank, connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    outs: list[dict] = []
    try:
        # Calibrated: as long per iteration as the point's deadline allows (iteration_wall_s).
        per_iter_s = cfg.calibration["iteration_wall_s"] if cfg.calibration else 5.0
        deadline = time.monotonic() + cfg.timeout_s * 4 + (shared.iterations + s.iterations) * per_iter_s
        while len(outs) < len(procs):
            try:
                outs.append(results.get(timeout=1.0))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise NetError(f"trainer process(es) {[p.name for p in dead]} died (exit "
                                   f"{[p.exitcode for p in dead]})" if dead else "trainer processes timed out")
        for p in procs:
            p.join(timeout=10)
        workers = sorted((o for o in outs if o["kind"] == "worker"), key=lambda o: o["worker"])
        shadow = next((o for o in outs if o["kind"] == "shadow"), None)
        # The cause first (the first worker that failed; a refusal claims worker 0): the
        # other processes' errors are its consequences.
        errors = [o["error"] for o in sorted(outs, key=lambda o: o.get("worker") != shared.failed.value)
                  if o.get("error")]
        for w in workers:
            if w.get("calibration"):
                writer.write(w["calibration"])
            for r in w.get("records", []):
                writer.write({"type": "iteration", "host": cfg.host, "rank": cfg.rank, "worker": w["worker"], **r})
        ne, ctr = evaluate(tower, emb, open_source(s.dataset, s.model["table_sizes"], s.seed), s.eval_examples) \
            if not errors else (None, None)
        return {"errors": errors, "workers": workers, "shadow": shadow, "eval_ne": ne, "eval_ctr": ctr,
                "refused": bool(shared.refused.value)}
    finally:
        emb.close()
        for p in procs:
            if p.is_alive():
                p.terminate()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hosts.shadowsync.trainer", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    path = p.parse_args(argv).config
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    try:
        cfg, s = load(path, "trainer")
    except ConfigError as e:
        log.error("bad config: %s", e)
        return program.EXIT_CONFIG
    writer = JsonlWriter(cfg.out)
    res: dict[str, Any] = {"errors": []}
    try:
        res = run(cfg, s, writer)
    except (NetError, OSError, ValueError) as e:
        res["errors"] = res.get("errors", []) + [f"{type(e).__name__}: {e}"]
    for e in reversed(res["errors"]):     # the cause (a refusal) last: the runner quotes the log's end
        log.error("%s", e)
    workers, shadow = res.get("workers", []), res.get("shadow")
    ends = [(w["t0_perf"], w["t_end_perf"]) for w in workers if w.get("ok")]
    wall = max(e for _, e in ends) - min(t for t, _ in ends) if ends else None
    examples = sum(w.get("examples", 0) for w in workers)
    gaps = (shadow or {}).get("gaps") or []
    writer.write({
        "type": "summary", "host": cfg.host, "rank": cfg.rank, "role": "trainer", "ok": not res["errors"],
        "error": "; ".join(res["errors"]) or None, "algorithm": s.algorithm, "mode": s.mode,
        "hogwild_workers": s.hogwild_workers, "iterations": s.iterations, "examples": examples,
        "wall_s": wall, "examples_per_s": examples / wall if wall else None,
        "t0_perf": min((t for t, _ in ends), default=None), "t_end_perf": max((e for _, e in ends), default=None),
        "eval_ne": res.get("eval_ne"), "eval_ctr": res.get("eval_ctr"), "train_ne": train_ne(
            [w for w in workers if w.get("ok")]),
        "pushes": sum(w.get("pushes", 0) for w in workers), "rows_pushed": sum(w.get("rows_pushed", 0) for w in workers),
        "lookups": sum(w.get("lookups", 0) for w in workers),
        "syncs": (shadow or {}).get("syncs") if s.mode == "shadow" else sum(w.get("syncs", 0) for w in workers),
        "sync_gaps": gaps, "sync_s": (shadow or {}).get("sync_s"),
        "avg_sync_gap": (float(np.mean(gaps)) if gaps else
                         (s.k * s.hogwild_workers if s.mode == "foreground" and s.syncs else None)),
        "validity": [w.get("validity") for w in workers],
        # the TDF the measured run ran at (calibrated: worker 0's last decision, shared)
        "tdf": next((w["tdf"] for w in workers if w.get("tdf") is not None), None)})
    writer.close()
    if res.get("refused"):
        return program.EXIT_REFUSED
    return 0 if not res["errors"] else program.EXIT_NET


if __name__ == "__main__":
    sys.exit(main())
