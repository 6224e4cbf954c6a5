"""Verdicts, computed from the numbers, never written by hand.

  reproduced       the paper's value is within TOLERANCE (25 %) of the projection
                   at the paper's setting, and, where the emulation measures the
                   paper's setting (Headline.emulated_applies), inside the emulated
                   95 % interval, an interval no wider than the margin (a wider
                   one cannot tell the paper's value from its neighbours);
  within_envelope  some values of the assumed constants, within their ranges,
                   bring the projection within TOLERANCE of the paper's value
                   (the report names those values);
  not_reproduced   neither; also when the projection agrees but the emulation at the
                   paper's setting does not confirm it (no valid value, an interval
                   that excludes the paper's value or is too wide to decide).

A claim of direction with no number ("A is faster than B": Headline.direction
"above") is decided on the 95 % interval of its per-seed values (decide_above):
reproduced when the whole interval lies above the threshold, not_reproduced when
it does not (below it, or containing it: too few seeds to tell), or when there
are fewer than two values.

A claim of "neutral to better" (Headline.direction "neutral_or_better": S-* vs FR-*
model quality) is decided on the 95 % interval of the per-seed ratio against its
reference r (1.0) and the headline's margin m (decide_neutral_or_better): the outcome is
  neutral    the whole interval within r (1 +- m): no difference the margin counts;
  better     else the whole interval on the better side of r;
  worse      else the whole interval on the worse side of r;
  undecided  else (the interval holds r and reaches beyond the margin: too few seeds);
reproduced when neutral or better, not_reproduced when worse or undecided, and
not_reproduced, "not tested", without looking at the interval when the values do not
measure what the claim is about (EmulatedValues.not_tested: e.g. models not trained to
where the comparison means anything).

"Within 25 % of x" is |paper - x| <= 0.25 x throughout, so a value in the
envelope [lo, hi] reaches the paper's number exactly when
[lo, hi] meets [paper / 1.25, paper / 0.75].

The envelope is testbed.fidelity.sensitivity.band over the headline's assumed
constants: nominal, each constant alone at either end, and the two corners.
The values named are, first, one constant alone: of those whose end of range
reaches the paper's value, the one that needs the smallest share of the way
from its nominal to that end (bisection); else every constant together, the
nearest point along the straight line from the nominal constants to the
envelope's corner on the paper's side (the projection is taken as monotone
along these lines, which holds for the sums of times the models are); else the
evaluated point closest to the paper's value that reaches it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from testbed.fidelity.sensitivity import SensitivityBand, band
from testbed.reproduce.model import AssumedConstant
from testbed.stats import Interval

TOLERANCE = 0.25
VERDICTS = ("reproduced", "within_envelope", "not_reproduced")
OUTCOMES = ("neutral", "better", "worse", "undecided")     # of a neutral-or-better claim


def within(paper: float, x: float, tol: float = TOLERANCE) -> bool:
    return abs(paper - x) <= tol * abs(x)


def reachable(paper: float, lo: float, hi: float, tol: float = TOLERANCE) -> bool:
    """Some x in [lo, hi] with |paper - x| <= tol * x (positive quantities)."""
    return hi >= paper / (1 + tol) and lo <= paper / (1 - tol)


@dataclass
class Envelope:
    nominal: float
    lo: float
    hi: float
    band: SensitivityBand
    reaching: dict[str, float] | None = None     # constant values that reach the paper's value
    reaching_value: float | None = None           # the projection with those values

    def to_dict(self) -> dict[str, Any]:
        return {"nominal": self.nominal, "range": [self.lo, self.hi],
                "most_sensitive": self.band.most_sensitive,
                "per_constant": {k: list(v) for k, v in self.band.per_constant.items()},
                "fast_corner": self.band.fast_corner, "slow_corner": self.band.slow_corner,
                "reaching": self.reaching, "reaching_value": self.reaching_value}


# The bisection's resolution, as a share of the way from a constant's nominal to its
# range's end: a reported value is off by at most this share of that way (it is
# printed to 4 digits). Each halving is a projection: 20, where 40 took twice as long
# for digits no report shows (ShadowSync's envelope: ~70 % of its time in the search).
REACH_STEP_RESOLUTION = 2.0 ** -20


def envelope(project: Callable[[dict[str, float]], float], constants: list[AssumedConstant],
             paper: float, tol: float = TOLERANCE) -> Envelope:
    """The projection's band over the constants' ranges, and the constant values
    (if any) that bring it within `tol` of the paper's value (module docstring)."""
    b = band(project, {c.name: (c.lo, c.hi) for c in constants})
    env = Envelope(b.nominal, b.lo, b.hi, b)
    if within(paper, b.nominal, tol) or not reachable(paper, b.lo, b.hi, tol):
        return env
    nominal = {c.name: c.nominal for c in constants}
    by_name = {c.name: c for c in constants}
    up = paper > b.nominal
    edge = paper / (1 + tol) if up else paper / (1 - tol)     # the near edge of "within tol"

    def reaches(v: float) -> bool:
        return v >= edge if up else v <= edge

    def smallest_step(target: dict[str, float]) -> tuple[float, dict[str, float], float] | None:
        """Bisection for the smallest step t from the nominal constants toward
        `target` whose projection reaches the edge: (t, the values, the projection)."""
        def at(t: float) -> dict[str, float]:
            return {k: nominal[k] + t * (target[k] - nominal[k]) for k in target}
        if not reaches(project(at(1.0))):
            return None
        lo, hi = 0.0, 1.0
        while hi - lo > REACH_STEP_RESOLUTION:
            mid = (lo + hi) / 2
            if reaches(project(at(mid))):
                hi = mid
            else:
                lo = mid
        values = at(hi)
        v = float(project(values))
        return (hi, values, v) if within(paper, v, tol) else None

    # One constant alone first (what a reader can act on): the one that needs the
    # smallest share of the way from its nominal to the end of its range.
    singles = []
    for name, (v_lo, v_hi) in b.per_constant.items():
        c = by_name[name]
        for end, v_end in ((c.lo, v_lo), (c.hi, v_hi)):
            if end != c.nominal and reaches(v_end):
                found = smallest_step({name: end})
                if found:
                    singles.append(found)
    if singles:
        _, env.reaching, env.reaching_value = min(singles, key=lambda f: f[0])
        return env
    # Else all of them together, along the line to the envelope's corner on the paper's side.
    corner = b.slow_values if up else b.fast_values
    found = smallest_step(corner) if corner else None
    if found:
        _, env.reaching, env.reaching_value = found
        return env
    # Not along that line: the evaluated point closest to the paper's value.
    candidates = [({name: by_name[name].lo}, v_lo) for name, (v_lo, _) in b.per_constant.items()]
    candidates += [({name: by_name[name].hi}, v_hi) for name, (_, v_hi) in b.per_constant.items()]
    if b.fast_corner is not None:
        candidates += [(dict(b.fast_values), b.fast_corner), (dict(b.slow_values), b.slow_corner)]
    hits = [(abs(v - paper), over, v) for over, v in candidates if v is not None and within(paper, v, tol)]
    if hits:
        _, env.reaching, env.reaching_value = min(hits, key=lambda h: h[0])
    return env


