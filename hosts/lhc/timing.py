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
  * top-k: radix select over |g| (4 passes over 4n B) + gather [A].
Real numpy work always runs; the modeled time x time_scale is slept (PacedDevice).
`cpu` device: measured numpy time, no model (time_scale 1).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from hosts.common.device import PacedDevice
from hosts.common.trace import TraceRecorder
from hosts.glm.devices import V100_HBM_PEAK_BPS

GPU_EFFICIENCY = 0.7      # [A] as hosts/glm/devices.py
GPU_LAUNCH_S = 5e-6       # [A] as hosts/glm/devices.py


def step_bytes(step: str, work: dict[str, Any]) -> tuple[float, int]:
    """(bytes moved, kernel launches) of one step on the modeled GPU."""
    n, u, rounds = work.get("n", 0), work.get("union", 0), work.get("rounds", 0)
    if step == "support":
        return 4 * n + n / 8, 1
    if step == "encode":
        return 4 * n + 24 * u + 12 * u * max(1, rounds), 2
    if step == "decode":
        return 24 * u * max(1, rounds) + 4 * n, max(1, rounds) + 1
    if step == "topk":
        return 16 * n + 8 * work.get("k", 0), 5
    if step == "topk_sum":
        return 8 * work.get("k", 0) * work.get("world", 1) + 4 * n, 1
    raise ValueError(f"unknown LHC device step {step!r}")


class LhcDevice(PacedDevice):
    name = "gpu"

    def __init__(self, type: str = "gpu", time_scale: float = 1.0, efficiency: float = GPU_EFFICIENCY,
                 launch_s: float = GPU_LAUNCH_S, sleep: bool = True):
        if type not in ("gpu", "cpu"):
            raise ValueError(f"device type must be gpu or cpu, got {type!r}")
        self.type = type
        super().__init__(time_scale if type == "gpu" else 1.0, sleep=sleep and type == "gpu")
        self.efficiency, self.launch_s = efficiency, launch_s

    def hw_time(self, step: str, work: dict[str, Any]) -> float:
        b, launches = step_bytes(step, work)
        return launches * self.launch_s + b / (V100_HBM_PEAK_BPS * self.efficiency)

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "hbm_peak_Bps": V100_HBM_PEAK_BPS, "efficiency": self.efficiency,
                "launch_s": self.launch_s, "time_scale": self.time_scale}


class Timeline:
    """Device pacing + trace for one worker. run_step: real work, modeled time;
    comm: a timed collective recorded as a trace node."""

    def __init__(self, device: LhcDevice, trace: TraceRecorder):
        self.device, self.trace = device, trace

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
        return t1 - t0

    def comm(self, fn: Callable[[], Any], *, algo: str | None, values: int, phase: str) -> tuple[Any, float]:
        """algo None: an exchange the network model has no formula for (allgather): not traced."""
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        if algo is not None:
            node = self.trace.comm(t0, t1, op="allreduce", algo=algo, values=values, phase=phase)
            self.trace.waited(node)
        return out, t1 - t0
