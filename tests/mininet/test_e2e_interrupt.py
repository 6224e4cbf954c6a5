"""Interrupted and crashing runs on Mininet: SIGINT / SIGTERM / SIGKILL +
`testbed clean` leave no process, registry record, namespace or interface of
the run behind and keep the completed points; a crashing worker is recorded
with its host, exit code and log tail while the sweep goes on.

Harness: e2e_harness.py. No timing assertions.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from e2e_harness import (EXIT_TIMEOUT_S, LiveRun, PYTHON, QUICKSTART, ROOT, TESTBED, _assert_clean_exit, _proc_start, _read_jsonl, _run_to_end, procs_of_run)


# --- 3. interrupting a run ---------------------------------------------------------
FULL_ARGS = [
    QUICKSTART, "--no-plot",
    # The full sweep (every case and algorithm), with small operations so each
    # point takes seconds and the run is still going when we interrupt it.
    "--set", "workload.sizes=[64, 1024]",
    "--set", "workload.iterations=3",
]


def _start_and_reach_second_point(tmp_path: Path, name: str) -> LiveRun:
    """Start the full quickstart; return once a point is complete and the host
    programs of a later point are running."""
    run = LiveRun(tmp_path, FULL_ARGS, name)
    run.wait_for(lambda: run.run_id is not None, "the run's registry record")
    run.wait_for(lambda: len(run.points()) >= 1, "the first point to complete", timeout=180)
    done = {p["label"] for p in run.points()}

    def later_hosts_running() -> bool:
        return any("hosts." in i["cmd"] and "--config" in i["cmd"]
                   and not any(f"/{label}/" in i["cmd"] for label in done)
                   for i in procs_of_run(run.run_id).values())

    run.wait_for(later_hosts_running, "the host programs of the next point", timeout=120)
    run.poll_once()
    return run


def _check_interrupted_results(run: LiveRun) -> list[dict]:
    d = run.run_dir
    m = json.loads((d / "manifest.json").read_text())
    points = run.points()
    assert points and points[0]["status"] == "ok", points
    assert len(points) < len(m["points"]), "the run was not interrupted before its end"
    metrics = _read_jsonl(d / "metrics.jsonl")
    done = {p["index"] for p in points if p["status"] == "ok"}
    assert {r["point"] for r in metrics} <= {p["index"] for p in points}
    ar = [r for r in metrics if r.get("type") == "allreduce"]
    assert {r["point"] for r in ar} == done and all(r["ok"] for r in ar)
    return points


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_tears_down_and_keeps_completed_points(tmp_path, sig):
    run = _start_and_reach_second_point(tmp_path, sig.name)
    try:
        run.proc.send_signal(sig)       # the testbed process only, not its group
        rc = run.wait(EXIT_TIMEOUT_S)
    finally:
        run.kill_and_clean()
    assert rc == 130, run.output()
    assert "Traceback" not in run.stderr_path.read_text(), run.output()
    assert "interrupted" in run.stderr_path.read_text()
    m = json.loads((run.run_dir / "manifest.json").read_text())
    assert m["status"] == "interrupted", m["status"]
    points = _check_interrupted_results(run)
    assert m["completed_points"] == sum(p["status"] == "ok" for p in points)
    run.assert_nothing_left()


def test_sigkill_then_clean_leaves_nothing(tmp_path):
    run = _start_and_reach_second_point(tmp_path, "SIGKILL")
    try:
        run.proc.send_signal(signal.SIGKILL)   # no finally, no atexit: a real crash
        rc = run.wait(EXIT_TIMEOUT_S)
        assert rc == -signal.SIGKILL
        assert run.run_id
        record = run.registry / f"{run.run_id}.json"
        assert record.exists(), "a killed run's registry record must stay for `testbed clean`"

        # Completed points survive a SIGKILL; the manifest still says running.
        m = json.loads((run.run_dir / "manifest.json").read_text())
        assert m["status"] == "running"
        _check_interrupted_results(run)

        dry = subprocess.run([TESTBED, "clean", "--dry-run"], cwd=ROOT, env=run.env, capture_output=True,
                             text=True, timeout=120)
        assert dry.returncode == 0 and f"run {run.run_id}: would" in dry.stdout, dry.stdout + dry.stderr
        assert record.exists(), "--dry-run must not remove anything"

        # What of the run outlived its runner (recorded by the registry or not).
        rec = json.loads(record.read_text())
        recorded_alive = {c["pid"] for c in rec["children"] if _proc_start(c["pid"]) == c["start"]}
        res = subprocess.run([TESTBED, "clean"], cwd=ROOT, env=run.env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"run {run.run_id}: killed" in res.stdout, res.stdout
        assert f"removed {record}" in res.stdout, res.stdout
        assert "incomplete" in res.stdout and str(run.run_dir) in res.stdout, res.stdout
        # Clean reports every recorded process it found alive, by PID.
        reported = {int(x) for x in re.findall(r"(\d+) \(", res.stdout.split(": killed", 1)[1])}
        assert recorded_alive <= reported, (recorded_alive, res.stdout)
        again = subprocess.run([TESTBED, "clean"], cwd=ROOT, env=run.env, capture_output=True, text=True,
                               timeout=120)
        assert again.returncode == 0 and "nothing to clean" in again.stdout, again.stdout
    finally:
        run.kill_and_clean()
    run.assert_nothing_left()


# --- 4. a worker that crashes -------------------------------------------------------
CRASH_WRAPPER = textwrap.dedent('''
    """`testbed` with one change: on point 0, host w2 runs a program that fails
    at once (exit 3) instead of the allreduce worker."""
    import sys

    from testbed.workloads.allreduce import AllreduceRuntime
    from testbed.workloads.base import register_runtime

    CRASH = [sys.executable, "-c",
             "import sys; print('worker w2 crashing on purpose (test)', file=sys.stderr); sys.exit(3)"]


    @register_runtime
    class CrashingAllreduce(AllreduceRuntime):
        kind = "allreduce"

        def programs(self, ctx):
            progs = super().programs(ctx)
            if ctx.point.index == 0:
                for p in progs:
                    if p.host == "w2":
                        p.argv = list(CRASH)
            return progs


    from testbed.cli import main

    main(sys.argv[1:], prog_name="testbed")
''')

CRASH_SCENARIO = textwrap.dedent("""
    name: crash_test
    description: "A worker crash on the first point; the second point must still run"
    topology: {kind: star, workers: 3}
    links: {bandwidth_mbps: 100}
    workload:
      kind: allreduce
      algorithm: ring
      sizes: [64, 1024]
      iterations: 2
      warmup: 1
      timeout_s: 120
    sweep:
      cases:
        - {name: crash}
        - {name: after}
      seed: 5
    figures: [goodput_vs_size]
