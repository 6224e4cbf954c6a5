"""Layer-size profiles of ResNet-50, Inception-v3 and AlexNet for PHub's throughput
scenarios: one entry per layer (its parameter count, its forward FLOPs per image),
derived here from the architectures' definitions, not from a model zoo:
  * ResNet-50: He et al., "Deep Residual Learning for Image Recognition" (2015),
    Table 1 (50-layer: bottleneck blocks [3, 4, 6, 3], widths 64-512, x4 expansion),
    with the stride on the 3x3 convolution and batch norm (gamma, beta) after every
    convolution, as the common ImageNet implementation; 224 x 224 input.
    Published total 25.6 M parameters.
  * Inception-v3: Szegedy et al., "Rethinking the Inception Architecture" (2015),
    Figures 5-7 and Table 1 (modules A x3, reduction, C x4 with 7x1/1x7
    factorizations, reduction, E x2), batch norm (gamma, beta) after every
    convolution, 299 x 299 input, without the auxiliary classifier (used only in
    training's loss, not part of the deployed model). Published total 23.8 M.
  * AlexNet: Krizhevsky et al. (2012) in the single-tower form of "One weird trick"
    (Krizhevsky 2014): convolutions 64-192-384-256-256, fc 4096-4096-1000, biases
    everywhere; 224 x 224 input. Published total 61.1 M.
tests/unit/test_phub_profiles.py checks the totals.

FLOPs: 2 x multiply-accumulates of convolutions and fully connected layers (as
hosts/dnn/device.py counts them); batch norm, pooling and activations are not
counted (as there). A layer's key holds all its parameters (conv/fc weight, bias,
batch-norm gamma and beta), so PHub's keys here are layers. Each layer also has
its input and output activation values per sample (C x H x W of the tensor the
convolution or fc reads and writes), which hosts/dnn/device.py layer_phase_s
charges at the memory bandwidth with the weights.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    params: int
    flops: float      # forward FLOPs per sample
    in_values: int    # input activation values per sample (what the layer reads besides its weights)
    out_values: int   # output activation values per sample


@dataclass(frozen=True)
class Profile:
    name: str
    layers: tuple[Layer, ...]
    published_params: float     # the paper's / model card's total, for the test

    @property
    def params(self) -> int:
        return sum(x.params for x in self.layers)

    @property
    def flops(self) -> float:
        return sum(x.flops for x in self.layers)


class _Net:
    """Tracks channels and spatial size while layers are appended."""

    def __init__(self, c: int, hw: int):
        self.c, self.h, self.w = c, hw, hw
        self.layers: list[Layer] = []

    def conv(self, name: str, cout: int, k, stride: int = 1, pad=0, bn: bool = True, bias: bool = False,
             cin: int | None = None, hw: tuple[int, int] | None = None, commit: bool = True) -> tuple[int, int]:
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        cin = self.c if cin is None else cin
        h, w = hw or (self.h, self.w)
        oh, ow = (h + 2 * ph - kh) // stride + 1, (w + 2 * pw - kw) // stride + 1
        params = cin * cout * kh * kw + (cout if bias else 0) + (2 * cout if bn else 0)
        self.layers.append(Layer(name, params, 2.0 * cin * kh * kw * cout * oh * ow, cin * h * w, cout * oh * ow))
        if commit:
            self.c, self.h, self.w = cout, oh, ow
        return oh, ow

    def pool(self, k: int, stride: int, pad: int = 0) -> None:
        self.h, self.w = (self.h + 2 * pad - k) // stride + 1, (self.w + 2 * pad - k) // stride + 1

    def fc(self, name: str, fin: int, fout: int) -> None:
        self.layers.append(Layer(name, fin * fout + fout, 2.0 * fin * fout, fin, fout))
        self.c, self.h, self.w = fout, 1, 1


def resnet50() -> Profile:
    n = _Net(3, 224)
    n.conv("conv1", 64, 7, 2, 3)
    n.pool(3, 2, 1)
    cin = 64
    for stage, (blocks, width, stride) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), (1, 2, 2, 2)), 2):
        for b in range(blocks):
            s = stride if b == 0 else 1
            h, w = n.h, n.w
            p = f"conv{stage}_{b + 1}"
            n.conv(f"{p}.a", width, 1, cin=cin)
            n.conv(f"{p}.b", width, 3, s, 1)
            n.conv(f"{p}.c", 4 * width, 1)
            if b == 0:
                n.conv(f"{p}.proj", 4 * width, 1, s, cin=cin, hw=(h, w), commit=False)
            cin = 4 * width
    n.fc("fc", 2048, 1000)
    return Profile("resnet50", tuple(n.layers), 25.6e6)


def _inception_a(n: _Net, p: str, pool_features: int) -> None:
    cin, hw = n.c, (n.h, n.w)
    for name, cout, k, pad, src in (("1x1", 64, 1, 0, cin), ("5x5_1", 48, 1, 0, cin), ("5x5_2", 64, 5, 2, 48),
                                    ("dbl_1", 64, 1, 0, cin), ("dbl_2", 96, 3, 1, 64), ("dbl_3", 96, 3, 1, 96),
                                    ("pool", pool_features, 1, 0, cin)):
        n.conv(f"{p}.{name}", cout, k, 1, pad, cin=src, hw=hw, commit=False)
    n.c = 64 + 64 + 96 + pool_features


def _inception_b(n: _Net, p: str) -> None:
    cin, hw = n.c, (n.h, n.w)
    oh, ow = n.conv(f"{p}.3x3", 384, 3, 2, cin=cin, hw=hw, commit=False)
    n.conv(f"{p}.dbl_1", 64, 1, cin=cin, hw=hw, commit=False)
    n.conv(f"{p}.dbl_2", 96, 3, 1, 1, cin=64, hw=hw, commit=False)
    n.conv(f"{p}.dbl_3", 96, 3, 2, cin=96, hw=hw, commit=False)
    n.c, n.h, n.w = 384 + 96 + cin, oh, ow


def _inception_c(n: _Net, p: str, c7: int) -> None:
    cin, hw = n.c, (n.h, n.w)
    r, c = ((1, 7), (0, 3)), ((7, 1), (3, 0))
    for name, cout, k, pad, src in (("1x1", 192, 1, 0, cin), ("7x7_1", c7, 1, 0, cin), ("7x7_2", c7, *r, c7),
                                    ("7x7_3", 192, *c, c7), ("dbl_1", c7, 1, 0, cin), ("dbl_2", c7, *c, c7),
                                    ("dbl_3", c7, *r, c7), ("dbl_4", c7, *c, c7), ("dbl_5", 192, *r, c7),
                                    ("pool", 192, 1, 0, cin)):
        n.conv(f"{p}.{name}", cout, k, 1, pad, cin=src, hw=hw, commit=False)
    n.c = 768


def _inception_d(n: _Net, p: str) -> None:
    cin, hw = n.c, (n.h, n.w)
    n.conv(f"{p}.3x3_1", 192, 1, cin=cin, hw=hw, commit=False)
    oh, ow = n.conv(f"{p}.3x3_2", 320, 3, 2, cin=192, hw=hw, commit=False)
    n.conv(f"{p}.7x7x3_1", 192, 1, cin=cin, hw=hw, commit=False)
    n.conv(f"{p}.7x7x3_2", 192, (1, 7), 1, (0, 3), cin=192, hw=hw, commit=False)
    n.conv(f"{p}.7x7x3_3", 192, (7, 1), 1, (3, 0), cin=192, hw=hw, commit=False)
    n.conv(f"{p}.7x7x3_4", 192, 3, 2, cin=192, hw=hw, commit=False)
    n.c, n.h, n.w = 320 + 192 + cin, oh, ow


def _inception_e(n: _Net, p: str) -> None:
    cin, hw = n.c, (n.h, n.w)
    for name, cout, k, pad, src in (("1x1", 320, 1, 0, cin), ("3x3_1", 384, 1, 0, cin),
                                    ("3x3_2a", 384, (1, 3), (0, 1), 384), ("3x3_2b", 384, (3, 1), (1, 0), 384),
                                    ("dbl_1", 448, 1, 0, cin), ("dbl_2", 384, 3, 1, 448),
                                    ("dbl_3a", 384, (1, 3), (0, 1), 384), ("dbl_3b", 384, (3, 1), (1, 0), 384),
                                    ("pool", 192, 1, 0, cin)):
        n.conv(f"{p}.{name}", cout, k, 1, pad, cin=src, hw=hw, commit=False)
    n.c = 320 + 768 + 768 + 192


def inception_v3() -> Profile:
    n = _Net(3, 299)
    n.conv("conv1a", 32, 3, 2)
    n.conv("conv2a", 32, 3)
    n.conv("conv2b", 64, 3, 1, 1)
    n.pool(3, 2)
    n.conv("conv3b", 80, 1)
    n.conv("conv4a", 192, 3)
    n.pool(3, 2)
    for name, pf in (("mixed5b", 32), ("mixed5c", 64), ("mixed5d", 64)):
        _inception_a(n, name, pf)
    _inception_b(n, "mixed6a")
    for name, c7 in (("mixed6b", 128), ("mixed6c", 160), ("mixed6d", 160), ("mixed6e", 192)):
        _inception_c(n, name, c7)
    _inception_d(n, "mixed7a")
    _inception_e(n, "mixed7b")
    _inception_e(n, "mixed7c")
    n.fc("fc", 2048, 1000)
    return Profile("inception_v3", tuple(n.layers), 23.8e6)


def alexnet() -> Profile:
    n = _Net(3, 224)
    n.conv("conv1", 64, 11, 4, 2, bn=False, bias=True)
    n.pool(3, 2)
    n.conv("conv2", 192, 5, 1, 2, bn=False, bias=True)
    n.pool(3, 2)
    n.conv("conv3", 384, 3, 1, 1, bn=False, bias=True)
    n.conv("conv4", 256, 3, 1, 1, bn=False, bias=True)
    n.conv("conv5", 256, 3, 1, 1, bn=False, bias=True)
    n.pool(3, 2)
    n.fc("fc6", 256 * 6 * 6, 4096)
    n.fc("fc7", 4096, 4096)
    n.fc("fc8", 4096, 1000)
    return Profile("alexnet", tuple(n.layers), 61.1e6)


PROFILES = {"resnet50": resnet50, "inception_v3": inception_v3, "alexnet": alexnet}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(f"unknown model profile {name!r}; known: {sorted(PROFILES)}") from None
