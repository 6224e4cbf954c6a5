"""Fair baselines for the EASGD variant comparisons (issue 30 part 3): each
EASGD variant and its SGD counterpart tuned over the same grid by the same
rule, trained in this process (no network, no time; deterministic per seed).

The claim (You, Buluc, Demmel SC17, after Zhang et al.): Async EASGD, Async
MEASGD and Hogwild EASGD are faster than Async SGD, Async momentum SGD and
Hogwild SGD. Here "faster" is counted in local steps per worker to the target
accuracy (equal steps: time to accuracy also depends on the time per step,
which the report's other rows project).

The task is the shipped variants scenario's (scenarios/easgd/variants.yaml):
LeNet (hosts.dnn.lenet, widths 16/32/64) on scikit-learn's digits, WORKERS
workers, BATCH samples per worker per step, TAU local steps between exchanges,
the moving rate alpha = 0.9 / P (the workload's default, Zhang et al.'s
beta = P alpha = 0.9 [I]). Every weight change is a function of
hosts/easgd/rules.py (the rules the host programs run), every gradient
hosts.easgd.model.Task's, every accuracy hosts.easgd.model.Evaluator's
(the centre variable on the test split; sync SGD's common weights).

Schedules [A: equal-speed workers]: all workers take a local step at the same
moment, so
  * an asynchronous master (original EASGD's round robin and Async's first
    come first served alike) sees the workers arrive in rank order every
    period, and serves them one after another in that order: Async SGD's
    gradient is then 3 updates stale at 4 workers, as equal workers make it;
  * Hogwild's servers (one per worker, as the workload's default) all read the
    centre at the same moment: every server's change is computed from the same
    snapshot and all of them land (rules.add_into, no element lost); a worker's
    reply is the centre after the round's writes. The other extreme, servers
    that never overlap, is the asynchronous schedule above;
  * the synchronous variants exchange through an allreduce of exact sums.
The step order at an exchange is the workload's default (step_then_exchange).

The tuning rule (one for every method): over the grid, the point with the
fewest mean steps to the target over SEEDS, the steps of one run being the
first crossing of the smoothed accuracy curve (testbed.stats.time_to_target,
evaluated every EVAL_EVERY local steps); a point where any seed never reaches
the target within the budget counts as never; ties go to the earlier grid
point. The grid: LRS for every method (eta as the rules take it, momentum
methods included), MOMENTA for both momentum methods (the one pair that has
momentum), the same STEPS budget and SEEDS. The moving rate is not tuned: the
SGD counterparts have none, so tuning it would give each EASGD variant a grid
dimension its counterpart lacks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

# ---- the scenario's task (scenarios/easgd/variants.yaml) -----------------------------------
WORKERS = 4
BATCH = 32
TAU = 4
ALPHA = 0.9 / WORKERS            # testbed/workloads/easgd.py alpha_for: Zhang's beta = P alpha = 0.9 [I]
WIDTHS = {"c1": 16, "c2": 32, "hidden": 64}   # LeNetWidths' defaults, as the scenario runs them
TARGET = 0.85                    # the scenario's target_acc
EVAL_EVERY = TAU                 # local steps between evaluations of the centre: once a period


@dataclass(frozen=True)
class Grid:
    """What every method of a pair is tuned over: the same for both."""
    lrs: tuple[float, ...]
    momenta: tuple[float, ...]   # only the momentum pair uses it (both its methods)
    seeds: tuple[int, ...]
    steps: int                   # local steps per worker: the budget

    def points(self, momentum: bool) -> list[tuple[float, float]]:
        """(eta, delta) grid points; delta 0 for the methods without momentum."""
        return [(lr, m) for lr in self.lrs for m in (self.momenta if momentum else (0.0,))]


# [A] lr: half-decades from 0.01 to 1, around the shipped 0.3 (where the async SGD counterparts
# diverge); the grid must bracket every method's best point (a point at its edge is flagged in the
# report: Tuned.at_edge); momentum: the common 0.9 and a lighter 0.5; steps: the scenario's 200;
# 3 seeds, the project's minimum.
FULL = Grid(lrs=(0.01, 0.03, 0.1, 0.3, 1.0), momenta=(0.5, 0.9), seeds=(1, 2, 3), steps=200)
QUICK = Grid(lrs=(0.1,), momenta=(0.9,), seeds=(1, 2, 3), steps=24)   # a smoke run, not a result
REPORT_GRID = FULL               # what `testbed reproduce easgd` computes (the unit tests use QUICK)


@dataclass(frozen=True)
class Pair:
    id: str
    variant: str                 # the EASGD variant the paper says is faster
    counterpart: str             # the SGD method it is compared with
    momentum: bool               # both methods have a momentum (tuned on the same MOMENTA)


PAIRS = (
    Pair("async_easgd_vs_async_sgd", "async_easgd", "async_sgd", False),
    Pair("async_measgd_vs_async_msgd", "async_measgd", "async_msgd", True),
    Pair("hogwild_easgd_vs_hogwild_sgd", "hogwild_easgd", "hogwild_sgd", False),
    Pair("sync_easgd_vs_sync_sgd", "sync_easgd", "sync_sgd", False),
)
METHODS = tuple(m for p in PAIRS for m in (p.variant, p.counterpart))


# ---- one run --------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _tasks(seed: int):
    from hosts.easgd.model import Evaluator, Task  # noqa: PLC0415 - torch only when computing
    tasks = [Task(seed, WIDTHS, r, WORKERS, BATCH) for r in range(WORKERS)]
    return tasks, Evaluator(seed, WIDTHS)


def _train(method: str, lr: float, momentum: float, seed: int, steps: int,
           on_eval: Callable[[int, "object"], bool]) -> None:
    """Run `method` for `steps` local steps per worker; on_eval(step, centre) after every
    EVAL_EVERY steps; it returns True to stop (target reached, or the run diverged)."""
    import torch  # noqa: PLC0415

    from hosts.easgd import rules  # noqa: PLC0415
    torch.set_num_threads(1)
    from hosts.easgd.model import initial_weights  # noqa: PLC0415
    tasks, _ = _tasks(seed)
    P = WORKERS
    # every host builds the same initial weights from the seed (not tasks[j].weights():
    # a cached Task's model holds the last weights it was asked a gradient at)
    w0 = initial_weights(seed, WIDTHS)
    W = [w0.clone() for _ in range(P)]
    V = [torch.zeros_like(w0) for _ in range(P)]  # async_measgd's local velocities
    C = w0.clone()
    v_master = torch.zeros_like(w0)               # async_msgd's velocity at the server
    order = [t.batches() for t in tasks]

    def grad(j: int, w):
        return tasks[j].gradient(w, next(order[j]))[0]

    for t in range(steps):
        due = (t + 1) % TAU == 0
        if method in ("async_sgd", "async_msgd"):
            G = [grad(j, W[j]) for j in range(P)]          # all at once; served in rank order
            for j in range(P):
                if method == "async_sgd":
                    C = rules.async_sgd_apply(C, G[j], lr)
                else:
                    C, v_master = rules.async_msgd_apply(C, v_master, G[j], lr, momentum)
                W[j] = C.clone()
        elif method == "hogwild_sgd":
            G = [grad(j, W[j]) for j in range(P)]
            for j in range(P):                             # every server read C before any wrote
                rules.add_into(C, -lr * G[j])             # the Hogwild server's write (master.Centre)
            W = [C.clone() for _ in range(P)]
        elif method == "sync_sgd":
            G = [grad(j, W[0]) for j in range(P)]
            C = rules.sync_sgd_step(W[0], sum(G[1:], G[0].clone()), P, lr)
            W = [C for _ in range(P)]
        elif method == "sync_easgd":
            if due:
                total = sum(W[1:], W[0].clone())
                out = [rules.sync_easgd_step(W[j], C, total, P, ALPHA, grad(j, W[j]), lr) for j in range(P)]
                W, C = [o[0] for o in out], out[0][1]      # every worker's C: the same bits
            else:
                W = [rules.sgd_step(W[j], grad(j, W[j]), lr) for j in range(P)]
        elif method in ("async_easgd", "easgd", "async_measgd", "hogwild_easgd"):
            for j in range(P):
                if method == "async_measgd":
                    g = grad(j, rules.nesterov_lookahead(W[j], V[j], momentum))
                    W[j], V[j] = rules.nesterov_step(W[j], V[j], g, lr, momentum)
                else:
                    W[j] = rules.sgd_step(W[j], grad(j, W[j]), lr)
            if due and method == "hogwild_easgd":
                snap = C.clone()
                E = [rules.elastic_difference(W[j], snap, ALPHA) for j in range(P)]
                for j in range(P):
                    rules.add_into(C, E[j])
                    W[j] = W[j] - E[j]
            elif due:                                      # one master, rank order
                for j in range(P):
                    W[j], C, _ = rules.elastic_exchange(W[j], C, ALPHA)
        else:
            raise ValueError(f"unknown method {method!r}; one of {', '.join(METHODS)}")
        if (t + 1) % EVAL_EVERY == 0 and on_eval(t + 1, C):
            return


Curve = tuple[tuple[int, ...], tuple[float, ...]]
_CURVES: dict[tuple, Curve] = {}     # every curve computed in this process, by its arguments


def curve(method: str, lr: float, momentum: float, seed: int, steps: int, target: float = TARGET) -> Curve:
    """(local steps, test accuracy of the centre) every EVAL_EVERY steps, until the
    smoothed curve reaches `target`, the weights stop being finite (the rest of the
    budget counts as chance accuracy: never), or the budget ends. Computed once per
    process (or by `prefetch`)."""
    key = (method, lr, momentum, seed, steps, target)
    got = _CURVES.get(key)
    if got is None:
        got = _CURVES[key] = _curve(*key)
    return got


# Below this many gradients in all, the curves are computed here: a worker process
# spends ~2 s importing torch and loading the digits before its first one.
PARALLEL_MIN_GRADIENTS = 5000


def prefetch(keys: Sequence[tuple], processes: int | None = None) -> None:
    """Compute the curves `keys` ((method, lr, momentum, seed, steps, target) each) that
    are not known yet, in worker processes (default: one per core this process may run
    on), each handed the next curve when it returns one. Each curve is a deterministic
    function of its arguments (seeded data and weights, one torch thread), so where it
    is computed does not change it (tests/unit/test_easgd_tuning.py compares both ways).

    The workers are `python -m testbed.reproduce.papers.easgd_tuning --curves`, not a
    multiprocessing pool: a spawned pool re-runs the caller's main script, which a
    script without a `__main__` guard turns into endless respawning, and a fork would
    copy torch's thread pools mid-state."""
    import os  # noqa: PLC0415
    missing = [k for k in dict.fromkeys(keys) if k not in _CURVES]
    processes = min(len(missing), processes or len(os.sched_getaffinity(0)))
    if processes < 2 or sum(k[4] for k in missing) * WORKERS < PARALLEL_MIN_GRADIENTS:
        return
    import json  # noqa: PLC0415
    import selectors  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from testbed.workloads.base import host_env  # noqa: PLC0415 - the project importable, one BLAS thread

    cmd = [sys.executable, "-m", "testbed.reproduce.papers.easgd_tuning", "--curves"]
    todo, busy = list(missing), {}
    children = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=host_env())
                for _ in range(processes)]

    def hand(child: subprocess.Popen) -> None:
        if todo:
            busy[child] = todo.pop(0)
            child.stdin.write(json.dumps(busy[child]) + "\n")
            child.stdin.flush()
        else:                                   # nothing left: it exits at the end of its input
            child.stdin.close()
            sel.unregister(child.stdout)

    sel = selectors.DefaultSelector()
    try:
        for child in children:
            sel.register(child.stdout, selectors.EVENT_READ, child)
            hand(child)
        while busy:
            for ready, _ in sel.select():
                child = ready.data
                line = child.stdout.readline()      # one request out at a time: one line
                if not line:
                    raise RuntimeError(f"a curve worker exited with code {child.wait()} while training "
                                       f"{busy[child]} (its error is above)")
                xs, ys = json.loads(line)
                _CURVES[busy.pop(child)] = (tuple(xs), tuple(ys))
                hand(child)
    except BaseException:                       # a failed worker, Ctrl-C: stop the others too
        for child in children:
            child.kill()
        raise
    finally:
        sel.close()
        for child in children:                  # done: each read its end of input and exits
            child.wait()
            child.stdout.close()


