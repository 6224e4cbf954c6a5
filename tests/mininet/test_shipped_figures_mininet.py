"""Issue 33, part 4, for the shipped scenarios whose quick run needs the switch or
link impairments: a real `testbed run <scenario> --quick` on Mininet (shrunk as
tests/shipped_figure_runs.py's table says), then every figure drawn from it with
testbed.plots: the listed ones with data on every axes, the others refused or
drawn with data (tests/shipped_figure_runs.py::check_figures). The quickstart's
run also shows the CLI refusing another family's figure (`testbed plot RUN
--figure p4sgd_scaling`: exit 2, one line naming both workloads, nothing drawn)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from shipped_figure_runs import ROOT, check_figures, make_run, rows

pytestmark = [pytest.mark.mininet, pytest.mark.timeout(900)]


@pytest.mark.parametrize("scenario", rows(local=False))
def test_every_figure_of_a_shipped_scenarios_quick_run(quick_run, scenario):
    check_figures(make_run(quick_run, scenario), scenario)


def test_testbed_plot_refuses_a_figure_the_quickstart_run_cannot_feed(quick_run):
    run_dir = make_run(quick_run, "quickstart.yaml")
    p = subprocess.run([sys.executable, "-m", "testbed", "plot", str(run_dir), "--figure", "p4sgd_scaling"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "p4sgd_scaling" in p.stderr and "'allreduce'" in p.stderr and "p4sgd runs" in p.stderr, p.stderr
    assert not (run_dir / "figures" / "p4sgd_scaling.png").exists()
