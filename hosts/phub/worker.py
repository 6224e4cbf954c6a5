"""A PHub worker, or a baseline worker on the same network and model.

    python -m hosts.phub.worker --config w0.config.json

Algorithms (config `algorithm`):
  phub     forward layer by layer, each layer first waiting for its updated
           weights (so the next forward overlaps the tail of the exchange);
           backward back to front, each layer's gradient pushed as soon as it is
           produced (per-parameter post-accumulate-grad hooks for the CNN); the
           server runs the optimizer (hosts/phub/server.py).
  wide_ps  the plain parameter server (hosts/collectives/ps.py, served by
           hosts/phub/wide_ps.py): after backward, each layer's whole gradient is
           pushed, the PS waits for it from every worker, sums, and every worker
           receives the sum (its pull), then applies the same optimizer itself.
  ring     the same with a host ring allreduce; switch: in-switch aggregation.
  sharded_ps  MXNet kvstore's dist_sync with update_on_kvstore: PHub's client
           and schedule (per-layer pushes as backward produces them, forward
           waiting per layer), but the keys placed over k servers colocated with
           the first k workers (chunking.kvstore_plan); a worker whose config
           names `serve` runs its host's server (hosts/phub/server.py, sharded)
           as a child process beside training, as MXNet launches a server process
           on a worker's machine.
Models (config `model`): {kind: profile, name, size_scale} - a layer profile
(hosts/phub/profiles.py) with real float32 tensors of size_scale x each layer's
size and compute modeled only (hosts/dnn/device.py's FLOPs model, also scaled);
{kind: cnn} - the LeNet-class CNN on the digits, trained for real.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import numpy as np

from hosts.common import program, start_gate
from hosts.common.calibration import CalibrationRefused
from hosts.common.config import HostAddr
from hosts.common.tcp import NetError
from hosts.common.trace import TraceRecorder
from hosts.phub.config import load_worker, WorkerConfig
from hosts.phub.optimizer import step as opt_step
from hosts.phub.model import make_model

log = logging.getLogger("phub.worker")


def open_baseline(cfg: WorkerConfig):
    """The baseline collective (allreduce of one whole tensor) the config names."""
    from hosts.collectives import make_hello  # noqa: PLC0415
    kw = dict(connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    hello = make_hello(cfg.host, cfg.rank, cfg.job.identity(1))
    if cfg.algorithm == "wide_ps":
        from hosts.collectives.ps import PSWorker  # noqa: PLC0415
        return PSWorker.connect(ps=cfg.server, my_ip=cfg.ip, port_base=cfg.port, hello=hello, **kw)
    if cfg.algorithm == "ring":
        from hosts.collectives.ring import RingAllreduce  # noqa: PLC0415
        peers = tuple(HostAddr(p["name"], p["ip"]) for p in cfg.peers or [])
        return RingAllreduce.connect(rank=cfg.rank, peers=peers, port_base=cfg.port, hello=hello, **kw)
    from hosts.collectives.switch import SwitchAllreduce  # noqa: PLC0415
    from hosts.common.config import InaSettings  # noqa: PLC0415
    return SwitchAllreduce.connect(rank=cfg.rank, world=cfg.job.world, my_ip=cfg.ip,
                                   ina=InaSettings(**(cfg.ina or {})), run=cfg.job.identity(1), **kw)


def open_agreement(cfg: WorkerConfig):
    """PHub's workers share no collective: time_scale auto agrees on the TDF over a
    host ring among the job's workers (hosts/phub/timing.py)."""
    from hosts.collectives import make_hello  # noqa: PLC0415
    from hosts.collectives.ring import RingAllreduce  # noqa: PLC0415
    peers = tuple(HostAddr(p["name"], p["ip"]) for p in cfg.peers or [])
    return RingAllreduce.connect(rank=cfg.rank, peers=peers, port_base=cfg.port + AGREEMENT_PORT_OFFSET,
                                 hello=make_hello(cfg.host, cfg.rank, cfg.job.identity(0)),
                                 connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)


AGREEMENT_PORT_OFFSET = 80      # above the server cores' ports (port + core, at most 64)


