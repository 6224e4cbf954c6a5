"""The reproduction engine: run a paper's scenarios over seeds, then put each
headline beside its projection, envelope, emulated interval and verdict.

  reproduce(paper, quick=..., out=..., net_mode=..., emulate=True, from_dir=None)
      -> ReproductionReport, written as report.json / report.md / figures/ in
      <out or results>/reproduce/<paper>/<timestamp>/.

Steps:
 1. each ScenarioRun of the paper is run through testbed.runner with
    `sweep.repeats` set to the paper's seeds (each repeat has its own seed:
    testbed.scenario.sweep), its runs under <report>/runs/; every point's
    status and summary rows are kept in <report>/emulated.jsonl, which
    `--from <report>` reads back instead of running again;
 2. each headline: the projection at the paper's setting with the constants
    nominal, its envelope over the assumed constants (verdict.envelope), the
    emulated values (valid points only) and their 95 % interval, the verdict;
    for a headline not reproduced, each regime swept ("what moves the headline");
    where the paper module declares them, the systems the paper compares with,
    projected at the same setting (baseline_table; the verdict stays on the
    headline's own projection);
 3. the hardware models the headlines use, checked against published
    measurements (validation.py);
 4. report.json, report.md and the figures (testbed.plots.reproduce).

Nothing here knows a paper: paper modules are data (model.py).
"""
from __future__ import annotations

import importlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from testbed import results as res
from testbed.manifest import git_state, machine
from testbed.reproduce.model import Baselines, ComputedValues, EmulatedValues, Headline, Paper, Regime
from testbed.reproduce.verdict import (TOLERANCE, Envelope, decide, decide_above, decide_neutral_or_better,
                                       envelope, pct, within)
from testbed.stats import mean_ci95

PAPERS = ("p4sgd", "lhc", "easgd", "shadowsync", "phub")
EMULATED_FILE = "emulated.jsonl"


class ReproduceError(Exception):
    """Bad input to `testbed reproduce`: one line saying what and how to fix it."""


def load_paper(name: str) -> Paper:
    if name not in PAPERS:
        raise ReproduceError(f"unknown paper {name!r}; one of: {', '.join(PAPERS)} (testbed reproduce --list)")
    return importlib.import_module(f"testbed.reproduce.papers.{name}").PAPER


# ---- emulated results --------------------------------------------------------------------

@dataclass
class PointResult:
    label: str
    case: str
    params: dict[str, Any]
    repeat: int
    seed: int
    status: str
    error: str | None = None
    summaries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.status == "ok" and bool(self.summaries) and all(
            s.get("valid", True) is not False for s in self.summaries)

    @property
    def invalid_reasons(self) -> list[str]:
        if self.status != "ok":
            return [f"{self.label}: {self.status}: {self.error or 'no reason given'}"]
        out = [f"{self.label}: {r}" for s in self.summaries for r in (s.get("invalid_reasons") or [])]
        if not out and not self.valid:
            out = [f"{self.label}: marked invalid" if self.summaries else f"{self.label}: no summary"]
        return out

    def to_dict(self, key: str) -> dict[str, Any]:
        return {"run": key, "label": self.label, "case": self.case, "params": self.params, "repeat": self.repeat,
                "seed": self.seed, "status": self.status, "error": self.error, "summaries": self.summaries}


@dataclass
class EmulatedRun:
    key: str
    scenario: str
    run_dir: str | None
    points: list[PointResult] = field(default_factory=list)
    wall_s: float = 0.0

    def rows(self, type: str | None = None, **match: Any) -> Iterator[tuple[PointResult, dict[str, Any]]]:
        """(point, summary row) for every row of `type` whose fields (or the
        point's params / case) equal `match`."""
        for p in self.points:
            for s in p.summaries:
                if type is not None and s.get("type") != type:
                    continue
                if all(s.get(k, p.params.get(k, p.case if k == "case" else None)) == v for k, v in match.items()):
                    yield p, s

    def per_seed(self, value: Callable[[dict[str, Any]], float | None], type: str | None = None,
                 what: str = "", **match: Any) -> EmulatedValues:
        """One value per matching row of a valid point (invalid ones listed, not used)."""
        values, reasons, n = [], [], 0
        for p, s in self.rows(type, **match):
            n += 1
            v = value(s) if p.valid else None
            if p.valid and v is not None and math.isfinite(v):
                values.append(float(v))
            elif not p.valid:
                reasons += p.invalid_reasons
            else:
                reasons.append(f"{p.label}: no value ({what or 'metric missing'})")
        if n == 0:   # failed points carry no summary rows: count them as points that could have fed it
            failed = [p for p in self.points if p.status != "ok" and all(p.params.get(k, v) == v
                                                                         for k, v in match.items())]
            n = len(failed)
            reasons += [r for p in failed for r in p.invalid_reasons]
        return EmulatedValues(values, n, what, reasons)


