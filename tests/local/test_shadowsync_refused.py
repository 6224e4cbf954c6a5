"""A calibration that would crawl ends a ShadowSync point at once, on loopback with
the real host programs (the workload's own configs and argv): every trainer's
worker 0 refuses the same round (CalibrationRefused), its other Hogwild worker is
released from the round's barrier rather than waiting out timeout_s there, the
shadow stops, every trainer exits EXIT_REFUSED with the refusal in its summary and
at the end of its log (what the runner reports for the point), and the servers end
as usual (every client said END)."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hosts.common import program
from testbed.results import read_jsonl
from testbed.scenario import load_scenario_text
from testbed.scenario.sweep import expand_points
from testbed.workloads.base import PointContext
from testbed.workloads.shadowsync import ShadowSyncRuntime

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
# The trainers' I/O timeout: a worker left at the barrier would wait this long.
TIMEOUT_S = 60.0

SCENARIO = f"""
name: refused
topology: {{kind: star, workers: 2}}
workload:
  kind: shadowsync
  algorithm: easgd
  mode: shadow
  hogwild_workers: 2
  iterations: 4
  batch_size: 16
  eval_examples: 64
  calibration_rounds: 2
  calibration_iterations: 1
  timeout_s: {TIMEOUT_S}
  device: {{type: v100, time_scale: auto}}
"""


def test_a_refused_calibration_ends_every_process_at_once(tmp_path):
    point = expand_points(load_scenario_text(SCENARIO, "refused.yaml"))[0]
    hosts = {h: SimpleNamespace(name=h, ip=f"127.0.1.{i + 1}") for i, h in enumerate(point.scenario.hosts())}
    ctx = PointContext(point=point, hosts=hosts, work_dir=tmp_path, net_mode="local", start_at=0.0)
    progs = sorted(ShadowSyncRuntime().programs(ctx), key=lambda p: p.phase)
    trainers = [p.host for p in progs if p.phase == 1]
    for p in progs:
        if p.host in trainers:       # a budget no TDF fits: round 0 is refused
            path = Path(p.argv[-1])
            cfg = json.loads(path.read_text())
            cfg["trainer"]["calibration"]["iteration_wall_s"] = 1e-6
            path.write_text(json.dumps(cfg))
    t0 = time.monotonic()
    procs = {p.host: subprocess.Popen(p.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True) for p in progs}
    logs = {}
    try:
        for h, proc in procs.items():
            logs[h], _ = proc.communicate(timeout=max(1.0, TIMEOUT_S / 2 - (time.monotonic() - t0)))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    wall = time.monotonic() - t0
    assert wall < TIMEOUT_S / 2, f"took {wall:.0f} s"
    for h in trainers:
        assert procs[h].returncode == program.EXIT_REFUSED, logs[h][-3000:]
        summary = next(r for r in read_jsonl(tmp_path / f"{h}.jsonl") if r["type"] == "summary")
        assert not summary["ok"]
        first, *others = summary["error"].split("; ")
        assert first.startswith("worker 0: CalibrationRefused: calibration round 0 chose TDF ")
        assert "op(s) took" in first and "beyond the 1e-06 s" in first
        # the released worker says why it stopped, not how (a broken barrier)
        assert others == ["worker 1: stopped: calibration was refused by worker 0"], summary["error"]
        # the runner quotes the log's end, and names the last error in it first
        last_error = next(x for x in reversed(logs[h].splitlines()[-15:]) if ": ERROR " in x)
        assert "ERROR worker 0: CalibrationRefused: calibration round 0" in last_error, logs[h][-3000:]
    for h in (p.host for p in progs if p.phase == 0):
        assert procs[h].returncode == 0, logs[h][-3000:]
        assert next(r for r in read_jsonl(tmp_path / f"{h}.jsonl") if r["type"] == "summary")["ok"]
