"""The summary table (summary.csv, the table `testbed run` and `testbed show` print)
says of every time and rate whether it is hardware-equivalent or emulated (issue 33,
part 3): each workload's summary row names a time or rate hw_* (emulated / TDF),
projected_hw_* (the hardware model's replay of the point's trace) or emu_* (emulated
wall time), hardware-equivalent first; the terminal table says what the prefixes mean."""
from __future__ import annotations

import csv
import json
import re

import pytest
from click.testing import CliRunner

from testbed.scenario import load_scenario_text

pytestmark = pytest.mark.unit

UNITS = {"ms", "s", "us", "ns", "sps", "mbps", "gbps", "bps", "pps"}
PREFIXES = ("hw_", "projected_hw_", "emu_")
# Words that name a time or a rate: a column carrying one needs a unit and a prefix.
TIME_WORDS = ("time", "wall", "latency", "throughput", "goodput", "iter_", "ms", "per_s", "rate", "duration")


def _is_time_or_rate(key: str) -> bool:
    tokens = re.split(r"[_/@]", key)
    return bool(UNITS & set(tokens)) or "per_s" in key or key.endswith("/s")


class _Any(dict):
    """A summary record with every field 1.0 unless given (summary_row reads many)."""

    def __missing__(self, key):
        return 1.0

    def get(self, key, default=None):
        return self[key]


def _rows():
    from testbed.workloads import lhc, p4sgd, phub, shadowsync, torch
    from testbed.workloads.allreduce import AllreduceRuntime
    common = {"invalid_reasons": [], "fidelity": "valid", "mode": "foreground"}
    rows = {name: mod.summary_row(_Any(common)) for name, mod in
            (("p4sgd", p4sgd), ("lhc", lhc), ("phub", phub), ("shadowsync", shadowsync), ("torch", torch))}
    try:
        from testbed.workloads import easgd
        rows["easgd"] = easgd.summary_row(_Any(common))
    except ImportError:         # pragma: no cover
        pass
    recs = [{"type": "allreduce", "size": 16, "bytes": 64, "latency_s": 0.001 * (i + 1), "algorithm": "switch",
             "ok": True, "warmup": False} for i in range(3)]
    rows["allreduce"] = AllreduceRuntime().summarize(None, recs)[0]
    return rows


@pytest.mark.parametrize("workload", ["allreduce", "p4sgd", "lhc", "phub", "shadowsync", "torch", "easgd"])
def test_every_time_or_rate_column_says_hardware_or_emulated(workload):
    row = _rows()[workload]
    keys = list(row)
    timed = [k for k in keys if _is_time_or_rate(k)]
    assert timed, keys
    unlabelled = [k for k in timed if not k.startswith(PREFIXES)]
    assert not unlabelled, f"{workload}: {unlabelled} do not say hw_ or emu_"
    # a time without a unit in its name (or a unit-less name that reads as one)
    vague = [k for k in keys if not _is_time_or_rate(k) and any(w in k for w in TIME_WORDS)]
    assert not vague, f"{workload}: {vague} read as times but carry no unit"
    # hardware-equivalent first, where the workload has hardware times
    hw = [keys.index(k) for k in timed if k.startswith(("hw_", "projected_hw_"))]
    emu = [keys.index(k) for k in timed if k.startswith("emu_")]
    if hw and emu:
        assert max(hw) < min(emu), f"{workload}: an emulated column before a hardware one: {keys}"


@pytest.mark.parametrize("workload", ["p4sgd", "lhc", "phub", "shadowsync", "torch", "easgd"])
def test_the_row_carries_the_hardware_times_and_the_projection(workload):
    row = _rows()[workload]
    assert any(k.startswith("hw_") for k in row), row
    assert any(k.startswith("projected_hw_") for k in row), row
    assert "tdf" in row


def _p4sgd_summary(tdf: float):
    """P4SGD's summary of a 2-worker point whose hardware run is the same (80 ms of
    training, 12 iterations) at the given TDF: every emulated time is hw x TDF."""
    from testbed.workloads.p4sgd import _summary
    wl = load_scenario_text("name: t\ntopology: {workers: 2}\nworkload: " + json.dumps(
        {"kind": "p4sgd", "dataset": {"source": "synthetic", "kind": "dense", "samples": 96, "features": 40,
                                      "seed": 3}, "batch": 16, "micro_batch": 4, "epochs": 1,
         "snapshot_every": 2, "time_scale": tdf, "target_loss": 0.6}), "t.yaml").workload
    hw_train, hw_iter, hw_ar = 0.08, 0.08 / 12, 2e-6
    sums = {h: {"ok": True, "digest": "d", "train_s": hw_train * tdf, "samples": 192, "iterations": 12,
                "comm_s": 0.01 * tdf, "compute_s": 0.07 * tdf, "dilation": tdf, "cpu_s": 1.0}
            for h in ("w1", "w2")}
    iters = [{"allreduce_s": [hw_ar * tdf], "iter_s": hw_iter * tdf, "other_s": 0.0,
              "compute_s": hw_iter * tdf * 0.9, "comm_s": hw_iter * tdf * 0.1} for _ in range(24)]
    curve = [{"iter": i, "t_s": i * hw_iter * tdf, "loss": 0.7 - 0.02 * i} for i in range(13)]
    s = _summary(wl, ["w1", "w2"], {"w1": [], "w2": []}, sums, iters, curve, None, [])
    s["projected_hw_train_s"] = 0.075             # what fidelity_records adds: the projection
    return s


