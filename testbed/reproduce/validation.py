"""Hardware models checked against published measurements.

Every hardware model a headline uses (a fidelity profile, a device model) is
compared with published measurements that were not used to set its constants
and that do not come from the paper being reproduced (measurements.py holds
them, each with its source and the model's prediction as a function).

  validation_rows(models)  one row per measurement of those models:
                           {id, model, quantity, setting, published, unit, source,
                            predicted, error (predicted / published - 1), within}
  flagged_profiles(rows)   {model: why} for every model with a measurement beyond
                           ERROR_TOLERANCE, or with fewer than MIN_MEASUREMENTS
                           measurements; every report that uses it says so.
"""
from __future__ import annotations

from typing import Any

from testbed.reproduce.measurements import MEASUREMENTS, Measurement

ERROR_TOLERANCE = 0.25
MIN_MEASUREMENTS = 3


def row(m: Measurement) -> dict[str, Any]:
    predicted = float(m.predict())
    error = predicted / m.published - 1.0
    return {"id": m.id, "model": m.model, "quantity": m.quantity, "setting": m.setting,
            "published": m.published, "unit": m.unit, "source": m.source, "predicted": predicted,
            "error": error, "within": abs(error) <= ERROR_TOLERANCE}


def validation_rows(models: list[str] | None = None) -> list[dict[str, Any]]:
    chosen = [m for m in MEASUREMENTS if models is None or m.model in models]
    rows = [row(m) for m in chosen]
    for name in models or []:
        if not any(r["model"] == name for r in rows):
            rows.append({"id": f"{name}:none", "model": name, "quantity": "(no published measurement)",
                         "setting": "", "published": None, "unit": "", "source": "", "predicted": None,
                         "error": None, "within": False})
    return rows


SHOWN_MISSES = 3


def flagged_profiles(rows: list[dict[str, Any]]) -> dict[str, str]:
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    out = {}
    for name, rs in by_model.items():
        measured = [r for r in rs if r["published"] is not None]
        off = [r for r in measured if not r["within"]]
        why = []
        if off:
            # The three largest misses name the problem; the report's validation table has them all.
            worst = sorted(off, key=lambda r: -abs(r["error"]))
            shown = ", ".join(f"{r['id']} {r['error']:+.0%}" for r in worst[:SHOWN_MISSES])
            more = f" and {len(worst) - SHOWN_MISSES} more" if len(worst) > SHOWN_MISSES else ""
            why.append(f"{len(off)} of {len(measured)} measurements beyond ±{ERROR_TOLERANCE:.0%}, worst: {shown}{more}")
        if len(measured) < MIN_MEASUREMENTS:
            why.append(f"only {len(measured)} measurement(s), fewer than {MIN_MEASUREMENTS}")
        if why:
            out[name] = "; ".join(why)
    return out


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The validation table as markdown: model, measurement, setting, published,
    model's prediction, error (flagged beyond ERROR_TOLERANCE), source."""
    lines = ["| model | measurement | setting | published | model | error | source |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["published"] is None:
            lines.append(f"| {r['model']} | {r['quantity']} | | | | | |")
            continue
        mark = "" if r["within"] else f" **(beyond ±{ERROR_TOLERANCE:.0%})**"
        lines.append(f"| {r['model']} | {r['quantity']} | {r['setting']} | {r['published']:.4g} {r['unit']} | "
                     f"{r['predicted']:.4g} {r['unit']} | {r['error']:+.0%}{mark} | {r['source']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m testbed.reproduce.validation [MODEL ...]`: the table (all models, or
    those named) and the flagged models, as markdown."""
    import sys  # noqa: PLC0415
    names = list(sys.argv[1:] if argv is None else argv) or None
    rows = validation_rows(names)
    print(markdown_table(rows))
    flagged = flagged_profiles(rows)
    if flagged:
        print("\nFlagged models:\n")
        for name, why in sorted(flagged.items()):
            print(f"- `{name}`: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
