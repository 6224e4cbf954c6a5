"""Time dilation of a torch worker: the ONE place hosts.dnn touches the calibration
and network-dilation machinery (hosts.common.calibration.Calibrator).

What a result's time means. Compute is slept TDF x the device model's time
(hosts/dnn/device.py, charged in Runtime.compute); on the soft switch every
frame is held until the modeled hardware network, TDF times slower, would have
delivered it (`network_dilation`). Emulated seconds / TDF are then hardware
seconds, for compute and communication alike.

Where the TDF comes from (`calibration` in the worker config, time_scale auto):

* **iterations** (a script that calls `report.compute`, DDP or a plain loop):
  the first iteration is a warm-up (its one-time costs, DDP's first backward
  and allocator growth, made the CPU look 5-30x slower than later steps here,
  and the TDF twice what it needed); the next `rounds` `report.iteration()`
  boundaries each close a calibration round. A round's ops are the collective calls of that iteration (DDP's hook:
  one per gradient bucket), each measured from submit to completion against
  its hardware time, looked up in the `hw_table` the workload computed with
  testbed.fidelity.network_model.collective_time for the collective (switch,
  ring, ps; gloo's allreduce is modeled as the ring); the round's compute ratio
  is the CPU's real step time over the device model's. The workers agree
  through one SUM of the collective (hosts.common.calibration encode/decide);
  Calibrator decides: round 0 runs undilated and sets TDF = max(the headroom
  rule (calibration.network_headroom) on the ops' slowdowns, 2 x what the CPU
  needs); rank 0 dilates the network;
  later rounds run dilated and tune the delay line's compensation.
* **probe** (a script with no `report.compute` call before its first
  collective, e.g. an unmodified DDP script): the first collective call runs
  `rounds` rounds of a probe first: one allreduce of each of the model's own
  DDP bucket sizes (`bucket_sizes`, from DDP's logging data) through the same
  collective, then the agreement. There is no modeled compute to measure, so
  the TDF is the network's headroom rule's. The call then proceeds dilated.

A round whose TDF would make one iteration (its modeled compute and collective
calls) take longer than `iteration_wall_s`, the wall time the point's deadline
allows an iteration, is refused at once (hosts.common.calibration.
CalibrationRefused; run_script exits EXIT_REFUSED): one stalled op in an
undilated round reads as an emulator thousands of times slower.

The mode is decided at the first collective call, identically on every rank
(the same script). Calibration iterations are marked `calibration: true` in
the records and left out of the trace and of the summary; the device starts
fresh at the calibrated TDF. A fixed `time_scale: N` dilates the network to N
at start (`dilate_fixed`).

Transport timers (in-switch client): each dilation (`Calibrator.dilate`) gives
the client the dilated link (`InaClient.expect_delay`), which keeps every
chunk's first timer above that chunk's own dilated answer time, so a delayed
chunk is not resent and a lost one is resent after about its own round trip
(not its whole bucket's).
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from hosts.common import calibration as cal
from hosts.common.hw_table import HwTable

log = logging.getLogger("dnn.timing")

WARMUP_ITERATIONS = 1     # iterations mode: measured by nothing, before round 0

# The network model's algorithm for each collective (gloo: gloo::allreduce's own
# segmented ring with its send/receive rendezvous, testbed.fidelity.network_model).
MODEL_ALGO = {"switch": "switch", "ring": "ring", "ps": "ps", "tree": "tree", "gloo": "gloo"}


def model_algo(collective: str) -> str:
    return MODEL_ALGO[collective]


class Dilation:
    """Calibration and network dilation for one torch worker (see the module doc).

    The runtime reports every collective call (`before_op`, `op_done`) and every
    compute step (`compute_done`) and each iteration boundary (`at_iteration`)."""

    def __init__(self, rt: Any):
        cfg = rt.cfg
        self.rt = rt
        self.table = HwTable(cfg.hw_table) if cfg.hw_table else None
        modeled = cfg.device.get("type", "cpu") != "cpu"
        self.nd = dict(cfg.network_dilation) if cfg.network_dilation and modeled else None
        self.rounds = int(cfg.calibration["rounds"]) if cfg.calibration and modeled else 0
        self.calibrator = cal.Calibrator(0.0, rt.device.time_scale, self.nd, cfg.rank, self._expect_delay,
                                         iteration_wall_s=cfg.calibration["iteration_wall_s"] if self.rounds else 0.0)
        self.mode: str | None = None if self.rounds else "fixed"
        self.warmup_left = WARMUP_ITERATIONS
        self.record: dict | None = None
        self._begin_window()

    # -- state -----------------------------------------------------------------------
    @property
    def calibrating(self) -> bool:
        return self.rounds > 0 and self.record is None

    @property
    def tdf(self) -> float:
        return self.rt.device.time_scale

    def _begin_window(self) -> None:
        self.spans: list[tuple[float, float, int]] = []
        self.real_s = self.hw_s = 0.0

    def _expect_delay(self, network: Any) -> None:
        client = getattr(self.rt._coll, "client", None)
        if client is not None:
            client.expect_delay(network)

    def hw_op_s(self, values: int) -> float | None:
        return self.table(values) if self.table is not None else None

    # -- fixed TDF ----------------------------------------------------------------------
    def dilate_fixed(self) -> None:
        """time_scale N on a dilatable network: dilate it to N (rank 0 asks the switch)."""
        if self.mode == "fixed" and self.nd is not None:
            self.calibrator.dilate(self.tdf)

    # -- hooks from the runtime -------------------------------------------------------------
    def before_op(self, values: int) -> None:
        """Before a collective call: decide the calibration mode (first call) and run
        the probe if that is the mode."""
        if self.calibrating and self.mode is None:
            self.mode = "iterations" if self.rt._started else "probe"
            self.calibrator.start()      # the switch holds its impairments off until _finish
            log.info("time_scale auto: calibrating on %s", "the script's iterations" if self.mode == "iterations"
                     else "a probe of the model's bucket sizes")
            if self.mode == "probe":
                self._probe(self.rt.bucket_sizes or [values])

    def op_done(self, t0: float, t1: float, values: int) -> None:
        if self.calibrating:
            self.spans.append((t0, t1, values))

    def compute_done(self, real_s: float, hw_s: float | None) -> None:
        if self.calibrating and hw_s:
            self.real_s += real_s
            self.hw_s += hw_s

    def at_iteration(self) -> bool:
        """An iteration boundary; True when this iteration was a calibration round."""
        if not (self.calibrating and self.mode == "iterations"):
            return False
        if self.warmup_left > 0:
            self.warmup_left -= 1
            self._begin_window()
            return True
        self._close_round()
        return True

    # -- rounds ------------------------------------------------------------------------------
    def _probe(self, sizes: list[int]) -> None:
        coll = self.rt.collective
        for _ in range(self.rounds):
            coll.barrier()                     # every worker submits each op together
            for n in sizes:
                self.before_op(n)
                buf = np.zeros(int(n), np.float32)
                t0 = time.perf_counter()
                coll.allreduce(buf)
                self.op_done(t0, time.perf_counter(), int(n))
            self._close_round()

    def _close_round(self) -> None:
        rt, c = self.rt, self.calibrator
        spans = self.spans[:cal.MAX_OPS]
        if self.table is None:
            raise RuntimeError("time_scale auto needs the workload's hw_table in the worker config")
        hw = [self.table(v) for _, _, v in spans]
        ratio = self.real_s / self.hw_s if self.hw_s > 0 else None
        vec = cal.encode([a for a, _, _ in spans], [b for _, b, _ in spans], ratio, rt.cfg.rank, rt.cfg.world)
        summed = np.asarray(rt.collective.allreduce(vec.astype(np.float32)), np.float64).reshape(-1)
        measured, why = cal.decide(summed, len(spans), rt.cfg.world, hw or 0.0, fallback=self.tdf)
        c.hw_op_s = float(np.median(hw)) if hw else 0.0
        # One iteration on the hardware: its modeled compute and its collective calls
        # (a probe: one call per bucket, no compute); a TDF at which it would outrun the
        # wall time the point allows an iteration is refused (CalibrationRefused).
        step_hw = self.hw_s + sum(self.table(v) for _, _, v in self.spans)
        tdf = c.after_round(measured, why, step_hw_s=step_hw, ops=len(spans), my_compute_ratio=ratio,
                            op_hw_p50_s=c.hw_op_s or None, mode=self.mode)
        rt.device.time_scale = tdf
        self._begin_window()
        if len(c.rounds) >= self.rounds:
            self._finish()

    def _finish(self) -> None:
        """The measured run starts clean: fresh device statistics at the final TDF, an
        empty trace, the clock of records restarted."""
        rt = self.rt
        self.calibrator.finish()         # impairments back on, at the final TDF
        rt.device._reset_stats()
        rt.device.debt_s = 0.0
        rt.trace.reset()
        rt.trace.set_tdf(self.tdf)
        self.record = dict(self.calibrator.record(rt.cfg.host), mode=self.mode,
                           collective_stats=rt._coll.stats() if hasattr(rt._coll, "stats") else None)
        rt.writer.write(self.record)
        rt.restart_clock()
        log.info("calibrated: TDF %g (%s, network %s)", self.tdf, self.mode,
                 "dilated" if self.nd is not None else "not dilated")

    def summary(self) -> dict[str, Any]:
        return {"tdf": self.tdf, "calibrated": self.rounds > 0, "calibration_mode": self.mode,
                "calibration_complete": self.record is not None if self.rounds else None,
                "network_dilated": self.nd is not None,
                "calibration_stats": (self.record or {}).get("collective_stats")}
