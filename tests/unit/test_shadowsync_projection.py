"""ShadowSync's projection to other trainer counts (testbed/workloads/shadowsync.py
synthesize_trainers / project_trainers) on hand-built traces shaped as the hosts
write them: trainer worker 0 (lookup, step, push; FR: an allreduce every k),
the embedding PS (role server, pushes unanswered), the shadows (role shadow)."""
from __future__ import annotations

import pytest

from hosts.common.trace import TraceRecorder
from testbed.fidelity.constants import load_profile
from testbed.fidelity.projector import project
from testbed.workloads import shadowsync as ss

pytestmark = pytest.mark.unit
PROF = load_profile("tor-100g-host")
STEP_S, ITERS, K, DENSE = 50e-6, 20, 5, 12_000


def job(trainers: int, mode: str, batch: int = 64) -> list:
    shadow = mode == "shadow"
    world = trainers + 1 + (trainers if shadow else 0)
    rec = lambda name, rank, **m: TraceRecorder(None, host=name, rank=rank, world=world, tdf=400.0,  # noqa: E731
                                                 workload="shadowsync", **m)
    ws = [rec(f"w{k + 1}", k, role="worker") for k in range(trainers)]
    emb = rec("emb1", trainers, role="server", server="embedding_ps", unanswered_tags=["push"])
    for it in range(ITERS):
        for k, w in enumerate(ws):
            w.send(0, 0, peer="emb1", values=26 * batch, value_bytes=8, tag="lookup")
            w.waited(w.recv(0, 0, peer="emb1", values=26 * batch * 8, tag="rows"))
            emb.waited(emb.recv(0, 0, peer=w.header["host"], values=26 * batch, value_bytes=8, tag="lookup"))
            emb.compute(0, 0, 0.0, 0.0)
            emb.send(0, 0, peer=w.header["host"], values=26 * batch * 8, tag="rows")
            w.compute(0, 0, hw_s=STEP_S, real_s=0)
            w.send(0, 0, peer="emb1", values=26 * batch * 8, tag="push")
            emb.recv(0, 0, peer=w.header["host"], values=26 * batch * 8, tag="push")
            if not shadow and (it + 1) % K == 0:
                w.compute(0, 0, 0.0, 0.0)
                w.waited(w.comm(0, 0, op="allreduce", algo="ring", values=DENSE, group="trainers"))
    out = [*ws, emb]
    if shadow:
        for k in range(trainers):
            s = rec(f"w{k + 1}-shadow", trainers + 1 + k, role="shadow")
            for _ in range(ITERS):
                s.compute(0, 0, 0.0, 0.0)
                s.waited(s.comm(0, 0, op="allreduce", algo="ring", values=DENSE, group="trainers"))
            out.append(s)
    return [(r.header, r.nodes) for r in out]


class WL:           # the fields projected_rate reads
    hogwild_workers, iterations, batch_size = 2, ITERS, 64


@pytest.mark.parametrize("mode", ["shadow", "foreground"])
def test_at_the_recorded_count_the_synthesized_job_is_the_recorded_one(mode):
    tr = job(2, mode)
    own = ss.projected_rate(project(tr, PROF), 2, WL)
    synth = ss.projected_rate(ss.project_trainers(tr, 2, PROF), 2, WL)
    assert synth == pytest.approx(own, rel=0.02)
    names = [h["host"] for h, _ in ss.synthesize_trainers(tr, 3)]
    assert names == (["projected0", "projected1", "projected2", "projected0-shadow", "projected1-shadow",
                      "projected2-shadow"] if mode == "shadow" else ["projected0", "projected1", "projected2"])


