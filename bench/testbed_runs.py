"""The measuring half of the benchmarks that run the real testbed (Mininet + soft
switch): `testbed run` invocations one after another, each after the machine
quietened, with a /proc sampler going (machine CPU and the CPU time of this
benchmark's own processes), the sources fingerprinted before and after, and the
run folders read back (RunData). The analyses and tables are the benchmarks' own
(bench/allreduce_report.py).

    res, sampler = measure("ina_aggrate", out_dir, params, {"aggrate": (yaml_text, 300)})
    ... analyse RunData(res["runs"]["aggrate"]["run_dir"]) with sampler ...; res["table"] = ...
    save(res)          # res["json_path"], and the table on stdout
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
QUIET_MAX_WAIT_S, QUIET_CORES = 45.0, 0.5    # before each run: wait up to 45 s for < 0.5 busy cores


# --- /proc sampler --------------------------------------------------------------------

_TCK = os.sysconf("SC_CLK_TCK")
_HOST_RE = re.compile(r"/points/([^/]+)/([A-Za-z0-9_-]+)\.config\.json")
_SWITCH_RE = re.compile(r"/logs/([^/]+)/switches/([A-Za-z0-9_-]+)/")


def _machine_jiffies() -> tuple[int, int, int, int]:
    """(busy, total, irq+softirq, steal) jiffies of all CPUs since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]] + [0] * 8
    idle = v[3] + v[4]                                         # idle + iowait
    total = sum(v[:8])                                         # guest time is inside user
    return total - idle, total, v[5] + v[6], v[7]


def busy_cores(interval: float = 1.0) -> float:
    """CPU cores busy over the next `interval` seconds (whole machine)."""
    b0, t0, _, _ = _machine_jiffies()
    time.sleep(interval)
    b1, t1, _, _ = _machine_jiffies()
    return (b1 - b0) / max(1, t1 - t0) * (os.cpu_count() or 1)


def _proc_stat(pid: int) -> tuple[int, float, str] | None:
    """(starttime ticks, utime+stime seconds, comm) of pid, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[19]), (int(rest[11]) + int(rest[12])) / _TCK, s[s.index("(") + 1:s.rindex(")")]


def _cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


class ProcSampler(threading.Thread):
    """Machine CPU, the CPU time of our own processes (matched by `needle` in their
    command line: host programs and soft switches of this benchmark's runs, and the
    runners whose pids run_testbed registers) and, sparsely, everyone else's, every
    `interval` seconds."""

    def __init__(self, needle: str, interval: float = 0.25):
        super().__init__(daemon=True, name="proc-sampler")
        self.needle, self.interval = needle, interval
        self.runner_pids: set[int] = set()
        self.machine: list[tuple[float, int, int, int, int]] = []      # t, busy, total, irq, steal
        self.series: dict[tuple[str, str, int], list[tuple[float, float]]] = defaultdict(list)
        self._known: dict[int, tuple[int, tuple[str, str] | None]] = {}    # pid -> (start, key|None)
        # other processes: (pid, start) -> [description, [(t, cpu)] at changes], last (t, cpu)
        self.others: dict[tuple[int, int], list] = {}
        self._last: dict[tuple[int, int], tuple[float, float]] = {}
        self._halt = threading.Event()

    def _classify(self, pid: int, cmd: str | None) -> tuple[str, str] | None | bool:
        """(label, role) for ours, None for not ours, False for 'ours, not yet known'."""
        if cmd is None or self.needle not in cmd:
            return None
        if pid in self.runner_pids:
            return "*", "runner"
        # exec (mnexec -> setpriv -> python) keeps the pid: any stage identifies the process
        if "hosts." in cmd and (m := _HOST_RE.search(cmd)):
            return m.group(1), m.group(2)
        if "testbed.switch.soft" in cmd and (m := _SWITCH_RE.search(cmd)):
            return m.group(1), "switch:" + m.group(2)
        return False        # e.g. a child of the runner between fork and exec

    def sample(self) -> None:
        t = time.time()
        self.machine.append((t, *_machine_jiffies()))
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            st = _proc_stat(pid)
            if st is None:
                continue
            start, cpu, comm = st
            known = self._known.get(pid)
            if known is None or known[0] != start or (known[1] is None and pid in self.runner_pids):
                cmd = _cmdline(pid)
                key = self._classify(pid, cmd)
                if key is False:          # ours, but not exec'd yet: look again next time
                    continue
                known = self._known[pid] = (start, key)
                if key is None:
                    desc = "bench (this process)" if pid == os.getpid() else \
                        (f"{comm}: {cmd[:100]}" if cmd else f"[{comm}]")
                    self.others[(pid, start)] = [desc, [(t, cpu)]]
            if known[1] is not None:
                label, role = known[1]
                self.series[(label, role, pid)].append((t, cpu))
            else:
                k = (pid, start)
                last = self._last.get(k)
                if last is not None and cpu != last[1]:
                    ser = self.others[k][1]
                    if ser[-1][0] != last[0]:
                        ser.append(last)
                    ser.append((t, cpu))
                self._last[k] = (t, cpu)

    def top_others(self, t0: float, t1: float, n: int = 3) -> list[list]:
        """The n biggest CPU users in [t0, t1] that are not ours: [description, cores]."""
        by: dict[str, float] = defaultdict(float)
        for k, (desc, ser) in self.others.items():
            last = self._last.get(k)
            pts = ser + ([last] if last and last[0] > ser[-1][0] else [])
            if len(pts) < 2:
                continue
            by[desc] += max(0.0, self._at(pts, t1) - self._at(pts, t0))
        top = sorted(by.items(), key=lambda kv: -kv[1])[:n]
        return [[d, round(c / (t1 - t0), 2)] for d, c in top if c / (t1 - t0) >= 0.02]

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sampler must not kill the benchmark
                pass
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
        try:
            self.sample()
        except Exception:  # noqa: BLE001
            pass

    # -- queries --------------------------------------------------------------------------
    @staticmethod
    def _at(series: list[tuple[float, float]], t: float) -> float:
        ts = [s[0] for s in series]
        return float(np.interp(t, ts, [s[1] for s in series]))

    def machine_cores(self, t0: float, t1: float) -> dict[str, float] | None:
        """Cores busy in [t0, t1]: all, of which irq+softirq (packet processing) and steal."""
        m = self.machine
        if len(m) < 2 or t1 <= t0:
            return None
        ts = [x[0] for x in m]
        d = [float(np.diff(np.interp([t0, t1], ts, [x[i] for x in m]))[0]) for i in (1, 2, 3, 4)]
        if d[1] <= 0:
            return None
        n = os.cpu_count() or 1
        return {"busy": d[0] / d[1] * n, "irq": d[2] / d[1] * n, "steal": d[3] / d[1] * n}

    def cpu_by_role(self, label: str, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds each of our processes of point `label` used in [t0, t1]."""
        out: dict[str, float] = defaultdict(float)
        for (lab, role, _pid), s in self.series.items():
            if lab != label or len(s) < 1:
                continue
            out[role] += max(0.0, self._at(s, t1) - self._at(s, t0))
        return dict(out)

    def runner_cpu(self, t0: float, t1: float) -> float:
        return sum(max(0.0, self._at(s, t1) - self._at(s, t0))
                   for (lab, role, _), s in self.series.items() if role == "runner")


