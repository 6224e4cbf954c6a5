"""`exchange_order` (issue 30 part 6): the master variants' step order at an
exchange, on a hand-worked example through the worker's own training loop
(the network and the device replaced by exact stand-ins).

  W0 = [1, 2], C = [0, 1], g(W) = W (the gradient of |W|^2 / 2), eta = 0.5, alpha = 0.25, tau = 1
  step_then_exchange: W' = W0 - eta W0 = [0.5, 1]; sent W'; e = alpha (W' - C) = [0.125, 0];
                      W1 = W' - e = [0.375, 1]
  zhang:              sent W0; e = alpha (W0 - C) = [0.25, 0.25]; g(W0) = [1, 2];
                      W1 = W0 - e - eta g(W0) = [0.25, 0.75]
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hosts.easgd import worker
from hosts.easgd.config import ConfigError, EasgdSettings

pytestmark = pytest.mark.unit

C = torch.tensor([0.0, 1.0])


class Task:
    batch_size = 1

    def weights(self):
        return torch.tensor([1.0, 2.0])

    def batches(self):
        while True:
            yield None

    def gradient(self, w, idx):
        return w.clone(), 0.0


def settings(variant: str, order: str) -> EasgdSettings:
    return EasgdSettings.parse({"variant": variant, "steps": 1, "tau": 1, "lr": 0.5, "alpha": 0.25,
                                "momentum": 0.9, "batch_size": 1, "seed": 0, "model": {"c1": 1, "c2": 1, "hidden": 1},
                                "snapshot_every_s": 1.0, "dataset": {"source": "digits"}, "exchange_order": order,
                                "pack": True},
                               "test")


def run(monkeypatch, variant: str, order: str):
    sent = []

    def exchange(rt, link, payload, peer):
        sent.append(payload.clone())
        return 0.25 * (payload - C)

    monkeypatch.setattr(worker.timing, "compute", lambda rt, fn, n: fn())
    monkeypatch.setattr(worker.timing, "exchange", exchange)
    rt = SimpleNamespace(cfg=SimpleNamespace(world=2, rank=0), record_iteration=lambda **kw: None)
    out = worker.train(rt, Task(), settings(variant, order), SimpleNamespace(peer="master"), None)
    return out["w"], sent


@pytest.mark.parametrize("variant", ["easgd", "async_easgd", "hogwild_easgd"])
def test_step_then_exchange_sends_the_post_step_weights(monkeypatch, variant):
    w, sent = run(monkeypatch, variant, "step_then_exchange")
    assert torch.equal(sent[0], torch.tensor([0.5, 1.0]))
    assert torch.equal(w, torch.tensor([0.375, 1.0]))


@pytest.mark.parametrize("variant", ["easgd", "async_easgd", "hogwild_easgd", "async_measgd"])
def test_zhang_order_takes_exchange_and_gradient_at_the_pre_step_weights(monkeypatch, variant):
    # async_measgd from v = 0: v' = -eta g(W0 + 0) = [-0.5, -1]; W1 = (W0 - e) + v', the same numbers
    w, sent = run(monkeypatch, variant, "zhang")
    assert torch.equal(sent[0], torch.tensor([1.0, 2.0]))
    assert torch.equal(w, torch.tensor([0.25, 0.75]))


def test_the_order_is_a_checked_setting():
    with pytest.raises(ConfigError, match="exchange_order"):
        settings("easgd", "backwards")


@pytest.mark.parametrize("order", ["step_then_exchange", "zhang"])
def test_the_scenario_setting_reaches_every_host(tmp_path, order):
    from easgd_programs import easgd_host_configs

    progs = easgd_host_configs("name: t\ntopology: {kind: star, workers: 2}\nworkload: {kind: easgd, variant: "
                               f"easgd, exchange_order: {order}}}\n", tmp_path)
    for host in ("w1", "w2", "master"):
        assert EasgdSettings.parse(progs[host]["easgd"], host).exchange_order == order
