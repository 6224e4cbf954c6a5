"""Hostile conditions on Mininet: a host impersonating a worker changes no
result and is counted; the switch process dying mid-run fails the point naming
the switch.

Harness: e2e_harness.py. No timing assertions.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from e2e_harness import (fixed_point_reference_digest, LiveRun, PYTHON, QUICKSTART, ROOT, TESTBED, _assert_clean_exit, _cmdline, _read_jsonl, procs_of_run)


# --- 6. an impersonating host ------------------------------------------------------
# Long enough that the run is still sending when the attacker's 200 frames (3 ms
# apart) go out: with 4 iterations a fast run ended first and the attacker's
# namespace had lost its interface ("Network is unreachable"); 150 back-to-back
# iterations still did under heavy load. 40 ms of compute per iteration makes the
# run last >= 100 x 2 x 40 ms = 8 s whatever the load.
IMPERSONATION_ITERATIONS = 100
IMPERSONATION_ARGS = [
    QUICKSTART, "--quick", "--no-plot",
    "--set", "sweep.grid.workload.algorithm=[switch]",
    "--set", "sweep.quick.cases=[baseline]",
    "--set", "sweep.quick.set.workload.sizes=[4096, 65536]",
    "--set", f"sweep.quick.set.workload.iterations={IMPERSONATION_ITERATIONS}",
    "--set", "sweep.quick.set.workload.compute_ms=40",
]
FORGED = 200


def _host_program(run: LiveRun, host: str) -> int | None:
    if run.run_id is None:
        return None
    for pid, info in procs_of_run(run.run_id).items():
        if "hosts.allreduce" in info["cmd"] and f"/{host}.config.json" in info["cmd"]:
            return pid
    return None


def test_impersonating_host_changes_no_result_and_is_counted(tmp_path):
    """During an in-switch allreduce, w2 also sends contributions under w1's
    worker id (same job, valid slots and seqs). The switch binds membership to
    ports: every result stays bit-exact, `Ingress.bad_port` counts exactly the
    forged frames, and `testbed pcap` / `testbed show` report them."""
    run = LiveRun(tmp_path, IMPERSONATION_ARGS, "impersonate")
    try:
        pid: list[int] = []
        run.wait_for(lambda: bool(pid.append(p) or True) if (p := _host_program(run, "w2")) else False,
                     "w2's allreduce program")
        cmd = _cmdline(pid[0]).split()
        cfg = json.loads(Path(cmd[cmd.index("--config") + 1]).read_text())
        w1 = cfg["peers"][0]["name"]
        assert w1 == "w1" and cfg["host"] == "w2", cfg
        attacker = subprocess.run(
            ["nsenter", f"--net=/proc/{pid[0]}/ns/net", "--", PYTHON, str(ROOT / "tests" / "mininet" / "impersonate.py"),
             "--job", str(cfg["ina"]["job_id"]), "--worker", "0", "--count", str(FORGED),
             "--window", str(cfg["ina"].get("window", 256)), "--start-at", str(cfg["start_at"])],
            cwd=ROOT, env=dict(run.env, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
        assert attacker.returncode == 0, attacker.stderr
        assert json.loads(attacker.stdout) == {"sent": FORGED}
        run.wait()
    finally:
        run.kill_and_clean()
    _assert_clean_exit(run, 0)
    d = run.run_dir
    m = json.loads((d / "manifest.json").read_text())
    world = m["scenario"]["topology"]["workers"]
    [p] = run.points()
    assert p["status"] == "ok", p

    metrics = _read_jsonl(d / "metrics.jsonl")
    ar = [r for r in metrics if r.get("type") == "allreduce"]
    warmup = m["scenario"]["workload"]["warmup"]
    assert len(ar) == world * 2 * (warmup + IMPERSONATION_ITERATIONS), len(ar)
    ref: dict[tuple[int, int], str] = {}
    wrong = []
    for r in ar:
        key = (r["size"], r["iter"])
        if key not in ref:
            ref[key] = fixed_point_reference_digest(p["seed"], world, *key)
        if r["digest"] != ref[key] or not r["ok"]:
            wrong.append((r["host"], *key))
    assert wrong == [], f"{len(wrong)} of {len(ar)} results differ from the fixed-point reference: {wrong[:5]}"

    [counters] = [r["counters"] for r in metrics if r.get("type") == "switch_counters"]
    job = str(cfg["ina"]["job_id"])
    bad_port = counters.get("Ingress.bad_port", {})
    assert bad_port == {job: {"packets": FORGED, "bytes": 0}}, bad_port
    assert not counters.get("Ingress.bad_worker") and not counters.get("Ingress.bad_job")

    # testbed pcap: the forged frames, found in s1's ingress pcap of w2's port
    pcap = subprocess.run([TESTBED, "pcap", "--json", str(d / "pcaps" / p["label"])], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert pcap.returncode == 0, pcap.stderr
    ina = json.loads(pcap.stdout)["ina"]
    [refused] = ina["refused_by_port_binding"]
    assert (refused["job"], refused["worker"], refused["packets"]) == (int(job), 0, FORGED), refused
    assert refused["port"] != refused["bound_port"]
    assert ina["switch_refusals"]["s1"]["Ingress.bad_port"] == {job: FORGED}
    show = subprocess.run([TESTBED, "show", str(d)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert f"s1 job {job}: Ingress.bad_port {FORGED}" in show.stdout, show.stdout



# --- 5. the switch process dies mid-run ---------------------------------------------
SWITCH_DIES_SCENARIO = textwrap.dedent("""
    name: switch_dies
    description: "The soft switch is killed while the workers run; the point must blame it"
    topology: {{kind: star, workers: 3}}
    workload:
      kind: allreduce
      algorithm: {algorithm}
      sizes: [64]
      iterations: 100000
      warmup: 1
      timeout_s: 120
    sweep: {{seed: 9}}
