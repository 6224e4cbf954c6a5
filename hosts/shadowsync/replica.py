"""The dense replica: the DLRM tower's parameters as one flat float32 tensor in
shared memory, with the model's parameters made views into it. The Hogwild
workers (forked processes) step on it and the shadow process synchronizes it,
all in place, with no lock (torch's standard Hogwild set-up: Python threads
would serialize on the interpreter lock)."""
from __future__ import annotations

import torch

from hosts.dnn.dlrm import DenseTower, init_table
from hosts.shadowsync.data import N_DENSE


def build_tower(settings) -> DenseTower:
    """The same initial tower on every trainer and on the sync PS (seeded)."""
    m = settings.model
    torch.manual_seed(settings.seed)
    return DenseTower(N_DENSE, len(m["table_sizes"]), m["dim"], m["bottom"], m["top"])


def initial_flat(settings) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(build_tower(settings).parameters()).detach().clone()


def share(tower: DenseTower) -> torch.Tensor:
    """Move the tower's parameters into one flat shared-memory tensor (returned);
    each parameter becomes a view of it."""
    params = list(tower.parameters())
    flat = torch.nn.utils.parameters_to_vector(params).detach().clone().share_memory_()
    off = 0
    for p in params:
        n = p.numel()
        p.data = flat[off:off + n].view_as(p)
        off += n
    return flat


def flat_grad(tower: DenseTower) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in tower.parameters()])


def initial_table(seed: int, table: int, rows: int, dim: int) -> torch.Tensor:
    """Embedding table `table` as its PS starts it (seeded per table)."""
    torch.manual_seed(seed * 1000 + 17 + table)
    return init_table(torch.empty(rows, dim))
