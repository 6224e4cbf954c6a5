"""ShadowSync's reproduction module (testbed/reproduce/papers/shadowsync.py): the
paper-setting projection is computed from the shared models with a fixed PS count,
shadows on their trainer's NIC and PS service time that costs time; it moves with
each assumed constant; the setting carries statuses and sources; the quick scenario
set keeps the PSs fixed; the emulated extractors pair by seed and keep valid points
only; the report is written with every field."""
from __future__ import annotations

import json

import pytest

from hosts.common.trace import parse_p2p_group
from testbed.reproduce import engine
from testbed.reproduce.papers import shadowsync as ss

pytestmark = pytest.mark.unit


@pytest.fixture
def short(monkeypatch):
    """Fewer simulated iterations (the rule is the same; the numbers move a little)."""
    monkeypatch.setattr(ss, "ITERATIONS", 3)
    ss._rate.cache_clear()
    yield
    ss._rate.cache_clear()


def test_the_setting_items_and_constants_carry_a_status_and_a_source():
    paper = engine.load_paper("shadowsync")
    assert [h.id for h in paper.headlines] == ["linear_throughput", "ne_neutral"]
    for h in paper.headlines:
        assert h.setting
        for item in h.setting:
            assert item.status in ("verified", "assumed") and item.source
        for c in h.constants:
            assert c.lo <= c.nominal <= c.hi and c.source and c.unit
    # The abstract is all the stored material holds: only the claims themselves are verified.
    verified = [i.name for h in paper.headlines for i in h.setting if i.status == "verified"]
    assert verified == ["claim", "claim"]
    lt = paper.headlines[0]
    assert {c.name for c in lt.constants} >= {"ps_request_us", "ps_row_ns", "embedding_ps"}
    assert lt.regimes and lt.profiles == ["tor-100g-host", "device:dnn-v100"]
    ne = paper.headlines[1]
    assert ne.tolerance < 0.25 and ne.emulated_applies and "null model" in ne.note


def test_the_ps_count_is_fixed_and_the_shadow_uses_its_trainers_host_name():
    small = ss.job(1, 4, 2, 1e-4, 1000)
    big = ss.job(20, 4, 2, 1e-4, 1000)
    emb = lambda tr: {str(n["peer"]) for _, nodes in tr for n in nodes  # noqa: E731
                      if n["kind"] == "comm" and str(n["peer"]).startswith("emb")}
    assert emb(small) == emb(big) == {"emb1", "emb2", "emb3", "emb4"}
    shadows = [(h, nodes) for h, nodes in big if h["role"] == "shadow"]
    assert len(shadows) == 20
    for h, nodes in shadows:
        ends = {e for n in nodes if n["kind"] == "comm" for e in parse_p2p_group(n["group"])[1:]}
        # its trainer's host name (so fabric.py puts it on the trainer's NIC) and its
        # endpoint of the one sync PS
        assert ends == {h["host"], f"syncps{h['host'][1:]}"} and not h["host"].endswith("-shadow")
        trainer = next(t for t, _ in big if t["role"] == "worker" and t["host"] == h["host"])
        assert trainer["rank"] != h["rank"]


def test_the_sync_ps_endpoints_share_one_servers_threads_and_nic():
    c = ss._nominal({})
    one = ss.services(0, 1, 4, 2, 1000, c)
    many = ss.services(0, 20, 4, 2, 1000, c)
    sync1 = [m for m in one if m.host.startswith("syncps")]
    sync20 = [m for m in many if m.host.startswith("syncps")]
    assert len(sync1) == 1 and len(sync20) == 20
    # 20 shadows on 8 threads: each endpoint's share is 20/8 of one update (or the NIC's)
    assert sync20[0].service_s["elastic"] >= 20 / 8 * sync1[0].service_s["elastic"] * 0.999
    assert len([m for m in many if m.host.startswith("emb")]) == 4


def test_the_shadow_competes_for_its_trainers_nic(short):
    """The workers never wait for the sync PS, so the shadow can slow them only through the
    NIC they share: with a NIC of its own (as synthesize_trainers gave the emulated
    shadows) S-EASGD would run exactly as fast as no sync."""
    cheap = {"ps_request_us": 1.0, "ps_row_ns": 20.0, "hogwild_workers": 1.0}
    assert ss.throughput(1, cheap, "shadow") < 0.95 * ss.throughput(1, cheap, "none")


def test_ps_service_time_costs_time_and_a_fixed_ps_count_bounds_the_trainers(short):
    assert ss.throughput(4, {"ps_row_ns": 500.0}) < 0.8 * ss.throughput(4, {"ps_row_ns": 20.0})
    eff = {n: ss.project_efficiency({}, trainers=n) for n in (2, 8, 32)}
    # above 100 % at 2 trainers: the lone trainer's shadow syncs fastest, so it takes the
    # largest share of its trainer's NIC and cores (X(1) is below no sync's)
    assert eff[32] < eff[8] < eff[2] <= 125.0
    # more serving threads per PS at the same trainer and PS counts: closer to linear
    assert ss.project_efficiency({"ps_threads": 32}, trainers=32) > 1.5 * ss.project_efficiency({"ps_threads": 1},
                                                                                                 trainers=32)