# --- running one scenario ---------------------------------------------------------------

def testbed_argv() -> list[str]:
    """`testbed` of this checkout, run with cwd=ROOT. Not the environment's `testbed`
    script: it imports the checkout the environment was installed from (an editable
    install), so a benchmark run from a second worktree would run the first one's code
    while source_fingerprint names its own."""
    return [sys.executable, "-m", "testbed"]


FINGERPRINT_GLOBS = ("hosts/ina/*.py", "hosts/collectives/*.py", "hosts/allreduce.py", "hosts/common/*.py",
                     "testbed/switch/soft/*.py", "testbed/switch/*.py", "testbed/wire.py",
                     "testbed/workloads/allreduce.py", "testbed/runner.py")


def source_fingerprint() -> dict[str, Any]:
    """Which code the runs used: commit, uncommitted files, and a hash of the sources
    the host programs and the switch import (other people may edit the tree meanwhile)."""
    import hashlib  # noqa: PLC0415

    h = hashlib.sha256()
    for g in FINGERPRINT_GLOBS:
        for f in sorted(ROOT.glob(g)):
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())

    def git(*a: str) -> str | None:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    return {"commit": git("rev-parse", "HEAD"), "sources_sha256": h.hexdigest()[:16],
            "uncommitted": (git("status", "--porcelain", "--untracked-files=no") or "").splitlines()}


def wait_for_quiet(max_wait_s: float = QUIET_MAX_WAIT_S, below_cores: float = QUIET_CORES) -> dict:
    """Other work shares these cores: wait (bounded) until the machine is nearly idle."""
    t0 = time.time()
    busy = busy_cores()
    while busy > below_cores and time.time() - t0 < max_wait_s:
        busy = busy_cores(2.0)
    return {"waited_s": round(time.time() - t0, 1), "busy_cores_at_start": round(busy, 2),
            "quiet": busy <= below_cores}


