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
from testbed.workloads import shadowsync_projection as ssp

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
                w.compute(0, 0, 0.0, 0.0, {"step": "sync"})      # as hosts' Syncer records it
                w.waited(w.comm(0, 0, op="allreduce", algo="ring", values=DENSE, group="trainers"))
    out = [*ws, emb]
    if shadow:
        for k in range(trainers):
            s = rec(f"w{k + 1}-shadow", trainers + 1 + k, role="shadow", trainer=f"w{k + 1}")
            for _ in range(ITERS):
                s.compute(0, 0, 0.0, 0.0, {"step": "sync"})
                s.waited(s.comm(0, 0, op="allreduce", algo="ring", values=DENSE, group="trainers"))
            out.append(s)
    return [(r.header, r.nodes) for r in out]


class WL:           # the fields projected_rate reads
    hogwild_workers, iterations, batch_size = 2, ITERS, 64


@pytest.mark.parametrize("mode", ["shadow", "foreground"])
def test_at_the_recorded_count_the_synthesized_job_is_the_recorded_one(mode):
    tr = job(2, mode)
    own = ssp.projected_rate(project(ssp.shadows_on_trainer_nics(tr), PROF), 2, WL)
    synth = ssp.projected_rate(ssp.project_trainers(tr, 2, PROF), 2, WL)
    assert synth == pytest.approx(own, rel=0.02)
    names = [h["host"] for h, _ in ssp.synthesize_trainers(tr, 3)]
    assert names == (["projected0", "projected1", "projected2", "projected0-shadow", "projected1-shadow",
                      "projected2-shadow"] if mode == "shadow" else ["projected0", "projected1", "projected2"])


