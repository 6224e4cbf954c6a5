"""Sync EASGD's collective path (issue 30 part 2): `collective: tree` and `pack`.

The worker's own training loop runs for three ranks in threads, LeNet on the
digits, with the network replaced by an in-memory collective that sums in the
tree's order (hosts/collectives/tree.py's schedule) and the device by plain
calls: every rank's centre is the same bits with pack false (one allreduce per
parameter tensor), and they are the packed run's bits, because the tree adds
each element in one order whatever the message. The socket implementation is
held to the same schedule in tests/local/test_torch_collectives.py.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hosts.collectives.tree import tree_children
from hosts.easgd import worker
from hosts.easgd.config import ConfigError, EasgdSettings
from hosts.easgd.model import Task, initial_weights
from testbed.scenario import ScenarioError, expand_points, load_scenario_text

pytestmark = pytest.mark.unit

WORLD = 3
WIDTHS = {"c1": 4, "c2": 4, "hidden": 8}


class InMemoryTree:
    """`world` ranks in threads: every rank's contribution in, the tree-order sum out.
    Each call records the size it reduced (rank 0's), so the test sees the messages."""

    def __init__(self, world: int):
        self.world = world
        self.slots: list[np.ndarray | None] = [None] * world
        self.barrier = threading.Barrier(world)
        self.sizes: list[int] = []

    def allreduce(self, rank: int, x: torch.Tensor) -> torch.Tensor:
        self.slots[rank] = x.detach().numpy().astype(np.float32).copy()
        self.barrier.wait()
        bufs = [s.copy() for s in self.slots]
        for r in reversed(range(self.world)):        # tree.py: own value, then children ascending
            for c in tree_children(r, self.world):
                bufs[r] += bufs[c]
        if rank == 0:
            self.sizes.append(x.numel())
        self.barrier.wait()                          # nobody overwrites a slot still being read
        return torch.from_numpy(bufs[0])


def settings(variant: str, pack: bool, steps: int = 6) -> EasgdSettings:
    return EasgdSettings.parse({"variant": variant, "steps": steps, "tau": 2, "lr": 0.3, "alpha": 0.3,
                                "momentum": 0.0, "batch_size": 8, "seed": 5, "model": WIDTHS,
                                "snapshot_every_s": 1.0, "dataset": {"source": "digits"},
                                "exchange_order": "step_then_exchange", "pack": pack}, "test")


def train_all(monkeypatch, variant: str, pack: bool) -> tuple[dict[int, dict], list[int]]:
    monkeypatch.setattr(worker.timing, "compute", lambda rt, fn, n: fn())
    net = InMemoryTree(WORLD)
    out: dict[int, object] = {}
    # built one after another: LeNet's init draws from torch's global generator, which
    # threads share (each host is its own process in a run)
    tasks = [Task(5, WIDTHS, rank, WORLD, 8) for rank in range(WORLD)]

    def run(rank: int) -> None:
        coll = SimpleNamespace(allreduce=lambda x: net.allreduce(rank, x))
        rt = SimpleNamespace(cfg=SimpleNamespace(world=WORLD, rank=rank), collective=coll,
                             comm=lambda fn, values: fn(), record_iteration=lambda **kw: None)
        try:
            out[rank] = worker.train(rt, tasks[rank], settings(variant, pack), None, None)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out[rank] = e
            net.barrier.abort()
    ts = [threading.Thread(target=run, args=(r,)) for r in range(WORLD)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for r in range(WORLD):
        if isinstance(out.get(r), BaseException):
            raise out[r]
    return out, net.sizes


def test_unpacked_sync_easgd_keeps_one_centre_and_the_packed_bits(monkeypatch):
    tensors = Task(5, WIDTHS, 0, WORLD, 8).tensor_sizes()
    n = int(initial_weights(5, WIDTHS).numel())
    assert len(tensors) == 8 and sum(tensors) == n          # LeNet: 4 layers x (weight, bias)
    unpacked, sizes_u = train_all(monkeypatch, "sync_easgd", pack=False)
    packed, sizes_p = train_all(monkeypatch, "sync_easgd", pack=True)
    assert sizes_p == [n] * 3                                # 6 steps / tau 2: one message per exchange
    assert sizes_u == tensors * 3                            # one per tensor, in the flat vector's order
    digests = {worker.digest(o["c"]) for o in unpacked.values()}
    assert len(digests) == 1                                 # every rank's centre: the same bits
    assert digests == {worker.digest(o["c"]) for o in packed.values()}
    assert worker.digest(unpacked[0]["c"]) != worker.digest(initial_weights(5, WIDTHS))   # it did move
    assert all(o["exchanges"] == 3 for o in unpacked.values())


def test_unpacked_sync_sgd_reduces_every_gradient_per_tensor(monkeypatch):
    unpacked, sizes = train_all(monkeypatch, "sync_sgd", pack=False)
    packed, _ = train_all(monkeypatch, "sync_sgd", pack=True)
    assert len(sizes) == 8 * 6
    assert {worker.digest(o["w"]) for o in unpacked.values()} == {worker.digest(o["w"]) for o in packed.values()}
    assert len({worker.digest(o["w"]) for o in unpacked.values()}) == 1


def test_sizes_that_do_not_cover_the_vector_are_refused():
    rt = SimpleNamespace(collective=None, comm=lambda fn, values: fn())
    with pytest.raises(ValueError, match="do not add up"):
        worker.timing.allreduce(rt, torch.zeros(10), [4, 5])


# -- settings: the scenario's fields, checked before anything starts, reach every host --------

def test_pack_is_a_checked_setting_the_master_variants_ignore(monkeypatch):
    """Like `collective`, `pack` is the sync variants' field: a sweep over every variant
    may set it (variants.yaml --set workload.pack=false loads), and a master variant's
    worker exchanges the flat model whatever it says."""
    from testbed.results import PROJECT_ROOT
    from testbed.scenario import load_scenario
    scn = load_scenario(PROJECT_ROOT / "scenarios/easgd/variants.yaml", ["workload.pack=false"])
    assert {p.scenario.workload.variant for p in expand_points(scn)} >= {"easgd", "sync_easgd"}
    with pytest.raises(ConfigError, match="pack: must be true or false"):
        EasgdSettings.parse(dict(settings("easgd", True).identity(), pack="no"), "test")
    with pytest.raises(ScenarioError, match="collective"):
        load_scenario_text("name: t\nworkload: {kind: easgd, variant: sync_easgd, collective: butterfly}\n",
                           "t.yaml")
    sent = []
    monkeypatch.setattr(worker.timing, "compute", lambda rt, fn, n: fn())
    monkeypatch.setattr(worker.timing, "exchange", lambda rt, link, w, peer: (sent.append(w.numel()), 0 * w)[1])
    rt = SimpleNamespace(cfg=SimpleNamespace(world=2, rank=0), record_iteration=lambda **kw: None)
    out = worker.train(rt, Task(5, WIDTHS, 0, 2, 8), settings("async_easgd", False, steps=4),
                       SimpleNamespace(peer="master"), None)
    assert sent == [int(initial_weights(5, WIDTHS).numel())] * 2 and out["exchanges"] == 2


@pytest.mark.parametrize("variant,pack", [("sync_easgd", False), ("sync_sgd", True)])
def test_tree_and_pack_reach_every_worker(tmp_path, variant, pack):
    from easgd_programs import easgd_host_configs

    progs = easgd_host_configs("name: t\ntopology: {kind: star, workers: 3}\nworkload: {kind: easgd, "
                               f"variant: {variant}, collective: tree, pack: {str(pack).lower()}}}\n", tmp_path)
    assert set(progs) == {"w1", "w2", "w3"}                 # the tree needs no extra host
    for host, cfg in progs.items():
        assert EasgdSettings.parse(cfg["easgd"], host).pack is pack
        assert cfg["worker"]["torch"]["collective"] == "tree"
