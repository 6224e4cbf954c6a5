"""Neural collaborative filtering (NeuMF: GMF + MLP towers, He et al. 2017) on
implicit feedback, the LHC paper's NCF stand-in at CPU size.

Data: `synthetic(seed, ...)` draws users' and items' hidden taste vectors and
makes a user interact with the items it likes most (a learnable structure),
plus `negatives` sampled non-interactions per positive; or `load_movielens(path)`
reads a MovieLens file a user has (ml-1m `ratings.dat`: `user::item::rating::ts`,
ml-100k `u.data`: tab-separated) and treats every rating as an interaction.
Labels: 1 interaction, 0 sampled negative; metric: binary accuracy.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from hosts.dnn.data import split


@dataclass(frozen=True)
class Interactions:
    users: torch.Tensor      # int64
    items: torch.Tensor      # int64
    labels: torch.Tensor     # float32 0/1
    n_users: int
    n_items: int

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, idx: torch.Tensor) -> "Interactions":
        return Interactions(self.users[idx], self.items[idx], self.labels[idx], self.n_users, self.n_items)


def _with_negatives(users: torch.Tensor, items: torch.Tensor, n_users: int, n_items: int,
                    negatives: int, g: torch.Generator) -> Interactions:
    """Positives plus `negatives` uniformly sampled items per positive that the user
    did not interact with (resampled until none collides)."""
    seen = set(zip(users.tolist(), items.tolist()))
    nu = users.repeat_interleave(negatives)
    ni = torch.randint(0, n_items, (len(nu),), generator=g)
    for _ in range(100):
        clash = torch.tensor([(u, i) in seen for u, i in zip(nu.tolist(), ni.tolist())], dtype=torch.bool)
        if not clash.any():
            break
        ni[clash] = torch.randint(0, n_items, (int(clash.sum()),), generator=g)
    else:
        raise ValueError("cannot sample negatives: users interact with almost every item")
    labels = torch.cat([torch.ones(len(users)), torch.zeros(len(nu))])
    return Interactions(torch.cat([users, nu]), torch.cat([items, ni]), labels, n_users, n_items)


def synthetic(seed: int, n_users: int = 200, n_items: int = 100, per_user: int = 10,
              rank: int = 3, negatives: int = 2) -> Interactions:
    """Seeded implicit feedback: each user interacts with its `per_user` best items
    under hidden rank-`rank` tastes (plus noise), and `negatives` negatives each."""
    if per_user >= n_items:
        raise ValueError(f"per_user ({per_user}) must be below n_items ({n_items})")
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n_users, rank, generator=g)
    v = torch.randn(n_items, rank, generator=g)
    scores = u @ v.T + 0.5 * torch.randn(n_users, n_items, generator=g)
    top = scores.topk(per_user, dim=1).indices
    users = torch.arange(n_users).repeat_interleave(per_user)
    return _with_negatives(users, top.reshape(-1), n_users, n_items, negatives, g)


def load_movielens(path: str | Path, seed: int = 0, negatives: int = 2) -> Interactions:
    """A MovieLens ratings file (ml-1m ratings.dat `u::i::r::t` or ml-100k u.data,
    tab-separated) as implicit feedback; ids are remapped to 0..n-1 in order of
    first appearance. Errors name the file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="latin-1").splitlines()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    umap: dict[str, int] = {}
    imap: dict[str, int] = {}
    us, its = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("::") if "::" in line else line.split("\t")
        if len(parts) < 3:
            raise ValueError(f"{path}:{n}: expected 'user::item::rating::timestamp' or "
                             f"tab-separated 'user item rating timestamp', got {line[:80]!r}")
        us.append(umap.setdefault(parts[0].strip(), len(umap)))
        its.append(imap.setdefault(parts[1].strip(), len(imap)))
    if not us:
        raise ValueError(f"{path}: no ratings")
    g = torch.Generator().manual_seed(seed)
    return _with_negatives(torch.tensor(us), torch.tensor(its), len(umap), len(imap), negatives, g)


def train_test(data: Interactions, seed: int, test_fraction: float = 0.2) -> tuple[Interactions, Interactions]:
    tr, te = split(len(data), seed, test_fraction)
    return data.subset(tr), data.subset(te)


class NCF(nn.Module):
    """NeuMF: a GMF tower (element-wise product of embeddings) and an MLP tower
    over concatenated embeddings, joined by one output logit."""

    def __init__(self, n_users: int, n_items: int, dim: int = 16, mlp: tuple[int, ...] = (64, 32, 16)):
        super().__init__()
        self.gmf_u, self.gmf_i = nn.Embedding(n_users, dim), nn.Embedding(n_items, dim)
        self.mlp_u, self.mlp_i = nn.Embedding(n_users, mlp[0] // 2), nn.Embedding(n_items, mlp[0] // 2)
        layers: list[nn.Module] = []
        for a, b in zip(mlp, mlp[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(dim + mlp[-1], 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        gmf = self.gmf_u(users) * self.gmf_i(items)
        m = self.mlp(torch.cat([self.mlp_u(users), self.mlp_i(items)], dim=1))
        return self.out(torch.cat([gmf, m], dim=1)).squeeze(1)


def accuracy(model: nn.Module, data: Interactions) -> float:
    with torch.no_grad():
        return float(((model(data.users, data.items) > 0).float() == data.labels).float().mean())
