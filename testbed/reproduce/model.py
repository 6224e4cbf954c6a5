"""What a paper module declares: its headlines, their setting, the assumed
constants that move them, the scenarios that emulate them, and the regimes a
reader may vary ("what moves the headline").

A paper module (testbed/reproduce/papers/<name>.py) is data plus small
functions over the shared models (testbed.fidelity, the workloads' device
models); it defines `PAPER = Paper(...)`. The engine (engine.py) runs it and
computes every verdict: nothing in a paper module states a verdict.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

Status = Literal["verified", "assumed"]


@dataclass(frozen=True)
class SettingItem:
    """One fact of the paper's setting: `verified` only when a stored source
    (the paper's text, its code) states it; otherwise `assumed`, with why."""
    name: str
    value: Any
    status: Status
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "status": self.status, "source": self.source}


@dataclass(frozen=True)
class AssumedConstant:
    """A constant that moves a headline and has no primary source: its nominal
    value and the range the envelope covers, in `unit`."""
    name: str
    nominal: float
    lo: float
    hi: float
    unit: str
    source: str          # why this nominal and this range (a data sheet's bound, a published spread, ...)

    def __post_init__(self) -> None:
        if not self.lo <= self.nominal <= self.hi:
            raise ValueError(f"assumed constant {self.name}: nominal {self.nominal} outside its range "
                             f"[{self.lo}, {self.hi}]")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "nominal": self.nominal, "range": [self.lo, self.hi], "unit": self.unit,
                "source": self.source}


@dataclass(frozen=True)
class Regime:
    """A regime variable a reader may change (bytes per exchange, link rate,
    gradient density, ...): `project_at(value)` is the headline's projection
    with that variable at `value` and everything else at the paper's setting
    and the constants' nominal values. The engine finds the value closest to
    the paper's setting where the projection reaches the paper's number."""
    name: str
    unit: str
    paper_setting: float
    values: Sequence[float]
    project_at: Callable[[float], float]
    log_x: bool = False


@dataclass(frozen=True)
class Baseline:
    """One system of a headline's comparison, projected at the headline's setting:
    `seconds(over)` gives {case: seconds} (one case per model or setting the
    headline covers) with the assumed constants `over` (empty: nominal). Its own
    assumed constants (`constants`, not the headline's) give the row a range."""
    system: str                          # as the workload names it (e.g. lhc_switch, dense_ring)
    how: str                             # what is projected, with which model (one line)
    seconds: Callable[[dict[str, float]], dict[str, float]]
    constants: tuple[AssumedConstant, ...] = ()
    also_vs: str | None = None           # another row this one is also compared with (same transport)


@dataclass(frozen=True)
class Baselines:
    """The systems a headline's paper compares with, on the same data: the engine
    computes each row's time over the subject's (`subject`: the paper's system),
    so the ratio is the subject's speed-up over that system. `paper_baseline` is the
    row the headline's verdict compares with."""
    what: str                            # what one row's seconds are (one aggregation, one iteration, ...)
    subject: str
    paper_baseline: str
    rows: tuple[Baseline, ...]

    def __post_init__(self) -> None:
        names = [r.system for r in self.rows]
        missing = [s for s in (self.subject, self.paper_baseline, *(r.also_vs for r in self.rows if r.also_vs))
                   if s not in names]
        if missing or len(set(names)) != len(names):
            raise ValueError(f"baselines: rows {names} must be distinct and include {missing or 'every named row'}")


@dataclass
class EmulatedValues:
    """A headline's emulated values: one per seed, from valid points only.
    `n_points`: the points that could have fed it (valid or not)."""
    values: list[float]
    n_points: int
    what: str = ""                       # what was measured, at which setting (one line)
    invalid_reasons: list[str] = field(default_factory=list)   # why points were left out
    # Why these values do not measure what the claim is about (e.g. models not trained to
    # where the comparison means anything): a neutral-or-better headline is then not tested.
    not_tested: str = ""


@dataclass
class ComputedValues:
    """A direction headline's values, one per seed, computed in this process (training
    run here, no emulation), with what the report records beside them."""
    values: list[float]
    what: str                            # what was computed, at which setting (one line)
    lower_bounds: bool = False           # each value is only a lower bound (the baseline never got there)
    missing: str = ""                    # why there are no values
    detail: dict[str, Any] = field(default_factory=dict)   # e.g. the tuned points, kept in report.json


@dataclass
class Headline:
    id: str
    claim: str
    paper_value: float
    unit: str                            # "x" (a ratio), "%", ...
    paper_source: str                    # version, section / figure / table where known
    setting: list[SettingItem]
    # The projection at the paper's setting: overrides {constant name: value} of
    # the assumed constants (an empty dict: every constant nominal).
    project: Callable[[dict[str, float]], float]
    constants: list[AssumedConstant] = field(default_factory=list)
    # From the emulated runs (engine.EmulatedRuns) to one value per seed.
    emulated: Callable[[Any], EmulatedValues] | None = None
    # True when the emulated value is measured at the paper's setting, so the
    # paper's number must also lie in its interval for `reproduced`.
    emulated_applies: bool = False
    regimes: list[Regime] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)    # hardware models it uses (validation keys)
    note: str = ""                       # context a reader needs; never the verdict
    # How close counts as the paper's number (relative). The default, 25 %, is the
    # project's rule for speedups; a claim such as "neutral quality" states its
    # own margin here, with why in `note`.
    tolerance: float = 0.25
    # The systems the paper compares with, projected at the headline's setting
    # (report.json's `baselines` block); the verdict stays on `project`.
    baselines: Baselines | None = None
    # A claim of direction with no number ("faster in all the comparisons"): it holds when
    # the value is above `paper_value` (1 for a ratio), and the verdict rests on the 95 %
    # interval of `computed`'s per-seed values (verdict.decide_above), not on a projection.
    # A claim of "neutral to better" ("neutral_or_better": S-* vs FR-* model quality): decided on
    # the 95 % interval of the emulated per-seed values against `paper_value` with the margin
    # `tolerance` (verdict.decide_neutral_or_better); `lower_is_better` says which side is better.
    direction: Literal["value", "above", "neutral_or_better"] = "value"
    computed: Callable[[], ComputedValues] | None = None
    lower_is_better: bool = False

    def __post_init__(self) -> None:
        if (self.direction == "above") != (self.computed is not None):
            raise ValueError(f"headline {self.id}: a direction claim ('above') needs `computed`, and only it")
        if self.direction == "neutral_or_better" and (self.emulated is None or not self.emulated_applies):
            raise ValueError(f"headline {self.id}: a neutral-or-better claim is decided on emulated values "
                             "measured at the claim's setting (emulated, emulated_applies)")


@dataclass(frozen=True)
class ScenarioRun:
    """One scenario the reproduction runs (with `sweep.repeats` set to the seeds)."""
    key: str
    path: str                            # relative to the project root
    overrides: tuple[str, ...] = ()      # for the full run and --quick alike
    quick_overrides: tuple[str, ...] = ()
    quick: bool = True                   # --quick uses the scenario's own quick sweep as well


@dataclass
class Paper:
    name: str
    title: str
    citation: str
    headlines: list[Headline]
    scenarios: list[ScenarioRun] = field(default_factory=list)
    seeds: int = 3
    quick_seeds: int = 3
    notes: list[str] = field(default_factory=list)       # what could not be verified, in general

    def profiles(self) -> list[str]:
        seen: list[str] = []
        for h in self.headlines:
            seen += [p for p in h.profiles if p not in seen]
        return seen
