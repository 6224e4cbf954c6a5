"""P4SGD workload: params validation, host programs per collective, the worker
program in-process (exact against the numerical core), collect/summarize and
figures on synthetic outputs. No sockets."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from hosts import p4sgd as prog
from hosts.common.config import ConfigError
from hosts.common.results import JsonlWriter
from hosts.glm.datasets import load_dataset
from hosts.glm.training import (LocalAllreduceGroup, evaluate, simulate_data_parallel,
                                simulate_model_parallel)
from testbed import results as res
from testbed.scenario import ScenarioError, expand_points, load_scenario, load_scenario_text
from testbed.workloads.base import PointContext
from testbed.workloads.p4sgd import (FIGURES, P4sgdRuntime, collect_point, ina_settings,
                                     summary_row, time_to_target)

ROOT = Path(__file__).resolve().parents[2]
TINY = {"source": "synthetic", "kind": "dense", "samples": 96, "features": 40, "seed": 3}


def scenario(workload: str = "", workers: int = 2, extra: str = ""):
    """A scenario with a tiny dataset; `workload` is YAML flow text overriding fields."""
    wl = {"kind": "p4sgd", "dataset": dict(TINY), "batch": 16, "micro_batch": 4, "epochs": 1,
          "snapshot_every": 2}
    wl.update(yaml.safe_load("{" + workload + "}") or {})
    text = f"name: t\ntopology: {{workers: {workers}}}\nworkload: {json.dumps(wl)}\n{extra}"
    return load_scenario_text(text, "t.yaml")


# ----------------------------------------------------------------- params model
def test_defaults_and_derived_values():
    wl = scenario().workload
    # time_scale auto (the default): calibrated on the network, starting from 500.
    assert (wl.mode, wl.collective, wl.device, wl.dilation) == ("model_parallel", "switch", "u280", 500.0)
    assert wl.calibrated and wl.device_spec() == {"type": "u280", "time_scale": 500.0}
    fixed = scenario("time_scale: 250").workload
    assert not fixed.calibrated and fixed.dilation == 250.0
    assert wl.dataset_spec()["model"] == "logreg"          # labels follow the GLM
    cpu = scenario("device: cpu, glm: svm").workload
    assert cpu.dilation == 1.0 and cpu.device_spec() == {"type": "cpu"}
    assert cpu.dataset_spec()["model"] == "svm"
    assert scenario("collective: ps").hosts() == ["w1", "w2", "ps"]
    assert scenario("collective: ring").hosts() == ["w1", "w2"]


@pytest.mark.parametrize("bad, message", [
    ("dataset: {source: foo}", "dataset.source must be one of"),
    ("dataset: {source: synthetic, sampels: 3}", "unknown dataset keys ['sampels']"),
    ("dataset: {source: synthetic, density: 2}", "density must be in (0, 1]"),
    ("dataset: {source: libsvm, path: no/such/file.svm}", "does not exist"),
    ("dataset: {source: builtin, name: mnist}", "unknown builtin dataset"),
    ("dataset: {source: profile, name: mnist}", "unknown dataset profile 'mnist'; known: avazu"),
    ("dataset: {source: profile, name: rcv1, samples: 0}", "dataset.samples must be a positive integer"),
    ("dataset: {source: profile, name: rcv1, features: 99999}", "exceeds rcv1's 47,236 features"),
    ("dataset: {source: profile, name: rcv1, kind: sparse}", "unknown dataset keys ['kind'] for source profile"),
    ("dataset: {source: profile, name: rcv1, noise: 0.7}", "must be <= 0.5"),   # glm logreg: a flip share
    ("dataset: {source: profile, name: rcv1}, xrt: {dry_run: true}", "profile rcv1 is sparse"),
    ("micro_batch: 32", "micro_batch 32 > batch 16"),
    ("device: cpu, time_scale: 50", "leave time_scale null"),
    ("device_options: {hbm_efficency: 0.5}", "device_options: bad parameters"),
    ("collective: nccl", "workload.collective"),
    ("pipeline_depth: 0", "workload.pipeline_depth"),
    ("lr: -1", "workload.lr"),
])
def test_invalid_params_are_reported_with_the_field(bad, message):
    with pytest.raises(ScenarioError) as e:
        scenario(bad)
    assert message in str(e.value)


def test_profile_dataset_spec_and_width():
    """A `source: profile` set: labels follow the GLM, the width is known without generating it,
    and the hosts' loader builds exactly the validated shape."""
    from testbed.workloads.p4sgd import n_features  # noqa: PLC0415
    wl = scenario("glm: linreg, dataset: {source: profile, name: criteo, samples: 64, noise: 0.7}").workload
    assert wl.dataset_spec() == {"source": "profile", "name": "criteo", "samples": 64, "noise": 0.7,
                                 "model": "linreg"}     # linreg: noise is a standard deviation
    assert n_features(wl) == 1_000_000
    from testbed.plots.captions import dataset_text  # noqa: PLC0415
    assert dataset_text(wl.dataset_spec()) == "criteo-shaped synthetic 64 x 1,000,000"
    assert dataset_text({"source": "profile", "name": "gone"}).startswith("profile gone (unknown dataset profile")
    ds = load_dataset(wl.dataset_spec())
    assert ds.X.shape == (64, 1_000_000) and len(np.unique(ds.y)) > 2


