"""P4SGD figures: scaling, convergence, allreduce latency CDF, loss, stragglers, pipelining.

Colour = system (P4SGD = model parallel, dp = data-parallel baseline) or, where
collectives are compared, the collective; line style = variant (case, batch).
Hollow markers = points outside the fidelity band. Every figure carries a
caption built from what each point actually ran (testbed.plots.captions) and
the testbed footer. Times: hardware-equivalent seconds (emulated / time
dilation factor) where the run recorded its TDF, else emulated wall-clock.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from testbed.plots import figure
from testbed.plots import style as st
from testbed.plots.captions import (Resolution, dataset_text, invalid_note, invalid_reasons, per_case,
                                    run_mode_text, values_text)
from testbed.plots.style import plt
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.p4sgd import FIGURES

register_figure_names(*FIGURES)

DISAGREE_FRAC = 0.15   # emulated vs projected: more than this apart is called out


# --------------------------------------------------------------------------- data
def _ok_points(run: Run) -> set[int]:
    return {p["index"] for p in run.points if p.get("status") == "ok"}


def _summaries(run: Run) -> list[dict[str, Any]]:
    ok = _ok_points(run)
    return [m for m in run.metrics_of("p4sgd_summary") if m.get("point") in ok]


def _by_point(run: Run, type_: str) -> dict[int, list[dict[str, Any]]]:
    ok = _ok_points(run)
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in run.metrics_of(type_):
        if m.get("point") in ok:
            out[m["point"]].append(m)
    return out


def _system(s: dict[str, Any]) -> str:
    return "p4sgd" if s.get("mode") == "model_parallel" else "dp"


def _invalid(run: Run, sums: list[dict[str, Any]]) -> dict[int, list[str]]:
    out = {}
    for s in sums:
        r = invalid_reasons(run, s["point"], s)
        if r is not None:
            out[s["point"]] = r
    return out


def _hw_time(sums: list[dict[str, Any]]) -> bool:
    """Express times in hardware seconds when every point recorded its dilation (tdf)."""
    return bool(sums) and all(s.get("tdf") for s in sums)


def _series_label(s: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    """Short label of a point's variant: case, system, collective, batch (minus `drop`)."""
    parts = []
    if "mode" not in drop:
        parts.append(st.label_of(_system(s)))
    if s.get("case") not in (None, "base", "baseline", "p4sgd", "dp") and "case" not in drop:
        parts.append(s["case"])
    if "collective" not in drop:
        parts.append(s["collective"])
    if "batch" not in drop:
        parts.append(f"B={s['batch']}")
    return ", ".join(parts)


def _loss_pct(m: dict[str, Any]) -> float:
    return float(m.get("links.loss_pct", 0.0) or 0.0)


def _device_text(run: Run, sums: list[dict[str, Any]]) -> str:
    """What was emulated: devices and dilation, collectives, network slowdown vs hardware."""
    by_dev: dict[str, list[float]] = defaultdict(list)
    for s in sums:
        by_dev[s["device"]].append(float(s.get("tdf") or s["dilation"]))
    dev_txt = ", ".join(
        "measured CPU (no dilation)" if d == "cpu" else
        f"{d} model, time dilation x{min(k):g}" + (f"-{max(k):g} (per point)" if min(k) != max(k) else "")
        for d, k in sorted(by_dev.items())) or "no successful points"
    def span(xs):
        lo, hi = min(xs), max(xs)
        return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"
    slow = [s["network_slowdown_vs_hw"] for s in sums
            if s.get("network_slowdown_vs_hw") and s["mode"] == "model_parallel"]
    if slow:
        dev_txt += f"; micro-batch allreduce p50 = {span(slow)}x a ~2 us hardware round trip"
    slow_dp = [s["network_slowdown_vs_hw"] for s in sums
               if s.get("network_slowdown_vs_hw") and s["mode"] == "data_parallel"]
    if slow_dp:
        dev_txt += f"; gradient allreduce p50 = {span(slow_dp)}x a 100 GbE line-rate estimate"
    cal = [s["calibrated"] for s in sums if "calibrated" in s]
    if cal:
        dev_txt += ("; dilation calibrated on this machine" if all(cal) else
                    f"; dilation NOT calibrated on {cal.count(False)} of {len(cal)} point(s) (a fixed TDF: "
                    "the scenario's, or a retry's from its first attempt's measured slowdown)")
    nd = [bool(s.get("network_dilated")) for s in sums if s.get("device") != "cpu"]
    if nd:
        dev_txt += ("; network slowed to each point's TDF by the soft switch" if all(nd) else
                    f"; network NOT dilated on {nd.count(False)} of {len(nd)} point(s) "
                    f"(TDF follows its own slowdown)")
    colls = values_text(sorted({s["collective"] for s in sums}))
    return (f"Devices: {dev_txt}; collectives: {colls} (switch = in-network SUM, ring/ps = host TCP).")


