"""Allreduce figures: goodput vs tensor size, latency CDF (ring, PS, in-switch)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from testbed.plots import figure
from testbed.plots.style import plt, save
from testbed.results import Run


def _series(run: Run) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(algorithm, case) -> size -> latencies in seconds (warmup excluded)."""
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    ok_points = {p["index"] for p in run.points if p.get("status") == "ok"}
    for m in run.metrics_of("allreduce"):
        if m.get("warmup") or m.get("point") not in ok_points:
            continue
        out[(m["algorithm"], m.get("case", "base"))][m["size"]].append(m["latency_s"])
    return out


def _label(alg: str, case: str) -> str:
    return alg if case in ("base", "baseline") else f"{alg} ({case})"


@figure("goodput_vs_size")
def goodput_vs_size(run: Run, out_dir: Path) -> list[Path]:
    series = _series(run)
    sizes_bytes = {m["size"]: m["bytes"] for m in run.metrics_of("allreduce")}
    fig, ax = plt.subplots()
    for (alg, case), by_size in sorted(series.items()):
        xs = sorted(by_size)
        # Median latency per size; goodput = tensor bytes / latency (algorithm bandwidth).
        ys = [sizes_bytes[s] * 8 / np.median(by_size[s]) / 1e6 for s in xs]
        ax.plot([sizes_bytes[s] for s in xs], ys, marker="o", label=_label(alg, case))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (bytes)")
    ax.set_ylabel("goodput (Mbit/s, bytes / median latency)")
    ax.set_title(f"Allreduce goodput vs tensor size, {run.manifest['scenario']['topology']['workers']} workers")
    ax.legend(fontsize=8)
    return save(fig, run, out_dir, "goodput_vs_size")


@figure("latency_cdf")
def latency_cdf(run: Run, out_dir: Path) -> list[Path]:
    series = _series(run)
    sizes = sorted({s for by in series.values() for s in by})
    if not sizes:
        fig, ax = plt.subplots()
        ax.text(0.5, 0.5, "no successful allreduce measurements", ha="center", transform=ax.transAxes)
        return save(fig, run, out_dir, "latency_cdf")
    # The smallest tensor shows the latency-bound regime, the largest the bandwidth-bound one.
    panels = [sizes[0]] if len(sizes) == 1 else [sizes[0], sizes[-1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, size in zip(axes[0], panels):
        for (alg, case), by_size in sorted(series.items()):
            lat = np.sort(np.asarray(by_size.get(size, []))) * 1e3
            if lat.size:
                ax.step(lat, np.arange(1, lat.size + 1) / lat.size, where="post", label=_label(alg, case))
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("CDF")
        ax.set_title(f"{size} float32 values")
        ax.legend(fontsize=7)
    return save(fig, run, out_dir, "latency_cdf")
