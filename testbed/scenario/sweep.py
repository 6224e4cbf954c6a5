"""Sweep expansion: one scenario file -> the list of points a run executes.

Points are cases x grid (cartesian, keys in file order) x repeats. A point's
scenario is derived from the raw input mapping (base + grid values + case `set`
[+ quick `set`]) and validated again, so every point is a complete, checked
Scenario and nothing is ever mutated in place.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterator

from testbed.scenario.loader import PathError, Problem, ScenarioError, set_path, validate_raw
from testbed.scenario.models import Case, Loc, Scenario, format_loc


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


def raw_of(scenario: Scenario) -> dict[str, Any]:
    """The raw mapping behind a scenario (for scenarios built in Python: its set fields)."""
    if scenario._raw is not None:
        return copy.deepcopy(scenario._raw)
    raw = scenario.model_dump(exclude_unset=True)
    # `kind` has a default, but the workload union needs it in the input.
    raw.setdefault("workload", {})["kind"] = scenario.workload.kind
    return raw


def _plan(scenario: Scenario, quick: bool) -> tuple[list[Case], dict[str, list[Any]], int]:
    sweep = scenario.sweep
    cases = list(sweep.cases) or [Case(name="base")]
    grid, repeats = dict(sweep.grid), sweep.repeats
    if quick:
        q = sweep.quick
        if q.grid is not None:
            grid = dict(q.grid)
        if q.cases is not None:
            cases = [c for c in cases if c.name in q.cases]
        if q.repeats is not None:
            repeats = q.repeats
    for path, value in scenario._cli_overrides:
        if path in grid:  # --set on a swept key: run only that value
            grid[path] = [value]
    return cases, grid, repeats


def iter_point_scenarios(scenario: Scenario, quick: bool = False
                         ) -> Iterator[tuple[Case, dict[str, Any], Scenario]]:
    """(case, grid values, resolved scenario) per combination, without repeats."""
    base = raw_of(scenario)
    cases, grid, _ = _plan(scenario, quick)
    keys = list(grid)
    for case in cases:
        for values in itertools.product(*(grid[k] for k in keys)):
            params = dict(zip(keys, values))
            entries = list(params.items()) + list(case.set.items())
            if quick:
                entries += list(scenario.sweep.quick.set.items())
            entries += [(p, v) for p, v in scenario._cli_overrides if p not in params]
            raw = copy.deepcopy(base)
            name = _label_body(case.name, params)
            try:
                for path, value in entries:
                    set_path(raw, path, copy.deepcopy(value))
            except PathError as e:
                raise PointError(name, [(e.loc, e.message)]) from None
            resolved, problems = validate_raw(raw)
            if resolved is None:
                raise PointError(name, problems)
            yield case, params, resolved


def expand_points(scenario: Scenario, quick: bool = False) -> list[Point]:
    """Every point of the sweep (or of its quick variant), in run order."""
    _, _, repeats = _plan(scenario, quick)
    try:
        combos = list(iter_point_scenarios(scenario, quick))
    except PointError as e:
        raise ScenarioError([Problem(None, None, "sweep", f"point {e.label}: {format_loc(loc)}: {msg}")
                             for loc, msg in e.problems]) from None
    width = max(3, len(str(len(combos) * repeats - 1)))
    points: list[Point] = []
    for case, params, resolved in combos:
        for repeat in range(repeats):
            index = len(points)
            label = f"{index:0{width}d}-{_label_body(case.name, params)}-r{repeat}"
            seed = point_seed(scenario.sweep.seed, case.name, params, repeat)
            points.append(Point(index, label, case.name, dict(params), repeat, seed, resolved))
    return points


def point_seed(root: int, case: str, params: dict[str, Any], repeat: int) -> int:
    """A stable 31-bit seed: the same point gets the same seed on every run and machine."""
    # hashlib, not hash(): Python salts str hashes per process.
    payload = json.dumps([root, case, sorted(params.items()), repeat], default=str, sort_keys=True)
    return int.from_bytes(hashlib.sha256(payload.encode()).digest()[:4], "big") & 0x7FFFFFFF


# --- labels -----------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")
_MAX_VALUE = 24


def _label_body(case: str, params: dict[str, Any]) -> str:
    # The last path segment names a value unless two grid keys share it.
    lasts = [k.rsplit(".", 1)[-1] for k in params]
    parts = [case]
    for key, last in zip(params, lasts):
        name = last if lasts.count(last) == 1 else key
        parts.append(f"{_safe(name)}={_value_text(params[key])}")
    return "-".join(parts)


def _value_text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, (int, float, str)):
        text = str(value)
    elif isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value):
        text = "_".join(str(v) for v in value) or "none"
    else:  # mappings, nested lists: a short digest keeps labels short and distinct
        text = "h" + hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:8]
    safe = _safe(text)
    if len(safe) > _MAX_VALUE:  # keep a digest so long values stay distinguishable
        safe = f"{safe[:_MAX_VALUE - 7]}_{hashlib.sha256(text.encode()).hexdigest()[:6]}"
    return safe


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_") or "_"
