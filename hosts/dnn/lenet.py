"""LeNet-class CNN on scikit-learn's bundled handwritten digits (8x8, 10 classes,
1797 images; no download). The CPU-sized stand-in for the EASGD family's
LeNet/CIFAR CNNs: two conv layers, two fully connected.

    model = LeNet(); train, test = digits(seed)   # Dataset(x: N,1,8,8 float32 in [0,1], y)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hosts.dnn.data import split


@dataclass(frozen=True)
class Dataset:
    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


def digits(seed: int, test_fraction: float = 0.2) -> tuple[Dataset, Dataset]:
    """(train, test) of the digits, split by a seeded permutation; pixels / 16."""
    from sklearn.datasets import load_digits  # noqa: PLC0415 - only the examples need sklearn here
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    tr, te = split(len(y), seed, test_fraction)
    return Dataset(x[tr], y[tr]), Dataset(x[te], y[te])


class LeNet(nn.Module):
    """conv(1->c1, 3x3, pad 1) - relu - maxpool 2 - conv(c1->c2, 3x3, pad 1) - relu -
    maxpool 2 - fc(c2*2*2 -> hidden) - relu - fc(hidden -> 10)."""

    def __init__(self, c1: int = 16, c2: int = 32, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(c2 * 2 * 2, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def accuracy(model: nn.Module, data: Dataset) -> float:
    with torch.no_grad():
        return float((model(data.x).argmax(1) == data.y).float().mean())
