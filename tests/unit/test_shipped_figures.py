"""Every figure a shipped scenario lists is one its workload's runs can feed
(a figure of another family would draw empty axes: testbed.plots refuses it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.plots import _kind_of, known_figures
from testbed.scenario import load_scenario

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").rglob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_a_shipped_scenarios_figures_belong_to_its_workload(path):
    scn = load_scenario(path)
    figures = known_figures()
    for name in scn.figures:
        assert name in figures, f"{path}: unknown figure {name}"
        assert _kind_of(figures[name]) in (scn.workload.kind, None), \
            f"{path}: figure {name} draws {_kind_of(figures[name])} runs, the scenario runs {scn.workload.kind}"


def test_the_scenarios_folder_is_not_empty():
    assert len(SHIPPED) >= 30
