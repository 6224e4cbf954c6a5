"""P4SGD worker (and parameter server) program: GLM training over an allreduce.

    python -m hosts.p4sgd --config cfg.json

Roles:
  worker  mode "model_parallel" (P4SGD): owns a column block of the features
          (balanced by nnz); per micro-batch it allreduces len(micro-batch)
          partial dot products and updates only its model slice. Up to
          `pipeline_depth` micro-batches are in flight (forward-communication-
          backward pipeline; it only overlaps with an asynchronous collective).
          mode "data_parallel" (baseline): a full replica; each step takes its
          share of a global batch of `batch` samples and allreduces the
          D-dimensional gradient.
  ps      the parameter server host of collective "ps": serves the exact
          sequence of allreduces the workers will issue.

Collectives: "switch" (hosts.ina InaClient over UDP, in-network SUM), "ring"
and "ps" (hosts.collectives over TCP, blocking, wrapped as async).

Time: the device model (hosts.glm.devices) sleeps for its modeled compute,
multiplied by `time_scale` (time dilation: the emulated network is ~100x slower
than a Tofino + FPGA NIC round trip, so compute is slowed by the same factor to
keep the compute:communication ratio). Every time this program reports is
emulated wall-clock time, i.e. dilated by `dilation` (recorded in each record).

Output (JSON lines in cfg.out): "start", one "iter" per iteration (compute,
exposed communication, iteration time, per-allreduce latencies), one "snapshot"
per model snapshot, then "validity" and "summary". Model snapshots go to
<out stem>.snapshots.npy (rows = snapshots), the final model slice/replica to
<out stem>.model.npy. Nothing is evaluated over the network during training;
the runtime evaluates snapshots offline.

Exit codes: 0 ok, 1 training error (e.g. fixed-point overflow), 2 bad config
or output path, 3 network failure or timeout.
"""
from __future__ import annotations

import os

from testbed.process_env import one_blas_thread

# Before numpy loads (also when run by hand, without the runner's host_env): BLAS
# worker threads busy-wait on the cores every emulated host shares.
one_blas_thread(os.environ)

import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from hosts.common import program, start_gate  # noqa: E402
from hosts.common.calibration import CalibrationRefused  # noqa: E402
from hosts.common.config import ps_port  # noqa: E402
from hosts.common.results import JsonlWriter  # noqa: E402
from hosts.common.tcp import NetError  # noqa: E402
from hosts.common.trace import TraceRecorder  # noqa: E402
from hosts.ina.transport import InaError  # noqa: E402
from hosts.glm.worker_device import WorkerDevice, device_validity  # noqa: E402,F401 (re-exported)
# Config and collectives live beside the GLM worker's other parts; re-exported
# for the tests and the workload that know them as hosts.p4sgd.X.
from hosts.glm.p4sgd_config import (COLLECTIVES, GLMS, MODES, P4sgdConfig,  # noqa: E402,F401
                                    allreduce_schedule, minibatch_sizes, out_paths,
                                    starts_after_dilation, xrt_calls_path)
from hosts.glm.p4sgd_comm import Comm, TimedAllreduce, open_comm, switch_scale_exp  # noqa: E402,F401

EXIT_OK, EXIT_TRAINING = 0, 1
EXIT_CONFIG, EXIT_NET = program.EXIT_CONFIG, program.EXIT_NET

log = logging.getLogger("p4sgd")


