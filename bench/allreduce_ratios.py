"""In-switch vs ring allreduce, side by side on the real testbed (Mininet + soft switch).

Three `testbed run` invocations (each one run, so its points are measured side by
side on the same machine state), written as scenario files into the work folder:

1. latency  - N=8 star, no bandwidth limit, no loss, 64 float32 values:
              p50/p99 allreduce latency of switch and ring, ratio switch/ring
              (issue target <= 0.3).
2. goodput  - 1M float32 values (4 MiB) over shaped links (10 and 20 Mbit/s),
              N=4 and 8: the goodput ratio switch/ring against the algorithmic
              limit 2(N-1)/N (ring sends 2(N-1)/N x the tensor per host, in-switch
              sends it once up and once down) and against the header-adjusted
              limit (INA frames carry 256 B of values in 314 B, ring TCP 1448 B in
              1514 B). Says whether the in-switch path was link- or CPU-bound.
3. aggrate  - the switch algorithm on unlimited links, N=2, 4, 8, 1M values:
              input packets/s at the soft switch process and its CPU us per
              packet (64 int32 values per packet), from the INA counters
              (metrics.jsonl type switch_counters) and the switch's own stats.

While the runs go, a sampler thread reads /proc every 0.25 s: machine CPU
(/proc/stat) and the CPU time of this benchmark's own processes (the host
programs and soft switches whose command line names this work folder), so the
CPU used in each point's active window (common start -> last host record) is
known per host and for the switch. Nothing here asserts a timing: it reports.

    .venv/bin/python -m bench allreduce_ratios        # via the bench runner
    .venv/bin/python -m bench.allreduce_ratios [--quick] [--out DIR]
    .venv/bin/python -m bench.allreduce_ratios --retable results/bench/allreduce_ratios-<ts>.json

Each run waits (at most 45 s) for the machine to be nearly idle first, and records a
hash of the host/switch sources before and after: the result says so if the tree
changed while it ran.
"""
from __future__ import annotations

import argparse
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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
NAME = "allreduce_ratios"

VALUES_PER_PACKET = 64
INA_FRAME = 14 + 20 + 8 + 16 + 4 * VALUES_PER_PACKET     # 314 B on the wire (htb counts it)
INA_PAYLOAD = 4 * VALUES_PER_PACKET                      # 256 B of values
TCP_FRAME, TCP_PAYLOAD = 1514, 1448                      # MTU 1500, TCP timestamps on
INA_WINDOW = 64                                          # hosts.common.config.InaSettings.window

# Parameters of the three runs (full / --quick).
FULL = {"lat_iters": 300, "lat_warmup": 20, "gp_size": 1 << 20, "gp_iters": 3,
        "gp_workers": [4, 8], "gp_mbps": [10, 20], "agg_size": 1 << 20, "agg_iters": 3,
        "agg_workers": [2, 4, 8]}
QUICK = {"lat_iters": 50, "lat_warmup": 5, "gp_size": 1 << 16, "gp_iters": 2,
         "gp_workers": [4], "gp_mbps": [20], "agg_size": 1 << 16, "agg_iters": 2,
         "agg_workers": [2, 4]}
QUIET_MAX_WAIT_S, QUIET_CORES = 45.0, 0.5    # before each run: wait up to 45 s for < 0.5 busy cores
RUN_TIMEOUT_S = {"latency": 240, "goodput": 480, "aggrate": 300}


# --- scenarios ------------------------------------------------------------------------