def _serve_curves() -> int:
    """--curves: a prefetch worker. Reads one curve's arguments (a JSON list) per line,
    answers each with [steps, accuracies] on one line."""
    import json  # noqa: PLC0415
    import sys  # noqa: PLC0415
    for line in sys.stdin:
        xs, ys = _curve(*json.loads(line))
        print(json.dumps([list(xs), list(ys)]), flush=True)
    return 0


def _curve(method: str, lr: float, momentum: float, seed: int, steps: int, target: float) -> Curve:
    from testbed.stats import SMOOTHING_WINDOW, smooth  # noqa: PLC0415
    _, evaluate = _tasks(seed)
    xs: list[int] = []
    ys: list[float] = []

    def on_eval(step: int, c) -> bool:
        finite = bool(c.isfinite().all())
        xs.append(step)
        ys.append(evaluate(c) if finite else 0.0)
        return not finite or smooth(ys[-SMOOTHING_WINDOW:])[-1] >= target

    _train(method, lr, momentum, seed, steps, on_eval)
    return tuple(xs), tuple(ys)


def steps_to_target(method: str, lr: float, momentum: float, seed: int, steps: int,
                    target: float = TARGET) -> float | None:
    """First crossing of the smoothed accuracy curve (the emulated runs' rule); None if never."""
    from testbed.stats import time_to_target  # noqa: PLC0415
    xs, ys = curve(method, lr, momentum, seed, steps, target)
    return time_to_target(xs, ys, target, lower_is_better=False)