def test_shadow_trainers_scale_while_foreground_syncs_cost_more_with_more_trainers():
    tr_s, tr_f = job(2, "shadow", batch=4), job(2, "foreground", batch=4)
    per = {m: {n: ssp.projected_rate(ssp.project_trainers(t, n, PROF), n, WL) / n for n in (2, 16, 64)}
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
    rate = {n: ssp.projected_rate(ssp.project_trainers(tr, n, PROF), n, WL) for n in (2, 64)}
    down_bytes = 26 * 64 * 8 * 4 + 26 * 64 * 8          # a push's gradients + a lookup's ids, per iteration
    link_bound = PROF["link_rate"] / 8 / down_bytes * 64 * WL.hogwild_workers      # examples/s
    assert rate[64] < 0.5 * 32 * rate[2]
    assert rate[64] == pytest.approx(link_bound, rel=0.1)


def test_servers_scaled_with_the_trainers_lift_the_embedding_link_bound():
    """project_servers_per_trainer 1/8: 64 trainers get 8 embedding PSs, each with its
    share of the tables, and the per-trainer rate stays near the 2-trainer one (one PS
    caps it at the downlink, the test above)."""
    tr = job(2, "shadow", batch=64)
    per = {n: ssp.projected_rate(ssp.project_trainers(tr, n, PROF, 1 / 8), n, WL) / n for n in (2, 64)}
    unscaled = ssp.projected_rate(ssp.project_trainers(tr, 64, PROF), 64, WL) / 64
    assert ssp.projected_server_counts(tr, 2, 1 / 8) == {"embedding_ps": 1}
    assert ssp.projected_server_counts(tr, 64, 1 / 8) == {"embedding_ps": 8}
    assert per[64] > 0.9 * per[2]
    assert unscaled < 0.5 * per[64]


def test_respread_gives_each_projected_server_its_share_of_the_tables():
    """3 servers at 4 trainers (0.75 per trainer): tables 0,3,..; 1,4,..; 2,5,.. = 9/9/8 of 26,
    every lookup, its rows and every push split so, and the next step waits for all replies."""
    tr = job(2, "shadow", batch=64)
    synth = ssp.synthesize_trainers(tr, 4, per_trainer=0.75)
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
    proj = ssp.project_trainers(tr, 4, PROF, 0.75)        # every message has its modeled server
    assert proj.world == 8 and proj.messages == 4 * ITERS * 3 * 3


def easgd_job(trainers: int, dense: int = DENSE) -> list:
    """S-EASGD: worker 0 of each trainer (lookup, step, push), its shadow's elastic
    exchange with the sync PS (request and reply of the dense vector)."""
    world = 2 * trainers + 2
    rec = lambda name, rank, **m: TraceRecorder(None, host=name, rank=rank, world=world, tdf=400.0,  # noqa: E731
                                                 workload="shadowsync", **m)
    ws = [rec(f"w{k + 1}", k, role="worker") for k in range(trainers)]
    emb = rec("emb1", trainers, role="server", server="embedding_ps", unanswered_tags=["push"])
    sps = rec("syncps", trainers + 1, role="server", server="sync_ps")
    shs = [rec(f"w{k + 1}-shadow", trainers + 2 + k, role="shadow", trainer=f"w{k + 1}") for k in range(trainers)]
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
            s.compute(0, 0, 0.0, 0.0, {"step": "sync"})
            s.send(0, 0, peer="syncps", values=dense, tag="elastic")
            s.waited(s.recv(0, 0, peer="syncps", values=dense, tag="elastic_reply"))
            sps.waited(sps.recv(0, 0, peer=sh, values=dense, tag="elastic"))
            sps.compute(0, 0, 1e-6, 0.0)
            sps.send(0, 0, peer=sh, values=dense, tag="elastic_reply")
    return [(r.header, r.nodes) for r in [*ws, emb, sps, *shs]]


def test_sync_servers_are_scaled_too_each_with_its_slice_of_the_dense_vector():
    tr = easgd_job(2)
    assert ssp.projected_server_counts(tr, 32, 1 / 8) == {"embedding_ps": 4, "sync_ps": 4}
    synth = ssp.synthesize_trainers(tr, 32, per_trainer=1 / 8)
    shadow = next(nodes for h, nodes in synth if h["host"] == "projected0-shadow")
    el = [(n["peer"], n["values"]) for n in shadow if n["kind"] == "comm" and ":elastic:" in n["group"]]
    assert el[:4] == [(s, DENSE // 4) for s in ("syncps", "syncps2", "syncps3", "syncps4")]
    from testbed.fidelity.server_model import respread_service_models, service_models
    models = service_models(tr, 64)
    for old, shares in ssp.server_plan(tr, 32, 1 / 8):
        models = respread_service_models(models, old, shares, 64)
    sync = {m.host: m for m in models if m.host.startswith("syncps")}
    assert sorted(sync) == ["syncps", "syncps2", "syncps3", "syncps4"]
    # a quarter of the vector: a quarter of the recorded 1 us per request
    assert all(m.service_s["elastic"] == pytest.approx(0.25e-6) for m in sync.values())
    assert sorted(m.rank for m in models) == list(range(64, 64 + 8))
    assert ssp.project_trainers(tr, 32, PROF, 1 / 8).world == 64


def test_a_run_that_misses_a_server_is_not_respread():
    from testbed.fidelity.server_model import respread_messages
    w = TraceRecorder(None, host="w1", rank=0, world=3, tdf=1.0)
    w.send(0, 0, peer="emb1", values=10, tag="push")          # emb2 never gets its shard
    w.compute(0, 0, 1e-6, 0)
    with pytest.raises(ValueError, match="not one pattern per server"):
        respread_messages(w.nodes, ["emb1", "emb2"], {"emb1": 0.5, "emb2": 0.25, "emb3": 0.25})


def test_the_shadow_shares_its_trainers_nic_in_the_projection():
    """S-EASGD with a 2 M-value dense vector (8 MB each way per sync, ~0.7 ms on a
    100 Gb/s link against a 50 us step): the shadow's exchange queues on its trainer's
    links with the lookups, so the workers are slower than with a tiny vector. With a
    NIC of its own (synthesize_trainers before: host `<host>-shadow`) they ran alike."""
    synth = ssp.synthesize_trainers(easgd_job(2), 4)
    shadows = [h for h, _ in synth if h["role"] == "shadow"]
    assert [(h["host"], h["nic"]) for h in shadows] == [(f"projected{r}-shadow", f"projected{r}") for r in range(4)]
    big = ssp.projected_rate(ssp.project_trainers(easgd_job(2, dense=2_000_000), 4, PROF), 4, WL)
    small = ssp.projected_rate(ssp.project_trainers(easgd_job(2, dense=10), 4, PROF), 4, WL)
    assert big < 0.8 * small


def test_the_shadows_update_costs_its_trainer_when_no_core_is_free():
    """The per-point projections charge each sync's update (trainer_host) on the trainer's
    cores: 2 Hogwild workers on 2 cores slow while the shadow updates; with a third core
    free they run as without the charge."""
    tr = easgd_job(2)
    rate = lambda host: ssp.projected_rate(ssp.project_trainers(tr, 4, PROF, hogwild=2, host=host), 4, WL)  # noqa: E731
    free, scarce = rate(ssp.TrainerHost(3, 40e-6)), rate(ssp.TrainerHost(2, 40e-6))
    assert free == pytest.approx(rate(ssp.TrainerHost(100, 40e-6)), rel=1e-9)
    assert scarce < 0.95 * free
    synth = ssp.on_trainer_hosts(ssp.synthesize_trainers(tr, 4, hogwild=2), ssp.TrainerHost(2, 40e-6), 2)
    for h, nodes in synth:
        assert (h.get("host_cores"), h["threads"]) == ((2, 2) if h["role"] == "worker" else (None, 1))
        sync = [n["hw_s"] for n in nodes if n["kind"] == "compute" and n.get("work") == {"step": "sync"}]
        assert sync == ([40e-6] * ITERS if h["role"] == "shadow" else [])


def test_the_foreground_sync_pays_its_update_with_the_workers_waiting():
    tr = job(2, "foreground")
    rate = lambda host: ssp.projected_rate(ssp.project_trainers(tr, 4, PROF, hogwild=2, host=host), 4, WL)  # noqa: E731
    # ITERS / K foreground syncs of 100 us each on the critical path (some of it hidden
    # behind the allreduce's wait for the last trainer), whatever the cores
    slow, base = rate(ssp.TrainerHost(8, 100e-6)), rate(ssp.TrainerHost(8, 0.0))
    span = lambda r: 4 * 2 * ITERS * 64 / r  # noqa: E731
    assert 0.8 * ITERS / K * 100e-6 < span(slow) - span(base) <= 1.01 * ITERS / K * 100e-6
    assert rate(ssp.TrainerHost(2, 100e-6)) == pytest.approx(slow, rel=1e-9)


def test_the_workloads_trainer_host_counts_the_algorithms_passes():
    wl = ss.ShadowSyncWorkload(algorithm="bmuf", hogwild_workers=3)
    h = ssp.trainer_host(wl)
    assert h.cores == 3 and h.update_s == pytest.approx(11 * 4 * ss.dense_values(wl) / 10e9)
    wl = ss.ShadowSyncWorkload(algorithm="ma", trainer_cores=8, trainer_mem_GBps=5.0)
    assert ssp.trainer_host(wl) == (8, pytest.approx(6 * 4 * ss.dense_values(wl) / 5e9))
    assert ssp.trainer_host(ss.ShadowSyncWorkload(algorithm="none")).update_s == 0.0


def test_the_recorded_shadows_are_put_on_their_trainers_nics():
    tr = ssp.shadows_on_trainer_nics(easgd_job(2))
    assert {h["host"]: h.get("nic") for h, _ in tr if h["role"] == "shadow"} == {"w1-shadow": "w1",
                                                                                 "w2-shadow": "w2"}
    assert all("nic" not in h for h, _ in tr if h["role"] != "shadow")
    h, nodes = easgd_job(2)[-1]
    with pytest.raises(ValueError, match="names no trainer"):
        ssp.shadows_on_trainer_nics([({k: v for k, v in h.items() if k != "trainer"}, nodes)])


class _Cost:        # shaped as measurements.shadowsync_ps.PsCost
    def __init__(self, fixed_s, per_unit_s):
        self.fixed_s, self.per_unit_s = fixed_s, per_unit_s

    def seconds(self, units):
        return self.fixed_s + self.per_unit_s * units


def test_ps_costs_charge_every_hogwild_workers_requests():
    """100 us per request, nothing per row, 2 Hogwild workers: one embedding PS serving
    16 trainers' lookups and pushes is the bound, 16 x 2 requests x 2 workers x 100 us
    per round of every trainer's iteration (16 x 2 x 64 examples), so the job makes
    batch / (2 x 100 us) examples/s whatever the trainer count. Without costs (the recorded ~0) it is far faster."""
    tr = easgd_job(2)
    costs = ssp.PsCosts(_Cost(100e-6, 0.0), _Cost(100e-6, 0.0), _Cost(0.0, 0.0), hogwild=2, dim=8)
    rate = ssp.projected_rate(ssp.project_trainers(tr, 16, PROF, None, costs), 16, WL)
    assert rate == pytest.approx(16 * 2 * 64 / (16 * 2 * 2 * 100e-6), rel=0.05)
    free = ssp.projected_rate(ssp.project_trainers(tr, 16, PROF), 16, WL)
    assert free > 3 * rate
    # per row: a lookup's rows are its ids, a push's its values / dim; ELASTIC per value
    c = ssp.PsCosts(_Cost(0.0, 1e-9), _Cost(0.0, 1e-9), _Cost(1e-6, 1e-9), hogwild=3, dim=8)
    assert c.request_s("lookup", 1000) == pytest.approx(3e-6)
    assert c.request_s("push", 8000) == pytest.approx(3e-6)
    assert c.request_s("elastic", 1000) == pytest.approx(2e-6)
    with pytest.raises(ValueError, match="no measured cost"):
        c.request_s("agree", 1)


def test_the_untraced_hogwild_workers_bytes_cross_the_links():
    """hogwild 2: the template's LOOKUPs, rows and PUSHes carry both workers' values (the
    shadow's allreduces and ELASTIC are one per trainer, unchanged); one embedding PS's
    downlink then bounds 64 trainers at half the examples/s of the one-worker traffic,
    and PsCosts charges a merged message as 2 requests of half its values, so the
    service time equals the unmerged projection's."""
    tr = job(2, "shadow", batch=64)
    one, two = (ssp.synthesize_trainers(tr, 4, hogwild=h)[0][1] for h in (1, 2))
    for a, b in zip(one, two, strict=True):
        emb = a["kind"] == "comm" and a["algo"] == "p2p" and "emb" in a["group"]
        assert b["values"] == (2 * a["values"] if emb else a.get("values")) if a["kind"] == "comm" else b == a
    down_bytes = 26 * 64 * 8 * 4 + 26 * 64 * 8          # a push's gradients + a lookup's ids, per worker iteration
    link_bound = PROF["link_rate"] / 8 / (2 * down_bytes) * 64 * WL.hogwild_workers
    rate = ssp.projected_rate(ssp.project_trainers(tr, 64, PROF, hogwild=2), 64, WL)
    assert rate == pytest.approx(link_bound, rel=0.1)
    # the PS's service: 2 requests per merged message, each of the unmerged size
    costs = ssp.PsCosts(_Cost(10e-6, 1e-8), _Cost(10e-6, 1e-8), _Cost(0.0, 0.0), hogwild=2, dim=8)
    from testbed.fidelity.server_model import service_models
    synth = {h: ssp.synthesize_trainers(tr, 4, hogwild=h) for h in (1, 2)}
    served = {h: costs.apply(service_models(tr, 8), synth[h], {"emb1"}, merged=h) for h in (1, 2)}
    by = {h: next(m for m in served[h] if m.host == "emb1").service_s for h in (1, 2)}
    assert by[1] == pytest.approx(by[2])
    with pytest.raises(ValueError, match="merged 3"):
        costs.apply(service_models(tr, 8), synth[2], {"emb1"}, merged=3)
    with pytest.raises(ValueError, match="hogwild 3"):
        ssp.project_trainers(tr, 4, PROF, None, costs, hogwild=3)


def test_the_measured_ps_costs_are_loaded_with_their_source():
    from testbed.reproduce.measurements import shadowsync_ps as m

    class _WL:
        hogwild_workers = 2

        class model:
            dim = 8
    costs = ssp.measured_ps_costs(_WL)
    for c in (costs.lookup, costs.push, costs.elastic):
        assert 1e-6 < c.fixed_s < 5e-3 and 0 < c.per_unit_s < 1e-6
        assert "shadowsync_ps_" in c.source and "python -m testbed.reproduce.measurements.shadowsync_ps" in c.source
    data = m.load()
    assert data["date"] and all(f["max_rel_residual"] < 0.5 for fits in data["fits"].values()
                                for f in fits.values())
    _WL.model.dim = 5
    with pytest.raises(m.PsCostError, match="not dim 5"):
        ssp.measured_ps_costs(_WL)


def test_the_ps_microbenchmark_runs_the_servers_own_request_loop():
    from testbed.reproduce.measurements import shadowsync_ps as m
    for op in ("lookup", "push"):
        assert 1e-6 < m._run(op, 8, 8, "workload", 5) < 0.5
    assert 1e-6 < m._run("elastic", 0, 8, "workload", 5) < 0.5


def test_the_points_projections_charge_the_workloads_trainer_host(tmp_path):
    """fidelity_records: every shadowsync_projection record names the trainer host it
    charged (trainer_cores: null = hogwild_workers; the update of the workload's own
    dense vector at trainer_mem_GBps). (Here the measured Python PS bounds the rate, so
    the cores do not move it: test_the_shadows_update_costs_its_trainer_when_no_core_is_free.)"""
    from testbed.workloads.shadowsync import ShadowSyncWorkload
    from testbed.workloads.shadowsync_projection import fidelity_records

    def run(cores):
        for h, nodes in easgd_job(2):
            rec = TraceRecorder(str(tmp_path / f"{h['host']}.trace.jsonl"), **{k: v for k, v in h.items()
                                                                               if k not in ("type", "schema")})
            rec.nodes.extend(nodes)
            rec.close()
        wl = ShadowSyncWorkload(project_trainers=[4], hogwild_workers=2, iterations=ITERS, batch_size=64,
                                trainer_cores=cores, trainer_mem_GBps=0.5)

        class Scn:
            workload = wl
        summary = {"trainers": 2, "tdf": 400.0, "device_valid": True, "device_violations": 0, "label": "S-EASGD",
                   "hw_examples_per_s": 1e6}
        recs = [r for r in fidelity_records(Scn, tmp_path, summary) if r["type"] == "shadowsync_projection"]
        assert [r["trainers"] for r in recs] == [2, 4] and all("error" not in r for r in recs)
        return recs
    scarce, free = run(None), run(3)
    update = 5 * 4 * ss.dense_values(ShadowSyncWorkload()) / 0.5e9
    assert [(r["trainer_cores"], r["sync_update_s"]) for r in scarce] == [(2, pytest.approx(update))] * 2
    assert [r["trainer_cores"] for r in free] == [3, 3]
    assert all(r["hw_examples_per_s"] > 0 for r in scarce + free)
