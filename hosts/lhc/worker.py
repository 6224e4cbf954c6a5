"""LHC worker (and the PS of dense_ps): one gradient aggregation per iteration.

    python -m hosts.lhc.worker --config cfg.json

Algorithms (cfg.algorithm):
  lhc_switch    support bitmap OR-ed in the switch, then sketch ++ dense core
                SUM-ed in the switch (both int32/uint32 INA jobs); decode by peeling
  lhc_ring      the same, support as 4-bit counts and sketch summed by a host ring
                (the public code's NCCL way)
  dense_switch  the float gradient through in-switch aggregation (SwitchML-style)
  dense_ring    float32 ring allreduce;  dense_ps  a parameter server host
  dense_fixed_ring  the dense gradient in LHC's fixed point (exponent one-hots, then
                int32 values) over the host ring: what dense_switch sums, without a switch
  topk_ring     top-k with error feedback; indices + values allgathered over the ring
Per iteration: barrier (untimed), modeled backward compute, then the timed
aggregation (device steps paced by the modeled GPU, hosts/lhc/timing.py).
Rank 0 checks every result against the exact sum, computed from every
worker's regenerated gradient (LHC and dense_switch: bit for bit in fixed
point; dense_ps / dense_ring: bit for bit in float32 in the collective's own
summation order; top-k: against the sum of every worker's top-k with error
feedback, simulated). Every rank writes a digest of its result; `collect`
checks they are equal. A wrong result is logged and exits 1 (the point fails).

Output (JSON lines, cfg.out): "iter" per iteration, then "summary".
"""
from __future__ import annotations

import hashlib
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from hosts.common import program, start_gate
from hosts.common.calibration import CalibrationRefused
from hosts.common.config import Checker, ConfigError, HostAddr, InaSettings, Straggler, load_json_object
from hosts.common.tcp import NetError
from hosts.common.trace import TraceRecorder
from hosts.lhc import codec, rounds
from hosts.lhc.gradients import make_source
from hosts.common.network_dilation import parse_network_dilation
from hosts.common.hw_table import HwTable
from hosts.lhc.timing import LhcDevice, Timeline, calibrate, dilate_fixed

ALGORITHMS = ("lhc_switch", "lhc_ring", "dense_switch", "dense_ring", "dense_fixed_ring", "dense_ps", "topk_ring")
EXIT_OK, EXIT_WRONG = 0, 1
log = logging.getLogger("lhc")


