"""End-to-end runs of the `testbed` command on Mininet, as a user runs it.

Every test starts `.venv/bin/testbed run ...` as a subprocess with `--out
<tmp_path>` (nothing lands in results/) and a private run registry
(``INNET_TESTBED_REGISTRY``), so `testbed clean` here only ever sees this
test's runs, never another run on the machine. The runs isolate themselves in
private network namespaces, so concurrent runs do not collide.

What is checked: the results folder of a quick run (manifest, points, metrics,
summary, logs, pcaps readable by `testbed pcap`, figures); in-switch allreduce
under 5 % loss, bit-exact against the fixed-point reference; SIGINT / SIGTERM /
SIGKILL + `testbed clean` leaving no process, registry record, namespace or
interface of the run behind; a crashing worker recorded with its host, exit
code and log tail while the sweep goes on.

No timing assertions: timeouts are generous and conditions are polled.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
_BIN = Path(sys.executable).parent
TESTBED = str(_BIN / "testbed") if (_BIN / "testbed").exists() else str(ROOT / ".venv" / "bin" / "testbed")
PYTHON = sys.executable
QUICKSTART = "scenarios/quickstart.yaml"

RUN_TIMEOUT_S = 300          # one whole `testbed run` (normally 5-40 s)
EXIT_TIMEOUT_S = 120         # from a signal to the runner's exit (teardown included)
RUN_INTF = re.compile(r"(s\d+-eth\d+|w\d+-eth\d+|ps-eth\d+)")
ENV_RUN = "INNET_TESTBED_RUN"


# --- helpers: processes, namespaces, interfaces --------------------------------
def _proc_start(pid: int) -> int | None:
    """Start time (clock ticks after boot) of a live, non-zombie process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return None if rest[0] == "Z" else int(rest[19])


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _netns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def procs_of_run(run_id: str) -> dict[int, dict]:
    """Live processes whose environment carries INNET_TESTBED_RUN=<run_id>."""
    needle = f"{ENV_RUN}={run_id}".encode()
    found: dict[int, dict] = {}
    for e in os.scandir("/proc"):
        if not e.name.isdigit() or int(e.name) == os.getpid():
            continue
        pid = int(e.name)
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env:
            start = _proc_start(pid)
            if start is not None:
                found[pid] = {"start": start, "netns": _netns(pid), "cmd": _cmdline(pid)}
    return found


def netns_holders() -> dict[int, set[int]]:
    """netns inode -> PIDs of live processes in it."""
    out: dict[int, set[int]] = defaultdict(set)
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            ino = _netns(e.name)
            if ino is not None:
                out[ino].add(int(e.name))
    return out


def root_interfaces() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