EmulatedRuns = dict[str, EmulatedRun]


def _overrides(paper: Paper, sr: Any, quick: bool) -> tuple[str, ...]:
    seeds = paper.quick_seeds if quick else paper.seeds
    return (*sr.overrides, *(sr.quick_overrides if quick else ()), f"sweep.repeats={seeds}")


def check_scenarios(paper: Paper, quick: bool) -> int:
    """Load and expand every scenario of the paper before anything runs: bad
    input is one clear error, not a failure half way. Returns the point count."""
    from testbed.scenario import ScenarioError, expand_points, load_scenario  # noqa: PLC0415

    n = 0
    for sr in paper.scenarios:
        try:
            scn = load_scenario(res.PROJECT_ROOT / sr.path, list(_overrides(paper, sr, quick)))
            n += len(expand_points(scn, quick=quick and sr.quick))
        except ScenarioError as e:
            raise ReproduceError(f"{paper.name}: scenario {sr.key} ({sr.path}) is invalid:\n{e}") from None
    return n


def _run_scenarios(paper: Paper, report_dir: Path, quick: bool, net_mode: str,
                   progress: Callable[[str], None]) -> EmulatedRuns:
    from testbed import runner  # noqa: PLC0415 - reproduce sits beside the runner and drives it
    from testbed.plots import PlotError, draw_figures  # noqa: PLC0415
    from testbed.results import load_run  # noqa: PLC0415

    runs: EmulatedRuns = {}
    for sr in paper.scenarios:
        overrides = _overrides(paper, sr, quick)
        progress(f"{sr.key}: {sr.path} {' '.join('--set ' + o for o in overrides)}"
                 + (" --quick" if quick and sr.quick else ""))
        t0 = time.monotonic()
        outcome = runner.run_scenario(res.PROJECT_ROOT / sr.path, overrides, net_mode=net_mode,
                                      quick=quick and sr.quick, out_dir=report_dir / "runs")
        points = _points_of(outcome)
        run = runs[sr.key] = EmulatedRun(sr.key, sr.path, str(outcome.run_dir), points, time.monotonic() - t0)
        for p in points:
            res.append_jsonl(report_dir / EMULATED_FILE, p.to_dict(sr.key))
        ok = sum(p.valid for p in points)
        if ok or any(p.status == "ok" for p in points):
            try:
                draw_figures(load_run(outcome.run_dir), None)
            except PlotError as e:
                progress(f"{sr.key}: figures not drawn: {e}")
        progress(f"{sr.key}: {len(points)} point(s), {ok} valid, {run.wall_s:.0f} s")
        if outcome.interrupted:
            raise KeyboardInterrupt
    return runs


def _points_of(outcome: Any) -> list[PointResult]:
    by_index = {r["index"]: r for r in res.read_jsonl(outcome.run_dir / "points.jsonl")}
    out = []
    for o in outcome.outcomes:
        rec = by_index.get(o.index, {})
        out.append(PointResult(o.label, rec.get("case", ""), rec.get("params", {}), rec.get("repeat", 0),
                               rec.get("seed", 0), o.status, o.error, list(o.summary)))
    return out


def load_emulated(report_dir: Path, paper: Paper) -> EmulatedRuns:
    """The emulated results a previous `testbed reproduce` kept (--from)."""
    path = report_dir / EMULATED_FILE
    if not path.exists():
        raise ReproduceError(f"{report_dir}: no {EMULATED_FILE}; give the folder of an earlier "
                             f"`testbed reproduce {paper.name}` run")
    runs: EmulatedRuns = {}
    paths = {sr.key: sr.path for sr in paper.scenarios}
    for r in res.read_jsonl(path):
        run = runs.setdefault(r["run"], EmulatedRun(r["run"], paths.get(r["run"], "?"), None))
        run.points.append(PointResult(r["label"], r["case"], r["params"], r["repeat"], r["seed"], r["status"],
                                      r.get("error"), r.get("summaries") or []))
    return runs


# ---- headlines ---------------------------------------------------------------------------

