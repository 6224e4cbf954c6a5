"""Measure, on one real GPU, the constants the testbed's GPU models assume.

    python3 -m bench.gpu_constants --out gpu_constants.json          # the GPU run (CUDA)
    .venv/bin/python -m bench.gpu_constants --device cpu --smoke --out /tmp/gpu_smoke.json

Written for a single run on an NVIDIA H100 (the papers' testbeds used V100s: the
numbers here are an H100's, to be compared with the models' V100 assumptions,
never pasted in as V100 values). Every number's unit is in its key
(`_us`, `_ms`, `_GBps`, `_bytes`). Parts, in run order, one module each under
bench/gpu/ (its docstring has the method; bench/gpu/common.py has the sizes, timers
and results file they share):

  env        device, SM count, torch / CUDA versions, UTC date, host, command line.
  launch     one tiny kernel + sync, round trip; 10,000 back to back; as one CUDA graph.
  stream     bandwidth of x.sum(), y.copy_(x), x.fill_(c) at 2**28 float32.
  lhc_codec  a torch port of hosts/lhc/codec.py, checked bit for bit against it, then
             support / plan / encode / decode timed per model profile and the public demo.
  glm        P4SGD's GPU counterpart: dense logistic-regression minibatch step, f x b grid.
  fwd_bwd    forward + backward per mini-batch, fp32 and bf16 autocast, of the papers'
             models (VGG19, ResNet-50, Inception-v3, AlexNet, BERT-base, LSTM LM, NeuMF).

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
import time
from pathlib import Path
from typing import Callable

import torch

from bench.gpu.common import FULL, SMOKE, Budget, Results, error_record, log, start_clock
from bench.gpu.env import part_env
from bench.gpu.fwd_bwd import part_fwd_bwd
from bench.gpu.glm import part_glm
from bench.gpu.launch import part_launch
from bench.gpu.lhc_codec import part_lhc_codec
from bench.gpu.stream import part_stream

PARTS = ("env", "launch", "stream", "lhc_codec", "glm", "fwd_bwd")
# Seconds each part may use at most (the whole run: --budget-s); fwd_bwd gets what is left.
PART_BUDGET_S = {"launch": 20, "stream": 20, "lhc_codec": 110, "glm": 20, "fwd_bwd": 300}


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
    start_clock()
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
    budget = Budget(a.budget_s, PART_BUDGET_S)
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
