"""The fair-baseline tuning of the EASGD variant comparisons (issue 30 part 3,
testbed/reproduce/papers/easgd_tuning.py): the rule picks the grid point with the
fewest mean steps and counts a point that misses on any seed as never; both
methods of a pair see the same grid, seeds and budget; the in-process training
is deterministic and runs end to end on a smoke grid."""
from __future__ import annotations

import math

import pytest

from testbed.reproduce.papers import easgd_tuning as T

pytestmark = pytest.mark.unit


def test_the_rule_takes_the_fewest_mean_steps_and_a_miss_on_any_seed_is_never():
    results = {(0.01, 0.0): (None, 50.0, 40.0),     # fastest on two seeds, misses one: never
               (0.1, 0.0): (90.0, 110.0, 100.0),    # mean 100
               (0.3, 0.0): (80.0, 120.0, 95.0)}     # mean 98.3: the best
    assert T.best_point(results) == (0.3, 0.0)
    assert T.mean_steps((None, 50.0, 40.0)) == math.inf
    assert T.best_point({(0.1, 0.0): (100.0,), (0.3, 0.0): (100.0,)}) == (0.1, 0.0)   # ties: grid order
    assert T.best_point({(0.1, 0.0): (None,), (0.3, 0.0): (None, 3.0)}) is None


def test_both_methods_of_every_pair_see_the_same_grid_seeds_and_budget(monkeypatch):
    calls: dict[str, set] = {}

    def fake(method, lr, momentum, seed, steps, target):
        calls.setdefault(method, set()).add((lr, momentum, seed, steps, target))
        return 100.0 / lr if method in ("async_sgd", "async_msgd", "hogwild_sgd", "sync_sgd") else 50.0 / lr

    monkeypatch.setattr(T, "steps_to_target", fake)
    grid = T.Grid(lrs=(0.1, 0.3), momenta=(0.5, 0.9), seeds=(1, 2, 3), steps=40)
    for pair in T.PAIRS:
        c = T.compare.__wrapped__(pair.id, grid, 0.5)
        assert calls[pair.variant] == calls[pair.counterpart]
        expected = {(lr, m, s, 40, 0.5) for lr in grid.lrs for s in grid.seeds
                    for m in (grid.momenta if pair.momentum else (0.0,))}
        assert calls[pair.variant] == expected
        assert list(c.variant.grid) == list(c.counterpart.grid) == grid.points(pair.momentum)
        assert c.variant.lr == c.counterpart.lr == 0.3 and c.variant.at_edge
        assert c.ratios == pytest.approx((2.0, 2.0, 2.0)) and not c.lower_bound


def test_a_counterpart_that_never_arrives_gives_lower_bounds_and_a_variant_that_never_does_none(monkeypatch):
    grid = T.Grid(lrs=(0.1,), momenta=(0.9,), seeds=(1, 2), steps=40)
    monkeypatch.setattr(T, "steps_to_target", lambda m, *a: 20.0 if m == "async_easgd" else None)
    c = T.compare.__wrapped__("async_easgd_vs_async_sgd", grid, 0.85)
    assert c.lower_bound and c.ratios == (2.0, 2.0) and c.counterpart.lr is None
    monkeypatch.setattr(T, "steps_to_target", lambda m, *a: None if m == "async_easgd" else 20.0)
    c = T.compare.__wrapped__("async_easgd_vs_async_sgd", grid, 0.85)
    assert c.ratios == () and c.variant.lr is None
    with pytest.raises(ValueError, match="unknown pair"):
        T.compare.__wrapped__("easgd_vs_nothing", grid, 0.85)


def test_the_training_is_deterministic_and_the_schedules_differ_where_they_should():
    run = T._curve
    a = run("async_easgd", 0.1, 0.0, 1, 8, 2.0)      # target 2: never stops early
    assert a == run("async_easgd", 0.1, 0.0, 1, 8, 2.0) and a[0] == (4, 8)
    assert all(0.0 <= y <= 1.0 for y in a[1])
    # the original's round robin and Async's FCFS serve equal workers in the same order
    assert run("easgd", 0.1, 0.0, 1, 8, 2.0) == a
    # Hogwild's servers read one snapshot: another centre than one master's rank order
    assert run("hogwild_easgd", 0.1, 0.0, 1, 8, 2.0) != a


def test_a_smoke_run_tunes_a_pair_end_to_end():
    c = T.compare("async_measgd_vs_async_msgd", T.QUICK)
    for t in (c.variant, c.counterpart):
        assert list(t.grid) == T.QUICK.points(True)
        assert all(len(s) == len(T.QUICK.seeds) for s in t.grid.values())
        assert all(x is None or 0 < x <= T.QUICK.steps for s in t.grid.values() for x in s)
    assert len(c.ratios) in (0, len(T.QUICK.seeds))
    assert c.to_dict()["pair"] == "async_measgd_vs_async_msgd"


def test_curves_trained_in_worker_processes_are_the_ones_trained_here(monkeypatch):
    keys = [("async_easgd", 0.1, 0.0, 1, 8, 2.0), ("hogwild_sgd", 0.3, 0.0, 2, 8, 2.0),
            ("async_measgd", 0.1, 0.9, 3, 8, 2.0)]
    here = [T._curve(*k) for k in keys]
    monkeypatch.setattr(T, "_CURVES", {})
    monkeypatch.setattr(T, "PARALLEL_MIN_GRADIENTS", 0)      # a pool even for this little
    T.prefetch(keys, processes=2)
    assert sorted(T._CURVES) == sorted(keys) and [T._CURVES[k] for k in keys] == here
    assert T.curve(*keys[0]) == here[0]                     # read back, not trained again


def test_a_failing_curve_worker_is_named_not_waited_for(monkeypatch):
    monkeypatch.setattr(T, "_CURVES", {})
    monkeypatch.setattr(T, "PARALLEL_MIN_GRADIENTS", 0)
    with pytest.raises(RuntimeError, match="curve worker exited with code 1 while training"):
        T.prefetch([("no_such_method", 0.1, 0.0, 1, 8, 2.0), ("async_sgd", 0.1, 0.0, 1, 8, 2.0)], processes=2)
