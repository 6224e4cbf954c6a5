"""Test tiers: unit (no sockets), local (loopback processes), mininet (root or
user namespaces), bmv2 (needs simple_switch_grpc, p4c-bm2-ss and simple_switch_CLI
on PATH or under $P4TOOLS_PREFIX: testbed/switch/bmv2_tools.py).

Tests are marked by the folder they live in, so a test can't land in the wrong
tier; the mininet and bmv2 tiers skip with the reason when the machine can't
run them.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

TIERS = ("unit", "local", "mininet", "bmv2")


@functools.lru_cache(maxsize=None)
def mininet_unavailable_reason() -> str | None:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "mininet is not importable from the venv (run `make setup`)"
    if shutil.which("mnexec") is None:
        return "mnexec not on PATH (apt-get install mininet, or `make setup`)"
    if os.geteuid() == 0:
        return None
    try:
        rc = subprocess.run(["unshare", "-Urn", "true"], capture_output=True, timeout=10).returncode
    except (OSError, subprocess.SubprocessError):
        rc = 1
    if rc != 0:
        return "needs root or unprivileged user namespaces (`unshare -Urn true` failed)"
    return None


@functools.lru_cache(maxsize=None)
def bmv2_unavailable_reason() -> str | None:
    # The very lookup the backend and `testbed doctor` use (PATH or $P4TOOLS_PREFIX).
    from testbed.switch.bmv2_tools import bmv2_available  # noqa: PLC0415
    ok, why = bmv2_available()
    return None if ok else why


@functools.lru_cache(maxsize=None)
def p4c_unavailable_reason() -> str | None:
    from testbed.switch.bmv2_tools import p4c_available  # noqa: PLC0415
    ok, why = p4c_available()
    return None if ok else why


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).parts
        tier = next((t for t in TIERS if t in parts), None)
        if tier and not any(item.iter_markers(name=tier)):
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("mininet"):
            reason = mininet_unavailable_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
        if item.get_closest_marker("bmv2"):
            # p4c_only: compiling the program needs the compiler, not the switch
            reason = p4c_unavailable_reason() if item.get_closest_marker("p4c_only") \
                else bmv2_unavailable_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory):
    """`testbed run <shipped scenario> --quick`, made once per session and shared
    by the tests that read the same run (tests/quick_runs.py)."""
    from quick_runs import QuickRuns  # noqa: PLC0415 - tests/ is on sys.path (conftest's folder)
    return QuickRuns(tmp_path_factory.mktemp("quick-runs"))


@pytest.fixture
def drawn(monkeypatch):
    """Draw a run's figures and keep them open to inspect: drawn(run_dir, names) ->
    {name: matplotlib Figure} (testbed.plots.style._close replaced)."""
    from testbed import results as res  # noqa: PLC0415 - only the figure tests pay matplotlib's import
    from testbed.plots import draw_figures  # noqa: PLC0415
    from testbed.plots import style  # noqa: PLC0415

    figs: list = []
    monkeypatch.setattr(style, "_close", figs.append)

    def draw(run_dir, names):
        figs.clear()
        draw_figures(res.load_run(run_dir), names)
        return dict(zip(names, figs))
    return draw


@pytest.fixture(autouse=True)
def _close_figures():
    """Figure tests keep the drawn figures open to inspect them (style._close
    replaced): close whatever a test left, once it is done, or pyplot keeps
    them all (memory, and matplotlib's more-than-20-figures warning)."""
    yield
    import sys  # noqa: PLC0415
    plt = sys.modules.get("matplotlib.pyplot")   # only where a test drew: no import for the rest
    if plt is not None:
        plt.close("all")
