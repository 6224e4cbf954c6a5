"""The task every EASGD host shares: LeNet on an image data set (scikit-learn's
digits by default; MNIST / CIFAR-10 files through hosts/easgd/datasets.py),
with the weights as one flat float32 vector (what crosses the network and what
the rules in hosts/easgd/rules.py update).

Every host builds the same initial weights from the seed, so the master's
centre and every worker's W_j start equal without a broadcast.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hosts.dnn.data import batches, shard
from hosts.dnn.lenet import LeNet, accuracy
from hosts.easgd.datasets import load

DIGITS = {"source": "digits"}
DIGITS_SHAPE = (1, 8, 8)


def build(seed: int, widths: dict, shape: tuple[int, int, int] = DIGITS_SHAPE) -> LeNet:
    """LeNet for inputs of `shape` (C, H, W): hosts.dnn.lenet's 8x8 one-channel net,
    its first convolution and first linear layer resized for other inputs."""
    torch.manual_seed(seed)
    model = LeNet(**widths)
    c, h, w = shape
    if tuple(shape) != DIGITS_SHAPE:
        model.features[0] = nn.Conv2d(c, widths["c1"], 3, padding=1)
        model.classifier[1] = nn.Linear(widths["c2"] * (h // 4) * (w // 4), widths["hidden"])
    return model


def input_shape(dataset: Any) -> tuple[int, int, int]:
    return tuple(dataset.x.shape[1:])


def initial_weights(seed: int, widths: dict, dataset: dict | None = None) -> torch.Tensor:
    shape = DIGITS_SHAPE if not dataset or dataset.get("source", "digits") == "digits" \
        else input_shape(load(dataset, seed)[1])
    return parameters_to_vector(build(seed, widths, shape).parameters()).detach().clone()


class Task:
    """One worker's model, shard and gradient at any flat weight vector."""

    def __init__(self, seed: int, widths: dict, rank: int, world: int, batch_size: int,
                 dataset: dict | None = None):
        self.train, self.test = load(dataset or DIGITS, seed)
        self.model = build(seed, widths, input_shape(self.train))
        self.shard = shard(torch.arange(len(self.train)), rank, world)
        if len(self.shard) < batch_size:
            raise ValueError(f"rank {rank}'s shard has {len(self.shard)} samples, fewer than "
                             f"batch_size {batch_size}: use fewer workers or a smaller batch")
        self.batch_size, self.seed, self.rank = batch_size, seed, rank
        self.loss_fn = nn.CrossEntropyLoss()

    def weights(self) -> torch.Tensor:
        return parameters_to_vector(self.model.parameters()).detach().clone()

    def tensor_sizes(self) -> list[int]:
        """Values of each parameter tensor, in the flat vector's order (per-tensor allreduce)."""
        return [p.numel() for p in self.model.parameters()]

    def batches(self) -> Iterator[torch.Tensor]:
        """Index batches forever, a seeded order per (seed, rank, epoch)."""
        epoch = 0
        while True:
            yield from batches(self.shard, self.batch_size, self.seed * 1009 + self.rank, epoch)
            epoch += 1

    def sample(self) -> torch.Tensor:
        return self.train.x[self.shard[:self.batch_size]]

    def gradient(self, w: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(flat gradient of the batch loss at w, the loss)."""
        vector_to_parameters(w, self.model.parameters())
        self.model.zero_grad(set_to_none=False)
        loss = self.loss_fn(self.model(self.train.x[idx]), self.train.y[idx])
        loss.backward()
        g = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])
        return g.detach().clone(), float(loss.detach())


class Evaluator:
    """Test-set accuracy of flat weights (data set loaded once)."""

    def __init__(self, seed: int, widths: dict, dataset: dict | None = None):
        _, self.test = load(dataset or DIGITS, seed)
        self.model = build(seed, widths, input_shape(self.test))

    def __call__(self, w: Any) -> float:
        vector_to_parameters(torch.as_tensor(w, dtype=torch.float32), self.model.parameters())
        return accuracy(self.model, self.test)
