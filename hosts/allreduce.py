"""Host allreduce baselines: ring allreduce and a parameter server over TCP.

    python -m hosts.allreduce --config cfg.json

One process per host (role "worker" on w1..wN; role "ps" on the PS host for
algorithm "ps"). Per size and iteration a worker regenerates its deterministic
float32 tensor, waits at a barrier (like the OSU benchmarks, so verification
work and skew between iterations are not charged to the next allreduce), sleeps
its modeled compute (a straggler sleeps longer, which the others then see as
waiting inside their allreduce, as in synchronous training), times only the
allreduce call, and checks the result against a numpy reference.

Output (JSON lines in cfg.out): one "allreduce" record per (size, iteration),
then one "summary" record. Exit codes: 0 ok, 1 a result was wrong, 2 bad
config or output path, 3 network failure or timeout (peer unreachable, died,
hung, or configs disagree).
"""
from __future__ import annotations

import hashlib
import logging
import sys
import time

from hosts.collectives import Collective, make_hello
from hosts.collectives.ps import ParameterServer, PSWorker
from hosts.collectives.ring import RingAllreduce
from hosts.common import program, start_gate
from hosts.common.config import AllreduceConfig, ps_port, ring_port
from hosts.common.results import JsonlWriter, finite_or_none, latency_summary
from hosts.common.tcp import NetError
from hosts.common.tensors import check_allreduce, make_tensor, tolerance

EXIT_OK, EXIT_WRONG_RESULT = 0, 1
EXIT_CONFIG, EXIT_NET = program.EXIT_CONFIG, program.EXIT_NET

log = logging.getLogger("allreduce")


