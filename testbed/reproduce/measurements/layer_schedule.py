"""When each layer's gradient is ready during backpropagation, measured on one GPU
(data/gpu_h200_layer_times_2026-11-27.json, written by bench/gpu_layer_times.py;
data/README.md names the device, the date and the command), against the per-layer
model the PHub projection uses (testbed/reproduce/papers/phub.py compute_times:
hosts/dnn/device.py layer_phase_s, each layer's backward time its FLOPs at the
effective rate plus its weights read, its weight gradient written and its
activations at the effective memory bandwidth, plus two kernel launches).

What PHub's and the MXNet-like PS's overlap of communication with backpropagation
depends on is the SHAPE of that schedule (how early in the backward pass how much
of the model's gradient bytes exist), not the GPU's speed: so the rows compare the
share of the backward pass elapsed when a given share of the parameters' gradients
is ready, a ratio of two times on one device. The measurement is an H200's
(strict fp32, TF32 off); the projection's nominal GPU is a V100 model: a different
device can change the shape where a layer is launch-bound rather than
compute-bound (AlexNet's small convolutions), or where cuDNN picks an algorithm
that does fewer FLOPs than the model counts (AlexNet's 5x5 and 3x3 convolutions run
1.1-4.5x faster on the H200 than 40 % of its fp32 peak allows), which is part of
what the rows show.

Also the ShadowSync DLRM dense tower's forward + backward step (device:dnn-v100),
as approximately a lower bound: eager PyTorch on an H200 has more compute and bandwidth
than a V100 and the same host-side kernel launches, so a V100 with a comparable host
runs the same code no faster (the host's launch cost is the caveat).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from testbed.reproduce.measurements import Measurement, read_measurement_file

DATA = Path(__file__).with_name("data") / "gpu_h200_layer_times_2026-11-27.json"
SCHEMA = "bench.gpu_layer_times/1"
PHUB_MODELS = ("resnet50", "inception_v3", "alexnet")
PHUB_BATCH = 32                  # papers/phub.py batch_per_worker's nominal
SHARES = (0.5, 0.9)              # shares of the parameters whose gradients are ready
DLRM_BATCH = 128                 # papers/shadowsync.py BATCH (the public DLRM Criteo-Kaggle command)
COMMAND = "python3 -m bench.gpu_layer_times --out $OUT/gpu_layer_times.json"


class LayerTimesDataError(ValueError):
    """The measurement file is missing, a smoke run, or lacks a number asked for."""


@lru_cache(maxsize=None)
def load(path: Path = DATA) -> dict[str, Any]:
    path = Path(path)
    data = read_measurement_file(path, LayerTimesDataError)
    if data.get("schema") != SCHEMA:
        raise LayerTimesDataError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    if data.get("smoke") is not False or data.get("env", {}).get("cuda") is None:
        raise LayerTimesDataError(f"{path}: not a full CUDA run")
    return data


def _run(model: str, batch: int, path: Path = DATA) -> dict[str, Any]:
    rec = load(path)["models"].get(model)
    if not rec or "error" in rec:
        raise LayerTimesDataError(f"{path}: no {model} ({(rec or {}).get('error', 'missing')})")
    for run in rec["runs"]:
        if run.get("batch") == batch and "error" not in run:
            return run
    raise LayerTimesDataError(f"{path}: no {model} run at batch {batch}")


def source(what: str, path: Path = DATA) -> str:
    env = load(path)["env"]
    return (f"measured by this project on one {env['device']} (torch {env['torch']}, CUDA {env['cuda']}, "
            f"cuDNN {env['cudnn']}), {env['utc'][:10]} (`{COMMAND}`; "
            f"testbed/reproduce/measurements/data/{Path(path).name}): {what}")


def ready_share(order: list[tuple[int, float]], share: float) -> float:
    """order: (parameters, ready time as a share of the backward pass) per layer, in
    the order the gradients become ready. The backward share elapsed when `share` of
    all the parameters' gradients are ready."""
    total = sum(p for p, _ in order)
    done = 0
    for params, t in order:
        done += params
        if done >= share * total - 1e-9:
            return t
    raise ValueError("share above 1")


def measured_order(model: str, batch: int = PHUB_BATCH, path: Path = DATA) -> list[tuple[int, float]]:
    run = _run(model, batch, path)
    layers = sorted(run["layers"], key=lambda x: x["ready_ms"])
    return [(x["params"], x["ready_ms"] / run["bwd_ms"]) for x in layers]


def modeled_order(model: str, batch: int = PHUB_BATCH) -> list[tuple[int, float]]:
    """The PHub projection's schedule at its nominal constants and this batch."""
    from hosts.phub.profiles import get_profile  # noqa: PLC0415
    from testbed.reproduce.papers import phub  # noqa: PLC0415 - the model checked here
    _, bwd = phub.compute_times(model, phub._c({"batch_per_worker": batch}))
    params = [x.params for x in get_profile(model).layers]
    total = sum(bwd)
    return [(params[layer], t / total) for layer, t in phub._ready(bwd)]


def dlrm_step_ms(path: Path = DATA) -> float:
    """Forward + backward of the tower at DLRM_BATCH, without the per-layer hooks."""
    plain = _run("dlrm_tower", DLRM_BATCH, path)["no_hooks"]
    return plain["fwd_ms"] + plain["bwd_ms"]


def _dlrm_model_ms() -> float:
    from testbed.reproduce.papers import shadowsync  # noqa: PLC0415 - the model checked here
    return shadowsync.step_hw_s(batch=DLRM_BATCH) * 1e3


def _schedule_rows() -> list[Measurement]:
    rows = []
    for model in PHUB_MODELS:
        for share in SHARES:
            rows.append(Measurement(
                id=f"device:backward-schedule:{model}-b{PHUB_BATCH}-{share:.0%}",
                model="device:backward-schedule",
                quantity=f"{model}: share of the backward pass elapsed when {share:.0%} of the parameters' "
                         "gradients are ready",
                setting=f"batch {PHUB_BATCH}, strict fp32; the measurement is an H200's; the model is "
                        "papers/phub.py compute_times at its nominal constants (per layer: 2 x FLOPs / effective "
                        "rate + (weights read + weight gradient written + 2 x activations) / effective memory "
                        "bandwidth + 2 launches)",
                published=100 * ready_share(measured_order(model), share), unit="% of backward",
                source=source(f"models.{model} batch {PHUB_BATCH}: per-layer ready_ms / bwd_ms"),
                predict=lambda m=model, s=share: 100 * ready_share(modeled_order(m), s)))
    return rows


def _dlrm_rows() -> list[Measurement]:
    return [Measurement(
        id=f"device:dnn-v100:dlrm-tower-b{DLRM_BATCH}", model="device:dnn-v100",
        quantity="DLRM dense tower forward + backward of one mini-batch (approximately a lower bound for a V100)",
        setting=f"the public DLRM Criteo-Kaggle tower (13-512-256-64-16, 512-256-1, 26 tables of dim 16), batch "
                f"{DLRM_BATCH}, eager PyTorch, strict fp32, on an H200 without the per-layer hooks; the step is "
                "launch-bound, so a V100 with a comparable host runs the same code no faster; model: papers/shadowsync.py step_hw_s (DnnDevice v100)",
        published=dlrm_step_ms(), unit="ms",
        source=source(f"models.dlrm_tower batch {DLRM_BATCH} no_hooks fwd_ms + bwd_ms"),
        predict=_dlrm_model_ms)]


MEASUREMENTS: list[Measurement] = _schedule_rows() + _dlrm_rows()