_RAN_FIELDS = {
    "data": ("workload.dataset", lambda vs: "data " + " / ".join(dataset_text(v) for v in vs)),
    "batch": ("workload.batch", lambda vs: "B=" + values_text(vs)),
    "micro": ("workload.micro_batch", lambda vs: "micro-batch " + values_text(vs)),
    "lr": ("workload.lr", lambda vs: "lr " + values_text(vs, lambda v: f"{v:g}")),
    "epochs": ("workload.epochs", lambda vs: "epochs " + values_text(vs)),
    "depth": ("workload.pipeline_depth", lambda vs: "pipeline depth " + values_text(vs)),
}


def _ran_text(res: Resolution, sums: list[dict[str, Any]]) -> str:
    """Per case, the parameters each point ran with (re-resolved: quick and case sets applied)."""
    workers = values_text(sorted({s["workers"] for s in sums}))
    body = per_case(res, [s["point"] for s in sums], _RAN_FIELDS)
    return f"Ran: {workers} workers" + "".join(f"; {t}" for t in (body, res.error) if t) + "."


def _save(fig: "plt.Figure", run: Run, out_dir: Path, name: str, extra: list[str] | None = None,
          sums: list[dict[str, Any]] | None = None,
          how: str = "hollow markers, left out of lines and bands") -> list[Path]:
    sums = _summaries(run) if sums is None else sums
    res = Resolution(run)
    invalid = _invalid(run, sums)
    caption = (extra or []) + [_ran_text(res, sums), _device_text(run, sums),
                               invalid_note(invalid, len(run.points), how), run_mode_text(run)]
    return st.save(fig, run, out_dir, name, caption)


def _empty(ax, text: str = "no successful P4SGD points") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _variant_styles(keys) -> dict[Any, str]:
    return st.case_styles(sorted(set(keys), key=str))


