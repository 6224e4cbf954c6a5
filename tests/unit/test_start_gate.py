"""The point's common start (hosts.common.start_gate, testbed.runner._open_start_gate):
programs that reach their start announce it and begin at the time the runner's
`go` names, which it writes once every program that starts together is ready,
or at start_at at the latest; without a gate a program sleeps until start_at."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from hosts.common import start_gate
from testbed import runner
from testbed.workloads.base import PointContext

pytestmark = pytest.mark.unit


class _Proc:
    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


def _ctx(tmp_path, start_in_s: float) -> PointContext:
    return PointContext(point=None, hosts={}, work_dir=tmp_path, net_mode="mininet",
                        start_at=time.time() + start_in_s)


def test_no_start_time_begins_at_once(monkeypatch):
    monkeypatch.delenv(start_gate.GATE_ENV, raising=False)
    t = time.monotonic()
    assert start_gate.begin(None, "w1") is None
    assert time.monotonic() - t < 0.05


def test_without_a_gate_a_program_sleeps_until_start_at(monkeypatch):
    monkeypatch.delenv(start_gate.GATE_ENV, raising=False)
    start_at = time.time() + 0.2
    assert start_gate.begin(start_at, "w1") == start_at
    assert time.time() >= start_at


def test_a_gated_program_announces_itself_and_begins_at_the_runners_time(tmp_path, monkeypatch):
    gate = start_gate.make_gate(tmp_path / "gate")
    monkeypatch.setenv(start_gate.GATE_ENV, str(gate))
    start_at = time.time() + 30               # the latest start: far away, never reached here
    begun = {}
    t = threading.Thread(target=lambda: begun.setdefault("at", start_gate.begin(start_at, "w1")))
    t.start()
    deadline = time.time() + 5
    while "w1" not in start_gate.ready_hosts(gate):
        assert time.time() < deadline, "the program did not announce it was ready"
        time.sleep(0.005)
    assert t.is_alive()                       # ready, waiting for `go`
    go = time.time() + 0.1
    start_gate.open_gate(gate, go)
    t.join(5)
    assert begun["at"] == go and time.time() >= go
    assert start_gate.read_go(gate) == go
    assert not (gate / (start_gate.GO_FILE + ".tmp")).exists()


def test_a_gate_nobody_opens_fails_with_the_cause(tmp_path, monkeypatch):
    gate = start_gate.make_gate(tmp_path / "gate")
    monkeypatch.setenv(start_gate.GATE_ENV, str(gate))
    monkeypatch.setattr(start_gate, "ORPHAN_AFTER_S", 0.05)
    with pytest.raises(start_gate.GateNeverOpened, match="not opened within"):
        start_gate.begin(time.time(), "w1")


def test_the_runner_opens_the_gate_once_every_program_is_ready(tmp_path):
    gate = start_gate.make_gate(tmp_path / "gate")
    ctx = _ctx(tmp_path, 5.0)
    for h in ("w1", "w2"):
        (gate / start_gate.READY_DIR / h).touch()
    t = time.time()
    report = runner._open_start_gate(gate, ctx, {"w1": (None, _Proc()), "w2": (None, _Proc())})
    assert time.time() - t < 1.0
    go = start_gate.read_go(gate)
    assert go == pytest.approx(t + runner.GO_LEAD_S, abs=0.5) and go < ctx.start_at
    assert report["opened"] == "all ready" and report["saved_s"] == pytest.approx(ctx.start_at - go, abs=1e-3)
    assert "not_ready" not in report


def test_a_late_program_opens_the_gate_at_the_latest_start(tmp_path):
    gate = start_gate.make_gate(tmp_path / "gate")
    ctx = _ctx(tmp_path, 0.3)
    (gate / start_gate.READY_DIR / "w1").touch()
    report = runner._open_start_gate(gate, ctx, {"w1": (None, _Proc()), "w2": (None, _Proc())})
    assert start_gate.read_go(gate) == ctx.start_at
    assert report == {"opened": "at the latest start", "saved_s": 0.0, "not_ready": ["w2"]}


def test_a_program_that_exited_opens_the_gate_at_once(tmp_path):
    gate = start_gate.make_gate(tmp_path / "gate")
    ctx = _ctx(tmp_path, 5.0)
    report = runner._open_start_gate(gate, ctx, {"w1": (None, _Proc(3)), "w2": (None, _Proc())})
    assert report["opened"] == "a program exited" and report["not_ready"] == ["w1", "w2"]
    assert start_gate.read_go(gate) < ctx.start_at


def test_show_says_how_a_point_began():
    from testbed.cli import start_gate_line
    assert start_gate_line({"opened": "all ready", "saved_s": 1.62}) == \
        "start: all ready, 1.6s before the latest start"
    assert start_gate_line({"opened": "at the latest start", "saved_s": 0.0, "not_ready": ["w1", "w2"]}) == \
        "start: at the latest start, 0.0s before the latest start (not ready then: w1, w2)"


def test_every_gated_host_program_uses_the_gate():
    """No host program sleeps until start_at on its own any more (a program that did
    would never announce itself, and its point would wait the whole slack)."""
    root = Path(start_gate.__file__).resolve().parents[2] / "hosts"
    own_sleep = re.compile(r"sleep\(\s*(cfg\.)?start_at\s*-")
    offenders = [str(p.relative_to(root.parent)) for p in root.rglob("*.py")
                 if p.name != "start_gate.py" and own_sleep.search(p.read_text())]
    assert offenders == []
