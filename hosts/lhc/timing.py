"""Modeled GPU time of LHC's encode/decode and the trace: the ONE place the LHC
worker touches the time machinery (hosts/common/device.py, hosts/common/trace.py).

GPU model (NVIDIA V100, as hosts/glm/devices.py's GpuDevice; same constants):
  * HBM2 900 GB/s peak [D: V100 data sheet], 70 % effective [A], 5 us per
    kernel launch + sync [A].
  * support: 1 kernel, reads the dense gradient (4n B), writes the bitmap (n/8 B).
  * encode: 2 kernels (plan = counting + peeling order on the union support,
    then sketch); reads the gradient again (4n B), per union position 3
    counters read-modified-written (3 x 8 B) and, for the plan, 3 counts per
    peeling round touched (3 x 4 B x rounds) [A: the public code's kernels are
    one thread per position per round].
  * decode: 1 kernel per peeling round + 1 to scatter; per round the alive
    positions' 3 counters (3 x 8 B) [A: we charge every round with |U|]; writes 4n B.
  * top-k: radix select over |g| (4 passes over 4n B) + gather [A]; its (indices,
    values) blocks are allgathered over the ring (traced as op allgather).
Checked against published V100 bandwidths and launch times and against this
project's H100 measurement of a torch port of the codec at full size
(testbed/reproduce/measurements/lhc.py, docs/lhc.md): the model charges the support
and the encode (its plan above all) far less than that port took and the decode
more (the port touches only the positions alive in each round).
Real numpy work always runs; the modeled time x time_scale is slept (PacedDevice).
`cpu` device: measured numpy time, no model (time_scale 1).

Calibration (`calibrate`, time_scale auto) and network dilation use the shared
hosts.common.calibration.Calibrator on LHC's own rounds: each aggregation op is
measured against its hardware time, looked up in `HwTable` (the workload
evaluates the network model, which hosts cannot import, at a grid of sizes).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from hosts.common.device import PacedDevice
from hosts.common.hw_table import HwTable
from hosts.common.trace import TraceRecorder
from hosts.glm.devices import V100_HBM_PEAK_BPS

GPU_EFFICIENCY = 0.7      # [A] as hosts/glm/devices.py
GPU_LAUNCH_S = 5e-6       # [A] as hosts/glm/devices.py


def step_bytes(step: str, work: dict[str, Any]) -> tuple[float, int]:
    """(bytes moved, kernel launches) of one step on the modeled GPU."""
    n, u, rounds = work.get("n", 0), work.get("union", 0), work.get("rounds", 0)
    # passes: |U|-sized passes the peeling makes (default: every round touches all of U);
    # a projection may charge fewer (only the positions still alive) as an assumption.
    passes = work.get("passes", max(1, rounds))
    if step == "support":
        return 4 * n + n / 8, 1
    if step == "encode":
        return 4 * n + 24 * u + 12 * u * passes, 2
    if step == "decode":
        return 24 * u * passes + 4 * n, max(1, rounds) + 1
    if step == "topk":
        return 16 * n + 8 * work.get("k", 0), 5
    if step == "topk_sum":
        return 8 * work.get("k", 0) * work.get("world", 1) + 4 * n, 1
    raise ValueError(f"unknown LHC device step {step!r}")


class LhcDevice(PacedDevice):
    name = "gpu"

    def __init__(self, type: str = "gpu", time_scale: float = 1.0, efficiency: float = GPU_EFFICIENCY,
                 launch_s: float = GPU_LAUNCH_S, sleep: bool = True, hbm_peak_Bps: float | None = None):
        """hbm_peak_Bps: another GPU's data-sheet peak in place of the V100's (the same
        formulas carried to the H100 the model is checked on: measurements/lhc.py)."""
        if type not in ("gpu", "cpu"):
            raise ValueError(f"device type must be gpu or cpu, got {type!r}")
        self.type = type
        super().__init__(time_scale if type == "gpu" else 1.0, sleep=sleep and type == "gpu")
        self.efficiency, self.launch_s = efficiency, launch_s
        self.hbm_peak_Bps = V100_HBM_PEAK_BPS if hbm_peak_Bps is None else hbm_peak_Bps
        if self.hbm_peak_Bps <= 0:
            raise ValueError(f"hbm_peak_Bps must be positive, got {self.hbm_peak_Bps}")

    def hw_time(self, step: str, work: dict[str, Any]) -> float:
        b, launches = step_bytes(step, work)
        return launches * self.launch_s + b / (self.hbm_peak_Bps * self.efficiency)

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "hbm_peak_Bps": self.hbm_peak_Bps, "efficiency": self.efficiency,
                "launch_s": self.launch_s, "time_scale": self.time_scale}


class Timeline:
    """Device pacing + trace for one worker. run_step: real work, modeled time;
    comm: a timed collective recorded as a trace node."""

    def __init__(self, device: LhcDevice, trace: TraceRecorder):
        self.device, self.trace = device, trace
        self.begin_window()

    def begin_window(self) -> None:
        """Start a measuring window: traced ops' (submit, done, values) and the device's
        real and modeled seconds (calibration measures one window per round)."""
        self.spans: list[tuple[float, float, int]] = []
        self.real_s = self.hw_s = 0.0
        self._after_comm = False

    def run_step(self, step: str, fn: Callable[[], Any], work_of: Callable[[Any], dict]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        out = fn()
        real = time.perf_counter() - t0
        work = work_of(out)
        if self.device.type == "gpu":
            hw = self.device.hw_time(step, work)
            self.device.charge(hw * self.device.time_scale, real)
            self.device.flush()           # the result is "computed" before it is sent
        else:
            hw = real
        self.real_s += real
        self.hw_s += hw
        self._after_comm = False
        t1 = time.perf_counter()
        self.trace.compute(t0, t1, hw, real, dict(work, step=step))
        return out, t1 - t0

    def modeled(self, step: str, hw_s: float) -> float:
        """A step with no real work (the backward pass of a profile): modeled time only."""
        t0 = time.perf_counter()
        if hw_s > 0:
            time.sleep(hw_s * self.device.time_scale)
        t1 = time.perf_counter()
        self.trace.compute(t0, t1, hw_s, 0.0, {"step": step})
        self._after_comm = False
        return t1 - t0

    def comm(self, fn: Callable[[], Any], *, algo: str | None, values: int, phase: str,
             scale_round: bool = False, op: str = "allreduce") -> tuple[Any, float]:
        """algo None: an exchange the network model has no formula for: not traced.
        op: allreduce, or allgather (`values` = one rank's block).
        scale_round: a float in-switch sum that first agrees on a scale (one more pass)."""
        t0 = time.perf_counter()
        if algo is not None and self._after_comm:
            # Op after op with no compute between (dense algorithms, iteration after
            # iteration): the host blocked on the previous result before it sent this
            # one. A zero-time step says so in the trace (trace deps run through compute
            # nodes); without it the projector overlaps the two ops.
            self.trace.compute(t0, t0, 0.0, 0.0, {"step": "sync"})
        out = fn()
        t1 = time.perf_counter()
        if algo is not None:
            self._after_comm = True
            node = self.trace.comm(t0, t1, op=op, algo=algo, values=values, phase=phase,
                                   **({"scale_round": True} if scale_round else {}))
            self.trace.waited(node)
            self.spans.append((t0, t1, values))
        return out, t1 - t0


def calibrate(tl: Timeline, cc: dict[str, Any], nd: dict | None, *, host: str, rank: int, world: int,
              run_once: Callable[[int], None], agree: Callable[[np.ndarray], np.ndarray],
              expect_delay: Callable[[float], None]) -> tuple[float, dict]:
    """time_scale auto: `cc["rounds"]` times, run `cc["iterations"]` aggregations
    (`run_once(i)`) at the current TDF, measure every traced op against its hardware
    time (`cc["hw_table"]`) and agree on the next TDF with the other workers
    (`agree`: a float SUM allreduce); hosts.common.calibration.Calibrator decides
    and, on a dilatable network (`nd`), dilates it. Returns (TDF, calibration record);
    the device runs at the TDF and the trace is empty afterwards."""
    from hosts.common import calibration as cal  # noqa: PLC0415

    table = HwTable(cc["hw_table"])
    gpu = tl.device.type == "gpu"
    c = cal.Calibrator(0.0, tl.device.time_scale, nd if gpu else None, rank, expect_delay,
                       iteration_wall_s=cc["iteration_wall_s"])
    c.start()
    for _ in range(cc["rounds"]):
        tl.begin_window()
        for i in range(cc["iterations"]):
            run_once(i)
        spans = tl.spans[:cal.MAX_OPS]
        hw = [table(v) for _, _, v in spans]
        ratio = tl.real_s / tl.hw_s if gpu and tl.hw_s > 0 else None
        summed = agree(cal.encode([a for a, _, _ in spans], [b for _, b, _ in spans], ratio, rank, world))
        measured, why = cal.decide(summed, len(spans), world, hw or 0.0, fallback=tl.device.time_scale)
        c.hw_op_s = float(np.median(hw)) if hw else 0.0     # the delay line's compensation per op
        # One iteration on the hardware: the device's compute and the round's ops, as modeled.
        step_hw = (tl.hw_s + sum(hw)) / cc["iterations"]
        tdf = c.after_round(measured, why, step_hw_s=step_hw, ops=len(spans), my_compute_ratio=ratio,
                            op_hw_p50_s=c.hw_op_s or None)
        if gpu:
            tl.device.time_scale = tdf
    c.finish()
    # The measured run starts clean: a fresh device (its step statistics are the run's;
    # round 0 ran far below the final TDF) and an empty trace.
    d = tl.device
    tl.device = LhcDevice(d.type, d.time_scale, d.efficiency, d.launch_s, sleep=d.sleep, hbm_peak_Bps=d.hbm_peak_Bps)
    tl.trace.reset()
    tl.begin_window()
    return tl.device.time_scale, c.record(host)


def dilate_fixed(tl: Timeline, nd: dict | None, rank: int, expect_delay: Callable[[float], None]) -> None:
    """A fixed TDF dilates the network too (modeled device only; no barrier needed:
    no op completes before rank 0, which waits for the switch, joins it)."""
    from hosts.common.calibration import Calibrator  # noqa: PLC0415

    if nd is not None and tl.device.type == "gpu":
        Calibrator(0.0, tl.device.time_scale, nd, rank, expect_delay).dilate(tl.device.time_scale)
