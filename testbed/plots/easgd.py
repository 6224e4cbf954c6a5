"""EASGD family figures: the centre's test accuracy vs time (colour = variant),
time to the target accuracy with repeat bands, the share of time in
communication (emulated and projected), and weak-scaling efficiency with the
paper's 91.5 % as a reference line.

Colours: one per variant, an EASGD variant and its SGD counterpart in the same
hue (EASGD solid / dark, SGD dashed / light), so each pair the paper compares
reads at a glance. Times are hardware-equivalent seconds: emulated time / the
point's TDF (compute = device model x TDF, the network dilated to the same TDF
on the soft switch: docs/easgd.md). Invalid points are hollow (or thin dotted
curves) and named in the caption; projected lines are thin with crosses. The
footer gives the worker counts that ran (from the points' own summaries).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from testbed.plots import figure
from testbed.plots.captions import Resolution, invalid_note, invalid_reasons, per_case, run_mode_text
from testbed.plots.style import (band_description, color_of, bound_line, case_styles, hollow, legend_handle, plot_repeats,
                                 plt, save)
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.easgd import FIGURES, PAPER_WEAK_SCALING, VARIANT_NAMES

register_figure_names(*FIGURES)

# pairs: (EASGD variant, its SGD counterpart) share a hue
def _colour(variant: str) -> str:
    """The variant's colour from the one table (style.SYSTEM_COLORS); the original
    EASGD is `easgd_original` there, since `easgd` names the whole family."""
    return color_of("easgd_original" if variant == "easgd" else variant)


LABELS = {"easgd": "EASGD (original, round robin)", "async_easgd": "Async EASGD", "async_sgd": "Async SGD",
          "async_measgd": "Async MEASGD", "async_msgd": "Async momentum SGD",
          "hogwild_easgd": "Hogwild EASGD", "hogwild_sgd": "Hogwild SGD",
          "sync_easgd": "Sync EASGD", "sync_sgd": "sync SGD (allreduce)"}


def _ls(variant: str) -> str:
    return "--" if variant.endswith("sgd") and "easgd" not in variant else "-"


def _summaries(run: Run) -> dict[int, dict[str, Any]]:
    ok = {p["index"] for p in run.points if p.get("status") == "ok"}
    return {m["point"]: m for m in run.metrics_of("easgd_summary") if m.get("point") in ok}


def _case(run: Run, idx: int) -> str:
    """The point's case and its swept values other than the variant ('tau=16',
    'loss_pct=5', 'slow4x'): points that differ in what the scenario sweeps stay apart."""
    p = run.point(idx) or {}
    case = p.get("case") or "base"
    swept = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in (p.get("params") or {}).items()
             if k not in ("workload.variant", "repeat")]
    return ", ".join(([] if case == "base" and swept else [case]) + swept)


def _case_rank(run: Run, sums: dict[int, dict[str, Any]]) -> dict[str, int]:
    """Cases in the order their points ran: the scenario's cases, then its grid's order."""
    return {c: i for i, c in enumerate(dict.fromkeys(_case(run, i) for i in sorted(sums)))}


def _caption(run: Run, sums: dict[int, dict[str, Any]], extra: str = "") -> list[str]:
    res = Resolution(run)
    what = per_case(res, sums, {
        "steps": ("workload.steps", lambda v: f"{v[0]} steps/worker"),
        "tau": ("workload.tau", lambda v: "tau " + "/".join(map(str, v))),
        "lr": ("workload.lr", lambda v: f"eta {v[0]:g}"),
        "batch": ("workload.batch_size", lambda v: f"batch {v[0]}/worker"),
        "device": ("workload.device", lambda v: f"{v[0].get('type')} model, TDF " + (
            "calibrated" if v[0].get("time_scale") == "auto" else f"x{v[0].get('time_scale', 1):g}")),
        "target": ("workload.target_acc", lambda v: f"target acc {v[0]:g}"),
        "collective": ("workload.collective", lambda v: f"sync variants' allreduce: {'/'.join(v)}"),
        "stragglers": ("stragglers", lambda v: "straggler " + ", ".join(
            f"{s['host']} x{s.get('slowdown', 1):g}" for s in v[0]) if v and v[0] else "no straggler"),
        "loss": ("links.loss_pct", lambda v: f"loss {'/'.join(f'{x:g}' for x in v)} %"),
    })
    invalid = _invalid(run, sums)
    ran = sorted({s["workers"] for s in sums.values()})
    tdfs = sorted({s.get("tdf") for s in sums.values() if s.get("tdf")})
    unmodeled = sum(1 for s in sums.values() if s.get("network_check", "monitor") != "monitor")
    # the invalid points by name (the note above gives the first reason in full)
    names = "; ".join(f"{sums[i]['variant']} {_case(run, i)} r{_repeat(run, i)} ({sums[i]['workers']} w)"
                      for i in list(invalid)[:4]) + (f"; +{len(invalid) - 4} more" if len(invalid) > 4 else "")
    return [f"LeNet on sklearn digits; {what}; workers that ran: {'/'.join(map(str, ran)) or '-'}"
            + (f"; TDF {'/'.join(f'{t:g}' for t in tdfs)}" if tdfs else "") + (f"; {extra}" if extra else ""),
            invalid_note(invalid, len(sums), how="hollow markers / thin dotted curves")
            + (f" [{names}]" if names else ""),
            (f"{unmodeled} point(s) recorded before the monitor modeled p2p messages (network_check: "
             f"not modeled; no projection)" if unmodeled else ""),
            run_mode_text(run)]


def _case_styles(run: Run, sums: dict[int, dict[str, Any]]) -> dict[str, str]:
    """Line style per case (scenario order) when the run has several; {} for one case
    (then EASGD solid, SGD counterparts dashed)."""
    cases = list(_case_rank(run, sums))
    return case_styles(cases) if len(cases) > 1 else {}


def _repeat(run: Run, idx: int) -> int:
    return next((p.get("repeat", 0) for p in run.points if p["index"] == idx), 0)


def _invalid(run: Run, sums: dict[int, dict[str, Any]]) -> dict[int, list[str]]:
    return {i: r for i in sums if (r := invalid_reasons(run, i, sums[i])) is not None}


def _hw(s: dict[str, Any], emulated_s: float) -> float:
    """Hardware-equivalent seconds of an emulated duration of point summary s."""
    return emulated_s / (s.get("tdf") or 1.0)


@figure("easgd_accuracy_vs_time")
def accuracy_vs_time(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    curves: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in run.metrics_of("easgd_curve"):
        if m.get("point") in sums:
            curves[m["point"]].append(m)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    seen = set()
    invalid = _invalid(run, sums)
    styles = _case_styles(run, sums)
    for idx, recs in sorted(curves.items()):
        v, case = sums[idx]["variant"], _case(run, idx)
        recs.sort(key=lambda r: r["t_s"])
        bad = idx in invalid
        xs, ys = [_hw(sums[idx], r["t_s"]) * 1e3 for r in recs], [r["acc"] for r in recs]
        key = (v, case, bad)
        name = LABELS.get(v, v) + ("" if len(styles) < 2 else f" ({case})") + (" (invalid)" if bad else "")
        ax.plot(xs, ys, ":" if bad else styles.get(case, _ls(v)), color=_colour(v),
                lw=0.8 if bad else 1.3, alpha=0.9, label=None if key in seen else name)
        if bad:                       # an invalid run: its end point hollow
            hollow(ax, xs[-1:], ys[-1:], color=_colour(v))
        seen.add(key)
    targets = {s["target_acc"] for s in sums.values()}
    for t in targets:
        ax.axhline(t, color="0.5", lw=0.8, ls=":")
    if not curves:
        ax.text(0.5, 0.5, "no successful easgd points", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=7, ncol=2, loc="lower right")
    ax.set_xlabel("hardware time since training start (ms; emulated / TDF)")
    ax.set_ylabel("test accuracy of the centre variable")
    ax.set_ylim(0, 1)
    ax.set_title("Accuracy vs time: colour = variant family (SGD counterpart lighter); "
                 + ("line style = case" if len(styles) > 1 else "EASGD solid, SGD dashed"), fontsize=9)
    return save(fig, run, out_dir, "easgd_accuracy_vs_time", _caption(run, sums))


@figure("easgd_time_to_target")
def time_to_target(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    groups: dict[tuple[str, str], list[tuple[float, bool]]] = defaultdict(list)
    missed: dict[tuple[str, str], int] = defaultdict(int)
    # A run that ended below the target: its time to target is longer than the run,
    # a lower bound drawn at the run's own length (hardware ms).
    ran_for: dict[tuple[str, str], list[float]] = defaultdict(list)
    projected: dict[tuple[str, str], list[float]] = defaultdict(list)
    drew_proj = False
    invalid = _invalid(run, sums)
    for idx, s in sums.items():
        key = (s["variant"], _case(run, idx))
        if s.get("hw_time_to_target_s") is None:
            missed[key] += 1
            if s.get("hw_wall_s"):
                ran_for[key].append(s["hw_wall_s"] * 1e3)
        else:
            groups[key].append((s["hw_time_to_target_s"] * 1e3, idx in invalid))
            if s.get("projected_time_to_target_s") is not None:
                projected[key].append(s["projected_time_to_target_s"] * 1e3)
    rank = _case_rank(run, sums)
    keys = sorted(set(groups) | set(missed), key=lambda k: (rank[k[1]], VARIANT_NAMES.index(k[0])))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(keys) + 2), 4.6))
    most = 0
    for x, key in enumerate(keys):
        colour = _colour(key[0])
        if projected.get(key):        # the hardware model's replay of the same runs: thin crosses
            ax.plot([x + 0.25] * len(projected[key]), projected[key], ls="none", marker="x", ms=5,
                    mew=0.8, color=colour, label=None if drew_proj else "projected (hardware model)")
            drew_proj = True
        if groups.get(key):
            most = max(most, plot_repeats(ax, {x: groups[key]}, color=colour))
            vals = [v for v, bad in groups[key] if not bad]
            if vals:
                ax.vlines(x, min(vals), max(vals), color=colour, lw=5, alpha=0.3)
        if missed.get(key):
            ax.text(x, 0, f"{missed[key]} not\nreached", ha="center", va="bottom", fontsize=6, color="#b00000")
        if ran_for.get(key):
            ax.plot([x] * len(ran_for[key]), ran_for[key], ls="none", marker="^", ms=7, markerfacecolor="none",
                    markeredgecolor=colour, markeredgewidth=1.2)
    ax.set_xticks(range(len(keys)), [LABELS.get(v, v) + ("" if c == "base" else f"\n({c})") for v, c in keys],
                  rotation=30, ha="right", fontsize=7)
    handles = ax.get_legend_handles_labels()[0]
    if ran_for:
        handles.append(legend_handle("0.3", ls="none", marker="^", hollow_=True,
                                     label="not reached: run length (time to target is longer)"))
    if handles:
        ax.legend(handles=handles, fontsize=7)
    ax.set_ylim(bottom=0)          # a time: from 0, where the "not reached" notes sit
    ax.set_ylabel("time to target (hardware ms)")
    ax.set_title("Time to target accuracy (median of repeats, bar = min-max)", fontsize=9)
    return save(fig, run, out_dir, "easgd_time_to_target", _caption(run, sums, band_description(most)))


@figure("easgd_comm_share")
def comm_share(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    invalid = _invalid(run, sums)
    rows: dict[tuple[str, str], list[tuple[float, float | None, bool]]] = defaultdict(list)
    for idx, s in sums.items():
        if s.get("comm_share") is not None:
            rows[(s["variant"], _case(run, idx))].append((s["comm_share"], s.get("projected_comm_share"),
                                                          idx in invalid))
    rank = _case_rank(run, sums)
    keys = sorted(rows, key=lambda k: (rank[k[1]], VARIANT_NAMES.index(k[0])))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(keys) + 2), 4.6))
    for x, k in enumerate(keys):
        colour = _colour(k[0])
        good = [r for r in rows[k] if not r[2]]
        # bars: median over the valid repeats (min-max whisker); every repeat of a key
        # invalid: hollow bars at the median of those (named in the caption)
        use, bad_only = (good, False) if good else (rows[k], True)
        for dx, vals, hatch, alpha in ((-0.2, [a for a, _, _ in use], None, 1.0),
                                       (0.2, [b for _, b, _ in use if b is not None], "//", 0.4)):
            if not vals:
                continue
            med = float(np.median(vals))
            ax.bar(x + dx, med, 0.4, color="none" if bad_only else colour, alpha=1.0 if bad_only else alpha,
                   edgecolor=colour, hatch=hatch, lw=1.2 if bad_only else 0)
            if len(vals) > 1:
                ax.vlines(x + dx, min(vals), max(vals), color="0.2", lw=1.0)
        for a, b, bad in rows[k]:       # invalid repeats beside valid ones: hollow markers
            if bad and good:
                hollow(ax, [x - 0.2], [a], color=colour)
    if keys:
        ax.set_xticks(range(len(keys)), [LABELS.get(v, v) + ("" if c == "base" else f"\n({c})") for v, c in keys],
                      rotation=30, ha="right", fontsize=7)
        ax.legend(handles=[legend_handle("0.4", ls="none", marker="s", label="emulated (median, bar = min-max)"),
                           legend_handle("0.75", ls="none", marker="s", label="projected (hardware model)"),
                           legend_handle("0.4", ls="none", marker="o", hollow_=True, label="invalid repeat")],
                  fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of time in exchanges")
    ax.set_title("Communication share per variant (paper: 87 % before codesign, 14 % after)", fontsize=9)
    return save(fig, run, out_dir, "easgd_comm_share", _caption(
        run, sums, "share = time in exchanges / each worker's time to its own last step"))


@figure("easgd_weak_scaling")
def weak_scaling(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    by_var: dict[str, dict[int, list[tuple[float, bool]]]] = defaultdict(lambda: defaultdict(list))
    invalid = _invalid(run, sums)
    for idx, s in sums.items():
        if s.get("hw_wall_s"):
            by_var[s["variant"]][s["workers"]].append((s["hw_wall_s"], idx in invalid))
    proj: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in run.metrics_of("projection"):
        if m.get("point") in sums and m.get("workload") == "easgd" and m.get("weak_scaling_eff"):
            proj[m["variant"]][m["workers"]].append(m["weak_scaling_eff"])
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    for v, per_n in by_var.items():
        if 1 not in per_n:
            continue
        base = float(np.median([t for t, _ in per_n[1]]))
        data = {n: [(base / t, bad) for t, bad in ts] for n, ts in per_n.items()}
        plot_repeats(ax, data, color=_colour(v), label=f"{LABELS.get(v, v)} (emulated)")
    for v, per_n in proj.items():
        ns = sorted(per_n)
        ax.plot(ns, [float(np.median(per_n[n])) for n in ns], "-", marker="x", ms=4, lw=0.7,
                color=_colour(v), label=f"{LABELS.get(v, v)} (projected)")
    bound_line(ax, PAPER_WEAK_SCALING, color="#b00000", label="paper: 91.5 % on 4253 KNL cores")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("workers (1-8 emulated, 16-256 projected from the traces)")
    ax.set_ylabel("weak-scaling efficiency T(1) / T(n)")
    ax.legend(fontsize=7)
    ax.set_title("Weak scaling: each worker keeps its batch and steps", fontsize=9)
    return save(fig, run, out_dir, "easgd_weak_scaling", _caption(run, sums))