def test_p4sgd_hardware_throughput_compares_across_points_with_different_tdfs():
    from testbed.workloads.p4sgd import summary_row
    a, b = summary_row(_p4sgd_summary(500.0)), summary_row(_p4sgd_summary(4000.0))
    # emulated: 8x apart only because each point ran at its own dilation
    assert a["emu_throughput_sps"] == pytest.approx(8 * b["emu_throughput_sps"], rel=1e-3)
    # hardware-equivalent: the same hardware run reads the same
    assert a["hw_throughput_sps"] == pytest.approx(b["hw_throughput_sps"]) == pytest.approx(192 / 0.08, rel=1e-3)
    for k in ("hw_train_s", "hw_iter_ms", "hw_allreduce_p50_ms", "hw_time_to_target_s", "projected_hw_train_s",
              "projected_hw_throughput_sps"):
        assert a[k] is not None and a[k] == pytest.approx(b[k], rel=1e-3), k
    assert a["hw_iter_ms"] == pytest.approx(80 / 12, rel=1e-3)
    assert a["projected_hw_throughput_sps"] == pytest.approx(192 / 0.075, rel=1e-3)
    assert (a["tdf"], b["tdf"]) == (500.0, 4000.0)
    # the first time/rate column of the row is the hardware-equivalent throughput
    assert next(k for k in a if _is_time_or_rate(k)) == "hw_throughput_sps"


def _run_dir(tmp_path, header: list[str], row: list[str]):
    run = tmp_path / "scn" / "20260101-000000"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "status": "ok", "net": "mininet", "switch_backend": "soft", "scenario": {"name": "scn"},
        "points": [{}], "git": {"commit": "abc"}, "warnings": []}))
    (run / "points.jsonl").write_text(json.dumps({"index": 0, "label": "000-a", "status": "ok", "wall_s": 1.0,
                                                  "impairments": []}) + "\n")
    (run / "metrics.jsonl").write_text("")
    with (run / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerow(row)
    return run


def test_the_terminal_table_says_which_columns_are_hardware_equivalent(tmp_path):
    from testbed.cli import main
    run = _run_dir(tmp_path, ["point", "label", "status", "hw_throughput_sps", "projected_hw_train_s",
                              "emu_throughput_sps", "tdf"], ["0", "000-a", "ok", "2400.0", "0.075", "4.8", "500"])
    out = CliRunner().invoke(main, ["show", str(run)])
    assert out.exit_code == 0, out.output
    table = out.output[out.output.index("hw_throughput_sps"):]
    assert "hw_*: hardware-equivalent (emulated / TDF)" in table
    assert "projected_hw_*: the hardware model's projection" in table
    assert "emu_*: emulated wall time" in table


def test_an_allreduce_table_says_its_times_are_emulated(tmp_path):
    from testbed.cli import main
    run = _run_dir(tmp_path, ["point", "label", "status", "algorithm", "size", "emu_p50_ms"],
                   ["0", "000-a", "ok", "switch", "16", "1.5"])
    out = CliRunner().invoke(main, ["show", str(run)])
    assert out.exit_code == 0, out.output
    assert "emu_*: emulated wall time" in out.output and "hw_*:" not in out.output


def test_a_table_written_before_the_prefixes_says_its_times_are_emulated(tmp_path):
    from testbed.cli import main
    run = _run_dir(tmp_path, ["point", "label", "status", "throughput_sps", "hw_train_s"],
                   ["0", "000-a", "ok", "4.8", "0.08"])
    out = CliRunner().invoke(main, ["show", str(run)])
    assert out.exit_code == 0, out.output
    assert "throughput_sps" in out.output and "unprefixed times are emulated" in out.output


def test_scenario_docs_do_not_name_the_old_columns():
    """docs and README show the columns the table prints today (the summary records in
    metrics.jsonl keep their own names: iter_ms, throughput_sps, ...)."""
    from testbed import results as res
    old = re.compile(r"`(compute_ms/it|comm_ms/it|hw_ms/it|proj_hw_ms/it|goodput_mbps|proj_ms|proj_t_target_ms|"
                     r"proj\d+_ms)`")
    for p in [res.PROJECT_ROOT / "README.md", *sorted((res.PROJECT_ROOT / "docs").glob("*.md"))]:
        hits = old.findall(p.read_text())
        assert not hits, f"{p.name}: {hits}"