_CURVE_STEPS = steps_to_target     # (tests replace steps_to_target; then nothing is prefetched)


# ---- the tuning rule --------------------------------------------------------------------------
def mean_steps(per_seed: Sequence[float | None]) -> float:
    """A grid point's score: the mean over seeds; never (inf) if any seed never reaches it."""
    if not per_seed or any(s is None for s in per_seed):
        return math.inf
    return sum(per_seed) / len(per_seed)


def best_point(results: dict[tuple[float, float], Sequence[float | None]]) -> tuple[float, float] | None:
    """The grid point with the fewest mean steps (ties: the first in grid order);
    None when no point reaches the target on every seed."""
    best, score = None, math.inf
    for point, per_seed in results.items():
        s = mean_steps(per_seed)
        if s < score:
            best, score = point, s
    return best


@dataclass(frozen=True)
class Tuned:
    method: str
    grid: dict[tuple[float, float], tuple[float | None, ...]]   # every point's steps per seed
    lr: float | None             # the chosen point (None: no point reaches the target)
    momentum: float | None
    steps: tuple[float | None, ...]   # per seed at the chosen point

    @property
    def mean(self) -> float:
        return mean_steps(self.steps)

    @property
    def at_edge(self) -> bool:
        """The chosen learning rate is the grid's smallest or largest: the best may lie beyond."""
        lrs = [lr for lr, _ in self.grid]
        return self.lr is not None and self.lr in (min(lrs), max(lrs))

    def to_dict(self) -> dict:
        return {"method": self.method, "lr": self.lr, "momentum": self.momentum, "steps": list(self.steps),
                "at_edge": self.at_edge,
                "grid": [{"lr": lr, "momentum": m, "steps": list(s)} for (lr, m), s in self.grid.items()]}


