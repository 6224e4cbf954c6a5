"""The common start of a point's host programs.

The runner gives every program of a point the same `start_at`, a wall-clock
time a fixed slack (testbed.runner.START_SLACK_S) after it launches them: the
programs begin their work together, and use that time as the point's time
origin (a straggler's start, the allreduce timings). The slack is sized for the
slowest start-up; most points' programs are ready well before it ends.

Where the runner opens a start gate (local and Mininet runs, whose hosts share
this machine's files: environment variable INNET_START_GATE names its folder),
a program that reaches its start announces it (a file `ready/<host>`) and waits
for the runner's `go` file instead: the runner writes it once every program it
expects is ready, or at `start_at` at the latest, with the time they all begin.
One writer picks the time, so every host has the same origin. Without a gate
(SSH hosts, a program run by hand) a program sleeps until `start_at` as before.

    begun = start_gate.begin(cfg.start_at, cfg.host)   # the common start, or None
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hosts.common.json_files import write_json_atomic

GATE_ENV = "INNET_START_GATE"
READY_DIR = "ready"
GO_FILE = "go"
# How often a waiting program looks for `go`: a few stat calls per millisecond
# of its start, while the others still import.
POLL_S = 0.002
# A gated program that sees no `go` this long after start_at stops: the runner
# that opens the gate always does so by start_at, so it is gone.
ORPHAN_AFTER_S = 30.0


class GateNeverOpened(RuntimeError):
    pass


def begin(start_at: float | None, host: str) -> float | None:
    """Wait for the point's common start; return it (wall-clock seconds), or
    None where the program has no start time (it begins at once)."""
    if start_at is None:
        return None
    gate = os.environ.get(GATE_ENV)
    if gate:
        start_at = _through_gate(Path(gate), host, start_at)
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    return start_at


def _through_gate(gate: Path, host: str, start_at: float) -> float:
    (gate / READY_DIR / host).touch()
    give_up = start_at + ORPHAN_AFTER_S
    while True:
        go = read_go(gate)
        if go is not None:
            return go
        if time.time() > give_up:
            raise GateNeverOpened(f"the start gate {gate} was not opened within {ORPHAN_AFTER_S:.0f} s "
                                  "of the start time: the runner that opens it is gone")
        time.sleep(POLL_S)


def read_go(gate: Path) -> float | None:
    """The common start time the runner wrote, or None before it has."""
    try:
        return float(json.loads((gate / GO_FILE).read_text()))
    except FileNotFoundError:
        return None


def ready_hosts(gate: Path) -> set[str]:
    try:
        return set(os.listdir(gate / READY_DIR))
    except FileNotFoundError:
        return set()


def open_gate(gate: Path, start_at: float) -> None:
    """Write `go` (atomically: a reader sees the whole time or no file)."""
    write_json_atomic(gate / GO_FILE, start_at)


def make_gate(gate: Path) -> Path:
    (gate / READY_DIR).mkdir(parents=True, exist_ok=True)
    return gate
