"""Figures of a reproduction report (testbed.reproduce), drawn from report.json's dict.

  reproduce_headlines   the figure a reader looks at first: per headline, the
                        paper's number, the projection at the paper's setting
                        with its envelope over the assumed constants, and the
                        emulated mean with its 95 % interval, side by side; the
                        verdict in each panel's title.
  reproduce_what_moves  per regime of each headline not reproduced: the projection
                        against the regime variable, the paper's number with its
                        ±25 % band, the paper's setting and the value that reaches it.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from testbed.plots.style import ROLE_COLORS, save

VERDICT_COLORS = {"reproduced": "#007a3d", "within_envelope": "#b07a00", "not_reproduced": "#B00000"}


def _footer(d: dict[str, Any]) -> str:
    ran = d["ran"]
    return (f"testbed reproduce {d['paper']}{' --quick' if d['quick'] else ''}; net={ran['net'] or 'not run'}; "
            f"{ran['seeds']} seeds; {ran['machine'].get('cpus', '?')} shared cores; git "
            f"{str(ran['git'].get('commit') or '?')[:8]}")


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def draw_headlines(d: dict[str, Any], folder: Path) -> Path:
    hs = d["headlines"]
    rows, cols = _grid(max(len(hs), 1))
    fig, axes = plt.subplots(rows, cols, figsize=(max(3.4 * cols, 6.0), 3.3 * rows + 0.8), squeeze=False)
    for ax in axes.flat[len(hs):]:
        ax.set_visible(False)
    for ax, h in zip(axes.flat, hs):
        u = h["unit"]
        tol = h.get("tolerance", d["tolerance"])
        pv = h["paper_value"]
        ax.axhspan(pv / (1 + tol), pv / (1 - tol), color=ROLE_COLORS["paper"], alpha=0.07)
        ax.axhline(pv, color=ROLE_COLORS["paper"], lw=0.8, ls=":")
        ax.plot([0], [h["paper_value"]], "D", color=ROLE_COLORS["paper"], ms=8, label="paper")
        lo, hi = h["envelope"]
        p = h["projected"]
        ax.errorbar([1], [p], yerr=[[p - lo], [hi - p]], fmt="o", color=ROLE_COLORS["projected"], capsize=6,
                    ms=7, lw=2, label="projected (envelope)")
        e = h["emulated"]
        if e["mean"] is not None:
            m, (clo, chi) = e["mean"], e["ci95"]
            ax.errorbar([2], [m], yerr=[[m - clo], [chi - m]], fmt="s", color=ROLE_COLORS["emulated"],
                        capsize=6, ms=7, lw=2, label="emulated (95 % CI)")
            ax.text(2, chi, f" n={e['n_valid']}", fontsize=7, va="bottom")
        else:
            ax.text(2, h["paper_value"], "no valid\nemulated\nvalue" if e["n_points"] else "not\nemulated",
                    ha="center", va="center", fontsize=7, color="0.4")
        ax.set_xticks([0, 1, 2], ["paper", "projected", "emulated" if e["applies_at_paper_setting"]
                                  else "emulated\n(own setting)"], fontsize=8)
        ax.set_xlim(-0.6, 2.6)
        ax.set_ylim(bottom=0)
        ax.set_ylabel({"x": "ratio (×)", "%": "percent"}.get(u, u) + " (hardware-equivalent)", fontsize=8)
        ax.set_title(f"{h['id']}\n{h['verdict']}", fontsize=9, color=VERDICT_COLORS.get(h["verdict"], "k"))
    axes.flat[0].legend(fontsize=6, loc="best")
    caption = [f"{d['title']}: each panel one headline, in hardware-equivalent units. Paper: the number as the "
               f"paper states it. Projected: the hardware models at the paper's setting, the bar its envelope "
               f"over the assumed constants' ranges; grey: the values within the headline's margin (25 % unless "
               f"stated) of the paper's. Emulated: mean and 95 % interval over seeds of valid points "
               f"only ('own setting': measured at the emulated scale, a check of the model)."]
    bad = [h["id"] for h in hs if h["emulated"]["n_points"] and h["emulated"]["mean"] is None]
    if bad:
        caption.append("INVALID: no valid emulated point for " + ", ".join(bad))
    save(fig, None, folder, "reproduce_headlines", caption, footer=_footer(d))
    return folder / "reproduce_headlines.png"


def draw_what_moves(d: dict[str, Any], folder: Path) -> Path | None:
    panels = [(h, r) for h in d["headlines"] for r in h["what_moves"]]
    if not panels:
        return None
    rows, cols = _grid(len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(max(3.6 * cols, 6.0), 3.2 * rows + 1.0), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (h, r) in zip(axes.flat, panels):
        tol = h.get("tolerance", d["tolerance"])
        pv = h["paper_value"]
        ax.axhspan(pv / (1 + tol), pv / (1 - tol), color=ROLE_COLORS["paper"], alpha=0.08)
        ax.axhline(pv, color=ROLE_COLORS["paper"], ls=":", lw=1, label=f"paper {pv:.3g}")
        ax.plot(r["values"], r["projected"], "-o", ms=3, color=ROLE_COLORS["projected"], label="projected")
        ax.axvline(r["paper_setting"], color="0.5", ls="--", lw=0.8, label="paper's setting")
        if r["reaching"] is not None:
            ax.axvline(r["reaching"], color=VERDICT_COLORS["within_envelope"], lw=1, label="reaches it")
        if r["log_x"]:
            ax.set_xscale("log")
        ax.set_xlabel(f"{r['name']} ({r['unit']})", fontsize=8)
        ax.set_ylabel({"x": "ratio (×)", "%": "percent"}.get(h["unit"], h["unit"]), fontsize=8)
        ax.set_title(h["id"], fontsize=9)
        ax.legend(fontsize=6)
    caption = [f"What moves each headline not reproduced: the projection (constants nominal) against one regime "
               f"variable, the paper's number with its tolerance band (grey; ±25 % unless the headline states its own)."]
    caption += [f"{h['id']}: {r['sentence']}." for h, r in panels]
    save(fig, None, folder, "reproduce_what_moves", caption, footer=_footer(d))
    return folder / "reproduce_what_moves.png"
