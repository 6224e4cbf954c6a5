"""The models a PHub worker trains: a layer profile (modeled compute, real tensors
of the profile's sizes) or the small real CNN. Both expose flat float32 weights
per key (views of the model's own memory: PHub's updates land there) and run one
iteration as forward (front to back, each layer waiting for its weights) and
backward (back to front, each layer's gradient handed to `push` as it is ready).
"""
from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

import numpy as np

from hosts.common.config import ConfigError
from hosts.phub import objective
from hosts.phub.profiles import get_profile

Wait = Callable[[int], list] | None
Push = Callable[[int, np.ndarray], None] | None


class _Base:
    trace: Any = None

    def _waited(self, wait: Wait, k: int) -> None:
        if wait is not None:
            for n in wait(k) or []:
                self.trace.waited(n)

    def digest(self) -> str:
        h = hashlib.sha1()
        for w in self.weights:
            h.update(w.tobytes())
        return h.hexdigest()


class ProfileModel(_Base):
    """Keys = the profile's layers at size_scale x their size; compute modeled per layer
    on hosts/dnn/device.py's accelerator (layer_phase_s: FLOPs and activation bytes also
    x size_scale, weight bytes of the scaled key), slept x time_scale;
    gradients from hosts/phub/objective.py (they read the current weights)."""

    def __init__(self, cfg, spec: dict[str, Any]):
        from hosts.dnn.device import layer_phase_s, make_device  # noqa: PLC0415
        unknown = sorted(set(spec) - {"kind", "name", "size_scale"})
        if unknown:
            raise ConfigError(f"model: unknown key(s) {unknown}")
        self.profile = get_profile(spec.get("name", "resnet50"))
        self.scale = float(spec.get("size_scale", 1.0))
        self.sizes = [max(1, round(x.params * self.scale)) for x in self.profile.layers]
        self.flops = [x.flops * self.scale for x in self.profile.layers]
        self.act_bytes = [4.0 * (x.in_values + x.out_values) * self.scale for x in self.profile.layers]  # fp32
        dev = dict(cfg.device or {"type": "v100"})
        if dev.get("type") == "cpu":
            raise ConfigError("model profile: compute is modeled only; device type must be an accelerator")
        self.device = make_device(dev)
        self._layer_phase_s = layer_phase_s
        self.batch = cfg.batch_size
        self.weights = objective.initial_weights(cfg.seed, self.sizes)
        self._gbase = [objective.noise_base(cfg.seed, cfg.rank, k, n) for k, n in enumerate(self.sizes)]
        self.grads = [np.empty(n, np.float32) for n in self.sizes]
        self.straggler = cfg.straggler
        self.t_start = time.perf_counter()

    @property
    def time_scale(self) -> float:
        return self.device.time_scale

    def layer_hw(self, k: int, phase: str) -> float:
        """hosts/dnn/device.py layer_phase_s for layer k on this device (fp32 weights: the key's values)."""
        d = self.device
        hw = self._layer_phase_s(phase, self.batch, self.flops[k], self.act_bytes[k], 4.0 * self.sizes[k],
                                 d.peak_flops * d.efficiency, d.hbm_Bps * d.hbm_efficiency, d.launch_s)
        s = self.straggler
        if s and time.perf_counter() - self.t_start >= s.get("start_s", 0.0):
            hw *= s.get("slowdown", 1.0)
        return hw

    def _compute(self, k: int, phase: str, fn=None) -> None:
        t0 = time.perf_counter()
        if fn is not None:
            fn()
        real = time.perf_counter() - t0
        hw = self.layer_hw(k, phase)
        self.device.charge(hw * self.device.time_scale, real)
        self.device.flush()              # the layer is "computed" before its gradient leaves
        self.trace.compute(t0, time.perf_counter(), hw, real, {"layer": k, "phase": phase})

    def iteration(self, it: int, wait: Wait, push: Push) -> float | None:
        for k in range(len(self.sizes)):
            self._waited(wait, k)
            self._compute(k, "forward")
        s = self.straggler
        if s and s.get("delay_ms"):
            time.sleep(s["delay_ms"] / 1e3)
        for k in reversed(range(len(self.sizes))):
            # reads weights[k] as the forward's wait left them (after iteration it - 1)
            self._compute(k, "backward", lambda k=k: objective.gradient(self.weights[k], self._gbase[k], it,
                                                                        self.grads[k]))
            if push is not None:
                push(k, self.grads[k])
        return None

    def describe(self) -> dict[str, Any]:
        return {**self.device.describe(), "profile": self.profile.name, "size_scale": self.scale,
                "batch_size": self.batch, "params": sum(self.sizes)}

    def validity(self) -> dict[str, Any]:
        return self.device.validity()

    def accuracy(self) -> None:
        return None


class CnnModel(_Base):
    """The LeNet-class CNN (hosts/dnn/lenet.py) on the digits: keys = its parameters;
    measured CPU compute (no device model)."""

    def __init__(self, cfg, spec: dict[str, Any]):
        import torch  # noqa: PLC0415
        from hosts.dnn.lenet import LeNet, digits  # noqa: PLC0415
        torch.set_num_threads(1)
        torch.manual_seed(cfg.seed)
        self.torch = torch
        self.net = LeNet()
        self.params = list(self.net.parameters())
        self.weights = [p.data.view(-1).numpy() for p in self.params]
        self.train, self.test = digits(cfg.seed)
        self.rank, self.world, self.batch = cfg.rank, cfg.job.world, cfg.batch_size
        self._wait: Wait = None
        self._push: Push = None
        index = {id(p): k for k, p in enumerate(self.params)}
        for mod in self.net.modules():
            keys = [index[id(p)] for p in mod.parameters(recurse=False)]
            if keys:
                mod.register_forward_pre_hook(lambda m, a, keys=keys: [self._waited(self._wait, k) for k in keys]
                                              and None)
        for k, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, k=k: self._push and self._push(k, p.grad.numpy()))
        self.device_real_s = 0.0

    time_scale = 1.0

    @property
    def grads(self) -> list[np.ndarray]:
        return [p.grad.view(-1).numpy() for p in self.params]

    def iteration(self, it: int, wait: Wait, push: Push) -> float:
        torch = self.torch
        n = len(self.train)
        start = ((it * self.world + self.rank) * self.batch) % max(1, n - self.batch)
        x, y = self.train.x[start:start + self.batch], self.train.y[start:start + self.batch]
        for p in self.params:
            p.grad = None
        self._wait, self._push = wait, push
        t0 = time.perf_counter()
        try:
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            loss.backward()
        finally:
            self._wait = self._push = None
        t1 = time.perf_counter()
        self.device_real_s += t1 - t0
        self.trace.compute(t0, t1, t1 - t0, t1 - t0, {"phase": "forward+backward"})
        return float(loss.detach())

    def describe(self) -> dict[str, Any]:
        return {"device": "cpu", "model": "lenet (measured)", "batch_size": self.batch}

    def validity(self) -> dict[str, Any]:
        return {"valid": True, "real_s_total": self.device_real_s}

    def accuracy(self) -> float:
        from hosts.dnn.lenet import accuracy  # noqa: PLC0415
        return accuracy(self.net, self.test)


def make_model(cfg):
    spec = dict(cfg.model or {})
    kind = spec.get("kind")
    if kind == "profile":
        return ProfileModel(cfg, spec)
    if kind == "cnn":
        return CnnModel(cfg, spec)
    raise ConfigError(f"model.kind must be profile or cnn, got {kind!r}")