def test_figure_names_are_known_to_the_schema():
    scn = scenario(extra=f"figures: [{', '.join(FIGURES)}]\n")
    assert scn.figures == list(FIGURES)
    with pytest.raises(ScenarioError, match="unknown figure 'p4sgd_nope'"):
        scenario(extra="figures: [p4sgd_nope]\n")


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios" / "p4sgd").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenarios_load_and_expand(path):
    scn = load_scenario(path)
    assert scn.description and scn.figures
    assert expand_points(scn) and expand_points(scn, quick=True)
    assert len(expand_points(scn, quick=True)) <= len(expand_points(scn))


# ----------------------------------------------------------------- host programs
def _ctx(scn, tmp_path, switch=None, net_mode="local"):
    point = expand_points(scn)[0]
    hosts = {h: SimpleNamespace(name=h, ip=f"127.0.1.{200 if h == 'ps' else int(h[1:])}", mac=None)
             for h in point.scenario.hosts()}
    return PointContext(point=point, hosts=hosts, work_dir=tmp_path, net_mode=net_mode,
                        start_at=1000.0, switch=switch or {})


def _configs(progs):
    return {p.host: json.loads(Path(p.argv[-1]).read_text()) for p in progs}


@pytest.mark.parametrize("collective", ["ring", "ps", "switch"])
def test_programs_per_collective_parse_as_host_configs(tmp_path, collective):
    scn = scenario(f"collective: {collective}", workers=3,
                   extra="stragglers: [{host: w2, slowdown: 2.0, delay_ms: 1}]\n")
    switch = {"ip": "10.0.0.254", "mac": "02:00:00:00:00:fe", "ina_port": 23040, "job_id": 7,
              "workers": {"w3": {"switch_port": 40003}}} if collective == "switch" else None
    progs = P4sgdRuntime().programs(_ctx(scn, tmp_path, switch, "mininet"))
    hosts = [p.host for p in progs]
    assert hosts == (["ps", "w1", "w2", "w3"] if collective == "ps" else ["w1", "w2", "w3"])
    if collective == "ps":
        assert progs[0].phase < progs[1].phase           # the PS listens before workers connect
    for p in progs:
        assert p.argv[1:3] == ["-m", "hosts.p4sgd"]
    cfgs = _configs(progs)
    parsed = {h: prog.P4sgdConfig.from_json(c) for h, c in cfgs.items()}  # the host-side contract
    w2 = parsed["w2"]
    assert (w2.rank, w2.world, w2.collective, w2.start_at) == (1, 3, collective, 1000.0)
    assert w2.straggler.slowdown == 2.0 and parsed["w1"].straggler is None
    assert w2.device == {"type": "u280", "time_scale": 500.0}
    # Calibration carries the hardware time of the workload's own allreduce.
    assert w2.calibration["hw_op_s"] > 0 and w2.calibration["rounds"] == 3
    assert w2.trace.endswith("w2.trace.jsonl") and parsed.get("ps") is None or parsed["ps"].trace is None
    if collective == "switch":
        assert (w2.ina.switch_ip, w2.ina.switch_port, w2.ina.job_id) == ("10.0.0.254", 23040, 7)
        assert parsed["w3"].ina.switch_port == 40003     # per-host endpoint override
    else:
        assert w2.ina is None
    if collective == "ps":
        assert parsed["ps"].role == "ps" and w2.ps.ip == "127.0.1.200"


