"""CPU isolation of a point's emulated hosts and switches (cgroups), and the load it saw.

Every emulated host and switch shares the machine's few cores; without
isolation one busy host takes CPU another host's timing needs, and the
emulated times measure the scheduler. Mininet's CPULimitedHost limits hosts
with CFS quotas (a fraction of the machine), which also slows each host's
network stack and lets a throttled host stall for most of a period; we give
each host and each switch its own cgroup with an explicit CPU *weight*
instead: equal shares for hosts, a larger share for switches (a hardware
switch never waits for a CPU), nothing throttled while a core is idle
(research/time-fidelity.md, 1.4 and 7.6).

cgroup v1 (`cpu` + `cpuacct` hierarchies, as on Debian 12 VMs here) uses
cpu.shares; a v2-only machine uses cpu.weight. Where neither can be written
(no root, no cgroupfs) the point runs without isolation and says so: the
record's `isolated` is false with the reason, and the fidelity monitor's
measurements decide whether the point is still valid.

Per point the record also holds the machine's load: the share of all cores
busy while the point ran (/proc/stat) and each group's CPU seconds.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
HOST_SHARES = 1024          # cgroup v1 default weight
SWITCH_SHARES = 4096        # [A] 4 hosts' worth: the switch serves every host
V1_TO_V2_WEIGHT = 1024 / 100  # cpu.shares 1024 ~ cpu.weight 100 (the kernel's own mapping)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class CpuIsolation:
    """One cgroup per emulated node under innet-testbed/<run-id>/, with weights."""

    def __init__(self, run_id: str, root: Path = CGROUP_ROOT):
        self.run_id = run_id
        self.groups: dict[str, dict[str, Path]] = {}   # node -> {"cpu": dir, "acct": dir}
        self.reason = ""
        self.mode = self._detect(root)
        self.base: dict[str, Path] = {}
        if self.mode == "v1":
            self.base = {"cpu": root / "cpu" / "innet-testbed" / run_id,
                         "acct": root / "cpuacct" / "innet-testbed" / run_id}
        elif self.mode == "v2":
            self.base = {"cpu": root / "innet-testbed" / run_id}
        else:
            self.reason = f"no writable cgroup cpu controller under {root} (need root and cgroupfs)"
        for b in self.base.values():
            _remove_stale_groups(b.parent)
        try:
            for d in self.base.values():
                d.mkdir(parents=True, exist_ok=True)
            if self.mode == "v1":
                # The run as a whole must not lose to the machine's other processes:
                # each level above the nodes weighs as many as it holds (up to 16).
                for d in (self.base["cpu"].parent, self.base["cpu"]):
                    _write(d / "cpu.shares", str(16 * HOST_SHARES))
            if self.mode == "v2":
                _write(root / "innet-testbed" / "cgroup.subtree_control", "+cpu")
                _write(self.base["cpu"] / "cgroup.subtree_control", "+cpu")
        except OSError as e:
            self.reason = f"cannot create cgroups under {root}: {e.strerror or e}"
            self.mode = "none"
        self._stat0 = _cpu_times()
        self._t0 = time.monotonic()

    @staticmethod
    def _detect(root: Path) -> str:
        CpuIsolation._remount_if_hidden(root)
        if (root / "cpu" / "cpu.shares").exists() and (root / "cpuacct" / "cpuacct.usage").exists():
            return "v1"
        if (root / "cgroup.controllers").exists() and "cpu" in (root / "cgroup.controllers").read_text():
            return "v2"
        return "none"

    @staticmethod
    def _remount_if_hidden(root: Path) -> None:
        """The runner's private mount namespace mounts a fresh sysfs (for the run's
        network namespace), which hides the machine's cgroup mounts under it. Mount
        the v1 cpu and cpuacct hierarchies again there: the same hierarchies, seen
        from this namespace only (its mounts do not propagate out)."""
        if root != CGROUP_ROOT or os.geteuid() != 0 or (root / "cpu").exists() \
                or (root / "cgroup.controllers").exists():
            return
        if "cpu" not in Path("/proc/cgroups").read_text():
            return
        import subprocess  # noqa: PLC0415
        cmds = [["mount", "-t", "tmpfs", "-o", "mode=755", "cgroup-root", str(root)]]
        for ctrl in ("cpu", "cpuacct"):
            cmds += [["mkdir", "-p", str(root / ctrl)], ["mount", "-t", "cgroup", "-o", ctrl, ctrl, str(root / ctrl)]]
        for c in cmds:
            if subprocess.run(c, capture_output=True).returncode != 0:
                return                          # _detect then says "none" with the reason below

    @property
    def isolated(self) -> bool:
        return self.mode != "none"

    def place(self, node: str, pid: int, kind: str = "host") -> None:
        """Move pid (and, from now on, its children) into node's group."""
        if not self.isolated:
            return
        shares = SWITCH_SHARES if kind == "switch" else HOST_SHARES
        try:
            dirs = self.groups.get(node)
            if dirs is None:
                dirs = {k: b / node for k, b in self.base.items()}
                for d in dirs.values():
                    d.mkdir(exist_ok=True)
                if self.mode == "v1":
                    _write(dirs["cpu"] / "cpu.shares", str(shares))
                else:
                    _write(dirs["cpu"] / "cpu.weight", str(max(1, round(shares / V1_TO_V2_WEIGHT))))
                self.groups[node] = dirs
            for d in dirs.values():
                _write(d / "cgroup.procs", str(pid))
        except ProcessLookupError:
            pass                                   # it already exited: nothing to isolate
        except OSError as e:
            self.reason = f"cannot place {node} (pid {pid}) in its cgroup: {e.strerror or e}"
            self.mode = "none"

    def place_switches(self, parent: int | None = None) -> list[str]:
        """Find the soft switch processes among the runner's descendants and place them."""
        placed = []
        for pid, cmd in _descendants(parent or os.getpid()).items():
            if "testbed.switch.soft" in cmd or "simple_switch" in cmd:
                name = _switch_name(cmd) or f"switch-{pid}"
                self.place(name, pid, kind="switch")
                placed.append(name)
        return placed

    def report(self) -> dict[str, Any]:
        """Isolation mode, the machine's busy share since creation, CPU seconds per node."""
        busy = _busy_share(self._stat0, _cpu_times())
        usage: dict[str, float] = {}
        for node, dirs in self.groups.items():
            try:
                if self.mode == "v1":
                    usage[node] = int((dirs["acct"] / "cpuacct.usage").read_text()) / 1e9
                else:
                    stat = dict(line.split() for line in (dirs["cpu"] / "cpu.stat").read_text().splitlines())
                    usage[node] = int(stat.get("usage_usec", 0)) / 1e6
            except (OSError, ValueError):
                continue
        return {"isolated": self.isolated, "mechanism": f"cgroup {self.mode}" if self.isolated else "none",
                "reason": self.reason or None, "machine_busy_share": busy,
                "cores": os.cpu_count() or 1, "loadavg_1m": os.getloadavg()[0],
                "wall_s": time.monotonic() - self._t0, "cpu_s": {k: round(v, 4) for k, v in usage.items()}}

    def close(self) -> None:
        """Remove the run's groups (their processes are gone by now; a live one keeps its group)."""
        for dirs in list(self.groups.values()) + [self.base]:
            for d in dirs.values():
                try:
                    d.rmdir()
                except OSError:
                    pass
        self.groups.clear()


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores from /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_share(a: tuple[int, int], b: tuple[int, int]) -> float | None:
    total = b[1] - a[1]
    return round((b[0] - a[0]) / total, 4) if total > 0 else None


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every descendant of root (from /proc)."""
    parent: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parent[int(d.name)] = ppid
            cmd[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = {}, {root}
    while frontier:
        nxt = {p for p, pp in parent.items() if pp in frontier and p not in out}
        for p in nxt:
            out[p] = cmd.get(p, "")
        frontier = nxt
    return out


def _switch_name(cmd: str) -> str | None:
    """s1 from '... --config .../s1.config.json' (the soft switch's config file name)."""
    for word in cmd.split():
        if word.endswith(".config.json"):
            return Path(word).name.split(".")[0]
    return None


def _remove_stale_groups(parent: Path) -> None:
    """Groups of earlier runs that were killed before their teardown: rmdir only
    succeeds on a group with no process left, so live runs keep theirs."""
    if not parent.is_dir():
        return
    for run in parent.iterdir():
        if not run.is_dir():
            continue
        for node in run.iterdir():
            if node.is_dir():
                try:
                    node.rmdir()
                except OSError:
                    pass
        try:
            run.rmdir()
        except OSError:
            pass