# ============================================================ worker
class Worker:
    def __init__(self, cfg: P4sgdConfig, writer: JsonlWriter):
        from hosts.glm.models import get_model

        self.cfg, self.writer = cfg, writer
        self.model = get_model(cfg.glm, cfg.l2)
        self.kernel = self._open_kernel()
        measured = cfg.device.get("type", "cpu") == "cpu" or (self.kernel is not None and not self.kernel.dry_run)
        self.dilation = 1.0 if measured else float(cfg.device.get("time_scale", 1.0))
        self.trace = TraceRecorder(cfg.trace, host=cfg.host, rank=cfg.rank, world=cfg.world,
                                   tdf=self.dilation, device=dict(cfg.device), workload="p4sgd",
                                   mode=cfg.mode, collective=cfg.collective,
                                   pipeline_depth=cfg.pipeline_depth) if cfg.trace else None
        self.device = self._new_device(self.dilation)
        self.calibration: dict[str, Any] | None = None
        t = time.perf_counter()
        self.ds = load_point_dataset(cfg)
        self.load_s = time.perf_counter() - t
        self.snap_path, self.model_path = out_paths(cfg.out)
        self.snapshots: list[np.ndarray] = []
        self.iterations = self.samples = 0
        self.train_s = 0.0
        self.cpu_s = 0.0               # this process's CPU time (user + sys) while training
        self.x: np.ndarray | None = None
        self.part = (0, self.ds.n_features)
        self.timed: TimedAllreduce | None = None
        self.comm: Comm | None = None

    def _open_kernel(self):
        """The U280 kernel adapter when the config names one (a real run: pyxrt must
        import, else XrtUnavailable, a config error), else None (modeled device)."""
        if self.cfg.xrt is None:
            return None
        from hosts.glm.u280_xrt import U280XrtAdapter

        x = self.cfg.xrt
        return U280XrtAdapter(x["xclbin"], x["device_index"], x["kernel_name"], dry_run=x["dry_run"])

    def _new_device(self, time_scale: float) -> WorkerDevice:
        from hosts.glm.devices import make_device

        if self.kernel is not None and not self.kernel.dry_run:
            # A real card: its measured kernel time, not the model (no dilation).
            from hosts.glm.u280_xrt import XrtKernelDevice
            return WorkerDevice(XrtKernelDevice(self.kernel), self.cfg.straggler, self.trace)
        spec = dict(self.cfg.device)
        if spec.get("type", "cpu") != "cpu":
            spec["time_scale"] = time_scale
        return WorkerDevice(make_device(spec), self.cfg.straggler, self.trace)

    def _attach(self) -> None:
        """Wire device and collective together (again after calibration)."""
        self.device.idle = self.comm.idle
        # Realize the modeled compute before each send: the device sleeps in batches
        # (sleep granularity), and unrealized debt would let a worker's partial sums
        # leave before its forward pass "finished", misaligning workers in lock-step.
        self.timed = TimedAllreduce(self.comm, before_send=self.device.flush, trace=self.trace,
                                    algo=self.cfg.collective, after_wait=self.device.mark,
                                    scale_round=self.cfg.collective == "switch" and switch_scale_exp(self.cfg) is None)

    # -- data -------------------------------------------------------------
    def prepare(self) -> None:
        from hosts.glm.partition import partition_features, slice_dataset

        if self.cfg.mode == "model_parallel":
            part = partition_features(self.ds, self.cfg.world, self.cfg.balance)
            self.part = part.ranges[self.cfg.rank]
            self.X = slice_dataset(self.ds, self.part)
            self.imbalance = part.imbalance
        else:
            self.X, self.imbalance = self.ds.X, 1.0
        self.x = np.zeros(self.part[1] - self.part[0])
        if self.kernel is not None:   # samples, labels and the zero model into the card's HBM
            self.kernel.load(self.X, self.ds.y, None, self.cfg.micro_batch, self.cfg.glm)

    # -- main loop -------------------------------------------------------
    def run(self, comm: Comm | None = None) -> int:
        """Train; `comm` replaces the configured collective (in-process tests)."""
        cfg = self.cfg
        self.prepare()
        if self.trace is not None:   # what the projector needs to rescale compute to other worker counts
            self.trace.header.update(n_features=self.ds.n_features, n_samples=self.ds.n_samples,
                                     part=list(self.part), batch=cfg.batch, micro_batch=cfg.micro_batch)
        log.info("%s rank %d/%d, %s over %s, features %d..%d of %d, %d samples, device %s x%g",
                 cfg.mode, cfg.rank, cfg.world, cfg.glm, cfg.collective, self.part[0], self.part[1],
                 self.ds.n_features, self.ds.n_samples, cfg.device.get("type"), self.dilation)
        self.comm = comm or open_comm(cfg)
        self._attach()
        try:
            start_gate.begin(cfg.start_at, cfg.host)
            self.comm.barrier()
            if cfg.calibration:
                self.calibrate()
            elif cfg.network_dilation is not None and self.device.base_scale is not None:
                # A fixed TDF dilates the network too (rank 0 waits for the switch).
                from hosts.common.calibration import Calibrator
                Calibrator(0.0, self.dilation, cfg.network_dilation, cfg.rank,
                           self.comm.expect_delay).dilate(self.dilation)
            if starts_after_dilation(cfg):
                self.start_together()
            self.train()
        finally:
            self.comm.close()
            self.save()
            self.save_kernel_calls()
            if self.trace is not None:
                self.trace.set_tdf(self.dilation)
                self.trace.close()
        self.writer.write(device_validity(cfg.host, self.device, self.dilation))
        self.write_summary(True, None)
        log.info("done: %d iterations, %d samples in %.3f s (dilation %g)", self.iterations,
                 self.samples, self.train_s, self.dilation)
        return EXIT_OK

    def start_together(self) -> None:
        """One 1-value allreduce before the training clock starts (the start op,
        listed in allreduce_schedule): rank 0 reaches it only once the switch has
        acknowledged the dilated network, and no rank's copy completes before rank 0
        joins, so every rank starts training at the same moment. Without it the other
        ranks started at once and rank 0 one switch poll (33-65 ms) later, which the
        point's train_s (the slowest worker's) counted as training time."""
        self.comm.aar.wait(self.comm.aar.submit(np.zeros(1)))

    def calibrate(self) -> None:
        """Set the dilation from this network: `rounds` times, run the first
        `batches` mini-batches at the current dilation, measure every allreduce
        against its hardware time, and agree on a new dilation (see
        hosts.common.calibration). The model is reset afterwards: training
        starts from the same state as without calibration.

        Where the soft switch can dilate the network (cfg.network_dilation),
        round 0 measures the undilated emulator and picks TDF with headroom;
        later rounds run on the dilated network and tune the delay line's
        compensation. Elsewhere TDF follows the network's own slowdown."""
        from hosts.common.calibration import Calibrator

        cc = self.cfg.calibration
        # The run's share of the point's deadline per iteration: a TDF at which an
        # iteration on the modeled hardware would take longer is refused at once.
        # Only a modeled device's compute runs at the TDF (a measured one's does not).
        iterations = self.cfg.epochs * -(-self.ds.n_samples // self.cfg.batch)    # minibatches()' count
        per_iter = cc["run_wall_s"] / iterations if self.device.base_scale is not None else 0.0
        cal = Calibrator(cc["hw_op_s"], self.dilation, self.cfg.network_dilation, self.cfg.rank,
                         self.comm.expect_delay, iteration_wall_s=per_iter)
        cal.start()
        for _ in range(cc["rounds"]):
            measured, why, lat, ratio, step_hw = self._calibration_round(cc)
            tdf = cal.after_round(measured, why, step_hw_s=step_hw,
                                  op_p50_s=float(np.median(lat)) if lat else None,
                                  ops=len(lat), my_compute_ratio=ratio)
            if self.device.base_scale is not None:
                self.dilation = tdf
            self.device = self._new_device(self.dilation)
            self._attach()
        cal.finish()
        self.calibration = cal.record(self.cfg.host)
        self.writer.write(self.calibration)
        self.x = np.zeros_like(self.x)          # training starts from scratch
        if self.kernel is not None:
            self.kernel.reset_model()
        if self.trace is not None:
            self.trace.reset()
        # No extra barrier: the agreement allreduce already lines the workers up, and
        # the PS serves exactly the schedule allreduce_schedule() lists.

    def _calibration_round(self, cc: dict[str, Any]):
        """Run the first `batches` mini-batches; every worker gets the same verdict.
        Also one iteration's modeled hardware time: its compute and its allreduces."""
        from hosts.common import calibration as cal
        from hosts.glm.training import epoch_order, minibatches

        first = list(minibatches(epoch_order(self.ds.n_samples, self.cfg.seed, 0), self.cfg.batch))
        self.device.t0 = time.perf_counter()
        self.device.mark()
        n0 = len(self.timed.latencies)
        busy0, hw0 = self.device.busy_s, self.device.hw_s
        for idx in first[:cc["batches"]]:
            self.step(idx)
            self.device.flush()
        lat, spans = self.timed.latencies[n0:], self.timed.spans[n0:]
        hw = self.device.hw_s - hw0
        # numpy + glue per hardware second: the dilation the host itself needs.
        ratio = (self.device.busy_s - busy0) / hw if self.device.base_scale is not None and hw > 0 else None
        summed = self.comm.aar.wait(self.comm.aar.submit(cal.encode(
            [a for a, _ in spans], [b for _, b in spans], ratio, self.cfg.rank, self.cfg.world)))
        measured, why = cal.decide(summed, len(spans), self.cfg.world, cc["hw_op_s"],
                                   fallback=self.dilation)
        step_hw = (hw + len(spans) * cc["hw_op_s"]) / cc["batches"]
        return measured, why, lat, ratio, step_hw

    def train(self) -> None:
        from hosts.glm.training import epoch_order, minibatches

        cfg = self.cfg
        self.writer.write({"type": "start", "host": cfg.host, "rank": cfg.rank, "mode": cfg.mode,
                           "collective": cfg.collective, "part": list(self.part),
                           "n_samples": self.ds.n_samples, "n_features": self.ds.n_features,
                           "dilation": self.dilation, "device": self.describe_device(),
                           "network_dilated": (cfg.network_dilation is not None
                                               and self.device.base_scale is not None),
                           "load_s": self.load_s, "wall_start": time.time()})
        t0 = self.device.t0 = time.perf_counter()
        cpu0 = time.process_time()
        self.snapshot(t0)
        t_prev = t0
        for epoch in range(cfg.epochs):
            for idx in minibatches(epoch_order(self.ds.n_samples, cfg.seed, epoch), cfg.batch):
                c0, e0, n0 = self.device.compute_s, self.timed.exposed_s, len(self.timed.latencies)
                self.step(idx)
                self.device.flush()  # the update needs every backward pass: realize them
                stall = self.device.stall()
                t = time.perf_counter()
                self.iterations += 1
                self.samples += len(idx)
                self.writer.write({
                    "type": "iter", "host": cfg.host, "rank": cfg.rank, "iter": self.iterations,
                    "epoch": epoch, "samples": len(idx), "t_s": t - t0, "iter_s": t - t_prev,
                    "compute_s": self.device.compute_s - c0, "comm_s": self.timed.exposed_s - e0,
                    "stall_s": stall, "allreduce_s": self.timed.latencies[n0:],
                    "dilation": self.dilation})
                t_prev = t
                if self.iterations % cfg.snapshot_every == 0:
                    self.snapshot(t0)
        self.train_s = time.perf_counter() - t0
        self.cpu_s = time.process_time() - cpu0
        if self.iterations % cfg.snapshot_every:
            self.snapshot(t0)

    def step(self, idx: np.ndarray) -> None:
        from hosts.glm.training import data_parallel_sgd, pipelined_epoch

        cfg = self.cfg
        if cfg.mode == "model_parallel":
            # One mini-batch of the pipelined schedule; updates self.x in place.
            pipelined_epoch(self.X, self.ds.y, self.x, self.model, cfg.lr, len(idx),
                            cfg.micro_batch, idx, self.timed, cfg.pipeline_depth, self.device,
                            kernel=self.kernel)
        else:
            # The core's data-parallel step on exactly this global batch.
            self.x, _ = data_parallel_sgd(self.X, self.ds.y, self.model, cfg.lr,
                                          cfg.batch // cfg.world, 1, cfg.seed, self.timed,
                                          cfg.rank, cfg.world, order=lambda _e: idx, x0=self.x,
                                          eval_every=0, device=self.device)

    def snapshot(self, t0: float) -> None:
        # In memory only (a copy costs microseconds); written to disk after training.
        t = time.perf_counter() - t0
        if self.kernel is not None:   # the model lives on the card: read it back
            self.x = self.kernel.read_model().astype(np.float64)
        self.snapshots.append(self.x.copy())
        self.writer.write({"type": "snapshot", "host": self.cfg.host, "rank": self.cfg.rank,
                           "index": len(self.snapshots) - 1, "iter": self.iterations,
                           "epochs": self.samples / self.ds.n_samples,
                           "samples_seen": self.samples, "t_s": t, "dilation": self.dilation})

    def describe_device(self) -> dict[str, Any]:
        d = dict(self.device.device.describe())
        if self.kernel is not None and self.kernel.dry_run:
            d.update(xrt=self.kernel.header(), time="dry run: modeled time")
        return d

    def save_kernel_calls(self) -> None:
        """The U280 adapter's recorded calls, beside the outputs (also after a failure)."""
        if self.kernel is None:
            return
        path = xrt_calls_path(self.cfg.out)
        self.kernel.write_calls(path)
        self.writer.write({"type": "xrt", "host": self.cfg.host, **self.kernel.header(),
                           "calls_path": str(path)})

    def save(self) -> None:
        if self.x is None:
            return
        if self.snapshots:
            np.save(self.snap_path, np.stack(self.snapshots))
        np.save(self.model_path, self.x)

    def write_summary(self, ok: bool, error: str | None) -> None:
        cfg, timed = self.cfg, self.timed
        lat = np.asarray(timed.latencies if timed else [], dtype=np.float64)
        self.writer.write({
            "type": "summary", "host": cfg.host, "role": "worker", "rank": cfg.rank, "ok": ok,
            "error": error, "mode": cfg.mode, "collective": cfg.collective, "world": cfg.world,
            "part": list(self.part), "imbalance": getattr(self, "imbalance", None),
            "iterations": self.iterations, "samples": self.samples, "train_s": self.train_s,
            # Real CPU this emulated host used while training (numpy + transport + Python):
            # with every host on a few shared cores, sum over hosts / train_s must stay
            # well below the core count, or hosts wait for a core, not for the model.
            "cpu_s": self.cpu_s,
            "compute_s": self.device.compute_s, "comm_s": timed.exposed_s if timed else 0.0,
            "allreduces": int(lat.size), "allreduce_total_s": float(lat.sum()),
            "allreduce_p50_s": float(np.percentile(lat, 50)) if lat.size else None,
            "digest": timed.digest.hexdigest() if timed else None,
            "blocking_collective": self.comm.blocking if self.comm else None,
            "dilation": self.dilation, "times_dilated": self.dilation != 1.0,
            "snapshots_path": str(self.snap_path), "model_path": str(self.model_path),
            "collective_stats": self.comm.stats() if self.comm else {},
        })


def load_point_dataset(cfg: P4sgdConfig) -> Any:
    """The point's dataset: the file the runner's side made once for every program
    where there is one, else built from the spec here."""
    from hosts.glm.datasets import load_dataset, load_dataset_file
    if cfg.dataset_file is not None:
        return load_dataset_file(cfg.dataset_file, dict(cfg.dataset))
    return load_dataset(dict(cfg.dataset))


# ============================================================ parameter server
class PSRole:
    def __init__(self, cfg: P4sgdConfig, writer: JsonlWriter):
        self.cfg, self.writer = cfg, writer
        self.served = 0
        self.ps = None

    def run(self) -> int:
        from hosts.collectives.ps import ParameterServer

        cfg = self.cfg
        ds = load_point_dataset(cfg)
        schedule = allreduce_schedule(cfg, ds.n_samples, ds.n_features)
        log.info("parameter server for %d workers on %s:%d, %d allreduces", cfg.world,
                 cfg.ps.ip, ps_port(cfg.port), len(schedule))
        hello = {"host": cfg.host, "rank": cfg.rank, "run": cfg.run_identity()}
        self.ps = ParameterServer.accept(peers=cfg.peers, my_ip=cfg.ps.ip, port_base=cfg.port,
                                         hello=hello, connect_timeout_s=cfg.connect_timeout_s,
                                         timeout_s=cfg.timeout_s)
        try:
            start_gate.begin(cfg.start_at, cfg.host)
            self.ps.barrier()
            t0 = time.perf_counter()
            s = cfg.straggler
            for size, last in schedule:
                # A straggling PS adds its delay once per iteration (it has no compute).
                delay = (s.delay_ms / 1e3 if s is not None and last
                         and time.perf_counter() - t0 >= s.start_s else 0.0)
                self.ps.reduce_once(size, delay)
                self.served += 1
        finally:
            self.ps.close()
        self.write_summary(True, None)
        return EXIT_OK

    def write_summary(self, ok: bool, error: str | None) -> None:
        self.writer.write({"type": "summary", "host": self.cfg.host, "role": "ps", "ok": ok,
                           "error": error, "allreduces_served": self.served,
                           "bytes_received": self.ps.bytes_received if self.ps else 0,
                           "bytes_sent": self.ps.bytes_sent if self.ps else 0})


# ============================================================ main
def main(argv: list[str] | None = None) -> int:
    global log
    try:
        cfg, writer, log = program.start("p4sgd", __doc__, P4sgdConfig, argv)
    except program.SetupFailed as e:
        return e.code
    try:
        job = PSRole(cfg, writer) if cfg.role == "ps" else Worker(cfg, writer)
    except (ValueError, OSError) as e:  # dataset or device spec problems
        log.error("cannot set up: %s", e)
        writer.close()
        return EXIT_CONFIG
    try:
        return job.run()
    except (NetError, TimeoutError, InaError) as e:
        log.error("network: %s", e)
        job.write_summary(False, f"{type(e).__name__}: {e}")
        return EXIT_NET
    except CalibrationRefused as e:
        log.error("%s", e)
        job.write_summary(False, f"{type(e).__name__}: {e}")
        return program.EXIT_REFUSED
    except (ArithmeticError, ValueError) as e:  # e.g. FixedPointOverflow, diverging model
        log.exception("training failed")
        job.write_summary(False, f"{type(e).__name__}: {e}")
        return EXIT_TRAINING
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
