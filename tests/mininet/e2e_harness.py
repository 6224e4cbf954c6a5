"""Harness for the end-to-end Mininet tests (test_e2e_*.py): run `testbed` as a
user does, as a subprocess with `--out <tmp_path>` and a private run registry
(``INNET_TESTBED_REGISTRY``), so `testbed clean` here only ever sees this test's
runs; and probe what a run leaves behind (processes carrying its run id,
network namespaces, interfaces). The runs isolate themselves in private network
namespaces, so concurrent runs do not collide.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
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
        # when the run ended (a namespace created later may reuse an inode). Mininet's
        # host shells do not carry the run id; under load they were seen alive a
        # moment after the runner exited (SIGINT case, gone when looked at again),
        # so poll as for processes: a shell that never exits still fails.
        deadline = time.monotonic() + 15
        while True:
            holders = netns_holders()
            leaked = {}
            for ino in self.netns:
                old = {pid: _cmdline(pid) for pid in holders.get(ino, ())
                       if (s := _proc_start(pid)) is not None and s <= exited_at}
                if old:
                    leaked[ino] = old
            if not leaked or time.monotonic() > deadline:
                break
            time.sleep(0.2)
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
