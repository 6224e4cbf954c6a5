"""Update rules of the EASGD family and its SGD counterparts, as pure functions
on flat torch tensors (no network, no time): the host programs call these and
nothing else to change weights, so a unit test of a rule is a test of the run.

Notation (docs/easgd.md): W_j a worker's weights, C the centre variable, g a
gradient, eta the learning rate, alpha = eta * rho the moving rate, delta the
momentum, P the workers. The rules are reconstructions [I] from Zhang,
Choromanska, LeCun, "Deep learning with Elastic Averaging SGD" (NIPS 2015),
as summarised in shared/research/seeds.md section 4.2; You et al. (SC17) change
the *schedule* (who the master serves when), not these formulas.

Every function returns new tensors and leaves its inputs unchanged, except
`add_into`, the one in-place centre update Hogwild needs.
"""
from __future__ import annotations

import torch

Tensor = torch.Tensor


# -- local steps (between exchanges) ---------------------------------------------
def sgd_step(w: Tensor, g: Tensor, lr: float) -> Tensor:
    """Plain local SGD: W <- W - eta g."""
    return w - lr * g


def nesterov_lookahead(w: Tensor, v: Tensor, delta: float) -> Tensor:
    """Where Nesterov momentum evaluates the gradient: W + delta v."""
    return w + delta * v


def nesterov_step(w: Tensor, v: Tensor, g_lookahead: Tensor, lr: float,
                  delta: float) -> tuple[Tensor, Tensor]:
    """Async MEASGD's local step (Zhang's EAMSGD): v <- delta v - eta g(W + delta v);
    W <- W + v. Returns (W', v')."""
    v2 = delta * v - lr * g_lookahead
    return w + v2, v2


# -- the elastic exchange (original, Async, Async MEASGD, Hogwild EASGD) --------
def elastic_difference(w: Tensor, c: Tensor, alpha: float) -> Tensor:
    """e = alpha (W_j - C): what moves the worker towards the centre and the
    centre towards the worker by the same amount."""
    return alpha * (w - c)


def elastic_exchange(w: Tensor, c: Tensor, alpha: float) -> tuple[Tensor, Tensor, Tensor]:
    """One worker's exchange with the master (Zhang Alg. 1, every tau steps):
    e = alpha (W_j - C); W_j <- W_j - e; C <- C + e. Returns (W_j', C', e).
    The master sends e back; the worker subtracts it itself."""
    e = elastic_difference(w, c, alpha)
    return w - e, c + e, e


def add_into(c: Tensor, delta: Tensor) -> None:
    """C += delta in place: the only write Hogwild's servers make to the shared
    centre, with no lock. Two servers that read C before either wrote both
    compute their e from the same snapshot; sequentially both additions land
    (the unit test), while truly concurrent element-wise read-add-writes may
    lose one at an element, as Hogwild accepts."""
    c.add_(delta)


# -- synchronous EASGD (through an allreduce) ----------------------------------------
def sync_easgd_step(w: Tensor, c: Tensor, sum_w: Tensor, world: int, alpha: float,
                    g: Tensor | None = None, lr: float = 0.0) -> tuple[Tensor, Tensor]:
    """Zhang eq. (5)/(6) at a communication step, both from step-t values:
        W_j <- W_j - eta g_j - alpha (W_j - C)
        C   <- C + alpha (sum_j W_j - P C)          (= (1 - P alpha) C + P alpha mean W)
    sum_w is the allreduce (sum) of every worker's pre-step W_j, so every worker
    computes the same C' from the same bits. Returns (W_j', C')."""
    w2 = w - alpha * (w - c)
    if g is not None:
        w2 = w2 - lr * g
    return w2, c + alpha * (sum_w - world * c)


# -- the SGD counterparts ----------------------------------------------------------
def async_sgd_apply(c: Tensor, g: Tensor, lr: float) -> Tensor:
    """Async SGD at the parameter server: C <- C - eta g (g from a possibly stale C)."""
    return c - lr * g


def async_msgd_apply(c: Tensor, v: Tensor, g: Tensor, lr: float,
                     delta: float) -> tuple[Tensor, Tensor]:
    """Async momentum SGD at the server (momentum kept there, one velocity for
    all workers): v <- delta v - eta g; C <- C + v. Returns (C', v')."""
    v2 = delta * v - lr * g
    return c + v2, v2


def sync_sgd_step(w: Tensor, sum_g: Tensor, world: int, lr: float) -> Tensor:
    """Synchronous SGD through an allreduce: W <- W - eta (sum_j g_j) / P."""
    return w - lr * (sum_g / world)
