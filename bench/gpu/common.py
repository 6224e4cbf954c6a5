"""The plumbing bench/gpu_constants.py's parts and bench/gpu_layer_times.py share: the run's
sizes (FULL, and SMOKE for the CPU check of the code paths), the log and its clock, the
wall-clock budget, the JSON results file rewritten after every item, error records, and
the timers (CUDA events or perf_counter) and kernel counter (torch.profiler).
"""
from __future__ import annotations

import json
import os
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch


# ---------------------------------------------------------------------------
# Sizes: the real run and the CPU smoke run share every code path
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    launch_reps: int = 5000
    launch_batch: int = 10_000
    stream_n: int = 2 ** 28
    stream_reps: int = 10
    check_n: int = 200_000
    check_density: float = 0.05
    profile_scale: float = 1.0
    codec_reps: int = 5
    demo_n: int = 2 ** 27
    glm_features: tuple[int, ...] = (8192, 65536)
    glm_batches: tuple[int, ...] = (8, 16, 64, 256)
    glm_reps: int = 200
    dnn_reps: int = 10
    dnn_warmup: int = 3
    smoke: bool = False


FULL = Sizes()
SMOKE = Sizes(launch_reps=200, launch_batch=500, stream_n=2 ** 16, stream_reps=3, check_n=50_000,
              profile_scale=1 / 16384, codec_reps=2, demo_n=2 ** 15, glm_features=(256, 1024),
              glm_batches=(8, 64), glm_reps=5, dnn_reps=2, dnn_warmup=1, smoke=True)


# ---------------------------------------------------------------------------
# Plumbing: log, budget, results file, timers
# ---------------------------------------------------------------------------
T0 = time.perf_counter()       # what log and Results.elapsed_s count from; start_clock resets it


def start_clock() -> None:
    """Restart the run's clock (each driver's main calls it before its first log)."""
    global T0
    T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {msg}", flush=True)


class Budget:
    """The run's wall-clock allowance; each part gets min(its share, what is left)."""

    def __init__(self, total_s: float, part_s: dict[str, float]):
        self.end = time.perf_counter() + total_s
        self.part_end = self.end
        self.part_s = part_s           # seconds each part may use at most (the driver's table)

    def start_part(self, name: str) -> None:
        self.part_end = min(self.end, time.perf_counter() + self.part_s.get(name, 30))

    def left_s(self) -> float:
        return self.part_end - time.perf_counter()


class Results:
    """The JSON document, rewritten atomically after every part and item."""

    def __init__(self, path: Path):
        self.path, self.doc = path, {}

    def save(self) -> None:
        self.doc["elapsed_s"] = round(time.perf_counter() - T0, 2)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=_jsonable))
        os.replace(tmp, self.path)


def _jsonable(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def error_record(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=6)}


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def free_memory(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()


def reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def peak_gib(dev: torch.device) -> float | None:
    """Most GPU memory torch held since the last reset_peak (None off CUDA)."""
    return round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2) if dev.type == "cuda" else None


def summary(values: list[float], unit: str) -> dict:
    v = sorted(values)
    return {f"median_{unit}": statistics.median(v), f"p90_{unit}": v[min(len(v) - 1, int(0.9 * len(v)))],
            f"min_{unit}": v[0], "reps": len(v)}


def time_ms(fn: Callable[[], Any], dev: torch.device, reps: int, warmup: int = 1) -> list[float]:
    """Milliseconds per call of fn. CUDA: events recorded on the stream around each call
    (GPU time from the first to the last of its kernels, host syncs inside fn included),
    then a sync; CPU: perf_counter."""
    for _ in range(warmup):
        fn()
    sync(dev)
    out = []
    for _ in range(reps):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e3)
    return out


def wall_ms(fn: Callable[[], Any], dev: torch.device, reps: int, warmup: int) -> list[float]:
    """Milliseconds per call of fn, perf_counter between a sync before and a sync after."""
    for _ in range(warmup):
        fn()
        sync(dev)
    out = []
    for _ in range(reps):
        sync(dev)
        t = time.perf_counter()
        fn()
        sync(dev)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def count_kernels(fn: Callable[[], Any], dev: torch.device) -> dict | None:
    """GPU kernels (and memcpy/memset operations) one call of fn runs, from torch.profiler:
    device-side events, and host-side launch calls (cudaLaunchKernel & co) as a cross-check."""
    if dev.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415
    sync(dev)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync(dev)
    kernels = memops = launches = 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            if e.name.startswith(("Memcpy", "Memset", "memcpy", "memset")):
                memops += 1
            else:
                kernels += 1
        elif "LaunchKernel" in e.name:
            launches += 1
    return {"kernels": kernels, "memcpy_memset": memops, "host_launch_calls": launches}


def safe_count_kernels(fn: Callable[[], Any], dev: torch.device) -> dict | None:
    try:
        return count_kernels(fn, dev)
    except Exception as exc:            # the profiler is a cross-check; its failure is recorded
        return error_record(exc)
