"""PyTorch workload figures: training loss vs hardware time per collective, with
the projection of each point's own trace; and time per iteration split into
compute and communication, in hardware milliseconds. Colour = collective; line
style = case (e.g. 5 % loss); the projection thin with crosses (once per
collective: a lossy point's is its lossless twin's); invalid points hollow, each
named in the caption with its TDF and first reason.

Hardware time = emulated seconds / the point's TDF. With a modeled device on the
soft switch both compute (slept TDF x the device model) and the network (the
switch's delay line) run TDF times slower, so the quotient is what the modeled
cluster would take (hosts/dnn/timing.py). Where the network was not dilated
(--net local, dilate_network false, device cpu) the caption says that the times
mix hardware compute with this machine's network. The projection replays the
point's trace on the hardware model: it has no loss model, so a lossy point's
projection is its lossless reference. Invalid points (fidelity monitor or
device model) are drawn hollow and named in the caption.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from testbed.plots import figure
from testbed.plots.captions import Resolution, invalid_reasons, run_mode_text, values_text
from testbed.plots.style import color_of, legend_handle, plt, save
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.torch import FIGURES

register_figure_names(*FIGURES)

STYLES = ["-", "--", ":", "-."]


def _points(run: Run) -> dict[int, dict[str, Any]]:
    """point index -> its torch_summary with its case, validity and label (successful points only)."""
    ok = {p["index"]: p for p in run.points if p.get("status") == "ok"}
    out = {}
    for m in run.metrics_of("torch_summary"):
        idx = m.get("point")
        if idx in ok:
            out[idx] = dict(m, case=ok[idx].get("case") or "", invalid=invalid_reasons(run, idx, m))
    _add_labels(run, out)
    return out


def _add_labels(run: Run, sums: dict[int, dict[str, Any]]) -> None:
    """Each point's label: collective (case), plus the script arguments that tell
    apart points that would otherwise share it (e.g. hook_overhead's bucket caps)."""
    res = Resolution(run)
    args = {i: [str(a) for a in res.get(i, "workload.args", []) or []] for i in sums}
    base = {i: s["collective"] + (f" ({s['case']})" if s.get("case") not in (None, "", "base", "baseline") else "")
            for i, s in sums.items()}
    for i, s in sums.items():
        twins = [j for j in sums if base[j] == base[i]]
        lens = {len(args[j]) for j in twins}
        extra = ""
        if len(twins) > 1 and len(lens) == 1:
            diff = [k for k in range(lens.pop()) if len({args[j][k] for j in twins}) > 1]
            flags = [args[i][k - 1] + " " + args[i][k] if k and args[i][k - 1].startswith("-") else args[i][k]
                     for k in diff]
            extra = f" {' '.join(flags)}" if flags else ""
        s["label"] = base[i] + extra


def _label(s: dict[str, Any]) -> str:
    return s["label"]


def _case_styles(sums: dict[int, dict[str, Any]]) -> dict[str, str]:
    cases = sorted({s["case"] for s in sums.values()})
    return {c: STYLES[i % len(STYLES)] for i, c in enumerate(cases)}


def _caption(run: Run, sums: dict[int, dict[str, Any]]) -> list[str]:
    res = Resolution(run)
    idx = list(sums)
    devs = values_text((s["device"] for s in sums.values()))
    tdfs = values_text((s.get("tdf") or s.get("time_scale") for s in sums.values()), lambda v: f"{v:g}")
    workers = values_text((s["workers"] for s in sums.values()))
    dilated = [s for s in sums.values() if s.get("network_dilated")]
    cal = {bool(s.get("calibrated")) for s in sums.values()}
    how = ("calibrated on the script" if cal == {True} else "fixed" if cal == {False}
           else f"calibrated on the script for {sum(bool(s.get('calibrated')) for s in sums.values())} point(s), "
                f"fixed for the others")
    lines = [f"{workers} workers that ran; device model {devs}; TDF {tdfs} ({how}); "
             f"script args: {values_text((' '.join(map(str, res.get(i, 'workload.args', []))) for i in idx))}."]
    if len(dilated) == len(sums) and sums:
        lines.append("Hardware time = emulated / TDF: compute (device model) and network (soft switch delay "
                     "line) dilated alike. Projected: the point's own trace replayed on the hardware model "
                     "(no loss model: a lossy point's projection is its lossless reference).")
    elif sums:
        lines.append(f"WARNING: {len(sums) - len(dilated)} of {len(sums)} point(s) ran on an undilated "
                     f"network: their times divide this machine's network by the TDF (not hardware time).")
    lines.append(_invalid_text(sums))
    lines.append(run_mode_text(run))
    if res.error:
        lines.append(res.error)
    return lines


def _tdf(s: dict[str, Any]) -> float:
    return s.get("tdf") or s.get("time_scale") or 1.0


def _invalid_text(sums: dict[int, dict[str, Any]]) -> str:
    """Every invalid point by its label (and TDF), with its first reason: a reader
    must know which hollow mark is which and why, not only how many there are."""
    bad = [(s, s["invalid"]) for _, s in sorted(sums.items()) if s["invalid"]]
    if not bad:
        return ""
    def first(why: list[str]) -> str:       # a reason that invalidates, not a warning
        return next((w for w in why if "warning only" not in w), why[0] if why else "?")
    named = "; ".join(f"{_label(s)} (TDF {_tdf(s):g}): {first(why)}" for s, why in bad)
    return f"INVALID: {len(bad)} of {len(sums)} point(s) outside the fidelity band (hollow): {named}."


@figure("torch_loss_vs_time")
def loss_vs_time(run: Run, out_dir: Path) -> list[Path]:
    sums = _points(run)
    styles = _case_styles(sums)
    by_point: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in run.metrics_of("torch_iter"):
        if (m.get("point") in sums and m.get("rank") == 0 and m.get("loss") is not None
                and not m.get("calibration")):
            by_point[m["point"]].append(m)
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    handles = []
    drawn_proj: set[tuple[str, float, int]] = set()
    # Milliseconds when a whole run is shorter than a second of hardware time (a
    # 0-0.005 s axis reads badly).
    longest = max((max(r["t_s"] for r in recs) / _tdf(sums[i]) for i, recs in by_point.items()), default=0.0)
    unit, per_s = ("ms", 1e3) if longest < 1.0 else ("s", 1.0)
    # The in-switch line last, so a line that coincides with another stays visible.
    order = sorted(by_point.items(), key=lambda kv: (sums[kv[0]]["collective"] == "switch", kv[0]))
    for z, (idx, recs) in enumerate(order):
        s = sums[idx]
        recs.sort(key=lambda r: r["iter"])
        colour, ls = color_of(s["collective"]), styles.get(s["case"], "-")
        xs = np.array([r["t_s"] for r in recs]) / _tdf(s) * per_s
        ys = np.array([r["loss"] for r in recs])
        if s["invalid"]:   # hollow markers on a thin line in the case's style
            ax.plot(xs, ys, ls=ls, lw=0.7, color=colour, marker="o", markerfacecolor="none",
                    markeredgecolor=colour, ms=3.5, markeredgewidth=0.9, label=f"{_label(s)} (invalid)",
                    zorder=2 + z)
        else:
            ax.plot(xs, ys, ls, color=colour, lw=1.6, label=_label(s), zorder=2 + z)
        proj = s.get("projected_hw_iter_ms")
        # The projection: the same losses at the projected time per iteration. A lossy
        # point's projection is its lossless twin's (no loss model): drawn once.
        key = (s["collective"], round(proj or 0.0, 9), len(recs))
        if proj and key not in drawn_proj:
            drawn_proj.add(key)
            px = (np.arange(len(recs)) + 1) * proj / 1e3 * per_s
            ax.plot(px, ys, "-", color=colour, lw=0.6, marker="x", ms=3.5)
    if by_point:
        handles = ax.get_legend_handles_labels()[0]
        if any(s.get("projected_hw_iter_ms") for s in sums.values()):
            handles.append(legend_handle(marker="x", label="projected (thin, crosses)"))
        if len(styles) > 1:
            handles += [legend_handle(ls=st, label=f"case {c}") for c, st in styles.items()]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.text(0.5, 0.5, "no completed point recorded a training loss\n(rank 0, after the calibration steps)",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(f"hardware time since training start ({unit}) = emulated / TDF")
    ax.set_ylabel("training loss (rank 0, per step)")
    ax.set_title("Training loss vs hardware time per collective", fontsize=9)
    return save(fig, run, out_dir, "torch_loss_vs_time", _caption(run, sums))


@figure("torch_iteration_time")
def iteration_time(run: Run, out_dir: Path) -> list[Path]:
    sums = _points(run)
    from matplotlib.patches import Patch  # noqa: PLC0415

    rows = [(_label(s), s) for _, s in sorted(sums.items()) if s.get("hw_compute_ms") is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows) + 3.5), 4.6))
    if rows:
        x = np.arange(len(rows))
        comp = [s["hw_compute_ms"] for _, s in rows]
        comm = [s.get("hw_comm_ms") or 0.0 for _, s in rows]
        for i, (_, s) in enumerate(rows):
            c = color_of(s["collective"])
            bad = bool(s["invalid"])           # invalid: hollow bars in the collective's colour
            ax.bar(i, comp[i], width=0.7, facecolor="none" if bad else c, edgecolor=c,
                   alpha=1.0 if bad else 0.45, lw=1.2)
            ax.bar(i, comm[i], width=0.7, bottom=comp[i], facecolor="none" if bad else c, hatch="//",
                   edgecolor=c if bad else "white", lw=1.2 if bad else 0.0)
        proj = [(i, s["projected_hw_iter_ms"]) for i, (_, s) in enumerate(rows) if s.get("projected_hw_iter_ms")]
        if proj:
            ax.plot([i for i, _ in proj], [v for _, v in proj], ls="none", marker="x", color="k", ms=7)
        ax.set_xticks(x, [f"{lb}{' (invalid)' if s['invalid'] else ''}\nTDF {_tdf(s):g}" for lb, s in rows],
                      rotation=20, ha="right", fontsize=8)
        # Neutral legend entries: colour is the collective (tick labels), not a part of the bar.
        handles = [Patch(facecolor="0.5", alpha=0.45, edgecolor="0.5", label="compute (device model)"),
                   Patch(facecolor="0.5", hatch="//", edgecolor="white", label="communication (hatched)"),
                   Patch(facecolor="none", edgecolor="0.3", label="invalid point (hollow)")]
        if proj:
            handles.append(legend_handle(color="k", ls="none", marker="x", label="projected time per iteration"))
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.text(0.5, 0.5, "no completed point recorded a training iteration\n(after the calibration steps)",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("hardware ms / iteration")
    ax.set_title("Time per iteration (mean over workers): compute vs communication", fontsize=9)
    return save(fig, run, out_dir, "torch_iteration_time", _caption(run, sums))
