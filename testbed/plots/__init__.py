"""Paper-style figures from a results folder: one module per figure family.

A figure module registers drawing functions by the names scenarios list under
`figures:`; `draw_figures(run)` draws every figure the run's scenario asks for
into <run>/figures/ as PNG and PDF.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable

from testbed.results import Run

FigureFn = Callable[[Run, Path], list[Path]]
_FIGURES: dict[str, FigureFn] = {}
# The workload kind a family's figures are drawn from: a figure of another
# family has nothing to draw from a run (empty axes), so it is refused.
_KIND_OF_FAMILY = {"allreduce": "allreduce", "p4sgd": "p4sgd", "torch": "torch", "lhc": "lhc",
                   "easgd": "easgd", "shadowsync": "shadowsync", "phub": "phub"}

# Figure families; each module registers its figures on import.
_FAMILIES = ("testbed.plots.allreduce", "testbed.plots.p4sgd", "testbed.plots.torch",
             "testbed.plots.lhc", "testbed.plots.easgd", "testbed.plots.shadowsync",
             "testbed.plots.phub")


def figure(name: str) -> Callable[[FigureFn], FigureFn]:
    def deco(fn: FigureFn) -> FigureFn:
        _FIGURES[name] = fn
        return fn
    return deco


def known_figures() -> dict[str, FigureFn]:
    for mod in _FAMILIES:
        importlib.import_module(mod)
    return dict(_FIGURES)


class PlotError(Exception):
    pass


def _kind_of(fn: FigureFn) -> str | None:
    return _KIND_OF_FAMILY.get(fn.__module__.rsplit(".", 1)[-1])


def draw_figures(run: Run, names: list[str] | None = None) -> list[Path]:
    figures = known_figures()
    wanted = names or run.manifest.get("scenario", {}).get("figures") or []
    if not wanted:
        raise PlotError(f"{run.path}: the scenario lists no figures; pass --figure NAME "
                        f"(known: {', '.join(sorted(figures))})")
    unknown = [n for n in wanted if n not in figures]
    if unknown:
        raise PlotError(f"unknown figure(s) {unknown}; known: {', '.join(sorted(figures))}")
    kind = run.manifest.get("scenario", {}).get("workload", {}).get("kind")
    fitting = sorted(n for n, fn in figures.items() if _kind_of(fn) in (kind, None))
    unfit = [n for n in wanted if _kind_of(figures[n]) not in (kind, None)]
    if unfit and kind:
        raise PlotError(f"figure(s) {unfit} draw from {_kind_of(figures[unfit[0]])} runs; {run.path} ran "
                        f"workload {kind!r} (its figures: {', '.join(fitting)})")
    if not any(p.get("status") == "ok" for p in run.points):
        raise PlotError(f"{run.path}: no point completed ({len(run.points)} point(s); points.jsonl says why): "
                        f"nothing to draw")
    out = run.path / "figures"
    out.mkdir(exist_ok=True)
    # Every figure that can be drawn is; those refused (style.save: a panel the run
    # cannot feed) are named together at the end.
    paths: list[Path] = []
    refused: list[str] = []
    for n in wanted:
        try:
            paths.extend(figures[n](run, out))
        except PlotError as e:
            refused.append(str(e))
    if refused:
        drawn = [p.stem for p in paths if p.suffix == ".png"]
        raise PlotError("; ".join(refused) + (f" (drawn: {', '.join(drawn)})" if drawn else ""))
    return paths
