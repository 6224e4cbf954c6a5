"""PHub figures (scenarios/phub/): colour = system (PHub, wide-aggregation PS, ring,
in-switch, MXNet-kvstore-like sharded PS), line style = case; emulated points
filled (hollow when the fidelity monitor or the device model found them invalid, named in the caption), the
hardware projection of the same traces as a thin line with crosses (at the
point's own worker count, and at 16-64 workers on the workers figure).

  phub_iteration  hardware-equivalent time per iteration (emulated wall / the
                  point's TDF) against whatever the run swept: workers, model,
                  chunk size, or the cases (shared server, straggler)
  phub_stages     PHub server's time per iteration by pipeline stage (receive,
                  aggregate, optimize, send). Left: hardware time, the busiest
                  core's modeled work and its messages' time on the server's
                  port (workloads/phub.py hw_stages). Right: the emulator's own
                  Python time per stage (slowest core), for comparison
  phub_server     the server's aggregation GB/s per core beside a plain numpy
                  sum of the same bytes in the same process
Captions come from what ran (the summaries' worker counts, models, TDFs).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from testbed.plots import figure
from testbed.plots.captions import values_text
from testbed.plots.style import case_styles, color_of, plot_series, plt, save, scenario_cases
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.phub import FIGURES, PROJECTED_WORKERS

register_figure_names(*FIGURES)

LABELS = {"phub": "PHub (chunked, tall)", "wide_ps": "wide-aggregation PS", "ring": "ring allreduce",
          "switch": "in-switch", "sharded_ps": "sharded PS (MXNet kvstore)"}
SYSTEM = {"wide_ps": "ps"}          # the style's colour key
MODELS = ("resnet50", "inception_v3", "alexnet", "cnn")
STAGES = (("receive", "server_recv_s_per_iter_ms"), ("aggregate", "server_agg_s_per_iter_ms"),
          ("optimize", "server_opt_s_per_iter_ms"), ("send", "server_send_s_per_iter_ms"))
HW_STAGES = (("receive (port)", "server_hw_recv_us_per_iter"), ("aggregate", "server_hw_agg_us_per_iter"),
             ("optimize", "server_hw_opt_us_per_iter"), ("send (port)", "server_hw_send_us_per_iter"))
STAGE_COLOURS = ("#56b4e9", "#009e73", "#e69f00", "#cc79a7")


def colour(algo: str) -> str:
    return color_of(SYSTEM.get(algo, algo))


def summaries(run: Run) -> list[dict[str, Any]]:
    """Successful points' phub_summary, with case, invalid flag and reasons."""
    ok = {p["index"]: p for p in run.points if p.get("status") == "ok"}
    out = []
    for m in run.metrics_of("phub_summary"):
        p = ok.get(m.get("point"))
        if p is None:
            continue
        fid = p.get("fidelity") or {}
        bad = fid.get("valid") is False or m.get("valid") is False
        reasons = list(m.get("invalid_reasons") or fid.get("reasons") or []) if bad else []
        # the reason that made it invalid first (warnings come along in the list)
        reasons.sort(key=lambda r: "warning only" in r)
        out.append(dict(m, case=p.get("case") or "", invalid=bad, reasons=reasons))
    return out


def hw_ms(s: dict[str, Any]) -> float | None:
    return s["iter_ms"] / s["tdf"] if s.get("iter_ms") and s.get("tdf") else None


def x_axis(sums: list[dict[str, Any]]) -> tuple[str, Callable[[dict], Any], list[Any]]:
    """(label, x of a summary, categories or []) for what the run swept."""
    def distinct(key):
        return sorted({s[key] for s in sums if s.get(key) is not None}, key=str)
    if len(distinct("workers")) > 1:
        return "workers", lambda s: s["workers"], []
    if len(distinct("model")) > 1:
        cats = [m for m in MODELS if m in distinct("model")]
        return "model (layer profile)", lambda s: cats.index(s["model"]), cats
    if len({s["chunk_bytes"] for s in sums if s["algorithm"] == "phub"}) > 1:
        return "PHub chunk size (KiB)", lambda s: s["chunk_bytes"] / 1024, []
    cats = list(dict.fromkeys(s["case"] for s in sums))
    return "case", lambda s: cats.index(s["case"]), cats