@dataclass(frozen=True)
class LhcConfig:
    host: str
    role: str
    rank: int
    world: int
    algorithm: str
    peers: tuple[HostAddr, ...]
    ps: HostAddr | None
    port: int
    ina: InaSettings | None
    gradient: dict
    iterations: int
    warmup: int
    compute_ms: float
    topk_ratio: float
    sketch: dict
    device: dict
    straggler: Straggler | None
    start_at: float | None
    connect_timeout_s: float
    timeout_s: float
    trace: str | None
    out: str
    # time_scale auto: {"rounds", "iterations", "hw_table": {"values", "hw_s"}} (hosts/lhc/timing.py)
    calibration: dict | None = None
    # the soft switch's delay line (hosts.common.network_dilation), or None
    network_dilation: dict | None = None

    @classmethod
    def from_json(cls, source) -> "LhcConfig":
        data, where = load_json_object(source)
        c = Checker(data, where)
        v = dict(host=c.str("host"), role=c.str("role", ("worker", "ps")), rank=c.int("rank"),
                 world=c.int("world", lo=1), algorithm=c.str("algorithm", ALGORITHMS),
                 port=c.int("port", lo=1), iterations=c.int("iterations", lo=1),
                 warmup=c.int("warmup", lo=0), compute_ms=c.number("compute_ms", lo=0),
                 topk_ratio=c.number("topk_ratio", positive=True),
                 straggler=c.straggler("straggler"), start_at=c.number("start_at", lo=0, nullable=True),
                 connect_timeout_s=c.number("connect_timeout_s", positive=True),
                 timeout_s=c.number("timeout_s", positive=True), out=c.str("out"))
        peers = []
        for i, p in enumerate(data.get("peers") or []):
            h = c.host(p, f"peers[{i}]")
            if h:
                peers.append(h)
        if v["world"] is not None and len(peers) != v["world"]:
            c.error("peers", f"has {len(peers)} entries but world is {v['world']}")
        ok, raw_ps = c.value("ps", True)
        ps = c.host(raw_ps, "ps") if ok else None
        for key in ("gradient", "sketch", "device"):
            if not isinstance(data.get(key), dict):
                c.error(key, f"must be an object, got {data.get(key)!r}")
        trace = data.get("trace")
        if trace is not None and not isinstance(trace, str):
            c.error("trace", f"must be a path or null, got {trace!r}")
        algo = v["algorithm"]
        ina = InaSettings.parse(c, "switch" if algo in ("lhc_switch", "dense_switch") else None)
        if algo == "dense_ps" and ps is None:
            c.error("ps", "dense_ps needs the parameter server's {name, ip}")
        calibration = _parse_calibration(c)
        nd = parse_network_dilation(c)
        c.finish({*v, "peers", "ps", "ina", "gradient", "sketch", "device", "trace", "calibration",
                  "network_dilation"})
        return cls(peers=tuple(peers), ps=ps, ina=ina, gradient=data["gradient"], sketch=data["sketch"],
                   device=data["device"], trace=trace, calibration=calibration, network_dilation=nd, **v)

    @property
    def my_ip(self) -> str:
        return self.ps.ip if self.role == "ps" else self.peers[self.rank].ip

    def run_identity(self) -> dict[str, Any]:
        return {"world": self.world, "algorithm": self.algorithm, "iterations": self.iterations,
                "warmup": self.warmup, "gradient": self.gradient, "sketch": self.sketch,
                "port": self.port, "ina": None if self.ina is None else
                {"job_id": self.ina.job_id, "window": self.ina.window}}


def _parse_calibration(c: Checker) -> dict | None:
    if "calibration" not in c.data:
        return None
    ok, val = c.value("calibration", True)
    if not ok or val is None:
        return None
    good = (isinstance(val, dict) and set(val) == {"rounds", "iterations", "hw_table", "iteration_wall_s"}
            and all(isinstance(val[k], int) and not isinstance(val[k], bool) and val[k] >= 1
                    for k in ("rounds", "iterations"))
            and isinstance(val["hw_table"], dict) and set(val["hw_table"]) == {"values", "hw_s"}
            and isinstance(val["iteration_wall_s"], (int, float)) and val["iteration_wall_s"] > 0)
    if not good:
        c.error("calibration", f"must be null or {{rounds >= 1, iterations >= 1, hw_table: {{values, hw_s}}, "
                               f"iteration_wall_s > 0}}, got {val!r}")
        return None
    try:
        HwTable(val["hw_table"])
    except (TypeError, ValueError) as e:
        c.error("calibration.hw_table", str(e))
        return None
    return dict(val)