def scenarios(p: dict) -> dict[str, str]:
    common = ("switch: {backend: soft, program: ina, capture: false}   # pcaps would cost switch CPU\n"
              "sweep:\n  seed: 1\n")
    lat = (f"name: bench_allreduce_latency\n"
           f"description: in-switch vs ring latency, 64 float32, N=8, unlimited links\n"
           f"topology: {{kind: star, workers: 8}}\n"
           f"links: {{bandwidth_mbps: null}}\n"
           f"workload: {{kind: allreduce, algorithm: switch, sizes: [64], "
           f"iterations: {p['lat_iters']}, warmup: {p['lat_warmup']}}}\n"
           + common + "  grid: {workload.algorithm: [switch, ring]}\n")
    gp = (f"name: bench_allreduce_goodput\n"
          f"description: in-switch vs ring goodput of a large tensor over shaped links\n"
          f"topology: {{kind: star, workers: 8}}\n"
          f"links: {{bandwidth_mbps: 10}}\n"
          f"workload: {{kind: allreduce, algorithm: switch, sizes: [{p['gp_size']}], "
          f"iterations: {p['gp_iters']}, warmup: 0}}\n"
          + common +
          f"  grid:\n    topology.workers: {p['gp_workers']}\n"
          f"    links.bandwidth_mbps: {p['gp_mbps']}\n"
          f"    workload.algorithm: [switch, ring]\n")
    agg = (f"name: bench_allreduce_aggrate\n"
           f"description: soft-switch aggregation rate, switch algorithm, unlimited links\n"
           f"topology: {{kind: star, workers: 2}}\n"
           f"links: {{bandwidth_mbps: null}}\n"
           f"workload: {{kind: allreduce, algorithm: switch, sizes: [{p['agg_size']}], "
           f"iterations: {p['agg_iters']}, warmup: 0}}\n"
           + common + f"  grid: {{topology.workers: {p['agg_workers']}}}\n")
    return {"latency": lat, "goodput": gp, "aggrate": agg}


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
    exe = Path(sys.executable).with_name("testbed")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]


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


def run_testbed(kind: str, yaml_text: str, work: Path, sampler: ProcSampler) -> dict[str, Any]:
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
            rc = proc.wait(timeout=RUN_TIMEOUT_S[kind])
        except subprocess.TimeoutExpired:
            proc.terminate()          # the runner turns SIGTERM into a clean teardown
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            rc = f"timeout after {RUN_TIMEOUT_S[kind]}s (rc {rc})"
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


