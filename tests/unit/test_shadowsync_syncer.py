"""One sync of the run's own code (hosts.shadowsync.trainer.Syncer, used by the
shadow and by FR-* worker 0) against hand-computed values, with the network
replaced by fakes that do what the other side does: the sync PS's half of
S-EASGD is the server's own function (rules.elastic_difference_into), the
allreduce returns this trainer's vector plus a peer's. A worker's update made
while the sync is in flight must survive it (the shadow adds new - snapshot)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hosts.shadowsync import rules
from hosts.shadowsync import trainer as tr

pytestmark = pytest.mark.unit


def settings(algorithm: str, trainers: int = 2, **kw) -> SimpleNamespace:
    base = dict(algorithm=algorithm, trainers=trainers, calibrated=False, sync_hw_s=0.0,
                alpha=0.25, bmuf_eta=0.5, bmuf_zeta=1.5, nesterov=False)
    base.update(kw)
    return SimpleNamespace(**base)


def shared() -> SimpleNamespace:
    return SimpleNamespace(tdf=SimpleNamespace(value=1.0), measuring=SimpleNamespace(value=1))


class FakeSyncPS:
    """The sync PS as the server runs it: d = alpha (w - w~), w~ += d, reply d.
    `during` runs while the exchange is in flight (a Hogwild worker's write)."""

    def __init__(self, centre, alpha, flat, during=None):
        self.centre, self.alpha, self.flat, self.during = centre, alpha, flat, during
        self.peer = "syncps"

    def elastic(self, w: np.ndarray) -> np.ndarray:
        d = rules.elastic_difference_into(self.centre, torch.from_numpy(w.copy()), self.alpha)
        if self.during:
            self.during(self.flat)
        return d.numpy()

    def close(self) -> None:
        pass


class FakeAllreduce:
    """A ring of 2: returns this trainer's vector plus the peer's (its replica and flags)."""

    def __init__(self, peer_vecs, flat, during=None):
        self.peer_vecs, self.flat, self.during, self.seen = list(peer_vecs), flat, during, []

    def allreduce(self, vec):
        self.seen.append(torch.as_tensor(vec).clone())
        if self.during:
            self.during(self.flat)
        return torch.as_tensor(vec) + self.peer_vecs.pop(0)

    def close(self) -> None:
        pass


def easgd_syncer(monkeypatch, flat, centre, during=None):
    monkeypatch.setattr(tr, "SyncLink", lambda *a, **k: FakeSyncPS(centre, 0.25, flat, during))
    cfg = SimpleNamespace(sync_ps=None, port=0, ip="127.0.0.1", rank=0, connect_timeout_s=1, timeout_s=1)
    return tr.Syncer(cfg, settings("easgd"), flat, None, "w1", shared())


def allreduce_syncer(monkeypatch, algorithm, flat, peer_vecs, during=None, **kw):
    import hosts.dnn.config as dcfg
    import hosts.dnn.open_collective as oc
    fake = FakeAllreduce(peer_vecs, flat, during)
    monkeypatch.setattr(dcfg.TorchWorkerConfig, "from_json", staticmethod(lambda _: SimpleNamespace(collective="ring")))
    monkeypatch.setattr(oc, "open_collective", lambda _: fake)
    cfg = SimpleNamespace(collective={})
    return tr.Syncer(cfg, settings(algorithm, **kw), flat, None, "w1", shared()), fake


def f32(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def test_s_easgd_sync_moves_replica_and_sync_ps_centre_by_hand(monkeypatch):
    # alpha 0.25, w = (4, 0), w~ = (0, 8): d = (1, -2); w -> (3, 2), w~ -> (1, 6)
    flat, centre = f32(4, 0), f32(0, 8)
    sy = easgd_syncer(monkeypatch, flat, centre)
    assert sy.sync(finished=True) is True          # EASGD: its own trainer's flag
    assert flat.tolist() == [3.0, 2.0] and centre.tolist() == [1.0, 6.0] and sy.count == 1
    # the second exchange from there: d = 0.25 ((3, 2) - (1, 6)) = (0.5, -1)
    sy.sync(finished=False)
    assert flat.tolist() == [2.5, 3.0] and centre.tolist() == [1.5, 5.0]
    # the two halves together are rules.s_easgd (the rule the docs state)
    w2, c2, _ = rules.s_easgd(f32(4, 0), f32(0, 8), 0.25)
    assert w2.tolist() == [3.0, 2.0] and c2.tolist() == [1.0, 6.0]


def test_s_easgd_keeps_a_worker_update_made_during_the_exchange(monkeypatch):
    # a worker adds (+0.5, 0) to the live replica while the exchange is in flight
    flat, centre = f32(4, 0), f32(0, 8)
    sy = easgd_syncer(monkeypatch, flat, centre, during=lambda w: w.add_(f32(0.5, 0)))
    sy.sync(finished=False)
    assert flat.tolist() == [3.5, 2.0]              # (3, 2) + the worker's (0.5, 0)
    assert centre.tolist() == [1.0, 6.0]            # the centre saw the snapshot (4, 0)


def test_s_ma_sync_averages_with_the_peer_and_reads_the_flags(monkeypatch):
    # 2 trainers: mine (1, 2), the peer's (3, 4) -> (2, 3); flags: finished, measuring
    flat = f32(1, 2)
    sy, fake = allreduce_syncer(monkeypatch, "ma", flat, [f32(3, 4, 1, 1), f32(2, 3, 0, 1)])
    assert sy.sync(finished=True) is True            # both trainers' workers are done
    assert flat.tolist() == [2.0, 3.0]
    assert fake.seen[0].tolist() == [1.0, 2.0, 1.0, 1.0]   # replica + (finished, measuring)
    assert sy.all_measuring
    assert sy.sync(finished=True) is False           # the peer is not done: (1+0) < 2
    assert flat.tolist() == [2.0, 3.0]


def test_s_ma_keeps_a_worker_update_made_during_the_allreduce(monkeypatch):
    flat = f32(1, 2)
    sy, _ = allreduce_syncer(monkeypatch, "ma", flat, [f32(3, 4, 0, 1)], during=lambda w: w.add_(f32(0, -1)))
    sy.sync(finished=False)
    assert flat.tolist() == [2.0, 2.0]               # mean (2, 3) + the worker's (0, -1)


def test_s_bmuf_two_syncs_block_momentum_by_hand(monkeypatch):
    # w_g starts at the replica (1, 1), v = 0; eta 0.5, zeta 1.5; 2 trainers.
    # sync 1: peer (5, 1) -> mean (3, 1); D = (2, 0); v = 1.5 D = (3, 0); w_g = (4, 1); w = (4, 1)
    # sync 2: replica (4, 1), peer (6, 3) -> mean (5, 2); D = (1, 1);
    #         v = 0.5 (3, 0) + 1.5 (1, 1) = (3, 1.5); w_g = (7, 2.5); w = (7, 2.5)
    flat = f32(1, 1)
    sy, _ = allreduce_syncer(monkeypatch, "bmuf", flat, [f32(5, 1, 0, 1), f32(6, 3, 0, 1)])
    sy.sync(finished=False)
    assert flat.tolist() == [4.0, 1.0] and sy.v.tolist() == [3.0, 0.0]
    sy.sync(finished=False)
    assert flat.tolist() == [7.0, 2.5] and sy.w_g.tolist() == [7.0, 2.5] and sy.v.tolist() == [3.0, 1.5]


def test_s_bmuf_nesterov_looks_ahead_by_eta_v(monkeypatch):
    # as the first sync above, Nesterov: w = w_g + eta v = (4, 1) + (1.5, 0)
    flat = f32(1, 1)
    sy, _ = allreduce_syncer(monkeypatch, "bmuf", flat, [f32(5, 1, 0, 1)], nesterov=True)
    sy.sync(finished=False)
    assert flat.tolist() == [5.5, 1.0] and sy.w_g.tolist() == [4.0, 1.0]
