"""report.json, report.md and the figures of a reproduction (engine.ReproductionReport).

report.md opens with the headline table and ends with what ran and how long it
took; everything in it is read from report.json's dict, so `testbed reproduce
--from DIR` rewrites the same report from the kept emulated results.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed import results as res
from testbed.reproduce.verdict import fmt


def write(rep: Any) -> Path:
    d = rep.to_dict()
    res.write_json(rep.report_dir / "report.json", d)
    figures = draw_figures(d, rep.report_dir / "figures")
    (rep.report_dir / "report.md").write_text(markdown(d, figures, rep.report_dir))
    return rep.report_dir


def draw_figures(d: dict[str, Any], folder: Path) -> list[Path]:
    from testbed.plots.reproduce import draw_headlines, draw_what_moves  # noqa: PLC0415 - matplotlib

    folder.mkdir(parents=True, exist_ok=True)
    out = [draw_headlines(d, folder)]
    moves = draw_what_moves(d, folder)
    return out + ([moves] if moves else [])


def _emulated_cell(e: dict[str, Any], unit: str) -> str:
    if e["mean"] is None:
        return f"none valid ({e['n_valid']}/{e['n_points']})" if e["n_points"] else "not run"
    lo, hi = e["ci95"]
    # values, not points: a paired headline (a ratio of two points per seed) takes two
    # valid points per value, so "5/10 valid" would read as half the points failing
    return (f"{fmt(e['mean'], unit)} [{fmt(lo, unit)}, {fmt(hi, unit)}] "
            f"(n = {e['n_valid']} from {e['n_points']} points)")


def _computed_cell(c: dict[str, Any], unit: str) -> str:
    if c["mean"] is None:
        return "no value" + (f" ({c['missing']})" if c["missing"] else "")
    lo, hi = c["ci95"]
    bound = " (lower bounds)" if c["lower_bounds"] else ""
    return f"{fmt(c['mean'], unit)} [{fmt(lo, unit)}, {fmt(hi, unit)}] (n={len(c['values'])}){bound}"


def _seconds(s: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e6:.3g} µs"


def _baseline_cell(row: dict[str, Any], case: str) -> str:
    cell = f"{_seconds(row['seconds'][case])} ({row['ratio_vs_subject'][case]:.3g}x)"
    if row["range_s"]:
        lo, hi = row["range_s"][case]
        cell += f" [{_seconds(lo)}–{_seconds(hi)}]"
    if row["also_vs"]:
        cell += f"; {row['ratio_vs_also'][case]:.3g}x vs {row['also_vs']}"
    return cell


def _baselines_md(b: dict[str, Any]) -> list[str]:
    """The headline's baselines: a row per system, a column per case."""
    L = [f"Baselines on the same data ({b['what']}; constants nominal). Each cell: projected time "
         f"({b['subject']}'s speed-up over that system = its time / {b['subject']}'s); a range where the row "
         f"has its own assumed constants; **bold**: the baseline the verdict compares with.", "",
         "| system | how it is projected | " + " | ".join(b["cases"]) + " |",
         "|---|---|" + "---|" * len(b["cases"])]
    for r in b["rows"]:
        name = f"**{r['system']}**" if r["paper_baseline"] else r["system"] + (" (subject)" if r["subject"] else "")
        how = r["how"].rstrip(".") + "." + "".join(f" Assumed {c['name']}: {c['nominal']:.4g} {c['unit']}, range "
                                 f"{c['range'][0]:.4g}–{c['range'][1]:.4g} ({c['source']})." for c in r["constants"])
        L.append(f"| {name} | {how} | " + " | ".join(_baseline_cell(r, c) for c in b["cases"]) + " |")
    return L


