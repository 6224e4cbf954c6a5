"""Which networks are live, so `testbed switch` and `testbed net down` can find them.

Every `testbed net up` network, and every point of a `testbed run` while it
runs, is announced in the registry folder (`live/<name>.json`: the owning
process with its start time, the switches' P4Runtime addresses, the program,
the run folder) and withdrawn when it ends; a record whose process died is
dropped when read. Only the recorded process, matched by PID and start time,
is ever signalled (testbed.net.registry's rule).
"""
from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.net.registry import alive, proc_start_time, registry_dir

LIVE_DIR = "live"


class LiveError(Exception):
    """One line a person can act on."""


@dataclass
class LiveNetwork:
    name: str
    pid: int
    start: int
    run_dir: str
    scenario: str
    point: str
    program: str
    switch_info: dict[str, Any]

    @property
    def p4runtime(self) -> dict[str, str]:
        return dict(self.switch_info.get("p4runtime") or {})


def _folder(base: str | Path | None = None) -> Path:
    d = registry_dir(base) / LIVE_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def _json_safe(info: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(info, default=str))


def announce(name: str, run_dir: Path, scenario: str, point: str, program: str, switch_info: dict[str, Any],
             base: str | Path | None = None) -> Path:
    """Record this process's live network under `name` (replacing a dead one's record)."""
    pid = os.getpid()
    path = _folder(base) / f"{name}.json"
    path.write_text(json.dumps({"name": name, "pid": pid, "start": proc_start_time(pid), "run_dir": str(run_dir),
                                "scenario": scenario, "point": point, "program": program,
                                "switch_info": _json_safe(switch_info)}, indent=1))
    return path


def withdraw(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def live_networks(base: str | Path | None = None) -> list[LiveNetwork]:
    """The announced networks whose process is still alive (dead ones' records are removed)."""
    out = []
    for p in sorted(_folder(base).glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not alive(int(d["pid"]), d.get("start")):
            withdraw(p)
            continue
        out.append(LiveNetwork(d["name"], int(d["pid"]), d["start"], d["run_dir"], d["scenario"], d["point"],
                               d["program"], d["switch_info"]))
    return out


def find(name: str | None = None, base: str | Path | None = None) -> LiveNetwork:
    nets = live_networks(base)
    if name is not None:
        for n in nets:
            if n.name == name:
                return n
        raise LiveError(f"no live network named {name!r}; live: {', '.join(n.name for n in nets) or 'none'} "
                        f"(`testbed net up SCENARIO` starts one)")
    if not nets:
        raise LiveError("no live network: start one with `testbed net up SCENARIO` (or read a switch while "
                        "`testbed run` runs a point)")
    if len(nets) > 1:
        raise LiveError(f"{len(nets)} live networks ({', '.join(n.name for n in nets)}): name one with --net NAME")
    return nets[0]


def stop(net: LiveNetwork, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process that keeps `net` up (only that PID, with its start
    time) and wait for it to tear the network down. True when it ended."""
    if not alive(net.pid, net.start):
        return True
    os.kill(net.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(net.pid, net.start):
            return True
        time.sleep(0.1)
    return False