# --------------------------------------------------------------------------- figures
@figure("p4sgd_scaling")
def scaling(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    invalid = _invalid(run, sums)
    hw = _hw_time(sums) and all(s.get("hw_throughput_sps") for s in sums if s.get("throughput_sps"))
    key_thr = "hw_throughput_sps" if hw else "throughput_sps"
    # Colour = system; line style = case (e.g. the shipped width and a wide model are
    # both P4SGD: one colour, two styles, never merged into one line).
    groups: dict[tuple[str, str], dict[int, list[tuple[float, bool]]]] = defaultdict(lambda: defaultdict(list))
    case_system: dict[str, str] = {}
    for s in sums:
        case = s.get("case") or "base"
        case_system[case] = _system(s)
        if s.get(key_thr):
            groups[(_system(s), case)][s["workers"]].append((s[key_thr], s["point"] in invalid))
    # Per system, its first case solid, the next dotted...: colour already tells systems apart.
    styles: dict[str, str] = {}
    for system in {sy for sy, _ in groups}:
        styles.update(_variant_styles(c for sy, c in groups if sy == system))
    fig, (ax_t, ax_s, ax_b) = plt.subplots(1, 3, figsize=(14.0, 4.6))
    if not groups:
        _empty(ax_t)
    _iteration_breakdown(run, ax_b)
    top, most = 1, 0
    handles = []
    emulated_at: dict[tuple[str, int], float] = {}
    for (system, var), by_w in sorted(groups.items(), key=lambda kv: (kv[0][0] != "p4sgd", kv[0])):
        color, ls = st.color_of(system), styles[var]
        most = max(most, st.plot_repeats(ax_t, by_w, color=color, ls=ls))
        ws = sorted(by_w)
        base_vals = [v for v, bad in by_w[ws[0]] if not bad]
        if base_vals:
            base = float(np.median(base_vals)) / ws[0]   # per-worker throughput of the smallest run
            speed = {w: [(v / base, bad) for v, bad in by_w[w]] for w in ws}
            st.plot_repeats(ax_s, speed, color=color, ls=ls)
            good = [float(np.median([v for v, b in by_w[w] if not b])) for w in ws
                    if any(not b for _, b in by_w[w])]
            w_last = max(w for w in ws if any(not b for _, b in by_w[w]))
            eff = good[-1] / base / w_last
            lbl = f"{_case_label(system, var)} emulated (eff. {eff:.0%} at {w_last})"
        else:
            lbl = f"{_case_label(system, var)} emulated"
        handles.append(st.legend_handle(color, ls, marker="o", label=lbl))
        for w in ws:
            vals = [v for v, b in by_w[w] if not b]
            if vals:
                emulated_at[(var, w)] = float(np.median(vals))
        top = max(top, ws[-1])
    notes, profiles = _projection(run, ax_t, ax_s, case_system, emulated_at, handles, compare=hw,
                                  styles=styles)
    all_w = sorted({s["workers"] for s in sums} | {int(p["workers"]) for p in run.metrics_of("projection")
                                                   if p.get("workload") == "p4sgd"})
    top = max([top] + all_w)
    ax_s.plot([1, top], [1, top], color="k", ls="--", lw=0.8)
    handles.append(st.legend_handle("k", "--", label="ideal (linear)"))
    if invalid:
        handles.append(st.legend_handle("0.35", "none", marker="o", hollow_=True, label="invalid point"))
    for ax in (ax_t, ax_s):
        if top > 16:   # projected counts up to 256: log-log, ideal scaling is the diagonal
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(all_w)
            ax.set_xticklabels([str(w) for w in all_w])
            ax.minorticks_off()
            # Labels at 1, 2 and 5 of each decade: a throughput spanning less than a
            # decade had a single labelled tick.
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("workers")
    unit = "samples / hardware s" if hw else "samples / emulated s"
    ax_t.set_ylabel(f"throughput ({unit})")
    ax_t.set_title("Throughput")
    ax_s.set_ylabel("speedup (x smallest run's per-worker rate)")
    ax_s.set_title("Speedup vs workers")
    ax_s.legend(handles=handles, fontsize=6.5, loc="upper left")
    if notes:
        st.note(ax_t, "\n".join(notes[:4]) + (f"\n(+{len(notes) - 4} more)" if len(notes) > 4 else ""))
    extra = [f"Colour = system, line style = case. Emulated: thick lines with dots, {st.band_description(most)}; "
             + ("throughput in hardware seconds = emulated seconds / time dilation factor (TDF)." if hw
                else "throughput per emulated (dilated) second.")]
    if profiles:
        extra.append(f"Projected (thin lines with crosses, band = sensitivity to the device/network constants): model "
                     f"profile {values_text(sorted(profiles))}; worker counts beyond the emulated ones are "
                     f"projected only.")
    crossover = _crossover_text(run, case_system)
    if crossover:
        extra.insert(0, crossover)
    if notes:
        extra.append(f"DISAGREE (> {DISAGREE_FRAC:.0%} between emulated and projected at the same N): "
                     + "; ".join(notes))
    elif profiles and hw:
        extra.append(f"Emulated and projected agree within {DISAGREE_FRAC:.0%} at every valid emulated point.")
    elif profiles:
        extra.append("Not compared with the projection: the run recorded no hardware-time throughput.")
    return _save(fig, run, out_dir, "p4sgd_scaling", extra, sums)


def _crossover_text(run: Run, case_system: dict[str, str]) -> str | None:
    """One sentence: per model width that ran both ways, which parallelism the
    projection favours at the largest worker count both reach, and why."""
    res = Resolution(run)
    features: dict[str, Any] = {}
    for p in run.points:
        ds = res.get(p["index"], "workload.dataset") or {}
        features.setdefault(p.get("case") or "base", ds.get("features"))
    curves: dict[str, dict[int, float]] = defaultdict(dict)
    by_case: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in run.metrics_of("projection"):
        if r.get("workload") == "p4sgd" and r.get("hw_throughput_sps") and r.get("case") in case_system:
            by_case[r["case"]][int(r["workers"])].append(r["hw_throughput_sps"])
    for case, by_w in by_case.items():
        curves[case] = {w: float(np.median(v)) for w, v in by_w.items()}
    parts = []
    for width in sorted({f for f in features.values() if f}):
        mp = [c for c in curves if features.get(c) == width and case_system.get(c) == "p4sgd"]
        dp = [c for c in curves if features.get(c) == width and case_system.get(c) == "dp"]
        if not mp or not dp:
            continue
        a, b = curves[mp[0]], curves[dp[0]]
        common = sorted(set(a) & set(b))
        if len(common) < 2:
            continue
        lo = common[0]
        # The emulated range's top (8, the paper's count) and the largest count up to 64
        # (beyond, both collapse and the comparison says little).
        counts = sorted({n for n in common if n > lo and n in (8, max(c for c in common if c <= 64))})
        if not counts:
            counts = [common[-1]]
        effs = [(n, a[n] / n / (a[lo] / lo), b[n] / n / (b[lo] / lo)) for n in counts]
        n, eff_mp, eff_dp = effs[0]
        why = ("data parallelism's gradient allreduce carries all the features every step, model "
               "parallelism's only the batch's partial sums" if eff_mp >= eff_dp else
               "each worker's slice of the features leaves too little compute per micro-batch against the "
               "device's fixed per-micro-batch cost, while data parallelism's work per worker stays whole")
        winner = "model parallelism (P4SGD) wins" if eff_mp >= eff_dp else "data parallelism wins"
        at = ", ".join(f"P4SGD {m:.0%} vs data-parallel {d:.0%} at {k} workers" for k, m, d in effs)
        parts.append(f"{width} features: {at}; at {n} {winner}: {why}")
    if not parts:
        return None
    return "Where model parallelism beats data parallelism (projected scaling efficiency): " + "; ".join(parts) + "."


def _case_label(system: str, case: str) -> str:
    return st.label_of(system) if case in (system, "base") else f"{st.label_of(system)} ({case})"


def _projection(run: Run, ax_t, ax_s, case_system: dict[str, str], emulated_at: dict[tuple[str, int], float],
                handles: list, compare: bool, styles: dict[str, str] | None = None
                ) -> tuple[list[str], set[str]]:
    """Dashed projected throughput and speedup per case (colour of its system) with its
    sensitivity band; returns the disagreement notes and the model profiles used.

    Every point projects its own N and 16-256 workers; a case's curve takes, per N,
    the median over the points (and repeats) that projected it."""
    by_case: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for p in run.metrics_of("projection"):
        if p.get("workload") == "p4sgd" and p.get("hw_throughput_sps") and p.get("case") in case_system:
            by_case[p["case"]][int(p["workers"])].append(p)
    notes, profiles = [], set()
    for case, by_w in sorted(by_case.items(), key=lambda kv: (case_system[kv[0]] != "p4sgd", kv[0])):
        system = case_system[case]
        color = st.color_of(system)
        ws = sorted(by_w)

        def med(key: str, w: int):
            vals = [r.get(key) for r in by_w[w]]
            return float(np.median(vals)) if vals and all(v is not None for v in vals) else None

        y = np.array([med("hw_throughput_sps", w) for w in ws], float)
        recs = [r for w in ws for r in by_w[w]]
        prof = values_text(sorted({str(r.get("profile", "?")) for r in recs}))
        profiles.update(str(r.get("profile", "?")) for r in recs)
        # Emulated: thick lines with dots; projected: thin lines with crosses, same style.
        ls = (styles or {}).get(case, "-")
        ax_t.plot(ws, y, color=color, ls=ls, lw=0.9, alpha=0.8, marker="x", ms=5)
        lo = [med("band_lo_sps", w) for w in ws]
        hi = [med("band_hi_sps", w) for w in ws]
        banded = all(v is not None for v in lo + hi)
        if banded:
            ax_t.fill_between(ws, lo, hi, color=color, alpha=0.10, lw=0)
        per_w = y[0] / ws[0]
        ax_s.plot(ws, y / per_w, color=color, ls=ls, lw=0.9, alpha=0.8, marker="x", ms=5)
        if banded:
            ax_s.fill_between(ws, np.array(lo) / per_w, np.array(hi) / per_w, color=color, alpha=0.10, lw=0)
        handles.append(st.legend_handle(color, ls, marker="x",
                                        label=f"{_case_label(system, case)} projected (model profile {prof})"))
        for w, proj in zip(ws, y):
            emu = emulated_at.get((case, w))
            if compare and emu is not None:
                rel = emu / proj - 1.0
                if abs(rel) > DISAGREE_FRAC:
                    notes.append(f"{_case_label(system, case)} N={w}: emulated {emu:.3g} vs projected "
                                 f"{proj:.3g} samples/s ({rel:+.0%})")
    return notes, profiles


def _iteration_breakdown(run: Run, ax) -> None:
    """Per worker count and variant: mean time per iteration split into modeled
    compute, exposed (waited-for) communication and the rest (host overhead, stalls)."""
    iters = _by_point(run, "p4sgd_iter")
    sums = _summaries(run)
    # Points run at different TDFs: bars compare only in hardware time (emulated / TDF).
    hw = _hw_time(sums)
    rows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for s in sums:
        per = 1.0 / s["tdf"] if hw else 1.0
        rows[(_system(s), s.get("case") or "base", s["workers"])].extend(
            {k: v * per for k, v in r.items() if k in ("compute_s", "comm_s", "other_s", "stall_s")}
            for r in iters.get(s["point"], []))
    rows = {k: v for k, v in rows.items() if v}
    if not rows:
        _empty(ax)
        return
    keys = sorted(rows, key=lambda k: (k[0] != "p4sgd", k[1], k[2]))
    parts = (("compute_s", "compute (modeled)", "compute"), ("comm_s", "exposed communication", "comm"),
             ("other_s", "host overhead + stall", "other"))
    x = np.arange(len(keys))
    unit, mult = ("µs, hardware", 1e6) if hw else ("ms, emulated", 1e3)
    ms = np.array([[np.mean([r[key] + (r.get("stall_s", 0.0) if key == "other_s" else 0.0)
                             for r in rows[k]]) * mult for k in keys] for key, _, _ in parts])
    total = ms.sum(0)
    bottom = np.zeros(len(keys))
    for j, (_, name, c) in enumerate(parts):
        share = ms[j] / np.where(total > 0, total, 1.0)
        ax.bar(x, share, 0.7, bottom=bottom, color=st.PART_COLORS[c], label=name, edgecolor="k", lw=0.3)
        bottom += share
    for xi, t in zip(x, total):
        ax.text(xi, 1.01, f"{t:.3g}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x)
    several = {k[0]: len({c for sy, c, _ in keys if sy == k[0]}) > 1 for k in keys}
    ax.set_xticklabels([f"{'P4SGD' if k[0] == 'p4sgd' else 'DP'}\n{k[1] + chr(10) if several[k[0]] else ''}"
                        f"{k[2]} w" for k in keys], fontsize=6 if len(keys) > 8 else 6.5)
    for lab, k in zip(ax.get_xticklabels(), keys):
        lab.set_color(st.color_of(k[0]))
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of the mean iteration time")
    ax.set_title("Where an iteration goes")
    ax.set_xlabel(f"mean iteration time on top ({unit})", fontsize=7)
    ax.legend(fontsize=6.5, loc="lower left")


# --------------------------------------------------------------------------- convergence
def _lr(res: Resolution, s: dict[str, Any]) -> float | None:
    v = s.get("lr", res.get(s["point"], "workload.lr"))
    return float(v) if v is not None else None


def _pick_best(by_lr: dict[float, list[dict[str, Any]]], scale=lambda s, t: t,
               unit: str = "s") -> tuple[float, str]:
    """The grid's best lr: lowest median time to target among lrs whose every repeat
    reached it; if none did, the lowest median final loss. `scale` turns a point's
    emulated time into the figure's time (hardware: / its own TDF, which differs per
    point, so emulated times of different points are not comparable)."""
    reached = {lr: float(np.median([scale(s, s["time_to_target_s"]) for s in ss]))
               for lr, ss in by_lr.items() if all(s.get("time_to_target_s") is not None for s in ss)}
    if reached:
        best = min(reached, key=reached.get)
        return best, f"fastest to the target ({reached[best]:.3g} {unit})"
    finals = {lr: float(np.median([s["final_loss"] for s in ss if s.get("final_loss") is not None] or [np.inf]))
              for lr, ss in by_lr.items()}
    best = min(finals, key=finals.get)
    return best, f"lowest final loss ({finals[best]:.3g}; no lr reached the target)"


def _curve_band(curves: list[list[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Repeats' loss curves on one time grid: t, median, min, max (over the common time span)."""
    t_end = min(c[-1][0] for c in curves)
    t = np.linspace(max(c[0][0] for c in curves), t_end, 60)
    ys = np.array([np.interp(t, [p[0] for p in c], [p[1] for p in c]) for c in curves])
    return t, np.median(ys, 0), ys.min(0), ys.max(0)


@figure("p4sgd_convergence")
def convergence(run: Run, out_dir: Path) -> list[Path]:
    curves = _by_point(run, "p4sgd_curve")
    sums = [s for s in _summaries(run) if curves.get(s["point"])]
    res = Resolution(run)
    invalid = _invalid(run, sums)
    hw = _hw_time(sums)
    unit = "hardware-equivalent time (s) = emulated / TDF" if hw else "emulated wall-clock time (s)"
    # Series: system x batch x collective x workers; within one, the learning rates are its grid.
    series: dict[tuple, dict[float | None, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for s in sums:
        series[(_system(s), s["batch"], s["collective"], s["workers"])][_lr(res, s)].append(s)
    # Line style tells apart the variants of one system (its batch sizes, collectives).
    styles = {k: st.LINESTYLES[sorted(k2 for k2 in series if k2[0] == k[0]).index(k) % len(st.LINESTYLES)]
              for k in series}
    fig, ax = plt.subplots(figsize=(9.0, 4.6))
    if not sums:
        _empty(ax)
    handles, grid_notes, missed = [], [], []
    target = next((s["target_loss"] for s in sums if s.get("target_loss") is not None), None)

    def curve_of(s):
        k = s["tdf"] if hw else 1.0
        return [(r["t_s"] / k, r["loss"]) for r in sorted(curves[s["point"]], key=lambda r: r["snapshot"])]

    def scale(s, t):
        return None if t is None else t / (s["tdf"] if hw else 1.0)

    for key, by_lr in sorted(series.items(), key=lambda kv: (kv[0][0] != "p4sgd", str(kv[0]))):
        system, batch, coll, workers = key
        color, ls = st.color_of(system), styles[key]
        lrs = sorted(by_lr, key=lambda v: (v is None, v))
        best, why = (_pick_best(by_lr, scale, "hardware s" if hw else "emulated s") if len(lrs) > 1
                     else (lrs[0], ""))
        if len(lrs) > 1:
            grid_notes.append(f"{st.label_of(system)} B={batch} lr grid {{{values_text(lrs, lambda v: f'{v:g}')}}}: "
                              f"best lr {best:g}, {why}")
            for lr in lrs:
                if lr == best:
                    continue
                for s in by_lr[lr]:
                    c = curve_of(s)
                    ax.plot([p[0] for p in c], [p[1] for p in c], color=color, ls=ls, lw=0.8, alpha=0.3)
        reps = by_lr[best]
        good = [s for s in reps if s["point"] not in invalid]
        if len(good) > 1:
            t, med, lo, hi = _curve_band([curve_of(s) for s in good])
            ax.plot(t, med, color=color, ls=ls, lw=1.6)
            ax.fill_between(t, lo, hi, color=color, alpha=0.18, lw=0)
        elif good:
            c = curve_of(good[0])
            ax.plot([p[0] for p in c], [p[1] for p in c], color=color, ls=ls, lw=1.6, marker=".", ms=4)
        for s in reps:
            if s["point"] in invalid:
                c = curve_of(s)
                st.hollow(ax, [p[0] for p in c], [p[1] for p in c], color=color, marker=".")
        ttts = [scale(s, s.get("time_to_target_s")) for s in good or reps]
        lr_txt = f", lr {best:g}" + (" (best of grid)" if len(lrs) > 1 else "") if best is not None else ""
        name = (f"{st.label_of(system)} B={batch}{lr_txt}" + (f", {coll}" if len({k[2] for k in series}) > 1 else "")
                + (f", {workers} workers" if len({k[3] for k in series}) > 1 else ""))
        if target is not None and all(t is not None for t in ttts):
            tt = float(np.median(ttts))
            ax.axvline(tt, color=color, ls=":", lw=1)
            name += f":\ntarget at {tt:.3g} s"
        elif target is not None:
            end = max(curve_of(s)[-1][0] for s in reps)
            n_miss = sum(t is None for t in ttts)
            miss = f"did not reach target loss {target:g} in {end:.3g} s" + \
                (f" ({n_miss} of {len(ttts)} repeats)" if len(ttts) > 1 else "")
            name += ":\n" + miss
            missed.append(f"{st.label_of(system)} B={batch}{lr_txt}: {miss}")
        handles.append(st.legend_handle(color, ls, label=name))
    if any(len(v) > 1 for v in series.values()):
        handles.append(st.legend_handle("0.35", "-", label="other lrs of the grid (faint)"))
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1)
        handles.append(st.legend_handle("k", "--", label=f"target loss {target:g}"))
    if invalid:
        handles.append(st.legend_handle("0.35", "none", marker="o", hollow_=True, label="invalid point"))
    ax.set_xlabel(unit)
    ax.set_ylabel("training loss (offline, assembled model)")
    ax.set_title("Convergence: loss vs time")
    ax.legend(handles=handles, fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    reps_n = max((len(ss) for v in series.values() for ss in v.values()), default=0)
    extra = [("NOT REACHED: " + "; ".join(missed)) if missed else "",
             "; ".join(grid_notes), f"Curves: {st.band_description(reps_n)}."]
    return _save(fig, run, out_dir, "p4sgd_convergence", extra, sums)


_MARKERS = "osD^v"


def _coll_color(s: dict[str, Any]) -> str:
    """Where collectives are compared, the collective is the 'system' (switch/ring/ps)."""
    return st.color_of(s["collective"] if s.get("mode") == "model_parallel" else "dp")


@figure("p4sgd_latency_cdf")
def latency_cdf(run: Run, out_dir: Path) -> list[Path]:
    iters = _by_point(run, "p4sgd_iter")
    sums = _summaries(run)
    invalid = _invalid(run, sums)
    styles = _variant_styles(s.get("case", "base") for s in sums)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    if not sums:
        _empty(ax)
    for s in sorted(sums, key=lambda s: s["point"]):
        lat = np.sort([v for r in iters.get(s["point"], []) for v in r["allreduce_s"]]) * 1e3
        if lat.size:
            bad = s["point"] in invalid
            ax.step(lat, np.arange(1, lat.size + 1) / lat.size, where="post", color=_coll_color(s),
                    ls=styles[s.get("case", "base")], lw=0.8 if bad else 1.5, alpha=0.4 if bad else 1.0,
                    label=f"{_series_label(s, ('batch', 'mode'))} (p50 {np.median(lat):.3g} ms)"
                          + (" INVALID" if bad else ""))
    ax.set_xscale("log")
    ax.set_xlabel("allreduce latency per micro-batch (ms, emulated)")
    ax.set_ylabel("CDF")
    ax.set_title("Per-micro-batch allreduce latency")
    ax.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_latency_cdf",
                 ["Colour = collective, line style = case."], sums, how="faded, marked INVALID in the legend")


@figure("p4sgd_loss")
def loss(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    invalid = _invalid(run, sums)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in sums:
        groups[_series_label(s, ("case", "batch"))].append(s)
    fig, (ax_i, ax_l) = plt.subplots(1, 2, figsize=(10, 4.2))
    if not groups:
        _empty(ax_i)
    handles = []
    for g, (label, ss) in enumerate(sorted(groups.items())):
        color, mk = _coll_color(ss[0]), _MARKERS[g % len(_MARKERS)]   # marker tells apart same-colour groups
        for key, ls in (("iter_ms_p50", "-"), ("iter_ms_p99", ":")):
            data: dict[float, list[tuple[float, bool]]] = defaultdict(list)
            for s in ss:
                if s.get(key) is not None:
                    data[_loss_pct(s)].append((s[key], s["point"] in invalid))
            st.plot_repeats(ax_i, data, color=color, ls=ls, marker=mk)
        base = [s["train_s"] for s in ss if _loss_pct(s) == 0 and s.get("train_s") and s["point"] not in invalid]
        for s in ss:
            if base and s.get("train_s") and _loss_pct(s) > 0 and s["point"] not in invalid:
                ax_i.annotate(f"x{s['train_s'] / np.median(base):.1f} train time",
                              (_loss_pct(s), s["iter_ms_p50"]), textcoords="offset points", xytext=(-20, 7),
                              fontsize=7, color=color)
        digests = {s.get("model_digest") for s in ss}
        same = (f"final models identical (digest {next(iter(digests))})" if len(digests) == 1
                else f"{len(digests)} different final models")
        data = defaultdict(list)
        for s in ss:
            if s.get("final_loss") is not None:
                data[_loss_pct(s)].append((s["final_loss"], s["point"] in invalid))
        st.plot_repeats(ax_l, data, color=color, marker=mk)
        handles.append(st.legend_handle(color, marker=mk, label=f"{label}: {same}"))
    ax_i.set_yscale("log")
    ax_i.set_xlabel("packet loss per link direction (%)")
    ax_i.set_ylabel("iteration time (ms, emulated, log)")
    ax_i.set_title("Iteration time vs loss rate")
    ax_i.legend(handles=[st.legend_handle("0.35", "-", label="p50"), st.legend_handle("0.35", ":", label="p99")],
                fontsize=7)
    ax_l.set_xlabel("packet loss per link direction (%)")
    ax_l.set_ylabel("final training loss")
    ax_l.set_title("Training is exact under loss")
    if invalid:
        handles.append(st.legend_handle("0.35", "none", marker="o", hollow_=True, label="invalid point"))
    ax_l.legend(handles=handles, fontsize=7, loc="upper right")
    return _save(fig, run, out_dir, "p4sgd_loss", [], sums)


@figure("p4sgd_straggler")
def straggler(run: Run, out_dir: Path) -> list[Path]:
    iters = _by_point(run, "p4sgd_iter")
    sums = sorted(_summaries(run), key=lambda s: s["point"])
    invalid = _invalid(run, sums)
    styles = _variant_styles(s.get("case", "base") for s in sums)
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(10.5, 4.4))
    if not sums:
        _empty(ax_b)
    # (a) per worker: where its iteration time goes (compute / waiting in the allreduce / stall).
    width = 0.8 / max(1, len(sums))
    parts = (("compute_s", "compute", "compute"), ("comm_s", "allreduce wait", "comm"),
             ("stall_s", "stall", "stall"), ("other_s", "host overhead", "other"))
    hatches = ["", "//", "..", "xx", "\\\\"]
    hosts: list[str] = []
    for k, s in enumerate(sums):
        per_host: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        n_iter: dict[str, int] = defaultdict(int)
        for r in iters.get(s["point"], []):
            n_iter[r["host"]] += 1
            for key, _, _ in parts:
                per_host[r["host"]][key] += r[key]
        hs = sorted(per_host, key=lambda h: int(h[1:]) if h[1:].isdigit() else 0)
        hosts = hs if len(hs) > len(hosts) else hosts
        xs = np.arange(len(hs)) + k * width
        bottom = np.zeros(len(hs))
        bad = s["point"] in invalid
        for key, name, c in parts:
            vals = np.array([per_host[h][key] / n_iter[h] * 1e3 for h in hs])
            ax_b.bar(xs, vals, width, bottom=bottom, color="none" if bad else st.PART_COLORS[c],
                     edgecolor=st.PART_COLORS[c] if bad else "k", lw=0.8 if bad else 0.3,
                     hatch=hatches[k % len(hatches)], label=name if k == 0 else None)
            bottom += vals
        for x in xs:
            ax_b.text(x, 0, s.get("case", "") + (" INVALID" if bad else ""), rotation=90, fontsize=6,
                      ha="center", va="bottom")
        # (b) timeline of rank 0's iteration time: a straggler stalls everyone.
        r0 = sorted((r for r in iters.get(s["point"], []) if r["rank"] == 0), key=lambda r: r["iter"])
        ax_t.plot([r["t_s"] for r in r0], [r["iter_s"] * 1e3 for r in r0], lw=0.8 if bad else 1.2,
                  color=st.color_of(_system(s)), ls=styles[s.get("case", "base")], alpha=0.4 if bad else 1.0,
                  label=f"{s.get('case', '')} ({_series_label(s, ('case', 'batch'))})" + (" INVALID" if bad else ""))
    ax_b.set_xticks(np.arange(len(hosts)) + width * (len(sums) - 1) / 2)
    ax_b.set_xticklabels(hosts)
    ax_b.set_ylabel("mean time per iteration (ms, emulated)")
    ax_b.set_title("Per worker: compute vs waiting (bars per case)")
    ax_b.legend(fontsize=7)
    ax_t.set_xlabel("emulated time (s)")
    ax_t.set_ylabel("iteration time of w1 (ms)")
    ax_t.set_title("Iteration time over time (line style = case)")
    ax_t.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_straggler", [], sums,
                 how="outlined bars and faded lines, marked INVALID")


@figure("p4sgd_pipeline")
def pipeline(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    invalid = _invalid(run, sums)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in sums:
        groups[_series_label(s, ("mode", "batch"))].append(s)
    fig, (ax_h, ax_i) = plt.subplots(1, 2, figsize=(10, 4.2))
    if not groups:
        _empty(ax_h)
    iters = _by_point(run, "p4sgd_iter")
    handles = []
    for g, (label, ss) in enumerate(sorted(groups.items())):
        color, mk = _coll_color(ss[0]), _MARKERS[g % len(_MARKERS)]
        exposed = {s["point"]: np.mean([r["comm_s"] for r in iters.get(s["point"], [])] or [np.nan]) for s in ss}
        d1 = [exposed[s["point"]] for s in ss if s["pipeline_depth"] == 1 and s["point"] not in invalid]
        series = {
            (ax_h, "-"): [(s, s["hidden_share"] or 0.0) for s in ss],
            (ax_h, "--"): [(s, 1.0 - exposed[s["point"]] / np.median(d1)) for s in ss] if d1 and np.median(d1) > 0
            else [],
            (ax_i, "-"): [(s, s["iter_ms_p50"]) for s in ss],
            (ax_i, "--"): [(s, exposed[s["point"]] * 1e3) for s in ss],
        }
        for (ax, ls), rows in series.items():  # noqa: B007
            data: dict[float, list[tuple[float, bool]]] = defaultdict(list)
            for s, y in rows:
                if y is not None and np.isfinite(y):
                    data[s["pipeline_depth"]].append((y, s["point"] in invalid))
            st.plot_repeats(ax, data, color=color, ls=ls, marker=mk)
        handles.append(st.legend_handle(color, marker=mk, label=label))
    ax_h.set_ylim(-0.05, 1.05)
    for ax in (ax_h, ax_i):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_h.set_xlabel("pipeline depth (micro-batches in flight)")
    ax_h.set_ylabel("communication hidden")
    ax_h.set_title("Share of communication hidden by pipelining")
    ax_h.legend(handles=handles + [st.legend_handle("0.35", "-", label="1 - exposed / total"),
                                   st.legend_handle("0.35", "--", label="1 - exposed / exposed at depth 1")],
                fontsize=7)
    ax_i.set_xlabel("pipeline depth")
    ax_i.set_ylabel("ms per iteration (emulated)")
    ax_i.set_title("Iteration time and exposed communication")
    extra = [st.legend_handle("0.35", "-", label="iteration p50"),
             st.legend_handle("0.35", "--", label="exposed communication (mean)")]
    if invalid:
        extra.append(st.legend_handle("0.35", "none", marker="o", hollow_=True, label="invalid point"))
    ax_i.legend(handles=extra, fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_pipeline", [], sums)
