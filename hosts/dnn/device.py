"""Device model for deep-learning compute: how long a training step of *this*
model takes on a target accelerator.

The real PyTorch work always runs on the CPU (results are real); the device
then paces the caller to the modeled time x time_scale (hosts/common/device.py:
sleep debt, violations when the CPU is slower than the dilated model).

FLOPs come from the model itself: `profile(model, *sample_inputs)` runs one
forward pass with hooks on every leaf module and counts, per layer and per
sample of the batch (batch = first dimension of the first input):
  * nn.Linear   2 * in * out per output row
  * nn.Conv2d   2 * (C_in/groups) * kh * kw per output element
  * nn.LSTM     2 * 4 * hidden * (input + hidden) per token, layer and direction
                (the gate GEMMs; the element-wise gate math is not counted)
  * nn.Embedding no FLOPs; bytes read = output elements x element size,
                charged at the memory bandwidth below
  * anything else (activations, pooling, norms, losses): not counted [A: small
    next to the GEMMs/convolutions of these models]
Backward = 2 x forward FLOPs (gradients w.r.t. inputs and weights) [A: the
usual rule; exact for Linear/Conv without bias]. Embedding backward = forward
bytes again (a scatter of the same size) [A].
Kernels: one launch per counted layer in forward, two in backward [A].

Per phase:  sum over layers of flops / (peak * efficiency)
          + bytes / (hbm_peak * hbm_efficiency) + kernels * launch_s
The optimizer step is not charged [A: an element-wise pass over the parameters,
small next to the forward/backward of a batch].

Per layer, for profiles that know each layer's weights and activations
(hosts/phub/profiles.py: PHub's projection and its emulated workers),
`layer_phase_s` adds the weight traffic (read once per batch in forward; read and
the weight gradient written in backward) and the activations read and written to
the same three terms; its docstring says why a sum and not a max. DnnDevice.hw_time
does not use it yet: `profile` records no weight or activation bytes of a torch
model, and the LHC, EASGD and ShadowSync projections and their validation rows
(device:dnn-*, device:knl) rest on hw_time as it is; moving them is its own change.

Numbers and where they come from. [V] = checked in a source here (the project's
research/time-fidelity.md §5.4), [D] = vendor data-sheet figure quoted, not
re-read here, [A] = our assumption.
  * V100 SXM2: FP32 15.7 TFLOP/s [D: NVIDIA Tesla V100 data sheet]; FP16 tensor
    125 TFLOP/s [D]; HBM2 900 GB/s [D].
  * A100: FP32 19.5, TF32 tensor 156, FP16/BF16 tensor 312 TFLOP/s; HBM 1.555 TB/s
    (40 GB) [V §5.4, citing the NVIDIA data sheet].
  * H100 SXM: FP32 66.9, TF32 494.7, FP16/BF16 989.4 TFLOP/s (dense) [V §5.4].
  * efficiency 0.4 of peak by default [A: §5.4 gives 30-50 % as typical for
    smaller data-parallel DNN jobs (itself an inference, [I]) and 52 % for
    Megatron-LM on A100 [V]; small CPU-sized models would do worse on a real GPU].
  * hbm_efficiency 0.7 [A, as hosts/glm/devices.py GpuDevice].
  * launch_s 5 us per kernel [A: commonly measured 3-10 us, as GpuDevice].
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hosts.common.device import DeviceStats, PacedDevice

# peak FLOP/s by accelerator and precision; HBM bytes/s
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "v100": {"fp32": 15.7e12, "fp16": 125e12},                     # [D]
    "a100": {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12},   # [V]
    "h100": {"fp32": 66.9e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12},  # [V]
    # KNL node (Xeon Phi 7250, as NERSC Cori's): 68 cores x 1.4 GHz x 2 AVX-512 units x
    # 16 fp32 lanes x 2 (FMA) [D: Intel Xeon Phi 7250 product brief, not re-read here]
    "knl": {"fp32": 68 * 1.4e9 * 2 * 16 * 2},
}
HBM_BPS: dict[str, float] = {"v100": 900e9, "a100": 1.555e12, "h100": 3.35e12,
                             "knl": 400e9}   # knl: 16 GB MCDRAM, ~400+ GB/s [D, not re-read]
# h100 HBM3 3.35 TB/s: [D: NVIDIA H100 SXM data sheet], not in §5.4
DEFAULT_EFFICIENCY = 0.4       # [A]
DEFAULT_HBM_EFFICIENCY = 0.7   # [A]
DEFAULT_LAUNCH_S = 5e-6        # [A]


def layer_phase_s(phase: str, batch: float, flops_per_sample: float, activation_bytes_per_sample: float,
                  weight_bytes: float, flops_rate: float, mem_rate: float, launch_s: float) -> float:
    """One layer's forward or backward seconds for a per-layer profile that knows the
    layer's weights and activations (PHub's projection, papers/phub.py compute_times, and
    its emulated workers, hosts/phub/model.py): compute + memory + kernel launches.

      forward   flops x batch;      reads its input, writes its output (activation bytes
                x batch), reads the weights once per batch; 1 kernel
      backward  2 x flops x batch;  the data-gradient kernel reads the output gradient and
                the weights and writes the input gradient, the weight-gradient kernel reads
                the output gradient and the input and writes the weight gradient: 2 x the
                activation bytes x batch + 2 x the weight bytes; 2 kernels
    flops_rate and mem_rate are effective rates (peak x efficiency). Weights are per
    batch, not per sample: at small batches a fully connected layer's time is its
    weight traffic as much as its FLOPs.

    Sum, not max(compute, memory) (the roofline bound for one kernel that overlaps
    both perfectly): a layer here is several kernels (data and weight gradients, bias,
    the uncounted element-wise ops), and the measured per-layer backward times on an
    H200 (testbed/reproduce/measurements/data/gpu_h200_layer_times_2026-11-27.json,
    AlexNet's fully connected layers, strict fp32, at this formula with the H200's
    data-sheet 67 TFLOP/s fp32 and 4.8 TB/s [D, not re-read here] and the default
    efficiencies) sit nearer
    the sum: fc6/fc7/fc8 at batch 32 took 275/159/101 us, the sum gives 281/131/40 and
    the max 190/90/30; at batch 64 283/140/63 us against 463/212/60 (sum) and
    371/170/49 (max); over the six, mean |ln(model / measured)| is 0.35 for the sum
    and 0.48 for the max. Neither follows the measured flatness from batch 32 to 64 (a
    skinny GEMM's efficiency rises with the batch, a constant efficiency cannot), and
    the convolutions, compute-bound either way (sum and max within 8 %), conv2-conv5
    run 1.1-4.5x faster than 40 % of the fp32 peak allows (cuDNN's Winograd/FFT
    algorithms do fewer FLOPs)."""
    if phase == "forward":
        flops, moved, kernels = flops_per_sample * batch, activation_bytes_per_sample * batch + weight_bytes, 1
    elif phase == "backward":
        flops, moved, kernels = (2 * flops_per_sample * batch,
                                 2 * activation_bytes_per_sample * batch + 2 * weight_bytes, 2)
    else:
        raise ValueError(f"phase must be forward or backward, got {phase!r}")
    if flops_rate <= 0 or mem_rate <= 0:
        raise ValueError(f"rates must be > 0, got flops_rate {flops_rate}, mem_rate {mem_rate}")
    return flops / flops_rate + moved / mem_rate + kernels * launch_s


@dataclass
class LayerCost:
    name: str
    kind: str
    flops_per_sample: float = 0.0   # forward
    bytes_per_sample: float = 0.0   # forward memory traffic charged at HBM speed


@dataclass
class ModelProfile:
    """Forward cost per sample of each counted layer of one model."""

    layers: list[LayerCost] = field(default_factory=list)

    @property
    def flops_per_sample(self) -> float:
        return sum(x.flops_per_sample for x in self.layers)

    @property
    def bytes_per_sample(self) -> float:
        return sum(x.bytes_per_sample for x in self.layers)

    def as_dict(self) -> dict[str, Any]:
        return {"flops_per_sample_forward": self.flops_per_sample,
                "bytes_per_sample_forward": self.bytes_per_sample,
                "layers": [x.__dict__ for x in self.layers]}


def _first_tensor(x: Any):
    import torch  # noqa: PLC0415
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x:
        return _first_tensor(x[0])
    return None


def profile(model: Any, *sample_inputs: Any) -> ModelProfile:
    """Count the forward cost of `model` per sample on one sample batch (see module doc)."""
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    first = _first_tensor(sample_inputs)
    if first is None or first.dim() == 0:
        raise ValueError("profile needs at least one batched tensor input (batch = first dimension)")
    batch = first.shape[0]
    costs: list[LayerCost] = []
    hooks = []

    def hook_for(name: str, m: nn.Module) -> Callable:
        def hook(mod, inputs, output):
            out = _first_tensor(output)
            inp = _first_tensor(inputs)
            c = LayerCost(name, type(mod).__name__)
            if isinstance(mod, nn.Linear):
                c.flops_per_sample = 2.0 * mod.in_features * mod.out_features * (out.numel() / mod.out_features) / batch
            elif isinstance(mod, nn.Conv2d):
                kh, kw = mod.kernel_size
                c.flops_per_sample = 2.0 * (mod.in_channels / mod.groups) * kh * kw * out.numel() / batch
            elif isinstance(mod, nn.LSTM):
                tokens = inp.shape[0] * inp.shape[1] if inp.dim() == 3 else inp.shape[0]
                dirs = 2 if mod.bidirectional else 1
                per_token = 0.0
                for layer in range(mod.num_layers):
                    in_sz = mod.input_size if layer == 0 else mod.hidden_size * dirs
                    per_token += dirs * 2.0 * 4 * mod.hidden_size * (in_sz + mod.hidden_size)
                c.flops_per_sample = per_token * tokens / batch
            elif isinstance(mod, nn.Embedding):
                c.bytes_per_sample = out.numel() * out.element_size() / batch
            else:
                return
            costs.append(c)
        return hook

    counted = (nn.Linear, nn.Conv2d, nn.LSTM, nn.Embedding)
    for name, m in model.named_modules():
        if isinstance(m, counted):
            hooks.append(m.register_forward_hook(hook_for(name or type(m).__name__, m)))
    try:
        with torch.no_grad():
            model(*sample_inputs)
    finally:
        for h in hooks:
            h.remove()
    return ModelProfile(costs)


class DnnDevice(PacedDevice):
    """An emulated accelerator training one profiled model (see the module doc)."""

    def __init__(self, accelerator: str = "v100", precision: str = "fp32",
                 efficiency: float = DEFAULT_EFFICIENCY, hbm_efficiency: float = DEFAULT_HBM_EFFICIENCY,
                 launch_s: float = DEFAULT_LAUNCH_S, time_scale: float = 1.0, sleep: bool = True,
                 min_sleep_s: float = 200e-6):
        super().__init__(time_scale, sleep, min_sleep_s)
        if accelerator not in PEAK_FLOPS:
            raise ValueError(f"unknown accelerator {accelerator!r}; known: {sorted(PEAK_FLOPS)}")
        if precision not in PEAK_FLOPS[accelerator]:
            raise ValueError(f"{accelerator} has no {precision!r} peak here; "
                             f"known: {sorted(PEAK_FLOPS[accelerator])}")
        for what, v in (("efficiency", efficiency), ("hbm_efficiency", hbm_efficiency)):
            if not 0 < v <= 1:
                raise ValueError(f"{what} must be in (0, 1], got {v}")
        if launch_s < 0:
            raise ValueError(f"launch_s must be >= 0, got {launch_s}")
        self.name = accelerator
        self.accelerator, self.precision = accelerator, precision
        self.peak_flops = PEAK_FLOPS[accelerator][precision]
        self.hbm_Bps = HBM_BPS[accelerator]
        self.efficiency, self.hbm_efficiency, self.launch_s = efficiency, hbm_efficiency, launch_s
        self.model: ModelProfile | None = None

    def profile(self, model: Any, *sample_inputs: Any) -> ModelProfile:
        self.model = profile(model, *sample_inputs)
        return self.model

    def hw_time(self, batch_size: int, phase: str = "step") -> float:
        """Undilated seconds of one forward/backward/step of `batch_size` samples."""
        if self.model is None:
            raise RuntimeError("call profile(model, *sample_inputs) before asking for step times")
        m, n = self.model, int(batch_size)
        flops_rate = self.peak_flops * self.efficiency
        mem_rate = self.hbm_Bps * self.hbm_efficiency
        k = len(m.layers)
        fwd = m.flops_per_sample * n / flops_rate + m.bytes_per_sample * n / mem_rate + k * self.launch_s
        bwd = 2 * m.flops_per_sample * n / flops_rate + m.bytes_per_sample * n / mem_rate + 2 * k * self.launch_s
        t = {"forward": fwd, "backward": bwd, "step": fwd + bwd}.get(phase)
        if t is None:
            raise ValueError(f"phase must be forward/backward/step, got {phase!r}")
        return t

    def step_time(self, batch_size: int, phase: str = "step") -> float:
        """Dilated seconds (what the emulation sleeps to)."""
        return self.hw_time(batch_size, phase) * self.time_scale

    def run(self, fn: Callable[[], Any], batch_size: int, phase: str = "step"):
        """fn() on the CPU, then paced to the model: (result, modeled_s dilated, real_s)."""
        modeled = self.step_time(batch_size, phase)
        t0 = time.perf_counter()
        result = fn()
        real = time.perf_counter() - t0
        self.charge(modeled, real)
        return result, modeled, real

    def describe(self) -> dict[str, Any]:
        return {"device": self.accelerator, "precision": self.precision, "peak_flops": self.peak_flops,
                "efficiency": self.efficiency, "hbm_Bps": self.hbm_Bps,
                "hbm_efficiency": self.hbm_efficiency, "launch_s": self.launch_s,
                "time_scale": self.time_scale,
                "formula": "flops/(peak*eff) + bytes/(hbm*hbm_eff) + kernels*launch_s; bwd = 2x fwd flops",
                **({"model": self.model.as_dict()} if self.model else {})}


class MeasuredDevice(DeviceStats):
    """No device model: a step takes what the CPU takes (never invalid, never dilated)."""

    name = "cpu"
    time_scale = 1.0

    def __init__(self):
        self._reset_stats()
        self.model: ModelProfile | None = None

    def profile(self, model: Any, *sample_inputs: Any) -> ModelProfile:
        self.model = profile(model, *sample_inputs)
        return self.model

    def run(self, fn: Callable[[], Any], batch_size: int = 0, phase: str = "step"):
        t0 = time.perf_counter()
        result = fn()
        real = time.perf_counter() - t0
        self._record(real, real)
        return result, real, real

    def hw_time(self, batch_size: int, phase: str = "step") -> None:
        return None

    def flush(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"device": "cpu", "model": "measured"}


def make_device(spec: dict[str, Any] | None) -> DnnDevice | MeasuredDevice:
    """{"type": "cpu"} or {"type": "v100"|"a100"|"h100", "precision", "efficiency",
    "hbm_efficiency", "launch_s", "time_scale"}; unknown keys are errors."""
    spec = dict(spec or {"type": "cpu"})
    kind = spec.pop("type", "cpu")
    if kind == "cpu":
        if spec:
            raise ValueError(f"device type cpu takes no options, got {sorted(spec)}")
        return MeasuredDevice()
    allowed = {"precision", "efficiency", "hbm_efficiency", "launch_s", "time_scale"}
    bad = sorted(set(spec) - allowed)
    if bad:
        raise ValueError(f"device: unknown option(s) {bad}; allowed: {sorted(allowed)}")
    return DnnDevice(kind, **spec)