""")


def test_worker_crash_is_recorded_and_sweep_goes_on(tmp_path):
    wrapper = tmp_path / "testbed_crashing.py"
    wrapper.write_text(CRASH_WRAPPER)
    scenario = tmp_path / "crash.yaml"
    scenario.write_text(CRASH_SCENARIO)
    run = _run_to_end(tmp_path, [str(scenario)], "crash", argv0=[PYTHON, str(wrapper)])
    _assert_clean_exit(run, 1)
    assert "1 point(s) did not complete" in run.stderr_path.read_text(), run.output()
    d = run.run_dir
    m = json.loads((d / "manifest.json").read_text())
    assert m["status"] == "failed" and m["completed_points"] == 1

    points = run.points()
    assert [(p["case"], p["status"]) for p in points] == [("crash", "failed"), ("after", "ok")], points
    err = points[0]["error"]
    assert "host w2 exited with code 3" in err, err
    log = d / "logs" / points[0]["label"] / "w2.log"
    assert str(log) in err, err
    assert "worker w2 crashing on purpose (test)" in err, "the error should quote the log's tail"
    assert "crashing on purpose" in log.read_text()
    # The failure is also visible on the console, and the next point ran normally.
    assert "FAILED" in run.stdout_path.read_text() + run.stderr_path.read_text()
    metrics = _read_jsonl(d / "metrics.jsonl")
    assert {r["point"] for r in metrics} == {1}, "a failed point contributes no metrics"
    ar = [r for r in metrics if r.get("type") == "allreduce"]
    assert ar and all(r["ok"] for r in ar) and {r["host"] for r in ar} == {"w1", "w2", "w3"}
    # The other workers of the failed point were stopped, not left to time out.
    assert points[0]["wall_s"] < m["scenario"]["workload"]["timeout_s"], points[0]
    run.assert_nothing_left()
