"""Allreduce figures: goodput vs tensor size (with the analytical bounds), latency
CDF, latency vs loss. Colour = algorithm, line style = case (plus any other
swept value), hollow markers = points outside the fidelity band.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from testbed import wire
from testbed.plots import figure
from testbed.plots import style as st
from testbed.plots.captions import Resolution, invalid_note, invalid_reasons, run_mode_text, values_text
from testbed.plots.style import plt, save
from testbed.results import Run

# Host TCP (ring, ps) at the default 1500-byte MTU: 20 B IP + 20 B TCP + 12 B
# timestamp option per segment, so 1448 payload bytes per 1514-byte Ethernet frame.
TCP_MSS_PAYLOAD = 1448
TCP_FRAME = 1500 + 14
# The shapers (htb, and the soft switch's ingress shaper) charge the Ethernet frame
# from its header on, not the 20 B preamble + inter-frame gap and 4 B FCS a real
# wire also carries.
WIRE_EXTRA = 20 + 4


def payload_efficiency(algorithm: str, on_wire: bool = False) -> float:
    """Tensor bytes per link byte for full packets of the algorithm's transport."""
    extra = WIRE_EXTRA if on_wire else 0
    if algorithm == "switch":
        payload = 4 * wire.MAX_VALUES_PER_PACKET
        return payload / (wire.VALUES_OFFSET + payload + extra)
    return TCP_MSS_PAYLOAD / (TCP_FRAME + extra)


def goodput_bound_mbps(algorithm: str, link_mbps: float, workers: int, on_wire: bool = False) -> float:
    """Upper bound of tensor bytes / latency for one allreduce on N workers.

    ring: each link carries 2(N-1)/N of the tensor each way -> link x N/(2(N-1));
    switch: each link carries the tensor once each way -> link;
    ps: the server's link carries N tensors each way -> link / N.
    All less the per-packet header overhead of full packets.
    """
    eff = payload_efficiency(algorithm, on_wire)
    if algorithm == "ring":
        share = workers / (2 * (workers - 1)) if workers > 1 else float("inf")
    elif algorithm == "ps":
        share = 1 / workers
    elif algorithm == "switch":
        share = 1.0
    else:
        raise ValueError(f"no goodput bound for algorithm {algorithm!r}")
    return link_mbps * share * eff


# --------------------------------------------------------------------------- data
def _variant(run: Run) -> dict[int, str]:
    """Point index -> case and swept values other than the algorithm, e.g. 'loss, loss_pct=5'."""
    out = {}
    for p in run.points:
        extra = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted((p.get("params") or {}).items())
                 if k not in ("workload.algorithm", "repeat")]
        out[p["index"]] = ", ".join([p.get("case") or "base"] + extra)
    return out


def _measurements(run: Run) -> dict[tuple[str, str], dict[int, dict[int, list[float]]]]:
    """(algorithm, variant) -> size -> point index (one repeat) -> latencies (s), warmup excluded."""
    out: dict[tuple[str, str], dict[int, dict[int, list[float]]]] = \
        defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    ok_points = {p["index"] for p in run.points if p.get("status") == "ok"}
    variant = _variant(run)
    for m in run.metrics_of("allreduce"):
        if m.get("warmup") or m.get("point") not in ok_points:
            continue
        v = variant.get(m["point"], m.get("case", "base"))
        if m.get("job", 1) != 1:
            v += f", job {m['job']}"
        out[(m["algorithm"], v)][m["size"]][m["point"]].append(m["latency_s"])
    return out


def _invalid(run: Run) -> dict[int, list[str]]:
    out = {}
    for p in run.points:
        r = invalid_reasons(run, p["index"])
        if r is not None:
            out[p["index"]] = r
    return out


def _styles(run: Run, variants) -> dict[str, str]:
    """Line style per variant, cases in the scenario's order first."""
    order = {c: i for i, c in enumerate(st.scenario_cases(run))}
    return st.case_styles(sorted(set(variants), key=lambda v: (order.get(v.split(",")[0], 99), v)))


def _legend(ax, algorithms, styles: dict[str, str], extra: list | None = None,
            names: dict[str, str] | None = None, **kw) -> None:
    """Colours name the algorithms, grey line styles the cases: 3 + 3 entries, not 3 x 3."""
    handles = [st.legend_handle(st.color_of(a), label=(names or {}).get(a, st.label_of(a))) for a in algorithms]
    if len(styles) > 1:
        handles += [st.legend_handle("0.35", ls, label=v) for v, ls in styles.items()]
    handles += extra or []
    ax.legend(handles=handles, fontsize=7, **kw)


def _link_of_point(run: Run, res: Resolution, index: int) -> float | None:
    """The bandwidth the links were shaped to (Mbit/s), or None when unshaped (local mode).

    Taken from the impairments the network applied (what ran); a run that recorded
    none falls back to the resolved `links.bandwidth_mbps`."""
    p = run.point(index) or {}
    imps = p.get("impairments")
    if imps:
        vals = [float(i["value"]) for i in imps if i.get("parameter") == "bandwidth_mbps" and i.get("applied")]
        return min(vals) if vals else None
    if run.manifest.get("net") == "local":
        return None
    bw = res.get(index, "links.bandwidth_mbps")
    return float(bw) if bw else None