def caption(sums: list[dict[str, Any]], extra: list[str] = (), lines_drawn: bool = True) -> list[str]:
    if not sums:
        return ["no successful points"]
    models = values_text(sorted({f"{s['model']} x{s['size_scale']:g}" if s["model"] != "cnn" else "cnn"
                                 for s in sums}))
    workers = values_text(sorted({s["workers"] for s in sums}))
    tdfs = values_text(sorted({s["tdf"] for s in sums}), lambda v: f"{v:g}")
    cal = "calibrated" if any(s.get("calibrated") for s in sums) else "fixed"
    dil = ("network dilated to the TDF" if all(s.get("network_dilated") for s in sums)
           else "network not dilated" if not any(s.get("network_dilated") for s in sums)
           else "network dilated on some points")
    agree = [s for s in sums if s.get("weights_agree") is False]
    lines = [f"model: {models}; workers that ran: {workers}; jobs: "
             f"{values_text(sorted({s['jobs'] for s in sums}))}; server cores: "
             f"{values_text(sorted({s['server_cores'] for s in sums}))}",
             f"TDF ({cal}) x{tdfs}; {dil}; time = emulated wall / TDF (hardware-equivalent)"
             + ("; thin lines with crosses: the traces projected on the hardware model" if lines_drawn else "")
             + (f"; {len(agree)} point(s) whose workers' weights disagree" if agree else
                "; every point's workers ended with identical weights"), *extra]
    bad = [s for s in sums if s["invalid"]]
    if bad:
        lines.append(f"INVALID (hollow): {len(bad)} of {len(sums)} point(s): " + "; ".join(
            f"{s['algorithm']}/{s['case'] or '-'} @{s['workers']}w: {(s['reasons'] or ['?'])[0][:120]}"
            for s in bad[:4]) + (" ..." if len(bad) > 4 else ""))
    return lines


@figure("phub_iteration")
def iteration(run: Run, out_dir: Path) -> list[Path]:
    sums = summaries(run)
    styles = case_styles(scenario_cases(run))
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    label, x, cats = x_axis(sums)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in sums:
        groups[(s["algorithm"], "" if label == "case" else s["case"])].append(s)
    for (algo, case), rs in sorted(groups.items()):
        rs.sort(key=x)
        name = LABELS.get(algo, algo) + (f" ({case})" if case not in ("", algo) else "")
        plot_series(ax, [x(r) for r in rs], [hw_ms(r) for r in rs], [r["invalid"] for r in rs],
                    color=colour(algo), ls=styles.get(case, "-"), label=name)
        px, py = [], []
        for r in rs:
            if r.get("projected_hw_iter_ms"):
                px.append(x(r))
                py.append(r["projected_hw_iter_ms"])
        if label == "workers" and rs:            # beyond the emulated counts: the last point's trace
            last = rs[-1]
            for n in PROJECTED_WORKERS:
                if last.get(f"projected_hw_iter_ms_{n}"):
                    px.append(n)
                    py.append(last[f"projected_hw_iter_ms_{n}"])
        if px:
            ax.plot(px, py, color=colour(algo), ls=styles.get(case, "-"), lw=0.8, marker="x", ms=5,
                    label=f"{name}, projected")
    if cats:
        ax.set_xticks(range(len(cats)), cats)
    else:                    # workers: 2-8 emulated, 16-64 projected; chunk sizes: 4 KiB - 1 MiB
        ax.set_xscale("log", base=2)
        if label == "workers":
            ticks = sorted({x(s) for s in sums} | ({*PROJECTED_WORKERS} if sums else set()))
            ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel(label)
    ax.set_ylabel("time per iteration (hardware ms)")
    ax.set_title("PHub vs wide aggregation, ring and in-switch", fontsize=9)
    if sums:
        ax.legend(fontsize=6.5, ncol=2)
    extra = []
    if label == "workers":
        extra.append(f"beyond the emulated counts, projected at {values_text(list(PROJECTED_WORKERS))} workers "
                     "from the largest emulated point's trace (PHub's server as a service model: one queue per "
                     "core, a chunk answered once every worker's copy is in)")
    return save(fig, run, out_dir, "phub_iteration", caption(sums, extra))


def _point_label(s: dict[str, Any]) -> str:
    racks = f", {s['racks']} racks" if s.get("racks", 1) > 1 else ""
    return f"{s['case'] or s['algorithm']}\n{s['model']}\n{s['workers']}w{racks} {s['chunk_bytes'] // 1024}K"