def markdown(d: dict[str, Any], figures: list[Path], report_dir: Path) -> str:
    L: list[str] = []
    mode = ("projections only, no emulation" if d["ran"]["net"] is None
            else "quick run" if d["quick"] else "full run")
    flag = " --no-emulation" if d["ran"]["net"] is None else " --quick" if d["quick"] else ""
    L += [f"# Reproduction report: {d['title']}", "",
          f"`testbed reproduce {d['paper']}{flag}` ({mode}, status **{d['status']}**). {d['citation']}", "",
          "| claim | paper | projected (paper's setting) | envelope | emulated mean [95 % CI] (values from points) "
          "| verdict |", "|---|---|---|---|---|---|"]
    for h in d["headlines"]:
        u = h["unit"]
        if h.get("direction") == "above":      # no projection: per-seed values computed in process
            L.append(f"| {h['claim']} | > {fmt(h['paper_value'], u)} | computed in process: "
                     f"{_computed_cell(h['computed'], u)} | — | {_emulated_cell(h['emulated'], u)} | "
                     f"**{h['verdict']}** |")
            continue
        L.append(f"| {h['claim']} | {fmt(h['paper_value'], u)} | {fmt(h['projected'], u)} | "
                 f"{fmt(h['envelope'][0], u)}–{fmt(h['envelope'][1], u)} | {_emulated_cell(h['emulated'], u)} | "
                 f"**{h['verdict']}** |")
    L += ["", f"A verdict is computed (docs/reproduce.md): `reproduced` when the paper's value is within "
          f"±{d['tolerance']:.0%} (or the headline's own stated margin) of the projection at the paper's setting "
          "and, where the emulation measures the paper's setting, inside an emulated 95 % interval no wider than "
          "that margin; `within_envelope` when some values of the assumed constants within their ranges reach "
          "it; `not_reproduced` otherwise.", ""]
    for f in figures:
        L += [f"![{f.stem}](figures/{f.name})", ""]
    for h in d["headlines"]:
        u = h["unit"]
        L += [f"## {h['id']}: {h['claim']}", "",
              f"- **Verdict: {h['verdict']}.** {h['reason'][0].upper() + h['reason'][1:]}.",
              *([f"- Outcome (neutral / better / worse / undecided, from the interval and the "
                 f"±{h['tolerance'] * 100:.3g} % margin): **{h['outcome']}**."] if h.get("outcome") else []),
              f"- Paper: {'> ' if h.get('direction') == 'above' else ''}{fmt(h['paper_value'], u)} "
              f"({h['paper_source']})."]
        if h["note"]:
            L.append(f"- Note: {h['note']}")
        c = h.get("computed")
        if c is not None:
            L.append(f"- Computed in process: {_computed_cell(c, u)}; {c['what']}.")
            L += [f"- {k[0].upper() + k[1:]}: {v}" for k, v in c["detail"].items() if isinstance(v, str)]
        e = h["emulated"]
        if c is not None and not e["n_points"]:
            pass                               # computed in process; nothing emulated to say
        elif e["n_points"] or e["mean"] is not None:
            L.append(f"- Emulated: {_emulated_cell(e, u)}; {e['what']}"
                     + ("" if e["applies_at_paper_setting"] else " (not at the paper's setting: a check of the "
                        "model, not a condition of the verdict)") + ".")
        else:
            L.append(f"- Emulated: {e['what']}.")
        if e["left_out"]:
            L.append("  Left out: " + "; ".join(e["left_out"][:5]) + (" …" if len(e["left_out"]) > 5 else ""))
        L += ["", "Setting:", "", "| item | value | status | source |", "|---|---|---|---|"]
        L += [f"| {s['name']} | {s['value']} | {s['status']} | {s['source']} |" for s in h["setting"]]
        if h["constants"]:
            L += ["", "Assumed constants (the envelope covers their ranges):", "",
                  "| constant | nominal | range | projection at lo / hi | source |", "|---|---|---|---|---|"]
            per = h["envelope_detail"]["per_constant"]
            for c in h["constants"]:
                lo_hi = per.get(c["name"], [None, None])
                L.append(f"| {c['name']} | {c['nominal']:.4g} {c['unit']} | {c['range'][0]:.4g}–{c['range'][1]:.4g}"
                         f" | {fmt(lo_hi[0], u)} / {fmt(lo_hi[1], u)} | {c['source']} |")
        if h.get("baselines"):
            L += [""] + _baselines_md(h["baselines"])
        if h["what_moves"]:
            L += ["", "What moves the headline:", ""]
            L += [f"- {r['sentence'][0].upper() + r['sentence'][1:]}." for r in h["what_moves"]]
        if h["flagged_profiles"]:
            L += ["", "**Hardware models that miss published measurements:** " + ", ".join(h["flagged_profiles"])]
        L.append("")
    rows = d["model_validation"]
    L += ["## Hardware models against published measurements", "",
          "Each model a headline uses, checked against measurements that did not set its constants and that "
          "are not from this paper (`testbed/reproduce/measurements/`; tests/unit/test_reproduce_validation.py "
          "recomputes it).", "",
          "| model | measurement | setting | published | model | error | source |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["published"] is None:
            L.append(f"| {r['model']} | {r['quantity']} | | | | | |")
            continue
        mark = "" if r["within"] else " **(beyond ±25 %)**"
        L.append(f"| {r['model']} | {r['quantity']} | {r['setting']} | {r['published']:.4g} {r['unit']} | "
                 f"{r['predicted']:.4g} {r['unit']} | {r['error']:+.0%}{mark} | {r['source']} |")
    if d["notes"]:
        L += ["", "## What could not be verified", ""] + [f"- {n}" for n in d["notes"]]
    ran = d["ran"]
    L += ["", "## What ran", "",
          f"- Wall time: {ran['wall_s']:.0f} s; started {ran['started_at']}."
          + (f" Verdicts recomputed from the kept results at {ran['rewritten_at']} "
             f"(`testbed reproduce {d['paper']} --from`)." if ran.get("rewritten_at") else ""),
          f"- Git: {ran['git'].get('commit')}" + (" (with uncommitted changes)" if ran["git"].get("dirty") else ""),
          f"- Machine: {ran['machine'].get('cpus')} cores, {ran['machine'].get('mem_gib')} GiB, kernel "
          f"{ran['machine'].get('kernel')}, load {', '.join(f'{x:.2f}' for x in ran['machine'].get('loadavg', []))}.",
          f"- Network: {ran['net'] or 'not emulated (--no-emulation)'}; seeds per point: {ran['seeds']}."]
    for s in ran["scenarios"]:
        where = Path(s["run_dir"]).relative_to(report_dir) if s["run_dir"] and Path(s["run_dir"]).is_relative_to(
            report_dir) else s["run_dir"]
        L.append(f"- `{s['path']}` ({s['key']}): {s['points']} point(s), {s['valid']} valid, seeds "
                 f"{s['seeds']}, {s['wall_s']:.0f} s, in `{where}`.")
    return "\n".join(L) + "\n"
