"""DLRM-style click-through-rate model (Naumov et al. 2019), CPU-sized: one
EmbeddingBag per categorical feature, a bottom MLP for the dense features, the
pairwise-dot interaction of all feature vectors, a top MLP and a sigmoid.

    model = DLRM(table_sizes=[1000] * 26, dim=8)
    logits = model(dense, ids)      # dense: B x 13 float, ids: B x 26 int64 (one id per bag)

The dense part (`model.tower`, a `DenseTower`) is what ShadowSync trainers
replicate; the tables are what embedding parameter servers shard. A trainer
runs `tower(dense, pooled)` on rows it looked up remotely.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from hosts.dnn.device import LayerCost, ModelProfile, profile

EMBED_INIT = 0.05


def mlp(widths: Sequence[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Interaction(nn.Module):
    """Pairwise dot products of the F feature vectors (bottom output + one per
    table): the strictly upper triangle of Z Z^T, F (F-1) / 2 values per sample."""

    def __init__(self, features: int):
        super().__init__()
        self.features = features
        iu = torch.triu_indices(features, features, offset=1)
        self.register_buffer("iu", iu, persistent=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        zz = torch.bmm(z, z.transpose(1, 2))
        return zz[:, self.iu[0], self.iu[1]]

    def flops_per_sample(self, dim: int) -> float:
        return 2.0 * self.features * self.features * dim


class DenseTower(nn.Module):
    """Everything but the tables: bottom MLP, interaction, top MLP -> one logit."""

    def __init__(self, n_dense: int, n_tables: int, dim: int, bottom: Sequence[int], top: Sequence[int]):
        super().__init__()
        self.dim = dim
        self.bottom = mlp([n_dense, *bottom, dim], last_relu=True)
        self.interaction = Interaction(n_tables + 1)
        n_inter = (n_tables + 1) * n_tables // 2
        self.top = mlp([dim + n_inter, *top, 1], last_relu=False)

    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        """dense: B x n_dense; pooled: B x n_tables x dim -> logits B."""
        x = self.bottom(dense)
        z = torch.cat([x.unsqueeze(1), pooled], dim=1)
        return self.top(torch.cat([x, self.interaction(z)], dim=1)).squeeze(1)


class DLRM(nn.Module):
    def __init__(self, table_sizes: Sequence[int], dim: int = 8, n_dense: int = 13,
                 bottom: Sequence[int] = (32,), top: Sequence[int] = (32,)):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in table_sizes)
        for e in self.embeddings:
            init_table(e.weight)
        self.tower = DenseTower(n_dense, len(table_sizes), dim, bottom, top)

    def pooled(self, ids: torch.Tensor) -> torch.Tensor:
        """B x T ids (one per bag) -> B x T x dim."""
        return torch.stack([e(ids[:, t:t + 1]) for t, e in enumerate(self.embeddings)], dim=1)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.tower(dense, self.pooled(ids))


def init_table(w: torch.Tensor) -> torch.Tensor:
    """Rows start small and uniform [A: DLRM's reference code draws U(+-1/sqrt(n));
    a fixed +-0.05 keeps the sum of 26 rows near zero at any table size]."""
    with torch.no_grad():
        return w.uniform_(-EMBED_INIT, EMBED_INIT)


def tower_profile(tower: DenseTower, batch: int = 4, n_tables: int | None = None) -> ModelProfile:
    """Forward cost per sample of the dense tower for hosts/dnn/device.py: its
    Linear layers (counted by `profile`) plus the interaction's batched GEMM,
    which `profile` does not count, plus the looked-up embedding rows as
    memory traffic (T x dim float32 per sample read in forward, their gradient
    written in backward: memory-bound [A], as nn.Embedding in hosts/dnn/device.py).
    The tables themselves live on the embedding PSs."""
    n_dense = tower.bottom[0].in_features
    t = tower.interaction.features - 1 if n_tables is None else n_tables
    prof = profile(tower, torch.zeros(batch, n_dense), torch.zeros(batch, t, tower.dim))
    prof.layers.append(LayerCost("interaction", "Interaction",
                                 flops_per_sample=tower.interaction.flops_per_sample(tower.dim)))
    prof.layers.append(LayerCost("embedding_rows", "EmbeddingRows", bytes_per_sample=4.0 * t * tower.dim))
    return prof