class LiveRun:
    """A `testbed run` subprocess, watched while it runs.

    Records the run id (from its registry record), every process carrying
    the run id and the network namespaces they (and the runner) live in, so
    the test can afterwards check that none of it survived.
    """

    def __init__(self, tmp_path: Path, args: list[str], name: str = "run", argv0: list[str] | None = None):
        self.out = tmp_path / f"{name}-out"
        self.registry = tmp_path / f"{name}-registry"
        self.stdout_path = tmp_path / f"{name}.stdout"
        self.stderr_path = tmp_path / f"{name}.stderr"
        self.env = {k: v for k, v in os.environ.items() if k != ENV_RUN}
        self.env["INNET_TESTBED_REGISTRY"] = str(self.registry)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.argv = [*(argv0 or [TESTBED]), "run", *args, "--out", str(self.out)]
        self.intf_before = root_interfaces()
        # The machine's namespace, as this test process sees it (/proc/1/ns/net
        # may not be readable, e.g. under a firecracker init).
        self.root_netns = _netns("self")
        self.run_id: str | None = None
        self.record: dict = {}
        self.seen: dict[int, dict] = {}       # pid -> {start, netns, cmd}, every process of the run seen
        self.netns: set[int] = set()          # namespaces the run's processes lived in
        self.exited_at: int | None = None     # uptime ticks when the runner was seen gone
        with self.stdout_path.open("w") as so, self.stderr_path.open("w") as se:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=so, stderr=se,
                                         stdin=subprocess.DEVNULL)

    # -- observing ---------------------------------------------------------
    def output(self) -> str:
        return (f"command: {' '.join(self.argv)}\nexit: {self.proc.poll()}\n"
                f"--- stdout (tail) ---\n{_tail(self.stdout_path)}\n"
                f"--- stderr (tail) ---\n{_tail(self.stderr_path)}")

    def poll_once(self) -> None:
        if self.run_id is None and self.registry.is_dir():
            for rec in self.registry.glob("*.json"):
                try:
                    self.record = json.loads(rec.read_text())
                    self.run_id = self.record["run_id"]
                except (OSError, ValueError, KeyError):
                    continue
        elif self.run_id is not None:
            try:
                self.record = json.loads((self.registry / f"{self.run_id}.json").read_text())
            except (OSError, ValueError):
                pass
        if self.proc.poll() is None:
            ns = _netns(self.proc.pid)
            if ns is not None and ns != self.root_netns:
                self.netns.add(ns)
        if self.run_id is not None:
            for pid, info in procs_of_run(self.run_id).items():
                self.seen.setdefault(pid, info)
                if info["netns"] is not None:
                    self.netns.add(info["netns"])
            for ns in [self.record.get("netns_inode"), *self.record.get("netns", [])]:
                if ns:
                    self.netns.add(ns)

    def wait_for(self, cond, what: str, timeout: float = 120.0, allow_exit: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.poll_once()
            if cond():
                return
            if self.proc.poll() is not None and not allow_exit:
                pytest.fail(f"the run exited before {what}:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}:\n{self.output()}")
            time.sleep(0.1)

    @property
    def run_dir(self) -> Path:
        if self.record.get("results_dir"):
            return Path(self.record["results_dir"])
        dirs = sorted(p.parent for p in self.out.glob("*/*/manifest.json"))
        assert len(dirs) == 1, f"expected one run folder under {self.out}, found {dirs}\n{self.output()}"
        return dirs[0]

    def points(self) -> list[dict]:
        return _read_jsonl(self.run_dir / "points.jsonl")

    def wait(self, timeout: float = RUN_TIMEOUT_S) -> int:
        """Wait for the runner to exit, watching its processes meanwhile."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.poll_once()
            if time.monotonic() > deadline:
                self.kill_and_clean()
                pytest.fail(f"the run did not exit within {timeout:.0f}s:\n{self.output()}")
            time.sleep(0.1)
        self.exited_at = _uptime_ticks()
        return self.proc.returncode

    def kill_and_clean(self) -> None:
        """Safety net: never leave this test's run behind (by PID, then its registry)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        if self.registry.is_dir() and any(self.registry.glob("*.json")):
            subprocess.run([TESTBED, "clean"], cwd=ROOT, env=self.env, capture_output=True, timeout=120)

    # -- after the run -----------------------------------------------------
    def assert_nothing_left(self) -> None:
        assert self.run_id, f"never saw the run's registry record in {self.registry}\n{self.output()}"
        assert self.seen, f"never saw a process carrying {ENV_RUN}={self.run_id}\n{self.output()}"
        assert self.netns, "never saw the run's network namespaces"
        # The run never lived in the machine's namespace: it isolated itself.
        assert self.root_netns not in self.netns, "the run's processes used the machine's network namespace"
        exited_at = self.exited_at if self.exited_at is not None else _uptime_ticks()

        # Processes: neither those carrying the run id nor any seen during the run.
        deadline = time.monotonic() + 15
        while True:
            tagged = procs_of_run(self.run_id)
            seen_alive = {pid: i["cmd"] for pid, i in self.seen.items() if _proc_start(pid) == i["start"]}
            if (not tagged and not seen_alive) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not tagged, f"processes of run {self.run_id} still alive: {tagged}"
        assert not seen_alive, f"processes seen during the run still alive: {seen_alive}"

        # Registry: the record is gone (clean exit, or removed by `testbed clean`).
        left = sorted(p.name for p in self.registry.glob("*.json")) if self.registry.is_dir() else []
        assert left == [], f"registry records left in {self.registry}: {left}"

        # Namespaces: none of the run's is still held by a process that existed
        # when the run ended (a namespace created later may reuse an inode).
        holders = netns_holders()
        leaked = {}
        for ino in self.netns:
            old = {pid: _cmdline(pid) for pid in holders.get(ino, ())
                   if (s := _proc_start(pid)) is not None and s <= exited_at}
            if old:
                leaked[ino] = old
        assert leaked == {}, f"network namespaces of the run still exist: {leaked}"

        # Interfaces: nothing named like the run's appeared in the machine's namespace.
        appeared = {i for i in root_interfaces() - self.intf_before if RUN_INTF.fullmatch(i)}
        assert appeared == set(), f"interfaces appeared in the root namespace: {appeared}"


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_to_end(tmp_path: Path, args: list[str], name: str = "run", argv0: list[str] | None = None
                ) -> LiveRun:
    run = LiveRun(tmp_path, args, name, argv0)
    try:
        run.wait()
    finally:
        run.kill_and_clean()
    return run


def _assert_clean_exit(run: LiveRun, expected: int = 0) -> None:
    assert run.proc.returncode == expected, f"expected exit {expected}\n{run.output()}"
    assert "Traceback" not in run.stderr_path.read_text(), run.output()


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
    for p in points:
        assert p["status"] == "ok" and p["error"] is None, p
        imps = p["impairments"]
        bw = [i for i in imps if i["parameter"] == "bandwidth_mbps"]
        if bandwidth is not None:
            assert bw and all(i["applied"] and i["mechanism"] == "htb" and i["value"] == bandwidth for i in bw)
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
    assert all(r["status"] == "ok" and r["all_correct"] == "True" and float(r["p50_ms"]) > 0 for r in rows)

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


def fixed_point_reference_digest(seed: int, world: int, size: int, iteration: int) -> str:
    """What an exact in-switch allreduce must return, bit for bit.

    Each worker quantizes with the scale agreed from the MAX of their vector
    exponents (hosts/ina/fixed_point.py), the switch adds int32s exactly, and
    every worker converts the integer sum back to float32."""
    from hosts.common.tensors import make_tensor
    from hosts.ina import fixed_point as fp

    xs = [make_tensor(seed, r, size, iteration) for r in range(world)]
    k = fp.scale_from_exponent(max(fp.vector_exponent(x) for x in xs), world)
    total = np.zeros(size, dtype=np.int64)
    for x in xs:
        ints, saturated = fp.quantize(x, k, world)
        assert saturated == 0
        total += ints
    assert np.abs(total).max() <= fp.INT32_MAX
    y = fp.from_fixed(total, k, np.float32)
    # Cross-check with the module's own one-shot helper.
    assert np.array_equal(y, fp.quantized_sum(xs))
    return hashlib.blake2b(y.tobytes(), digest_size=8).hexdigest()


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


# --- 6. an impersonating host ------------------------------------------------------
IMPERSONATION_ARGS = [
    QUICKSTART, "--quick", "--no-plot",
    "--set", "sweep.grid.workload.algorithm=[switch]",
    "--set", "sweep.quick.cases=[baseline]",
    "--set", "sweep.quick.set.workload.sizes=[4096, 65536]",
    "--set", "sweep.quick.set.workload.iterations=4",
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
    assert len(ar) == world * 2 * (warmup + 4), len(ar)
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
