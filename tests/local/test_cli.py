"""The `testbed` command as a user runs it, without root: help, errors a person
can act on, a small `--net local` run and the verbs that read its results.

Every command is a subprocess of `.venv/bin/testbed`; runs write under
tmp_path (`--out`) and use a private run registry, so nothing lands in
results/ and `testbed clean` only ever sees what a test planted.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
_BIN = Path(sys.executable).parent
TESTBED = str(_BIN / "testbed") if (_BIN / "testbed").exists() else str(ROOT / ".venv" / "bin" / "testbed")
CMD_TIMEOUT_S = 180

# verb -> options its --help must mention
VERBS = {
    "list": ["--runs"],
    "run": ["--set", "--net", "--quick", "--out", "--plot", "mininet", "local"],
    "show": ["--json"],
    "plot": ["--figure"],
    "pcap": ["--json", "--packets"],
    "doctor": [],
    "clean": ["--dry-run"],
    "reproduce": ["--list", "--quick", "--no-emulation", "--from", "--out", "--net"],
}

SMALL = textwrap.dedent("""\
    name: small_local
    description: "Ring allreduce on 2 loopback workers (CLI test)"
    topology: {kind: star, workers: 2}
    workload:
      kind: allreduce
      algorithm: ring
      sizes: [16, 1024]
      iterations: 4
      warmup: 1
      timeout_s: 60
    sweep:
      seed: 3
      quick: {set: {workload.iterations: 2}}
    figures: [goodput_vs_size, latency_cdf]