def test_switch_without_a_switch_is_skipped_loudly(tmp_path):
    from testbed.runner import SkipPoint
    with pytest.raises(SkipPoint, match="needs the in-network switch"):
        P4sgdRuntime().programs(_ctx(scenario("collective: switch"), tmp_path))


def test_data_parallel_batch_must_split_over_workers(tmp_path):
    scn = scenario("mode: data_parallel, collective: ring", workers=3)
    with pytest.raises(ValueError, match="multiple of 3"):
        P4sgdRuntime().programs(_ctx(scn, tmp_path))


def test_ina_settings_mapping():
    info = {"ip": "10.0.0.254", "mac": "aa:bb:cc:dd:ee:ff", "switches": ["s1"], "backend": "soft",
            "port": 1, "ina_port": 23041, "ina": {"window": 32},
            "workers": {"w1": {"worker_port": 5000}}}
    assert ina_settings(info, "w1") == {"switch_ip": "10.0.0.254", "switch_mac": "aa:bb:cc:dd:ee:ff",
                                        "switch_port": 23041, "window": 32, "worker_port": 5000}
    assert "worker_port" not in ina_settings(info, "w2")


# ----------------------------------------------------------------- the host config
def _cfg(tmp_path, rank=0, world=2, **over):
    peers = [{"name": f"w{r + 1}", "ip": f"127.0.1.{r + 1}"} for r in range(world)]
    c = {"host": f"w{rank + 1}", "role": "worker", "rank": rank, "world": world,
         "mode": "model_parallel", "glm": "logreg", "l2": 0.01, "lr": 2.0, "batch": 16,
         "micro_batch": 4, "epochs": 2, "pipeline_depth": 2, "seed": 5, "dataset": dict(TINY, model="logreg"),
         "balance": "auto", "collective": "ring", "peers": peers, "ps": None, "port": 47400,
         "fixed_point_exp": 16, "device": {"type": "cpu"}, "snapshot_every": 3, "straggler": None,
         "start_at": None, "connect_timeout_s": 5, "timeout_s": 5, "trace": None, "calibration": None,
         "out": str(tmp_path / f"w{rank + 1}.jsonl")}
    c.update(over)
    return c


def test_host_config_rejects_problems_all_at_once(tmp_path):
    c = _cfg(tmp_path, mode="data_parallel", world=3, micro_batch=64, bogus=1)
    c["peers"] = c["peers"][:2]
    with pytest.raises(ConfigError) as e:
        prog.P4sgdConfig.from_json(c)
    text = str(e.value)
    for part in ("micro_batch: 64 > batch 16", "not a multiple of world 3", "peers: has 2 entries",
                 "bogus: unknown key"):
        assert part in text
    with pytest.raises(ConfigError, match="ina: only used by collective"):
        prog.P4sgdConfig.from_json(_cfg(tmp_path, ina={"job_id": 2}))


def test_allreduce_schedule_matches_what_workers_issue(tmp_path):
    cfg = prog.P4sgdConfig.from_json(_cfg(tmp_path, batch=10, micro_batch=4, epochs=2))
    sched = prog.allreduce_schedule(cfg, n_samples=25, n_features=40)
    # mini-batches 10, 10, 5 -> micro 4,4,2 | 4,4,2 | 4,1, twice
    assert [s for s, _ in sched] == [4, 4, 2, 4, 4, 2, 4, 1] * 2
    assert sum(last for _, last in sched) == 6
    dp = prog.P4sgdConfig.from_json(_cfg(tmp_path, mode="data_parallel", batch=10))
    assert prog.allreduce_schedule(dp, 25, 40) == [(40, True)] * 6