def tune(method: str, momentum: bool, grid: Grid, target: float = TARGET,
         run: Callable[..., float | None] | None = None) -> Tuned:
    """The tuning rule over `grid` (module docstring); run(method, lr, momentum, seed,
    steps, target) gives one run's steps to the target (steps_to_target unless given)."""
    run = run or steps_to_target
    results = {pt: tuple(run(method, pt[0], pt[1], seed, grid.steps, target) for seed in grid.seeds)
               for pt in grid.points(momentum)}
    best = best_point(results)
    if best is None:
        return Tuned(method, results, None, None, tuple(None for _ in grid.seeds))
    return Tuned(method, results, best[0], best[1], results[best])


@dataclass(frozen=True)
class Comparison:
    pair: Pair
    variant: Tuned
    counterpart: Tuned
    ratios: tuple[float, ...]    # per seed: counterpart's steps / the variant's, each at its tuned point
    lower_bound: bool            # the counterpart never reached the target: ratios use the budget instead

    def to_dict(self) -> dict:
        return {"pair": self.pair.id, "variant": self.variant.to_dict(), "counterpart": self.counterpart.to_dict(),
                "ratios": list(self.ratios), "lower_bound": self.lower_bound}


@lru_cache(maxsize=None)
def compare(pair_id: str, grid: Grid = FULL, target: float = TARGET) -> Comparison:
    """Both methods of the pair tuned on the same grid, seeds and budget; per seed the
    ratio of steps to the target (counterpart / variant; above 1: the variant is faster).
    If only the variant reaches the target, each ratio is the budget over the variant's
    steps (a lower bound); if the variant never does, there is no ratio."""
    pair = next((p for p in PAIRS if p.id == pair_id), None)
    if pair is None:
        raise ValueError(f"unknown pair {pair_id!r}; one of {', '.join(p.id for p in PAIRS)}")
    if steps_to_target is _CURVE_STEPS:      # the rule reads the trained curves: train both methods' at once
        prefetch([(method, lr, m, seed, grid.steps, target) for method in (pair.variant, pair.counterpart)
                  for lr, m in grid.points(pair.momentum) for seed in grid.seeds])
    a = tune(pair.variant, pair.momentum, grid, target)
    b = tune(pair.counterpart, pair.momentum, grid, target)
    if a.lr is None:
        return Comparison(pair, a, b, (), False)
    if b.lr is None:
        return Comparison(pair, a, b, tuple(grid.steps / s for s in a.steps), True)
    return Comparison(pair, a, b, tuple(sb / sa for sa, sb in zip(a.steps, b.steps)), False)


def main(argv: list[str] | None = None) -> int:
    """python -m testbed.reproduce.papers.easgd_tuning [--quick]: every pair's tuned
    points and ratios as JSON lines."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415
    import time  # noqa: PLC0415
    p = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="the smoke grid (QUICK), not a result")
    p.add_argument("--curves", action="store_true",
                   help="serve prefetch: one curve per line of JSON arguments on stdin")
    args = p.parse_args(argv)
    if args.curves:
        return _serve_curves()
    grid = QUICK if args.quick else FULL
    for pair in PAIRS:
        t0 = time.monotonic()
        d = compare(pair.id, grid).to_dict()
        print(json.dumps({**d, "wall_s": round(time.monotonic() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
