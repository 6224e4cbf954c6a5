"""Sweep expansion: one scenario file -> the points a run executes.

Points are cases x grid (cartesian, keys in file order) x repeats. A point's
scenario is derived from the raw input mapping (base + grid values + case `set`
[+ quick `set`]) and validated again, so every point is a complete, checked
Scenario and nothing is ever mutated in place.

Sweeps are counted before anything is expanded (`count_points`) and refused
beyond `sweep.max_points`; `expand_points` returns a lazy sequence (`Points`)
whose length is known and whose points are resolved one at a time, so a large
sweep costs time per point, never memory for all of them.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Iterator, Union, overload

from testbed.scenario.point import Point, PointError  # noqa: F401 (re-exported)
from testbed.scenario.validate import PathError, Problem, ScenarioError, set_path, validate_raw
from testbed.scenario.models import DEFAULT_MAX_POINTS, Case, Loc, Scenario, format_loc  # noqa: F401


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


def _resolve(scenario: Scenario, base: dict[str, Any], case: Case, params: dict[str, Any],
             quick: bool) -> Scenario:
    """The validated scenario of one combination (raises PointError)."""
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
    return resolved


def iter_point_scenarios(scenario: Scenario, quick: bool = False
                         ) -> Iterator[tuple[Case, dict[str, Any], Scenario]]:
    """(case, grid values, resolved scenario) per combination, without repeats."""
    base = raw_of(scenario)
    cases, grid, _ = _plan(scenario, quick)
    keys = list(grid)
    for case in cases:
        for values in itertools.product(*(grid[k] for k in keys)):
            params = dict(zip(keys, values))
            yield case, params, _resolve(scenario, base, case, params, quick)


# --- counting before expanding ---------------------------------------------
def count_points(scenario: Scenario, quick: bool = False) -> tuple[int, str]:
    """(number of points, how it is made up), without expanding anything."""
    cases, grid, repeats = _plan(scenario, quick)
    sizes = [len(v) for v in grid.values()]
    n = len(cases) * math.prod(sizes) * repeats
    parts = [f"{len(cases)} case(s)", *(f"{len(v)} {k}" for k, v in grid.items()), f"{repeats} repeat(s)"]
    return n, " x ".join(parts)


def too_many_points(scenario: Scenario, quick: bool = False) -> str | None:
    """Why this sweep is refused for its size, or None if it is within sweep.max_points."""
    n, made_of = count_points(scenario, quick)
    limit = scenario.sweep.max_points
    if n <= limit:
        return None
    return (f"{'quick sweep: ' if quick else ''}{n} points ({made_of}) exceed the limit of "
            f"{limit}; shrink the sweep, or raise the limit with `sweep.max_points: {n}` "
            f"(or testbed run --max-points {n})")


def check_point_count(scenario: Scenario, quick: bool) -> None:
    why = too_many_points(scenario, quick)
    if why:
        raise ScenarioError([Problem(None, None, "sweep", why)])


# --- lazy expansion ---------------------------------------------------------
class Points(Sequence):
    """The points of a sweep, in run order, resolved on demand.

    `len()` is known up front; iterating resolves each case/grid combination
    once (repeats share it); indexing resolves just that point. `headers()`
    lists index, label, case, params, repeat and seed without resolving any
    scenario (what the manifest records for every planned point).
    """

    def __init__(self, scenario: Scenario, quick: bool = False):
        self.scenario, self.quick = scenario, quick
        self._cases, self._grid, self._repeats = _plan(scenario, quick)
        self._keys = list(self._grid)
        self._per_case = math.prod(len(v) for v in self._grid.values())
        self._combos = len(self._cases) * self._per_case
        self._len = self._combos * self._repeats
        self._width = max(3, len(str(self._len - 1)))
        self._base = raw_of(scenario)

    def __len__(self) -> int:
        return self._len

    def ran(self) -> dict[str, Any]:
        """The sweep these points are: cases, grid and repeats after --quick and
        --set (a --set on a swept key pins it to one value: `pinned` names them),
        for the manifest, whose `scenario` keeps the file's sweep as written."""
        full = dict(self.scenario.sweep.grid) if not self.quick or self.scenario.sweep.quick.grid is None \
            else dict(self.scenario.sweep.quick.grid)
        pinned = {p: v for p, v in self.scenario._cli_overrides if p in full and len(full[p]) > 1}
        return {"quick": self.quick, "cases": [c.name for c in self._cases], "grid": self._grid,
                "repeats": self._repeats, "points": self._len, "pinned": pinned}

    def _combo(self, c: int) -> tuple[Case, dict[str, Any]]:
        """Combination number c, in itertools.product order (last grid key fastest)."""
        case_i, rest = divmod(c, self._per_case)
        values: list[Any] = []
        for key in reversed(self._keys):
            rest, i = divmod(rest, len(self._grid[key]))
            values.append(self._grid[key][i])
        return self._cases[case_i], dict(zip(self._keys, reversed(values)))

    def _point(self, index: int, case: Case, params: dict[str, Any], resolved: Scenario | None) -> Point:
        repeat = index % self._repeats
        label = f"{index:0{self._width}d}-{_label_body(case.name, params)}-r{repeat}"
        seed = point_seed(self.scenario.sweep.seed, case.name, params, repeat)
        if resolved is not None and repeat:
            resolved = repeat_seeded(resolved, repeat)
        return Point(index, label, case.name, dict(params), repeat, seed, resolved)  # type: ignore[arg-type]

    def _resolve(self, case: Case, params: dict[str, Any]) -> Scenario:
        try:
            return _resolve(self.scenario, self._base, case, params, self.quick)
        except PointError as e:
            raise _point_error(e) from None

    def headers(self) -> Iterator[dict[str, Any]]:
        for c in range(self._combos):
            case, params = self._combo(c)
            for r in range(self._repeats):
                p = self._point(c * self._repeats + r, case, params, None)
                yield {"index": p.index, "label": p.label, "case": p.case, "params": p.params,
                       "repeat": p.repeat, "seed": p.seed}

    def __iter__(self) -> Iterator[Point]:
        for c in range(self._combos):
            case, params = self._combo(c)
            resolved = self._resolve(case, params)
            for r in range(self._repeats):
                yield self._point(c * self._repeats + r, case, params, resolved)

    @overload
    def __getitem__(self, i: int) -> Point: ...
    @overload
    def __getitem__(self, i: slice) -> list[Point]: ...
    def __getitem__(self, i: Union[int, slice]) -> Union[Point, list[Point]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"point {i} of {self._len}")
        case, params = self._combo(i // self._repeats)
        return self._point(i, case, params, self._resolve(case, params))

    def check(self) -> None:
        """Resolve every combination once (ScenarioError on the first bad one), keeping none."""
        for c in range(self._combos):
            self._resolve(*self._combo(c))


def _point_error(e: PointError) -> ScenarioError:
    return ScenarioError([Problem(None, None, "sweep", f"point {e.label}: {format_loc(loc)}: {msg}")
                          for loc, msg in e.problems])


def expand_points(scenario: Scenario, quick: bool = False) -> Points:
    """Every point of the sweep (or of its quick variant), in run order: a lazy
    sequence. Refuses (ScenarioError) a sweep larger than `sweep.max_points` and
    one with a combination that does not validate, before returning."""
    check_point_count(scenario, quick)
    points = Points(scenario, quick)
    if quick not in scenario._checked_sweeps:  # the loader already resolved every combination
        points.check()
    return points


def repeat_seeded(scenario: Scenario, repeat: int) -> Scenario:
    """Repeat r of a point runs with `workload.seed + r` (data order, initial
    weights, sampling: whatever the workload seeds with it), so repeats are
    independent samples; every case and grid value of one repeat shares that
    seed, so systems compared within a repeat see the same data. Impairments
    are seeded per point (`point_seed`, which includes the repeat)."""
    wl = scenario.workload
    if getattr(wl, "seed", None) is None:
        return scenario
    return scenario.model_copy(update={"workload": wl.model_copy(update={"seed": wl.seed + repeat})})


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