def _group_size(res: Resolution, index: int) -> int:
    workers = int(res.get(index, "topology.workers", 0) or 0)
    jobs = int(res.get(index, "workload.jobs", 1) or 1)
    return max(1, workers // jobs)


# --------------------------------------------------------------------------- figures
@figure("goodput_vs_size")
def goodput_vs_size(run: Run, out_dir: Path) -> list[Path]:
    meas = _measurements(run)
    res = Resolution(run)
    invalid = _invalid(run)
    sizes_bytes = {m["size"]: m["bytes"] for m in run.metrics_of("allreduce")}
    styles = _styles(run, [v for _, v in meas])
    algorithms = _algorithm_order({a for a, _ in meas})
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    most = 0
    for (alg, v), by_size in sorted(meas.items()):
        # Per repeat: goodput = tensor bytes / median latency of its operations.
        data = {sizes_bytes[s]: [(sizes_bytes[s] * 8 / np.median(lat) / 1e6, idx in invalid)
                                 for idx, lat in reps.items()] for s, reps in by_size.items()}
        most = max(most, st.plot_repeats(ax, data, color=st.color_of(alg), ls=styles[v]))
    # Bounds: one per algorithm and distinct (link rate, workers) among its points.
    bounds: dict[tuple[str, float, int], float] = {}
    unshaped = False
    for (alg, _), by_size in meas.items():
        for idx in {i for reps in by_size.values() for i in reps}:
            link = _link_of_point(run, res, idx)
            if link is None:
                unshaped = True
                continue
            n = _group_size(res, idx)
            if alg in ("ring", "ps", "switch") and not (alg == "ring" and n < 2):
                bounds[(alg, link, n)] = goodput_bound_mbps(alg, link, n)
    for (alg, link, n), y in sorted(bounds.items()):
        st.bound_line(ax, y, color=st.color_of(alg), label=None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (bytes)")
    ax.set_ylabel("goodput (Mbit/s) = tensor bytes / latency")
    workers = values_text(sorted({_group_size(res, i) for i in res.by_point}))
    ax.set_title(f"Allreduce goodput vs tensor size, {workers} workers")
    extra = []
    if bounds:
        extra.append(st.legend_handle("0.35", (0, (6, 2, 1, 2)), label="analytical bound"))
    if invalid:
        extra.append(st.legend_handle("0.35", "none", marker="o", hollow_=True, label="invalid point"))
    names = {a: st.label_of(a) + "".join(f", bound {y:.3g}" for (b, _, _), y in sorted(bounds.items()) if b == a)
             for a in algorithms}
    _legend(ax, algorithms, styles, extra, names=names, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    caption = [
        _bound_caption(bounds, unshaped),
        f"Goodput per repeat from the median latency of its operations; {st.band_description(most)}.",
        _what_ran(run, res),
        invalid_note(invalid, len(run.points)),
        run_mode_text(run),
    ]
    return save(fig, run, out_dir, "goodput_vs_size", caption)


def _bound_caption(bounds: dict[tuple[str, float, int], float], unshaped: bool) -> str:
    if not bounds:
        return ("No bandwidth bound drawn: the links were not shaped (local mode)." if unshaped
                else "")
    rules = {"ring": "link x N/(2(N-1))", "switch": "link", "ps": "link / N"}
    parts = [f"{st.label_of(a)} <= {rules[a]} = {y:.3g}" for (a, _, _), y in sorted(bounds.items())]
    links = values_text(f"{link:g} Mbit/s, N={n}" for (_, link, n) in sorted(bounds))
    return (f"Bounds (thin lines, Mbit/s; link {links}): " + "; ".join(parts) + "; each less the header "
            f"overhead of full packets as the link shapers count it (TCP 1448 B per 1514 B frame, in-switch "
            f"{4 * wire.MAX_VALUES_PER_PACKET} B per {wire.MAX_FRAME_LEN} B; a real wire adds 24 B per frame).")


def _what_ran(run: Run, res: Resolution) -> str:
    idx = [p["index"] for p in run.points if p.get("status") == "ok"] or list(res.by_point)
    sizes = values_text(sorted({s for i in idx for s in res.get(i, "workload.sizes", []) or []}))
    iters = values_text(res.get(i, "workload.iterations") for i in idx)
    warm = values_text(res.get(i, "workload.warmup") for i in idx)
    txt = f"Ran: sizes {sizes} float32 values; {iters} measured operations per size after {warm} warmup"
    return txt + (f"; {res.error}" if res.error else "") + "."


@figure("latency_cdf")
def latency_cdf(run: Run, out_dir: Path) -> list[Path]:
    meas = _measurements(run)
    res = Resolution(run)
    invalid = _invalid(run)
    sizes = sorted({s for by in meas.values() for s in by})
    if not sizes:
        fig, ax = plt.subplots()
        ax.text(0.5, 0.5, "no successful allreduce measurements", ha="center", transform=ax.transAxes)
        return save(fig, run, out_dir, "latency_cdf", [invalid_note(invalid, len(run.points))])
    styles = _styles(run, [v for _, v in meas])
    algorithms = _algorithm_order({a for a, _ in meas})
    # The smallest tensor shows the latency-bound regime, the largest the bandwidth-bound one.
    panels = [sizes[0]] if len(sizes) == 1 else [sizes[0], sizes[-1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False)
    for ax, size in zip(axes[0], panels):
        for (alg, v), by_size in sorted(meas.items()):
            reps = by_size.get(size, {})
            good = np.sort([x for i, lat in reps.items() if i not in invalid for x in lat]) * 1e3
            bad = np.sort([x for i, lat in reps.items() if i in invalid for x in lat]) * 1e3
            for lat, faded in ((good, False), (bad, True)):
                if lat.size:
                    ax.step(lat, np.arange(1, lat.size + 1) / lat.size, where="post", color=st.color_of(alg),
                            ls=styles[v], lw=0.8 if faded else 1.5, alpha=0.4 if faded else 1.0)
        ax.set_xscale("log")
        st.plain_log_ticks(ax)
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("CDF (operations of all repeats)")
        ax.set_title(f"{size} float32 values")
    extra = [st.legend_handle("0.35", "-", label="invalid points (faded)")] if invalid else []
    _legend(axes[0][0], algorithms, styles, extra, loc="lower right")
    shown = (f"Panels: the smallest and the largest of the {len(sizes)} sizes that ran "
             f"({', '.join(map(str, sizes))} values); goodput_vs_size has them all."
             if len(sizes) > len(panels) else "")
    return save(fig, run, out_dir, "latency_cdf",
                [_what_ran(run, res), shown,
                 invalid_note(invalid, len(run.points), "faded, left out of the solid CDFs"),
                 run_mode_text(run)])


def _algorithm_order(algs) -> list[str]:
    known = list(st.SYSTEM_COLORS)
    return sorted(algs, key=lambda a: (known.index(a) if a in known else len(known), a))


@figure("latency_vs_loss")
def latency_vs_loss(run: Run, out_dir: Path) -> list[Path]:
    """Median and p99 latency against the configured loss rate, per algorithm and size."""
    res = Resolution(run)
    invalid = _invalid(run)
    loss_of = {p["index"]: _point_loss(res, p) for p in run.points if p.get("status") == "ok"}
    rows: dict[tuple[str, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in run.metrics_of("allreduce"):
        if m.get("warmup") or m.get("point") not in loss_of:
            continue
        rows[(m["algorithm"], m["size"])][m["point"]].append(m["latency_s"])
    sizes = sorted({s for _, s in rows})
    markers = dict(zip(sizes, "os^Dv<>p"))
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    for (alg, size), by_point in sorted(rows.items()):
        for q, ls in ((50, "-"), (99, ":")):
            data: dict[float, list[tuple[float, bool]]] = defaultdict(list)
            for idx, lat in by_point.items():
                data[loss_of[idx]].append((np.percentile(lat, q) * 1e3, idx in invalid))
            st.plot_repeats(ax, data, color=st.color_of(alg), ls=ls, marker=markers.get(size, "o"))
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_yscale("log")
    ax.set_xlabel("configured loss per link direction (%)")
    ax.set_ylabel("allreduce latency (ms)")
    ax.set_title("Allreduce latency vs packet loss (every result checked exact)")
    handles = [st.legend_handle(st.color_of(a), label=st.label_of(a)) for a in _algorithm_order({a for a, _ in rows})]
    handles += [st.legend_handle("0.35", "-", label="p50"), st.legend_handle("0.35", ":", label="p99")]
    handles += [st.legend_handle("0.35", "none", marker=markers[s], label=f"{s} values") for s in sizes]
    if invalid:
        handles.append(st.legend_handle("0.35", "none", marker="o", hollow_=True, label="invalid point"))
    ax.legend(handles=handles, fontsize=6.5, ncol=2)
    return save(fig, run, out_dir, "latency_vs_loss",
                [_what_ran(run, res), invalid_note(invalid, len(run.points)), run_mode_text(run)])


def _point_loss(res: Resolution, point: dict[str, Any]) -> float:
    """The loss rate the point's links were configured with (grid, case set or file)."""
    params = point.get("params") or {}
    if "links.loss_pct" in params:
        return float(params["links.loss_pct"])
    applied = [i["value"] for i in point.get("impairments") or []
               if i.get("parameter") == "loss_pct" and i.get("applied")]
    return float(max(applied)) if applied else float(res.get(point["index"], "links.loss_pct", 0.0) or 0.0)
