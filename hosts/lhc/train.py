"""A real training run for LHC: PyTorch NCF (hosts/dnn/ncf.py) trained data-parallel,
its gradients aggregated by the LHC worker's algorithm (hosts/lhc/worker.py).

    gradient: {kind: ncf_train, seed, users, items, per_user, dim, batch, lr}

A gradient source like hosts/lhc/gradients.py's: `gradient(rank, it)` is rank's
backward pass on its own mini-batch at the current weights; `apply(y, it)` takes
the aggregated sum, averages it and steps Adam, then reports the training
loss of the step and the test accuracy. Every worker holds the same weights
(same seed, same updates), so rank 0 can recompute every worker's gradient for
its exact check. One torch thread: the same batch at the same weights gives the
same bits in every process (the check would fail otherwise). Why this works:
Adam's update is a pure function of the aggregated bits (its state is built from
them), so two algorithms that deliver identical sums (LHC and dense, both in
fixed point) give identical curves.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn.functional import binary_cross_entropy_with_logits

from hosts.dnn import ncf


class NcfTrainSource:
    def __init__(self, seed: int = 0, users: int = 200, items: int = 100, per_user: int = 10,
                 dim: int = 8, batch: int = 64, lr: float = 0.01, world: int = 1):
        torch.set_num_threads(1)
        if batch < 1 or lr <= 0 or world < 1:
            raise ValueError(f"ncf_train needs batch >= 1, lr > 0, got batch {batch}, lr {lr}")
        self.seed, self.batch, self.lr, self.world = seed, batch, float(lr), world
        data = ncf.synthetic(seed, n_users=users, n_items=items, per_user=per_user)
        self.train, self.test = ncf.train_test(data, seed)
        torch.manual_seed(seed)
        self.model = ncf.NCF(users, items, dim=dim, mlp=(4 * dim, 2 * dim, dim))
        self.params = [p for p in self.model.parameters()]
        self.size = sum(p.numel() for p in self.params)
        self.opt = torch.optim.Adam(self.params, lr=self.lr)
        self._cache: dict[tuple[int, int], tuple[np.ndarray, float]] = {}
        self.spec = {"kind": "ncf_train", "seed": seed, "users": users, "items": items, "per_user": per_user,
                     "dim": dim, "batch": batch, "lr": lr}

    def _batch(self, rank: int, it: int) -> ncf.Interactions:
        """rank's share of iteration it: a seeded permutation per iteration, sliced per rank."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + it)
        idx = torch.randperm(len(self.train), generator=g)[rank * self.batch:(rank + 1) * self.batch]
        return self.train.subset(idx)

    def _grad(self, rank: int, it: int) -> tuple[np.ndarray, float]:
        key = (rank, it)
        if key not in self._cache:
            b = self._batch(rank, it)
            self.model.zero_grad(set_to_none=False)
            loss = binary_cross_entropy_with_logits(self.model(b.users, b.items), b.labels)
            loss.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in self.params]).numpy().astype(np.float32)
            self._cache[key] = (flat, float(loss.detach()))
        return self._cache[key]

    def gradient(self, rank: int, it: int) -> np.ndarray:
        return self._grad(rank, it)[0].copy()

    def apply(self, y: np.ndarray, it: int, rank: int) -> dict[str, Any]:
        """Adam on the aggregated sum / world; the step's loss (this rank's batch) and test accuracy."""
        loss = self._grad(rank, it)[1]
        avg = torch.from_numpy(np.asarray(y, dtype=np.float32) / np.float32(self.world))
        off = 0
        for p in self.params:
            n = p.numel()
            p.grad = avg[off:off + n].reshape(p.shape).clone()
            off += n
        self.opt.step()
        self._cache.clear()          # new weights: every gradient changes
        return {"train_loss": loss, "test_acc": ncf.accuracy(self.model, self.test),
                "weights_digest": _digest(self.params)}

    def describe(self) -> dict[str, Any]:
        return dict(self.spec, size=self.size)


def _digest(params) -> str:
    import hashlib
    h = hashlib.blake2b(digest_size=8)
    for p in params:
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()
