"""Measure, on one real GPU, the constants the testbed's GPU models assume.

    python3 -m bench.gpu_constants --out gpu_constants.json          # the GPU run (CUDA)
    .venv/bin/python -m bench.gpu_constants --device cpu --smoke --out /tmp/gpu_smoke.json

Written for a single run on an NVIDIA H100 (the papers' testbeds used V100s: the
numbers here are an H100's, to be compared with the models' V100 assumptions,
never pasted in as V100 values). Every number's unit is in its key
(`_us`, `_ms`, `_GBps`, `_bytes`). Parts, in run order:

  env        device, SM count, torch / CUDA versions, UTC date, host, command line.
  launch     (a) one tiny kernel (`x.add_(1)` on 1 element) + torch.cuda.synchronize(),
             host perf_counter per call, median / p90 over 5000 calls; (b) 10,000 such
             kernels launched back to back, one sync: perf_counter from before the first
             launch to after the sync (and CUDA events over the same span), per kernel;
             (c) the same 10,000 kernels captured as one CUDA graph and replayed.
  stream     bandwidth at 2**28 float32 of x.sum() (reads 4N B), y.copy_(x) (8N B),
             x.fill_(c) (4N B); CUDA events, median of 10 after warm-up, GB/s = 1e9 B/s.
  lhc_codec  a torch port of hosts/lhc/codec.py (support bitmap, the plan = peeling on
             counts, encode = signed scatter-add of 3 hashes into rows x lanes int32
             counters + the dense 2-core, decode = peeling rounds + a final all-zero
             check), using the numpy module's own block_hashes / sizing rules so cells
             and signs are identical. First checked bit for bit against the numpy codec
             (plan, every worker's payload, the decoded sum). Then per model profile of
             hosts/lhc/profiles.py at FULL size, 4 workers (masks from
             hosts/lhc/gradients.py's ProfileSource run at size_scale 1, overlap 0.5),
             and the public demo's setting (2^27 values, 5 %, one mask for all), CUDA
             events, median of 5 after one warm-up, of: support, plan, encode (one
             worker), decode; beside the bytes and launches hosts/lhc/timing.step_bytes
             charges for the step, effective_GBps = those bytes / measured time, and the
             kernels the torch code launches (torch.profiler). The model charges one
             kernel per peeling round; this decode launches 4 (recorded). The hash
             tables (K x blocks, from codec.block_hashes) are cached per size, outside
             the plan's time. Torch ops, not fused kernels: an upper bound on what a
             hand-written codec needs.
  glm        P4SGD's GPU counterpart: dense logistic-regression minibatch step
             (X @ w, sigmoid, residual, X^T @ r, w update), f x b grid.
  fwd_bwd    forward + backward (no optimizer step) per mini-batch, fp32 and bf16
             autocast: VGG19, ResNet-50, Inception-v3, AlexNet (torchvision), BERT-base
             (transformers, from BertConfig(), no download), Zaremba's large LSTM LM,
             NCF NeuMF at MovieLens-20M sizes. perf_counter with a sync before and after
             each mini-batch, median of 10 after 3 warm-ups, cudnn.benchmark on; fp32
             with torch's TF32 defaults (recorded).

The JSON is rewritten after every part (and every item of the long parts), so a
run cut short still leaves what it measured; a part or item that raises records
its error and the run goes on. A wall-clock budget (--budget-s) skips the items
that no longer fit, and says so.

`--smoke` shrinks every size (CPU check of the code paths, seconds): its numbers
mean nothing. Imports only numpy, torch, torchvision and transformers (the latter
two through importlib, inside fwd_bwd: the GPU host has them, the project venv does
not) and the numpy-only hosts.lhc modules codec, sizing, profiles, gradients and,
for the modeled bytes, timing (the GPU host has no project venv).
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import socket
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from hosts.lhc import codec, profiles, sizing

WORKERS = 4
PROFILE_OVERLAP = 0.5          # hosts/lhc/gradients.py ProfileSource default (papers/lhc.py profile_overlap)
PARTS = ("env", "launch", "stream", "lhc_codec", "glm", "fwd_bwd")
# Seconds each part may use at most (the whole run: --budget-s); fwd_bwd gets what is left.
PART_BUDGET_S = {"launch": 20, "stream": 20, "lhc_codec": 110, "glm": 20, "fwd_bwd": 300}


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
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {msg}", flush=True)


class Budget:
    """The run's wall-clock allowance; each part gets min(its share, what is left)."""

    def __init__(self, total_s: float):
        self.end = time.perf_counter() + total_s
        self.part_end = self.end

    def start_part(self, name: str) -> None:
        self.part_end = min(self.end, time.perf_counter() + PART_BUDGET_S.get(name, 30))

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


# ---------------------------------------------------------------------------
# Part 1: env
# ---------------------------------------------------------------------------
def _version(module: str) -> str | None:
    try:
        return importlib.import_module(module).__version__
    except Exception as exc:
        return f"unavailable ({type(exc).__name__}: {exc})"