def test_the_projection_at_the_papers_setting_moves_with_each_assumed_constant(short):
    lt = engine.load_paper("shadowsync").headlines[0]
    base = lt.project({})
    assert 0 < base <= 101.0
    for c in lt.constants:
        lo, hi = lt.project({c.name: c.lo}), lt.project({c.name: c.hi})
        assert abs(hi - lo) > 0.005 * base, c.name


def _point(label, case, params, repeat, valid=True, **row):
    summary = {"valid": valid, "invalid_reasons": [] if valid else ["net too slow"], **row}
    return engine.PointResult(label, case, params, repeat, 1 + repeat, "ok", None, [summary])


def test_the_emulated_efficiency_pairs_one_and_two_trainers_by_repeat():
    pts = [_point("a", "shadow", {"topology.workers": 1, "workload.algorithm": "easgd"}, 0, hw_ex_per_s=100.0),
           _point("b", "shadow", {"topology.workers": 2, "workload.algorithm": "easgd"}, 0, hw_ex_per_s=180.0),
           _point("c", "shadow", {"topology.workers": 1, "workload.algorithm": "easgd"}, 1, hw_ex_per_s=100.0),
           _point("d", "shadow", {"topology.workers": 2, "workload.algorithm": "easgd"}, 1, False, hw_ex_per_s=1.0)]
    ev = ss.efficiency_per_seed({"throughput": engine.EmulatedRun("throughput", "x", None, pts)})
    assert ev.values == [pytest.approx(90.0)] and ev.n_points == 4
    assert any("net too slow" in r for r in ev.invalid_reasons)


def test_the_ne_ratio_pairs_shadow_and_foreground_of_one_seed():
    p = {"workload.algorithm": "easgd"}
    pts = [_point("s0", "shadow", p, 0, eval_ne=0.80), _point("f0", "foreground", p, 0, eval_ne=0.79),
           _point("s1", "shadow", p, 1, eval_ne=0.90), _point("f1", "foreground", p, 1, False, eval_ne=0.5),
           _point("s2", "shadow", p, 2, eval_ne=0.70), _point("f2", "foreground", p, 2, eval_ne=0.72)]
    ev = ss.ne_ratio_per_seed({"quality": engine.EmulatedRun("quality", "x", None, pts)})
    assert ev.values == [pytest.approx(0.80 / 0.79), pytest.approx(0.70 / 0.72)] and ev.n_points == 6


def test_the_quick_scenarios_load_with_fixed_servers():
    from testbed.results import PROJECT_ROOT
    from testbed.scenario import expand_points, load_scenario
    paper = engine.load_paper("shadowsync")
    assert engine.check_scenarios(paper, quick=True) == 12
    for sr in paper.scenarios:
        scn = load_scenario(PROJECT_ROOT / sr.path, list(engine._overrides(paper, sr, True)))
        for pt in expand_points(scn, quick=False):
            wl = pt.scenario.workload
            assert wl.embedding_servers == 1 and wl.project_servers_per_trainer is None
            assert wl.project_trainers == []


def test_the_summary_row_carries_what_the_reproduction_reads():
    from testbed.workloads.shadowsync import summary_row
    r = {"label": "S-EASGD", "trainers": 2, "hogwild_workers": 2, "embedding_servers": 1, "k": 5,
         "mode": "shadow", "examples_per_s": 10.0, "eval_ne": 0.8, "train_ne": 0.9, "avg_sync_gap": 0.3,
         "pushes_applied": 4, "pushes_sent": 4, "pushes_match": True, "device_valid": True, "valid": False,
         "ok": True, "hw_examples_per_s": 4000.0, "tdf": 400.0, "invalid_reasons": ["why"]}
    row = summary_row(r)
    assert row["hw_ex_per_s"] == 4000.0 and row["tdf"] == 400.0 and row["invalid_reasons"] == ["why"]


def test_no_emulation_writes_a_report_with_every_field(short, tmp_path, monkeypatch):
    monkeypatch.setattr(ss, "TRAINERS", 4)       # the rule, not the paper's count: fast
    rep = engine.reproduce("shadowsync", emulate=False, out=tmp_path)
    d = json.loads((rep.report_dir / "report.json").read_text())
    for h in d["headlines"]:
        for key in ("id", "claim", "paper_value", "paper_source", "setting", "projected", "envelope", "emulated",
                    "verdict", "reason"):
            assert key in h
        assert h["verdict"] in ("reproduced", "within_envelope", "not_reproduced")
    assert d["headlines"][0]["projected"] > 0


