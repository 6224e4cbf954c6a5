"""What each run started, so a crashed run can be cleaned up precisely.

One JSON record per run in ``/run/innet-testbed/<run-id>.json`` (or
``$XDG_RUNTIME_DIR/innet-testbed`` / ``~/.cache/innet-testbed/run`` without
root; ``$INNET_TESTBED_REGISTRY`` overrides). A PID alone is not an identity
(PIDs are reused), so every PID is stored with its start time from
``/proc/<pid>/stat`` and only a process matching both is ever signalled.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.net.isolation import netns_inode

ENV_DIR = "INNET_TESTBED_REGISTRY"
ENV_RUN = "INNET_TESTBED_RUN"  # set in every process a run starts (helps humans and tests)


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = stat[stat.rindex(")") + 2:].split()
    if rest[0] == "Z":  # a zombie is dead for our purposes
        return None
    return int(rest[19])  # rest[0] is field 3


def alive(pid: int, start: int | None) -> bool:
    return start is not None and proc_start_time(pid) == start


def registry_dir(base: str | Path | None = None) -> Path:
    """Where records live (created 0700). Tries /run as root, then per-user dirs."""
    candidates: list[Path] = []
    if base is not None:
        candidates.append(Path(base))
    elif os.environ.get(ENV_DIR):
        candidates.append(Path(os.environ[ENV_DIR]))
    else:
        if os.geteuid() == 0:
            candidates.append(Path("/run/innet-testbed"))
        if os.environ.get("XDG_RUNTIME_DIR"):
            candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "innet-testbed")
        candidates.append(Path.home() / ".cache" / "innet-testbed" / "run")
    last_err: OSError | None = None
    for d in candidates:
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            probe = d / f".probe-{os.getpid()}"
            probe.write_text("")  # inside a user namespace "root" may still lack write access
            probe.unlink()
            return d
        except OSError as e:
            last_err = e
    raise OSError(f"no writable registry directory among {[str(c) for c in candidates]}: {last_err}")


@dataclass
class RunRegistry:
    """The record of one run; the runner keeps it open for the run's lifetime."""

    path: Path
    record: dict[str, Any]

    @classmethod
    def create(cls, results_dir: str | Path | None = None, run_id: str | None = None,
               base: str | Path | None = None) -> "RunRegistry":
        d = registry_dir(base)
        run_id = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        me = os.getpid()
        record = {
            "run_id": run_id,
            "runner": {"pid": me, "start": proc_start_time(me)},
            "children": [],
            "netns_inode": netns_inode(),
            "netns": [],
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "hostname": socket.gethostname(),
            "results_dir": str(results_dir) if results_dir is not None else None,
        }
        reg = cls(d / f"{run_id}.json", record)
        reg._save()
        os.environ[ENV_RUN] = run_id
        return reg

    @property
    def run_id(self) -> str:
        return self.record["run_id"]

    def register_pid(self, pid: int, role: str = "") -> None:
        """Record a process this run started (call right after starting it)."""
        start = proc_start_time(pid)
        if start is None:
            return  # already gone: nothing to clean up later
        self.record["children"].append({"pid": pid, "start": start, "role": role})
        ns = netns_inode(pid)
        if ns is not None and ns not in self.record["netns"]:
            self.record["netns"].append(ns)
        self._save()

    def note_netns(self) -> None:
        """Re-read the runner's namespace (after ``enter_private_netns``)."""
        self.record["netns_inode"] = netns_inode()
        self._save()

    def close(self) -> None:
        """Clean exit: the record is no longer needed."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> "RunRegistry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _save(self) -> None:
        if not self.path.parent.exists():
            return  # closed, or the directory was removed under us
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.record, f, indent=1)
        tmp.replace(self.path)  # a reader never sees half a record


def _records(base: str | Path | None) -> list[tuple[Path, dict[str, Any] | None]]:
    out = []
    for p in sorted(registry_dir(base).glob("*.json")):
        try:
            out.append((p, json.loads(p.read_text())))
        except (OSError, ValueError):
            out.append((p, None))
    return out


def leftovers(base: str | Path | None = None) -> list[dict[str, Any]]:
    """Records whose runner is gone (crashed or killed); ``_path`` says where."""
    out = []
    for p, rec in _records(base):
        if rec is None:
            # Unreadable: only claim it once it is clearly not being written.
            if time.time() - p.stat().st_mtime > 60:
                out.append({"run_id": p.stem, "_path": str(p), "_corrupt": True, "children": []})
            continue
        r = rec.get("runner", {})
        if not alive(int(r.get("pid", 0)), r.get("start")):
            out.append({**rec, "_path": str(p)})
    return out


def signal_recorded(pid: int, start: int, sig: int) -> bool:
    """Signal a recorded process (and its process group if it leads one)."""
    if not alive(pid, start):
        return False
    try:
        if os.getpgid(pid) == pid:
            # Host programs lead their own group (mnexec -d): take their helpers too.
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def kill_leftovers(base: str | Path | None = None, dry_run: bool = False,
                   grace_s: float = 3.0) -> list[dict[str, Any]]:
    """Stop the recorded processes of dead runs and drop their records.

    Only PIDs whose start time still matches are signalled (SIGTERM, then
    SIGKILL after ``grace_s``). Returns one action per record and process.
    """
    actions: list[dict[str, Any]] = []
    for rec in leftovers(base):
        live = [c for c in rec.get("children", []) if alive(c["pid"], c.get("start"))]
        act = {"run_id": rec["run_id"], "record": rec["_path"], "results_dir": rec.get("results_dir"),
               "killed": [], "already_gone": len(rec.get("children", [])) - len(live),
               "dry_run": dry_run}
        if dry_run:
            act["would_kill"] = [{"pid": c["pid"], "role": c.get("role", "")} for c in live]
            actions.append(act)
            continue
        for c in live:
            signal_recorded(c["pid"], c["start"], signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(c["pid"], c["start"]) for c in live):
            time.sleep(0.05)
        for c in live:
            sig = "SIGTERM"
            if signal_recorded(c["pid"], c["start"], signal.SIGKILL):
                sig = "SIGKILL"
            act["killed"].append({"pid": c["pid"], "role": c.get("role", ""), "signal": sig})
        try:
            os.unlink(rec["_path"])
        except FileNotFoundError:
            pass
        actions.append(act)
    return actions
