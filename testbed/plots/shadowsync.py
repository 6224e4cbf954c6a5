"""ShadowSync figures: examples/s vs trainers with linear scaling drawn, the
eval NE difference of each background algorithm vs its foreground counterpart
in %, and the average sync gap (x = trainers, or the shadow's pause in hardware ms
when the run sweeps workload.shadow_pause_ms).

Colour = algorithm (EASGD, MA, BMUF, no sync); line style = mode (shadow solid,
foreground dashed) and the scenario's other cases after it. Points whose
emulation is not valid (the fidelity monitor or the device model) are hollow.
Throughput is in examples per second of the modeled hardware (emulated / TDF:
calibrated points run at different TDFs); each S-*/FR-* series' projection from
the traces of its largest emulated point (testbed/workloads/shadowsync_projection.py,
project_trainers) is the thin line with crosses: every count on it, the emulated one
included, charges each PS the measured cost of the project's Python PS, whereas an
emulated point's PS time is divided by its TDF like everything else.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from testbed.plots import figure
from testbed.plots.captions import Resolution, invalid_note, invalid_reasons, per_case, run_mode_text
from testbed.plots.style import band_description, legend_handle, plot_repeats, plt, save
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.shadowsync import FIGURES

register_figure_names(*FIGURES)

COLOURS = {"easgd": "#0072b2", "ma": "#d55e00", "bmuf": "#009e73", "none": "0.45"}
NAMES = {"easgd": "EASGD", "ma": "MA", "bmuf": "BMUF", "none": "no sync"}
MODE_LS = {"shadow": "-", "foreground": "--"}
OTHER_LS = (":", "-.")


def _summaries(run: Run) -> dict[int, dict[str, Any]]:
    ok = {p["index"] for p in run.points if p.get("status") == "ok"}
    return {m["point"]: m for m in run.metrics_of("shadowsync_summary") if m.get("point") in ok}


def _case(run: Run, idx: int) -> str:
    c = (run.point(idx) or {}).get("case") or "base"
    return "base" if c in ("base", "shadow", "foreground") else c


def _style(mode: str, case: str, cases: list[str]) -> str:
    if case == "base":
        return MODE_LS[mode]
    return OTHER_LS[cases.index(case) % len(OTHER_LS)] if mode == "shadow" else "--"


def _caption(run: Run, sums: dict[int, dict[str, Any]], extra: str = "",
             how: str = "hollow markers, left out of lines and bands") -> list[str]:
    res = Resolution(run)
    what = per_case(res, sums, {
        "iters": ("workload.iterations", lambda v: f"{'/'.join(map(str, v))} iterations/worker"),
        "hogwild": ("workload.hogwild_workers", lambda v: f"{'/'.join(map(str, v))} Hogwild workers/trainer"),
        "emb": ("workload.embedding_servers", lambda v: f"{'/'.join(map(str, v))} embedding PS"),
        "k": ("workload.k", lambda v: "FR every k=" + "/".join(map(str, v))),
        "batch": ("workload.batch_size", lambda v: f"batch {v[0]}"),
        "device": ("workload.device", lambda v: f"{v[0].get('type')} model" + (
            " (TDF calibrated)" if v[0].get("time_scale") == "auto" else f" x{v[0].get('time_scale', 1):g}")),
        "loss": ("links.loss_pct", lambda v: f"loss {'/'.join(f'{x:g}' for x in v)} %"),
    })
    invalid = {i: r for i in sums if (r := invalid_reasons(run, i, sums[i])) is not None}
    tdfs = sorted({s["tdf"] for s in sums.values() if s.get("tdf")})
    tdf = (f"TDF {tdfs[0]:g}" if len(tdfs) == 1 else f"TDF {tdfs[0]:g}-{tdfs[-1]:g}") if tdfs else "TDF ?"
    cal = "calibrated" if any(s.get("calibrated") for s in sums.values()) else "fixed"
    return [f"DLRM-style CTR model, synthetic Criteo-schema clicks; {what}" + (f"; {extra}" if extra else ""),
            invalid_note(invalid, len(sums), how=how),
            f"{tdf} ({cal}); network and device checked by the fidelity monitor (docs/shadowsync.md)",
            run_mode_text(run)]


def _bad(run: Run, idx: int, s: dict[str, Any]) -> bool:
    return s.get("valid", s.get("device_valid")) is False


def _rate(s: dict[str, Any]) -> float | None:
    """Examples per second of the modeled hardware (older summaries: per emulated second x TDF)."""
    if s.get("hw_examples_per_s"):
        return s["hw_examples_per_s"]
    return s["examples_per_s"] * s.get("tdf", s.get("time_scale", 1.0)) if s.get("examples_per_s") else None


def projection_sources(sums: dict[int, dict[str, Any]], case_of) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Per (algorithm, mode, case): the summaries a series' projection is read from, those
    at its largest emulated count (one per repeat)."""
    top: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for idx, s in sums.items():
        if s.get("projected_hw_examples_per_s"):
            key = (s["algorithm"], s["mode"], case_of(idx))
            if top[key] and top[key][0]["trainers"] < s["trainers"]:
                top[key] = []
            if not top[key] or top[key][0]["trainers"] == s["trainers"]:
                top[key].append(s)
    return dict(top)


