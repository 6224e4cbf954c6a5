"""Part launch of bench/gpu_constants.py: kernel launch latency.

(a) one tiny kernel (`x.add_(1)` on 1 element) + torch.cuda.synchronize(), host
perf_counter per call, median / p90 over 5000 calls; (b) 10,000 such kernels launched
back to back, one sync: perf_counter from before the first launch to after the sync (and
CUDA events over the same span), per kernel; (c) the same 10,000 kernels captured as one
CUDA graph and replayed.
"""
from __future__ import annotations

import statistics
import time

import torch

from bench.gpu.common import Sizes, summary, sync


def part_launch(dev: torch.device, sz: Sizes) -> dict:
    x = torch.zeros(1, device=dev)
    out = {"kernel": "x.add_(1) on a 1-element float32 tensor"}

    # (a) one kernel + sync, host clock per call
    for _ in range(200):
        x.add_(1)
        sync(dev)
    rt = []
    for _ in range(sz.launch_reps):
        t = time.perf_counter()
        x.add_(1)
        sync(dev)
        rt.append((time.perf_counter() - t) * 1e6)
    out["roundtrip"] = dict(summary(rt, "us"), clock="perf_counter around x.add_(1); torch.cuda.synchronize()")

    # the sync alone (nothing queued): the floor under (a)
    so = []
    for _ in range(min(1000, sz.launch_reps)):
        t = time.perf_counter()
        sync(dev)
        so.append((time.perf_counter() - t) * 1e6)
    out["sync_only"] = dict(summary(so, "us"), clock="perf_counter around torch.cuda.synchronize() alone")

    # (b) back to back, one sync
    k = sz.launch_batch
    host, gpu = [], []
    for _ in range(6):                       # the first is a warm-up
        sync(dev)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if dev.type == "cuda" else None
        t = time.perf_counter()
        if ev:
            ev[0].record()
        for _ in range(k):
            x.add_(1)
        if ev:
            ev[1].record()
        sync(dev)
        host.append((time.perf_counter() - t) * 1e6 / k)
        if ev:
            gpu.append(ev[0].elapsed_time(ev[1]) * 1e3 / k)
    out["async_batch"] = {"kernels": k, "per_kernel_us": statistics.median(host[1:]),
                          "per_kernel_us_all_reps": host[1:],
                          "gpu_span_per_kernel_us": statistics.median(gpu[1:]) if gpu else None,
                          "clock": "perf_counter from before the first launch to after one sync; "
                                   "gpu_span: CUDA events before the first and after the last launch"}

    # (c) the same kernels as one CUDA graph
    if dev.type != "cuda":
        out["graph"] = {"skipped": "CUDA graphs need a CUDA device"}
        return out
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):           # warm-up on a side stream, as torch's graph docs ask
        for _ in range(3):
            x.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(k):
            x.add_(1)
    before = float(x.item())
    g.replay()
    sync(dev)
    replayed_ok = float(x.item()) - before == k
    reps = []
    for _ in range(5):
        sync(dev)
        t = time.perf_counter()
        g.replay()
        sync(dev)
        reps.append((time.perf_counter() - t) * 1e6 / k)
    out["graph"] = {"kernels": k, "per_kernel_us": statistics.median(reps), "per_kernel_us_all_reps": reps,
                    "replay_adds_up": replayed_ok,
                    "clock": "perf_counter around g.replay(); torch.cuda.synchronize(), after one replay"}
    return out
