"""Part glm of bench/gpu_constants.py: P4SGD's GPU counterpart, a dense
logistic-regression minibatch step (X @ w, sigmoid, residual, X^T @ r, w update) on an
f x b grid.
"""
from __future__ import annotations

import statistics

import torch

from bench.gpu.common import Budget, Sizes, safe_count_kernels, summary, time_ms, wall_ms


def part_glm(dev: torch.device, sz: Sizes, budget: Budget) -> dict:
    out = {"step": "z = X @ w; r = sigmoid(z) - y; g = X.T @ r; w -= lr/b * g (float32, dense)",
           "model_bytes_formula": "hosts/glm/devices.py GpuDevice: 2 b f 4 + 4 f 4 + b 4",
           "sync_clock": "perf_counter, sync before and after each step",
           "async_clock": f"CUDA events around {sz.glm_reps} back-to-back steps / {sz.glm_reps}",
           "cases": []}
    gen = torch.Generator(device=dev).manual_seed(0)
    for f in sz.glm_features:
        for b in sz.glm_batches:
            if budget.left_s() < 2:
                out["cases"].append({"features": f, "batch": b, "skipped": "time budget"})
                continue
            X = torch.randn(b, f, device=dev, generator=gen)
            y = (torch.rand(b, device=dev, generator=gen) < 0.5).float()
            w = torch.zeros(f, device=dev)

            def step():
                r = torch.sigmoid(X @ w) - y
                w.add_(X.t() @ r, alpha=-0.1 / b)
            sync_ms = wall_ms(step, dev, sz.glm_reps, warmup=10)
            batch = time_ms(lambda: [step() for _ in range(sz.glm_reps)], dev, 3, warmup=1)
            nbytes = 2 * b * f * 4 + 4 * f * 4 + b * 4
            med = statistics.median(sync_ms)
            out["cases"].append({"features": f, "batch": b, "sync_step": summary(sync_ms, "ms"),
                                 "async_ms_per_step": statistics.median(batch) / sz.glm_reps,
                                 "model_bytes": nbytes, "effective_GBps_sync": nbytes / (med * 1e-3) / 1e9,
                                 "torch_kernels": safe_count_kernels(step, dev)})
    return out