def projections(sources: dict[tuple[str, str, str], list[dict[str, Any]]]
                ) -> dict[tuple[str, str, str], dict[int, float]]:
    """Per (algorithm, mode, case): trainers -> projected examples/s (median over repeats)
    from its projection_sources: their own-count projection and every `projected` count."""
    out = {}
    for key, ss in sources.items():
        pts: dict[int, list[float]] = defaultdict(list)
        for s in ss:
            # the own count from `projected` (PS charged its measured cost, as at the other
            # counts); older summaries have only the replay of the recorded PS times
            if str(s["trainers"]) not in (s.get("projected") or {}):
                pts[s["trainers"]].append(s["projected_hw_examples_per_s"])
            for n, r in (s.get("projected") or {}).items():
                pts[int(n)].append(r)
        out[key] = {n: float(np.median(v)) for n, v in sorted(pts.items())}
    return out


def projected_servers_text(summaries: Iterable[dict[str, Any]]) -> str:
    """How many servers each projected count of these summaries has (summary
    `projected_servers`), e.g. "projected with 2/4/8 emb PS, 2/4/8 sync PS at 16/32/64
    trainers"; "" without projections. Series that disagree (EASGD has sync PSs, MA
    none) are merged per kind."""
    per: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for s in summaries:
        for n, kinds in (s.get("projected_servers") or {}).items():
            for kind, count in kinds.items():
                per[kind][int(n)].add(count)
    if not per:
        return ""
    counts = sorted({n for k in per.values() for n in k})
    names = {"embedding_ps": "emb PS", "sync_ps": "sync PS"}
    parts = [", ".join("/".join("|".join(map(str, sorted(per[k][n]))) if per[k].get(n) else "-" for n in counts)
                       + f" {names.get(k, k)}" for k in sorted(per))]
    return f"projected with {parts[0]} at {'/'.join(map(str, counts))} trainers"


def shadow_over_foreground(proj: dict[tuple[str, str, str], dict[int, float]]) -> dict[str, dict[int, float]]:
    """Projected S-X / FR-X throughput per algorithm and trainer count (base case)."""
    out = {}
    for (alg, mode, case), s in proj.items():
        fr = proj.get((alg, "foreground", case))
        if mode == "shadow" and case == "base" and fr:
            out[alg] = {n: s[n] / fr[n] for n in s if n in fr}
    return out


