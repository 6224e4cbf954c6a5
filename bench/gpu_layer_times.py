"""Measure, on one real GPU, WHEN each layer's gradient is ready during the backward
pass, and each layer's forward time: the schedule the PHub projection's overlap of
communication with backpropagation depends on (testbed/reproduce/papers/phub.py
derives it from FLOPs; this measures it). Also the ShadowSync DLRM dense tower's
forward + backward per mini-batch (the V100 device model's step, hosts/dnn/dlrm.py).

    python3 -m bench.gpu_layer_times --out layer_times.json            # the GPU run (CUDA)
    .venv/bin/python -m bench.gpu_layer_times --device cpu --smoke --out /tmp/layers_smoke.json

Method (per model and batch; strict fp32, TF32 off, as bench/gpu/fwd_bwd.py):
  * every module that owns parameters directly (convolution, batch norm, linear) gets
    a forward pre-hook and a forward hook that record a CUDA event, and each of its
    parameters a post-accumulate-grad hook that records a CUDA event when that
    parameter's .grad has been written (the autograd engine calls it from the device's
    stream, after the gradient's kernels were queued);
  * one event before loss.backward(), one after; one before the forward pass;
  * 3 warm-up mini-batches (cudnn.benchmark's search), then `reps` timed ones; per
    layer the median over reps of (a) its forward time (its post event - its pre event),
    (b) its gradient-ready time from the start of backward (the latest of its
    parameters' events), with the whole forward and backward times.
Events time the GPU's stream: a kernel that waits for the CPU to launch it counts
(that is the time a real step takes too). Non-parameter ops (ReLU, pooling, adds)
fall between the parameter layers' events: their backward time shows up in the next
ready layer's gap, as the FLOP model lumps them with their layer. The same
mini-batches are then timed without hooks (`no_hooks`): the hooks' Python cost can
delay launches, so a layer's ready time is read as a share of its own hooked
backward, and the no-hooks times are the step's.

Imports only torch, numpy and (through importlib) torchvision: the GPU host has no
project venv. The DLRM case imports hosts.dnn.dlrm (torch + the project's device
model); if that fails there, its error is recorded and the rest runs.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import platform
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.gpu.common import Results, error_record, free_memory, log, start_clock
from bench.gpu.fwd_bwd import _ce

# (name, torchvision constructor, input side, constructor kwargs); the PHub profiles'
# models (hosts/phub/profiles.py): Inception-v3 without its auxiliary head, as the profile.
IMAGE_MODELS = (("resnet50", "resnet50", 224, {}),
                ("inception_v3", "inception_v3", 299, {"aux_logits": False, "init_weights": False}),
                ("alexnet", "alexnet", 224, {}))
BATCHES = (32, 64)             # papers/phub.py batch_per_worker: nominal 32, range 16-64
DLRM_BATCHES = (128, 2048)     # the public DLRM Criteo-Kaggle command's 128; a large batch beside it
REPS, WARMUP = 10, 3


def _leaf_param_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]


class LayerEvents:
    """The hooks and the events of one timed mini-batch (reset before each)."""

    def __init__(self, model: torch.nn.Module, timed: bool):
        self.timed = timed
        self.layers = _leaf_param_modules(model)
        self.fwd: dict[str, list] = {}
        self.ready: dict[str, list] = {}
        self.handles = []
        for name, mod in self.layers:
            self.handles.append(mod.register_forward_pre_hook(self._mark(self.fwd, name, 0)))
            self.handles.append(mod.register_forward_hook(self._mark(self.fwd, name, 1)))
            for p in mod.parameters(recurse=False):
                self.handles.append(p.register_post_accumulate_grad_hook(self._grad_mark(name)))

    def _event(self):
        if not self.timed:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def _mark(self, where: dict, name: str, slot: int):
        def hook(*_):
            where.setdefault(name, [None, None])[slot] = self._event()
        return hook

    def _grad_mark(self, name: str):
        def hook(_p):
            self.ready.setdefault(name, []).append(self._event())
        return hook

    def elapsed_ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.timed else (b - a) * 1e3

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def time_layers(model: torch.nn.Module, make_inputs, loss_fn, dev: torch.device, reps: int,
                warmup: int) -> dict[str, Any]:
    timed = dev.type == "cuda"
    ev = LayerEvents(model, timed)
    per_rep: list[dict[str, Any]] = []
    try:
        for i in range(warmup + reps):
            ev.fwd, ev.ready = {}, {}
            model.zero_grad(set_to_none=True)
            args, target = make_inputs()
            t_fwd = ev._event()
            loss = loss_fn(model(*args), target)
            t_bwd = ev._event()
            loss.backward()
            t_end = ev._event()
            if timed:
                torch.cuda.synchronize(dev)
            if i < warmup:
                continue
            per_rep.append({
                "fwd_ms": ev.elapsed_ms(t_fwd, t_bwd), "bwd_ms": ev.elapsed_ms(t_bwd, t_end),
                "layer_fwd_ms": {n: ev.elapsed_ms(a, b) for n, (a, b) in ev.fwd.items()},
                "layer_ready_ms": {n: max(ev.elapsed_ms(t_bwd, e) for e in es) for n, es in ev.ready.items()}})
    finally:
        ev.remove()
    layers = []
    for name, mod in ev.layers:
        layers.append({
            "name": name, "type": type(mod).__name__,
            "params": sum(p.numel() for p in mod.parameters(recurse=False)),
            "fwd_ms": statistics.median(r["layer_fwd_ms"].get(name, 0.0) for r in per_rep),
            "ready_ms": statistics.median(r["layer_ready_ms"][name] for r in per_rep)})
    return {"reps": reps, "warmup": warmup,
            "fwd_ms": statistics.median(r["fwd_ms"] for r in per_rep),
            "bwd_ms": statistics.median(r["bwd_ms"] for r in per_rep),
            "bwd_ms_runs": [round(r["bwd_ms"], 4) for r in per_rep],
            "layers": layers}


def time_plain(model: torch.nn.Module, make_inputs, loss_fn, dev: torch.device, reps: int,
               warmup: int) -> dict[str, float]:
    """The same mini-batches without the per-layer hooks: what the hooks' own CPU cost
    adds to the hooked times (their events are launched from Python)."""
    timed = dev.type == "cuda"
    mark = (lambda: torch.cuda.Event(enable_timing=True)) if timed else time.perf_counter
    fwd, bwd = [], []
    for i in range(warmup + reps):
        model.zero_grad(set_to_none=True)
        args, target = make_inputs()
        marks = [mark() for _ in range(3)]
        if timed:
            marks[0].record()
        loss = loss_fn(model(*args), target)
        if timed:
            marks[1].record()
        else:
            marks[1] = time.perf_counter()
        loss.backward()
        if timed:
            marks[2].record()
            torch.cuda.synchronize(dev)
            f, b = marks[0].elapsed_time(marks[1]), marks[1].elapsed_time(marks[2])
        else:
            marks[2] = time.perf_counter()
            f, b = (marks[1] - marks[0]) * 1e3, (marks[2] - marks[1]) * 1e3
        if i >= warmup:
            fwd.append(f)
            bwd.append(b)
    return {"fwd_ms": statistics.median(fwd), "bwd_ms": statistics.median(bwd)}


def time_batch(name: str, model: torch.nn.Module, inputs, loss_fn, batch: int, dev, reps, warmup) -> dict:
    """One batch size of one model: hooked per-layer times and the same mini-batches
    without hooks; an error is recorded and the run goes on."""
    try:
        run = time_layers(model, inputs, loss_fn, dev, reps, warmup)
        run["no_hooks"] = time_plain(model, inputs, loss_fn, dev, reps, warmup)
    except Exception as exc:
        run = error_record(exc)
    run["batch"] = batch
    log(f"{name} b{batch}: fwd {run.get('fwd_ms')} bwd {run.get('bwd_ms')} ms; without hooks {run.get('no_hooks')}")
    return run


def image_case(name: str, ctor: str, side: int, kw: dict, batches, dev, reps, warmup, smoke: bool) -> dict:
    tv = importlib.import_module("torchvision.models")
    side = 75 if smoke else side          # Inception-v3's smallest input
    model = getattr(tv, ctor)(weights=None, **kw).to(dev).train()
    rec: dict[str, Any] = {"input_side": side, "params": sum(p.numel() for p in model.parameters()), "runs": []}
    for b in batches:
        log(f"{name} b{b} ...")

        def inputs(b=b):
            return (torch.randn(b, 3, side, side, device=dev),), torch.randint(0, 1000, (b,), device=dev)
        rec["runs"].append(time_batch(name, model, inputs, _ce, b, dev, reps, warmup))
        free_memory(dev)
    return rec


def dlrm_case(batches, dev, reps, warmup) -> dict:
    from hosts.dnn.dlrm import DenseTower   # the project's tower (torch only at run time)
    # the public DLRM Criteo-Kaggle benchmark's shape (testbed/reproduce/papers/shadowsync.py)
    tables, dim, bottom, top = 26, 16, [512, 256, 64], [512, 256]
    tower = DenseTower(13, tables, dim, bottom, top).to(dev).train()
    rec: dict[str, Any] = {"shape": {"n_dense": 13, "tables": tables, "dim": dim, "bottom": bottom, "top": top},
                           "params": sum(p.numel() for p in tower.parameters()), "runs": []}
    for b in batches:
        def inputs(b=b):
            return ((torch.randn(b, 13, device=dev), torch.randn(b, tables, dim, device=dev)),
                    (torch.rand(b, device=dev) < 0.5).float())
        rec["runs"].append(time_batch("dlrm_tower", tower, inputs,
                                      torch.nn.functional.binary_cross_entropy_with_logits, b, dev, reps, warmup))
    return rec


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke checks only)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the code paths, numbers mean nothing")
    a = ap.parse_args(argv)
    start_clock()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device (use --device cpu --smoke for a code check)")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False          # strict fp32, as bench/gpu/fwd_bwd.py
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    reps, warmup = (2, 1) if a.smoke else (REPS, WARMUP)
    batches, dlrm_batches = ((2,), (4,)) if a.smoke else (BATCHES, DLRM_BATCHES)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = Results(out)
    res.doc = {"schema": "bench.gpu_layer_times/1", "smoke": a.smoke,
               "env": {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor(),
                       "torch": torch.__version__, "cuda": torch.version.cuda,
                       "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
                       "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "host": socket.gethostname(), "argv": sys.argv,
                       "tf32": {"cudnn": torch.backends.cudnn.allow_tf32,
                                "matmul": torch.backends.cuda.matmul.allow_tf32}},
               "models": {}}
    res.save()
    for name, ctor, side, kw in IMAGE_MODELS:
        try:
            res.doc["models"][name] = image_case(name, ctor, side, kw, batches, dev, reps, warmup, a.smoke)
        except Exception as exc:
            res.doc["models"][name] = error_record(exc)
        res.save()
    try:
        res.doc["models"]["dlrm_tower"] = dlrm_case(dlrm_batches, dev, reps, warmup)
    except Exception as exc:
        res.doc["models"]["dlrm_tower"] = error_record(exc)
    res.save()
    log(f"done: {out}")
    return res.doc


if __name__ == "__main__":
    main()