def test_s_ma_and_s_bmuf_are_projected_and_their_allreduce_shares_the_trainers_nic(short):
    """The shadows' allreduce holds their trainers' NIC links (fabric.py), so with the
    PSs cheap and the NIC the limit, S-MA at 8 trainers is below no sync at all (with
    collectives on links of their own it was exactly no sync: linear by construction);
    S-BMUF moves MA's bytes and differs from it only by its longer update on the
    trainer's host (with a nearly free update the two project alike); S-EASGD's exchange
    with the sync PS is other traffic and projects otherwise."""
    cheap = {"ps_request_us": 1.0, "ps_row_ns": 20.0, "hogwild_workers": 1.0, "ps_threads": 32.0}
    none = ss.throughput(8, cheap, "none")
    ma, bmuf = ss.throughput(8, cheap, algorithm="ma"), ss.throughput(8, cheap, algorithm="bmuf")
    easgd = ss.throughput(8, cheap, algorithm="easgd")
    assert ma < 0.95 * none
    assert abs(bmuf - ma) > 0.01 * ma
    assert abs(easgd - ma) > 0.01 * ma
    free = {**cheap, "trainer_mem_GBps": 1e9}          # the update's time ~0: only the traffic differs
    assert ss.throughput(8, free, algorithm="bmuf") == pytest.approx(ss.throughput(8, free, algorithm="ma"),
                                                                     rel=1e-6)
    shadow = next(nodes for h, nodes in ss.job(3, 2, 1, 1e-4, 1000, algorithm="ma") if h["role"] == "shadow")
    assert {(n["op"], n["group"]) for n in shadow if n["kind"] == "comm"} == {("allreduce", "trainers")}
    with pytest.raises(ValueError, match="algorithm 'sgd'"):
        ss.job(2, 2, 1, 1e-4, 1000, algorithm="sgd")


# A compute-bound point: a CPU-speed trainer (20x the V100 model) and cheap PSs, so
# neither the NIC nor the PSs hold the workers back.
COMPUTE_BOUND = {"compute_slowdown": 20.0, "ps_request_us": 1.0, "ps_row_ns": 20.0, "ps_threads": 32.0}


def test_the_shadows_update_costs_its_trainer_only_when_cores_are_scarce(short):
    """4 Hogwild workers on 4 cores: while the shadow updates, 5 threads share 4 cores and
    the workers slow (S-EASGD no longer equals no sync); with a fifth core free the
    shadow's update costs the workers nothing (testbed/fidelity/host_cpu.py)."""
    for trainers in (1, 4):
        scarce = {**COMPUTE_BOUND, "hogwild_workers": 4.0, "trainer_cores": 4.0}
        free = {**scarce, "trainer_cores": 5.0}
        assert ss.throughput(trainers, scarce) < 0.95 * ss.throughput(trainers, scarce, "none")
        assert ss.throughput(trainers, free) == pytest.approx(ss.throughput(trainers, free, "none"), rel=0.01)
        # the update's time is bytes / bandwidth: a faster stream costs the workers less
        fast = {**scarce, "trainer_mem_GBps": 20.0}
        assert ss.throughput(trainers, scarce) < ss.throughput(trainers, fast)


def test_the_foreground_sync_pays_the_same_update_on_the_critical_path(short):
    """FR-EASGD runs the same update with the workers waiting: its time is on the
    trainer's critical path, whatever the cores."""
    many = {**COMPUTE_BOUND, "trainer_cores": 40.0}
    slow, fast = ({**many, "trainer_mem_GBps": m} for m in (1.0, 20.0))
    assert ss.throughput(4, slow, "foreground") < 0.9 * ss.throughput(4, fast, "foreground")
    tr = ss.job(2, 2, 4, 1e-4, 1000, mode="foreground", k=2, iterations=4, update_s=3e-5, cores=4)
    syncs = [n for h, nodes in tr if h["role"] == "worker" for n in nodes
             if n["kind"] == "compute" and n.get("work") == {"step": "sync"}]
    assert len(syncs) == 2 * 2 and all(n["hw_s"] == 3e-5 for n in syncs)


def test_the_shadows_update_is_a_compute_node_on_its_trainers_cores():
    tr = ss.job(2, 2, 4, 1e-4, 1000, algorithm="bmuf", syncs=3, update_s=2e-5, cores=6)
    for h, nodes in tr:
        assert h.get("host_cores") == 6 if h["role"] == "worker" else "host_cores" not in h
        assert h["threads"] == (4 if h["role"] == "worker" else 1)
        if h["role"] == "shadow":
            assert [n["hw_s"] for n in nodes if n["kind"] == "compute"] == [2e-5] * 3
    from hosts.shadowsync.rules import sync_bytes
    assert [sync_bytes(a, 1000) for a in ss.ALGORITHMS] == [5 * 4000, 6 * 4000, 11 * 4000]
    assert ss.sync_update_s("ma", 1000, 10.0) == pytest.approx(6 * 4000 / 10e9)
