"""LHC figures: one per scenario of scenarios/lhc/. Colour = algorithm (system),
line style = case; invalid points (fidelity monitor) hollow; captions from each
point's resolved parameters (gradient, workers, dilation) and the decode-error
total, which must be 0.

Times are hardware-equivalent: emulated wall-clock / the point's TDF (calibrated
per point, so emulated times of different points do not compare; the soft
switch dilates the network to the same TDF). Valid points (fidelity monitor)
are the ones whose network ran at that TDF.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from testbed.plots import figure
from testbed.plots.captions import Resolution, values_text
from testbed.plots.style import case_styles, color_of, plot_series, plt, save, scenario_cases
from testbed.results import Run
from testbed.scenario import register_figure_names
from testbed.workloads.lhc import FIGURES

register_figure_names(*FIGURES)

_SYSTEM = {"lhc_switch": "lhc", "lhc_switch_compact": "lhc_compact", "dense_switch": "switch", "dense_ring": "ring",
           "dense_ps": "ps"}
LABELS = {"lhc_switch": "LHC in-switch", "lhc_switch_compact": "LHC in-switch, compact (U's values)",
          "lhc_ring": "LHC over ring", "dense_switch": "dense in-switch",
          "dense_ring": "dense ring", "dense_ps": "dense PS", "topk_ring": "top-k (EF) allgather"}


def colour(algo: str) -> str:
    return color_of(_SYSTEM.get(algo, algo))


def _summaries(run: Run) -> list[dict[str, Any]]:
    ok = {p["index"]: p for p in run.points if p.get("status") == "ok"}
    out = []
    for m in run.metrics_of("lhc_summary"):
        p = ok.get(m.get("point"))
        if p is not None:
            fid = p.get("fidelity") or {}
            out.append(dict(m, case=p.get("case") or "", invalid=(fid.get("valid") is False
                                                                  or m.get("valid") is False)))
    return out


def _caption(run: Run, sums: list[dict[str, Any]]) -> list[str]:
    res = Resolution(run)
    idx = [s["point"] for s in sums]
    grads = _specs_text([res.get(i, "workload.gradient") for i in idx])
    workers = values_text(sorted({s["workers"] for s in sums}))
    tdfs = sorted({s["tdf"] for s in sums})
    # a calibrated sweep has a TDF per point: its range reads, a list of dozens does not
    tdf = values_text(tdfs, lambda v: f"{v:g}") if len(tdfs) <= 4 else f"{tdfs[0]:g}-{tdfs[-1]:g}"
    errors = sum(s["decode_errors"] for s in sums)
    checked = sum(s["checked_iterations"] for s in sums)
    bad = [s for s in sums if s["invalid"]]
    lines = [f"gradient: {grads}", f"workers: {workers}; TDF (GPU model and network) x{tdf}; "
             f"decode errors: {errors} in {checked} checked iterations (every sum compared exactly)"]
    if res.error:
        lines.append(res.error)
    if bad:
        lines.append(f"INVALID (hollow): {len(bad)} of {len(sums)} point(s) failed the fidelity monitor "
                     f"(e.g. network slowdown off the dilation): compare algorithms within the run only")
    return lines


def _specs_text(specs: list[Any]) -> str:
    """The points' gradient specs as one: each key with its values across the points
    ("kind synthetic, size 262144, density 0.001/0.01/0.1, ..."); non-mapping specs as text."""
    if not specs or not all(isinstance(g, dict) for g in specs):
        return "; ".join(sorted({str(g) for g in specs}))
    keys = list(dict.fromkeys(k for g in specs for k in g))
    parts = []
    for k in keys:
        vals = {v if not isinstance(v := g.get(k, "-"), (dict, list)) else str(v) for g in specs}
        numeric = all(isinstance(v, (int, float)) for v in vals)
        parts.append(f"{k} {'/'.join(f'{v:g}' if numeric else str(v) for v in sorted(vals, key=str if not numeric else float))}")
    return ", ".join(parts)


def _lines(ax, sums: list[dict[str, Any]], x: Callable[[dict], float], y: Callable[[dict], float | None],
           styles: dict[str, str]) -> None:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in sums:
        if y(s) is not None:
            groups[(s["algorithm"], s["case"])].append(s)
    for (algo, case), rs in sorted(groups.items()):
        rs.sort(key=x)
        label = LABELS.get(algo, algo) + (f" ({case})" if case not in ("", "base", "baseline") else "")
        plot_series(ax, [x(r) for r in rs], [y(r) for r in rs], [r["invalid"] for r in rs],
                    color=colour(algo), ls=styles.get(case, "-"), label=label)


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no successful points with {what}", ha="center", va="center", transform=ax.transAxes)


def _density(s: dict) -> float:
    g = s.get("gradient") or {}
    return float(g.get("density", s.get("workload.gradient.density", 0.0)))


@figure("lhc_throughput")
def throughput(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    styles = case_styles(scenario_cases(run))
    # The paper's metric first: the whole aggregate() call, encode and decode included
    # (its public demo times that); the network rounds alone beside it.
    fig, (a1, a0, a2) = plt.subplots(1, 3, figsize=(14.0, 4.4))
    sparsity = lambda s: 100.0 * (1.0 - _density(s))  # noqa: E731
    _lines(a1, sums, sparsity, lambda s: s.get("agg_gbps"), styles)
    _lines(a0, sums, sparsity, lambda s: s.get("agg_network_gbps"), styles)
    _lines(a2, sums, sparsity, lambda s: s.get("dense_over_sent"), styles)
    a1.set_ylabel("aggregation throughput, codec included\n(hardware Gbit/s of dense gradient)")
    a0.set_ylabel("aggregation throughput, network rounds only\n(hardware Gbit/s of dense gradient)")
    a2.set_ylabel("dense bytes / bytes sent per worker")
    for a in (a1, a0, a2):
        a.set_xlabel("gradient sparsity per worker (%)")
    if sums:
        a1.legend(fontsize=7)
    else:
        _empty(a1, "lhc_summary")
    a1.set_title("Aggregation throughput (the paper's metric)", fontsize=9)
    a0.set_title("Network rounds only (no codec)", fontsize=9)
    a2.set_title("Compression on the wire", fontsize=9)
    res = Resolution(run)
    codec = {"gpu": "the modeled V100's (hosts/lhc/timing.py), dilated by the TDF like the network",
             "cpu": "measured numpy time (TDF 1)"}
    devices = sorted({str(res.get(s["point"], "workload.device.type", "gpu")) for s in sums})
    return save(fig, run, out_dir, "lhc_throughput", _caption(run, sums) + [
        "Left, the headline (the paper's metric): aggregation throughput with the codec included, dense-gradient "
        "Gbit/s over the whole aggregation (support, encode, network rounds, decode; slowest worker; agg_gbps), "
        "as the paper's public demo times aggregate(); middle: the network rounds alone, no codec "
        "(agg_network_gbps). Units: Gbit/s of the dense gradient on hardware-equivalent time (emulated / the "
        "point's TDF). Codec time: " + "; ".join(codec.get(d, d) for d in devices) + "."])


@figure("lhc_decode")
def decode(run: Run, out_dir: Path) -> list[Path]:
    sums = [s for s in _summaries(run) if s.get("union")]
    styles = case_styles(scenario_cases(run))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    ratio = lambda s: (s["sketch_values"] or 0) / s["union"]  # noqa: E731
    _lines(a1, sums, ratio, lambda s: s.get("peeled_share"), styles)
    _lines(a2, sums, ratio, lambda s: 100.0 * (s["core_values"] or 0) / s["union"], styles)
    for a in (a1, a2):
        a.axvline(1.222, color="0.5", ls=":", lw=1)
        a.set_xlabel("sketch counters per union-support position")
    a1.set_ylabel("share of iterations plain peeling decoded alone")
    a2.set_ylabel("dense completion: extra values (% of |U|)")
    a1.set_title("Plain peeling success (k=3 threshold 1.22 dotted)", fontsize=9)
    a2.set_title("Lossless completion's extra bytes (sum exact at every size)", fontsize=9)
    if sums:
        a1.legend(fontsize=7)
    else:
        _empty(a1, "a sketch")
    return save(fig, run, out_dir, "lhc_decode", _caption(run, sums))


def _bars(run: Run, out_dir: Path, name: str, group: Callable[[dict], str], title: str,
          metric: str = "hw_iter_us",
          ylabel: str = "time per iteration\n(hardware-equivalent us, slowest worker, median)") -> list[Path]:
    sums = _summaries(run)
    groups = sorted({group(s) for s in sums})
    algos = sorted({s["algorithm"] for s in sums})
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(groups) + 3), 4.4))
    width = 0.8 / max(1, len(algos))
    for j, algo in enumerate(algos):
        for i, g in enumerate(groups):
            s = next((s for s in sums if s["algorithm"] == algo and group(s) == g), None)
            if s is None or s.get(metric) is None:
                continue
            ax.bar(i + j * width, s[metric], width, color=colour(algo), fill=not s["invalid"],
                   edgecolor=colour(algo), label=LABELS.get(algo, algo) if i == 0 else None)
    if sums:
        ax.set_xticks(np.arange(len(groups)) + width * (len(algos) - 1) / 2, groups)
        ax.legend(fontsize=7)
    else:
        _empty(ax, "lhc_summary")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    return save(fig, run, out_dir, name, _caption(run, sums))


@figure("lhc_iteration")
def iteration(run: Run, out_dir: Path) -> list[Path]:
    return _bars(run, out_dir, "lhc_iteration", lambda s: (s.get("gradient") or {}).get("model", "?"),
                 "Per-iteration time per model profile (hollow: invalid)")


@figure("lhc_straggler")
def straggler(run: Run, out_dir: Path) -> list[Path]:
    return _bars(run, out_dir, "lhc_straggler", lambda s: s["case"] or "base",
                 "One straggler: per-iteration time (hollow: invalid)")


@figure("lhc_loss")
def loss(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    styles = case_styles(scenario_cases(run))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    _lines(ax, sums, lambda s: float(s.get("links.loss_pct", 0.0)), lambda s: s.get("hw_agg_us"), styles)
    ax.set_xlabel("packet loss per link and direction (%)")
    ax.set_ylabel("aggregation time (hardware-equivalent us, median)")
    ax.set_title("Aggregation time under loss (every sum exact)", fontsize=9)
    if sums:
        ax.legend(fontsize=7)
    else:
        _empty(ax, "lhc_summary")
    return save(fig, run, out_dir, "lhc_loss", _caption(run, sums))


@figure("lhc_scaling")
def scaling(run: Run, out_dir: Path) -> list[Path]:
    sums = _summaries(run)
    styles = case_styles(scenario_cases(run))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    _lines(a1, sums, lambda s: s["workers"], lambda s: s.get("hw_agg_us"), styles)
    _lines(a2, sums, lambda s: s["workers"], lambda s: s.get("dense_over_sent"), styles)
    a1.set_ylabel("aggregation time (hardware-equivalent us, median)")
    a2.set_ylabel("dense bytes / bytes sent per worker")
    for a in (a1, a2):
        a.set_xlabel("workers")
    if sums:
        a1.legend(fontsize=7)
    else:
        _empty(a1, "lhc_summary")
    a1.set_title("Aggregation time vs workers", fontsize=9)
    a2.set_title("Compression shrinks as the union support grows", fontsize=9)
    return save(fig, run, out_dir, "lhc_scaling", _caption(run, sums))