""")


@pytest.mark.parametrize("algorithm", ["switch", "ring"])
def test_switch_killed_mid_run_fails_the_point_naming_the_switch(tmp_path, algorithm):
    scenario = tmp_path / "switch_dies.yaml"
    scenario.write_text(SWITCH_DIES_SCENARIO.format(algorithm=algorithm))
    run = LiveRun(tmp_path, [str(scenario), "--no-plot"], f"kill-{algorithm}")
    try:
        run.wait_for(lambda: run.run_id is not None, "the run's registry record")

        def workers_running() -> list[int]:
            procs = procs_of_run(run.run_id)
            if sum("hosts.allreduce" in i["cmd"] for i in procs.values()) < 3:
                return []
            return [pid for pid, i in procs.items() if "-m testbed.switch.soft" in i["cmd"]]

        run.wait_for(lambda: bool(workers_running()), "the workers and the switch to run", timeout=180)
        # Let the allreduce get going (an iteration done), then kill the switch by PID.
        time.sleep(2)
        switch_pids = workers_running()
        assert len(switch_pids) == 1, {p: _cmdline(p) for p in switch_pids}
        os.kill(switch_pids[0], signal.SIGKILL)
        rc = run.wait()
    finally:
        run.kill_and_clean()
    _assert_clean_exit(run, 1)
    points = run.points()
    assert len(points) == 1 and points[0]["status"] == "failed", points
    err = points[0]["error"]
    assert err.startswith("switch s1 exited with code -9; last lines of "), err
    assert str(run.run_dir / "logs" / points[0]["label"] / "s1.log") in err, err
    assert "host w" not in err.splitlines()[0], err
    # Stopped when the switch died, not when a host gave up (timeout_s per
    # operation) or the runner's own timeout.
    assert points[0]["wall_s"] < 120, points[0]
    assert rc == 1
    run.assert_nothing_left()
