"""End-to-end runs of the `testbed` command on Mininet, as a user runs it: the
results folder of a quick run (manifest, points, metrics, summary, logs, pcaps
readable by `testbed pcap`, figures), and in-switch allreduce under 5 % loss,
bit-exact against the fixed-point reference.

Harness (subprocess runs with --out <tmp_path> and a private run registry,
process/namespace/interface probes): e2e_harness.py. No timing assertions.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from collections import defaultdict

import pytest

from e2e_harness import (fixed_point_reference_digest, QUICKSTART, ROOT, TESTBED, _assert_clean_exit, _read_jsonl, _run_to_end)


# --- 1. quickstart, quick mode: the results folder --------------------------------
QUICK_ARGS = [
    QUICKSTART, "--quick",
    # Keep it short and independent of how quickstart.yaml's sweep evolves:
    # ring and ps, baseline and 1 % loss, two small sizes, 3 measured iterations.
    # (`--set workload.iterations=3` would be overridden by the quick `set`, see
    # test_cli.py::test_cli_set_wins_over_quick_set; set the quick values themselves.)
    "--set", "sweep.grid.workload.algorithm=[ring, ps]",
    "--set", "sweep.quick.cases=[baseline, loss]",
    "--set", "sweep.quick.set.workload.iterations=3",
    "--set", "sweep.quick.set.workload.sizes=[64, 4096]",
]


def test_quickstart_quick_results_folder(tmp_path):
    run = _run_to_end(tmp_path, QUICK_ARGS, "quick")
    _assert_clean_exit(run, 0)
    d = run.run_dir
    assert d.parent == run.out / "quickstart", d
    assert f"results: {d}" in run.stdout_path.read_text()

    # manifest.json
    m = json.loads((d / "manifest.json").read_text())
    assert m["status"] == "ok"
    assert m["net"] == "mininet" and m["switch_backend"] == "soft"
    scn = m["scenario"]
    assert scn["name"] == "quickstart" and scn["workload"]["kind"] == "allreduce"
    assert scn["sweep"]["grid"] == {"workload.algorithm": ["ring", "ps"]}   # resolved, with the overrides
    assert m["cli"]["overrides"] == [a for a in QUICK_ARGS[2:] if a != "--set"] and m["cli"]["quick"] is True
    assert m["versions"].get("mininet"), m["versions"]
    assert m["versions"].get("python") and m["versions"].get("numpy")
    assert "commit" in m["git"]
    assert m["git"]["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", m["git"]["commit"])
    assert m["machine"]["cpus"] >= 1 and m["machine"]["hostname"] and m["machine"]["kernel"]
    planned = m["points"]
    assert [(p["case"], p["params"]["workload.algorithm"]) for p in planned] == [
        ("baseline", "ring"), ("baseline", "ps"), ("loss", "ring"), ("loss", "ps")]
    assert all(isinstance(p["seed"], int) for p in planned)
    assert len({p["seed"] for p in planned}) == len(planned), "every point gets its own seed"
    assert m["completed_points"] == len(planned) and m["warnings"] == []

    # points.jsonl: every point ok, impairments reported with their mechanism
    points = run.points()
    assert [p["label"] for p in points] == [p["label"] for p in planned]
    assert [p["seed"] for p in points] == [p["seed"] for p in planned]
    workers = scn["topology"]["workers"]
    loss_case = next(c for c in scn["sweep"]["cases"] if c["name"] == "loss")
    loss_pct = float(loss_case["set"]["links.loss_pct"])
    assert loss_pct > 0
    bandwidth = scn["links"]["bandwidth_mbps"]
    # Every point's programs began through the start gate, whose files are gone.
    assert all(p["start_gate"]["opened"] in ("all ready", "at the latest start", "a program exited")
               for p in points), [p.get("start_gate") for p in points]
    assert not list((d / "points").glob("*/scratch")), "the points' shared files stayed behind"
    for p in points:
        assert p["status"] == "ok" and p["error"] is None, p
        imps = p["impairments"]
        bw = [i for i in imps if i["parameter"] == "bandwidth_mbps"]
        if bandwidth is not None:
            # downlinks by htb on the switch port, uplinks by the soft switch's ingress shaper
            assert bw and all(i["applied"] and i["value"] == bandwidth for i in bw), bw
            from_switch = [bool(re.fullmatch(r"s\d+", i["direction"].split("->")[0])) for i in bw]
            assert {i["mechanism"] for i, f in zip(bw, from_switch) if f} == {"htb"}, bw
            assert {i["mechanism"] for i, f in zip(bw, from_switch) if not f} == {"switch"}, bw
        loss = [i for i in imps if i["parameter"] == "loss_pct"]
        if p["case"] == "baseline":
            assert loss == [], loss
            continue
        # Loss on every link, both directions: applied, by a named mechanism, counted.
        n_links = workers + (1 if p["params"]["workload.algorithm"] == "ps" else 0)
        assert len(loss) == 2 * n_links, loss
        for i in loss:
            assert i["value"] == loss_pct and i["applied"] is True, i
            assert i["mechanism"] in ("switch", "nftables", "netem"), i
            obs = i["observed"]
            assert obs["seen"] > 0 and 0 <= obs["dropped"] <= obs["seen"], i
            assert i["observed_rate"] == pytest.approx(obs["dropped"] / obs["seen"]), i
        assert sum(i["observed"]["dropped"] for i in loss) > 0, "loss over thousands of packets dropped none"

    # metrics.jsonl: allreduce records, all correct, 3 measured iterations per host and size
    metrics = _read_jsonl(d / "metrics.jsonl")
    ar = [r for r in metrics if r.get("type") == "allreduce"]
    assert ar and all(r["ok"] is True for r in ar), [r for r in ar if not r["ok"]][:3]
    assert {r["point"] for r in ar} == {p["index"] for p in points}
    measured = defaultdict(int)
    digests = defaultdict(set)
    for r in ar:
        if not r["warmup"]:
            measured[(r["point"], r["host"], r["size"])] += 1
        digests[(r["point"], r["size"], r["iter"])].add(r["digest"])
    assert set(measured.values()) == {3}, dict(measured)
    assert {s for (_, _, s) in measured} == {64, 4096}
    assert all(len(v) == 1 for v in digests.values()), "ranks disagree on an allreduce result"

    # summary.csv
    with (d / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(int(r["point"]), int(r["size"])) for r in rows} == {(p["index"], s) for p in points for s in (64, 4096)}
    assert all(r["status"] == "ok" and r["all_correct"] == "True" and float(r["emu_p50_ms"]) > 0 for r in rows)

    # logs/<point>/: one log per host and per switch, the P4Runtime request log
    for p in points:
        logs = d / "logs" / p["label"]
        hosts = [f"w{i}" for i in range(1, workers + 1)]
        if p["params"]["workload.algorithm"] == "ps":
            hosts.append("ps")
        for name in [*hosts, "s1"]:
            log = logs / f"{name}.log"
            assert log.is_file() and log.stat().st_size > 0, f"{log} missing or empty"
        req = (logs / "s1-p4runtime-requests.txt")
        assert req.is_file(), f"no P4Runtime request log in {logs}: {sorted(os.listdir(logs))}"
        text = req.read_text()
        assert "SetForwardingPipelineConfig" in text and "Write" in text and "table_entry" in text
        # pcaps/<point>/: both directions of every switch port
        pcaps = d / "pcaps" / p["label"]
        want = {f"s1-eth{k}_{io}.pcap" for k in range(1, len(hosts) + 1) for io in ("in", "out")}
        got = {f.name for f in pcaps.glob("*.pcap")}
        assert want <= got, f"missing pcaps in {pcaps}: {sorted(want - got)}"

    # `testbed pcap` reads a point's folder
    point_dir = d / "pcaps" / points[-1]["label"]
    res = subprocess.run([TESTBED, "pcap", "--json", str(point_dir)], cwd=ROOT, capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert len(summary["files"]) >= 2 * workers
    assert all(f["packets"] > 0 for f in summary["files"]), [(f["path"], f["packets"]) for f in summary["files"]]
    res = subprocess.run([TESTBED, "pcap", str(point_dir)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0 and "s1-eth1_in.pcap" in res.stdout and " packets" in res.stdout, res.stderr

    # figures/: PNG and PDF of the scenario's figures
    for fig in scn["figures"]:
        png, pdf = d / "figures" / f"{fig}.png", d / "figures" / f"{fig}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert pdf.read_bytes()[:5] == b"%PDF-", pdf

    # `testbed show` on the scenario folder picks this run and names the mechanism.
    res = subprocess.run([TESTBED, "show", str(d.parent)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert str(d) in res.stdout and "status ok" in res.stdout
    assert re.search(rf"loss_pct={loss_pct} via (switch|nftables|netem)", res.stdout), res.stdout

    run.assert_nothing_left()


# --- 2. in-switch allreduce under 5 % loss: exact ---------------------------------
SWITCH_ARGS = [
    QUICKSTART, "--quick", "--no-plot",
    "--set", "sweep.grid.workload.algorithm=[switch]",
    "--set", "sweep.quick.cases=[loss]",
    # The case's own `set` (links.loss_pct: 1) would win over `--set links.loss_pct=5`
    # (see test_cli.py); redefine the case instead.
    "--set", "sweep.cases=[{name: loss, set: {links.loss_pct: 5}}]",
    "--set", "sweep.quick.set.workload.sizes=[64, 4096]",
    "--set", "sweep.quick.set.workload.iterations=3",
]


def test_switch_allreduce_exact_under_5pct_loss(tmp_path):
    run = _run_to_end(tmp_path, SWITCH_ARGS, "switch")
    _assert_clean_exit(run, 0)
    d = run.run_dir
    m = json.loads((d / "manifest.json").read_text())
    world = m["scenario"]["topology"]["workers"]
    points = run.points()
    assert len(points) == 1, points
    p = points[0]
    assert p["status"] == "ok" and p["params"] == {"workload.algorithm": "switch"}, p

    # The impairment: 5 % on every link and direction, applied by a named
    # mechanism, and it did drop packets.
    loss = [i for i in p["impairments"] if i["parameter"] == "loss_pct"]
    assert len(loss) == 2 * world, loss
    assert all(i["value"] == 5.0 and i["applied"] is True and i["mechanism"] for i in loss), loss
    dropped = sum(i["observed"]["dropped"] for i in loss)
    seen = sum(i["observed"]["seen"] for i in loss)
    assert dropped > 0, loss
    assert 0.025 < dropped / seen < 0.08, (dropped, seen)  # 5 % of thousands of packets

    metrics = _read_jsonl(d / "metrics.jsonl")
    ar = [r for r in metrics if r.get("type") == "allreduce"]
    assert ar and all(r["algorithm"] == "switch" for r in ar)
    warmup = m["scenario"]["workload"]["warmup"]
    assert len(ar) == world * 2 * (warmup + 3), len(ar)
    assert all(r["ok"] is True for r in ar), [r for r in ar if not r["ok"]][:3]

    # Bit-exact: every rank's result is the fixed-point sum, not just within tolerance.
    ref: dict[tuple[int, int], str] = {}
    wrong = []
    for r in ar:
        key = (r["size"], r["iter"])
        if key not in ref:
            ref[key] = fixed_point_reference_digest(p["seed"], world, *key)
        if r["digest"] != ref[key]:
            wrong.append((r["host"], *key, r["digest"], ref[key]))
    assert wrong == [], f"results differ from the fixed-point reference: {wrong[:5]}"
    assert len(ref) == 2 * (warmup + 3)

    # The switch saw retransmissions (loss recovered by the protocol), and so did the workers.
    counters = [r for r in metrics if r.get("type") == "switch_counters"]
    assert [c["switch"] for c in counters] == ["s1"], counters

    def total(name: str) -> int:
        return sum(v.get("packets", 0) for v in counters[0]["counters"].get(name, {}).values())

    assert total("Ingress.ina_retransmits") > 0, counters[0]["counters"]
    assert total("Ingress.ina_results") > 0, counters[0]["counters"]
    summaries = [r for r in metrics if r.get("type") == "summary" and r.get("role") == "worker"]
    assert len(summaries) == world and all(s["ok"] for s in summaries)
    assert sum(s["transport"]["retransmissions"] for s in summaries) > 0

    run.assert_nothing_left()
