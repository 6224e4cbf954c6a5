"""ShadowSync's update rules and normalized entropy against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch

from hosts.shadowsync import rules

pytestmark = pytest.mark.unit


def t(*xs):
    return torch.tensor(xs, dtype=torch.float64)


def test_s_easgd_moves_replica_and_centre_by_the_same_d():
    # alpha 0.25, w = (4, 0), c = (0, 8): d = 0.25 * (4, -8) = (1, -2)
    w2, c2, d = rules.s_easgd(t(4, 0), t(0, 8), 0.25)
    assert d.tolist() == [1.0, -2.0]
    assert w2.tolist() == [3.0, 2.0]
    assert c2.tolist() == [1.0, 6.0]


def test_s_ma_is_the_mean():
    # three trainers' replicas (1,2), (3,4), (5,9) sum to (9, 15)
    assert rules.s_ma(t(9, 15), 3).tolist() == [3.0, 5.0]


def test_s_bmuf_block_momentum_by_hand():
    # N=2, sum (6, 2) -> mean (3, 1); w_g (1, 1); v (2, -2); eta 0.5, zeta 1.5
    # D = (2, 0); v' = 0.5 (2, -2) + 1.5 (2, 0) = (4, -1); w_g' = (5, 0)
    wk, wg, v = rules.s_bmuf(t(6, 2), 2, t(1, 1), t(2, -2), eta=0.5, zeta=1.5)
    assert v.tolist() == [4.0, -1.0]
    assert wg.tolist() == [5.0, 0.0]
    assert wk.tolist() == [5.0, 0.0]
    # Nesterov: w_k = w_g' + eta v' = (5, 0) + (2, -0.5)
    wk_n, _, _ = rules.s_bmuf(t(6, 2), 2, t(1, 1), t(2, -2), eta=0.5, zeta=1.5, nesterov=True)
    assert wk_n.tolist() == [7.0, -0.5]


def test_bmuf_with_zeta_one_and_no_momentum_is_model_averaging():
    wk, wg, _ = rules.s_bmuf(t(6, 2), 2, t(1, 1), t(0, 0), eta=0.0, zeta=1.0)
    assert wk.tolist() == rules.s_ma(t(6, 2), 2).tolist() == wg.tolist()


def test_apply_delta_keeps_updates_made_after_the_snapshot():
    snapshot = t(1, 1)
    live = t(1.5, 0.0)               # a worker moved the replica after the shadow read it
    rules.apply_delta(live, snapshot, t(3, 3))
    assert live.tolist() == [3.5, 2.0]


def test_a_paused_sync_writes_the_result_itself():
    """Two trainers average to one value; added as a difference to their different
    replicas it can come out differently on each (float32 rounding: here 0 and 1),
    which is why a foreground sync, with the workers paused, replaces instead."""
    import torch

    new = torch.tensor([1.0], dtype=torch.float32)
    a, b = torch.tensor([1e8], dtype=torch.float32), torch.tensor([1.0], dtype=torch.float32)
    via_delta = [x.clone() for x in (a, b)]
    for live in via_delta:
        rules.apply_delta(live, live.clone(), new)
    assert via_delta[0].item() != via_delta[1].item()           # the ulp-level split
    for live in (a, b):
        rules.replace(live, live.clone(), new)
    assert a.item() == b.item() == 1.0


def test_local_sgd_in_place():
    w = t(1, 2)
    rules.local_sgd(w, t(10, -10), 0.1)
    assert w.tolist() == [0.0, 3.0]


def test_rules_leave_inputs_unchanged():
    w, c = t(4, 0), t(0, 8)
    rules.s_easgd(w, c, 0.25)
    assert w.tolist() == [4, 0] and c.tolist() == [0, 8]


def test_normalized_entropy_hand_example():
    # labels 1,0,0,0 (p_bar = 1/4); predictions 0.5, 0.2, 0.1, 0.4
    p, y = t(0.5, 0.2, 0.1, 0.4), t(1, 0, 0, 0)
    logloss = -(math.log(0.5) + math.log(0.8) + math.log(0.9) + math.log(0.6)) / 4
    base = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert rules.normalized_entropy(p, y) == pytest.approx(logloss / base, rel=1e-12)
    assert rules.normalized_entropy(p, y) == pytest.approx(0.6813005, rel=1e-6)   # 0.383119 / 0.562335


def test_predicting_the_base_rate_has_ne_one():
    y = t(1, 0, 0, 0, 1, 0, 0, 0)
    assert rules.normalized_entropy(torch.full((8,), 0.25, dtype=torch.float64), y) == pytest.approx(1.0)


def test_ne_needs_both_labels():
    with pytest.raises(ValueError, match="both labels"):
        rules.normalized_entropy(t(0.5, 0.5), t(1, 1))
