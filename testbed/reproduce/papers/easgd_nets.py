"""The networks You, Buluc, Demmel (SC17) trained, at their real sizes, as torch
modules whose forward cost hosts/dnn/device.py counts (`profile`).

Only their shapes matter here (parameter count: the bytes of every exchange;
FLOPs per layer: the device model's step time); nothing is trained. Which
networks the paper used is inferred (seeds.md §4.2 [I]: MNIST/LeNet, CIFAR-10,
ImageNet AlexNet/GoogLeNet, all Caffe); the layer shapes are Caffe's reference
models as published in BVLC Caffe's model definitions [D: recalled, not re-read]:

  lenet      examples/mnist/lenet_train_test.prototxt: conv 20 5x5, pool, conv 50 5x5,
             pool, ip 500, ip 10 on 28x28x1 (431,080 parameters)
  alexnet    models/bvlc_alexnet: conv 96 11x11/4, conv 256 5x5 (2 groups), conv 384,
             conv 384 (2 groups), conv 256 (2 groups), fc 4096, 4096, 1000 on 227x227x3
             (~61 M parameters)
  googlenet  models/bvlc_googlenet: Inception v1 without its two auxiliary training heads
             [A: they add ~2 % of the FLOPs] on 224x224x3 (~7 M parameters)

`net(name)` -> (ModelProfile, parameter count), computed once per process.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

NETS = ("lenet", "alexnet", "googlenet")
INPUTS = {"lenet": (1, 28, 28), "alexnet": (3, 227, 227), "googlenet": (3, 224, 224)}


def _lenet() -> Any:
    from torch import nn  # noqa: PLC0415
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))


def _alexnet() -> Any:
    from torch import nn  # noqa: PLC0415
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, 1000))


def _googlenet() -> Any:
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    class Inception(nn.Module):
        def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, pp: int):
            super().__init__()
            self.b1 = nn.Conv2d(cin, c1, 1)
            self.b3 = nn.Sequential(nn.Conv2d(cin, r3, 1), nn.ReLU(), nn.Conv2d(r3, c3, 3, padding=1))
            self.b5 = nn.Sequential(nn.Conv2d(cin, r5, 1), nn.ReLU(), nn.Conv2d(r5, c5, 5, padding=2))
            self.bp = nn.Sequential(nn.MaxPool2d(3, 1, padding=1), nn.Conv2d(cin, pp, 1))

        def forward(self, x):
            return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)

    cfg = [(192, 64, 96, 128, 16, 32, 32), (256, 128, 128, 192, 32, 96, 64), "pool",
           (480, 192, 96, 208, 16, 48, 64), (512, 160, 112, 224, 24, 64, 64), (512, 128, 128, 256, 24, 64, 64),
           (512, 112, 144, 288, 32, 64, 64), (528, 256, 160, 320, 32, 128, 128), "pool",
           (832, 256, 160, 320, 32, 128, 128), (832, 384, 192, 384, 48, 128, 128)]
    layers: list[Any] = [nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                         nn.Conv2d(64, 64, 1), nn.ReLU(), nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(3, 2, ceil_mode=True)]
    for c in cfg:
        layers.append(nn.MaxPool2d(3, 2, ceil_mode=True) if c == "pool" else Inception(*c))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000)]
    return nn.Sequential(*layers)


@lru_cache(maxsize=None)
def net(name: str) -> tuple[Any, int]:
    """(hosts.dnn.device.ModelProfile, parameters) of one of NETS (module doc)."""
    import torch  # noqa: PLC0415

    from hosts.dnn.device import profile  # noqa: PLC0415
    if name not in NETS:
        raise ValueError(f"unknown network {name!r}; one of {', '.join(NETS)}")
    model = {"lenet": _lenet, "alexnet": _alexnet, "googlenet": _googlenet}[name]()
    params = sum(p.numel() for p in model.parameters())
    return profile(model, torch.zeros(1, *INPUTS[name])), int(params)