@dataclass
class RegimeResult:
    name: str
    unit: str
    paper_setting: float
    values: list[float]
    projected: list[float]
    reaching: float | None
    sentence: str
    log_x: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "unit", "paper_setting", "values", "projected",
                                              "reaching", "sentence", "log_x")}


def what_moves(h: Headline, regime: Regime, tol: float = TOLERANCE) -> RegimeResult:
    """The regime value closest to the paper's setting (ratio distance) whose
    projection reaches the paper's number, over the regime's grid."""
    values = sorted(float(v) for v in regime.values)
    projected = [float(regime.project_at(v)) for v in values]
    hits = [v for v, p in zip(values, projected) if within(h.paper_value, p, tol)]

    def distance(v: float) -> float:
        if v > 0 and regime.paper_setting > 0:
            return abs(math.log(v / regime.paper_setting))
        return abs(v - regime.paper_setting)
    reach = min(hits, key=distance) if hits else None
    at_paper = float(regime.project_at(regime.paper_setting))
    if reach is None:
        sentence = (f"with {regime.name} anywhere in {values[0]:.4g}–{values[-1]:.4g} {regime.unit} (the paper's "
                    f"setting {regime.paper_setting:.4g}) and the constants nominal, the projection "
                    f"({min(projected):.3g}–{max(projected):.3g}) never comes within {pct(tol)} of the paper's "
                    f"{h.paper_value:.3g}")
    else:
        side = "≥" if reach > regime.paper_setting else "≤"
        sentence = (f"the projection reaches the paper's {h.paper_value:.3g} (within {pct(tol)}) at "
                    f"{regime.name} {side} {reach:.4g} {regime.unit}, against {regime.paper_setting:.4g} in the "
                    f"paper's setting (where it is {at_paper:.3g})")
        if reach == regime.paper_setting:
            sentence = (f"at the paper's {regime.name} ({reach:.4g} {regime.unit}) the projection already "
                        f"reaches the paper's {h.paper_value:.3g}")
    return RegimeResult(regime.name, regime.unit, regime.paper_setting, values, projected, reach, sentence,
                        regime.log_x)


def baseline_table(b: Baselines) -> dict[str, Any]:
    """Each system's projected seconds per case (constants nominal), their range over
    the row's own assumed constants (each at its ends, one at a time), and its time over
    the subject's: the subject's speed-up over that system (and over `also_vs`'s)."""
    secs = {r.system: r.seconds({}) for r in b.rows}
    cases = list(secs[b.subject])
    rows = []
    for r in b.rows:
        s = secs[r.system]
        if list(s) != cases:
            raise ValueError(f"baseline {r.system}: cases {list(s)} differ from {b.subject}'s {cases}")
        ends = [s] + [r.seconds({c.name: v}) for c in r.constants for v in (c.lo, c.hi)]
        rows.append({
            "system": r.system, "how": r.how, "subject": r.system == b.subject,
            "paper_baseline": r.system == b.paper_baseline, "seconds": s,
            "range_s": {k: [min(e[k] for e in ends), max(e[k] for e in ends)] for k in cases}
            if r.constants else None,
            "constants": [c.to_dict() for c in r.constants],
            "ratio_vs_subject": {k: s[k] / secs[b.subject][k] for k in cases},
            "also_vs": r.also_vs,
            "ratio_vs_also": {k: s[k] / secs[r.also_vs][k] for k in cases} if r.also_vs else None})
    return {"what": b.what, "subject": b.subject, "paper_baseline": b.paper_baseline, "cases": cases,
            "rows": rows}