""")


def tb(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
            timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "INNET_TESTBED_RUN"}
    full_env.update(env or {})
    return subprocess.run([TESTBED, *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _out(res: subprocess.CompletedProcess) -> str:
    return f"exit {res.returncode}\n--- stdout ---\n{res.stdout[-3000:]}\n--- stderr ---\n{res.stderr[-3000:]}"


def assert_clear_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    """Non-zero exit, a one-screen message naming what is wrong, no traceback."""
    assert res.returncode != 0, _out(res)
    assert "Traceback" not in res.stderr + res.stdout, _out(res)
    assert res.stderr.startswith("error: "), _out(res)
    for n in needles:
        assert n in res.stderr, f"{n!r} not in the error\n{_out(res)}"


def _runs_under(out: Path) -> list[Path]:
    return sorted(m.parent for m in out.glob("*/*/manifest.json"))


def local_run(tmp: Path, scenario: Path, *args: str, attempts: int = 3
              ) -> tuple[subprocess.CompletedProcess, Path | None]:
    """`testbed run --net local` into a fresh --out folder.

    Local hosts use fixed TCP ports on 127.0.1.x, so another local run on the
    machine at the same moment can hold them; such a collision (and only that)
    is retried."""
    for attempt in range(attempts):
        out = tmp / f"out{attempt}"
        res = tb("run", str(scenario), "--net", "local", *args, "--out", str(out),
                      env={"INNET_TESTBED_REGISTRY": str(tmp / "registry")})
        runs = _runs_under(out)
        run = runs[-1] if runs else None
        collided = run is not None and any(
            "holds the port" in (p.get("error") or "") or "Address already in use" in (p.get("error") or "")
            for p in _jsonl(run / "points.jsonl"))
        if not collided:
            return res, run
    return res, run


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- help -----------------------------------------------------------------------
def test_top_level_help_lists_every_verb():
    res = tb("--help")
    assert res.returncode == 0, _out(res)
    assert "Usage: testbed" in res.stdout
    for verb in VERBS:
        assert re.search(rf"^\s+{verb}\b", res.stdout, re.M), f"{verb} missing from --help\n{res.stdout}"
    assert tb("-h").stdout == res.stdout


@pytest.mark.parametrize("verb", list(VERBS))
def test_verb_help(verb):
    res = tb(verb, "--help")
    assert res.returncode == 0, _out(res)
    assert f"Usage: testbed {verb}" in res.stdout
    for opt in [*VERBS[verb], "--help"]:
        assert opt in res.stdout, f"`testbed {verb} --help` does not mention {opt}\n{res.stdout}"


# --- errors a person can act on ---------------------------------------------------
def test_typo_in_scenario_names_file_line_field_and_fix(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("name: typo\ndescription: has a typo\ntopology: {wrokers: 4}\nworkload: {kind: allreduce}\n")
    res = tb("run", str(path), "--net", "local", "--out", str(tmp_path / "out"))
    assert_clear_error(res, f"{path}:3: topology.wrokers", "unknown field", "did you mean 'workers'")
    assert not (tmp_path / "out").exists(), "an invalid scenario must not create a results folder"


@pytest.mark.parametrize("override, needles", [
    ("nonexistent.key=1", ["nonexistent: unknown field", "(from --set nonexistent.key=1)"]),
    ("workload.iteratons=3", ["workload.iteratons: unknown field", "did you mean 'iterations'"]),
    ("workload.iterations=abc", ["workload.iterations: expected an integer", "'abc'"]),
    ("workload.iterations", ["expected key.path=value"]),
    ("workload.sizes=[1,", ["cannot parse the value"]),
], ids=["unknown-top", "typo-nested", "wrong-type", "no-equals", "bad-yaml"])
def test_bad_override_is_a_clear_error(tmp_path, override, needles):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL)
    res = tb("run", str(scenario), "--net", "local", "--set", override, "--out", str(tmp_path / "out"))
    assert_clear_error(res, str(scenario), *needles)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out", ["/proc/testbed-out", "/proc", "/sys/testbed-out"])
def test_unwritable_out_is_a_one_line_error_before_anything_starts(tmp_path, out):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL)
    res = tb("run", str(scenario), "--net", "local", "--out", out,
             env={"INNET_TESTBED_REGISTRY": str(tmp_path / "registry")})
    assert res.returncode == 2, _out(res)
    assert_clear_error(res, f"cannot write results under {out}", "choose another --out")
    assert len(res.stderr.strip().splitlines()) == 1, _out(res)
    assert "run folder:" not in res.stdout, "nothing may start before the --out check"
    assert not list((tmp_path / "registry").glob("*.json")) if (tmp_path / "registry").exists() else True


def test_max_points_flag_raises_the_sweep_limit(tmp_path):
    scenario = tmp_path / "grid.yaml"
    values = ", ".join(str(i) for i in range(1, 101))
    scenario.write_text(textwrap.dedent(f"""\
        name: grid
        topology: {{workers: 2}}
        workload: {{kind: allreduce, sizes: [16]}}
        sweep:
          max_points: 150
          grid: {{workload.iterations: [{values}], workload.warmup: [0, 1]}}
    """))
    res = tb("run", str(scenario), "--net", "local", "--out", str(tmp_path / "out"))
    assert_clear_error(res, "200 points", "limit of 150", "--max-points 200")
    assert not (tmp_path / "out").exists()
    # Raised by the flag, the sweep loads; the unwritable --out then stops the
    # run before it starts, which proves the sweep was accepted without running it.
    res = tb("run", str(scenario), "--net", "local", "--max-points", "200", "--out", "/proc/testbed-out")
    assert_clear_error(res, "cannot write results under /proc/testbed-out")


def test_missing_scenario_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    res = tb("run", str(missing), "--net", "local", "--out", str(tmp_path / "out"))
    assert_clear_error(res, str(missing), "no such scenario file", "testbed list")


def test_pcap_errors(tmp_path):
    missing = tmp_path / "missing.pcap"
    assert_clear_error(tb("pcap", str(missing)), str(missing), "no such file")
    garbage = tmp_path / "garbage.pcap"
    garbage.write_text("not a capture\n")
    assert_clear_error(tb("pcap", str(garbage)), str(garbage), "not a pcap file")
    empty_dir = tmp_path / "nopcaps"
    empty_dir.mkdir()
    assert_clear_error(tb("pcap", str(empty_dir)), "no .pcap files", str(empty_dir))


def test_show_and_plot_on_a_folder_without_runs(tmp_path):
    assert_clear_error(tb("show", str(tmp_path)), str(tmp_path), "no manifest.json")
    assert_clear_error(tb("plot", str(tmp_path)), str(tmp_path), "no manifest.json")


# --- a small local run and the verbs that read it ------------------------------------
@pytest.fixture(scope="module")
def local_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli_local")
    scenario = tmp / "small.yaml"
    scenario.write_text(SMALL)
    res, run = local_run(tmp, scenario, "--quick")
    return res, run


def test_local_quick_run(local_results):
    res, run = local_results
    assert res.returncode == 0, _out(res)
    assert run is not None and run.parent.name == "small_local"
    assert f"results: {run}" in res.stdout
    assert "Traceback" not in res.stderr

    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "ok" and m["net"] == "local" and m["cli"]["quick"] is True
    assert m["completed_points"] == 1 and len(m["points"]) == 1
    points = _jsonl(run / "points.jsonl")
    assert [p["status"] for p in points] == ["ok"], points

    ar = [r for r in _jsonl(run / "metrics.jsonl") if r.get("type") == "allreduce"]
    assert ar and all(r["ok"] is True for r in ar)
    measured = Counter((r["host"], r["size"]) for r in ar if not r["warmup"])
    # quick: 2 measured iterations per host and size (the quick `set`)
    assert measured == {(h, s): 2 for h in ("w1", "w2") for s in (16, 1024)}, measured
    with (run / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["size"]) for r in rows) == [16, 1024]
    assert all(r["status"] == "ok" and r["all_correct"] == "True" for r in rows)
    for h in ("w1", "w2"):
        assert (run / "logs" / points[0]["label"] / f"{h}.log").stat().st_size > 0
    for fig in ("goodput_vs_size", "latency_cdf"):          # drawn at the end of the run
        assert (run / "figures" / f"{fig}.png").read_bytes()[:4] == b"\x89PNG"
        assert (run / "figures" / f"{fig}.pdf").read_bytes()[:5] == b"%PDF-"


def test_show(local_results):
    _, run = local_results
    for target in (run, run.parent):    # a run folder, or the scenario folder (newest run)
        res = tb("show", str(target))
        assert res.returncode == 0, _out(res)
        assert str(run) in res.stdout
        assert "scenario small_local: status ok, net local" in res.stdout
        assert re.search(r"000-base-r0\s+ok", res.stdout), res.stdout
        assert "all_correct" in res.stdout          # the summary table
    res = tb("show", "--json", str(run))
    assert res.returncode == 0, _out(res)
    data = json.loads(res.stdout)
    assert data["manifest"]["status"] == "ok" and [p["status"] for p in data["points"]] == ["ok"]


def test_plot(local_results):
    _, run = local_results
    figures = run / "figures"
    for f in figures.glob("*"):
        f.unlink()
    res = tb("plot", str(run))
    assert res.returncode == 0, _out(res)
    for fig in ("goodput_vs_size", "latency_cdf"):
        for ext, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF-")):
            path = figures / f"{fig}.{ext}"
            assert path.read_bytes()[:len(magic)] == magic, path
            assert str(path) in res.stdout
    for f in figures.glob("*"):
        f.unlink()
    res = tb("plot", str(run), "--figure", "latency_cdf")
    assert res.returncode == 0, _out(res)
    assert sorted(f.name for f in figures.iterdir()) == ["latency_cdf.pdf", "latency_cdf.png"]
    assert_clear_error(tb("plot", str(run), "--figure", "no_such_figure"), "unknown figure", "no_such_figure")


def test_run_without_figures_exits_zero(tmp_path):
    """A scenario that lists no figures: the run succeeded, so exit 0 (no plot)."""
    scenario = tmp_path / "nofig.yaml"
    scenario.write_text(SMALL.replace("figures: [goodput_vs_size, latency_cdf]\n", "")
                        .replace("sizes: [16, 1024]", "sizes: [16]"))
    res, run = local_run(tmp_path, scenario, "--quick")
    assert res.returncode == 0, _out(res)
    assert run is not None and f"results: {run}" in res.stdout
    assert not (run / "figures").exists() or not any((run / "figures").iterdir())


def test_local_run_refuses_impairments_loudly(tmp_path):
    """--net local has no switch between hosts: a lossy point is skipped with the reason."""
    scenario = tmp_path / "lossy.yaml"
    scenario.write_text(SMALL.replace("topology: {kind: star, workers: 2}\n",
                                      "topology: {kind: star, workers: 2}\nlinks: {loss_pct: 1}\n"))
    res, run = local_run(tmp_path, scenario, "--quick", "--no-plot")
    assert res.returncode == 1, _out(res)
    assert "Traceback" not in res.stderr
    points = _jsonl(run / "points.jsonl")
    assert [p["status"] for p in points] == ["skipped"], points
    assert "--net local cannot apply loss_pct=1" in points[0]["error"]
    assert "SKIPPED" in res.stdout + res.stderr and "--net mininet" in res.stdout + res.stderr


def test_cli_set_wins_over_quick_set(tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL.replace("sizes: [16, 1024]", "sizes: [16]"))
    res, run = local_run(tmp_path, scenario, "--quick", "--no-plot", "--set", "workload.iterations=1")
    assert res.returncode == 0, _out(res)
    m = json.loads((run / "manifest.json").read_text())
    assert m["scenario"]["workload"]["iterations"] == 1
    ar = [r for r in _jsonl(run / "metrics.jsonl") if r.get("type") == "allreduce" and not r["warmup"]]
    assert Counter(r["host"] for r in ar) == {"w1": 1, "w2": 1}, "the run did not use --set workload.iterations=1"


# --- doctor, list, clean ------------------------------------------------------------
def test_doctor_prints_a_report():
    res = tb("doctor")
    assert res.returncode in (0, 1), _out(res)
    lines = res.stdout.splitlines()
    checks = [ln for ln in lines if re.match(r"^\[(ok  |skip|FAIL)\] ", ln)]
    assert len(checks) >= 5, res.stdout
    assert any(" mininet " in ln for ln in checks) and any(" namespaces " in ln for ln in checks)
    if res.returncode == 0:
        assert lines[-1] == "all required pieces present"
        assert not any(ln.startswith("[FAIL]") for ln in checks)
    else:
        assert "required piece(s) missing" in lines[-1]
        assert "fix:" in res.stdout


def test_list_shows_quickstart():
    res = tb("list")
    assert res.returncode == 0, _out(res)
    assert re.search(r"^\s+scenarios/quickstart\.yaml\s+\S", res.stdout, re.M), res.stdout
    assert "Recent runs:" in res.stdout
    res = tb("list", "--no-runs")
    assert res.returncode == 0 and "Recent runs:" not in res.stdout and "scenarios/quickstart.yaml" in res.stdout


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return None if rest[0] == "Z" else int(rest[19])


def test_version_names_the_release_and_commit():
    res = tb("--version")
    assert res.returncode == 0, _out(res)
    assert re.match(r"testbed \d+\.\d+\.\d+ \(git [0-9a-f]{12}", res.stdout), res.stdout


def test_dry_run_summary_is_one_line_per_point():
    res = tb("run", "scenarios/quickstart.yaml", "--dry-run", "--summary")
    assert res.returncode == 0, _out(res)
    lines = [ln for ln in res.stdout.splitlines() if re.match(r"^\d{3}-", ln)]
    assert len(lines) == 9 and all("command(s) on" in ln and "P4Runtime" in ln for ln in lines), res.stdout
    assert len(res.stdout.splitlines()) < 20
    assert_clear_error(tb("run", "scenarios/quickstart.yaml", "--summary"), "--dry-run")


def test_list_shows_runs_written_with_out(local_results):
    _, run = local_results
    assert run is not None
    res = tb("list")
    assert res.returncode == 0 and str(run) in res.stdout, _out(res)
    only = tb("list", str(run.parent.parent))
    assert only.returncode == 0 and str(run) in only.stdout, _out(only)


def test_clean_dry_run_on_empty_registry(tmp_path):
    res = tb("clean", "--dry-run", env={"INNET_TESTBED_REGISTRY": str(tmp_path / "registry")})
    assert res.returncode == 0, _out(res)
    assert "nothing to clean" in res.stdout


def test_clean_kills_only_recorded_processes_of_dead_runs(tmp_path):
    """A crashed run's record: clean kills its live recorded process, reports it,
    removes the record; a live run's record and unrecorded processes are untouched."""
    reg = tmp_path / "registry"
    reg.mkdir(mode=0o700)
    env = {"INNET_TESTBED_REGISTRY": str(reg)}
    results = tmp_path / "results" / "crashed"
    results.mkdir(parents=True)
    (results / "manifest.json").write_text(json.dumps({"status": "running"}))
    gone = subprocess.Popen(["true"])
    gone.wait()
    victim = subprocess.Popen(["sleep", "300"])
    bystander = subprocess.Popen(["sleep", "300"])     # recorded by a run that is still alive
    unrecorded = subprocess.Popen(["sleep", "300"])    # nobody recorded it
    try:
        for p in (victim, bystander, unrecorded):
            deadline = time.monotonic() + 10
            while _start_time(p.pid) is None and time.monotonic() < deadline:
                time.sleep(0.02)
        dead = {"run_id": "dead-run", "runner": {"pid": gone.pid, "start": 1},
                "children": [{"pid": victim.pid, "start": _start_time(victim.pid), "role": "w1: sleep"},
                             {"pid": gone.pid, "start": 1, "role": "w2: gone"}],
                "netns_inode": None, "netns": [], "results_dir": str(results)}
        live = {"run_id": "live-run", "runner": {"pid": os.getpid(), "start": _start_time(os.getpid())},
                "children": [{"pid": bystander.pid, "start": _start_time(bystander.pid), "role": "w1: sleep"}],
                "netns_inode": None, "netns": [], "results_dir": None}
        (reg / "dead-run.json").write_text(json.dumps(dead))
        (reg / "live-run.json").write_text(json.dumps(live))

        dry = tb("clean", "--dry-run", env=env)
        assert dry.returncode == 0, _out(dry)
        assert f"run dead-run: would kill {victim.pid} (w1: sleep)" in dry.stdout, dry.stdout
        assert "live-run" not in dry.stdout
        assert (reg / "dead-run.json").exists() and victim.poll() is None

        res = tb("clean", env=env)
        assert res.returncode == 0, _out(res)
        assert f"run dead-run: killed {victim.pid} (w1: sleep, SIGTERM)" in res.stdout, res.stdout
        assert f"removed {reg / 'dead-run.json'}" in res.stdout
        assert f"results folder {results} is incomplete" in res.stdout
        assert "live-run" not in res.stdout
        assert victim.wait(timeout=30) == -signal.SIGTERM
        assert not (reg / "dead-run.json").exists() and (reg / "live-run.json").exists()
        assert bystander.poll() is None and unrecorded.poll() is None
        assert json.loads((results / "manifest.json").read_text()) == {"status": "running"}  # kept as is

        again = tb("clean", env=env)
        assert again.returncode == 0 and "nothing to clean" in again.stdout, _out(again)
    finally:
        for p in (victim, bystander, unrecorded):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_set_on_a_swept_key_says_it_pins_it_and_the_manifest_says_what_ran(tmp_path):
    res = tb("run", "scenarios/torch/lenet.yaml", "--quick", "--set", "workload.collective=switch",
             "--dry-run", "--summary")
    assert res.returncode == 0, _out(res)
    assert "--set workload.collective=switch pins a swept key" in res.stderr and "(1 point(s)" in res.stderr
    from testbed.scenario import expand_points, load_scenario
    ran = expand_points(load_scenario(ROOT / "scenarios/torch/lenet.yaml", ["workload.collective=switch"]),
                        quick=True).ran()
    assert ran["grid"]["workload.collective"] == ["switch"] and ran["pinned"] == {"workload.collective": "switch"}


def test_a_users_script_is_found_from_the_current_folder_and_told_about_the_scenarios_args(tmp_path):
    (tmp_path / "mine.py").write_text("print('hello')\n")
    (tmp_path / "adir").mkdir()
    res = tb("run", str(ROOT / "scenarios/torch/lenet.yaml"), "--quick", "--set", "workload.script=mine.py",
             "--dry-run", "--summary", cwd=tmp_path)
    assert res.returncode == 0, _out(res)
    assert "your script gets the scenario's workload.args ['--model', 'lenet'" in res.stderr
    cleared = tb("run", str(ROOT / "scenarios/torch/lenet.yaml"), "--quick", "--set", "workload.script=mine.py",
                 "--set", "workload.args=[]", "--dry-run", "--summary", cwd=tmp_path)
    assert cleared.returncode == 0 and "workload.args" not in cleared.stderr, _out(cleared)
    folder = tb("run", str(ROOT / "scenarios/torch/lenet.yaml"), "--set", "workload.script=adir", "--dry-run",
                cwd=tmp_path)
    assert_clear_error(folder, "is a folder")
