"""`testbed run <shipped scenario> --quick` made once per test session and shared.

Some tests read the same quick run (same scenario, net and --set overrides):
the scenario's own check of its results and the figure check of
tests/{local,mininet}/test_shipped_figures_*.py. The first test that asks makes
the run; the others read its results folder, so sharing a run costs none of
them any time. A run that failed fails every test that asks for it, with the
same message.

Used through the session fixture `quick_run` (tests/conftest.py):

    run_dir = quick_run("phub/loss.yaml")                       # net from the scenario
    run_dir = quick_run("lhc/train.yaml", net="local")
    run_dir = quick_run("easgd/loss.yaml", "workload.steps=32")  # --set overrides

Callers must not write into a shared results folder (figures/ aside).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class QuickRuns:
    def __init__(self, root: Path):
        self.root = root
        self._made: dict[tuple[str, str | None, tuple[str, ...], bool], Path | str] = {}

    def __call__(self, scenario: str, *sets: str, net: str | None = None, plot: bool = False,
                 timeout: float = 600) -> Path:
        """The results folder of `testbed run scenarios/<scenario> --quick [--net NET] --set ...`
        (--no-plot unless plot: then the run draws its figures itself, as a user's does)."""
        key = (scenario, net, sets, plot)
        if key not in self._made:
            self._made[key] = self._run(scenario, sets, net, plot, timeout)
        made = self._made[key]
        if isinstance(made, str):
            raise AssertionError(made)
        return made

    def _run(self, scenario: str, sets: tuple[str, ...], net: str | None, plot: bool,
             timeout: float) -> Path | str:
        out = self.root / f"{len(self._made):02d}-{scenario.replace('/', '-').removesuffix('.yaml')}"
        argv = [sys.executable, "-m", "testbed", "run", str(ROOT / "scenarios" / scenario), "--quick",
                *([] if plot else ["--no-plot"]), "--out", str(out), *(["--net", net] if net else []),
                *[x for s in sets for x in ("--set", s)]]
        try:
            p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(argv[2:])}` ran past {timeout:g} s"
        if p.returncode != 0:
            return (f"`{' '.join(argv[2:])}` failed ({p.returncode}):\n"
                    f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        runs = [m.parent for m in out.glob("*/*/manifest.json")]
        if len(runs) != 1:
            return f"`{' '.join(argv[2:])}` left {len(runs)} results folders under {out}"
        return runs[0]