@dataclass
class HeadlineResult:
    headline: Headline
    envelope: Envelope
    emulated: EmulatedValues | None
    verdict: str
    reason: str
    regimes: list[RegimeResult] = field(default_factory=list)
    flagged_profiles: list[str] = field(default_factory=list)
    baselines: dict[str, Any] | None = None
    computed: ComputedValues | None = None       # a direction headline's per-seed values
    outcome: str | None = None                   # a neutral-or-better headline's (verdict.OUTCOMES)

    def to_dict(self) -> dict[str, Any]:
        h = self.headline
        iv = mean_ci95(self.emulated.values) if self.emulated else None
        emulated = {"mean": iv.mean if iv else None, "ci95": [iv.lo, iv.hi] if iv else None,
                    "n_valid": len(self.emulated.values) if self.emulated else 0,
                    "n_points": self.emulated.n_points if self.emulated else 0,
                    "values": self.emulated.values if self.emulated else [],
                    "what": self.emulated.what if self.emulated else "not run",
                    "applies_at_paper_setting": h.emulated_applies,
                    "left_out": (self.emulated.invalid_reasons[:20] if self.emulated else [])}
        return {"id": h.id, "claim": h.claim, "paper_value": h.paper_value, "unit": h.unit, "tolerance": h.tolerance,
                "paper_source": h.paper_source, "setting": [s.to_dict() for s in h.setting],
                "projected": self.envelope.nominal, "envelope": [self.envelope.lo, self.envelope.hi],
                "envelope_detail": self.envelope.to_dict(),
                "constants": [c.to_dict() for c in h.constants], "emulated": emulated,
                "verdict": self.verdict, "reason": self.reason, "note": h.note,
                "what_moves": [r.to_dict() for r in self.regimes], "profiles": h.profiles,
                "flagged_profiles": self.flagged_profiles, "baselines": self.baselines,
                "direction": h.direction, "computed": self._computed_dict(), "outcome": self.outcome,
                "not_tested": self.emulated.not_tested if self.emulated else ""}

    def _computed_dict(self) -> dict[str, Any] | None:
        c = self.computed
        if c is None:
            return None
        iv = mean_ci95(c.values)
        return {"values": c.values, "mean": iv.mean if iv else None, "ci95": [iv.lo, iv.hi] if iv else None,
                "what": c.what, "lower_bounds": c.lower_bounds, "missing": c.missing, "detail": c.detail}


def evaluate(h: Headline, runs: EmulatedRuns | None, flagged: dict[str, str]) -> HeadlineResult:
    if h.direction == "above":
        return _evaluate_direction(h, flagged)
    tol = h.tolerance
    env = envelope(h.project, h.constants, h.paper_value, tol)
    em = None
    note = ""
    if h.emulated is not None and runs is not None:
        try:
            em = h.emulated(runs)
        except KeyError as e:
            em = EmulatedValues([], 0, f"scenario {e} was not run", [])
    elif h.emulated is not None:
        note = " (emulation not run: --no-emulation)"
    iv = mean_ci95(em.values) if em else None
    if h.direction == "neutral_or_better":
        v = decide_neutral_or_better(h.paper_value, h.unit, iv, tol, h.lower_is_better,
                                     em.not_tested if em else "the emulation did not run (--no-emulation)")
    else:
        v = decide(h.paper_value, h.unit, env, iv, h.emulated_applies and (runs is not None), h.constants,
                   note, tol)
    reason = v.reason
    assumed = sum(s.status == "assumed" for s in h.setting)
    if assumed:
        # A verdict at a setting the paper's stored text does not state is only as good as those items.
        reason += f" (at a setting with {assumed} of {len(h.setting)} items assumed)"
    bad = [p for p in h.profiles if p in flagged]
    if bad:
        reason += "; " + "; ".join(f"hardware model {p} misses measurements ({flagged[p]})" for p in bad)
    regimes = [what_moves(h, r, tol) for r in h.regimes] if v.verdict != "reproduced" else []
    table = baseline_table(h.baselines) if h.baselines is not None else None
    return HeadlineResult(h, env, em, v.verdict, reason, regimes, bad, table, outcome=v.details.get("outcome"))


def _evaluate_direction(h: Headline, flagged: dict[str, str]) -> HeadlineResult:
    """A claim of direction (Headline.direction 'above'): the verdict on the interval of
    the values computed in this process; `project` gives their mean (no constants)."""
    c = h.computed()
    iv = mean_ci95(c.values)
    v = decide_above(h.paper_value, h.unit, iv, c.lower_bounds, c.missing)
    env = envelope(h.project, h.constants, h.paper_value, h.tolerance)
    reason = v.reason
    assumed = sum(s.status == "assumed" for s in h.setting)
    if assumed:
        reason += f" (at a setting with {assumed} of {len(h.setting)} items assumed)"
    bad = [p for p in h.profiles if p in flagged]
    return HeadlineResult(h, env, None, v.verdict, reason, [], bad, None, c)


# ---- the whole reproduction --------------------------------------------------------------