def run_testbed(kind: str, yaml_text: str, work: Path, sampler: ProcSampler,
                timeout_s: float) -> dict[str, Any]:
    """One `testbed run` of `yaml_text` (written to <work>/scenarios/<kind>.yaml) after the machine
    quietened, its runner's pid handed to the sampler; stopped cleanly after timeout_s."""
    scen = work / "scenarios" / f"{kind}.yaml"
    scen.parent.mkdir(parents=True, exist_ok=True)
    scen.write_text(yaml_text)
    runs = work / "runs"
    argv = testbed_argv() + ["run", str(scen), "--out", str(runs), "--no-plot"]
    log = work / f"{kind}.log"
    quiet = wait_for_quiet()
    src0 = source_fingerprint()
    load0, t0 = os.getloadavg(), time.time()
    print(f"--- {kind}: {shlex.join(argv)}", file=sys.stderr, flush=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        sampler.runner_pids.add(proc.pid)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()          # the runner turns SIGTERM into a clean teardown
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            rc = f"timeout after {timeout_s}s (rc {rc})"
    src1 = source_fingerprint()
    text = log.read_text(errors="replace")
    m = re.findall(r"^results: (.+)$", text, re.M)
    run_dir = Path(m[-1].strip()) if m else None
    if run_dir is None or not run_dir.is_dir():
        cands = sorted((runs / yaml_text.split("\n", 1)[0].split(":", 1)[1].strip()).glob("*"))
        run_dir = cands[-1] if cands else None
    return {"kind": kind, "command": shlex.join(argv), "scenario_file": str(scen), "log": str(log),
            "returncode": rc, "run_dir": str(run_dir) if run_dir else None,
            "wall_s": round(time.time() - t0, 1), "loadavg_before": load0, "quiet_wait": quiet,
            "sources_before": src0, "sources_changed_during_run": src1["sources_sha256"] != src0["sources_sha256"], "sources_after": src1,
            "loadavg_after": os.getloadavg()}


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunData:
    """One run folder: points, metric records per point, switch stats, active windows."""

    def __init__(self, run_dir: str | None):
        self.dir = Path(run_dir) if run_dir else None
        self.points = read_jsonl(self.dir / "points.jsonl") if self.dir else []
        metrics = read_jsonl(self.dir / "metrics.jsonl") if self.dir else []
        self.records: dict[str, list[dict]] = defaultdict(list)
        for r in metrics:
            self.records[r["label"]].append(r)

    def switch_stats(self, label: str) -> dict:
        p = self.dir / "points" / label / "switch_stats.json"
        return json.loads(p.read_text()).get("s1", {}) if p.exists() else {}

    def window(self, label: str) -> tuple[float, float] | None:
        """Common start of the hosts -> the last host's last record (file mtime)."""
        starts = [r["started_at"] for r in self.records[label]
                  if r.get("type") == "summary" and r.get("started_at")]
        ends = [f.stat().st_mtime for f in (self.dir / "points" / label).glob("w*.jsonl")]
        if not starts or not ends:
            return None
        return min(starts), max(ends)


def unavailable_reason() -> str | None:
    try:
        import mininet.net  # noqa: F401, PLC0415
    except ImportError:
        return "mininet not importable"
    for tool in ("mnexec", "ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if os.geteuid() != 0:
        r = subprocess.run(["unshare", "-Urn", "true"], capture_output=True)
        if r.returncode != 0:
            return "not root and no unprivileged user namespaces (Mininet needs one or the other)"
    return None


# --- one benchmark's runs, measured and saved -------------------------------------------

def measure(name: str, out_dir: str | Path, params: dict, runs: dict[str, tuple[str, float]],
            **fields: Any) -> tuple[dict[str, Any], ProcSampler]:
    """Run each scenario of `runs` ({kind: (yaml text, timeout s)}) in turn in a work
    folder <out_dir>/<name>-<timestamp>/, the sampler going throughout. Returns the
    result so far (`runs` by kind, loads, wall time, the json_path `save` writes;
    `fields` go in after `started`) and the stopped sampler, for the analyses."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = out_dir / f"{name}-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"benchmark": name, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           **fields, "params": params, "cpus": os.cpu_count(),
                           "loadavg_before": os.getloadavg(), "work_dir": str(work), "runs": {}}
    t0 = time.time()
    sampler = ProcSampler(str(work))
    sampler.start()
    try:
        for kind, (yaml_text, timeout_s) in runs.items():
            res["runs"][kind] = run_testbed(kind, yaml_text, work, sampler, timeout_s)
    finally:
        sampler.stop()
    res["loadavg_after"] = os.getloadavg()
    res["wall_s"] = round(time.time() - t0, 1)
    res["json_path"] = str(out_dir / f"{name}-{stamp}.json")
    return res, sampler


def p50_by_algorithm(run_dir: str | None) -> dict[str, float]:
    """{algorithm: p50 ms} of the ok points in a run's summary.csv (allreduce runs)."""
    import csv  # noqa: PLC0415
    if not run_dir or not (Path(run_dir) / "summary.csv").exists():
        return {}
    with open(Path(run_dir) / "summary.csv") as f:
        # emu_p50_ms since the summary says which times are emulated (p50_ms in older runs)
        return {r["algorithm"]: float(r.get("emu_p50_ms") or r["p50_ms"]) for r in csv.DictReader(f)
                if r["status"] == "ok"}


def repeats_main(run: Callable[..., dict], doc: str, argv: list[str] | None = None) -> int:
    """The command line of a benchmark that alternates testbed runs:
    `run(out, repeats, iterations)` with --repeats, --iterations, --out."""
    import argparse  # noqa: PLC0415
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    a = ap.parse_args(argv)
    res = run(a.out, a.repeats, a.iterations)
    if res.get("skipped"):
        print(f"skipped: {res['skipped']}", file=sys.stderr)
    return 0


def save(res: dict[str, Any]) -> dict[str, Any]:
    """Write the finished result to its json_path and print its table."""
    Path(res["json_path"]).write_text(json.dumps(res, indent=1, default=str))
    print(res["table"], flush=True)
    return res
