"""Compute device models: how long one micro-batch step takes on an accelerator.

The numpy work always runs (results are real). A modeled device then sleeps
for the rest of the modeled time, so that emulated accelerators sharing a few
CPU cores still produce meaningful time-to-accuracy and scaling curves. When
the real numpy time exceeds the modeled time the emulation cannot keep up and
the step is recorded as a violation; `validity()` reports it for the manifest.

API (all devices):
    step_time(n_samples, n_features_slice, nnz=None, phase="step") -> seconds
        nnz=None means a dense slice (n_samples x n_features_slice values);
        otherwise a CSR slice with nnz stored entries.
        phase: "forward", "backward", or "step" (= forward + backward).
    run(fn, n_samples, n_features_slice, nnz=None, phase="step")
        -> (fn(), modeled_s, real_s)
    validity() -> {"valid", "violations", "steps", "worst_ratio", ...}

Numbers and where they come from. [V] = checked in a source here, [D] = vendor
data-sheet figure quoted, not re-read here, [A] = our assumption.

U280Device (Xilinx Alveo U280):
  * HBM2: 8 GB, 460 GB/s theoretical peak [D: Xilinx Alveo U280 data sheet].
  * Measured HBM ceiling on U280: up to 425 GB/s (92 % of peak) [V: abstract of
    Wang, Huang, Zhang, Alonso, "Shuhai", FCCM 2020 - same group as P4SGD].
  * Effective bandwidth of a GLM SGD engine: 50 % of peak = 230 GB/s by default
    [A: an engine using a subset of the 32 pseudo-channels / non-ideal bursts].
  * Memory-bound: each phase streams the micro-batch's feature slice once from
    HBM (forward reads it for q, backward re-reads it for the gradient; no
    on-chip caching assumed, which is conservative) [A].
    Bytes: dense n*f*4 (float32); CSR nnz*(4+4) + (n+1)*4 (value, index, row ptr).
  * Fixed pipeline latency 1 us per micro-batch (~250 cycles at 250 MHz),
    split evenly between forward and backward [A].
  => step = 2 * bytes / 230e9 + 1e-6 s.  Example: 8 samples x 2048 dense
     features = 64 KiB -> 2 * 0.285 us + 1 us = 1.57 us.
  The model update at the end of a mini-batch is not charged (it touches only
  the model slice, held on chip [A]).

GpuDevice (NVIDIA V100):
  * HBM2 900 GB/s peak [D: NVIDIA Tesla V100 data sheet].
  * Effective 70 % = 630 GB/s [A: STREAM-like kernels reach ~85-90 %,
    gather-heavy sparse GLM kernels less].
  * Kernel launch + sync overhead 5 us per kernel [A: commonly measured
    3-10 us on CUDA for small kernels]; 2 kernels in forward (GEMV/SpMV, loss
    derivative) and 2 in backward (transposed GEMV/SpMV, model update) [A].
  * Bytes: forward = batch slice + model read (f*4) + s write (n*4);
    backward = batch slice again + gradient write + model read/write (3*f*4).
  => step = 4 * 5 us + bytes / 630e9.

time_scale multiplies every modeled time (time dilation): with time_scale=100
an emulated device is 100x slower than the real one, which keeps the real numpy
work below the modeled time; network delays must then be dilated by the same
factor for results to be comparable. Measured here: a dense 8 x 128 micro-batch
forward takes ~1.5-5 us of numpy time, so U280 emulation at micro-batch level
needs time_scale of about 100 (30 gave a few violations, 100 none).

Sleeping has ~50-100 us granularity on Linux (more on a loaded machine), far
coarser than a modeled micro-batch (~1-2 us at time_scale 1). So the device
keeps a sleep debt: each step adds (modeled - real); once the debt exceeds
min_sleep_s (200 us) it sleeps, and any overshoot is carried as credit. The
total time of a run then follows the model; individual steps are placed with
up to min_sleep_s of jitter. flush() sleeps off the remaining debt.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from hosts.common.device import DeviceStats, PacedDevice

U280_HBM_PEAK_BPS = 460e9
U280_HBM_MEASURED_BPS = 425e9
V100_HBM_PEAK_BPS = 900e9


# Accounting and paced sleeping are shared with the deep-learning devices
# (hosts/dnn/device.py); the old names stay importable from here.
_StatsMixin = DeviceStats


class CpuDevice(_StatsMixin):
    """The host CPU itself: the modeled time is the measured time (never invalid)."""

    name = "cpu"

    def __init__(self):
        self._reset_stats()

    def step_time(self, n_samples: int, n_features_slice: int, nnz: int | None = None,
                  phase: str = "step") -> None:
        return None  # unknown in advance: whatever the CPU takes

    def run(self, fn: Callable[[], Any], n_samples: int = 0, n_features_slice: int = 0,
            nnz: int | None = None, phase: str = "step"):
        t0 = time.perf_counter()
        result = fn()
        real = time.perf_counter() - t0
        self._record(real, real)
        return result, real, real

    def describe(self) -> dict[str, Any]:
        return {"device": self.name, "model": "measured"}


class ModeledDevice(PacedDevice):
    """Base for devices whose time comes from a formula (subclasses: _phase_times)."""

    name = "modeled"

    def _phase_times(self, n: int, f: int, nnz: int | None) -> tuple[float, float]:
        raise NotImplementedError

    def step_time(self, n_samples: int, n_features_slice: int, nnz: int | None = None,
                  phase: str = "step") -> float:
        fwd, bwd = self._phase_times(int(n_samples), int(n_features_slice), nnz)
        t = {"forward": fwd, "backward": bwd, "step": fwd + bwd}.get(phase)
        if t is None:
            raise ValueError(f"phase must be forward/backward/step, got {phase!r}")
        return t * self.time_scale

    def run(self, fn: Callable[[], Any], n_samples: int, n_features_slice: int,
            nnz: int | None = None, phase: str = "step"):
        modeled = self.step_time(n_samples, n_features_slice, nnz, phase)
        t0 = time.perf_counter()
        result = fn()
        real = time.perf_counter() - t0
        self.charge(modeled, real)
        return result, modeled, real

    @staticmethod
    def slice_bytes(n: int, f: int, nnz: int | None, value_bytes: int = 4,
                    index_bytes: int = 4) -> int:
        """Bytes of a micro-batch feature slice: dense float32 or CSR."""
        if nnz is None:
            return n * f * value_bytes
        return nnz * (value_bytes + index_bytes) + (n + 1) * index_bytes


class U280Device(ModeledDevice):
    """Emulated Xilinx Alveo U280 running a memory-bound GLM SGD engine.

    See the module docstring for the numbers and their sources."""

    name = "u280"

    def __init__(self, hbm_efficiency: float = 0.5, latency_s: float = 1e-6,
                 hbm_peak_Bps: float = U280_HBM_PEAK_BPS, value_bytes: int = 4,
                 index_bytes: int = 4, time_scale: float = 1.0, sleep: bool = True,
                 min_sleep_s: float = 200e-6):
        super().__init__(time_scale, sleep, min_sleep_s)
        if not 0 < hbm_efficiency <= 1:
            raise ValueError(f"hbm_efficiency must be in (0, 1], got {hbm_efficiency}")
        self.hbm_efficiency, self.latency_s = hbm_efficiency, latency_s
        self.hbm_peak_Bps, self.value_bytes, self.index_bytes = hbm_peak_Bps, value_bytes, index_bytes

    @property
    def effective_Bps(self) -> float:
        return self.hbm_peak_Bps * self.hbm_efficiency

    def _phase_times(self, n, f, nnz):
        stream = self.slice_bytes(n, f, nnz, self.value_bytes, self.index_bytes) / self.effective_Bps
        half = self.latency_s / 2
        return stream + half, stream + half

    def describe(self) -> dict[str, Any]:
        return {"device": self.name, "hbm_peak_Bps": self.hbm_peak_Bps,
                "hbm_efficiency": self.hbm_efficiency, "effective_Bps": self.effective_Bps,
                "latency_s": self.latency_s, "time_scale": self.time_scale,
                "formula": "2*bytes/effective_Bps + latency_s (x time_scale)"}


class GpuDevice(ModeledDevice):
    """Emulated NVIDIA V100 running GLM SGD as a few CUDA kernels per step."""

    name = "gpu"

    def __init__(self, hbm_efficiency: float = 0.7, launch_s: float = 5e-6,
                 kernels_forward: int = 2, kernels_backward: int = 2,
                 hbm_peak_Bps: float = V100_HBM_PEAK_BPS, value_bytes: int = 4,
                 index_bytes: int = 4, time_scale: float = 1.0, sleep: bool = True,
                 min_sleep_s: float = 200e-6):
        super().__init__(time_scale, sleep, min_sleep_s)
        if not 0 < hbm_efficiency <= 1:
            raise ValueError(f"hbm_efficiency must be in (0, 1], got {hbm_efficiency}")
        self.hbm_efficiency, self.launch_s = hbm_efficiency, launch_s
        self.kernels_forward, self.kernels_backward = kernels_forward, kernels_backward
        self.hbm_peak_Bps, self.value_bytes, self.index_bytes = hbm_peak_Bps, value_bytes, index_bytes

    @property
    def effective_Bps(self) -> float:
        return self.hbm_peak_Bps * self.hbm_efficiency

    def _phase_times(self, n, f, nnz):
        data = self.slice_bytes(n, f, nnz, self.value_bytes, self.index_bytes)
        vb, bw = self.value_bytes, self.effective_Bps
        fwd = self.kernels_forward * self.launch_s + (data + f * vb + n * vb) / bw
        bwd = self.kernels_backward * self.launch_s + (data + 3 * f * vb) / bw
        return fwd, bwd

    def describe(self) -> dict[str, Any]:
        return {"device": self.name, "hbm_peak_Bps": self.hbm_peak_Bps,
                "hbm_efficiency": self.hbm_efficiency, "effective_Bps": self.effective_Bps,
                "launch_s": self.launch_s, "kernels": self.kernels_forward + self.kernels_backward,
                "time_scale": self.time_scale,
                "formula": "kernels*launch_s + (2*bytes + 4*f*4 + n*4)/effective_Bps"}


DEVICES = {"cpu": CpuDevice, "u280": U280Device, "gpu": GpuDevice}


def make_device(spec: str | dict | None):
    """Device from a scenario entry: "u280" or {"type": "u280", "time_scale": 50, ...}."""
    if spec is None:
        return CpuDevice()
    if isinstance(spec, str):
        spec = {"type": spec}
    spec = dict(spec)
    kind = spec.pop("type", "cpu")
    if kind not in DEVICES:
        raise ValueError(f"unknown device type {kind!r}; choose one of {sorted(DEVICES)}")
    try:
        return DEVICES[kind](**spec)
    except TypeError as exc:
        raise ValueError(f"bad parameters for device {kind!r}: {exc}") from None
