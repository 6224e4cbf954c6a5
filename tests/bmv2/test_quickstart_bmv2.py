"""The quickstart's smallest in-switch point on the real BMv2, as a user runs it:
`testbed run scenarios/quickstart.yaml --quick --set switch.backend=bmv2` (one
point: baseline, algorithm switch, 64 values) through the CLI and the runner,
on Mininet. The allreduce must be exact on every worker, aggregated by BMv2's
P4 pipeline (its counters say so), and no switch process may be left behind.
Skipped without the P4 tools (tests/conftest.py) or without Mininet/root."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_BIN = Path(sys.executable).parent
TESTBED = str(_BIN / "testbed") if (_BIN / "testbed").exists() else str(REPO / ".venv" / "bin" / "testbed")
ARGS = ["--quick", "--no-plot", "--set", "switch.backend=bmv2",
        "--set", "sweep.cases=[{name: baseline}]",
        "--set", "sweep.grid={workload.algorithm: [switch]}",
        "--set", "workload.sizes=[64]"]


def _mininet_reason() -> str | None:
    try:
        import mininet.net  # noqa: F401, PLC0415
    except ImportError:
        return "mininet is not importable from the venv (run `make setup`)"
    return None if os.geteuid() == 0 else "a Mininet run with BMv2 needs root"


def _switch_pids_under(path: Path) -> list[int]:
    """simple_switch_grpc processes whose command line names `path` (their log file)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "simple_switch_grpc" in cmd and str(path) in cmd:
            pids.append(int(d.name))
    return pids


@pytest.mark.skipif(_mininet_reason() is not None, reason=str(_mininet_reason()))
def test_quickstart_switch_point_on_bmv2_is_exact_and_leaves_no_switch(tmp_path):
    env = {**os.environ, "INNET_TESTBED_REGISTRY": str(tmp_path / "registry")}
    res = subprocess.run([TESTBED, "run", "scenarios/quickstart.yaml", *ARGS, "--out", str(tmp_path)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["switch_backend"] == "bmv2"
    (point,) = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert point["status"] == "ok" and point["error"] is None, point
    with open(run_dir / "summary.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["algorithm"], row["size"], row["all_correct"]) == ("switch", "64", "True"), row
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    workers = [m for m in metrics if m.get("type") == "summary" and m.get("role") == "worker"]
    assert len(workers) == 4 and all(m["ok"] and m["failed_iterations"] == 0 for m in workers)
    (counters,) = [m["counters"] for m in metrics if m.get("type") == "switch_counters"]
    results = sum(v["packets"] for v in counters["Ingress.ina_results"].values())
    assert results == workers[0]["transport"]["results"] > 0     # BMv2 aggregated every chunk
    assert (run_dir / "logs" / point["label"] / "s1-bmv2-console.log").exists()
    assert _switch_pids_under(tmp_path) == []
