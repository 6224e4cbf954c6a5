"""What actually ran, per point, for figure captions and notes.

The manifest stores the scenario as loaded (command-line overrides applied,
sweep section intact) and, per point, only the swept values (`params`) and its
case. A caption that read the scenario's top-level fields would describe the
file, not the run: `--quick` and per-case `set`s change the dataset, epochs,
batch. So each point's parameters are re-resolved here the way the sweep
resolved them (testbed.scenario.sweep.iter_point_scenarios): scenario, then the
point's grid values, then its case's `set`, then the quick `set` if the run was
`--quick`, then the command-line overrides that are not swept. Values a
workload reports in its own records (batch, workers in p4sgd_summary) are what
ran and win where a figure has them.

Fidelity: a point is invalid when points.jsonl says `fidelity.valid: false`
or its workload summary says `valid: false`; figures draw it hollow, leave it
out of fitted lines and bands, and say how many there were and why.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

from testbed.results import Run
from testbed.scenario.loader import PathError, ScenarioError, apply_overrides, set_path


class Resolution:
    """Per-point resolved scenario dicts, or why they could not be resolved."""

    def __init__(self, run: Run):
        self.run = run
        self.error: str | None = None
        self.by_point: dict[int, dict[str, Any]] = {}
        try:
            self.by_point = _resolve_all(run)
        except (PathError, ScenarioError, KeyError, TypeError) as e:
            # An old manifest whose fields the schema no longer has: fall back to the
            # scenario as written, and say so in the caption (never silently).
            self.error = f"per-point parameters not re-resolved ({e}); caption shows the scenario as written"
            scn = run.manifest.get("scenario", {})
            self.by_point = {p["index"]: scn for p in _manifest_points(run)}

    def get(self, index: int, path: str, default: Any = None) -> Any:
        node: Any = self.by_point.get(index) or self.run.manifest.get("scenario", {})
        for seg in path.split("."):
            if isinstance(node, dict) and seg in node:
                node = node[seg]
            else:
                return default
        return node


def _manifest_points(run: Run) -> list[dict[str, Any]]:
    return run.manifest.get("points") or run.points


def _resolve_all(run: Run) -> dict[int, dict[str, Any]]:
    m = run.manifest
    scn = m.get("scenario") or {}
    cli = m.get("cli") or {}
    quick = bool(cli.get("quick"))
    sweep = scn.get("sweep") or {}
    case_sets = {c["name"]: c.get("set") or {} for c in sweep.get("cases") or []}
    quick_set = ((sweep.get("quick") or {}).get("set") or {}) if quick else {}
    # Sweep overrides already shaped the manifest's sweep; the others must win over case sets.
    cli_over = [o for o in cli.get("overrides") or [] if not o.split("=", 1)[0].strip().startswith("sweep.")]
    out = {}
    for p in _manifest_points(run):
        params = p.get("params") or {}
        raw = copy.deepcopy(scn)
        raw.pop("sweep", None)  # irrelevant to a point, and its dotted grid keys need no checking
        for path, value in list(params.items()) + list(case_sets.get(p.get("case"), {}).items()) \
                + list(quick_set.items()):
            set_path(raw, path, copy.deepcopy(value))
        over = [o for o in cli_over if o.split("=", 1)[0].strip() not in params]
        out[p["index"]] = apply_overrides(raw, over) if over else raw
    return out


# --------------------------------------------------------------------------- text
def values_text(values: Iterable[Any], fmt=str) -> str:
    """'4' or '1, 2, 4' for the distinct values, in order of first appearance."""
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return ", ".join(fmt(v) for v in seen) if seen else "-"


def dataset_text(d: dict[str, Any] | None) -> str:
    if not isinstance(d, dict):
        return "?"
    if d.get("source") == "synthetic":
        txt = f"synthetic {d.get('kind', 'dense')} {d.get('samples', '?')} x {d.get('features', '?')}"
        if d.get("kind") == "sparse" and "density" in d:
            txt += f" (density {d['density']:g})"
        return txt
    if d.get("source") == "profile":   # generated data of a public set's shape (hosts/glm/profiles.py)
        from hosts.glm.profiles import shape  # noqa: PLC0415 - light
        try:
            n, f = shape(d)
        except ValueError as e:               # a record from another version's profile table
            return f"profile {d.get('name')} ({e})"
        return f"{d.get('name')}-shaped synthetic {n} x {f:,}"
    return f"{d.get('source')} {d.get('name') or d.get('path', '')}".strip()


def per_case(res: Resolution, indices: Iterable[int], fields: dict[str, tuple[str, Any]]) -> str:
    """'p4sgd: B=16, 3 epochs; dp: B=1024, 2 epochs' from each point's resolved values.

    `fields`: label -> (dotted path, formatter returning text for one value).
    Fields equal across all cases are printed once, before the per-case ones.
    """
    by_case: dict[str, dict[str, list[Any]]] = {}
    for i in indices:
        case = _case_of(res.run, i)
        row = by_case.setdefault(case, {})
        for label, (path, _) in fields.items():
            v = res.get(i, path)
            if v is not None:
                row.setdefault(label, [])
                if v not in row[label]:
                    row[label].append(v)
    if not by_case:
        return ""
    shared, varying = [], []
    for label, (_, fmt) in fields.items():
        vals = [tuple(map(repr, row.get(label, []))) for row in by_case.values()]
        if all(v == vals[0] for v in vals):
            first = next(iter(by_case.values())).get(label)
            if first:
                shared.append(fmt(first))
        else:
            varying.append(label)
    parts = ["; ".join(shared)] if shared else []
    if varying and len(by_case) > 1:
        cases = []
        for case, row in by_case.items():
            cases.append(f"{case}: " + ", ".join(fields[lb][1](row[lb]) for lb in varying if row.get(lb)))
        parts.append("; ".join(cases))
    return "; ".join(p for p in parts if p)


def _case_of(run: Run, index: int) -> str:
    p = run.point(index) or next((q for q in _manifest_points(run) if q.get("index") == index), {})
    return p.get("case") or "base"


def run_mode_text(run: Run) -> str:
    cli = run.manifest.get("cli") or {}
    parts = []
    if cli.get("quick"):
        parts.append("QUICK run (--quick: the scenario's reduced sweep and `sweep.quick.set`)")
    over = [o for o in cli.get("overrides") or []]
    if over:
        parts.append("overrides: " + ", ".join(over))
    return "; ".join(parts)


# --------------------------------------------------------------------------- fidelity
def invalid_reasons(run: Run, index: int, summary: dict[str, Any] | None = None) -> list[str] | None:
    """None when the point is valid (or nothing says otherwise), else its reasons."""
    reasons: list[str] = []
    bad = False
    fid = (run.point(index) or {}).get("fidelity")
    if isinstance(fid, dict) and fid.get("valid") is False:
        bad = True
        reasons += [str(r) for r in fid.get("reasons") or []] or ["outside the fidelity band"]
    if summary is not None and summary.get("valid") is False:
        bad = True
        reasons += [str(r) for r in summary.get("invalid_reasons") or []] or \
            ["device timing violated (real CPU time exceeded the modeled time)"]
    return reasons if bad else None


def invalid_note(invalid: dict[int, list[str]], total: int,
                 how: str = "hollow markers, left out of lines and bands") -> str:
    """'2 of 8 points invalid (hollow markers, left out of lines and bands): <first reason>'."""
    if not invalid:
        return ""
    first = next(iter(invalid.values()))
    return (f"INVALID: {len(invalid)} of {total} point(s) outside the fidelity band "
            f"({how}); first reason: {first[0] if first else '?'}")