def train(cfg: WorkerConfig, writer) -> dict[str, Any]:
    from hosts.phub.timing import PhubTiming  # noqa: PLC0415
    model = make_model(cfg)
    rec = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.rank if cfg.trace_rank is None else cfg.trace_rank,
                        world=cfg.trace_world,
                        tdf=model.time_scale, device=model.describe(), workload="phub", role="worker",
                        algorithm=cfg.algorithm)
    model.trace = rec
    spec, world = cfg.job.optimizer, cfg.job.world
    client = coll = agreement = None
    n_cal = cfg.calibration["rounds"] * cfg.calibration["iterations"] if cfg.calibration else 0
    if cfg.algorithm in ("phub", "sharded_ps"):
        from hosts.phub.client import PHubClient  # noqa: PLC0415
        shards = [HostAddr(s["name"], s["ip"]) for s in cfg.shards] if cfg.shards else None
        client = PHubClient.connect(server=None if shards else cfg.server, shards=shards, port=cfg.port,
                                    cores=len(shards) if shards else cfg.cores, job=cfg.job,
                                    host=cfg.host, my_ip=cfg.ip, rank=cfg.rank, weights=model.weights,
                                    trace=rec if cfg.trace else None, trace_from=n_cal,
                                    connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
        if cfg.calibration:
            agreement = open_agreement(cfg)
    else:
        coll = open_baseline(cfg)
    ina = getattr(coll, "client", None)          # the INA client (switch): its timers learn the dilation
    # Without a fixed scale (ina.scale_exp) every in-switch allreduce of floats first agrees on
    # one (a one-value MAX pass): the trace says so, and the network model charges that pass.
    scale_round = {"scale_round": True} if ina is not None and ina.scale_exp is None else {}
    timing = PhubTiming(cfg.calibration, cfg.network_dilation, cfg.rank, world, model,
                        ina.expect_delay if ina is not None else (lambda seconds: None))
    timing.dilate_fixed()
    # Round 0 must not wait on a segment the lossy network took before rank 0's hold:
    # PHub's pushes wait for nobody, so its agreement ring is the barrier that keeps
    # them behind the hold, and rank 0 sends the starting weights only after it (a
    # push queues behind them on the same TCP connection, and one retransmission
    # timeout there reads as a slow emulator in a one-op round 0). A baseline's first
    # allreduce waits for rank 0 anyway and every layer is measured; the wide PS
    # serves a fixed schedule with no barrier in it.
    timing.begin(agreement.barrier if agreement is not None else None)
    if client is not None and cfg.rank == 0:
        client.init_weights()
    agree = (agreement or coll).allreduce if cfg.calibration else None
    momentum = [np.zeros_like(w) for w in model.weights] if spec.has_state else None
    total = n_cal + cfg.warmup + cfg.iterations
    spans: list[tuple[float, float, int]] = []         # the baselines' ops of the calibration round
    round_start, calibration = 0, None
    try:
        for it in range(total):
            t_it = time.perf_counter()
            exit_at = cfg.exit_at if cfg.exit_at and cfg.exit_at.get("iteration") == it else None
            if client is not None:
                wait = (lambda k: client.wait_key(k, it - 1)) if it > 0 else None
                pushed = [0]

                def push(k, g, _it=it):
                    client.push(k, g, _it)
                    pushed[0] += 1
                    if exit_at and pushed[0] >= exit_at.get("layers", 1):
                        log.error("fault injection: exiting mid-iteration %d after %d layer(s)", _it, pushed[0])
                        os._exit(1)
                loss = model.iteration(it, wait, push)
                comm_s = None
            else:
                loss = model.iteration(it, None, None)
                t0 = time.perf_counter()
                prev = None
                for k in reversed(range(len(model.weights))):
                    c0 = time.perf_counter()
                    gsum = coll.allreduce(model.grads[k])
                    c1 = time.perf_counter()
                    if it >= n_cal:
                        node = rec.comm(c0, c1, op="allreduce",
                                        algo={"wide_ps": "ps"}.get(cfg.algorithm, cfg.algorithm),
                                        values=gsum.size, key=k, iteration=it, **scale_round)
                        # The worker blocks on each allreduce before it starts the next: the
                        # next one depends on it. Without this dep the projector ran a whole
                        # iteration's allreduces at once (sharing only link time), and the
                        # emulated ring read 1.3-1.7x its projection (docs/phub.md).
                        if prev is not None:
                            rec.nodes[node]["deps"].append(prev)
                        rec.waited(node)
                        prev = node
                    else:
                        spans.append((c0, c1, int(gsum.size)))
                    opt_step(spec, model.weights[k], None if momentum is None else momentum[k],
                             np.asarray(gsum, np.float32), world)
                comm_s = time.perf_counter() - t0
            if client is not None and (it == total - 1 or timing.round_ends_at(it)):
                for k in range(len(model.weights)):
                    for n in client.wait_key(k, it):
                        rec.waited(n)
            if timing.round_ends_at(it):
                ops = client.spans(range(round_start, it + 1)) if client is not None else spans
                tdf = timing.end_round(ops, agree)
                if client is not None and cfg.rank == 0:
                    client.send_tdf(tdf)
                spans, round_start = [], it + 1
                if it == n_cal - 1:            # calibrated: the measured run starts clean
                    calibration = timing.finish(cfg.host)
                    rec.reset()
                    rec.set_tdf(tdf)
                    writer.write(calibration)
            writer.write({"type": "iter", "host": cfg.host, "rank": cfg.rank, "job": cfg.job.job, "iter": it,
                          "warmup": it < n_cal + cfg.warmup, "calibration": it < n_cal,
                          "iter_s": time.perf_counter() - t_it, "comm_s": comm_s, "loss": loss,
                          "t_end": time.perf_counter()})
    finally:
        if agreement is not None:
            agreement.close()
        if client is not None:
            client.close()
        elif coll is not None:
            if cfg.algorithm == "wide_ps":
                try:
                    coll.allreduce(np.zeros(0, np.float32))      # end of stream for the PS
                finally:
                    coll.close()
            else:
                coll.close()
    rec.close()
    digest = model.digest()
    ina_stats = ina.stats.summary() if ina is not None else None
    np.save(cfg.out.replace(".jsonl", ".weights.npy"), np.concatenate([w.reshape(-1) for w in model.weights]))
    # steps: the optimizer steps the final weights went through (calibration's included),
    # what the workload's replay of the plain PS needs (hosts/phub/reference.py)
    return {"weights_sha1": digest, "steps": total, "device": model.validity(), "accuracy": model.accuracy(),
            "tdf": model.time_scale, "calibrated": calibration is not None,
            "network_dilated": cfg.network_dilation is not None, "ina": ina_stats}


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, writer, log_ = program.start("phub.worker", __doc__, _Loader, argv)
    except program.SetupFailed as e:
        return e.code
    start_gate.begin(cfg.start_at, cfg.host)
    error, info = None, {}
    server = start_server(cfg)
    try:
        info = train(cfg, writer)
        stop_server(server, cfg.timeout_s)
        server = None
        return 0
    except (NetError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        log_.error("%s", error)
        return program.EXIT_NET
    except CalibrationRefused as e:
        error = f"{type(e).__name__}: {e}"
        log_.error("%s", error)
        return program.EXIT_REFUSED
    except BaseException as e:         # the summary must not say ok (the traceback follows)
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        if server is not None and server.poll() is None:
            server.terminate()           # our own child: training failed, its server stops too
            server.wait(10)
        writer.write({"type": "summary", "host": cfg.host, "rank": cfg.rank, "job": cfg.job.job,
                      "algorithm": cfg.algorithm, "ok": error is None, "error": error, **info})
        writer.close()


def start_server(cfg: WorkerConfig):
    """sharded_ps: this host's kvstore server (a child process, as MXNet's server runs
    beside the worker on its machine); None when the config names none."""
    if not cfg.serve:
        return None
    import subprocess  # noqa: PLC0415
    return subprocess.Popen([sys.executable, "-m", "hosts.phub.server", "--config", cfg.serve])


def stop_server(server, timeout_s: float) -> None:
    """Wait for the colocated server to end (it does once every worker sent END);
    NetError when it failed or did not end."""
    import subprocess  # noqa: PLC0415
    if server is None:
        return
    try:
        rc = server.wait(timeout_s)
    except subprocess.TimeoutExpired:
        server.terminate()
        server.wait(10)
        raise NetError(f"the colocated kvstore server did not end within {timeout_s:g} s") from None
    if rc != 0:
        raise NetError(f"the colocated kvstore server exited {rc} (its record says why)")


class _Loader:
    from_json = staticmethod(load_worker)


if __name__ == "__main__":
    sys.exit(main())
