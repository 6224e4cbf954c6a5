"""Reading scenario files: YAML with line numbers, `--set` overrides, validation.

Every problem is reported as `<file>:<line>: <field.path>: <what is wrong>`,
all problems at once, so a person can fix a file in one pass. Line numbers come
from the composed YAML node tree; values that came from `--set` say so instead.
Checking one scenario lives in testbed.scenario.validate; this module loads a
file and checks every point of its sweep (testbed.scenario.sweep).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Union

from testbed.scenario.models import Loc, Scenario, format_loc
from testbed.scenario.sweep import PointError, iter_point_scenarios, too_many_points
from testbed.scenario.validate import (  # noqa: F401 (re-exported: the loader's public names)
    PathError, Problem, ScenarioError, _apply_overrides, _describe, _parse_override, _parse_yaml,
    _Source, apply_overrides, set_path, validate_raw)


# --- loading ----------------------------------------------------------------
def load_scenario(path: Union[str, Path], overrides: Iterable[str] = ()) -> Scenario:
    """Read, override and validate a scenario file; raises ScenarioError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError([Problem(str(path), None, "", f"cannot read the file: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError([Problem(str(path), None, "", f"not UTF-8 text: {e}")]) from None
    return load_scenario_text(text, str(path), overrides)


def load_scenario_text(text: str, source_name: str, overrides: Iterable[str] = ()) -> Scenario:
    """Like load_scenario, for YAML already in memory; `source_name` labels errors."""
    raw, lines = _parse_yaml(text, source_name)
    if raw is None:
        raise ScenarioError([Problem(source_name, None, "", "the file is empty; a scenario needs at "
                                     "least `name:` and `workload:` (see docs/scenarios.md)")])
    if not isinstance(raw, dict):
        raise ScenarioError([Problem(source_name, lines.get(()), "", "the top level must be a mapping "
                                     f"of `key: value` lines (name:, topology:, ...), got {_describe(raw)}")])
    source = _Source(source_name, lines)
    raw = _apply_overrides(raw, overrides, source)
    scenario, problems = validate_raw(raw)
    if scenario is None:
        raise ScenarioError(source.problem(loc, msg) for loc, msg in problems)
    scenario._cli_overrides = [_parse_override(t) for t in overrides
                               if not _parse_override(t)[0].startswith("sweep.")]
    sweep_problems = check_sweep(scenario, raw, source)
    if sweep_problems:
        raise ScenarioError(sweep_problems)
    return scenario


# --- sweep checks -----------------------------------------------------------
def check_sweep(scenario: Scenario, raw: dict[str, Any], source: _Source) -> list[Problem]:
    """Every grid value, case and quick setting must give a valid scenario.

    Each entry is checked on its own (precise messages), then every point of
    the full and the quick sweep (conflicts between entries).
    """
    sweep = scenario.sweep
    problems: list[Problem] = []

    def check(entries: list[tuple[str, Any]], where: Loc, label: str) -> None:
        """Apply `entries` (path, value) to the base and report what breaks."""
        point = copy.deepcopy(raw)
        owners: list[tuple[Loc, str, Any]] = []  # resolved location, path as written, value
        for path, value in entries:
            try:
                owners.append((set_path(point, path, value), path, value))
            except PathError as e:
                inner = "" if format_loc(e.loc) == path else f"{format_loc(e.loc)}: "
                problems.append(source.problem(where + (path,), inner + e.message, f"{label}.{path}"))
                return
        for loc, msg in validate_raw(point)[1]:
            # Blame the entry that set this location; a single entry owns every error.
            owner = next((o for o in owners if loc[:len(o[0])] == o[0]), None)
            if owner is None and len(owners) == 1:
                owner = owners[0]
            if owner is None:
                problems.append(source.problem(where[:-1], f"{format_loc(loc)}: {msg}", label.rsplit(".", 1)[0]))
                continue
            set_loc, path, value = owner
            # The message already quotes the value when the error is at the set path itself.
            detail = msg if loc == set_loc else f"value {_short(value)}: {format_loc(loc)}: {msg}"
            problems.append(source.problem(where + (path,), detail, f"{label}.{path}"))

    for key, values in sweep.grid.items():
        for value in values:
            check([(key, value)], ("sweep", "grid"), "sweep.grid")
    for i, case in enumerate(sweep.cases):
        check(list(case.set.items()), ("sweep", "cases", i, "set"), f"sweep.cases[{case.name}].set")
    check(list(sweep.quick.set.items()), ("sweep", "quick", "set"), "sweep.quick.set")
    for key, values in (sweep.quick.grid or {}).items():
        for value in values:
            check([(key, value)], ("sweep", "quick", "grid"), "sweep.quick.grid")
    if problems:
        return _unique(problems)

    # Entries are fine alone; count the points (never expand a sweep too large
    # to run), then check every combination the runs would use.
    why = too_many_points(scenario, False) or too_many_points(scenario, True)  # one line is enough
    if why:
        return [source.problem(("sweep",), why, "sweep")]
    for quick in (False, True):
        try:
            for _ in iter_point_scenarios(scenario, quick=quick):
                pass
            scenario._checked_sweeps.add(quick)
        except PointError as e:
            for loc, msg in e.problems:
                problems.append(source.problem(("sweep",), f"{'quick ' if quick else ''}point "
                                               f"{e.label}: {format_loc(loc)}: {msg}", "sweep"))
    return _unique(problems)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))
