"""Shared look of every figure: one colour per system, one line style per case,
hollow markers for invalid points, repeat bands, and the caption + footer block.

A reader should be able to tell, at a glance and across figures, which system
a line is (its colour never changes: ring is always the same orange) and which
case (solid = the first case of the scenario, dashed the second, ...).
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # no display on these machines
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from testbed.results import Run  # noqa: E402

plt.rcParams.update({
    "figure.figsize": (6.0, 4.0), "figure.dpi": 120, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "font.size": 10,
    # A framed, nearly opaque legend: without a frame its sample markers (a hollow
    # "invalid" marker above all) read as one more data point where it sits over the axes.
    "legend.frameon": True, "legend.framealpha": 0.9, "legend.edgecolor": "0.8",
    "legend.fancybox": False,
})

# One fixed colour per system / algorithm (colour-blind-safe Okabe-Ito palette).
SYSTEM_COLORS = {
    "switch": "#0072b2",      # in-switch aggregation (blue)
    "ring": "#e69f00",        # host ring allreduce (orange)
    "ps": "#cc79a7",          # parameter server (purple)
    "p4sgd": "#0072b2",       # P4SGD = model parallel over the in-switch collective
    "dp": "#d55e00",          # data-parallel baseline (vermillion)
    "lhc": "#009e73",
    "lhc_compact": "#7fd4b4",   # LHC with U's values listed instead of the sketch (lighter green)
    "easgd": "#56b4e9",
    "shadowsync": "#f0e442",
    "phub": "#000000",
    # PHub's MXNet-kvstore-like sharded PS (vermillion: dp's, which never shares a figure with it)
    "sharded_ps": "#d55e00",
    "gloo": "#7f7f7f",        # PyTorch's own gloo allreduce (torch figures)
    # The EASGD family: one colour per variant, its SGD counterpart lighter.
    "easgd_original": "#333333", "async_easgd": "#0072b2", "async_sgd": "#56b4e9",
    "async_measgd": "#d55e00", "async_msgd": "#e69f00", "hogwild_easgd": "#009e73",
    "hogwild_sgd": "#7fd4b4", "sync_easgd": "#cc79a7", "sync_sgd": "#e8b6d3",
}
_ALIASES = {"in-switch": "switch", "ina": "switch", "model_parallel": "p4sgd", "data_parallel": "dp",
            "parameter_server": "ps"}
_EXTRA = ["#7f7f7f", "#8c564b", "#17becf", "#bcbd22"]
SYSTEM_LABELS = {"switch": "in-switch", "ring": "ring", "ps": "param. server", "p4sgd": "P4SGD",
                 "dp": "data-parallel"}

# The three numbers of a reproduction's headline (testbed.plots.reproduce).
ROLE_COLORS = {"paper": "#000000", "projected": "#0072b2", "emulated": "#d55e00"}

LINESTYLES = ["-", "--", ":", "-."]
# Parts of an iteration (bars): fixed too, and distinct from the system colours.
PART_COLORS = {"compute": "#999999", "comm": "#56b4e9", "stall": "#f0e442", "other": "#dddddd"}


def system_key(name: str) -> str:
    return _ALIASES.get(name, name)


def color_of(system: str) -> str:
    key = system_key(system)
    if key in SYSTEM_COLORS:
        return SYSTEM_COLORS[key]
    # An unknown system still gets the same colour every time (stable in the name).
    return _EXTRA[sum(map(ord, key)) % len(_EXTRA)]


def label_of(system: str) -> str:
    key = system_key(system)
    return SYSTEM_LABELS.get(key, key)


def case_styles(cases: Iterable[str]) -> dict[str, str]:
    """Line style per case, in the given (scenario) order: solid, dashed, dotted, dash-dot."""
    out: dict[str, str] = {}
    for c in cases:
        if c not in out:
            out[c] = LINESTYLES[len(out) % len(LINESTYLES)]
    return out


def scenario_cases(run: Run) -> list[str]:
    """Case names in the scenario's order (points' order when the scenario has none)."""
    names = [c["name"] for c in (run.manifest.get("scenario", {}).get("sweep") or {}).get("cases") or []]
    for p in run.manifest.get("points") or run.points:
        if p.get("case") and p["case"] not in names:
            names.append(p["case"])
    return names


# --------------------------------------------------------------------------- drawing
def plot_series(ax, xs: Sequence[float], ys: Sequence[float], invalid: Sequence[bool], *, color: str,
                ls: str = "-", label: str | None = None, marker: str = "o", lw: float = 1.6) -> None:
    """A line through the valid points (filled markers); invalid points hollow, unjoined."""
    xs, ys, bad = np.asarray(xs, float), np.asarray(ys, float), np.asarray(invalid, bool)
    if (~bad).any():
        ax.plot(xs[~bad], ys[~bad], color=color, ls=ls, marker=marker, ms=4.5, lw=lw, label=label)
        label = None
    if bad.any():
        hollow(ax, xs[bad], ys[bad], color=color, marker=marker,
               label=(label + " (invalid)") if label else None)


def hollow(ax, xs, ys, *, color: str, marker: str = "o", label: str | None = None) -> None:
    ax.plot(xs, ys, ls="none", marker=marker, markerfacecolor="none", markeredgecolor=color,
            markeredgewidth=1.3, ms=9, label=label)


def band_stats(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, lo, hi) of repeats: a distribution-free 95 % CI of the median
    (order statistics) when it exists, else (fewer than 6 repeats) min-max."""
    v = np.sort(np.asarray(values, float))
    n = v.size
    med = float(np.median(v))
    if n < 6:
        return med, float(v[0]), float(v[-1])
    # Largest k with P(Binom(n, 1/2) < k) <= 2.5 %: [v_k, v_{n-k+1}] covers the median >= 95 %.
    cdf, k = 0.0, 0
    while True:
        p = math.comb(n, k) / 2 ** n
        if cdf + p > 0.025:
            break
        cdf += p
        k += 1
    k = max(k, 1)
    return med, float(v[k - 1]), float(v[n - k])


