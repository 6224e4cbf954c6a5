"""Sensitivity bands: how much a modeled result moves over the uncertain constants.

Every [A] (assumption) and [I] (inference) constant of a profile carries a
range [lo, hi]. `sensitivity(fn, profile)` evaluates `fn(profile)` (any number
derived from the models: a projected makespan, one collective's time, ...):

  nominal      the profile as written;
  one at a time each uncertain constant at its lo and at its hi, the others nominal;
  two corners  every constant at the end that made `fn` smaller ("fast" corner)
               and every one at the end that made it larger ("slow" corner). This is
               the all-lo / all-hi pair with each constant oriented by its own
               effect, since lo is not always the fast end (a lower reduce_rate is
               slower, a lower latency faster). Constants that did not move `fn`
               stay nominal.

The band is (min, max) over all evaluations, so lo <= nominal <= hi always
holds; `most_sensitive` is the constant whose lo/hi swing of `fn` is largest.
Cost: 2 + 2 x (number of uncertain constants) evaluations.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from testbed.fidelity.constants import HardwareProfile
from testbed.fidelity.projector import ComputeTime, Trace, project, project_world, reusing_preparations


@dataclass
class SensitivityBand:
    nominal: float
    lo: float
    hi: float
    most_sensitive: str | None                 # None when nothing moves the result
    per_constant: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (fn at lo, fn at hi)
    fast_corner: float | None = None
    slow_corner: float | None = None
    profile: str = ""
    fast_values: dict[str, float] = field(default_factory=dict)   # each constant at its fast end
    slow_values: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_constant"] = {k: list(v) for k, v in self.per_constant.items()}
        return d


def band(fn: Callable[[dict[str, float]], float], ranges: dict[str, tuple[float, float]],
         label: str = "") -> SensitivityBand:
    """Evaluate fn(overrides) over named ranges {name: (lo, hi)} (see the module
    docstring): fn({}) is the nominal, each name alone at its lo and hi, then the
    fast and slow corners. The one rule for every band: a profile's
    (`sensitivity`) and a reproduction's envelope (testbed.reproduce).
    fn's projections of one set of traces share its preparation (reusing_preparations):
    fn must not change the traces it replays."""
    with reusing_preparations():
        return _band(fn, ranges, label)


def _band(fn: Callable[[dict[str, float]], float], ranges: dict[str, tuple[float, float]],
          label: str) -> SensitivityBand:
    nominal = float(fn({}))
    per: dict[str, tuple[float, float]] = {}
    fast: dict[str, float] = {}
    slow: dict[str, float] = {}
    for name, (lo_v, hi_v) in ranges.items():
        at_lo = float(fn({name: lo_v}))
        at_hi = float(fn({name: hi_v}))
        per[name] = (at_lo, at_hi)
        if at_lo != at_hi:
            fast[name], slow[name] = (lo_v, hi_v) if at_lo < at_hi else (hi_v, lo_v)
    values = [nominal] + [v for pair in per.values() for v in pair]
    fast_corner = slow_corner = None
    if fast:
        fast_corner = float(fn(dict(fast)))
        slow_corner = float(fn(dict(slow)))
        values += [fast_corner, slow_corner]
    swing = {k: abs(b - a) for k, (a, b) in per.items()}
    most = max(swing, key=swing.get) if swing and max(swing.values()) > 0 else None
    return SensitivityBand(nominal=nominal, lo=min(values), hi=max(values), most_sensitive=most,
                           per_constant=per, fast_corner=fast_corner, slow_corner=slow_corner,
                           profile=label, fast_values=fast, slow_values=slow)


def sensitivity(fn: Callable[[HardwareProfile], float], profile: HardwareProfile) -> SensitivityBand:
    """Evaluate fn over the profile's uncertain constants' ranges (see the module docstring)."""
    ranges = {c.name: (c.range[0], c.range[1]) for c in profile.uncertain()}
    return band(lambda over: fn(profile.with_overrides(over) if over else profile), ranges, profile.label())


def projection_sensitivity(traces: Sequence[Trace], profile: HardwareProfile, world: int | None = None,
                           compute_time: ComputeTime | None = None, **kw: Any) -> SensitivityBand:
    """The band of the projected makespan (at `world` workers via project_world, else as recorded)."""
    def makespan(p: HardwareProfile) -> float:
        if world is None:
            return project(traces, p, compute_time, **kw).makespan_s
        return project_world(traces, world, p, compute_time, **kw).makespan_s
    return sensitivity(makespan, profile)