@figure("shadowsync_throughput")
def throughput(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    cases = sorted({_case(run, i) for i in sums} - {"base"})
    series: dict[tuple[str, str, str], dict[float, list[tuple[float, bool]]]] = defaultdict(lambda: defaultdict(list))
    for idx, s in sums.items():
        if _rate(s):
            series[(s["algorithm"], s["mode"], _case(run, idx))][s["trainers"]].append((_rate(s), _bad(run, idx, s)))
    # A straggler point's projection replicates trainer 0, not the straggler: not drawn.
    res = Resolution(run)
    straggled = {i for i in sums if res.get(i, "stragglers")}
    sources = projection_sources({i: s for i, s in sums.items() if i not in straggled}, lambda i: _case(run, i))
    proj = projections(sources)
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    most = 0
    far = max([n for p in proj.values() for n in p] + [s["trainers"] for s in sums.values()] + [1])
    for (alg, mode, case), p in sorted(proj.items()):
        ax.plot(list(p), list(p.values()), color=COLOURS[alg], lw=0.7, ls=_style(mode, case, cases), marker="x",
                ms=5, alpha=0.9)
    hollow_only, linear = [], 0
    for (alg, mode, case), data in sorted(series.items()):
        label = ("S-" if mode == "shadow" else "FR-") + NAMES[alg] if alg != "none" else "no sync"
        label += "" if case == "base" else f" ({case})"
        valid = plot_repeats(ax, data, color=COLOURS[alg], ls=_style(mode, case, cases), label=label)
        most = max(most, valid)
        if not valid:           # every point invalid: no line, so the legend names its hollow markers
            hollow_only.append(legend_handle(color=COLOURS[alg], ls=_style(mode, case, cases), marker="o",
                                             hollow_=True, label=f"{label}: invalid only"))
        # linear scaling from the fewest trainers with a valid point (1 where it is valid)
        base = min((x for x, vs in data.items() if any(not bad for _, bad in vs)), default=None)
        if base is not None and mode == "shadow" and case == "base" and (len(data) > 1 or far > base):
            per = float(np.median([v for v, bad in data[base] if not bad])) / base
            xs = sorted({x for x in data if x >= base} | {far})
            ax.plot(xs, [per * x for x in xs], color=COLOURS[alg], lw=0.8, ls=(0, (1, 3)), alpha=0.8)
            linear = min(linear or base, base)
    if not series:
        ax.text(0.5, 0.5, "no successful shadowsync points", ha="center", va="center", transform=ax.transAxes)
    handles, _ = ax.get_legend_handles_labels()
    handles += hollow_only
    if linear:
        handles.append(legend_handle(color="0.3", ls=(0, (1, 3)), label="linear scaling from 1 trainer" if linear == 1
                                     else "linear scaling from the fewest trainers with a valid point"))
    if proj:
        handles.append(legend_handle(color="0.3", marker="x", label="projected from the traces (PS at its measured cost)"))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ax.legend(handles=handles, fontsize=7, handlelength=3.5)
    ticks = sorted({s["trainers"] for s in sums.values()} | {n for p in proj.values() for n in p}) or [1]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("trainers")
    ax.set_ylabel("examples / s (modeled hardware)")
    ax.set_title("Throughput vs trainers: background (S-*) vs foreground (FR-*) sync", fontsize=9)
    ratio = shadow_over_foreground(proj)
    extra = band_description(most) + ("; projected S/FR " + ", ".join(
        f"{NAMES[a]} " + "/".join(f"{r:.2f}" for r in rs.values()) + " at " + "/".join(map(str, rs))
        for a, rs in sorted(ratio.items())) if ratio else "")
    if proj:
        extra += "; projections charge each PS its measured Python service time, emulated points its time / TDF"
    # the counts the drawn lines have (a series' largest emulated point's), not every point's
    servers = projected_servers_text(s for ss in sources.values() for s in ss)
    extra += f"; {servers}" if servers else ""
    if proj and any(res.get(i, "links.loss_pct") for i in sums):
        extra += "; the projections model no packet loss"
    if straggled:
        extra += "; straggler points not projected (the projection replicates trainer 0, not the straggler)"
    return save(fig, run, out_dir, "shadowsync_throughput", _caption(run, sums, extra))


@figure("shadowsync_ne")
def ne_difference(run: Run, out_dir: Path) -> list[Path]:
    """(NE(S-X) - NE(FR-X)) / NE(FR-X) in %, per algorithm and trainer count, pairing repeats."""
    sums = _summaries(run)
    by: dict[tuple[str, int, str, str], dict[int, float]] = defaultdict(dict)
    for idx, s in sums.items():
        if s.get("eval_ne") is not None and s["algorithm"] != "none":
            rep = (run.point(idx) or {}).get("repeat", 0)
            by[(s["algorithm"], s["trainers"], _case(run, idx), s["mode"])][rep] = s["eval_ne"]
    rows = []
    for (alg, n, case, mode), reps in by.items():
        fr = by.get((alg, n, case, "foreground"))
        if mode == "shadow" and fr:
            diffs = [100 * (reps[r] - fr[r]) / fr[r] for r in reps if r in fr]
            if diffs:
                rows.append(((alg, n, case), diffs))
    rows.sort(key=lambda r: (r[0][2], list(COLOURS).index(r[0][0]), r[0][1]))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2.5), 4.6))
    most = 0
    for x, ((alg, n, case), diffs) in enumerate(rows):
        most = max(most, plot_repeats(ax, {x: [(d, False) for d in diffs]}, color=COLOURS[alg]))
        ax.vlines(x, min(diffs), max(diffs), color=COLOURS[alg], lw=5, alpha=0.3)
    ax.axhline(0, color="0.3", lw=0.8)
    for y in (-0.5, 0.5):
        ax.axhline(y, color="#b00000", lw=0.7, ls=":")
    ax.set_xticks(range(len(rows)), [f"S-{NAMES[a]} vs FR-{NAMES[a]}\n{n} trainers" + ("" if c == "base" else f" ({c})")
                                     for (a, n, c), _ in rows], rotation=30, ha="right", fontsize=7)
    if not rows:
        ax.text(0.5, 0.5, "no S-*/FR-* pairs in this run", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("eval NE vs FR-* (%)")
    ax.set_title("Eval NE of S-* vs FR-* (lower = better; target within +-0.5 %)", fontsize=9)
    return save(fig, run, out_dir, "shadowsync_ne", _caption(
        run, sums, band_description(most), how="drawn all the same: a device-timing violation changes "
        "time, not what the model learned"))


def _pause_ms(res: Resolution, idx: int) -> float:
    """The point's workload.shadow_pause_ms (hardware ms; 0 = syncs back to back)."""
    return float(res.get(idx, "workload.shadow_pause_ms", 0.0) or 0.0)


@figure("shadowsync_sync_gap")
def sync_gap(run: Run, out_dir: Path) -> list[Path]:
    """Average sync gap per series. x = trainers; x = the shadow's pause when the run's
    points differ in workload.shadow_pause_ms (one series per trainer count then), so
    that different pauses are never merged into one median as if they were repeats."""
    sums = _summaries(run)
    res = Resolution(run)
    cases = sorted({_case(run, i) for i in sums} - {"base"})
    gaps = {i: s for i, s in sums.items() if s.get("avg_sync_gap") is not None}
    by_pause = len({_pause_ms(res, i) for i in gaps}) > 1
    trainer_counts = sorted({s["trainers"] for s in gaps.values()})
    series: dict[tuple[str, str, str, int, int], dict[float, list[tuple[float, bool]]]] = \
        defaultdict(lambda: defaultdict(list))
    for idx, s in gaps.items():
        x, n = (_pause_ms(res, idx), s["trainers"]) if by_pause else (s["trainers"], 0)
        series[(s["algorithm"], s["mode"], _case(run, idx), s["embedding_servers"], n)][x].append(
            (s["avg_sync_gap"], _bad(run, idx, s)))
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    most = 0
    markers = ("o", "s", "^", "D")
    emb = sorted({k[3] for k in series})
    for (alg, mode, case, e, n), data in sorted(series.items()):
        label = ("S-" if mode == "shadow" else "FR-") + NAMES[alg] + (f", {e} emb PS" if len(emb) > 1 else "")
        label += f", {n} trainers" if by_pause and len(trainer_counts) > 1 else ""
        most = max(most, plot_repeats(ax, data, color=COLOURS[alg], ls=_style(mode, case, cases),
                                      marker=markers[emb.index(e) % len(markers)],
                                      label=label + ("" if case == "base" else f" ({case})")))
    if series:
        ax.legend(fontsize=7, handlelength=3.5)
    ax.set_ylabel("avg sync gap (worker iterations)")
    extra = band_description(most)
    if by_pause:
        pauses = sorted({_pause_ms(res, i) for i in gaps})
        ax.set_xticks(pauses, [f"{p:g}" for p in pauses])
        ax.set_xlabel("shadow's pause between two syncs (ms of modeled hardware)")
        ax.set_title("Sync gap vs the shadow's pause", fontsize=9)
        extra = (f"x = workload.shadow_pause_ms {'/'.join(f'{p:g}' for p in pauses)} ms of modeled hardware "
                 f"(slept x the TDF); {'/'.join(map(str, trainer_counts))} trainers; {extra}")
    else:
        ax.set_xticks(sorted({s["trainers"] for s in sums.values()}) or [1])
        ax.set_xlabel("trainers")
        ax.set_title("Sync gap: the shadow's staleness vs FR's fixed k x workers", fontsize=9)
    return save(fig, run, out_dir, "shadowsync_sync_gap", _caption(run, sums, extra))