def test_shadow_trainers_scale_while_foreground_syncs_cost_more_with_more_trainers():
    tr_s, tr_f = job(2, "shadow", batch=4), job(2, "foreground", batch=4)
    per = {m: {n: ss.projected_rate(ss.project_trainers(t, n, PROF), n, WL) / n for n in (2, 16, 64)}
           for m, t in (("shadow", tr_s), ("foreground", tr_f))}
    # the workers never wait for the shadow: per-trainer rate at 64 within 10 % of 2's
    assert per["shadow"][64] > 0.9 * per["shadow"][2]
    # every k iterations the trainer blocks on an allreduce whose ring grows with the trainers
    assert per["foreground"][64] < per["foreground"][16] < per["foreground"][2]
    assert per["foreground"][2] < per["shadow"][2]


def test_one_embedding_server_bounds_the_trainers_by_its_downlink():
    """64 trainers x a 53 kB push per 50 us step is ~5x what one 100 Gb/s downlink
    carries: the projection says so (the PS link, not the sync, is the limit)."""
    tr = job(2, "shadow", batch=64)
    rate = {n: ss.projected_rate(ss.project_trainers(tr, n, PROF), n, WL) for n in (2, 64)}
    down_bytes = 26 * 64 * 8 * 4 + 26 * 64 * 8          # a push's gradients + a lookup's ids, per iteration
    link_bound = PROF["link_rate"] / 8 / down_bytes * 64 * WL.hogwild_workers      # examples/s
    assert rate[64] < 0.5 * 32 * rate[2]
    assert rate[64] == pytest.approx(link_bound, rel=0.1)


def test_servers_scaled_with_the_trainers_lift_the_embedding_link_bound():
    """project_servers_per_trainer 1/8: 64 trainers get 8 embedding PSs, each with its
    share of the tables, and the per-trainer rate stays near the 2-trainer one (one PS
    caps it at the downlink, the test above)."""
    tr = job(2, "shadow", batch=64)
    per = {n: ss.projected_rate(ss.project_trainers(tr, n, PROF, 1 / 8), n, WL) / n for n in (2, 64)}
    unscaled = ss.projected_rate(ss.project_trainers(tr, 64, PROF), 64, WL) / 64
    assert ss.projected_server_counts(tr, 2, 1 / 8) == {"embedding_ps": 1}
    assert ss.projected_server_counts(tr, 64, 1 / 8) == {"embedding_ps": 8}
    assert per[64] > 0.9 * per[2]
    assert unscaled < 0.5 * per[64]


def test_respread_gives_each_projected_server_its_share_of_the_tables():
    """3 servers at 4 trainers (0.75 per trainer): tables 0,3,..; 1,4,..; 2,5,.. = 9/9/8 of 26,
    every lookup, its rows and every push split so, and the next step waits for all replies."""
    tr = job(2, "shadow", batch=64)
    synth = ss.synthesize_trainers(tr, 4, per_trainer=0.75)
    nodes = synth[0][1]
    tables = {"emb1": 9, "emb2": 9, "emb3": 8}
    for tag, per_table in (("lookup", 64), ("rows", 64 * 8), ("push", 64 * 8)):
        got = [(n["peer"], n["values"]) for n in nodes if n["kind"] == "comm" and f":{tag}:" in n["group"]]
        assert got == [(s, t * per_table) for _ in range(ITERS) for s, t in tables.items()]
        seqs = [n["seq"] for n in nodes if n["kind"] == "comm" and n["group"] == f"p2p:{tag}:" + (
            "projected0>emb2" if tag != "rows" else "emb2>projected0")]
        assert seqs == list(range(ITERS))
    steps = [n for n in nodes if n["kind"] == "compute" and n["hw_s"] == STEP_S]
    rows = {n["id"] for n in nodes if n["kind"] == "comm" and ":rows:" in n["group"]}
    assert all(len(rows & set(n["deps"])) == 3 for n in steps)
    proj = ss.project_trainers(tr, 4, PROF, 0.75)        # every message has its modeled server
    assert proj.world == 8 and proj.messages == 4 * ITERS * 3 * 3


