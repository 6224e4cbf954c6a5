"""The task every EASGD host shares: LeNet on scikit-learn's digits, with the
weights as one flat float32 vector (what crosses the network and what the
rules in hosts/easgd/rules.py update).

Every host builds the same initial weights from the seed, so the master's
centre and every worker's W_j start equal without a broadcast.
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hosts.dnn.data import batches, shard
from hosts.dnn.lenet import LeNet, accuracy, digits


def build(seed: int, widths: dict) -> LeNet:
    torch.manual_seed(seed)
    return LeNet(**widths)


def initial_weights(seed: int, widths: dict) -> torch.Tensor:
    return parameters_to_vector(build(seed, widths).parameters()).detach().clone()


class Task:
    """One worker's model, shard and gradient at any flat weight vector."""

    def __init__(self, seed: int, widths: dict, rank: int, world: int, batch_size: int):
        self.model = build(seed, widths)
        self.train, self.test = digits(seed)
        self.shard = shard(torch.arange(len(self.train)), rank, world)
        if len(self.shard) < batch_size:
            raise ValueError(f"rank {rank}'s shard has {len(self.shard)} samples, fewer than "
                             f"batch_size {batch_size}: use fewer workers or a smaller batch")
        self.batch_size, self.seed, self.rank = batch_size, seed, rank
        self.loss_fn = nn.CrossEntropyLoss()

    def weights(self) -> torch.Tensor:
        return parameters_to_vector(self.model.parameters()).detach().clone()

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


def test_accuracy(w: torch.Tensor, seed: int, widths: dict) -> float:
    """Test-set accuracy of flat weights w (the split is the seed's)."""
    model = build(seed, widths)
    vector_to_parameters(torch.as_tensor(w, dtype=torch.float32), model.parameters())
    _, test = digits(seed)
    return accuracy(model, test)