def band_description(max_repeats: int) -> str:
    """What a figure's lines and bands are, from the most valid repeats at one x."""
    if max_repeats == 0:
        return "no valid repeat: no line or band, every repeat a hollow marker"
    if max_repeats == 1:
        return "1 repeat per point (no band)"
    if max_repeats < 6:
        return f"{max_repeats} repeats: line = median, band = min-max"
    return f"{max_repeats} repeats: line = median, band = 95 % CI of the median (order statistics)"


def plot_repeats(ax, data: dict[float, list[tuple[float, bool]]], *, color: str, ls: str = "-",
                 label: str | None = None, marker: str = "o") -> int:
    """x -> [(value of one repeat, invalid?)]: median line and band over the valid
    repeats; every invalid repeat a hollow marker, in no line or band. Returns the
    largest number of valid repeats at one x (for the band's description)."""
    xs = sorted(data)
    good = [(x, [v for v, bad in data[x] if not bad]) for x in xs]
    good = [(x, vs) for x, vs in good if vs]
    stats = [band_stats(vs) for _, vs in good]
    if good:
        ax.plot([x for x, _ in good], [s[0] for s in stats], color=color, ls=ls, marker=marker,
                ms=4.5, lw=1.6, label=label)
        banded = [(x, s) for (x, vs), s in zip(good, stats) if len(vs) > 1]
        if banded:
            ax.fill_between([x for x, _ in banded], [s[1] for _, s in banded], [s[2] for _, s in banded],
                            color=color, alpha=0.18, lw=0)
    bad = [(x, v) for x in xs for v, b in data[x] if b]
    if bad:
        # A series with no valid repeat is named by its hollow markers, or the legend would lack it.
        hollow(ax, [x for x, _ in bad], [v for _, v in bad], color=color, marker=marker,
               label=None if good or label is None else f"{label} (invalid only)")
    return max((len(vs) for _, vs in good), default=0)


def plain_log_ticks(ax) -> None:
    """Plain numbers on a log x axis (200, not 2x10^2). On an axis spanning less
    than a decade only the 2 and 5 minor ticks are labeled: matplotlib's default
    labels more of them there, and they ran into each other (300 and 400)."""
    from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: PLC0415
    lo, hi = ax.get_xlim()
    narrow = lo > 0 and hi / lo < 10
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0) if narrow else (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: f"{x:g}" if narrow else ""))


def bound_line(ax, y: float, *, color: str, label: str) -> None:
    """An analytical upper bound: thin line in the system's colour."""
    ax.axhline(y, color=color, lw=0.9, ls=(0, (6, 2, 1, 2)), alpha=0.9, label=label)


def legend_handle(color: str = "0.3", ls: str = "-", marker: str | None = None, hollow_: bool = False,
                  label: str = "") -> Line2D:
    return Line2D([], [], color=color, ls=ls, marker=marker,
                  markerfacecolor="none" if hollow_ else color, label=label)


def note(ax, text: str, *, warn: bool = True) -> None:
    """A short note inside the axes (top left), e.g. a disagreement or an invalid point."""
    ax.text(0.01, 0.99, text, transform=ax.transAxes, ha="left", va="top", fontsize=7,
            color="#b00000" if warn else "0.2",
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "#b00000" if warn else "0.6", "lw": 0.6})


# --------------------------------------------------------------------------- caption + footer
def emulation_footer(run: Run) -> str:
    """One line saying how the numbers were produced, printed under each figure."""
    m = run.manifest
    scn = m.get("scenario", {})
    topo = scn.get("topology", {})
    mechs = sorted({i.get("mechanism", "?") for p in run.points for i in (p.get("impairments") or [])
                    if i.get("applied")})
    parts = [
        f"net={m.get('net', '?')}",
        f"switch={scn.get('switch', {}).get('backend', '?')}",
        f"{_workers(run, topo)} workers ({topo.get('kind', '?')})",
        f"impairments via {', '.join(mechs)}" if mechs else "no impairments",
        f"{m.get('machine', {}).get('cpus', '?')} shared cores",
        f"git {str(m.get('git', {}).get('commit') or '?')[:8]}",
    ]
    return "Emulated: " + "; ".join(parts)


