"""The plain parameter server's weights on the same gradients, replayed in-process,
and the comparison every PHub point makes with its workers' final weights
(testbed/workloads/phub.py: weights_check).

The replay runs what a wide-aggregation PS worker does (hosts/phub/worker.py with
hosts/collectives/ps.py), without a network: each step, every rank's gradient from
the current weights (hosts/phub/objective.py), the PS's rank-order sum
(ps.rank_order_sum) and the optimizer (hosts/phub/optimizer.step) on the whole
tensor. PHub's chunked step equals the whole-tensor step bit for bit (element-wise;
tests/unit/test_phub_core.py), so a PHub run whose server summed every copy of
every chunk in rank order, and whose workers computed each gradient from the
weights of the step before, ends at these weights exactly.

Everything is element-wise, so a replay of some layers gives those layers' exact
weights: above REPLAY_BUDGET the replay takes a stated subset of the layers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hosts.collectives.ps import rank_order_sum
from hosts.phub import objective
from hosts.phub.optimizer import OptimizerSpec, step as opt_step

# [A] The replay's cost bound, in values x ranks x steps: about 0.4 s on the project's
# 2-core VM (measured 0.09 s for ResNet-50 at 1 %, 8 workers, 12 steps: 2.5e7; 0.15 s
# for AlexNet at 1 %, 4 workers: 2.9e7). Every shipped scenario is below it. Above
# it, layers are replayed in key order while they fit (`replay_layers`).
REPLAY_BUDGET = 100_000_000
# [A] arrival order: how far from the plain PS's weights float rounding may take them,
# relative to the largest weight (inf-norm). float32's epsilon is 1.2e-7; a reordered
# sum of N copies errs by up to ~N eps of the copies' magnitude, and the steps carry
# it on (momentum up to 1 / (1 - mu) = 10x). Measured in process (JobState, random
# arrival orders, Nesterov lr 0.05): 1.5e-7-2.4e-7 at 3, 4 and 8 workers, 12 steps,
# ResNet-50 at 0.2 %, 32 KiB chunks. A larger difference than the bound is an error.
ARRIVAL_REL_TOL = 1e-5


def replay_layers(sizes: Sequence[int], world: int, steps: int, budget: int = REPLAY_BUDGET) -> list[int]:
    """The layers the replay covers: all when values x world x steps fit the budget,
    else those that fit, in key order (a layer too large on its own is skipped)."""
    cost = max(1, world) * max(1, steps)
    if sum(sizes) * cost <= budget:
        return list(range(len(sizes)))
    out, used = [], 0
    for k, n in enumerate(sizes):
        if (used + n) * cost <= budget:
            out.append(k)
            used += n
    return out


def plain_ps_weights(sizes: Sequence[int], seed: int, world: int, steps: int, spec: OptimizerSpec,
                     layers: Sequence[int] | None = None) -> list[np.ndarray]:
    """The weights of `layers` (default all) after `steps` plain-PS steps of `world`
    workers training the profile objective from `seed`."""
    layers = list(range(len(sizes))) if layers is None else list(layers)
    start = objective.initial_weights(seed, sizes)         # one rng over all layers: draw them all
    out = []
    for k in layers:
        w = start[k].copy()
        v = np.zeros_like(w) if spec.has_state else None
        bases = [objective.noise_base(seed, r, k, w.size) for r in range(world)]
        grads = [np.empty_like(w) for _ in range(world)]
        for t in range(steps):
            for r in range(world):
                objective.gradient(w, bases[r], t, grads[r])
            opt_step(spec, w, v, rank_order_sum(grads), world)
        out.append(w)
    return out


def cnn_plain_ps_weights(seed: int, world: int, steps: int, spec: OptimizerSpec, batch_size: int) -> np.ndarray:
    """The CNN's flat weights after `steps` plain-PS steps: one hosts/phub/model.py
    CnnModel per rank (the worker's own code: its seed, its batches, torch's backward),
    their gradients summed in rank order, the step applied and copied to every rank.
    Torch runs on one thread here as in the worker (its reductions' order, so its bits,
    depend on the thread count); the caller's thread count and RNG are restored."""
    import torch  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415
    from hosts.phub.model import CnnModel  # noqa: PLC0415
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng():
            models = [CnnModel(SimpleNamespace(seed=seed, rank=r, job=SimpleNamespace(world=world),
                                               batch_size=batch_size), {"kind": "cnn"}) for r in range(world)]
        for m in models:
            m.trace = SimpleNamespace(compute=lambda *a, **k: None)
        w = models[0].weights
        v = [np.zeros_like(x) for x in w] if spec.has_state else None
        for t in range(steps):
            grads = []
            for m in models:
                m.iteration(t, None, None)
                grads.append(m.grads)
            for k in range(len(w)):
                opt_step(spec, w[k], None if v is None else v[k], rank_order_sum([g[k] for g in grads]), world)
                for m in models[1:]:
                    np.copyto(m.weights[k], w[k])
        return np.concatenate([x.reshape(-1) for x in w]).copy()
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class WeightsCheck:
    """One point's comparison. expect: bit_exact (PHub in rank order, the plain PS),
    rounding (PHub in arrival order: within ARRIVAL_REL_TOL) or none (reported only:
    the ring's and the switch's sums have their own order and number format)."""
    expect: str
    match: bool                  # bit for bit, every worker
    max_abs_diff: float
    max_rel_diff: float          # max |w - ref| / max |ref|
    ok: bool | None              # None: not judged (expect none)
    reason: str | None
    max_ulp_diff: int = 0        # the largest distance in float32 steps (units in the last place)
    differing_share: float = 0.0     # the worst worker's share of values not equal bit for bit

    def record(self) -> dict:
        return {"weights_match_plain_ps": self.match, "weights_expected": self.expect,
                "weights_max_abs_diff": self.max_abs_diff, "weights_max_rel_diff": self.max_rel_diff,
                "weights_max_ulp_diff": self.max_ulp_diff, "weights_differing_share": self.differing_share,
                "weights_check_ok": self.ok, "weights_check_error": self.reason}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per value, how many float32 steps apart a and b are (0: the same bits or +-0): the
    floats' bit patterns mapped onto one monotonic integer line."""
    def line(x: np.ndarray) -> np.ndarray:
        i = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(line(a) - line(b))