def test_out_paths_sit_next_to_the_jsonl(tmp_path):
    assert prog.out_paths(tmp_path / "w1.jsonl") == (tmp_path / "w1.snapshots.npy", tmp_path / "w1.model.npy")


# ----------------------------------------------------------------- worker, in-process
def _local_comm(group, rank):
    ep = group.endpoint(rank)
    return prog.Comm(ep, barrier=lambda: None, close=lambda: None, latency=lambda h, s: None,
                     blocking=False)


def run_workers(tmp_path, world, **over) -> list[dict]:
    """Run `world` Worker objects in threads over an exact in-process allreduce."""
    group = LocalAllreduceGroup(world, timeout_s=30)
    rcs, errors = [None] * world, []

    def one(rank):
        try:
            cfg = prog.P4sgdConfig.from_json(_cfg(tmp_path, rank, world, **over))
            w = JsonlWriter(cfg.out)
            try:
                rcs[rank] = prog.Worker(cfg, w).run(_local_comm(group, rank))
            finally:
                w.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    assert rcs == [0] * world
    return [res.read_jsonl(tmp_path / f"w{r + 1}.jsonl") for r in range(world)]


def test_model_parallel_worker_matches_the_numerical_core(tmp_path):
    out = run_workers(tmp_path, 3, pipeline_depth=2)
    x = np.concatenate([np.load(tmp_path / f"w{r}.model.npy") for r in (1, 2, 3)])
    ds = load_dataset(dict(TINY, model="logreg"))
    from hosts.glm.models import get_model
    ref, _ = simulate_model_parallel(ds, 3, get_model("logreg", 0.01), 2.0, 16, 4, 2, 5, eval_every=0)
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-12)
    sums = [next(r for r in o if r["type"] == "summary") for o in out]
    assert len({s["digest"] for s in sums}) == 1          # identical sums everywhere
    assert sums[0]["iterations"] == 2 * 6 and sums[0]["allreduces"] == 2 * 6 * 4
    iters = [r for r in out[0] if r["type"] == "iter"]
    assert len(iters) == 12 and all(len(r["allreduce_s"]) == 4 for r in iters)
    snaps = [r for r in out[0] if r["type"] == "snapshot"]
    assert [s["iter"] for s in snaps] == [0, 3, 6, 9, 12]
    assert np.load(tmp_path / "w1.snapshots.npy").shape == (5, sums[0]["part"][1])
    assert next(r for r in out[0] if r["type"] == "validity")["valid"] is True


def test_data_parallel_worker_matches_the_numerical_core(tmp_path):
    run_workers(tmp_path, 2, mode="data_parallel", batch=16)
    x1, x2 = np.load(tmp_path / "w1.model.npy"), np.load(tmp_path / "w2.model.npy")
    assert np.array_equal(x1, x2)                          # replicas stay identical
    ds = load_dataset(dict(TINY, model="logreg"))
    from hosts.glm.models import get_model
    ref, _ = simulate_data_parallel(ds, 2, get_model("logreg", 0.01), 2.0, 8, 2, 5, eval_every=0)
    np.testing.assert_allclose(x1, ref, rtol=0, atol=1e-12)


def test_straggler_slows_modeled_compute_and_stalls(tmp_path):
    dev = {"type": "u280", "time_scale": 2000.0}
    base = run_workers(tmp_path / "a", 2, device=dev, epochs=1)
    slow = run_workers(tmp_path / "b", 2, device=dev, epochs=1,
                       straggler={"start_s": 0.0, "slowdown": 3.0, "delay_ms": 2.0})
    c_base = next(r for r in base[0] if r["type"] == "summary")["compute_s"]
    c_slow = next(r for r in slow[0] if r["type"] == "summary")["compute_s"]
    assert c_slow > 2.0 * c_base
    assert all(r["stall_s"] >= 0.0019 for r in slow[0] if r["type"] == "iter")