def _stacked(ax, sums: list[dict[str, Any]], stages, ylabel: str, title: str) -> None:
    bottom = np.zeros(len(sums))
    for (name, key), c in zip(stages, STAGE_COLOURS):
        v = np.array([s.get(key) or 0.0 for s in sums])
        ax.bar(range(len(sums)), v, bottom=bottom, color=c, label=name)
        bottom += v
    for i, s in enumerate(sums):
        if s["invalid"]:
            ax.bar(i, bottom[i], fill=False, edgecolor="#B00000", lw=1.5, ls="--")
    ax.set_xticks(range(len(sums)), [_point_label(s) for s in sums], fontsize=6.5)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    if sums:
        ax.legend(fontsize=7)


@figure("phub_stages")
def stages(run: Run, out_dir: Path) -> list[Path]:
    sums = [s for s in summaries(run) if s["algorithm"] == "phub" and s.get("server_agg_s_per_iter_ms") is not None]
    hw = [s for s in sums if s.get("server_hw_agg_us_per_iter") is not None]
    fig, (ax_hw, ax_emu) = plt.subplots(1, 2, figsize=(max(8.0, 2.0 + 1.6 * len(sums)), 4.4))
    _stacked(ax_hw, hw, HW_STAGES, "server time per iteration (hardware us,\nbusiest core)",
             "PHub server stages, hardware time")
    _stacked(ax_emu, sums, STAGES, "server time per iteration (emulator ms,\nslowest core)",
             "the same stages in the emulator (Python)")
    extra = ["left: hardware time per traced iteration of the busiest core: receive / send = its PUSH / UPDATE "
             "bytes' serialization on the server's port (network model), aggregate = 1 us per message + the "
             "pushed bytes at the profile's reduce_rate, optimize = the optimizer's bytes at that rate (the "
             "model the cores are paced by); right: the emulated server's own Python time per iteration "
             "(calibration iterations included; idle not drawn); red dashed outline = invalid point"]
    if len(hw) < len(sums):
        extra.append(f"{len(sums) - len(hw)} point(s) without a server trace have no hardware bar")
    return save(fig, run, out_dir, "phub_stages", caption(sums, extra, lines_drawn=False))


@figure("phub_server")
def server(run: Run, out_dir: Path) -> list[Path]:
    sums = [s for s in summaries(run) if s.get("server_agg_gbps_per_core")]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 + 0.9 * len(sums)), 4.2))
    i = np.arange(len(sums))
    ax.bar(i - 0.2, [s["server_agg_gbps_per_core"] for s in sums], width=0.4, color=colour("phub"),
           label="PHub core: chunked, rank-ordered sum (Python)")
    ax.bar(i + 0.2, [s.get("numpy_sum_gbps_per_core") or 0 for s in sums], width=0.4, color="#999999",
           label="numpy sum of the same bytes, same process")
    for k, s in enumerate(sums):        # an invalid point's pair: red dashed outline, as in phub_stages
        if s["invalid"]:
            top = max(s["server_agg_gbps_per_core"], s.get("numpy_sum_gbps_per_core") or 0)
            ax.bar(k, top, width=0.85, fill=False, edgecolor="#B00000", lw=1.5, ls="--",
                   label="invalid point" if not any(x["invalid"] for x in sums[:k]) else None)
    ax.set_yscale("log")
    ax.set_xticks(i, [_point_label(s) for s in sums], fontsize=6.5)
    ax.set_ylabel("aggregation GB/s per core\n(emulator, measured)")
    ax.set_title("Server aggregation throughput", fontsize=9)
    if sums:
        top = max([s["server_agg_gbps_per_core"] for s in sums] + [s.get("numpy_sum_gbps_per_core") or 0 for s in sums])
        ax.set_ylim(top=top * 12)           # room for the legend above the bars (log scale)
        ax.legend(fontsize=7, loc="upper left")
    return save(fig, run, out_dir, "phub_server", caption(sums, [
        "GB/s of gradient bytes summed per second of the core's aggregation stage (median over cores; with "
        "racks, over rack servers); the emulator's own speed: the paced cores and the projection use the "
        "modeled core (the profile's reduce_rate, 50 GB/s in tofino1-100g, and 1 us per message); "
        "red dashed outline = invalid point"],
        lines_drawn=False))