def part_env(dev: torch.device, sz: Sizes) -> dict:
    env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "hostname": socket.gethostname(), "argv": list(sys.argv), "cwd": os.getcwd(),
           "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "numpy": np.__version__, "torchvision": _version("torchvision"),
           "transformers": _version("transformers"), "device": str(dev), "smoke": sz.smoke,
           "cpu_count": os.cpu_count()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        env.update({"device_name": p.name, "sm_count": p.multi_processor_count,
                    "compute_capability": f"{p.major}.{p.minor}",
                    "total_memory_GiB": round(p.total_memory / 2 ** 30, 2),
                    "l2_cache_MiB": round(getattr(p, "L2_cache_size", 0) / 2 ** 20, 2) or None})
    else:
        env.update({"device_name": platform.processor() or platform.machine(), "sm_count": None})
    return env


# ---------------------------------------------------------------------------
# Part 2: launch latency
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# Part 3: streaming bandwidth
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# Part 4: the LHC codec in torch
# ---------------------------------------------------------------------------
BIT_SHIFTS = {}


def support_bitmap(g: torch.Tensor) -> torch.Tensor:
    """float gradient (length a multiple of 8) -> uint8 bitmap, bit i of byte k = g[8k + i] != 0
    (codec.pack_bits' layout, bytes instead of uint32 words)."""
    s = BIT_SHIFTS.setdefault(g.device, torch.arange(8, dtype=torch.uint8, device=g.device))
    bits = g.ne(0).view(torch.uint8).view(-1, 8)
    return (bits << s).sum(1, dtype=torch.uint8)


def unpack_bitmap(words: torch.Tensor, n: int) -> torch.Tensor:
    s = BIT_SHIFTS.setdefault(words.device, torch.arange(8, dtype=torch.uint8, device=words.device))
    return ((words[:, None] >> s) & 1).view(-1)[:n].bool()


_HASHES: dict = {}


