"""MininetNetwork.dead_switches: which switch processes have exited, with the
exit code and log the runner quotes (no Mininet: fake nodes, real processes)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.net.base import DeadSwitch
from testbed.net.mininet_net import MininetNetwork

pytestmark = pytest.mark.unit


class _SoftLike:
    accepts_switch_config = True   # planned like the soft switch (no netem probe)


class _Proc:
    """The attributes of a SoftSwitchProcess that dead_switches reads."""

    def __init__(self, popen: subprocess.Popen, log: Path):
        self.proc, self.pid, self.log_path = popen, popen.pid, log

    @property
    def running(self) -> bool:
        return self.proc.poll() is None


class _Node:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _net(tmp_path: Path) -> MininetNetwork:
    return MininetNetwork({"kind": "tree", "workers": 2, "leaves": 2}, None, ["w1", "w2"], _SoftLike,
                          {}, tmp_path)


def test_dead_switches_reports_exited_processes_only(tmp_path):
    net = _net(tmp_path)
    assert net.dead_switches() == []        # not started: nothing to watch
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    bmv2 = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        dead.wait(timeout=30)
        bmv2.wait(timeout=30)
        net._net = {"s1": _Node(process=_Proc(alive, tmp_path / "s1.log")),
                    "s2": _Node(process=_Proc(dead, tmp_path / "s2.log")),
                    "s3": _Node(proc=bmv2, console_log=tmp_path / "s3-bmv2-console.log")}
        net._built = True
        assert net.dead_switches() == [DeadSwitch("s2", 7, tmp_path / "s2.log"),
                                       DeadSwitch("s3", 3, tmp_path / "s3-bmv2-console.log")]
    finally:
        alive.kill()
        alive.wait()