@dataclass
class Verdict:
    verdict: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


def pct(tol: float) -> str:
    """A margin as a percentage: 25 %, 0.1 %."""
    return f"{tol * 100:.3g} %"


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if unit == "x":
        return f"{x:.3g}×"
    if unit == "%":
        return f"{x:.3g} %"
    return f"{x:.4g}" + (f" {unit}" if unit else "")


def decide(paper: float, unit: str, env: Envelope, emulated: Interval | None, applies: bool,
           constants: list[AssumedConstant], emulation_note: str = "", tol: float = TOLERANCE) -> Verdict:
    """The verdict and its one-sentence reason (module docstring); `tol`: the headline's margin."""
    p = env.nominal
    proj = f"the projection at the paper's setting is {fmt(p, unit)}"
    span = f"envelope {fmt(env.lo, unit)}–{fmt(env.hi, unit)}"
    em_ok = True
    em_text = ""
    if applies:
        if emulated is None:
            em_ok = False
            em_text = f"; no valid emulated value at the paper's setting{emulation_note}"
        elif not emulated.lo <= paper <= emulated.hi:
            em_ok = False
            em_text = (f"; the emulated 95 % interval {fmt(emulated.lo, unit)}–{fmt(emulated.hi, unit)} "
                       f"(n={emulated.n}) excludes {fmt(paper, unit)}")
        elif (emulated.hi - emulated.lo) / 2 > tol * abs(paper):
            # An interval wider than the margin contains the paper's value without telling
            # it from its neighbours: the emulation cannot decide, so it does not confirm.
            em_ok = False
            em_text = (f"; the emulated 95 % interval {fmt(emulated.lo, unit)}–{fmt(emulated.hi, unit)} "
                       f"(n={emulated.n}) is wider than the ±{pct(tol)} margin: too few seeds to decide")
        else:
            em_text = (f", and the emulated 95 % interval {fmt(emulated.lo, unit)}–{fmt(emulated.hi, unit)} "
                       f"(n={emulated.n}) contains it")
    if within(paper, p, tol) and em_ok:
        return Verdict("reproduced", f"the paper's {fmt(paper, unit)} is within {pct(tol)} of the projection at "
                                     f"the paper's setting, {fmt(p, unit)}{em_text}")
    if within(paper, p, tol):
        # The nominal projection agrees; the emulation at the paper's setting does not confirm it.
        return Verdict("not_reproduced",
                       f"{proj} ({span}), within {pct(tol)} of the paper's {fmt(paper, unit)}{em_text}")
    if env.reaching is not None:
        units = {c.name: c.unit for c in constants}
        nominal = {c.name: c.nominal for c in constants}
        changed = ", ".join(f"{k} = {v:.4g} {units.get(k, '')} (nominal {nominal.get(k, float('nan')):.4g})"
                            for k, v in env.reaching.items() if v != nominal.get(k))
        return Verdict("within_envelope",
                       f"{proj} ({span}); it comes within {pct(tol)} of the paper's {fmt(paper, unit)} with "
                       f"{changed} (projection {fmt(env.reaching_value, unit)}){em_text}",
                       {"reaching": env.reaching})
    most = env.band.most_sensitive
    side = "below" if p < paper else "above"
    return Verdict("not_reproduced",
                   f"{proj}, {side} the paper's {fmt(paper, unit)}, and no value of the assumed constants "
                   f"within their ranges reaches it ({span}"
                   + (f"; the most decisive constant is {most}" if most else "; no assumed constant moves it")
                   + f"){em_text}")


