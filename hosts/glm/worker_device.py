"""A P4SGD worker's device: the modeled accelerator, its straggler setting, paced
sleeping, the host's glue charged to modeled time, and the device's validity record."""
from __future__ import annotations

import time
from typing import Any

from hosts.common.config import Straggler

class WorkerDevice:
    """The device model plus this host's straggler setting; counts compute time.

    The device computes with numpy at once and we owe the rest of its modeled
    time as "debt", slept off in batches (sleep granularity) and always before
    a send (flush). Sleeping goes through `idle`, so an asynchronous collective
    keeps receiving results and retransmitting during compute, as a NIC would.
    A straggler's slowdown multiplies the modeled compute (for the measured CPU
    device: (slowdown - 1) x the measured time is added)."""

    MIN_SLEEP_S = 200e-6

    def __init__(self, device, straggler: Straggler | None, trace=None):
        self.device, self.straggler = device, straggler
        self.trace = trace               # hosts.common.trace.TraceRecorder or None
        self.base_scale = getattr(device, "time_scale", None)   # None: measured CPU
        if self.base_scale is not None:
            device.sleep = False                                 # we own the sleeping
        self.idle = time.sleep
        self.compute_s = 0.0
        self.debt_s = 0.0
        self.max_overshoot_s = 0.0
        self.excess_s = 0.0              # sum over steps of max(0, real - modeled)
        self.t0: float | None = None     # perf_counter at the common start
        self.busy_s = 0.0                # numpy + glue of all steps (what the model must cover)
        self.hw_s = 0.0                  # the steps' undilated modeled time
        self._mark: float | None = None  # where the current glue began

    def mark(self) -> None:
        """The host stops being busy for the device here (a network wait returned)."""
        self._mark = time.perf_counter()

    def active(self) -> bool:
        s = self.straggler
        return (s is not None and self.t0 is not None
                and time.perf_counter() - self.t0 >= s.start_s)

    def run(self, fn, n_samples, n_features, nnz=None, phase="step"):
        slow = self.straggler.slowdown if self.active() else 1.0
        if self.base_scale is not None:
            self.device.time_scale = self.base_scale * slow
        t = time.perf_counter()
        glue = t - self._mark if self._mark is not None and self.base_scale is not None else 0.0
        out = self.device.run(fn, n_samples, n_features, nnz, phase=phase)
        _, modeled, real = out
        busy = real + glue
        # Hardware time of the step: the model undilated (a straggler's slowdown kept).
        hw = modeled / self.base_scale if self.base_scale is not None else real
        self.busy_s += busy
        self.hw_s += hw
        if self.trace is not None:
            self.trace.compute(t, t + real, hw, busy,
                               {"n": int(n_samples), "f": int(n_features), "nnz": nnz, "phase": phase})
        self.debt_s += modeled - busy if self.base_scale is not None else (slow - 1.0) * real
        if self.base_scale is not None:
            self.excess_s += max(0.0, busy - modeled)   # time the model could not absorb
        if self.debt_s >= self.MIN_SLEEP_S:
            self._sleep_debt()
        self.compute_s += time.perf_counter() - t
        self._mark = time.perf_counter()
        return out

    def _sleep_debt(self) -> None:
        t = time.perf_counter()
        self.idle(self.debt_s)
        t1 = time.perf_counter()
        slept = t1 - t
        self.max_overshoot_s = max(self.max_overshoot_s, slept - self.debt_s)
        self.debt_s -= slept             # an overshoot is carried as credit
        self._mark = t1

    def flush(self) -> None:
        """Realize all modeled compute so far (before a send, at an iteration's end)."""
        if self.debt_s > 0:
            t = time.perf_counter()
            self._sleep_debt()
            self.compute_s += time.perf_counter() - t

    def stall(self) -> float:
        """The straggler's fixed per-iteration delay; returns the time slept."""
        if not self.active() or self.straggler.delay_ms <= 0:
            return 0.0
        t = time.perf_counter()
        self.idle(self.straggler.delay_ms / 1e3)
        t1 = time.perf_counter()
        self._mark = t1
        if self.trace is not None:
            # The stall in hardware time: emulated seconds undilated.
            self.trace.compute(t, t1, (t1 - t) / (self.base_scale or 1.0), 0.0, {"stall": True})
        return t1 - t


def device_validity(host: str, wd: WorkerDevice, dilation: float) -> dict[str, Any]:
    """Is the emulated device's timing trustworthy? (numpy must fit in the model)"""
    device = wd.device
    v = {**device.validity(), "max_overshoot_s": wd.max_overshoot_s, "sleep_debt_s": wd.debt_s,
         # The timing error the violations caused: steps that ran over the model
         # delayed this host by this much in total (share of its modeled compute).
         "excess_s": wd.excess_s}
    v["excess_share"] = wd.excess_s / v["modeled_s_total"] if v.get("modeled_s_total") else 0.0
    steps = max(1, v["steps"])
    share = v["violations"] / steps
    if getattr(device, "name", "cpu") == "cpu":
        valid, reason = True, "measured CPU time (no device model, no dilation)"
    elif getattr(device, "measured", False):   # a real card (hosts.glm.u280_xrt.XrtKernelDevice)
        valid, reason = True, f"measured {device.name} kernel time (no device model, no dilation)"
    else:
        # A few steps over (a descheduled process on shared cores) are absorbed by
        # the sleep debt; systematic overshoot means the dilation is too small.
        total_ok = v["real_s_total"] <= v["modeled_s_total"]
        valid = share <= 0.05 and total_ok
        reason = (f"{v['violations']} of {v['steps']} steps took longer in numpy than the "
                  f"{device.name} model at time_scale {dilation:g} (worst {v['worst_ratio']:.2g}x, "
                  f"real {v['real_s_total']:.3g} s vs modeled {v['modeled_s_total']:.3g} s; "
                  f"time over the model {v['excess_share']:.1%} of the modeled compute)")
        if not valid:
            reason += "; raise workload.time_scale"
    return {**v, "type": "validity", "host": host, "valid": valid, "reason": reason,
            "violation_share": share, "dilation": dilation, "device_strict_valid": v["valid"]}
