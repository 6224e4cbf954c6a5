"""Issue 33, part 4, for the shipped scenarios whose quick run needs no switch and no
impairment: a real `testbed run <scenario> --quick --net local` (shrunk as
tests/shipped_figure_runs.py's table says), then every figure drawn from it with
testbed.plots: the listed ones with data on every axes, the others refused or
drawn with data (tests/shipped_figure_runs.py::check_figures)."""
from __future__ import annotations

import pytest

from shipped_figure_runs import RUNS, check_figures, make_run, rows, shipped_scenarios

pytestmark = pytest.mark.timeout(900)


def test_the_table_has_one_row_per_shipped_scenario():
    assert sorted(RUNS) == shipped_scenarios()


@pytest.mark.parametrize("scenario", rows(local=True))
def test_every_figure_of_a_shipped_scenarios_quick_run(quick_run, scenario):
    check_figures(make_run(quick_run, scenario), scenario)
