"""A sweep point: one fully resolved scenario of a sweep (testbed.scenario.sweep makes them).

Its own module so that validation (which asks a workload's runtime about a
point) and the sweep (which makes points from validated scenarios) both stand
on it without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed.scenario.models import Loc, Scenario, format_loc


@dataclass(frozen=True)
class Point:
    index: int
    label: str               # short, filesystem-safe, unique within the sweep
    case: str
    params: dict[str, Any]   # the grid values of this point, by dotted path
    repeat: int
    seed: int
    scenario: Scenario       # fully resolved for this point


class PointError(Exception):
    """A combination of case and grid values that does not validate."""

    def __init__(self, label: str, problems: list[tuple[Loc, str]]):
        self.label, self.problems = label, problems
        super().__init__("; ".join(f"{format_loc(loc)}: {msg}" for loc, msg in problems))
