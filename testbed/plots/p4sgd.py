"""P4SGD figures: scaling, convergence, allreduce latency CDF, loss, stragglers, pipelining.

Every figure carries a caption saying what was emulated (device model and time
dilation, collective, how impairments were applied) above the testbed footer.
All times are emulated wall-clock seconds, dilated by the device's time_scale.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from testbed.plots import figure
from testbed.plots.style import emulation_footer, plt
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.p4sgd import FIGURES

register_figure_names(*FIGURES)


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


def _series_label(s: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    """Short label of a point's variant: case, mode, collective (minus `drop`)."""
    parts = []
    if s.get("case") not in (None, "base", "baseline") and "case" not in drop:
        parts.append(s["case"])
    if "mode" not in drop:
        parts.append("P4SGD (model-par.)" if s["mode"] == "model_parallel" else "data-parallel")
    if "collective" not in drop:
        parts.append(s["collective"])
    if "batch" not in drop:
        parts.append(f"B={s['batch']}")
    return ", ".join(parts)


def _loss_pct(m: dict[str, Any]) -> float:
    return float(m.get("links.loss_pct", 0.0) or 0.0)


def _caption(run: Run) -> str:
    """What was emulated: devices and dilation, collectives, impairment mechanisms."""
    sums = _summaries(run)
    devs = sorted({(s["device"], s["dilation"]) for s in sums})
    dev_txt = ", ".join(f"{d} model x{k:g} time dilation" if d != "cpu" else "measured CPU (no dilation)"
                        for d, k in devs) or "no successful points"
    colls = sorted({s["collective"] for s in sums})
    mechs = sorted({i.get("mechanism", "?") for p in run.points for i in (p.get("impairments") or [])
                    if i.get("applied")})
    times = "times are emulated wall-clock" + (", dilated" if any(s["times_dilated"] for s in sums) else "")
    imp = f"loss/delay via {', '.join(mechs)}" if mechs else "no link impairments"
    def span(xs):
        lo, hi = min(xs), max(xs)
        return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"
    slow = [s["network_slowdown_vs_hw"] for s in sums
            if s.get("network_slowdown_vs_hw") and s["mode"] == "model_parallel"]
    if slow:
        dev_txt += f"; emulated micro-batch allreduce p50 = {span(slow)}x a ~2 us hardware round trip [I]"
    slow_dp = [s["network_slowdown_vs_hw"] for s in sums
               if s.get("network_slowdown_vs_hw") and s["mode"] == "data_parallel"]
    if slow_dp:
        dev_txt += (f"; gradient allreduce p50 = {span(slow_dp)}x a 100 GbE line-rate estimate [A]")
    invalid = sum(1 for s in sums if not s.get("valid", True))
    warn = f"; WARNING: {invalid} point(s) with device timing violations" if invalid else ""
    return (f"Devices: {dev_txt}; collectives: {', '.join(colls) or '-'} "
            f"(switch = in-network SUM, ring/ps = host TCP); {imp}; {times}; {_setup(run, sums)}{warn}")


def _setup(run: Run, sums: list[dict[str, Any]]) -> str:
    """Workers and dataset of the successful points (the footer shows only the file's topology)."""
    workers = sorted({s["workers"] for s in sums})
    ds = (run.manifest.get("scenario", {}).get("workload") or {}).get("dataset") or {}
    sets = {}
    for p in run.points:
        v = (p.get("params") or {}).get("workload.dataset")
        if isinstance(v, dict):
            sets[repr(v)] = v
    dss = list(sets.values()) or [ds]
    def one(d):
        if d.get("source") == "synthetic":
            return (f"synthetic {d.get('kind', 'dense')} {d.get('samples', '?')} x {d.get('features', '?')}"
                    + (f" (density {d['density']:g})" if d.get("kind") == "sparse" and "density" in d else ""))
        return f"{d.get('source')} {d.get('name') or d.get('path', '')}"
    return (f"workers {', '.join(map(str, workers)) or '-'}; data {'; '.join(one(d) for d in dss)}")


