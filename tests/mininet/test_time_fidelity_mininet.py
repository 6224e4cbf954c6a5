"""Time fidelity end to end on Mininet: calibration dilates the network, and a
host held off the CPU makes the fidelity monitor mark its point invalid.

Both run `scenarios/p4sgd/scaling.yaml --quick` pinned to one point (2 workers,
P4SGD over the soft switch's in-network SUM).

* Calibration (time_scale auto): round 0 measures the undilated emulator, the
  workers agree on a TDF with headroom, and rank 0 asks the switch for the
  dilated network; the switch's stats must show exactly that TDF applied, and
  the monitor's network slowdown during training must follow it (p50 ratio
  inside a wide band: this is a ratio measured on a shared machine, not a time).
* Starvation: with a fixed TDF, the test stops and resumes one worker
  (SIGSTOP/SIGCONT, a process of this test's own run, found by its config path)
  for 60 ms of every 100 ms while it trains. Its operations then complete long
  after the dilated hardware would have, and the monitor must say so.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = ["--set", 'sweep.quick.grid={"topology.workers": [2]}', "--set", 'sweep.quick.cases=["p4sgd"]']


def _run(tmp_path: Path, *sets: str, during=None) -> tuple[Path, dict]:
    argv = [sys.executable, "-m", "testbed", "run", str(ROOT / "scenarios" / "p4sgd" / "scaling.yaml"),
            "--quick", "--no-plot", "--out", str(tmp_path), *ONE_POINT, *sets]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    th = threading.Thread(target=during, args=(tmp_path, stop)) if during else None
    if th:
        th.start()
    try:
        out, _ = p.communicate(timeout=140)
    finally:
        stop.set()
        if th:
            th.join()
    assert p.returncode in (0, 1), out[-3000:]
    (run_dir,) = [m.parent for m in tmp_path.glob("*/*/manifest.json")]
    (point,) = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert point["status"] == "ok", (point.get("error"), out[-3000:])
    return run_dir, point


def _records(run_dir: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("type") == kind]


def test_calibration_dilates_the_network_to_the_agreed_tdf(tmp_path):
    run_dir, point = _run(tmp_path, "--set", "workload.calibration_rounds=2")
    cals = _records(run_dir, "calibration")
    assert len(cals) == 2 and len({c["tdf"] for c in cals}) == 1, cals
    cal = cals[0]
    assert cal["network_dilated"] and cal["rounds"][1]["network_dilated"], cal
    # TDF = headroom x the undilated network's slowdown, or the host's own need if larger.
    r0 = cal["rounds"][0]
    assert cal["tdf"] >= 0.9 * max(16 * (r0["tdf_net"] or 0), r0["tdf_cmp"] or 0), cal
    # The switch applied exactly what the workers agreed on.
    stats = json.loads((run_dir / "points" / point["label"] / "switch_stats.json").read_text())
    versions = next(iter(stats.values()))["network_dilation"]["versions"]
    assert versions[-1]["tdf"] == cal["tdf"] and versions[-1]["frames"] > 0, versions
    assert versions[-1]["compensate_s"] == pytest.approx(cal["compensate_s"])
    (fid,) = _records(run_dir, "fidelity")
    assert fid["tdf"] == cal["tdf"]
    # The network followed the dilation (undilated it runs 16x faster than this TDF).
    assert 0.5 <= fid["ratio_p50"] <= 2.0, fid


def _worker_pid(tmp_path: Path, host: str) -> int | None:
    needle = f"{host}.config.json"
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(tmp_path).encode() in a and a.endswith(needle.encode()) for a in cmd):
            return int(d)
    return None


def _starve(tmp_path: Path, stop: threading.Event, host: str = "w2") -> None:
    pid = None
    while pid is None and not stop.is_set():
        pid = _worker_pid(tmp_path, host)
        time.sleep(0.02)
    while not stop.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.06)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(0.04)


def test_a_host_held_off_the_cpu_makes_the_point_invalid(tmp_path):
    run_dir, point = _run(tmp_path, "--set", "workload.time_scale=2000", "--set", "workload.epochs=3",
                          during=_starve)
    (fid,) = _records(run_dir, "fidelity")
    assert fid["valid"] is False, fid
    assert {"net_tail_extreme", "dilation_mismatch", "compute_overrun"} & set(fid["flags"]), fid
    # ...and the verdict reaches the point's record, not only metrics.jsonl.
    assert point["fidelity"]["valid"] is False
    assert any("fidelity monitor" in w for w in point.get("warnings", [])), point.get("warnings")
