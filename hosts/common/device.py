"""What every modeled compute device shares: per-step accounting and paced sleeping.

A workload's device model (hosts/glm/devices.py for GLMs on a U280 or V100,
hosts/dnn/device.py for deep networks) says how long a step takes on the
target hardware. The real numpy/torch work always runs first; the device then
sleeps for the rest of the modeled time x time_scale (time dilation), so that
emulated accelerators on a few shared CPU cores keep the hardware's
compute:communication ratio. A step whose real time exceeds its modeled time
is a violation: the emulation could not keep up, and `validity()` says so.

Sleeping has ~50-100 us granularity on Linux (more on a loaded machine), far
coarser than some modeled steps. So the device keeps a sleep debt: each step
adds (modeled - real); once the debt exceeds min_sleep_s it sleeps, and any
overshoot is carried as credit. The total time of a run then follows the
model; single steps are placed with up to min_sleep_s of jitter. flush()
sleeps off the remaining debt (before a send: the data must be "computed").
"""
from __future__ import annotations

import time
from typing import Any


class DeviceStats:
    """Per-step accounting shared by all devices (measured or modeled)."""

    def _reset_stats(self) -> None:
        self.steps = 0
        self.violations = 0
        self.worst_ratio = 0.0
        self.real_s_total = 0.0
        self.modeled_s_total = 0.0
        self.max_overshoot_s = 0.0

    def _record(self, modeled: float, real: float) -> None:
        self.steps += 1
        self.real_s_total += real
        self.modeled_s_total += modeled
        ratio = real / modeled if modeled > 0 else (float("inf") if real > 0 else 1.0)
        self.worst_ratio = max(self.worst_ratio, ratio)
        if real > modeled:
            self.violations += 1

    def validity(self) -> dict[str, Any]:
        return {"valid": self.violations == 0, "violations": self.violations,
                "steps": self.steps, "worst_ratio": self.worst_ratio,
                "real_s_total": self.real_s_total, "modeled_s_total": self.modeled_s_total,
                "max_overshoot_s": self.max_overshoot_s}


class PacedDevice(DeviceStats):
    """A device whose step times come from a model; `charge` paces the caller."""

    name = "modeled"

    def __init__(self, time_scale: float = 1.0, sleep: bool = True,
                 min_sleep_s: float = 200e-6):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = float(time_scale)
        self.sleep = sleep
        self.min_sleep_s = float(min_sleep_s)
        self.debt_s = 0.0  # modeled time not yet slept (negative: overshoot credit)
        self._reset_stats()

    def charge(self, modeled: float, real: float) -> None:
        """Account one step (modeled already dilated) and sleep off the debt in batches."""
        self._record(modeled, real)
        if self.sleep:
            self.debt_s += max(0.0, modeled - real)
            if self.debt_s >= self.min_sleep_s:
                self.flush()

    def flush(self) -> None:
        """Sleep off the accumulated debt now; keep any overshoot as credit."""
        if self.debt_s > 0:
            t0 = time.perf_counter()
            time.sleep(self.debt_s)
            slept = time.perf_counter() - t0
            self.max_overshoot_s = max(self.max_overshoot_s, slept - self.debt_s)
            self.debt_s -= slept

    def validity(self) -> dict[str, Any]:
        return {**super().validity(), "sleep_debt_s": self.debt_s}