def _save(fig: "plt.Figure", run: Run, out_dir: Path, name: str) -> list[Path]:
    w, h = fig.get_size_inches()
    cap = _caption(run)
    lines = 1 + len(cap) // max(40, int(w * 19))       # ~19 characters per inch at 6.5 pt
    line_h = 6.5 * 1.3 / 72 / h                         # one caption line, in figure fraction
    foot = 0.005 + line_h
    fig.text(0.01, foot + 0.004, cap, fontsize=6.5, color="0.15", ha="left", va="bottom", wrap=True)
    fig.text(0.01, 0.005, emulation_footer(run), fontsize=6.5, color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, foot + 0.01 + lines * line_h, 1, 1))
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


def _empty(ax, text: str = "no successful P4SGD points") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


# --------------------------------------------------------------------------- figures
@figure("p4sgd_scaling")
def scaling(run: Run, out_dir: Path) -> list[Path]:
    groups: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in _summaries(run):
        if s.get("throughput_sps"):
            groups[_series_label(s)][s["workers"]].append(s["throughput_sps"])
    fig, (ax_s, ax_t, ax_b) = plt.subplots(1, 3, figsize=(13.5, 4.2))
    if not groups:
        _empty(ax_s)
    _iteration_breakdown(run, ax_b)
    top = 1
    for label, by_w in sorted(groups.items()):
        ws = sorted(by_w)
        thr = np.array([np.mean(by_w[w]) for w in ws])
        speedup = thr / thr[0] * ws[0]  # relative to the smallest run, scaled to its worker count
        eff = speedup[-1] / ws[-1]
        ax_s.plot(ws, speedup, marker="o", label=f"{label} (eff. {eff:.0%} at {ws[-1]})")
        ax_t.plot(ws, thr, marker="o", label=label)
        top = max(top, ws[-1])
    ideal = np.arange(1, top + 1)
    ax_s.plot(ideal, ideal, "k--", lw=1, label="ideal (linear)")
    for ax in (ax_s, ax_t):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_s.set_xlabel("workers")
    ax_s.set_ylabel("speedup (throughput / 1-worker throughput)")
    ax_s.set_title("Speedup vs workers")
    ax_s.legend(fontsize=7)
    ax_t.set_xlabel("workers")
    ax_t.set_ylabel("training throughput (samples / emulated s)")
    ax_t.set_title("Throughput")
    ax_t.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_scaling")


def _iteration_breakdown(run: Run, ax) -> None:
    """Per worker count and variant: mean time per iteration split into modeled
    compute, exposed (waited-for) communication and the rest (host overhead, stalls)."""
    iters = _by_point(run, "p4sgd_iter")
    rows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for s in _summaries(run):
        rows[(_series_label(s, ("collective",)), s["workers"])].extend(iters.get(s["point"], []))
    if not rows:
        _empty(ax)
        return
    keys = sorted(rows, key=lambda k: (k[0], k[1]))
    parts = (("compute_s", "compute (modeled)"), ("comm_s", "exposed communication"),
             ("other_s", "host overhead + stall"))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    x = np.arange(len(keys))
    ms = np.array([[np.mean([r[key] + (r.get("stall_s", 0.0) if key == "other_s" else 0.0)
                             for r in rows[k]]) * 1e3 for k in keys] for key, _ in parts])
    total = ms.sum(0)
    bottom = np.zeros(len(keys))
    for j, (_, name) in enumerate(parts):
        share = ms[j] / np.where(total > 0, total, 1.0)
        ax.bar(x, share, 0.7, bottom=bottom, color=colors[(j + 2) % len(colors)], label=name,
               edgecolor="k", lw=0.3)
        bottom += share
    for xi, t in zip(x, total):
        ax.text(xi, 1.01, f"{t:.3g} ms", ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{k[0].split(',')[0]}\n{k[1]} w" for k in keys], fontsize=6.5)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of the mean iteration time (total on top)")
    ax.set_title("Where an iteration goes")
    ax.legend(fontsize=7, loc="lower left")


