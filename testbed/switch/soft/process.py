"""Launch and stop one soft switch process.

The process is started through a caller-given popen function (Mininet's
`node.popen`, or subprocess.Popen), so it runs in whatever namespace the
caller chooses. The PID to signal is the one the switch writes into its ready
file (the process itself), never a process group or a name.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from testbed.process_env import one_blas_thread

log = logging.getLogger(__name__)


class SwitchStartError(RuntimeError):
    """The switch did not become ready; the message carries what to look at."""


def _tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(cannot read log: {e.strerror})"
    return "\n".join(lines[-n:]) if lines else "(log is empty)"


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


class SoftSwitchProcess:
    """One `python -m testbed.switch.soft` process.

    config: the switch config dict (docs/architecture.md). `stats_path` and
    `ready_path` default to files in workdir. log_path: where stdout/stderr go
    (default workdir/<name>.log). nice: if set (e.g. -10), the switch's
    scheduling priority once it is ready; see prioritize().
    """

    def __init__(self, config: dict, workdir: str | Path,
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen,
                 log_path: str | Path | None = None, python: str | None = None,
                 ready_timeout: float = 15.0, stop_timeout: float = 5.0,
                 env: dict[str, str] | None = None, nice: int | None = None):
        self.workdir = Path(workdir).resolve()  # the switch may run with another cwd
        self.config = dict(config)
        name = self.config.get("name") or "switch"
        self.name = name
        self.config.setdefault("stats_path", str(self.workdir / f"{name}.stats.json"))
        self.config.setdefault("ready_path", str(self.workdir / f"{name}.ready.json"))
        for k in ("stats_path", "ready_path", "pcap_dir"):
            if self.config.get(k):
                self.config[k] = str(Path(self.config[k]).resolve())
        self.config_path = self.workdir / f"{name}.config.json"
        self.log_path = Path(log_path).resolve() if log_path else self.workdir / f"{name}.log"
        self.stats_path = Path(self.config["stats_path"])
        self.ready_path = Path(self.config["ready_path"])
        self.popen_fn = popen
        self.python = python or sys.executable
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.env = env
        self.nice = nice
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.stats: dict | None = None

    @property
    def argv(self) -> list[str]:
        from testbed.net.base import with_parent_death_signal  # noqa: PLC0415
        # Dies with the runner even on SIGKILL (the runner starts it from its main thread).
        return with_parent_death_signal(
            [self.python, "-m", "testbed.switch.soft", "--config", str(self.config_path)])

    def start(self) -> "SoftSwitchProcess":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for p in (self.ready_path, self.stats_path):
            p.unlink(missing_ok=True)  # a stale file would look like success
        self.config_path.write_text(json.dumps(self.config, indent=1))
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        one_blas_thread(env)
        with open(self.log_path, "ab") as logf:
            self.proc = self.popen_fn(self.argv, stdin=subprocess.DEVNULL, stdout=logf,
                                      stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        self._wait_ready()
        if self.nice is not None:
            self.prioritize(self.nice)
        return self

    def prioritize(self, nice: int) -> None:
        """Give the switch CPU before host programs, as a hardware switch would
        not share CPUs with them. On an oversubscribed machine an unprioritized
        switch is runnable-but-waiting much of the time and its socket buffers
        overflow: loss that no scenario asked for. With autogroup scheduling
        (a process started via `mnexec -d` is its own session, hence its own
        group), the per-process nice value alone does not help; the session's
        autogroup nice is what counts, so set both (needs root)."""
        try:
            os.setpriority(os.PRIO_PROCESS, self.pid, nice)
        except OSError as e:
            log.warning("soft switch %s: cannot set nice %d: %s", self.name, nice, e)
            return
        try:
            if os.getsid(self.pid) == self.pid:  # own session: the group is the switch alone
                Path(f"/proc/{self.pid}/autogroup").write_text(str(nice))
        except OSError:
            pass  # kernel without autogroup scheduling: the nice value is enough

    def _exit_code(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self.ready_path.exists():
                try:
                    ready = json.loads(self.ready_path.read_text())
                    self.pid = int(ready["pid"])
                    return
                except (ValueError, KeyError, OSError):
                    pass  # being written; retry
            rc = self._exit_code()
            if rc is not None:
                self._fail(f"exited with code {rc}")
            if time.monotonic() > deadline:
                self._fail(f"still running, not ready after {self.ready_timeout:.0f}s")
                # _fail raised; nothing below runs
            time.sleep(0.02)

    def _fail(self, what: str) -> None:
        if self._exit_code() is None:
            self._terminate()
        self.pid = None  # nothing left to stop
        raise SwitchStartError(
            f"soft switch {self.name} failed to start: {what}\n"
            f"  command: {' '.join(self.argv)}\n"
            f"  config:  {self.config_path}\n"
            f"  log:     {self.log_path}\n"
            f"  last log lines:\n{_indent(_tail(self.log_path))}")

    @property
    def running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid) and (
            self.proc is None or self.proc.pid != self.pid or self.proc.poll() is None)

    def _signal(self, sig: int) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.pid == self.pid:
                try:
                    self.proc.wait(timeout=0.02)
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if not pid_alive(self.pid):
                return True
            time.sleep(0.02)
        return False

    def _terminate(self) -> None:
        if self.pid is None:
            return
        self._signal(signal.SIGTERM)
        if not self._wait_exit(self.stop_timeout):
            log.warning("soft switch %s (pid %d) ignored SIGTERM for %.0fs; killing it",
                        self.name, self.pid, self.stop_timeout)
            self._signal(signal.SIGKILL)
            self._wait_exit(2.0)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1.0)  # reap the Popen child
            except subprocess.TimeoutExpired:
                pass

    def snapshot(self, timeout: float = 5.0) -> dict:
        """Counters of the running switch (SIGUSR1 -> stats file), without stopping it."""
        before = self._read_stats()
        seq = before.get("snapshot", -1) if before else -1
        if not self._signal(signal.SIGUSR1):
            raise RuntimeError(f"soft switch {self.name} is not running (log: {self.log_path})")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self._read_stats()
            if st and st.get("snapshot", -1) > seq:
                return st
            time.sleep(0.01)
        raise TimeoutError(f"soft switch {self.name} did not write a stats snapshot in {timeout}s "
                           f"(log: {self.log_path})")

    def _read_stats(self) -> dict | None:
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> dict | None:
        """SIGTERM (then SIGKILL after stop_timeout); returns the final stats or None."""
        if self.pid is None:
            return self.stats
        self._terminate()
        st = self._read_stats()
        if st is None or not st.get("final"):
            log.warning("soft switch %s wrote no final stats to %s (log: %s)",
                        self.name, self.stats_path, self.log_path)
            st = None
        self.stats = st
        self.pid = None
        return st


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def build_config(name: str, ports: dict[int, str], stats_path: str | Path,
                 ready_path: str | Path, **kw: Any) -> dict:
    """A config dict with the contract's defaults filled in."""
    cfg = {"name": name, "ports": {str(k): v for k, v in ports.items()}, "forwarding": [],
           "flood": True, "impairments": {}, "seed": 0, "pcap_dir": None,
           "stats_path": str(stats_path), "ready_path": str(ready_path), "batch": 256,
           "pipeline": "forward", "p4runtime_addr": None}
    cfg.update(kw)
    return cfg