def decide_above(threshold: float, unit: str, interval: Interval | None, lower_bounds: bool = False,
                 missing: str = "") -> Verdict:
    """The verdict of a direction claim (module docstring): `interval` over the per-seed
    values; `lower_bounds`: each value is only a lower bound (the baseline never reached the
    target), so an interval above the threshold decides and one that is not cannot."""
    t = fmt(threshold, unit)
    if interval is None:
        return Verdict("not_reproduced", f"no value to compare with {t}" + (f": {missing}" if missing else ""))
    span = f"the 95 % interval {fmt(interval.lo, unit)}–{fmt(interval.hi, unit)} (mean {fmt(interval.mean, unit)}, " \
           f"n={interval.n})" + (" of lower bounds" if lower_bounds else "")
    if interval.n < 2:
        return Verdict("not_reproduced", f"one value ({fmt(interval.mean, unit)}): no interval to decide with")
    if interval.lo > threshold:
        return Verdict("reproduced", f"{span} lies above {t}")
    if lower_bounds:
        return Verdict("not_reproduced", f"{span} reaches down to {t}, and lower bounds cannot show more")
    if interval.hi < threshold:
        return Verdict("not_reproduced", f"{span} lies below {t}: the opposite of the claim")
    return Verdict("not_reproduced", f"{span} contains {t}: above and below it cannot be told apart "
                                     f"at {interval.n} seeds")


def outcome_of(interval: Interval, ref: float, margin: float, lower_is_better: bool) -> str:
    """neutral, better, worse or undecided (module docstring) of `interval` against `ref`."""
    if ref * (1 - margin) <= interval.lo and interval.hi <= ref * (1 + margin):
        return "neutral"
    below, above = interval.hi < ref, interval.lo > ref
    if below or above:
        return "better" if below == lower_is_better else "worse"
    return "undecided"


def decide_neutral_or_better(ref: float, unit: str, interval: Interval | None, margin: float,
                             lower_is_better: bool, not_tested: str = "") -> Verdict:
    """The verdict of a neutral-or-better claim (module docstring); details["outcome"]
    is one of OUTCOMES (undecided where nothing was tested)."""
    r, band = fmt(ref, unit), f"{fmt(ref * (1 - margin), unit)}–{fmt(ref * (1 + margin), unit)}"
    span = "" if interval is None else (f"the 95 % interval {fmt(interval.lo, unit)}–{fmt(interval.hi, unit)} "
                                        f"(mean {fmt(interval.mean, unit)}, n={interval.n})")
    if not_tested:
        return Verdict("not_reproduced", f"not tested: {not_tested}" + (
            f" ({span} is not used)" if span else ""), {"outcome": "undecided"})
    if interval is None:
        return Verdict("not_reproduced", f"no valid value to compare with {r}", {"outcome": "undecided"})
    if interval.n < 2:
        return Verdict("not_reproduced", f"one value ({fmt(interval.mean, unit)}): no interval to decide with",
                       {"outcome": "undecided"})
    out = outcome_of(interval, ref, margin, lower_is_better)
    side = "lower" if lower_is_better else "higher"
    reason = {"neutral": f"neutral: {span} lies within ±{pct(margin)} of {r} ({band})",
              "better": f"better: {span} lies wholly on the better ({side}) side of {r} and reaches beyond "
                        f"±{pct(margin)}",
              "worse": f"worse: {span} lies wholly on the worse side of {r} and reaches beyond ±{pct(margin)}",
              "undecided": f"undecided: {span} holds {r} and reaches beyond ±{pct(margin)} ({band}): too few "
                           f"seeds to tell neutral from better or worse"}[out]
    return Verdict("reproduced" if out in ("neutral", "better") else "not_reproduced", reason, {"outcome": out})