@figure("p4sgd_convergence")
def convergence(run: Run, out_dir: Path) -> list[Path]:
    curves = _by_point(run, "p4sgd_curve")
    sums = {s["point"]: s for s in _summaries(run)}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    if not sums:
        _empty(ax)
    target = None
    for idx, s in sorted(sums.items()):
        c = sorted(curves.get(idx, []), key=lambda r: r["snapshot"])
        if not c:
            continue
        tt = s.get("time_to_target_s")
        label = _series_label(s) + (f": target at {tt:.2f} s" if tt is not None else "")
        line, = ax.plot([r["t_s"] for r in c], [r["loss"] for r in c], marker=".", label=label)
        if tt is not None:
            ax.axvline(tt, color=line.get_color(), ls=":", lw=1)
        target = s.get("target_loss") or target
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target loss {target:g}")
    ax.set_xlabel("emulated wall-clock time (s)")
    ax.set_ylabel("training loss (offline, assembled model)")
    ax.set_title("Convergence: loss vs time")
    ax.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_convergence")


@figure("p4sgd_latency_cdf")
def latency_cdf(run: Run, out_dir: Path) -> list[Path]:
    iters = _by_point(run, "p4sgd_iter")
    sums = {s["point"]: s for s in _summaries(run)}
    fig, ax = plt.subplots()
    if not sums:
        _empty(ax)
    for idx, s in sorted(sums.items()):
        lat = np.sort([v for r in iters.get(idx, []) for v in r["allreduce_s"]]) * 1e3
        if lat.size:
            ax.step(lat, np.arange(1, lat.size + 1) / lat.size, where="post",
                    label=f"{_series_label(s, ('batch',))} (p50 {np.median(lat):.3g} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("allreduce latency per micro-batch (ms, emulated)")
    ax.set_ylabel("CDF")
    ax.set_title("Per-micro-batch allreduce latency")
    ax.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_latency_cdf")


@figure("p4sgd_loss")
def loss(run: Run, out_dir: Path) -> list[Path]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in _summaries(run):
        groups[_series_label(s, ("case",))].append(s)
    fig, (ax_i, ax_l) = plt.subplots(1, 2, figsize=(9.5, 4.0))
    if not groups:
        _empty(ax_i)
    for label, ss in sorted(groups.items()):
        ss = sorted(ss, key=_loss_pct)
        x = [_loss_pct(s) for s in ss]
        line, = ax_i.plot(x, [s["iter_ms_p50"] for s in ss], marker="o", label=f"{label} p50")
        ax_i.plot(x, [s["iter_ms_p99"] for s in ss], marker="^", ls="--", color=line.get_color(),
                  label=f"{label} p99")
        base = next((s["train_s"] for s in ss if _loss_pct(s) == 0 and s.get("train_s")), None)
        for s in ss:
            if base and s.get("train_s") and _loss_pct(s) > 0:
                ax_i.annotate(f"x{s['train_s'] / base:.1f} train time", (_loss_pct(s), s["iter_ms_p50"]),
                              textcoords="offset points", xytext=(-20, 7), fontsize=7,
                              color=line.get_color())
        digests = {s.get("model_digest") for s in ss}
        same = (f"final models identical\n(digest {next(iter(digests))})" if len(digests) == 1
                else f"{len(digests)} different final models")
        ax_l.plot(x, [s["final_loss"] for s in ss], marker="o", label=f"{label}:\n{same}")
    ax_i.set_yscale("log")
    ax_i.set_xlabel("packet loss per link direction (%)")
    ax_i.set_ylabel("iteration time (ms, emulated, log)")
    ax_i.set_title("Iteration time vs loss rate")
    ax_i.legend(fontsize=7)
    ax_l.set_xlabel("packet loss per link direction (%)")
    ax_l.set_ylabel("final training loss")
    ax_l.set_title("Training is exact under loss")
    ax_l.legend(fontsize=7, loc="upper right")
    return _save(fig, run, out_dir, "p4sgd_loss")


@figure("p4sgd_straggler")
def straggler(run: Run, out_dir: Path) -> list[Path]:
    iters = _by_point(run, "p4sgd_iter")
    sums = sorted(_summaries(run), key=lambda s: s["point"])
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(10, 4.2))
    if not sums:
        _empty(ax_b)
    # (a) per worker: where its iteration time goes (compute / waiting in the allreduce / stall).
    width = 0.8 / max(1, len(sums))
    parts = (("compute_s", "compute"), ("comm_s", "allreduce wait"), ("stall_s", "stall"),
             ("other_s", "host overhead"))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    hosts: list[str] = []
    for k, s in enumerate(sums):
        per_host: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        n_iter: dict[str, int] = defaultdict(int)
        for r in iters.get(s["point"], []):
            n_iter[r["host"]] += 1
            for key, _ in parts:
                per_host[r["host"]][key] += r[key]
        hs = sorted(per_host, key=lambda h: int(h[1:]) if h[1:].isdigit() else 0)
        hosts = hs if len(hs) > len(hosts) else hosts
        xs = np.arange(len(hs)) + k * width
        bottom = np.zeros(len(hs))
        for j, (key, name) in enumerate(parts):
            vals = np.array([per_host[h][key] / n_iter[h] * 1e3 for h in hs])
            ax_b.bar(xs, vals, width, bottom=bottom, color=colors[j % len(colors)],
                     alpha=1.0 - 0.5 * k / max(1, len(sums)), edgecolor="k", lw=0.3,
                     label=name if k == 0 else None)
            bottom += vals
        for x, h in zip(xs, hs):
            ax_b.text(x, 0, s.get("case", ""), rotation=90, fontsize=6, ha="center", va="bottom")
        # (b) timeline of rank 0's iteration time: a straggler stalls everyone.
        r0 = sorted((r for r in iters.get(s["point"], []) if r["rank"] == 0), key=lambda r: r["iter"])
        ax_t.plot([r["t_s"] for r in r0], [r["iter_s"] * 1e3 for r in r0], lw=1,
                  label=f"{s.get('case', '')} ({_series_label(s, ('case', 'batch'))})")
    ax_b.set_xticks(np.arange(len(hosts)) + width * (len(sums) - 1) / 2)
    ax_b.set_xticklabels(hosts)
    ax_b.set_ylabel("mean time per iteration (ms, emulated)")
    ax_b.set_title("Per worker: compute vs waiting (bars per case)")
    ax_b.legend(fontsize=7)
    ax_t.set_xlabel("emulated time (s)")
    ax_t.set_ylabel("iteration time of w1 (ms)")
    ax_t.set_title("Iteration time over time")
    ax_t.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_straggler")