def open_collective(cfg: AllreduceConfig, hello: dict) -> Collective:
    if cfg.algorithm == "switch":  # [INA] in-network aggregation
        from hosts.collectives.switch import SwitchAllreduce
        return SwitchAllreduce.connect(rank=cfg.rank, world=cfg.world, my_ip=cfg.my_ip, ina=cfg.ina,
                                       run=cfg.run_identity(), connect_timeout_s=cfg.connect_timeout_s,
                                       timeout_s=cfg.timeout_s)
    if cfg.algorithm == "ring":
        return RingAllreduce.connect(rank=cfg.rank, peers=cfg.peers, port_base=cfg.port, hello=hello,
                                     connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    return PSWorker.connect(ps=cfg.ps, my_ip=cfg.my_ip, port_base=cfg.port, hello=hello,
                            connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)


class WorkerRun:
    """State of one worker's benchmark, so a failure can still write a summary."""

    def __init__(self, cfg: AllreduceConfig, writer: JsonlWriter):
        self.cfg, self.writer = cfg, writer
        self.latencies: dict[int, list[float]] = {}
        self.failed_iterations = 0
        self.max_rel_err = 0.0
        self.t0_wall = time.time()
        self.coll: Collective | None = None

    def modeled_compute_ms(self) -> float:
        cfg, s = self.cfg, self.cfg.straggler
        if s is not None and time.time() - self.t0_wall >= s.start_s:
            return cfg.compute_ms * s.slowdown + s.delay_ms
        return cfg.compute_ms

    def run(self) -> int:
        cfg = self.cfg
        if cfg.algorithm == "ring":
            where = f"ring port {ring_port(cfg.port, cfg.rank)}"
        elif cfg.algorithm == "switch":  # [INA]
            where = f"switch {cfg.ina.switch_ip}:{cfg.ina.switch_port}, job {cfg.ina.job_id}"
        else:
            where = f"PS {cfg.ps.name} at {cfg.ps.ip}:{ps_port(cfg.port)}"
        log.info("worker rank %d/%d, %s, %s, sizes %s, %d+%d iterations",
                 cfg.rank, cfg.world, cfg.algorithm, where, list(cfg.sizes), cfg.warmup, cfg.iterations)
        coll = self.coll = open_collective(cfg, make_hello(cfg.host, cfg.rank, cfg.run_identity()))
        try:
            log.info("connected")
            begun = start_gate.begin(cfg.start_at, cfg.host)
            coll.barrier()
            self.t0_wall = begun if begun is not None else time.time()
            for size in cfg.sizes:
                self.run_size(coll, size)
        finally:
            coll.close()
        ok = self.failed_iterations == 0
        self.write_summary(ok, None)
        if not ok:
            log.error("%d allreduce result(s) were wrong (max relative error %.3g > tolerance %.3g)",
                      self.failed_iterations, self.max_rel_err, tolerance(cfg.world))
            return EXIT_WRONG_RESULT
        log.info("done, all results correct (max relative error %.3g)", self.max_rel_err)
        return EXIT_OK

    def run_size(self, coll: Collective, size: int) -> None:
        cfg = self.cfg
        lat = self.latencies.setdefault(size, [])
        for it in range(cfg.warmup + cfg.iterations):
            x = make_tensor(cfg.seed, cfg.rank, size, it)
            coll.barrier()
            compute_ms = self.modeled_compute_ms()
            if compute_ms > 0:
                time.sleep(compute_ms / 1e3)
            t = time.perf_counter()
            y = coll.allreduce(x)
            latency = time.perf_counter() - t
            ok, err = check_allreduce(y, cfg.seed, cfg.world, size, it)
            self.max_rel_err = max(self.max_rel_err, err)
            warmup = it < cfg.warmup
            if not ok:
                self.failed_iterations += 1
                log.error("size %d iter %d: wrong sum, relative error %.3g > %.3g",
                          size, it, err, tolerance(cfg.world))
            if not warmup:
                lat.append(latency)
            self.writer.write({
                "type": "allreduce", "host": cfg.host, "rank": cfg.rank, "algorithm": cfg.algorithm,
                "size": size, "bytes": size * 4, "iter": it, "warmup": warmup, "latency_s": latency,
                "ok": ok, "max_rel_err": finite_or_none(err), "compute_ms": compute_ms,
                # Lets a reader check that all ranks got bit-identical results.
                "digest": hashlib.blake2b(y.tobytes(), digest_size=8).hexdigest(),
            })
        s = latency_summary(lat, size * 4)
        log.info("size %d: p50 %.3f ms, p99 %.3f ms, %.3f Gbit/s", size, s["p50_s"] * 1e3,
                 s["p99_s"] * 1e3, s["goodput_gbps"] or 0.0)

    def write_summary(self, ok: bool, error: str | None) -> None:
        cfg = self.cfg
        self.writer.write({
            "type": "summary", "host": cfg.host, "role": "worker", "rank": cfg.rank,
            "algorithm": cfg.algorithm, "world": cfg.world, "ok": ok, "error": error,
            "failed_iterations": self.failed_iterations,
            "max_rel_err": finite_or_none(self.max_rel_err), "tolerance": tolerance(cfg.world),
            "started_at": self.t0_wall,
            # Algorithm bandwidth: tensor bytes / p50 latency (see latency_summary).
            "per_size": {str(size): latency_summary(lat, size * 4) for size, lat in self.latencies.items()},
            # [INA] transport counters (retransmissions, ...) of collectives that have them
            "transport": self.coll.stats() if hasattr(self.coll, "stats") else None,
        })


class PSRun:
    def __init__(self, cfg: AllreduceConfig, writer: JsonlWriter):
        self.cfg, self.writer = cfg, writer
        self.ps: ParameterServer | None = None
        self.served: dict[int, int] = {}

    def run(self) -> int:
        cfg = self.cfg
        log.info("parameter server for %d workers on %s:%d", cfg.world, cfg.ps.ip, ps_port(cfg.port))
        self.ps = ParameterServer.accept(peers=cfg.peers, my_ip=cfg.ps.ip, port_base=cfg.port,
                                         hello=make_hello(cfg.host, cfg.rank, cfg.run_identity()),
                                         connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
        try:
            log.info("all %d workers connected", cfg.world)
            begun = start_gate.begin(cfg.start_at, cfg.host)
            self.ps.barrier()
            t0 = begun if begun is not None else time.time()
            for size in cfg.sizes:
                for _ in range(cfg.warmup + cfg.iterations):
                    self.ps.barrier()
                    # A straggling PS only adds its fixed delay: it has no modeled compute.
                    s = cfg.straggler
                    delay = s.delay_ms / 1e3 if s is not None and time.time() - t0 >= s.start_s else 0.0
                    self.ps.reduce_once(size, delay)
                    self.served[size] = self.served.get(size, 0) + 1
        finally:
            self.ps.close()
        self.write_summary(True, None)
        log.info("done: served %d allreduces, received %d bytes",
                 sum(self.served.values()), self.ps.bytes_received)
        return EXIT_OK

    def write_summary(self, ok: bool, error: str | None) -> None:
        cfg, ps = self.cfg, self.ps
        self.writer.write({
            "type": "summary", "host": cfg.host, "role": "ps", "algorithm": cfg.algorithm,
            "world": cfg.world, "ok": ok, "error": error,
            "bytes_received": ps.bytes_received if ps else 0,
            "bytes_sent": ps.bytes_sent if ps else 0,
            "iterations_served": sum(self.served.values()),
            "per_size": {str(size): {"iterations_served": n, "bytes_received": n * size * 4 * cfg.world}
                         for size, n in self.served.items()},
        })


def main(argv: list[str] | None = None) -> int:
    global log
    try:
        cfg, writer, log = program.start("allreduce", __doc__, AllreduceConfig, argv)
    except program.SetupFailed as e:
        return e.code
    job = PSRun(cfg, writer) if cfg.role == "ps" else WorkerRun(cfg, writer)
    try:
        return job.run()
    except NetError as e:
        log.error("%s", e)
        job.write_summary(False, str(e))
        return EXIT_NET
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
