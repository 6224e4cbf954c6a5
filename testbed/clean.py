"""`testbed clean`: stop what crashed runs left running, and nothing else.

Works from the run registry only (see testbed.net.registry): a process is
signalled only if the testbed recorded starting it and its start time still
matches. Namespaces, veths and bridges need no cleaning: they lived in the
run's private network namespace, which the kernel frees with its last process.
Results folders of such runs are reported, never touched.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from testbed.net import registry


def _incomplete_results(results_dir: str | None) -> bool:
    """A results folder whose manifest still says the run is going on."""
    if not results_dir:
        return False
    try:
        manifest = json.loads((Path(results_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("status") == "running"


def clean(dry_run: bool = False, base: str | Path | None = None) -> list[str]:
    """Kill leftovers of dead runs; one human-readable line per action."""
    lines: list[str] = []
    for act in registry.kill_leftovers(base, dry_run=dry_run):
        rid = act["run_id"]
        if dry_run:
            procs = act.get("would_kill", [])
            what = ", ".join(f"{p['pid']} ({p['role']})" for p in procs) or "no live process"
            lines.append(f"run {rid}: would kill {what}; would remove {act['record']}")
        else:
            procs = act["killed"]
            what = ", ".join(f"{p['pid']} ({p['role']}, {p['signal']})" for p in procs) or "no live process"
            lines.append(f"run {rid}: killed {what}; removed {act['record']}")
        if _incomplete_results(act.get("results_dir")):
            lines.append(f"run {rid}: results folder {act['results_dir']} is incomplete "
                         f"(manifest status 'running'); kept as is")
    return lines


def main() -> int:
    dry = "--dry-run" in sys.argv[1:]
    lines = clean(dry_run=dry)
    print("\n".join(lines) if lines else "nothing to clean: no leftovers of crashed runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