def hash_tables(blocks: int, rows: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """codec.block_hashes (numpy) on the device, cached per size: they depend on (blocks,
    rows) only, like the shared seeds; a few K x blocks values, not part of any step's time."""
    key = (blocks, rows, str(dev))
    if key not in _HASHES:
        row, sign = codec.block_hashes(blocks, rows)
        _HASHES[key] = (torch.from_numpy(row).to(dev), torch.from_numpy(sign).to(torch.int32).to(dev))
    return _HASHES[key]


@dataclass
class TorchPlan:
    """codec.Plan on the device, with the sketched positions stored in peeling order, so a
    round is a contiguous slice [bounds[r], bounds[r+1])."""
    n: int
    lanes: int
    rows: int
    union: int
    order_pos: torch.Tensor       # flat index of each sketched position, in peeling order
    cells: torch.Tensor           # (sketched, K) counter per hash
    signs: torch.Tensor           # (sketched, K) int32 +-1
    pure_cell: torch.Tensor       # the counter it is read from when it peels
    pure_sign: torch.Tensor
    core_pos: torch.Tensor        # flat index of the 2-core positions (sent dense)
    bounds: list[int] = field(default_factory=list)
    alive: list[int] = field(default_factory=list)     # positions alive when each round starts
    round_sel: list[torch.Tensor] = field(default_factory=list)   # kept only when asked (check)
    core_idx: torch.Tensor | None = None

    @property
    def counters(self) -> int:
        return self.rows * self.lanes

    @property
    def rounds(self) -> int:
        return len(self.bounds) - 1

    @property
    def core(self) -> int:
        return int(self.core_pos.numel())


def make_plan_torch(union_words: torch.Tensor, n: int, keep_rounds: bool = False) -> TorchPlan:
    """codec.make_plan (default sizing) from the OR-ed support bitmap, peeling on counts on
    the device. Rounds end with a host sync (their count depends on the data)."""
    dev = union_words.device
    pos = torch.nonzero(unpack_bitmap(union_words, n)).view(-1)
    m = int(pos.numel())
    L = sizing.lanes_for(m, n)
    R = sizing.sketch_rows(m, L)
    rowtab, signtab = hash_tables(-(-n // L), R, dev)
    b, t = pos // L, pos % L
    cells = rowtab[:, b] * L + t                       # (K, m)
    signs = signtab[:, b]
    count = torch.bincount(cells.view(-1), minlength=R * L).to(torch.int32)
    minus_one = torch.full((), -1, dtype=torch.int32, device=dev)
    alive, live_cells = torch.arange(m, device=dev), cells
    sels, js, bounds, alive_n = [], [], [0], []
    while alive.numel():
        pure = count[live_cells] == 1                  # (K, alive)
        idx = torch.nonzero(pure.any(0)).view(-1)      # host sync: the round's size
        if idx.numel() == 0:
            break
        alive_n.append(int(alive.numel()))
        sels.append(alive[idx])
        js.append(pure[:, idx].to(torch.uint8).argmax(0))   # first pure hash, as np.argmax
        gone = live_cells[:, idx].reshape(-1)
        count.index_add_(0, gone, minus_one.expand(gone.numel()))
        bounds.append(bounds[-1] + int(idx.numel()))
        keep = torch.ones(alive.numel(), dtype=torch.bool, device=dev)
        keep[idx] = False
        alive, live_cells = alive[keep], live_cells[:, keep]
    del count, live_cells
    order = torch.cat(sels) if sels else torch.empty(0, dtype=torch.int64, device=dev)
    j = torch.cat(js).long().view(-1, 1) if js else torch.empty((0, 1), dtype=torch.int64, device=dev)
    c_o = cells[:, order].t().contiguous()
    s_o = signs[:, order].t().contiguous()
    plan = TorchPlan(n, L, R, m, pos[order], c_o, s_o, c_o.gather(1, j).view(-1), s_o.gather(1, j).view(-1),
                     pos[alive], bounds, alive_n)
    if keep_rounds:
        plan.round_sel, plan.core_idx = sels, alive
    return plan


def encode_torch(q: torch.Tensor, plan: TorchPlan) -> torch.Tensor:
    """codec.encode: int32 sketch (rows x lanes) of the sketched positions ++ the core values."""
    v = q[plan.order_pos]
    acc = torch.zeros(plan.counters, dtype=torch.int32, device=q.device)
    acc.index_add_(0, plan.cells.view(-1), (plan.signs * v[:, None]).view(-1))   # int32 wraps, as the switch
    return torch.cat([acc, q[plan.core_pos]])


def peel_round(S: torch.Tensor, vals: torch.Tensor, plan: TorchPlan, a: int, b: int) -> None:
    """One decode round, 4 kernels by construction: gather the pure counters, times the
    sign (into vals), signs x values, scatter-subtract from all K counters."""
    torch.mul(S[plan.pure_cell[a:b]], plan.pure_sign[a:b], out=vals[a:b])
    S.index_add_(0, plan.cells[a:b].view(-1), (plan.signs[a:b] * vals[a:b, None]).view(-1), alpha=-1)


def decode_torch(payload: torch.Tensor, plan: TorchPlan) -> torch.Tensor:
    """codec.decode: the summed payload -> the summed int32 gradient; DecodeError unless
    every counter is zero after the last round (one host sync, at the end)."""
    if payload.numel() != plan.counters + plan.core:
        raise codec.DecodeError(f"payload has {payload.numel()} values, the plan expects "
                                f"{plan.counters + plan.core}")
    S = payload[:plan.counters].clone()
    vals = torch.empty(plan.order_pos.numel(), dtype=torch.int32, device=payload.device)
    for a, b in zip(plan.bounds[:-1], plan.bounds[1:]):
        peel_round(S, vals, plan, a, b)
    left = int(torch.count_nonzero(S))
    if left:
        raise codec.DecodeError(f"{left} sketch counter(s) nonzero after peeling")
    out = torch.zeros(plan.n, dtype=torch.int32, device=payload.device)
    out[plan.order_pos] = vals
    out[plan.core_pos] = payload[plan.counters:]
    return out


def wrap32_sum(payloads: list[np.ndarray]) -> np.ndarray:
    """The switch's int32 SUM: mod 2^32."""
    return np.sum(np.stack(payloads).astype(np.int64), axis=0).astype(np.int32)


def codec_check(dev: torch.device, n: int, density: float, seed: int = 1) -> dict:
    """The torch codec against hosts/lhc/codec.py, bit for bit: bitmaps, plan (rounds,
    core), each worker's payload, the decoded sum; and a corrupted sketch must raise."""
    rng = np.random.default_rng(seed)
    # 80 % of each worker's nonzeros on positions common to all workers, |value| just
    # under 2^28 with one sign per position: a position's sum stays < 2^30 (scale.py's
    # bound) while counters adding several common positions wrap around int32
    # (counted below as counters_wrapped_in_sum)
    sign = rng.choice([-1, 1], n)
    common = rng.choice(n, int(n * density * 0.8), replace=False)
    qs = []
    for _ in range(WORKERS):
        q = np.zeros(n, np.int32)
        idx = np.union1d(common, rng.choice(n, int(n * density * 0.2), replace=False))
        q[idx] = rng.integers(2 ** 28 - 2 ** 24, 2 ** 28, idx.size) * sign[idx]
        qs.append(q)
    union = np.logical_or.reduce([q != 0 for q in qs])
    ref_plan = codec.make_plan(union)
    ref_payloads = [codec.encode(q, ref_plan) for q in qs]
    ref_sum = codec.decode(wrap32_sum(ref_payloads), ref_plan)

    pad = (-n) % 8
    tq = [torch.from_numpy(np.concatenate([q, np.zeros(pad, np.int32)])).to(dev) for q in qs]
    bitmaps = [support_bitmap(q.float()) for q in tq]
    bitmap_ok = all(np.array_equal(bm.cpu().numpy()[:(n + 7) // 8],
                                   codec.pack_bits(q != 0).view(np.uint8)[:(n + 7) // 8])
                    for bm, q in zip(bitmaps, qs))
    words = bitmaps[0]
    for bm in bitmaps[1:]:
        words = words | bm
    plan = make_plan_torch(words, n, keep_rounds=True)
    rounds_ok = (plan.rounds == len(ref_plan.rounds)
                 and all(np.array_equal(s.cpu().numpy(), r[0]) for s, r in zip(plan.round_sel, ref_plan.rounds)))
    core_ok = np.array_equal(plan.core_idx.cpu().numpy(), ref_plan.core)
    tq = [q[:n] for q in tq]
    payloads = [encode_torch(q, plan) for q in tq]
    payload_ok = all(np.array_equal(p.cpu().numpy(), r) for p, r in zip(payloads, ref_payloads))
    summed = payloads[0]
    for p in payloads[1:]:
        summed = summed + p                  # int32 tensors: wraps mod 2^32
    decoded = decode_torch(summed, plan)
    decode_ok = np.array_equal(decoded.cpu().numpy(), ref_sum)
    exact_ok = np.array_equal(ref_sum, wrap32_sum(qs))
    corrupted = summed.clone()
    corrupted[0] += 1
    try:
        decode_torch(corrupted, plan)
        corrupt_caught = False
    except codec.DecodeError:
        corrupt_caught = True
    wrapped = int(np.count_nonzero(np.abs(np.sum(np.stack(ref_payloads).astype(np.int64), 0)) >= 2 ** 31))
    checks = {"bitmaps_equal": bitmap_ok, "rounds_equal": rounds_ok, "core_equal": core_ok,
              "payloads_equal": payload_ok, "decode_equal": decode_ok, "numpy_decode_exact": exact_ok,
              "corrupted_sketch_raises": corrupt_caught}
    return {"n_values": n, "density": density, "common_share": 0.8, "workers": WORKERS,
            "union_values": ref_plan.union,
            "rounds": len(ref_plan.rounds), "core_values": int(ref_plan.core.size),
            "counters_wrapped_in_sum": wrapped, **checks, "passed": all(checks.values())}


def profile_masks(name: str, scale: float) -> tuple[list[np.ndarray], float]:
    """Each worker's nonzero mask, hosts/lhc/gradients.py's generator at `scale` (iteration 0,
    seed 0): its per-layer mask only; values are drawn on the device."""
    from hosts.lhc.gradients import ProfileSource  # noqa: PLC0415  (numpy-only, imports profiles)
    t = time.perf_counter()
    src = ProfileSource(name, size_scale=scale, overlap=PROFILE_OVERLAP, seed=0)
    masks = [np.concatenate([src._layer_mask(r, 0, li, lo, hi, d, c)
                             for li, (lo, hi, d, c) in enumerate(src.layers)]) for r in range(WORKERS)]
    return masks, time.perf_counter() - t


def demo_masks(n: int, density: float = 0.05) -> tuple[list[np.ndarray], float]:
    """The public demo's setting (testbed/reproduce/papers/lhc.py DEMO_*): 2^27 values, 5 %
    nonzero, the same mask on every worker (its GPUs are seeded alike)."""
    t = time.perf_counter()
    m = np.random.default_rng(3).random(n) < density
    return [m] * WORKERS, time.perf_counter() - t


def _values(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """int32 fixed-point values, nonzero exactly on mask, |v| < 2^20 (4 workers never overflow)."""
    v = torch.randint(1, 2 ** 20, mask.shape, dtype=torch.int32, device=mask.device, generator=gen)
    v[torch.rand(mask.shape, device=mask.device, generator=gen) < 0.5] *= -1
    return v * mask


def _model_bytes():
    """hosts/lhc/timing.step_bytes (and its V100 constants), imported lazily: it pulls in
    hosts.common. If that does not import here, the same formulas, cited."""
    try:
        from hosts.lhc import timing  # noqa: PLC0415
        return timing.step_bytes, {"source": "hosts.lhc.timing.step_bytes",
                                   "v100_Bps": timing.V100_HBM_PEAK_BPS * timing.GPU_EFFICIENCY,
                                   "v100_launch_s": timing.GPU_LAUNCH_S}
    except Exception as exc:
        def step_bytes(step: str, work: dict) -> tuple[float, int]:
            n, u, rounds = work.get("n", 0), work.get("union", 0), work.get("rounds", 0)
            passes = work.get("passes", max(1, rounds))
            return {"support": (4 * n + n / 8, 1), "encode": (4 * n + 24 * u + 12 * u * passes, 2),
                    "decode": (24 * u * passes + 4 * n, max(1, rounds) + 1)}[step]
        return step_bytes, {"source": f"formulas of hosts/lhc/timing.py step_bytes (import failed: {exc})",
                            "v100_Bps": 900e9 * 0.7, "v100_launch_s": 5e-6}


def _step_record(ms: list[float], model_b: float, model_k: int, model: dict, formula: str,
                 kernels: dict | None, alive_b: float | None = None) -> dict:
    med = statistics.median(ms)
    rec = {**summary(ms, "ms"), "model_bytes": model_b, "model_kernels": model_k, "model_formula": formula,
           "effective_GBps": model_b / (med * 1e-3) / 1e9 if med > 0 else None,
           "model_v100_ms": (model_k * model["v100_launch_s"] + model_b / model["v100_Bps"]) * 1e3,
           "torch_kernels": kernels}
    if alive_b is not None:
        rec["model_bytes_alive_passes"] = alive_b
        rec["effective_GBps_alive_passes"] = alive_b / (med * 1e-3) / 1e9 if med > 0 else None
    return rec


def codec_case(dev: torch.device, masks_np: list[np.ndarray], reps: int) -> dict:
    """Support, plan, encode (worker 0) and decode at one gradient size, timed on the device."""
    step_bytes, model = _model_bytes()
    reset_peak(dev)
    n = masks_np[0].size
    pad = (-n) % 8
    gen = torch.Generator(device=dev).manual_seed(0)
    qs, words = [], None
    for m in masks_np:
        mask = torch.from_numpy(np.concatenate([m, np.zeros(pad, bool)])).to(dev)
        q = _values(mask, gen)
        del mask
        bm = support_bitmap(q.float())
        words = bm if words is None else words | bm
        qs.append(q)
    g0 = qs[0].float()
    rec: dict[str, Any] = {"n_values": n, "workers": WORKERS, "worker0_nonzeros": int(masks_np[0].sum())}

    sup_ms = time_ms(lambda: support_bitmap(g0), dev, reps)
    sup_k = safe_count_kernels(lambda: support_bitmap(g0), dev)
    del g0
    plan_ms = time_ms(lambda: make_plan_torch(words, n), dev, reps)
    plan_k = safe_count_kernels(lambda: make_plan_torch(words, n), dev)
    plan = make_plan_torch(words, n)
    u = plan.union
    qs = [q[:n] for q in qs]
    enc_ms = time_ms(lambda: encode_torch(qs[0], plan), dev, reps)
    enc_k = safe_count_kernels(lambda: encode_torch(qs[0], plan), dev)
    summed = encode_torch(qs[0], plan)
    truth = qs[0].clone()
    for q in qs[1:]:
        summed += encode_torch(q, plan)      # int32: wraps mod 2^32, as the switch's SUM
        truth += q
    del qs
    dec_ms = time_ms(lambda: decode_torch(summed, plan), dev, reps)
    dec_k = safe_count_kernels(lambda: decode_torch(summed, plan), dev)
    round_k = None
    if plan.rounds and dev.type == "cuda":
        S = summed[:plan.counters].clone()
        vals = torch.empty(plan.order_pos.numel(), dtype=torch.int32, device=dev)
        a, b = plan.bounds[0], plan.bounds[1]
        round_k = safe_count_kernels(lambda: peel_round(S, vals, plan, a, b), dev)
        del S, vals
    exact = bool(torch.equal(decode_torch(summed, plan), truth))

    passes = sum(plan.alive) / u if u else 0.0           # |U|-sized passes the peeling really makes
    work = {"n": n, "union": u, "rounds": plan.rounds}
    alive_work = dict(work, passes=passes)
    sb, sk = step_bytes("support", work)
    eb, ek = step_bytes("encode", work)
    db, dk = step_bytes("decode", work)
    ea, da = step_bytes("encode", alive_work)[0], step_bytes("decode", alive_work)[0]
    plan_b, plan_ba = 12 * u * max(1, plan.rounds), 12 * u * passes      # the plan term of encode's bytes
    sketch_b = eb - plan_b                                                # 4n + 24u
    rec.update({
        "union_values": u, "union_share": u / n, "lanes": plan.lanes, "rows": plan.rows,
        "counters": plan.counters, "rounds": plan.rounds, "core_values": plan.core,
        "peel_pass_share": passes / plan.rounds if plan.rounds else None,
        "peeled_per_round": [b - a for a, b in zip(plan.bounds[:-1], plan.bounds[1:])],
        "decode_exact": exact, "model_bytes_source": model["source"], "peak_mem_GiB": peak_gib(dev),
        "decode_kernels_per_round": {"by_construction": 4, "model_charges": 1, "profiled_one_round": round_k},
        "steps": {
            "support": _step_record(sup_ms, sb, sk, model, "step_bytes('support'): 4n + n/8", sup_k),
            "plan": _step_record(plan_ms, plan_b, 1, model,
                                 "plan term of step_bytes('encode'): 12 u rounds (model: 1 of encode's 2 "
                                 "kernels); measured includes unpacking the union bitmap", plan_k, plan_ba),
            "encode": _step_record(enc_ms, sketch_b, 1, model,
                                   "sketch term of step_bytes('encode'): 4n + 24u (1 of its 2 kernels)", enc_k),
            "encode_incl_plan": _step_record([p + e for p, e in zip(sorted(plan_ms), sorted(enc_ms))], eb, ek,
                                             model, "step_bytes('encode'): 4n + 24u + 12u rounds, 2 kernels; "
                                             "measured = plan + encode, rep by rep in sorted order", None, ea),
            "decode": _step_record(dec_ms, db, dk, model, "step_bytes('decode'): 24u rounds + 4n, rounds + 1 "
                                   "kernels", dec_k, da),
        }})
    del plan, summed, truth, words
    free_memory(dev)
    return rec


def part_lhc_codec(dev: torch.device, sz: Sizes, budget: Budget, res: Results) -> dict:
    out: dict[str, Any] = {
        "implementation": "torch port of hosts/lhc/codec.py in bench/gpu_constants.py (support_bitmap, "
                          "make_plan_torch, encode_torch, decode_torch); hashes from codec.block_hashes, "
                          "rows / lanes from hosts.lhc.sizing",
        "clock": f"CUDA events per call, median of {sz.codec_reps} after 1 warm-up",
        "mask_generator": "hosts.lhc.gradients.ProfileSource._layer_mask (numpy), size_scale "
                          f"{sz.profile_scale}, overlap {PROFILE_OVERLAP}, iteration 0, seed 0; values drawn "
                          "on the device (int32, |v| < 2^20)",
        "decode_kernels_note": "the model (hosts/lhc/timing.py) charges 1 kernel per peeling round; "
                               "this decode launches 4 per round (see each case's decode_kernels_per_round)",
        "cases": {}}
    res.doc["lhc_codec"] = out
    try:
        out["correctness"] = codec_check(dev, sz.check_n, sz.check_density)
    except Exception as exc:
        out["correctness"] = dict(error_record(exc), passed=False)
    log(f"lhc correctness: passed={out['correctness'].get('passed')}")
    res.save()
    names = sorted(profiles.PROFILES, key=lambda k: profiles.PROFILES[k].params)   # VGG19, the largest, last
    for name in names + ["demo_2^27"]:
        if budget.left_s() < 15:
            out["cases"][name] = {"skipped": "time budget"}
            continue
        log(f"lhc {name} ...")
        try:
            if name == "demo_2^27":
                masks, gen_s = demo_masks(sz.demo_n)
                case = {"setting": "public demo: n = 2^27 (smoke: smaller), 5 % nonzero iid, same mask on "
                                   "all workers"}
            else:
                masks, gen_s = profile_masks(name, sz.profile_scale)
                case = {"profile_params": profiles.PROFILES[name].params, "size_scale": sz.profile_scale}
            case["mask_gen_s"] = gen_s
            case.update(codec_case(dev, masks, sz.codec_reps))
            del masks
        except Exception as exc:
            case = error_record(exc)
            free_memory(dev)
        out["cases"][name] = case
        s = case.get("steps", {})
        log(f"lhc {name}: " + ", ".join(f"{k} {v['median_ms']:.3f} ms" for k, v in s.items()))
        res.save()
    return out


# ---------------------------------------------------------------------------
# Part 6: GLM minibatch step (P4SGD's GPU counterpart)
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# Part 5: forward + backward of the papers' models
# ---------------------------------------------------------------------------
class LstmLM(torch.nn.Module):
    """Zaremba et al. 2014 'large': 2 x LSTM(1500), vocab 10k, dropout 0.65, untied softmax."""

    def __init__(self, vocab: int = 10_000, hidden: int = 1500, layers: int = 2, dropout: float = 0.65):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.drop = torch.nn.Dropout(dropout)
        self.lstm = torch.nn.LSTM(hidden, hidden, layers, dropout=dropout)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):                 # (steps, batch)
        h, _ = self.lstm(self.drop(self.emb(tokens)))
        return self.out(self.drop(h))


class NeuMF(torch.nn.Module):
    """NCF NeuMF as MLPerf's reference: GMF embeddings 64, MLP embeddings 128 (layers
    256-256-128-64: the first is the concatenated user+item input), predict from GMF ++ MLP."""

    def __init__(self, users: int = 138_493, items: int = 26_744, gmf: int = 64, mlp=(256, 256, 128, 64)):
        super().__init__()
        self.ug, self.ig = torch.nn.Embedding(users, gmf), torch.nn.Embedding(items, gmf)
        self.um, self.im = torch.nn.Embedding(users, mlp[0] // 2), torch.nn.Embedding(items, mlp[0] // 2)
        self.mlp = torch.nn.Sequential(*[m for a, b in zip(mlp[:-1], mlp[1:])
                                         for m in (torch.nn.Linear(a, b), torch.nn.ReLU())])
        self.final = torch.nn.Linear(gmf + mlp[-1], 1)

    def forward(self, user, item):
        gmf = self.ug(user) * self.ig(item)
        mlp = self.mlp(torch.cat([self.um(user), self.im(item)], dim=1))
        return self.final(torch.cat([gmf, mlp], dim=1)).squeeze(1)


@dataclass
class DnnCase:
    name: str
    build: Callable[[], torch.nn.Module]
    batches: tuple[int, ...]
    inputs: Callable[[int, torch.device], tuple]        # batch, device -> (args, target)
    loss: Callable[[Any, Any], torch.Tensor]
    input_shape: Callable[[int], list]
    note: str = ""


def _ce(out, target):
    return torch.nn.functional.cross_entropy(out, target)


def _image_loss(out, target):
    """Cross-entropy; Inception-v3 in train mode with aux_logits returns (logits, aux_logits):
    logits + 0.4 x auxiliary, as torchvision's reference training script."""
    if isinstance(out, tuple):
        return _ce(out[0], target) + 0.4 * _ce(out[1], target)
    return _ce(out, target)


def _image_case(name: str, ctor: str, batches, side: int, smoke: bool, note: str = "", **kw) -> DnnCase:
    if smoke:                     # 75 x 75: Inception-v3's smallest input (without its aux head)
        side = 75
        if "aux_logits" in kw:
            kw["aux_logits"] = False

    def build():
        # importlib: torchvision is a package of the GPU host, not of the project venv
        # (tests/unit/test_declared_dependencies.py reads import statements)
        tv = importlib.import_module("torchvision.models")
        return getattr(tv, ctor)(weights=None, **kw)

    def inputs(b, dev):
        return (torch.randn(b, 3, side, side, device=dev),), torch.randint(0, 1000, (b,), device=dev)
    return DnnCase(name, build, batches, inputs, _image_loss, lambda b: [b, 3, side, side], note)


def dnn_cases(sz: Sizes) -> list[DnnCase]:
    s = sz.smoke
    tiny = (2,) if s else None
    cases = [
        _image_case("vgg19", "vgg19", tiny or (32, 64), 224, s),
        _image_case("resnet50", "resnet50", tiny or (32, 64), 224, s),
        _image_case("inception_v3", "inception_v3", tiny or (32,), 299, s, aux_logits=True, init_weights=False,
                    note="train mode: loss = logits + 0.4 x auxiliary logits (smoke: no aux head); "
                         "init_weights=False (the init does not change the timing)"),
        _image_case("alexnet", "alexnet", tiny or (128,), 224, s),
    ]
    seq, vocab_bert = (16, 1000) if s else (128, 30_522)

    def bert():
        tr = importlib.import_module("transformers")         # a GPU-host package, as torchvision above
        cfg = (tr.BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64) if s else tr.BertConfig())
        return tr.BertForMaskedLM(cfg)

    def bert_inputs(b, dev):
        ids = torch.randint(0, vocab_bert, (b, seq), device=dev)
        return (ids,), ids

    def bert_loss(out, ids):                 # the MLM loss with every token a label
        return _ce(out.logits.reshape(-1, out.logits.shape[-1]), ids.reshape(-1))
    cases.append(DnnCase("bert_base", bert, tiny or (32,), bert_inputs, bert_loss, lambda b: [b, seq],
                         "BertForMaskedLM(BertConfig()) (smoke: a 1-layer, 32-wide config), "
                         "cross-entropy of the MLM logits against the input ids"))
    steps, vocab, hid = (5, 100, 32) if s else (35, 10_000, 1500)
    cases.append(DnnCase(
        "lstm_lm", lambda: LstmLM(vocab, hid), tiny or (20,),
        lambda b, dev: ((torch.randint(0, vocab, (steps, b), device=dev),),
                        torch.randint(0, vocab, (steps * b,), device=dev)),
        lambda out, t: _ce(out.reshape(-1, out.shape[-1]), t), lambda b: [steps, b],
        "Zaremba et al. 2014 large: nn.LSTM(1500, 1500, 2 layers), vocab 10k, 35 steps"))
    users, items, gmf, mlp = (100, 50, 8, (16, 16, 8, 4)) if s else (138_493, 26_744, 64, (256, 256, 128, 64))
    cases.append(DnnCase(
        "ncf_neumf", lambda: NeuMF(users, items, gmf, mlp), (256,) if s else (65_536,),
        lambda b, dev: ((torch.randint(0, users, (b,), device=dev), torch.randint(0, items, (b,), device=dev)),
                        (torch.rand(b, device=dev) < 0.5).float()),
        lambda out, t: torch.nn.functional.binary_cross_entropy_with_logits(out, t), lambda b: [b],
        "MovieLens-20M sizes (hosts/lhc/profiles.py), dense embedding gradients, BCE with logits"))
    return cases


def time_fwd_bwd(model: torch.nn.Module, case: DnnCase, batch: int, dev: torch.device, bf16: bool,
                 sz: Sizes) -> list[float]:
    args, target = case.inputs(batch, dev)

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = case.loss(model(*args), target)
        loss.backward()
    return wall_ms(step, dev, sz.dnn_reps, sz.dnn_warmup)


def part_fwd_bwd(dev: torch.device, sz: Sizes, budget: Budget, res: Results) -> dict:
    torch.backends.cudnn.benchmark = True
    # fp32 is strict fp32 (no TF32 tensor cores): the papers' V100s had none, and an fp32
    # number that silently used TF32 would flatter the H100 by several times.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, Any] = {
        "clock": f"perf_counter, sync before and after each forward+backward, median of {sz.dnn_reps} after "
                 f"{sz.dnn_warmup} warm-ups (the first includes cudnn.benchmark's search)",
        "note": "no optimizer step; gradients set to None before each mini-batch; bf16 = torch.autocast",
        # as set above: strict fp32 (TF32 off) for the fp32 runs
        "tf32": {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                 "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                 "float32_matmul_precision": torch.get_float32_matmul_precision()},
        "models": {}}
    res.doc["fwd_bwd"] = out
    for case in dnn_cases(sz):
        rec: dict[str, Any] = {"note": case.note, "runs": []}
        out["models"][case.name] = rec
        if budget.left_s() < 10:
            rec["skipped"] = "time budget"
            continue
        log(f"fwd_bwd {case.name} ...")
        try:
            model = case.build().to(dev).train()
        except Exception as exc:
            rec.update(error_record(exc))
            res.save()
            continue
        rec["params"] = sum(p.numel() for p in model.parameters())
        attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
        if attn is not None:                 # transformers picks sdpa / eager itself: say which ran
            rec["attn_implementation"] = attn
        for batch in case.batches:
            for bf16 in (False, True):
                run = {"batch": batch, "precision": "bf16_autocast" if bf16 else "fp32",
                       "input_shape": case.input_shape(batch)}
                if budget.left_s() < 8:
                    run["skipped"] = "time budget"
                else:
                    try:
                        reset_peak(dev)
                        ms = time_fwd_bwd(model, case, batch, dev, bf16, sz)
                        run.update(summary(ms, "ms"))
                        run["samples_per_s"] = batch / (statistics.median(ms) * 1e-3)
                        run["peak_mem_GiB"] = peak_gib(dev)
                    except Exception as exc:
                        run.update(error_record(exc))
                    free_memory(dev)
                rec["runs"].append(run)
                log(f"fwd_bwd {case.name} b{batch} {run['precision']}: "
                    f"{run.get('median_ms', run.get('error', run.get('skipped')))}")
                res.save()
        del model
        free_memory(dev)
    return out


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------
def run_part(name: str, fn: Callable[[], dict], res: Results) -> None:
    log(f"part {name} ...")
    t = time.perf_counter()
    try:
        res.doc[name] = fn()
    except Exception as exc:
        res.doc[name] = dict(res.doc.get(name) or {}, **error_record(exc))
        log(f"part {name} FAILED: {exc}")
    res.doc[name]["part_s"] = round(time.perf_counter() - t, 2)
    res.doc.setdefault("parts_done", []).append(name)
    res.save()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write (rewritten after every part)")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke checks only)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the code paths, numbers mean nothing")
    ap.add_argument("--budget-s", type=float, default=270.0, help="wall-clock allowance for the whole run")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    a = ap.parse_args(argv)
    global T0
    T0 = time.perf_counter()
    parts = [p for p in a.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown part(s) {sorted(unknown)}; known: {', '.join(PARTS)}")
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device (use --device cpu --smoke for a code check)")
    sz = SMOKE if a.smoke else FULL
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = Results(out)
    res.doc = {"schema": "bench.gpu_constants/1", "smoke": sz.smoke, "budget_s": a.budget_s}
    budget = Budget(a.budget_s)
    torch.manual_seed(0)
    bodies = {"env": lambda: part_env(dev, sz),
              "launch": lambda: part_launch(dev, sz),
              "stream": lambda: part_stream(dev, sz),
              "lhc_codec": lambda: part_lhc_codec(dev, sz, budget, res),
              "glm": lambda: part_glm(dev, sz, budget),
              "fwd_bwd": lambda: part_fwd_bwd(dev, sz, budget, res)}
    for name in PARTS:
        if name in parts:
            budget.start_part(name)
            run_part(name, bodies[name], res)
    log(f"done: {out}")
    return res.doc


if __name__ == "__main__":
    main()
