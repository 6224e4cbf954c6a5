"""Synthetic results folders shaped like the runner's, for figure tests."""
from __future__ import annotations

import numpy as np

from testbed import results as res

ALGS = ("switch", "ring", "ps")
CASES = ("baseline", "straggler", "loss")


def _bw_rows(workers: int, mbps: float) -> list[dict]:
    return [{"link": f"w{i}-s1", "direction": f"w{i}->s1", "parameter": "bandwidth_mbps", "value": mbps,
             "mechanism": "htb", "applied": True} for i in range(1, workers + 1)]


def allreduce_run(tmp_path, *, repeats: int = 3, invalid: tuple[int, ...] = (), quick: bool = False):
    """Quickstart-shaped: 3 algorithms x 3 cases x repeats, 4 workers, 100 Mbit/s."""
    run_dir = res.new_run_dir("quickstart", tmp_path)
    scenario = {
        "name": "quickstart", "topology": {"workers": 4, "kind": "star"},
        "links": {"bandwidth_mbps": 100.0, "loss_pct": 0.0}, "switch": {"backend": "soft"},
        "workload": {"kind": "allreduce", "algorithm": "ring", "sizes": [64, 1024, 16384, 262144],
                     "iterations": 10, "warmup": 2},
        "sweep": {"grid": {"workload.algorithm": list(ALGS)},
                  "cases": [{"name": "baseline", "set": {}},
                            {"name": "straggler", "set": {"stragglers": [{"host": "w2", "delay_ms": 20}]}},
                            {"name": "loss", "set": {"links.loss_pct": 1}}],
                  "repeats": repeats, "seed": 1,
                  "quick": {"set": {"workload.iterations": 5, "workload.sizes": [64, 16384]}}},
        "figures": ["goodput_vs_size", "latency_cdf"]}
    sizes = [64, 16384] if quick else [64, 1024, 16384, 262144]
    points, idx = [], 0
    rng = np.random.default_rng(0)
    for case in CASES:
        for alg in ALGS:
            for r in range(repeats):
                points.append({"index": idx, "label": f"{idx:03d}-{case}-algorithm={alg}-r{r}", "case": case,
                               "params": {"workload.algorithm": alg}, "repeat": r, "seed": idx})
                idx += 1
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "mininet", "scenario": scenario, "points": points,
        "cli": {"scenario": "scenarios/quickstart.yaml", "overrides": [], "net": "mininet", "quick": quick},
        "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    eff = {"switch": 0.6, "ring": 0.45, "ps": 0.2}
    for p in points:
        rec = dict(p, status="ok", impairments=_bw_rows(4, 100.0))
        if p["index"] in invalid:
            rec["fidelity"] = {"valid": False, "reasons": ["net slowdown p50 950 > band 600"], "tdf": 500.0}
        res.append_jsonl(run_dir / "points.jsonl", rec)
        alg = p["params"]["workload.algorithm"]
        for size in sizes:
            for it in range(5):
                base = 2e-4 + size * 4 * 8 / (100e6 * eff[alg])
                lat = base * (1 + 0.1 * rng.random()) * (1.3 if p["case"] == "loss" else 1.0) + (0.02 if p["case"] == "straggler" else 0.0)
                res.append_jsonl(run_dir / "metrics.jsonl", {
                    "point": p["index"], "case": p["case"], "type": "allreduce", "algorithm": alg, "size": size,
                    "bytes": size * 4, "iter": it, "warmup": False, "latency_s": lat, "ok": True})
    return run_dir


P4SGD_WL = {"kind": "p4sgd", "mode": "model_parallel", "glm": "logreg",
            "dataset": {"source": "synthetic", "kind": "dense", "samples": 4096, "features": 2048, "seed": 2},
            "lr": 16.0, "batch": 16, "micro_batch": 8, "epochs": 3, "pipeline_depth": 4,
            "collective": "switch", "device": "u280", "time_scale": 500, "snapshot_every": 8,
            "target_loss": 0.35, "timeout_s": 300}


def _summary(point: dict, mode: str, workers: int, batch: int, **kw) -> dict:
    s = {"point": point["index"], "label": point["label"], "case": point["case"], "type": "p4sgd_summary",
         "mode": mode, "collective": "switch", "glm": "logreg", "device": "u280" if mode == "model_parallel"
         else "gpu", "dilation": 500.0, "times_dilated": True, "workers": workers, "batch": batch,
         "micro_batch": 8, "pipeline_depth": 4, "ok": True, "valid": True, "iter_ms_p50": 5.0,
         "iter_ms_p99": 9.0, "hidden_share": 0.5, "final_loss": 0.5, "target_loss": 0.35,
         "time_to_target_s": None, "network_slowdown_vs_hw": 400.0, "model_digest": "d"}
    s.update(kw)
    return s


