"""Part stream of bench/gpu_constants.py: streaming bandwidth at 2**28 float32 of x.sum()
(reads 4N B), y.copy_(x) (8N B), x.fill_(c) (4N B); CUDA events, median of 10 after
warm-up, GB/s = 1e9 B/s.
"""
from __future__ import annotations

import statistics

import torch

from bench.gpu.common import Sizes, free_memory, summary, time_ms


def part_stream(dev: torch.device, sz: Sizes) -> dict:
    n = sz.stream_n
    x = torch.ones(n, dtype=torch.float32, device=dev)
    y = torch.empty_like(x)
    ops = {"read_sum": (lambda: x.sum(), 4 * n),
           "copy": (lambda: y.copy_(x), 8 * n),
           "store_fill": (lambda: x.fill_(1.5), 4 * n)}
    out = {"values": n, "dtype": "float32", "clock": "CUDA events around each call, median after 3 warm-ups"}
    for name, (fn, nbytes) in ops.items():
        ms = time_ms(fn, dev, sz.stream_reps, warmup=3)
        gbps = [nbytes / (m * 1e-3) / 1e9 for m in ms]
        out[name] = {"bytes": nbytes, "median_GBps": statistics.median(gbps), "max_GBps": max(gbps),
                     **summary(ms, "ms")}
    del x, y
    free_memory(dev)
    return out