def test_device_validity_tolerates_rare_overshoot_but_flags_systematic():
    from hosts.glm.devices import U280Device
    wd = prog.WorkerDevice(U280Device(time_scale=1.0), None)
    wd.device.steps, wd.device.violations = 1000, 10
    wd.device.real_s_total, wd.device.modeled_s_total = 0.1, 1.0
    assert prog.device_validity("w1", wd, 1.0)["valid"] is True
    wd.device.violations = 600
    v = prog.device_validity("w1", wd, 1.0)
    assert v["valid"] is False and "raise workload.time_scale" in v["reason"]
    assert v["excess_s"] == 0.0 and v["excess_share"] == 0.0


def test_worker_device_accumulates_time_over_the_model():
    from hosts.glm.devices import U280Device
    wd = prog.WorkerDevice(U280Device(time_scale=1e-6), None)   # modeled ~1e-12 s: always over
    wd.run(lambda: sum(range(2000)), 8, 64)
    v = prog.device_validity("w1", wd, 1e-6)
    assert v["violations"] == 1 and v["excess_s"] > 0 and v["excess_share"] > 1


# ----------------------------------------------------------------- collect / summarize
def test_collect_assembles_snapshots_and_summarizes(tmp_path):
    run_workers(tmp_path, 2, epochs=2)
    scn = scenario("collective: ring, lr: 2.0, l2: 0.01, batch: 16, micro_batch: 4, epochs: 2, "
                   "snapshot_every: 3, seed: 5, device: cpu, target_loss: 0.68")
    records = collect_point(scn, tmp_path)
    types = [r["type"] for r in records]
    assert types.count("validity") == 2 and types.count("p4sgd_iter") == 24
    assert types.count("p4sgd_curve") == 5 and types[-1] == "p4sgd_summary"
    curve = [r for r in records if r["type"] == "p4sgd_curve"]
    assert curve[0]["loss"] == pytest.approx(np.log(2))    # x = 0 before training
    assert [c["iter"] for c in curve] == [0, 3, 6, 9, 12]
    assert all(b["t_s"] >= a["t_s"] for a, b in zip(curve, curve[1:]))
    ds = load_dataset(dict(TINY, model="logreg"))
    x = np.load(tmp_path / "model.npy")
    assert curve[-1]["loss"] == pytest.approx(evaluate(ds, x, "logreg")["loss"])
    s = records[-1]
    assert s["all_correct"] is True and s["ok"] is True and s["workers"] == 2
    assert s["samples"] == 2 * 96 and s["throughput_sps"] == pytest.approx(s["samples"] / s["train_s"])
    assert 0 <= s["comm_share"] <= 1 and s["final_loss"] == curve[-1]["loss"]
    assert s["time_to_target_s"] == time_to_target(curve, 0.68)
    row = summary_row(s)
    assert row["all_correct"] is True and row["workers"] == 2
    # What the emulation cost: workers' CPU while training, share of the machine's cores.
    assert s["host_cpu_s"] > 0 and s["cores"] >= 1
    assert s["host_cpu_load"] == pytest.approx(s["host_cpu_s"] / (s["train_s"] * s["cores"]))
    assert s["compute_ms_mean"] >= 0 and s["comm_ms_mean"] >= 0
    assert s["switch_cpu_s"] is None                          # no switch_stats.json here
    assert s["hw_allreduce_s"] == pytest.approx(2e-6 + 4 * 4 / 12.5e9)   # micro_batch 4 values


def test_collect_reads_switch_cpu_and_data_parallel_has_no_hidden_share(tmp_path):
    run_workers(tmp_path, 2, mode="data_parallel", batch=16, epochs=1)
    (tmp_path / "switch_stats.json").write_text(json.dumps(
        {"s1": {"cpu_time_s": 0.5, "wall_time_s": 4.0, "runqueue_wait_s": 0.1, "pipeline": {}}}))
    scn = scenario("collective: ring, mode: data_parallel, lr: 2.0, l2: 0.01, batch: 16, "
                   "micro_batch: 4, seed: 5, device: cpu")
    s = collect_point(scn, tmp_path)[-1]
    assert (s["switch_cpu_s"], s["switch_wall_s"], s["switch_runqueue_wait_s"]) == (0.5, 4.0, 0.1)
    assert s["hidden_share"] is None                         # blocks on every gradient allreduce
    # A gradient allreduce of D = 40 floats on hardware: round trip + line rate.
    assert s["hw_allreduce_s"] == pytest.approx(2e-6 + 4 * 40 / 12.5e9)
    assert s["network_slowdown_vs_hw"] > 0


