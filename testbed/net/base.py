"""The interface every network mode offers the runner (Mininet and local)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any



class NetworkError(RuntimeError):
    """Building or running the emulated network failed (message says how to fix)."""


@dataclass(frozen=True)
class DeadSwitch:
    """A switch process that exited while the network was running."""
    name: str
    exit_code: int | None      # None when the process was not our child (code unknown)
    log_path: Path | None


@dataclass(frozen=True)
class HostInfo:
    name: str
    ip: str
    mac: str | None


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """Prefix argv so the child gets SIGKILL if the runner dies (even by SIGKILL).

    Done by `setpriv --pdeathsig` (util-linux) rather than a preexec_fn: running
    Python between fork and exec in a process that holds gRPC threads (the
    P4Runtime controller) can abort the child. The setting survives exec (the
    programs are not setuid), so a crashed runner's host programs do not linger;
    the registry is the second line of defence.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM each live process (its group if it leads one), SIGKILL stragglers."""
    live = [p for p in procs if p.poll() is None]

    def send(p: subprocess.Popen, sig: int) -> None:
        try:
            if os.getpgid(p.pid) == p.pid:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    for p in live:
        send(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            send(p, signal.SIGKILL)
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass


class Network(ABC):
    """An emulated network: named hosts that can run programs, and switches.

    Lifecycle: construct (pure planning, raises ``ImpairmentError`` early),
    ``start()``, ``popen()`` programs, ``stop()`` (idempotent; call it in a
    ``finally``), then read ``switch_stats()`` and ``impairment_report()``.
    ``with net:`` does start/stop for you.
    """

    hosts: dict[str, HostInfo]
    switch_names: list[str]
    # Dry run (testbed.net.plan): start() records what it would do and popen
    # records the program instead of starting it.
    recorder: Any = None

    @property
    def switches(self) -> list[str]:
        return list(self.switch_names)

    @property
    def switch_info(self) -> dict[str, Any]:
        """Addressing of the switch for in-network aggregation (empty if none)."""
        return {}

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def popen(self, host: str, argv: list[str], log_path: str | Path,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start argv on host; stdout and stderr go to log_path."""

    _stopped = False

    def stop(self) -> None:
        """Idempotent: the first call tears down; a dry run has nothing running."""
        if self._stopped:
            return
        self._stopped = True
        if self.recorder is not None:
            self._stop_dry_run()
            return
        self._teardown()

    def _stop_dry_run(self) -> None:
        """What a dry run's stop records (nothing by default)."""

    @abstractmethod
    def _teardown(self) -> None:
        """Stop every program and switch started; runs once (see stop)."""

    def _spawn(self, spawn: Any, host: str, argv: list[str], log_path: str | Path,
               env: dict[str, str] | None, run_id: str, **popen_kw: Any) -> subprocess.Popen:
        """What every popen does, whatever starts the process (a Mininet node's
        popen, or subprocess.Popen): check the host, tag the environment with
        the run id, log to a file, die with the runner."""
        from testbed.net.registry import ENV_RUN  # noqa: PLC0415 - registry imports this module
        if host not in self.hosts:
            raise NetworkError(f"unknown host {host!r}; hosts are {', '.join(self.hosts)}")
        full_env = {**os.environ, **(env or {}), ENV_RUN: run_id}
        if self.recorder is not None:
            from testbed.net.plan import RecordedProcess  # noqa: PLC0415
            # Only what the run sets on top of the runner's own environment.
            self.recorder.command(host, with_parent_death_signal(argv), f"host program, log {log_path}",
                                  env={k: v for k, v in full_env.items() if os.environ.get(k) != v})
            return RecordedProcess(host, argv)
        with open_log(log_path) as f:
            return spawn(with_parent_death_signal(argv), stdin=subprocess.DEVNULL, stdout=f,
                         stderr=subprocess.STDOUT, env=full_env, **popen_kw)

    def switch_stats(self) -> dict[str, dict]:
        """Per-switch counters, available after ``stop()``."""
        return {}

    def dead_switches(self) -> list[DeadSwitch]:
        """Switch processes that have exited since ``start()`` (cheap; poll it
        while programs run). A network without switch processes has none."""
        return []

    def impairment_report(self) -> list[dict]:
        """One row per applied (or refused-to-apply) impairment value."""
        return []

    def teardown_problems(self) -> list[str]:
        """What went wrong while stopping, read after ``stop()``: a process that had
        to be killed, a capture that lost frames (the runner makes each a warning
        of the point). A network that keeps none has none."""
        return []

    def __enter__(self) -> "Network":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def open_log(log_path: str | Path):
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab", buffering=0)