def iteration_latencies(recs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(all per-rank latencies pooled, per-iteration max over ranks), measured only."""
    pooled, per_iter = [], defaultdict(list)
    for r in recs:
        if r.get("type") == "allreduce" and not r.get("warmup"):
            pooled.append(r["latency_s"])
            per_iter[(r["size"], r["iter"])].append(r["latency_s"])
    return np.array(pooled), np.array([max(v) for v in per_iter.values()])


def transport_totals(recs: list[dict]) -> dict[str, Any]:
    tot: dict[str, Any] = defaultdict(int)
    per_host, rtt50, rtt99 = {}, [], []
    for r in recs:
        t = r.get("transport") if r.get("type") == "summary" else None
        if not t:
            continue
        for k, v in t.items():
            if isinstance(v, int) and not isinstance(v, bool):
                tot[k] += v
        per_host[r["host"]] = {"retransmissions": t.get("retransmissions"),
                               "chunks_sent": t.get("chunks_sent"),
                               "chunk_rtt_p50_ms": _ms(t.get("chunk_latency_p50_s")),
                               "chunk_rtt_p99_ms": _ms(t.get("chunk_latency_p99_s"))}
        if t.get("chunk_latency_p50_s") is not None:
            rtt50.append(t["chunk_latency_p50_s"])
            rtt99.append(t["chunk_latency_p99_s"])
    out = dict(tot)
    if out.get("chunks_sent"):
        out["retx_pct"] = round(100 * out.get("retransmissions", 0) / out["chunks_sent"], 2)
        worst = max(per_host.items(), key=lambda kv: (kv[1]["retransmissions"] or 0)
                    / max(1, kv[1]["chunks_sent"] or 1))
        out["worst_host"] = {"host": worst[0], **worst[1],
                             "retx_pct": round(100 * (worst[1]["retransmissions"] or 0)
                                               / max(1, worst[1]["chunks_sent"] or 1), 2)}
        out["chunk_rtt_p50_ms_median_host"] = _ms(float(np.median(rtt50))) if rtt50 else None
        out["chunk_rtt_p99_ms_max_host"] = _ms(max(rtt99)) if rtt99 else None
    return out


def ina_counters(recs: list[dict]) -> dict[str, int]:
    for r in recs:
        if r.get("type") == "switch_counters" and r.get("switch") == "s1":
            return {k.split(".", 1)[-1]: sum(int(v.get("packets", 0)) for v in d.values())
                    for k, d in r["counters"].items()}
    return {}


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1e3, 3)


def _r(x: float | None, n: int = 3) -> float | None:
    return None if x is None else round(float(x), n)


def cpu_in_window(run: RunData, label: str, sampler: ProcSampler) -> dict[str, Any]:
    w = run.window(label)
    if w is None:
        return {}
    t0, t1 = w
    dt = t1 - t0
    by_role = sampler.cpu_by_role(label, t0, t1)
    hosts = sum(v for k, v in by_role.items() if not k.startswith("switch:"))
    switch = by_role.get("switch:s1")
    m = sampler.machine_cores(t0, t1) or {}
    machine = m.get("busy")
    runner = sampler.runner_cpu(t0, t1)
    mine = hosts + (switch or 0) + runner
    return {"window_s": round(dt, 3), "t0": round(t0, 3), "t1": round(t1, 3),
            "machine_busy_cores": _r(machine, 2), "cores": os.cpu_count(),
            "irq_softirq_cores": _r(m.get("irq"), 2), "steal_cores": _r(m.get("steal"), 2),
            "hosts_cores": _r(hosts / dt, 2), "switch_cores": _r(switch / dt, 2) if switch is not None else None,
            "runner_cores": _r(runner / dt, 2),
            # everything else: other processes on the machine, kernel packet processing
            # (softirq, also counted in irq_softirq_cores), Mininet's shells
            "other_cores": _r(machine - mine / dt, 2) if machine is not None else None,
            "top_other_processes": sampler.top_others(t0, t1),
            "switch_cpu_s": _r(switch), "hosts_cpu_s": _r(hosts),
            "per_host_cores": {k: _r(v / dt, 2) for k, v in sorted(by_role.items()) if not k.startswith("switch:")}}


def switch_brief(st: dict) -> dict[str, Any]:
    if not st:
        return {}
    ports = st.get("ports", {}).values()
    loop = st.get("loop", {})
    rx = sum(p.get("rx", 0) for p in ports)
    return {"cpu_time_s": _r(st.get("cpu_time_s")), "wall_time_s": _r(st.get("wall_time_s")),
            "runqueue_wait_s": _r(st.get("runqueue_wait_s")),
            "rx": rx, "tx": sum(p.get("tx", 0) for p in ports),
            "rx_bytes": sum(p.get("rx_bytes", 0) for p in ports),
            "rx_kernel_drops": sum(p.get("rx_kernel_drops", 0) for p in ports),
            "tx_dropped": sum(p.get("tx_dropped", 0) for p in ports),
            "mean_rx_batch": _r(rx / loop["rx_batches"], 1) if loop.get("rx_batches") else None,
            "max_rx_batch": loop.get("max_rx_batch"),
            "ctx_switches": st.get("ctx_switches")}


# --- analyses -------------------------------------------------------------------------------

def analyze_latency(run: RunData, sampler: ProcSampler) -> dict[str, Any]:
    rows = {}
    for p in run.points:
        label = p["label"]
        alg = p["params"].get("workload.algorithm")
        row: dict[str, Any] = {"label": label, "status": p["status"], "error": p.get("error")}
        if p["status"] == "ok":
            pooled, per_iter = iteration_latencies(run.records[label])
            row.update({"samples": int(pooled.size), "iterations": int(per_iter.size),
                        "p50_ms": _ms(np.percentile(pooled, 50)), "p99_ms": _ms(np.percentile(pooled, 99)),
                        "iter_max_p50_ms": _ms(np.percentile(per_iter, 50)),
                        "iter_max_p99_ms": _ms(np.percentile(per_iter, 99)),
                        "cpu": cpu_in_window(run, label, sampler),
                        "switch": switch_brief(run.switch_stats(label))})
            if alg == "switch":
                tr = transport_totals(run.records[label])
                row["transport"] = tr
                row["ina_counters"] = ina_counters(run.records[label])
                # one MAX round (scale) + one SUM round per float tensor
                row["rounds_per_allreduce"] = 2
            else:
                n = 8
                row["ring_steps_per_allreduce"] = 2 * (n - 1)
        rows[alg] = row
    out: dict[str, Any] = {"workers": 8, "values": 64, "dtype": "float32", "points": rows,
                           "target_ratio_max": 0.3}
    s, r = rows.get("switch", {}), rows.get("ring", {})
    if s.get("p50_ms") and r.get("p50_ms"):
        out["ratio_p50"] = _r(s["p50_ms"] / r["p50_ms"])
        out["ratio_p99"] = _r(s["p99_ms"] / r["p99_ms"])
        out["ratio_iter_max_p50"] = _r(s["iter_max_p50_ms"] / r["iter_max_p50_ms"])
        out["ratio_iter_max_p99"] = _r(s["iter_max_p99_ms"] / r["iter_max_p99_ms"])
        out["meets_target"] = out["ratio_p50"] <= 0.3 and out["ratio_p99"] <= 0.3
    return out


def ideal_times(n: int, mbps: float, size_values: int) -> dict[str, float]:
    """Link-limited times of one allreduce of size_values float32 on links of mbps."""
    s = size_values * 4
    bps = mbps * 1e6
    ring_payload = 2 * (n - 1) / n * s
    nchunks = -(-size_values // VALUES_PER_PACKET)
    return {"ring_payload_s": ring_payload * 8 / bps,
            "ring_wire_s": ring_payload * TCP_FRAME / TCP_PAYLOAD * 8 / bps,
            "switch_payload_s": s * 8 / bps,
            "switch_wire_s": (s + nchunks * (INA_FRAME - INA_PAYLOAD)) * 8 / bps}


def bound_verdict(row: dict) -> str:
    """What limited one goodput point (median iteration), from its saved numbers."""
    link_eff = row.get("link_efficiency")
    if link_eff is None:
        return "unknown"
    cpu, tr = row.get("cpu") or {}, row.get("transport") or {}
    machine = cpu.get("machine_busy_cores")
    cores = cpu.get("cores") or 2
    sw = cpu.get("switch_cores")
    retx = tr.get("retx_pct") or 0
    parts = []
    if link_eff >= 0.9:
        parts.append(f"link-bound ({link_eff:.0%} of the header-adjusted link time)")
    else:
        if retx >= 10:
            parts.append(f"retransmission-bound: {retx:.0f}% spurious INA retransmissions add "
                         f"frames on both directions of the shaped links")
        if machine is not None and machine >= 0.9 * cores:
            parts.append(f"CPU-bound: machine {machine:.2f}/{cores} cores busy (hosts "
                         f"{cpu.get('hosts_cores')}, switch {sw}, others+kernel {cpu.get('other_cores')})")
        elif sw is not None and sw >= 0.9:
            parts.append(f"switch CPU-bound ({sw:.2f} cores)")
        else:
            parts.append(f"neither link nor CPU saturated (machine {machine} of {cores} cores, switch {sw})")
    if retx >= 2 and (link_eff >= 0.9 or retx < 10):
        parts.append(f"{retx:.1f}% spurious retransmissions")
    its = [t for t in row.get("iter_times_s") or [] if t]
    if its and row.get("time_s") and max(its) > 1.5 * row["time_s"]:
        parts.append(f"one iteration took {max(its):.1f} s (median {row['time_s']:.2f} s)")
    return "; ".join(parts)


def analyze_goodput(run: RunData, sampler: ProcSampler, size: int) -> dict[str, Any]:
    pts: dict[tuple[int, float], dict[str, dict]] = defaultdict(dict)
    for p in run.points:
        label = p["label"]
        n, mbps, alg = (p["params"]["topology.workers"], p["params"]["links.bandwidth_mbps"],
                        p["params"]["workload.algorithm"])
        ideal = ideal_times(n, mbps, size)
        row: dict[str, Any] = {"label": label, "status": p["status"], "error": p.get("error")}
        if p["status"] == "ok":
            recs = run.records[label]
            pooled, per_iter = iteration_latencies(recs)
            t = float(np.median(per_iter))
            wire_ideal = ideal["switch_wire_s"] if alg == "switch" else ideal["ring_wire_s"]
            row.update({"iterations": int(per_iter.size), "iter_times_s": [_r(x) for x in per_iter],
                        "time_s": _r(t), "pooled_p50_s": _r(np.percentile(pooled, 50)),
                        "goodput_mbps": _r(size * 4 * 8 / t / 1e6, 2),
                        "ideal_wire_s": _r(wire_ideal),
                        "link_efficiency": _r(wire_ideal / t),
                        "cpu": cpu_in_window(run, label, sampler),
                        "switch": switch_brief(run.switch_stats(label))})
            if alg == "switch":
                tr = transport_totals(recs)
                row["transport"] = tr
                row["ina_counters"] = ina_counters(recs)
                # window-limited rate of one worker: window frames per chunk round trip
                rtt = tr.get("chunk_rtt_p50_ms_median_host")
                row["window_limited_mbps"] = _r(INA_WINDOW * INA_FRAME * 8 / (rtt / 1e3) / 1e6, 1) if rtt else None
                row["window_serialization_ms"] = _r(INA_WINDOW * INA_FRAME * 8 / (mbps * 1e6) * 1e3, 2)
            else:
                sw = row["switch"]
                n_iters = per_iter.size
                payload = n_iters * n * 2 * (n - 1) / n * size * 4
                row["wire_bytes_per_payload_byte"] = _r(sw["rx_bytes"] / payload) if payload and sw else None
        pts[(n, mbps)][alg] = row
    rows = []
    for (n, mbps), d in sorted(pts.items()):
        lim = 2 * (n - 1) / n
        hdr = lim * (INA_PAYLOAD / INA_FRAME) / (TCP_PAYLOAD / TCP_FRAME)
        row = {"workers": n, "mbps": mbps, "limit": _r(lim), "limit_header_adjusted": _r(hdr),
               "max_reachable_fraction_of_limit": _r(hdr / lim), "switch": d.get("switch"), "ring": d.get("ring")}
        s, r = d.get("switch") or {}, d.get("ring") or {}
        if s.get("time_s") and r.get("time_s"):
            ratio = r["time_s"] / s["time_s"]           # = goodput switch / goodput ring
            row.update({"goodput_ratio": _r(ratio), "fraction_of_limit": _r(ratio / lim),
                        "fraction_of_header_adjusted_limit": _r(ratio / hdr),
                        "meets_target": ratio / lim >= 0.9})
        rows.append(row)
    return {"size_values": size, "tensor_bytes": size * 4, "target_fraction_min": 0.9,
            "frames": {"ina": [INA_PAYLOAD, INA_FRAME], "tcp": [TCP_PAYLOAD, TCP_FRAME]},
            "note": "time = median over iterations of the per-iteration max latency over ranks; "
                    "goodput_ratio = ring time / switch time; limit = 2(N-1)/N; header-adjusted "
                    "limit = limit x (256/314) / (1448/1514) (TCP ACKs on the reverse path, ~2% "
                    "more for ring, are not counted); link_efficiency = header-adjusted link-limited "
                    "time / measured time",
            "rows": rows}


def analyze_aggrate(run: RunData, sampler: ProcSampler, size: int) -> dict[str, Any]:
    rows = []
    for p in run.points:
        label = p["label"]
        n = p["params"]["topology.workers"]
        row: dict[str, Any] = {"workers": n, "label": label, "status": p["status"], "error": p.get("error")}
        if p["status"] == "ok":
            recs = run.records[label]
            _, per_iter = iteration_latencies(recs)
            busy_s = float(per_iter.sum())
            c = ina_counters(recs)
            st = run.switch_stats(label)
            cpu = cpu_in_window(run, label, sampler)
            pk = c.get("ina_packets", 0)
            sw_cpu = cpu.get("switch_cpu_s")
            row.update({
                "iterations": int(per_iter.size), "allreduce_busy_s": _r(busy_s),
                "ina_packets": pk, "ina_results": c.get("ina_results"),
                "ina_retransmits_answered": c.get("ina_retransmits"),
                "ina_duplicates_dropped": c.get("ina_duplicates_dropped"),
                "switch_stats_ina_packets": st.get("pipeline", {}).get("counters", {})
                .get("Ingress.ina_packets", {}).get("total"),
                "input_pps": round(pk / busy_s) if busy_s else None,
                "input_pps_per_worker": round(pk / busy_s / n) if busy_s else None,
                "values_per_s": round(pk / busy_s * VALUES_PER_PACKET) if busy_s else None,
                "switch_cpu_us_per_packet": _r(sw_cpu / pk * 1e6, 2) if sw_cpu and pk else None,
                "switch_cpu_us_per_packet_whole_process": _r(st["cpu_time_s"] / pk * 1e6, 2)
                if st.get("cpu_time_s") and pk else None,
                "switch_capacity_pps_one_core": round(pk / sw_cpu) if sw_cpu and pk else None,
                "cpu": cpu, "switch": switch_brief(st),
                "transport": transport_totals(recs)})
        rows.append(row)
    return {"size_values": size, "values_per_packet": VALUES_PER_PACKET,
            "note": "input_pps = INA packets at the switch (switch_counters) / sum of the per-iteration "
                    "allreduce times (max over ranks); switch_cpu_us_per_packet = the switch process's CPU "
                    "in the active window (sampled from /proc) / INA packets; _whole_process includes "
                    "start-up and control plane; capacity = packets per CPU-second at this load's batch "
                    "sizes (an upper bound only if the switch were alone on a core)",
            "rows": rows}


# --- table --------------------------------------------------------------------------------

def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def format_table(res: dict) -> str:
    L = [f"allreduce_ratios: {res['cpus']} CPUs, load avg {res['loadavg_before'][0]:.2f} -> "
         f"{res['loadavg_after'][0]:.2f}, {res['wall_s']:.0f} s"]
    lat = res.get("latency", {})
    if lat:
        L.append(f"\n1) latency: N=8, 64 float32, unlimited links, {res['params']['lat_iters']} iterations "
                 f"(pooled over ranks | per-iteration max over ranks)")
        L.append(f"   {'algorithm':<9} {'p50 ms':>8} {'p99 ms':>8} | {'p50 ms':>8} {'p99 ms':>8} "
                 f"{'machine cores':>13} {'switch cores':>12} {'other':>5}")
        for alg in ("switch", "ring"):
            r = lat["points"].get(alg, {})
            c = r.get("cpu", {})
            L.append(f"   {alg:<9} {_f(r.get('p50_ms')):>8} {_f(r.get('p99_ms')):>8} | "
                     f"{_f(r.get('iter_max_p50_ms')):>8} {_f(r.get('iter_max_p99_ms')):>8} "
                     f"{_f(c.get('machine_busy_cores')):>13} {_f(c.get('switch_cores')):>12} "
                     f"{_f(c.get('other_cores')):>5}"
                     + (f"  [{r['status']}: {r.get('error')}]" if r.get("status") not in (None, "ok") else ""))
        sw = lat["points"].get("switch", {})
        tr = sw.get("transport") or {}
        L.append(f"   switch = 2 INA round trips per allreduce (scale MAX + SUM), chunk RTT p50 "
                 f"{_f(tr.get('chunk_rtt_p50_ms_median_host'))} ms, retx {_f(tr.get('retx_pct'), '{:.1f}')}%; "
                 f"ring = 2(N-1) = 14 dependent TCP steps")
        L.append(f"   switch/ring: p50 {_f(lat.get('ratio_p50'))}, p99 {_f(lat.get('ratio_p99'))} "
                 f"(per-iteration max: {_f(lat.get('ratio_iter_max_p50'))}, {_f(lat.get('ratio_iter_max_p99'))}); "
                 f"target <= 0.3: {'met' if lat.get('meets_target') else 'NOT met'}")
    gp = res.get("goodput", {})
    if gp:
        L.append(f"\n2) goodput: {gp['size_values']} float32 ({gp['tensor_bytes'] / 2**20:.0f} MiB), "
                 f"time = median per-iteration max over ranks; eff = header-adjusted link time / measured")
        L.append(f"   {'N':>2} {'Mbit/s':>6} {'ring s':>7} {'eff':>5} {'switch s':>8} {'eff':>5} "
                 f"{'ratio':>6} {'limit':>6} {'frac':>5} {'hdr lim':>7} {'frac':>5} {'retx%':>6} "
                 f"{'mach':>5} {'sw':>5} {'hosts':>5} {'other':>5}  in-switch bound")
        for row in gp["rows"]:
            s, r = row.get("switch") or {}, row.get("ring") or {}
            c = s.get("cpu", {})
            L.append(f"   {row['workers']:>2} {row['mbps']:>6g} {_f(r.get('time_s')):>7} "
                     f"{_f(r.get('link_efficiency')):>5} {_f(s.get('time_s')):>8} {_f(s.get('link_efficiency')):>5} "
                     f"{_f(row.get('goodput_ratio')):>6} {_f(row['limit']):>6} {_f(row.get('fraction_of_limit')):>5} "
                     f"{_f(row['limit_header_adjusted']):>7} {_f(row.get('fraction_of_header_adjusted_limit')):>5} "
                     f"{_f((s.get('transport') or {}).get('retx_pct'), '{:.1f}'):>6} "
                     f"{_f(c.get('machine_busy_cores')):>5} {_f(c.get('switch_cores')):>5} "
                     f"{_f(c.get('hosts_cores')):>5} {_f(c.get('other_cores')):>5}  "
                     f"{s.get('bound', s.get('error') or '-')}")
        wb = [(row.get("ring") or {}).get("wire_bytes_per_payload_byte") for row in gp["rows"]]
        wb = [x for x in wb if x]
        if wb:
            L.append(f"   ring wire bytes per payload byte {min(wb):.3f}..{max(wb):.3f} (TCP/IP headers + "
                     f"delayed ACKs alone: ~1.067; more would be TCP retransmissions)")
        reach = {row["workers"]: row["max_reachable_fraction_of_limit"] for row in gp["rows"]}
        L.append("   target: frac >= 0.9 of 2(N-1)/N; header-adjusted (256 B in 314 B INA frames vs "
                 "1448 B in 1514 B TCP) at most " + ", ".join(f"N={n}: {f}" for n, f in reach.items())
                 + " of it is reachable")
    ag = res.get("aggrate", {})
    if ag:
        L.append(f"\n3) soft-switch aggregation rate: switch algorithm, unlimited links, "
                 f"{ag['size_values']} float32, {VALUES_PER_PACKET} int32 per packet")
        L.append(f"   {'N':>2} {'input pkt/s':>11} {'per worker':>10} {'sw us/pkt':>9} {'(whole)':>8} "
                 f"{'sw cores':>8} {'mach':>5} {'hosts':>5} {'other':>5} {'batch':>5} {'retx%':>6} {'pkt/CPU-s':>9}")
        for row in ag["rows"]:
            c = row.get("cpu", {})
            L.append(f"   {row['workers']:>2} {_f(row.get('input_pps'), '{:,}'):>11} "
                     f"{_f(row.get('input_pps_per_worker'), '{:,}'):>10} "
                     f"{_f(row.get('switch_cpu_us_per_packet')):>9} "
                     f"{_f(row.get('switch_cpu_us_per_packet_whole_process')):>8} "
                     f"{_f(c.get('switch_cores')):>8} {_f(c.get('machine_busy_cores')):>5} "
                     f"{_f(c.get('hosts_cores')):>5} {_f(c.get('other_cores')):>5} "
                     f"{_f((row.get('switch') or {}).get('mean_rx_batch'), '{:.1f}'):>5} "
                     f"{_f((row.get('transport') or {}).get('retx_pct'), '{:.1f}'):>6} "
                     f"{_f(row.get('switch_capacity_pps_one_core'), '{:,}'):>9}"
                     + (f"  [{row['status']}: {row.get('error')}]" if row.get("status") != "ok" else ""))
    for w in res.get("warnings", []):
        L.append(f"! {w}")
    return "\n".join(L)


def finish(res: dict) -> None:
    """Verdicts, warnings and the table, from the measured numbers alone (re-runnable
    on a saved result: python -m bench.allreduce_ratios --retable FILE)."""
    for row in res.get("goodput", {}).get("rows", []):
        for alg in ("switch", "ring"):
            if (row.get(alg) or {}).get("status") == "ok":
                row[alg]["bound"] = bound_verdict(row[alg])
    res["warnings"] = warnings_for(res)
    res["table"] = format_table(res)


def warnings_for(res: dict) -> list[str]:
    out = []
    for kind in ("latency", "goodput", "aggrate"):
        info = res["runs"].get(kind, {})
        q = info.get("quiet_wait") or {}
        if q and not q.get("quiet"):
            out.append(f"{kind}: the machine was busy when the run started ({q.get('busy_cores_at_start')} "
                       f"cores after waiting {q.get('waited_s')} s): other work shared the cores "
                       f"(column 'other' = other processes + kernel packet processing)")
        if info.get("sources_changed_during_run"):
            out.append(f"{kind}: the host/switch sources changed while the run went (someone edited the "
                       f"tree): points may mix code versions; sources_before/after in runs.{kind}")
        if info.get("returncode") not in (0, None):
            out.append(f"{kind} run returned {info.get('returncode')}; see {info.get('log')}")
    for row in res.get("goodput", {}).get("rows", []):
        for alg in ("switch", "ring"):
            p = row.get(alg) or {}
            if p.get("status") not in (None, "ok"):
                out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s {alg}: {p['status']}: {p.get('error')}")
            sw = p.get("switch") or {}
            if sw.get("rx_kernel_drops") or sw.get("tx_dropped"):
                out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s {alg}: switch dropped "
                           f"(kernel rx {sw.get('rx_kernel_drops')}, tx {sw.get('tx_dropped')})")
        sp = row.get("switch") or {}
        tr = sp.get("transport") or {}
        worst = tr.get("worst_host") or {}
        lost = (tr.get("packets_sent") or 0) - ((sp.get("ina_counters") or {}).get("ina_packets") or 0)
        if tr and lost > 0:
            ss = sp.get("switch") or {}
            out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s switch: {lost} INA packets the hosts "
                       f"sent never reached the switch's pipeline (no loss configured; switch kernel rx "
                       f"drops {ss.get('rx_kernel_drops')}): dropped on the way (host htb queue or socket)")
        for alg in ("switch", "ring"):
            p = row.get(alg) or {}
            its = [t for t in p.get("iter_times_s") or [] if t]
            if its and p.get("time_s") and max(its) > 1.5 * p["time_s"]:
                out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s {alg}: iteration times {its} s "
                           f"(the table shows the median)")
        if (tr.get("retx_pct") or 0) >= 2 or (worst.get("retx_pct") or 0) >= 10:
            c = (row.get("switch") or {}).get("ina_counters", {})
            out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s switch: {tr.get('retx_pct')}% INA "
                       f"retransmissions ({tr.get('retransmissions')} of {tr.get('chunks_sent')} chunks; worst "
                       f"{worst.get('host')} {worst.get('retx_pct')}%), no loss configured; the switch answered "
                       f"{c.get('ina_retransmits')} as already complete and dropped {c.get('ina_duplicates_dropped')} "
                       f"as duplicates, the hosts ignored {tr.get('duplicates_ignored')} duplicate results: "
                       f"spurious (chunk RTT p50 {tr.get('chunk_rtt_p50_ms_median_host')} ms, worst p99 "
                       f"{tr.get('chunk_rtt_p99_ms_max_host')} ms; the first RTO is at most ina.retx_timeout_s, 50 ms "
                       f"by default)")
    return out


# --- entry points --------------------------------------------------------------------------

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


def run(out_dir: str | Path, quick: bool = False) -> dict:
    """Bench entry point: <out_dir>/allreduce_ratios-<timestamp>.json (+ a work folder)."""
    reason = unavailable_reason()
    if reason:
        return {"benchmark": NAME, "skipped": reason}
    params = QUICK if quick else FULL
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = out_dir / f"{NAME}-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"benchmark": NAME, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "quick": quick, "params": params, "cpus": os.cpu_count(),
                           "loadavg_before": os.getloadavg(), "work_dir": str(work), "runs": {}}
    t0 = time.time()
    sampler = ProcSampler(str(work))
    sampler.start()
    try:
        yamls = scenarios(params)
        for kind in ("latency", "goodput", "aggrate"):
            res["runs"][kind] = run_testbed(kind, yamls[kind], work, sampler)
    finally:
        sampler.stop()
    res["loadavg_after"] = os.getloadavg()
    res["wall_s"] = round(time.time() - t0, 1)
    res["commands"] = [r["command"] for r in res["runs"].values()]
    res["run_dirs"] = [r["run_dir"] for r in res["runs"].values()]
    res["latency"] = analyze_latency(RunData(res["runs"]["latency"]["run_dir"]), sampler)
    res["goodput"] = analyze_goodput(RunData(res["runs"]["goodput"]["run_dir"]), sampler, params["gp_size"])
    res["aggrate"] = analyze_aggrate(RunData(res["runs"]["aggrate"]["run_dir"]), sampler, params["agg_size"])
    finish(res)
    path = out_dir / f"{NAME}-{stamp}.json"
    res["json_path"] = str(path)
    path.write_text(json.dumps(res, indent=1, default=str))
    print(res["table"], flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.allreduce_ratios", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--quick", action="store_true", help="small tensors, few iterations (smoke test)")
    ap.add_argument("--retable", metavar="JSON", help="recompute verdicts, warnings and the table of "
                                                       "a saved result (no new runs); rewrites the file")
    a = ap.parse_args(argv)
    if a.retable:
        res = json.loads(Path(a.retable).read_text())
        finish(res)
        Path(a.retable).write_text(json.dumps(res, indent=1, default=str))
        print(res["table"])
        return 0
    res = run(a.out, quick=a.quick)
    if res.get("skipped"):
        print(f"skipped: {res['skipped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