def _workers(run: Run, topo: dict) -> str:
    """Worker count, or the counts a sweep ran ('1/2/4/8'): each point's own, resolved
    as it ran (grid, case, --quick set, overrides: testbed.plots.captions), not the file's."""
    from testbed.plots.captions import Resolution  # noqa: PLC0415 - captions imports nothing of style

    res = Resolution(run)
    ran = {res.get(p["index"], "topology.workers") for p in run.points if "index" in p} - {None}
    if not ran:
        return str(topo.get("workers", "?"))
    return "/".join(map(str, sorted(ran)))


CAPTION_PT = 6.5


def save(fig: "plt.Figure", run: Run | None, out_dir: Path, name: str,
         caption: Iterable[str] = (), footer: str | None = None) -> list[Path]:
    """Write <name>.png/.pdf with the caption lines (what ran) above the footer
    (the run's emulation footer, or `footer` for figures drawn from no single run).

    A figure drawn from a run with an axes that holds no data is refused (PlotError,
    nothing written): the run cannot feed that figure, and empty axes would pass for
    a result."""
    if run is not None:
        _refuse_empty_panels(fig, run, name)
    w, h = fig.get_size_inches()
    chars = max(60, int(w * 17.5))   # characters per line at 6.5 pt
    paras: list[tuple[list[str], str]] = []
    for para in (c for c in caption if c):
        warn = para.startswith(("INVALID", "DISAGREE", "NOT REACHED"))
        paras.append((textwrap.wrap(para, chars, subsequent_indent="  "), "#B00000" if warn else "0.1"))
    paras.append(([footer if footer is not None else emulation_footer(run)], "0.4"))
    line_h = CAPTION_PT * 1.35 / 72 / h   # one text line, in figure fraction
    n = 0
    for lines, color in reversed(paras):  # bottom up: footer first
        fig.text(0.01, 0.006 + n * line_h, "\n".join(lines), fontsize=CAPTION_PT, ha="left", va="bottom",
                 color=color, linespacing=1.2)
        n += len(lines)
    fig.tight_layout(rect=(0, 0.012 + n * line_h, 1, 1))
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p)
    _close(fig)
    return paths


def has_data(ax: Any) -> bool:
    """Whether an axes holds something drawn from numbers: a line with a finite point
    in data coordinates (not an axhline/axvline, which spans the axes whatever the
    data), a bar of non-zero size, a band, scatter or vlines, or an image."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    # Identity, not ==: on linear axes an axhline's blended transform compares equal to transData.
    data = ax.transData
    for ln in ax.get_lines():
        if ln.get_transform() is data and _finite_pair(ln.get_xdata(), ln.get_ydata()):
            return True
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_data_transform() is data \
                and all(np.isfinite(v) and v != 0 for v in (p.get_width(), p.get_height())):
            return True
    for c in ax.collections:
        if c.get_transform() is data and any(len(path.vertices) and np.isfinite(path.vertices).all(axis=1).any()
                                             for path in c.get_paths()):
            return True
        offsets = np.asarray(c.get_offsets(), float).reshape(-1, 2)
        if offsets.size and c.get_offset_transform() is data and np.isfinite(offsets).all(axis=1).any():
            return True
    return bool(ax.images)


def _finite_pair(xs: Any, ys: Any) -> bool:
    x, y = np.asarray(xs, float).ravel(), np.asarray(ys, float).ravel()
    n = min(x.size, y.size)
    return bool(n) and bool(np.any(np.isfinite(x[:n]) & np.isfinite(y[:n])))


def _refuse_empty_panels(fig: "plt.Figure", run: Run, name: str) -> None:
    from testbed.plots import PlotError  # noqa: PLC0415 - the package imports no figure module at load

    empty = [ax for ax in fig.axes if ax.get_visible() and ax.axison and not has_data(ax)]
    if not empty:
        return
    plt.close(fig)
    panels = []
    for ax in empty:
        # The figure's own note in that panel ("no S-*/FR-* pairs in this run") says why.
        why = "; ".join(" ".join(t.get_text().split()) for t in ax.texts if t.get_text().strip())
        panels.append(f"'{ax.get_title() or ax.get_ylabel() or 'untitled'}'" + (f" ({why})" if why else ""))
    kind = run.manifest.get("scenario", {}).get("workload", {}).get("kind", "?")
    raise PlotError(f"{name}: {run.path} ({kind} run, scenario {run.manifest.get('scenario', {}).get('name', '?')}) "
                    f"has nothing for panel(s) {', '.join(panels)}; not drawn")


def _close(fig: "plt.Figure") -> None:
    plt.close(fig)  # tests replace this to inspect the drawn figure


def caption_of(fig: Any) -> str:
    """Every text drawn on the figure (caption, footer, notes, legends), for tests."""
    texts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        texts += [t.get_text() for t in ax.texts]
        leg = ax.get_legend()
        if leg:
            texts += [t.get_text() for t in leg.get_texts()]
        texts.append(ax.get_title())
    # Caption lines are wrapped: join them back so a phrase is found whole.
    return " | ".join(" ".join(t.split()) for t in texts if t)