@dataclass
class ReproductionReport:
    paper: Paper
    report_dir: Path
    quick: bool
    headlines: list[HeadlineResult]
    runs: EmulatedRuns | None
    validation: list[dict[str, Any]]
    started: float
    wall_s: float
    status: str = "ok"
    net_mode: str = "mininet"
    # What ran, as the report of the run this one is rewritten from (--from) said it.
    previous_ran: dict[str, Any] | None = None
    # The code that ran: the checkout as the run started (a long run may outlive commits
    # made beside it; the report is that code's, not the checkout's at its end).
    git: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        p = self.paper
        d = self._dict()
        if self.previous_ran is not None:
            # The emulated runs are the earlier run's: its wall time, seeds and scenarios stand;
            # the verdicts are this code's (git), recomputed at `rewritten_at`.
            d["ran"] = {**self.previous_ran, "git": d["ran"]["git"], "rewritten_at": d["ran"]["started_at"],
                        "rewrite_s": d["ran"]["wall_s"]}
        return d

    def _dict(self) -> dict[str, Any]:
        p = self.paper
        return {
            "format": 1, "paper": p.name, "title": p.title, "citation": p.citation, "status": self.status,
            "quick": self.quick, "tolerance": TOLERANCE,
            "headlines": [h.to_dict() for h in self.headlines],
            "model_validation": self.validation,
            "notes": p.notes,
            "ran": {
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
                "wall_s": round(self.wall_s, 1), "git": self.git or git_state(), "machine": machine(),
                "net": self.net_mode if self.runs is not None else None,
                "seeds": p.quick_seeds if self.quick else p.seeds,
                "scenarios": [{"key": r.key, "path": r.scenario, "run_dir": r.run_dir,
                               "points": len(r.points), "valid": sum(pt.valid for pt in r.points),
                               "seeds": sorted({pt.seed for pt in r.points}), "wall_s": round(r.wall_s, 1)}
                              for r in (self.runs or {}).values()],
            },
        }


def new_report_dir(paper: str, out: Path | None) -> Path:
    """<out or results>/reproduce/<paper>/<timestamp>/."""
    try:
        return res.new_stamped_dir((out or res.DEFAULT_RESULTS_ROOT) / "reproduce" / paper)
    except res.ResultsDirError as e:
        raise ReproduceError(str(e)) from None


def reproduce(name: str, *, quick: bool = False, out: Path | None = None, net_mode: str = "mininet",
              emulate: bool = True, from_dir: Path | None = None,
              progress: Callable[[str], None] = lambda s: None) -> ReproductionReport:
    from testbed.reproduce import report as writer  # noqa: PLC0415
    from testbed.reproduce.validation import flagged_profiles, validation_rows  # noqa: PLC0415

    paper = load_paper(name)
    if from_dir is None and emulate:
        check_scenarios(paper, quick)
    started, git_at_start = time.time(), git_state()
    t0 = time.monotonic()
    previous = None
    if from_dir is not None:
        runs: EmulatedRuns | None = load_emulated(from_dir, paper)
        report_dir = from_dir
        if (from_dir / "report.json").exists():
            previous = read_report(from_dir)
            quick = bool(previous.get("quick", quick))
            net_mode = previous.get("ran", {}).get("net") or net_mode
    else:
        report_dir = new_report_dir(name, out)
        runs = None
    status = "ok"
    try:
        if runs is None and emulate:
            runs = _run_scenarios(paper, report_dir, quick, net_mode, progress)
    except KeyboardInterrupt:
        status = "interrupted"
        runs = load_emulated(report_dir, paper) if (report_dir / EMULATED_FILE).exists() else None
    validation = validation_rows(paper.profiles())
    flagged = flagged_profiles(validation)
    progress("projecting the headlines at the paper's setting")
    t_projections = time.monotonic()
    results = [evaluate(h, runs, flagged) for h in paper.headlines]
    progress(f"projected {len(results)} headline(s) in {time.monotonic() - t_projections:.0f} s")
    rep = ReproductionReport(paper, report_dir, quick, results, runs, validation, started,
                             time.monotonic() - t0, status, net_mode,
                             previous_ran=previous.get("ran") if previous else None, git=git_at_start)
    writer.write(rep)
    if status == "interrupted":
        raise KeyboardInterrupt(str(report_dir))
    return rep


def headline_table(name: str) -> list[dict[str, Any]]:
    """`testbed reproduce --list`: each paper's headlines, without running anything."""
    paper = load_paper(name)
    return [{"id": h.id, "claim": h.claim, "paper_value": h.paper_value, "unit": h.unit,
             "source": h.paper_source, "direction": h.direction} for h in paper.headlines]


def read_report(report_dir: Path) -> dict[str, Any]:
    return json.loads((report_dir / "report.json").read_text())
