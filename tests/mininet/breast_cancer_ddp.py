"""A user's DDP script that is not one of the shipped examples (a test fixture for
docs/pytorch.md's five steps): an MLP on scikit-learn's bundled breast-cancer
data set, data-parallel with DistributedDataParallel over gloo.

Step 1 of the guide: it runs with plain DDP (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT from the environment, CPU only, same steps on every rank, seeded
weights). Step 2: three report lines (profile, compute, iteration), which do
nothing outside the testbed.

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python tests/mininet/breast_cancer_ddp.py
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_breast_cancer
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from hosts.dnn import collective, report


def data(seed: int):
    x, y = load_breast_cancer(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.float32)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    n_test = len(x) // 5
    mean, std = x[n_test:].mean(0), x[n_test:].std(0) + 1e-6      # standardize on the training part
    x = (x - mean) / std
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()
    dist.init_process_group("gloo")                   # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)                              # the same initial weights on every rank
    (xtr, ytr), (xte, yte) = data(seed=0)
    model = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    report.profile(model, xtr[:a.batch_size])         # once: FLOPs per layer for the device model
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    mine = torch.arange(rank, len(xtr), world)        # this rank's shard
    steps = len(mine) // a.batch_size                 # the same number of steps on every rank
    steps = min(steps, (len(xtr) // world) // a.batch_size)

    def accuracy() -> float:
        with torch.no_grad():
            return float(((model(xte).squeeze(1) > 0).float() == yte).float().mean())

    for epoch in range(a.epochs):
        order = mine[torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))]
        for s in range(steps):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]

            def step(batch=idx):
                opt.zero_grad()
                loss = F.binary_cross_entropy_with_logits(ddp(xtr[batch]).squeeze(1), ytr[batch])
                loss.backward()
                opt.step()
                return loss.item()
            loss = report.compute(lambda: step(idx), len(idx))   # the step, paced to the device model
            report.iteration(loss=loss, acc=accuracy())         # one record per iteration
    acc = accuracy()
    if rank == 0:
        print(f"test accuracy {acc:.4f}", flush=True)
    report.final(acc=acc)
    collective.end_process_group()     # gloo's teardown, as docs/pytorch.md step 1 says


if __name__ == "__main__":
    main()
