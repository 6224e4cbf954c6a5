"""Each update rule of hosts/easgd/rules.py against a two-worker example worked
by hand. All inputs are small multiples of powers of two, so float32 holds
every intermediate exactly and the expected values are compared with ==."""
from __future__ import annotations

import pytest
import torch

from hosts.easgd import rules

pytestmark = pytest.mark.unit

ALPHA, ETA, DELTA = 0.25, 0.5, 0.5


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def W1():
    return t(1.0, 2.0)


def W2():
    return t(3.0, -1.0)


def C():
    return t(0.0, 1.0)


G1, G2 = t(0.5, -1.0), t(1.0, 2.0)


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.equal(a, b), f"{a.tolist()} != {b.tolist()}"


def test_round_robin_exchange_worker1_then_worker2():
    # e1 = 0.25 ([1,2] - [0,1]) = [0.25, 0.25]
    w1, c, e1 = rules.elastic_exchange(W1(), C(), ALPHA)
    same(e1, t(0.25, 0.25)); same(w1, t(0.75, 1.75)); same(c, t(0.25, 1.25))
    # e2 = 0.25 ([3,-1] - [0.25,1.25]) = [0.6875, -0.5625]
    w2, c, e2 = rules.elastic_exchange(W2(), c, ALPHA)
    same(e2, t(0.6875, -0.5625)); same(w2, t(2.3125, -0.4375)); same(c, t(0.9375, 0.6875))


def test_first_come_first_served_order_changes_the_centre():
    # Async EASGD: worker 2 arrived first. e2 = 0.25 [3,-2]; then e1 = 0.25 ([1,2] - [0.75,0.5])
    w2, c, _ = rules.elastic_exchange(W2(), C(), ALPHA)
    same(w2, t(2.25, -0.5)); same(c, t(0.75, 0.5))
    w1, c, e1 = rules.elastic_exchange(W1(), c, ALPHA)
    same(e1, t(0.0625, 0.375)); same(w1, t(0.9375, 1.625)); same(c, t(0.8125, 0.875))


def test_hogwild_both_read_one_snapshot_and_both_additions_land():
    shared = C()
    snap = shared.clone()                       # both servers read C before either writes
    e1 = rules.elastic_difference(W1(), snap, ALPHA)
    e2 = rules.elastic_difference(W2(), snap, ALPHA)
    rules.add_into(shared, e2)
    rules.add_into(shared, e1)
    same(shared, t(1.0, 0.75))                  # [0,1] + [0.25,0.25] + [0.75,-0.5]
    same(W1() - e1, t(0.75, 1.75)); same(W2() - e2, t(2.25, -0.5))


def test_measgd_nesterov_local_step():
    v = t(0.5, 0.0)
    same(rules.nesterov_lookahead(W1(), v, DELTA), t(1.25, 2.0))
    # v' = 0.5 [0.5,0] - 0.5 [0.5,-1] = [0, 0.5]; W' = [1, 2.5]
    w, v2 = rules.nesterov_step(W1(), v, G1, ETA, DELTA)
    same(v2, t(0.0, 0.5)); same(w, t(1.0, 2.5))
    # the elastic exchange after it is Async EASGD's: e = 0.25 ([1,2.5] - [0,1])
    _, c, e = rules.elastic_exchange(w, C(), ALPHA)
    same(e, t(0.25, 0.375)); same(c, t(0.25, 1.375))


def test_sync_easgd_step_both_workers_from_step_t_values():
    s = W1() + W2()                             # the allreduce: [4, 1]
    w1, c1 = rules.sync_easgd_step(W1(), C(), s, 2, ALPHA, G1, ETA)
    w2, c2 = rules.sync_easgd_step(W2(), C(), s, 2, ALPHA, G2, ETA)
    same(c1, t(1.0, 0.75)); same(c2, c1)        # every replica of C the same bits
    same(w1, t(0.5, 2.25))                      # [1,2] - [0.25,0.25] - [0.25,-0.5]
    same(w2, t(1.75, -1.5))                     # [3,-1] - [0.75,-0.5] - [0.5,1]
    # without a gradient (tau > 1: the local SGD steps came before): only the elastic term
    w1, _ = rules.sync_easgd_step(W1(), C(), s, 2, ALPHA)
    same(w1, t(0.75, 1.75))


def test_async_sgd_two_pushes():
    c = rules.async_sgd_apply(C(), G1, ETA)
    same(c, t(-0.25, 1.5))
    same(rules.async_sgd_apply(c, G2, ETA), t(-0.75, 0.5))


def test_async_momentum_sgd_two_pushes():
    c, v = rules.async_msgd_apply(C(), torch.zeros(2), G1, ETA, DELTA)
    same(v, t(-0.25, 0.5)); same(c, t(-0.25, 1.5))
    c, v = rules.async_msgd_apply(c, v, G2, ETA, DELTA)
    same(v, t(-0.625, -0.75)); same(c, t(-0.875, 0.75))


def test_hogwild_sgd_in_place_additions():
    shared = C()
    rules.add_into(shared, -ETA * G2)
    rules.add_into(shared, -ETA * G1)
    same(shared, t(-0.75, 0.5))


def test_sync_sgd_step_averages_the_sum():
    same(rules.sync_sgd_step(C(), G1 + G2, 2, ETA), t(-0.375, 0.75))
    same(rules.sgd_step(W1(), G1, ETA), t(0.75, 2.5))


def test_rules_leave_their_inputs_alone():
    w, c = W1(), C()
    rules.elastic_exchange(w, c, ALPHA)
    rules.sync_easgd_step(w, c, w + w, 2, ALPHA, G1, ETA)
    same(w, W1()); same(c, C())
