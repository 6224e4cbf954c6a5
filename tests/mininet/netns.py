"""Run a script in a private network namespace, so Mininet tests never see or
touch another run's interfaces, and everything they create dies with them."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> str | None:
    """Why a private-netns Mininet test cannot run here, or None."""
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "mininet is not importable from the venv (run `make setup`)"
    for tool in ("unshare", "ip", "mnexec"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found on PATH"
    argv = ["unshare", "-n", "true"] if os.geteuid() == 0 else ["unshare", "-Urnm", "true"]
    try:
        ok = subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        return (f"cannot create a network namespace (`{' '.join(argv)}` failed): "
                "needs root or unprivileged user namespaces")
    return None


def private_netns_argv(argv: list[str]) -> list[str]:
    """argv wrapped in `unshare`: root -> new netns only; otherwise a user
    namespace too (as root inside it, enough for Mininet and AF_PACKET)."""
    flags = "-n" if os.geteuid() == 0 else "-Urnm"
    return ["unshare", flags, "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *argv]


def run_in_private_netns(argv: list[str], timeout: float = 120.0,
                         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run argv (from the repo root) in a fresh network namespace; output captured."""
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), full_env.get("PYTHONPATH", "")) if p)
    return subprocess.run(private_netns_argv(argv), cwd=REPO, env=full_env, timeout=timeout,
                          capture_output=True, text=True)