def compare(ref: np.ndarray, finals: dict[str, np.ndarray], expect: str) -> WeightsCheck:
    """The workers' final weights (name -> flat array, the replayed values only)
    against the replay's `ref`."""
    if expect not in ("bit_exact", "rounding", "none"):
        raise ValueError(f"expect must be bit_exact, rounding or none, got {expect!r}")
    if not finals:
        raise ValueError("no worker's final weights to compare")
    bad_size = {h: a.size for h, a in finals.items() if a.shape != ref.shape}
    if bad_size:
        return WeightsCheck(expect, False, float("inf"), float("inf"), False,
                            f"final weights of {bad_size} values, the replay has {ref.size}")
    match = all(a.tobytes() == ref.tobytes() for a in finals.values())
    ulps = {h: ulp_distance(a, ref) for h, a in finals.items()}
    max_ulp = max((int(u.max()) if u.size else 0) for u in ulps.values())
    differing = max((float(np.count_nonzero(u)) / u.size if u.size else 0.0) for u in ulps.values())
    diffs = {h: float(np.max(np.abs(a.astype(np.float64) - ref))) if a.size else 0.0 for h, a in finals.items()}
    worst = max(diffs, key=lambda h: (np.isnan(diffs[h]), diffs[h]))
    max_abs = diffs[worst]
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    reason = None
    if expect == "bit_exact" and not match:
        reason = (f"final weights differ from the plain PS's on the same gradients (expected bit for bit): "
                  f"{worst} by up to {max_abs:.3g} (relative {max_rel:.3g})")
    elif expect == "rounding" and not max_rel <= ARRIVAL_REL_TOL:        # NaN fails too
        reason = (f"final weights differ from the plain PS's on the same gradients by more than float "
                  f"rounding: {worst} by up to {max_abs:.3g} (relative {max_rel:.3g} > {ARRIVAL_REL_TOL:g})")
    return WeightsCheck(expect, match, max_abs, max_rel, None if expect == "none" else reason is None, reason,
                        max_ulp, differing)
