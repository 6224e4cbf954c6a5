"""PyTorch workload figures: training loss vs time per collective, and time per
iteration split into compute and communication. Colour = collective; line
style / hatch = case (e.g. 5 % loss).

Times are emulated wall-clock seconds on this machine: compute is the device
model's time x time_scale (or measured CPU time for device cpu), communication
is what the emulated network took. Divide by time_scale for the modeled
hardware's compute; communication is not dilated (see docs/pytorch.md).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from testbed.plots import figure
from testbed.plots.style import plt, save
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.torch import FIGURES

register_figure_names(*FIGURES)

COLOURS = {"switch": "tab:red", "ring": "tab:blue", "ps": "tab:green", "gloo": "tab:gray"}
STYLES = ["-", "--", ":", "-."]


def _ok(run: Run) -> set[int]:
    return {p["index"] for p in run.points if p.get("status") == "ok"}


def _points(run: Run) -> dict[int, dict[str, Any]]:
    """point index -> its torch_summary (successful points only)."""
    ok = _ok(run)
    return {m["point"]: m for m in run.metrics_of("torch_summary") if m.get("point") in ok}


def _label(s: dict[str, Any]) -> str:
    case = s.get("case")
    return s["collective"] + (f" ({case})" if case not in (None, "base", "baseline") else "")


def _case_styles(run: Run) -> dict[str, str]:
    cases = sorted({p.get("case") or "" for p in run.points})
    return {c: STYLES[i % len(STYLES)] for i, c in enumerate(cases)}


def _caption(run: Run, sums: dict[int, dict[str, Any]]) -> str:
    devs = sorted({(s["device"], s["time_scale"]) for s in sums.values()})
    txt = ", ".join("measured CPU" if d == "cpu" else f"{d} model x{k:g} dilation" for d, k in devs)
    bad = sum(1 for s in sums.values() if not s.get("device_valid", True))
    return f"devices: {txt or '-'}" + (f"; WARNING: {bad} point(s) with device timing violations" if bad else "")


@figure("torch_loss_vs_time")
def loss_vs_time(run: Run, out_dir: Path) -> list[Path]:
    sums = _points(run)
    styles = _case_styles(run)
    by_point: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in run.metrics_of("torch_iter"):
        if m.get("point") in sums and m.get("rank") == 0 and m.get("loss") is not None:
            by_point[m["point"]].append(m)
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    for idx, recs in sorted(by_point.items()):
        s = sums[idx]
        recs.sort(key=lambda r: r["iter"])
        ax.plot([r["t_s"] for r in recs], [r["loss"] for r in recs], STYLES[0] if not styles else
                styles.get(recs[0].get("case") or "", "-"), color=COLOURS.get(s["collective"], "k"),
                label=_label(dict(s, case=recs[0].get("case"))), lw=1.2)
    if not by_point:
        ax.text(0.5, 0.5, "no successful torch points with losses", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("emulated time since start (s)")
    ax.set_ylabel("training loss (rank 0, per step)")
    ax.set_title(f"Training loss vs time per collective\n{_caption(run, sums)}", fontsize=9)
    if by_point:
        ax.legend(fontsize=8)
    return save(fig, run, out_dir, "torch_loss_vs_time")


@figure("torch_iteration_time")
def iteration_time(run: Run, out_dir: Path) -> list[Path]:
    sums = _points(run)
    rows = []
    for idx, s in sorted(sums.items()):
        case = next((p.get("case") for p in run.points if p["index"] == idx), None)
        if s.get("iter_compute_s") is not None:
            rows.append((_label(dict(s, case=case)), s["collective"], s["iter_compute_s"] * 1e3,
                         (s.get("iter_comm_s") or 0.0) * 1e3))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 4.4))
    if rows:
        x = np.arange(len(rows))
        comp = [r[2] for r in rows]
        comm = [r[3] for r in rows]
        cols = [COLOURS.get(r[1], "k") for r in rows]
        ax.bar(x, comp, color=cols, alpha=0.45, label="compute (device model x dilation)")
        ax.bar(x, comm, bottom=comp, color=cols, hatch="//", edgecolor="white", label="communication")
        ax.set_xticks(x, [r[0] for r in rows], rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no successful torch points", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("time per iteration (ms, mean over workers)")
    ax.set_title(f"Time per iteration: compute vs communication\n{_caption(run, sums)}", fontsize=9)
    return save(fig, run, out_dir, "torch_iteration_time")