def convergence_run(tmp_path, *, quick: bool = True):
    """convergence.yaml-shaped: p4sgd + dp with an lr grid {16, 1024}; quick cuts dp's epochs."""
    run_dir = res.new_run_dir("p4sgd-convergence", tmp_path)
    scenario = {
        "name": "p4sgd-convergence", "topology": {"kind": "star", "workers": 4}, "links": {},
        "switch": {"backend": "soft"}, "workload": dict(P4SGD_WL),
        "sweep": {"grid": {}, "cases": [
            {"name": "p4sgd", "set": {}},
            {"name": "dp", "set": {"workload.mode": "data_parallel", "workload.device": "gpu",
                                   "workload.batch": 1024, "workload.epochs": 100}},
            {"name": "dp_scaled_lr", "set": {"workload.mode": "data_parallel", "workload.device": "gpu",
                                             "workload.batch": 1024, "workload.lr": 1024.0}}],
            "repeats": 1, "seed": 1,
            "quick": {"cases": None, "set": {
                "workload.dataset": {"source": "synthetic", "kind": "dense", "samples": 1024,
                                     "features": 1024, "seed": 2},
                "workload.epochs": 2}}},
        "figures": ["p4sgd_convergence"]}
    cases = [("p4sgd", "model_parallel", 16), ("dp", "data_parallel", 1024), ("dp_scaled_lr", "data_parallel", 1024)]
    points = [{"index": i, "label": f"{i:03d}-{c}-r0", "case": c, "params": {}, "repeat": 0, "seed": i}
              for i, (c, _, _) in enumerate(cases)]
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "mininet", "scenario": scenario, "points": points,
        "cli": {"scenario": "s.yaml", "overrides": [], "net": "mininet", "quick": quick},
        "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    # p4sgd reaches the target at 0.8 s; dp (lr 16) stalls at 0.6, dp_scaled_lr reaches 0.45.
    finals = {"p4sgd": (0.30, 0.8), "dp": (0.60, None), "dp_scaled_lr": (0.45, None)}
    for p, (case, mode, batch) in zip(points, cases):
        res.append_jsonl(run_dir / "points.jsonl", dict(p, status="ok", impairments=[]))
        final, ttt = finals[case]
        ts = np.linspace(0.1, 2.0, 8)
        losses = 0.69 - (0.69 - final) * (1 - np.exp(-3 * ts))
        for j, (t, l) in enumerate(zip(ts, losses)):
            res.append_jsonl(run_dir / "metrics.jsonl", {
                "point": p["index"], "case": case, "type": "p4sgd_curve", "snapshot": j, "t_s": float(t),
                "loss": float(l)})
        res.append_jsonl(run_dir / "metrics.jsonl", _summary(
            p, mode, 4, batch, final_loss=final, time_to_target_s=ttt, train_s=2.0, tdf=500.0))
    return run_dir


def scaling_run(tmp_path, *, invalid_point: int | None = None, projection: bool = True):
    """scaling.yaml-shaped: p4sgd and dp at 1, 2, 4, 8 workers, 3 repeats, projection 1..256."""
    run_dir = res.new_run_dir("p4sgd-scaling", tmp_path)
    wl = dict(P4SGD_WL, batch=64, dataset={"source": "synthetic", "kind": "dense", "samples": 4096,
                                           "features": 8192, "seed": 1})
    scenario = {"name": "p4sgd-scaling", "topology": {"kind": "star", "workers": 8}, "links": {},
                "switch": {"backend": "soft"}, "workload": wl,
                "sweep": {"grid": {"topology.workers": [1, 2, 4, 8]},
                          "cases": [{"name": "p4sgd", "set": {}},
                                    {"name": "dp", "set": {"workload.mode": "data_parallel",
                                                           "workload.batch": 256}}],
                          "repeats": 3, "seed": 1, "quick": {"set": {}}},
                "figures": ["p4sgd_scaling"]}
    points = []
    for case in ("p4sgd", "dp"):
        for w in (1, 2, 4, 8):
            for r in range(3):
                i = len(points)
                points.append({"index": i, "label": f"{i:03d}-{case}-workers={w}-r{r}", "case": case,
                               "params": {"topology.workers": w}, "repeat": r, "seed": i})
    res.write_json(run_dir / "manifest.json", {
        "status": "ok", "net": "mininet", "scenario": scenario, "points": points,
        "cli": {"scenario": "s.yaml", "overrides": [], "net": "mininet", "quick": False},
        "machine": {"cpus": 2}, "git": {"commit": "abc"}})
    rng = np.random.default_rng(1)
    for p in points:
        rec = dict(p, status="ok", impairments=[])
        if p["index"] == invalid_point:
            rec["fidelity"] = {"valid": False, "reasons": ["ratio p50 0.4 outside [0.85, 1.15]"]}
        res.append_jsonl(run_dir / "points.jsonl", rec)
        w = p["params"]["topology.workers"]
        mp = p["case"] == "p4sgd"
        base = 1.0e5 if mp else 0.8e5
        eff = 0.9 if mp else 0.5
        hw = base * w ** np.log2(1 + eff) * (1 + 0.05 * rng.standard_normal())
        res.append_jsonl(run_dir / "metrics.jsonl", _summary(
            p, "model_parallel" if mp else "data_parallel", w, 64 if mp else 256,
            throughput_sps=hw / 500, hw_throughput_sps=hw, tdf=500.0, train_s=1.0, hw_train_s=0.002))
        res.append_jsonl(run_dir / "metrics.jsonl", {
            "point": p["index"], "case": p["case"], "type": "p4sgd_iter", "host": "w1", "rank": 0, "iter": 0,
            "t_s": 0.1, "iter_s": 0.01, "compute_s": 0.006, "comm_s": 0.003, "stall_s": 0.0, "other_s": 0.001,
            "allreduce_s": [0.001]})
    if projection:
        for case, base, eff in (("p4sgd", 1.0e5, 0.9), ("dp", 0.8e5, 0.5)):
            for w in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                y = base * w ** np.log2(1 + eff)
                if case == "p4sgd" and w == 8:
                    y *= 1.5  # disagrees with the emulation by > 15 %
                res.append_jsonl(run_dir / "metrics.jsonl", {
                    "type": "projection", "workload": "p4sgd", "case": case, "workers": w, "emulated": w <= 8,
                    "hw_train_s": 4096 / y, "hw_throughput_sps": y, "band_lo_sps": 0.8 * y,
                    "band_hi_sps": 1.2 * y, "profile": "tofino1-100g", "point": None})
    return run_dir