def easgd_job(trainers: int) -> list:
    """S-EASGD: worker 0 of each trainer (lookup, step, push), its shadow's elastic
    exchange with the sync PS (request and reply of the dense vector)."""
    world = 2 * trainers + 2
    rec = lambda name, rank, **m: TraceRecorder(None, host=name, rank=rank, world=world, tdf=400.0,  # noqa: E731
                                                 workload="shadowsync", **m)
    ws = [rec(f"w{k + 1}", k, role="worker") for k in range(trainers)]
    emb = rec("emb1", trainers, role="server", server="embedding_ps", unanswered_tags=["push"])
    sps = rec("syncps", trainers + 1, role="server", server="sync_ps")
    shs = [rec(f"w{k + 1}-shadow", trainers + 2 + k, role="shadow") for k in range(trainers)]
    for _ in range(ITERS):
        for w, s in zip(ws, shs):
            me, sh = w.header["host"], s.header["host"]
            w.send(0, 0, peer="emb1", values=26 * 64, value_bytes=8, tag="lookup")
            w.waited(w.recv(0, 0, peer="emb1", values=26 * 64 * 8, tag="rows"))
            emb.waited(emb.recv(0, 0, peer=me, values=26 * 64, value_bytes=8, tag="lookup"))
            emb.compute(0, 0, 0.0, 0.0)
            emb.send(0, 0, peer=me, values=26 * 64 * 8, tag="rows")
            w.compute(0, 0, hw_s=STEP_S, real_s=0)
            w.send(0, 0, peer="emb1", values=26 * 64 * 8, tag="push")
            emb.recv(0, 0, peer=me, values=26 * 64 * 8, tag="push")
            s.compute(0, 0, 0.0, 0.0)
            s.send(0, 0, peer="syncps", values=DENSE, tag="elastic")
            s.waited(s.recv(0, 0, peer="syncps", values=DENSE, tag="elastic_reply"))
            sps.waited(sps.recv(0, 0, peer=sh, values=DENSE, tag="elastic"))
            sps.compute(0, 0, 1e-6, 0.0)
            sps.send(0, 0, peer=sh, values=DENSE, tag="elastic_reply")
    return [(r.header, r.nodes) for r in [*ws, emb, sps, *shs]]


def test_sync_servers_are_scaled_too_each_with_its_slice_of_the_dense_vector():
    tr = easgd_job(2)
    assert ss.projected_server_counts(tr, 32, 1 / 8) == {"embedding_ps": 4, "sync_ps": 4}
    synth = ss.synthesize_trainers(tr, 32, per_trainer=1 / 8)
    shadow = next(nodes for h, nodes in synth if h["host"] == "projected0-shadow")
    el = [(n["peer"], n["values"]) for n in shadow if n["kind"] == "comm" and ":elastic:" in n["group"]]
    assert el[:4] == [(s, DENSE // 4) for s in ("syncps", "syncps2", "syncps3", "syncps4")]
    from testbed.fidelity.server_model import respread_service_models, service_models
    models = service_models(tr, 64)
    for old, shares in ss.server_plan(tr, 32, 1 / 8):
        models = respread_service_models(models, old, shares, 64)
    sync = {m.host: m for m in models if m.host.startswith("syncps")}
    assert sorted(sync) == ["syncps", "syncps2", "syncps3", "syncps4"]
    # a quarter of the vector: a quarter of the recorded 1 us per request
    assert all(m.service_s["elastic"] == pytest.approx(0.25e-6) for m in sync.values())
    assert sorted(m.rank for m in models) == list(range(64, 64 + 8))
    assert ss.project_trainers(tr, 32, PROF, 1 / 8).world == 64


def test_a_run_that_misses_a_server_is_not_respread():
    from testbed.fidelity.server_model import respread_messages
    w = TraceRecorder(None, host="w1", rank=0, world=3, tdf=1.0)
    w.send(0, 0, peer="emb1", values=10, tag="push")          # emb2 never gets its shard
    w.compute(0, 0, 1e-6, 0)
    with pytest.raises(ValueError, match="not one pattern per server"):
        respread_messages(w.nodes, ["emb1", "emb2"], {"emb1": 0.5, "emb2": 0.25, "emb3": 0.25})
