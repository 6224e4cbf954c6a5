"""Update rules of ShadowSync's three background algorithms and their
foreground baselines, as pure functions on flat torch tensors (no network, no
time); plus normalized entropy. The host programs call these and nothing else
to change dense weights, so a unit test of a rule is a test of the run.

Notation (shared/research/seeds.md 3.2, items [I] = reconstructions):
  w_k   trainer k's replica of the dense parameters (one flat vector)
  w~    the centre on the sync PS (S-EASGD)
  w_g   the global model of BMUF (kept identically by every trainer's shadow)
  N     trainers
  S-EASGD  d = alpha (w_k - w~); w_k <- w_k - d; w~ <- w~ + d        [I]
  S-MA     w_k <- mean_k(w_k)                                         [I]
  S-BMUF   D = mean_k(w_k) - w_g; v <- eta v + zeta D; w_g <- w_g + v;
           w_k <- w_g (Nesterov: w_k <- w_g + eta v)                  [I]
FR-* run the same rules inside the workers' loop every k iterations.

Applying a result to a live replica (`apply_delta`): the shadow reads w_k,
computes the new value from that snapshot and adds (new - snapshot) into the
live replica in place, so the Hogwild workers' updates made meanwhile are kept
[I: the paper's shadow writes "in place, racing with the workers"; adding the
difference is the race's outcome when no worker update is overwritten]. A
foreground sync runs with the workers paused (live = snapshot): it writes the new
value itself (`replace`), since snapshot + (new - snapshot) can be an ulp off new,
differently on each trainer, and FR-MA's trainers must end with one replica.
"""
from __future__ import annotations

import math

import torch

from hosts.easgd.rules import elastic_exchange  # the one elastic step (Zhang et al.)

Tensor = torch.Tensor
ALGORITHMS = ("easgd", "ma", "bmuf")


def s_easgd(w: Tensor, c: Tensor, alpha: float) -> tuple[Tensor, Tensor, Tensor]:
    """One elastic exchange of a trainer with the sync PS: (w_k', w~', d)."""
    return elastic_exchange(w, c, alpha)


def s_ma(sum_w: Tensor, world: int) -> Tensor:
    """Model averaging: the new replica is the mean of the N replicas (sum_w =
    their allreduce sum)."""
    return sum_w / world


def s_bmuf(sum_w: Tensor, world: int, w_g: Tensor, v: Tensor, eta: float, zeta: float,
           nesterov: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Blockwise model-update filtering (Chen & Huo 2016): (w_k', w_g', v')."""
    delta = sum_w / world - w_g
    v2 = eta * v + zeta * delta
    g2 = w_g + v2
    return (g2 + eta * v2 if nesterov else g2.clone()), g2, v2


def replace(live: Tensor, snapshot: Tensor, new: Tensor) -> None:
    """live <- new, in place (the workers are paused: nothing moved since the snapshot)."""
    live.copy_(new)


def apply_delta(live: Tensor, snapshot: Tensor, new: Tensor) -> None:
    """live += new - snapshot, in place (see the module doc)."""
    live.add_(new - snapshot)


# Passes over dense-length fp32 vectors one sync makes on the trainer's host (each vector
# read or written once per pass), counted on the steps Syncer.sync takes (hosts/shadowsync/
# trainer.py: a snapshot, the rule, the result written into the replica) as a fused loop
# would make them; the projections charge a sync's host time as these passes x 4 B x
# the dense values / the memory bandwidth one thread streams at. PyTorch's unfused
# temporaries here make about twice as many (EASGD: 11). The network's share (sending,
# receiving, the allreduce's own reduction: network_model's reduce_rate) is not counted.
#   easgd  snapshot (read w, write copy: 2); w -= d (read w, read d, write w: 3)
#   ma     snapshot (2); w += sum / N - snapshot (read w, sum, snapshot, write w: 4)
#   bmuf   snapshot (2); v <- eta v + zeta (sum / N - w_g), w_g <- w_g + v in one loop
#          (read sum, w_g, v, write v, w_g: 5); w += w_g - snapshot (4); Nesterov's
#          w_g + eta v reads v once more
# The foreground sync (FR-*) runs the same Syncer, so the same passes.
SYNC_PASSES = {"easgd": 5, "ma": 6, "bmuf": 11}


def sync_passes(algorithm: str, nesterov: bool = False) -> int:
    """Passes over the dense vector one sync of `algorithm` makes (SYNC_PASSES)."""
    if algorithm not in SYNC_PASSES:
        raise ValueError(f"algorithm {algorithm!r} (known: {', '.join(SYNC_PASSES)})")
    return SYNC_PASSES[algorithm] + (1 if nesterov and algorithm == "bmuf" else 0)


def sync_bytes(algorithm: str, values: int, nesterov: bool = False) -> int:
    """Bytes one sync of `values` fp32 dense values moves through the trainer's memory."""
    return sync_passes(algorithm, nesterov) * 4 * int(values)


def local_sgd(w: Tensor, g: Tensor, lr: float) -> None:
    """A Hogwild worker's dense step on the shared replica, in place, no lock."""
    w.sub_(lr * g)


def normalized_entropy(p: Tensor, y: Tensor, eps: float = 1e-7) -> float:
    """NE = mean log loss / H(p_bar), p_bar = the labels' click rate:
        -(1/n) sum y log p + (1-y) log(1-p)  /  -(p_bar log p_bar + (1-p_bar) log(1-p_bar))
    (He et al. 2014, "Practical lessons from predicting clicks on ads at Facebook")."""
    p = p.double().clamp(eps, 1 - eps)
    y = y.double()
    if y.numel() == 0:
        raise ValueError("normalized entropy of no examples")
    logloss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean().item()
    pbar = y.mean().item()
    if pbar <= 0 or pbar >= 1:
        raise ValueError(f"normalized entropy needs both labels; click rate is {pbar}")
    base = -(pbar * math.log(pbar) + (1 - pbar) * math.log(1 - pbar))
    return logloss / base


def elastic_difference_into(c: Tensor, w: Tensor, alpha: float) -> Tensor:
    """The sync PS's half of s_easgd, on its live centre: d = alpha (w - w~);
    w~ += d in place (no lock: trainers' exchanges may interleave, Hogwild-style).
    Returns d, which the trainer subtracts from its replica."""
    d = alpha * (w - c)
    c.add_(d)
    return d
