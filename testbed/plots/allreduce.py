"""Allreduce figures: goodput vs tensor size, latency CDF (ring, PS, in-switch)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from testbed.plots import figure
from testbed.plots.style import plt, save
from testbed.results import Run


def _variant(run: Run) -> dict[int, str]:
    """Point index -> its swept values other than the algorithm, e.g. 'loss_pct=5'."""
    out = {}
    for p in run.points:
        extra = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted((p.get("params") or {}).items())
                 if k != "workload.algorithm"]
        out[p["index"]] = ", ".join(extra)
    return out


def _series(run: Run) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(algorithm, variant) -> size -> latencies in seconds (warmup excluded).

    The variant names the case and any swept parameter besides the algorithm,
    so a loss sweep draws one line per loss rate.
    """
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    ok_points = {p["index"] for p in run.points if p.get("status") == "ok"}
    variant = _variant(run)
    for m in run.metrics_of("allreduce"):
        if m.get("warmup") or m.get("point") not in ok_points:
            continue
        case = m.get("case", "base")
        label = ", ".join(x for x in ((case if case not in ("base", "baseline") else ""),
                                      variant.get(m["point"], ""),
                                      (f"job {m['job']}" if m.get("job", 1) != 1 else "")) if x)
        out[(m["algorithm"], label)][m["size"]].append(m["latency_s"])
    return out


def _label(alg: str, variant: str) -> str:
    return f"{alg} ({variant})" if variant else alg


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


@figure("latency_vs_loss")
def latency_vs_loss(run: Run, out_dir: Path) -> list[Path]:
    """Median and p99 latency against the configured loss rate, per algorithm and size."""
    loss_of = {p["index"]: _point_loss(run, p) for p in run.points if p.get("status") == "ok"}
    rows: dict[tuple[str, int], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in run.metrics_of("allreduce"):
        loss = loss_of.get(m.get("point"))
        if m.get("warmup") or loss is None:
            continue
        rows[(m["algorithm"], m["size"])][loss].append(m["latency_s"])
    fig, ax = plt.subplots()
    for (alg, size), by_loss in sorted(rows.items()):
        xs = sorted(by_loss)
        (line,) = ax.plot(xs, [np.median(by_loss[x]) * 1e3 for x in xs], marker="o",
                          label=f"{alg}, {size} values p50")
        ax.plot(xs, [np.percentile(by_loss[x], 99) * 1e3 for x in xs], ls="--", alpha=0.6,
                color=line.get_color(), label=f"{alg}, {size} values p99")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_yscale("log")
    ax.set_xlabel("configured loss per link direction (%)")
    ax.set_ylabel("allreduce latency (ms)")
    ax.set_title("Allreduce latency vs packet loss (every result checked exact)")
    ax.legend(fontsize=6, ncol=2)
    return save(fig, run, out_dir, "latency_vs_loss")


def _point_loss(run: Run, point: dict) -> float:
    params = point.get("params") or {}
    if "links.loss_pct" in params:
        return float(params["links.loss_pct"])
    applied = [i["value"] for i in point.get("impairments") or []
               if i.get("parameter") == "loss_pct" and i.get("applied")]
    return float(max(applied)) if applied else float(run.manifest["scenario"]["links"].get("loss_pct", 0.0))