@figure("p4sgd_pipeline")
def pipeline(run: Run, out_dir: Path) -> list[Path]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in _summaries(run):
        groups[_series_label(s, ("mode",))].append(s)
    fig, (ax_h, ax_i) = plt.subplots(1, 2, figsize=(9.5, 4.0))
    if not groups:
        _empty(ax_h)
    iters = _by_point(run, "p4sgd_iter")
    for label, ss in sorted(groups.items()):
        ss = sorted(ss, key=lambda s: s["pipeline_depth"])
        d = [s["pipeline_depth"] for s in ss]
        ax_h.plot(d, [s["hidden_share"] or 0.0 for s in ss], marker="o", label=f"{label}: 1 - exposed / total")
        # The same relative to the unpipelined run: exposed time removed vs depth 1.
        exposed = [np.mean([r["comm_s"] for r in iters.get(s["point"], [])] or [np.nan]) for s in ss]
        if ss[0]["pipeline_depth"] == 1 and exposed[0] > 0:
            ax_h.plot(d, [1.0 - e / exposed[0] for e in exposed], marker="s", ls="--",
                      label=f"{label}: 1 - exposed / exposed at depth 1")
        line, = ax_i.plot(d, [s["iter_ms_p50"] for s in ss], marker="o", label=f"{label}: iteration p50")
        ax_i.plot(d, [e * 1e3 for e in exposed], marker="s", ls="--", color=line.get_color(),
                  label=f"{label}: exposed communication (mean)")
    ax_h.set_ylim(-0.05, 1.05)
    for ax in (ax_h, ax_i):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_h.set_xlabel("pipeline depth (micro-batches in flight)")
    ax_h.set_ylabel("communication hidden = 1 - exposed / total")
    ax_h.set_title("Share of communication hidden by pipelining")
    ax_h.legend(fontsize=7)
    ax_i.set_xlabel("pipeline depth")
    ax_i.set_ylabel("ms per iteration (emulated)")
    ax_i.set_title("Iteration time and exposed communication")
    ax_i.legend(fontsize=7)
    return _save(fig, run, out_dir, "p4sgd_pipeline")