def test_collect_flags_disagreeing_workers(tmp_path):
    run_workers(tmp_path, 2, epochs=1)
    lines = (tmp_path / "w2.jsonl").read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), "digest": "0000"})
    (tmp_path / "w2.jsonl").write_text("\n".join(lines) + "\n")
    scn = scenario("collective: ring, lr: 2.0, l2: 0.01, batch: 16, micro_batch: 4, seed: 5, device: cpu")
    assert collect_point(scn, tmp_path)[-1]["all_correct"] is False


def test_summary_hidden_share_and_time_to_target():
    curve = [{"t_s": 0.0, "loss": 0.7}, {"t_s": 1.0, "loss": 0.5}, {"t_s": 2.0, "loss": 0.3}]
    # Smoothed (trailing mean over 5 points): 0.7, 0.6, 0.5 -> reaches 0.6 at t=1, 0.5 at t=2.
    assert time_to_target(curve, 0.6) == 1.0 and time_to_target(curve, 0.5) == 2.0
    assert time_to_target(curve, 0.1) is None
    assert time_to_target(curve, None) is None


# ----------------------------------------------------------------- figures
def _fake_run(tmp_path: Path) -> Path:
    """A results folder whose points are real collect() outputs of in-process runs."""
    run_dir = res.new_run_dir("p4sgd-fake", tmp_path)
    manifest = {"status": "ok", "net": "local", "machine": {"cpus": 2}, "git": {"commit": "abc"},
                "scenario": {"name": "p4sgd-fake", "topology": {"workers": 2, "kind": "star"},
                             "switch": {"backend": "soft"}, "figures": list(FIGURES)}}
    res.write_json(run_dir / "manifest.json", manifest)
    variants = [("base", {"topology.workers": 1}, 1, {}), ("base", {"topology.workers": 2}, 2, {}),
                ("slow", {}, 2, {"straggler": {"start_s": 0.0, "slowdown": 2.0, "delay_ms": 1.0}})]
    for idx, (case, params, world, over) in enumerate(variants):
        work = tmp_path / f"p{idx}"
        work.mkdir()
        run_workers(work, world, epochs=1, **over)
        scn = scenario("collective: ring, lr: 2.0, l2: 0.01, batch: 16, micro_batch: 4, seed: 5, "
                       "device: cpu, target_loss: 0.69", workers=world)
        res.append_jsonl(run_dir / "points.jsonl", {"index": idx, "label": f"{idx}", "case": case,
                                                    "status": "ok", "impairments": []})
        for r in collect_point(scn, work):
            res.append_jsonl(run_dir / "metrics.jsonl", {"point": idx, "case": case, **params, **r})
    return run_dir


def test_all_p4sgd_figures_render(tmp_path):
    from testbed.plots import draw_figures
    run = res.load_run(_fake_run(tmp_path))
    paths = draw_figures(run)
    assert sorted(p.name for p in paths) == sorted(f"{n}.{e}" for n in FIGURES for e in ("png", "pdf"))
    assert all(p.stat().st_size > 1000 for p in paths)


