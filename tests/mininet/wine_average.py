"""A user's plain training loop that is not one of the shipped examples (a test
fixture for docs/pytorch.md's five steps, the "plain loop" variant): a small MLP
on scikit-learn's bundled wine data set, no DDP; every rank trains on its own
shard and the ranks average their parameters after every step with the guide's
one call (hosts.dnn.collective.allreduce_).

Step 1: it runs on its own with torch.distributed (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; off the testbed the averaging call uses the script's
own gloo process group). Step 2: the report lines, which do nothing off the
testbed.

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python tests/mininet/wine_average.py
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_wine
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hosts.dnn import collective, report


def data(seed: int):
    x, y = load_wine(return_X_y=True)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    n_test = len(x) // 4
    mean, std = x[n_test:].mean(0), x[n_test:].std(0) + 1e-6
    x = (x - mean) / std
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args()
    if not report.on_testbed():
        dist.init_process_group("gloo")               # off the testbed: the averaging uses this group
    rank, world = collective.rank(), collective.world_size()
    torch.manual_seed(0)                              # the same initial weights on every rank
    (xtr, ytr), (xte, yte) = data(seed=0)
    model = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3))
    report.profile(model, xtr[:a.batch_size])
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    mine = torch.arange(rank, len(xtr), world)
    steps = (len(xtr) // world) // a.batch_size       # the same number of steps on every rank

    def accuracy() -> float:
        with torch.no_grad():
            return float((model(xte).argmax(1) == yte).float().mean())

    for epoch in range(a.epochs):
        order = mine[torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))]
        for s in range(steps):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]

            def step(batch=idx):
                opt.zero_grad()
                loss = F.cross_entropy(model(xtr[batch]), ytr[batch])
                loss.backward()
                opt.step()
                return loss.item()
            loss = report.compute(lambda: step(idx), len(idx))
            flat = parameters_to_vector(model.parameters())            # the one call: average
            vector_to_parameters(collective.allreduce_(flat), model.parameters())
            report.iteration(loss=loss, acc=accuracy())
    acc = accuracy()
    print(f"rank {rank} test accuracy {acc:.4f} weights {float(parameters_to_vector(model.parameters()).detach().sum()):.6f}",
          flush=True)
    report.final(acc=acc)
    collective.end_process_group()     # off the testbed: its group's teardown (docs/pytorch.md step 1)


if __name__ == "__main__":
    main()