def open_collective(cfg: LhcConfig):
    from hosts.collectives import make_hello
    hello = make_hello(cfg.host, cfg.rank, cfg.run_identity())
    if cfg.algorithm in ("lhc_switch", "dense_switch"):
        from hosts.collectives.switch import SwitchAllreduce
        return SwitchAllreduce.connect(rank=cfg.rank, world=cfg.world, my_ip=cfg.my_ip, ina=cfg.ina,
                                       run=cfg.run_identity(), connect_timeout_s=cfg.connect_timeout_s,
                                       timeout_s=cfg.timeout_s)
    if cfg.algorithm == "dense_ps":
        from hosts.collectives.ps import PSWorker
        return PSWorker.connect(ps=cfg.ps, my_ip=cfg.my_ip, port_base=cfg.port, hello=hello,
                                connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    from hosts.lhc.hostcoll import IntRing
    return IntRing.connect(rank=cfg.rank, peers=cfg.peers, port_base=cfg.port, hello=hello,
                           connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)


def _ina(coll, vec: np.ndarray, op: str, what: str) -> np.ndarray:
    return coll._run(lambda: coll.client.wait(coll.client.submit(vec, op), timeout=coll.timeout_s), what)


def topk_kept(ratio: float, n: int) -> int:
    """Entries a topk_ring worker sends of n: the share `ratio` (workload.topk_ratio), at least one."""
    return max(1, int(round(ratio * n)))


def topk_block_values(k: int) -> int:
    """int32 words of one rank's allgathered block: k indices, then k float32 values."""
    return 2 * k


def topk_select(acc: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest |acc| (ties broken by index: deterministic)."""
    if k >= acc.size:
        return np.arange(acc.size, dtype=np.int32)
    idx = np.argpartition(-np.abs(acc), k - 1)[:k]
    return np.sort(idx).astype(np.int32)


def topk_contribution(acc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    idx = topk_select(acc, k)
    return idx, acc[idx].astype(np.float32)


def sum_topk(blocks: np.ndarray, k: int, n: int) -> np.ndarray:
    """Sum of every rank's (indices, values) in rank order: identical bits on every rank."""
    y = np.zeros(n, dtype=np.float32)
    for b in blocks:
        np.add.at(y, b[:k], b[k:].view(np.float32))
    return y


class Worker:
    def __init__(self, cfg: LhcConfig, writer):
        self.cfg, self.writer = cfg, writer
        self.src = make_source(cfg.gradient)
        self.n = self.src.size
        dev = dict(cfg.device)
        self.tl = Timeline(LhcDevice(**dev), TraceRecorder(
            cfg.trace, host=cfg.host, rank=cfg.rank, world=cfg.world,
            tdf=dev.get("time_scale", 1.0) if dev.get("type", "gpu") == "gpu" else 1.0,
            device=dev, workload="lhc", algorithm=cfg.algorithm, n=self.n))
        self.k = topk_kept(cfg.topk_ratio, self.n)
        self.residual = np.zeros(self.n, np.float32)
        self.ref_residuals = np.zeros((cfg.world, self.n), np.float32) if cfg.rank == 0 else None
        self.wrong = 0
        self.t0 = time.time()
        self.iters: list[dict] = []

    # -- one aggregation per algorithm: returns (result, info) -----------------
    def step(self, coll, g: np.ndarray) -> tuple[np.ndarray, dict]:
        a, tl, W = self.cfg.algorithm, self.tl, self.cfg.world
        info: dict[str, Any] = {"encode_s": 0.0, "decode_s": 0.0}
        if a in ("lhc_switch", "lhc_ring"):
            sw = a == "lhc_switch"
            r = rounds.LhcRound(W, support="or" if sw else "nibbles", **self.cfg.sketch)
            msg, t_sup = tl.run_step("support", lambda: r.support_message(g), lambda _: {"n": self.n})
            if sw:
                agg, t1 = tl.comm(lambda: _ina(coll, msg, "or", "support OR"), algo="switch",
                                  values=msg.size, phase="support")
            else:
                agg, t1 = tl.comm(lambda: coll.allreduce_int32(msg), algo="ring", values=msg.size,
                                  phase="support")
            pay, t_enc = tl.run_step("encode", lambda: r.encode(agg, g),
                                     lambda _: {"n": self.n, "union": r.plan.union, "rounds": len(r.plan.rounds)})
            if sw:
                tot, t2 = tl.comm(lambda: _ina(coll, pay, "sum", "sketch SUM"), algo="switch",
                                  values=pay.size, phase="sketch")
            else:
                tot, t2 = tl.comm(lambda: coll.allreduce_int32(pay), algo="ring", values=pay.size,
                                  phase="sketch")
            y, t_dec = tl.run_step("decode", lambda: r.decode(tot),
                                   lambda _: {"n": self.n, "union": r.plan.union, "rounds": len(r.plan.rounds)})
            wire = r.wire()
            info.update(wire, encode_s=t_sup + t_enc, decode_s=t_dec, comm_s=t1 + t2,
                        comm_support_s=t1, comm_sketch_s=t2,
                        values_sent=wire["support_values"] + wire["sketch_values"] + wire["core_values"],
                        int_sum=r.int_sum, k=r.k)
            return y, info
        if a == "topk_ring":
            acc = g + self.residual
            (idx, vals), t_enc = tl.run_step("topk", lambda: topk_contribution(acc, self.k),
                                             lambda _: {"n": self.n, "k": self.k})
            self.residual = acc.copy()
            self.residual[idx] = 0.0
            block = np.concatenate([idx, vals.view(np.int32)])      # topk_block_values(k) words
            blocks, t1 = tl.comm(lambda: coll.allgather(block), algo="ring", values=block.size, phase="allgather",
                                 op="allgather")
            y, t_dec = tl.run_step("topk_sum", lambda: sum_topk(blocks, self.k, self.n),
                                   lambda _: {"n": self.n, "k": self.k, "world": W})
            info.update(encode_s=t_enc, decode_s=t_dec, comm_s=t1, values_sent=block.size * (W - 1))
            return y, info
        if a == "dense_fixed_ring":
            from hosts.lhc import scale
            onehot, t0 = tl.comm(lambda: coll.allreduce_int32(scale.exponent_bits(g).astype(np.int32)),
                                 algo="ring", values=scale.EXP_BITS, phase="exponent")
            k = scale.scale_for(scale.max_exponent(onehot), W)
            tot, t1 = tl.comm(lambda: coll.allreduce_int32(scale.quantize(g, k, W)), algo="ring",
                              values=self.n, phase="dense")
            info.update(comm_s=t0 + t1, values_sent=scale.EXP_BITS + self.n, int_sum=tot, k=k)
            return scale.dequantize(tot, k).astype(np.float32), info
        algo = {"dense_switch": "switch", "dense_ring": "ring", "dense_ps": "ps"}[a]
        # Float sums in the switch agree on a fixed-point scale first (a MAX pass): charged.
        y, t1 = tl.comm(lambda: coll.allreduce(g), algo=algo, values=self.n, phase="dense",
                        scale_round=a == "dense_switch")
        info.update(comm_s=t1, values_sent=self.n)
        return np.asarray(y, dtype=np.float32), info

    # -- the exact reference (rank 0, untimed) ---------------------------------
    def check(self, it: int, y: np.ndarray, info: dict) -> tuple[bool, float | None]:
        if self.cfg.rank != 0:
            return True, None
        a, W = self.cfg.algorithm, self.cfg.world
        grads = [self.src.gradient(r, it) for r in range(W)]
        exact = np.sum(np.asarray(grads, dtype=np.float64), axis=0)
        if a in ("lhc_switch", "lhc_ring", "dense_switch", "dense_fixed_ring"):
            ref_int, k = rounds.exact_fixed_sum(grads)
            if a != "dense_switch" and not np.array_equal(info["int_sum"].astype(np.int64), ref_int):
                return False, None
            ref = rounds.scale.dequantize(ref_int, k)
        elif a == "dense_ps":
            ref = grads[0].copy()
            for gr in grads[1:]:
                ref += gr
        elif a == "dense_ring":
            from hosts.collectives.ring import chunk_bounds
            ref = np.empty(self.n, np.float32)
            for c, (lo, hi) in enumerate(chunk_bounds(self.n, W)):
                acc = grads[c][lo:hi].copy()
                for j in range(1, W):
                    acc = grads[(c + j) % W][lo:hi] + acc
                ref[lo:hi] = acc
        else:  # topk_ring: every worker's top-k with error feedback, simulated
            blocks = []
            for r, gr in enumerate(grads):
                acc = gr + self.ref_residuals[r]
                idx, vals = topk_contribution(acc, self.k)
                self.ref_residuals[r] = acc
                self.ref_residuals[r][idx] = 0.0
                blocks.append(np.concatenate([idx, vals.view(np.int32)]))
            ref = sum_topk(np.stack(blocks), self.k, self.n)
        err = float(np.linalg.norm(y.astype(np.float64) - exact) / max(np.linalg.norm(exact), 1e-30))
        return bool(np.array_equal(y, ref)), err

    def backward(self, it: int) -> float:
        """Modeled backward pass (dilated), slowed for a straggler; stall delay_ms on top."""
        cfg, s = self.cfg, self.cfg.straggler
        late = s is not None and time.time() - self.t0 >= s.start_s
        hw = cfg.compute_ms / 1e3 * (s.slowdown if late else 1.0)
        t0 = time.perf_counter()
        if hw > 0:
            self.tl.modeled("backward", hw)
        if late and s.delay_ms > 0:
            time.sleep(s.delay_ms / 1e3)
        return time.perf_counter() - t0

    def run(self) -> int:
        cfg = self.cfg
        log.info("worker rank %d/%d, %s, gradient %s (%d values), %d+%d iterations", cfg.rank, cfg.world,
                 cfg.algorithm, self.src.describe(), self.n, cfg.warmup, cfg.iterations)
        coll = self._coll = open_collective(cfg)
        try:
            start_gate.begin(cfg.start_at, cfg.host)
            coll.barrier()
            self.time_setup(coll)
            self.t0 = time.time()
            for it in range(cfg.warmup + cfg.iterations):
                g = self.src.gradient(cfg.rank, it)
                coll.barrier()
                t_it = time.perf_counter()
                bwd = self.backward(it)
                t_agg = time.perf_counter()
                y, info = self.step(coll, g)
                t_end = time.perf_counter()
                ok, err = self.check(it, y, info)
                if not ok:
                    self.wrong += 1
                    log.error("iteration %d: the aggregated gradient is NOT the exact sum", it)
                apply = getattr(self.src, "apply", None)     # a training run: SGD with the sum
                trained = apply(y, it, cfg.rank) if apply is not None else {}
                rec = {"type": "iter", "host": cfg.host, "rank": cfg.rank, "algorithm": cfg.algorithm,
                       "iter": it, "warmup": it < cfg.warmup, "iter_s": t_end - t_it, "backward_s": bwd,
                       "agg_s": t_end - t_agg, "ok": ok, "checked": cfg.rank == 0, "rel_err": err,
                       "n": self.n, "digest": hashlib.blake2b(y.tobytes(), digest_size=8).hexdigest(),
                       **trained, **{k: v for k, v in info.items() if k not in ("int_sum",)}}
                self.writer.write(rec)
                self.iters.append(rec)
            if cfg.algorithm == "dense_ps":
                coll.allreduce(np.zeros(0, np.float32))      # end-of-stream for the PS
        finally:
            self.tl.trace.set_tdf(self.tdf)
            self.tl.trace.header["device"] = self.tl.device.describe()      # the TDF it ran at
            self.tl.trace.close()
            coll.close()
        self.summary(None)
        if self.wrong:
            log.error("%d iteration(s) gave a wrong sum", self.wrong)
            return EXIT_WRONG
        log.info("done: every checked sum exact" if cfg.rank == 0 else "done")
        return EXIT_OK

    @property
    def tdf(self) -> float:
        return self.tl.device.time_scale if self.tl.device.type == "gpu" else 1.0

    def time_setup(self, coll) -> None:
        """time_scale auto: calibrate on LHC's own aggregations (they use gradients of
        iterations 0.. but no check; top-k's error feedback starts again after);
        a fixed TDF on a dilatable network: dilate it."""
        cfg = self.cfg
        client = getattr(coll, "client", None)          # the INA client (in-switch algorithms)
        expect_delay = client.expect_delay if client is not None else (lambda seconds: None)
        if cfg.calibration is None:
            dilate_fixed(self.tl, cfg.network_dilation, cfg.rank, expect_delay)
            return

        def run_once(i: int) -> None:
            g = self.src.gradient(cfg.rank, i)
            coll.barrier()
            self.step(coll, g)

        tdf, rec = calibrate(self.tl, cfg.calibration, cfg.network_dilation, host=cfg.host, rank=cfg.rank,
                             world=cfg.world, run_once=run_once,
                             agree=lambda v: np.asarray(coll.allreduce(v.astype(np.float32)), np.float64),
                             expect_delay=expect_delay)
        self.residual[:] = 0.0
        stats = getattr(coll, "stats", None)
        rec["collective_stats"] = stats() if callable(stats) else None   # the run's = summary's - these
        self.calibration = rec
        self.writer.write(rec)
        log.info("calibrated: TDF %g (%s)", tdf, "network dilated" if rec["network_dilated"] else "undilated")

    def summary(self, error: str | None) -> None:
        stats = getattr(getattr(self, "_coll", None), "stats", None)
        self.writer.write({"type": "summary", "host": self.cfg.host, "rank": self.cfg.rank,
                           "algorithm": self.cfg.algorithm, "ok": error is None and not self.wrong,
                           "error": error, "wrong_iterations": self.wrong, "n": self.n,
                           "gradient": self.src.describe(), "device": self.tl.device.validity(),
                           "tdf": self.tdf, "calibrated": self.cfg.calibration is not None,
                           "network_dilated": self.cfg.network_dilation is not None and self.tl.device.type == "gpu",
                           "collective_stats": stats() if callable(stats) else None,
                           "calibration_stats": (getattr(self, "calibration", None) or {}).get("collective_stats")})


def run_ps(cfg: LhcConfig, writer) -> int:
    from hosts.collectives import make_hello
    from hosts.collectives.ps import ParameterServer
    ps = ParameterServer.accept(peers=cfg.peers, my_ip=cfg.ps.ip, port_base=cfg.port,
                                hello=make_hello(cfg.host, cfg.rank, cfg.run_identity()),
                                connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
    served = 0
    try:
        start_gate.begin(cfg.start_at, cfg.host)
        ps.barrier()
        cc = cfg.calibration
        for _ in range(cc["rounds"] if cc else 0):      # the workers' calibration schedule
            for _ in range(cc["iterations"]):
                ps.barrier()
                ps.reduce_next()
            ps.reduce_next()                           # the agreement
        for _ in range(cfg.warmup + cfg.iterations):
            ps.barrier()
            if ps.reduce_next() == 0:
                raise NetError("a worker ended early (end-of-stream before the last iteration)")
            served += 1
        if ps.reduce_next() != 0:
            raise NetError("workers sent more tensors than iterations")
    finally:
        ps.close()
    writer.write({"type": "summary", "host": cfg.host, "role": "ps", "ok": True, "served": served,
                  "bytes_received": ps.bytes_received, "bytes_sent": ps.bytes_sent})
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    global log
    try:
        cfg, writer, log = program.start("lhc", __doc__, LhcConfig, argv)
    except program.SetupFailed as e:
        return e.code
    try:
        if cfg.role == "ps":
            return run_ps(cfg, writer)
        w = Worker(cfg, writer)
        try:
            return w.run()
        except (NetError, codec.DecodeError) as e:
            log.error("%s", e)
            w.summary(str(e))
            return program.EXIT_NET if isinstance(e, NetError) else EXIT_WRONG
        except CalibrationRefused as e:
            log.error("%s: %s", type(e).__name__, e)
            w.summary(f"{type(e).__name__}: {e}")
            return program.EXIT_REFUSED
    except NetError as e:
        log.error("%s", e)
        return program.EXIT_NET
    except (ValueError, ConfigError) as e:
        log.error("bad config: %s", e)
        return program.EXIT_CONFIG
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