def test_a_calibration_that_would_not_fit_the_deadline_is_refused_on_every_worker(tmp_path):
    """A TDF at which the run's iterations would take longer than the point's deadline
    leaves them (run_wall_s / iterations each) is refused at once, on every worker,
    naming what was measured; a generous deadline calibrates and trains."""
    from hosts.common.calibration import CalibrationRefused

    dev = {"type": "u280", "time_scale": 500.0}
    # hw_op_s 1 ns: any real allreduce reads as an emulator 1e4+ times slower
    tight = {"hw_op_s": 1e-9, "rounds": 1, "batches": 2, "run_wall_s": 1e-3}
    group = LocalAllreduceGroup(2, timeout_s=30)
    raised: dict[int, BaseException] = {}

    def one(rank):
        cfg = prog.P4sgdConfig.from_json(_cfg(tmp_path, rank, 2, device=dev, calibration=tight))
        w = JsonlWriter(cfg.out)
        try:
            prog.Worker(cfg, w).run(_local_comm(group, rank))
        except BaseException as e:  # noqa: BLE001 - checked below
            raised[rank] = e
        finally:
            w.close()

    ts = [threading.Thread(target=one, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert set(raised) == {0, 1} and all(isinstance(e, CalibrationRefused) for e in raised.values())
    assert "calibration round 0 chose TDF" in str(raised[0]) and "op(s) took" in str(raised[0])
    out = run_workers(tmp_path / "ok", 2, device=dev, calibration=dict(tight, run_wall_s=1e6))
    cal = next(r for r in out[0] if r["type"] == "calibration")
    assert cal["rounds"][0]["tdf_out"] > 1e4             # the same TDF, accepted


def test_the_host_config_needs_the_calibration_deadline(tmp_path):
    with pytest.raises(ConfigError, match="run_wall_s"):
        prog.P4sgdConfig.from_json(_cfg(tmp_path, calibration={"hw_op_s": 1e-6, "rounds": 1, "batches": 2}))
    with pytest.raises(ConfigError, match="run_wall_s > 0"):
        prog.P4sgdConfig.from_json(_cfg(tmp_path, calibration={"hw_op_s": 1e-6, "rounds": 1, "batches": 2,
                                                                "run_wall_s": 0}))


# ----------------------------------------------------------------- one dataset for the point
SPECS = [dict(TINY), {"source": "synthetic", "kind": "sparse", "samples": 60, "features": 300,
                      "density": 0.05, "seed": 2, "skew": 1.0},
         {"source": "builtin", "name": "digits", "bias": True},
         {"source": "profile", "name": "rcv1", "samples": 50, "features": 400, "seed": 1}]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s['source']}-{s.get('kind', s.get('name'))}")
def test_the_dataset_file_holds_the_specs_dataset_bit_for_bit(tmp_path, spec):
    import scipy.sparse as sp
    from hosts.glm.datasets import load_dataset_file, save_dataset_file
    made = load_dataset(spec)
    save_dataset_file(made, spec, tmp_path / "d.npz")
    read = load_dataset_file(tmp_path / "d.npz", spec)
    dense = (lambda X: X.toarray() if sp.issparse(X) else X)
    assert sp.issparse(read.X) == sp.issparse(made.X)
    assert np.array_equal(dense(read.X), dense(made.X)) and read.X.dtype == made.X.dtype
    assert np.array_equal(read.y, made.y) and read.name == made.name
    assert read.meta.keys() == made.meta.keys()
    for k, v in made.meta.items():
        assert np.array_equal(np.asarray(read.meta[k]), np.asarray(v)), k
    with pytest.raises(ValueError, match="holds the dataset of"):
        load_dataset_file(tmp_path / "d.npz", dict(spec, seed=99))


def test_the_point_makes_its_dataset_once_for_every_program(tmp_path):
    """Where the hosts share the runner's files, the workload writes the point's dataset
    into the scratch folder and every program's config names it; the workers read it
    and train exactly as from the spec. A dry run names the file but makes nothing;
    ssh hosts (no scratch folder) build their own."""
    scn = scenario("collective: ring", workers=2)
    ctx = _ctx(scn, tmp_path, net_mode="mininet")
    ctx.scratch_dir = tmp_path / "scratch"
    ctx.scratch_dir.mkdir()
    cfgs = _configs(P4sgdRuntime().programs(ctx))
    path = ctx.scratch_dir / "dataset.npz"
    assert {c["dataset_file"] for c in cfgs.values()} == {str(path)} and path.exists()
    cfg = prog.P4sgdConfig.from_json(cfgs["w1"])
    ds = prog.load_point_dataset(cfg)
    assert np.array_equal(ds.X, load_dataset(TINY).X)

    planned = _ctx(scn, tmp_path / "plan", net_mode="mininet")
    (tmp_path / "plan").mkdir()
    planned.scratch_dir, planned.planning = tmp_path / "plan" / "scratch", True
    cfgs = _configs(P4sgdRuntime().programs(planned))
    assert cfgs["w1"]["dataset_file"] == str(planned.scratch_dir / "dataset.npz")
    assert not planned.scratch_dir.exists()

    (tmp_path / "ssh").mkdir()
    cfgs = _configs(P4sgdRuntime().programs(_ctx(scn, tmp_path / "ssh", net_mode="ssh")))
    assert cfgs["w1"]["dataset_file"] is None


def test_a_worker_given_the_dataset_file_trains_as_from_the_spec(tmp_path):
    from hosts.glm.datasets import save_dataset_file
    spec = dict(TINY, model="logreg")
    save_dataset_file(load_dataset(spec), spec, tmp_path / "d.npz")
    run_workers(tmp_path, 2, dataset_file=str(tmp_path / "d.npz"))
    from_file = [np.load(tmp_path / f"w{r}.model.npy") for r in (1, 2)]
    (tmp_path / "spec").mkdir()
    run_workers(tmp_path / "spec", 2)
    from_spec = [np.load(tmp_path / "spec" / f"w{r}.model.npy") for r in (1, 2)]
    for a, b in zip(from_file, from_spec):
        assert np.array_equal(a, b)
    with pytest.raises(ConfigError, match="dataset_file: must be a path or null"):
        prog.P4sgdConfig.from_json(_cfg(tmp_path, dataset_file=3))


@pytest.mark.parametrize("mode", ["model_parallel", "data_parallel"])
def test_projected_compute_time_is_the_device_model_at_the_projected_share(mode):
    """p4sgd_compute_time finds a header's device once and a step shape's time once:
    every answer equals the device model asked directly, per header (two headers with
    different devices, one a measured CPU), per world and per override."""
    from hosts.glm.devices import make_device
    from testbed.workloads.p4sgd_projection import p4sgd_compute_time

    wl = SimpleNamespace(mode=mode)
    u280 = {"world": 2, "n_features": 1000, "device": {"type": "u280", "time_scale": 500.0}}
    gpu = {"world": 2, "n_features": 1000, "device": {"type": "gpu", "time_scale": 500.0}}
    cpu = {"world": 2, "n_features": 1000, "device": {"type": "cpu"}}
    nodes = [{"hw_s": 1e-3, "work": {"n": 64, "f": 500, "nnz": None, "phase": ph}}
             for ph in ("forward", "backward", "step")] + [
             {"hw_s": 2e-3, "work": {"n": 32, "f": 500, "nnz": 4000, "phase": "step"}}]

    def direct(header, node, world, overrides):
        dev = make_device({**header["device"], "time_scale": 1.0, **overrides})
        w = node["work"]
        if mode == "model_parallel":
            f2 = -(-1000 // world)
            shape = (w["n"], f2, None if w["nnz"] is None else max(1, round(w["nnz"] * f2 / w["f"])))
        else:
            n2 = max(1, round(w["n"] * 2 / world))
            shape = (n2, w["f"], None if w["nnz"] is None else max(1, round(w["nnz"] * n2 / w["n"])))
        return dev.step_time(*shape, w["phase"])

    for overrides in ({}, {"hbm_efficiency": 0.3}):
        ct = p4sgd_compute_time(wl, overrides)
        for world in (2, 4, 8, 4):
            for header in (u280, gpu, dict(u280), cpu):
                for node in nodes:
                    got = ct(header, node, world)
                    if header is cpu:
                        assert got == pytest.approx(node["hw_s"] * 2 / world)
                    elif world == 2 and not overrides:
                        assert got == node["hw_s"]           # the recorded world: as recorded
                    else:
                        assert got == pytest.approx(direct(header, node, world, overrides), rel=1e-12)
