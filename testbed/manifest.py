"""What a run records about itself, so a result can be traced and repeated."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any

from testbed.results import PROJECT_ROOT

_PACKAGES = ("numpy", "scipy", "scapy", "pydantic", "PyYAML", "click", "matplotlib",
             "grpcio", "protobuf", "p4runtime", "p4runtime-shell", "scikit-learn")


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    try:
        import mininet.net  # noqa: PLC0415 - optional
        out["mininet"] = mininet.net.VERSION
    except Exception:  # noqa: BLE001 - absent or broken: record, don't fail
        out["mininet"] = None
    return out


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True,
                                  text=True, timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def machine() -> dict[str, Any]:
    mem_kib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "mem_gib": round(mem_kib / 2**20, 1) if mem_kib else None,
        "loadavg": os.getloadavg(),
        "user": "root" if os.geteuid() == 0 else str(os.geteuid()),
    }


def base_manifest(scenario: dict[str, Any], cli: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": 1,
        "status": "running",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished_at": None,
        "command": sys.argv,
        "cli": cli,
        "scenario": scenario,
        "points": points,
        "versions": package_versions(),
        "git": git_state(),
        "machine": machine(),
        "warnings": [],
    }
