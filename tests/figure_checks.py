"""Draw a run's figures with the project's own entry point (testbed.plots.draw_figures,
what `testbed plot` calls) and tell which axes carry no data.

An axes carries data when it holds at least one artist drawn from numbers in
data coordinates: a line with a finite point (not an axhline/axvline, which
span the axes whatever the data), a bar (a rectangle of non-zero finite size),
a collection with a finite vertex or offset (bands, scatter, vlines), or an
image. Titles, notes ("no successful points") and legends are not data.

This is the tests' own check, written apart from testbed.plots.style.has_data
(which makes the project refuse such figures), so that one does not vouch for
the other.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any
from unittest import mock

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from testbed.plots import draw_figures
from testbed.plots import style as st


def _finite_point(xs: Any, ys: Any) -> bool:
    x = np.asarray(xs, dtype=float).ravel()
    y = np.asarray(ys, dtype=float).ravel()
    n = min(x.size, y.size)
    return bool(n) and bool(np.any(np.isfinite(x[:n]) & np.isfinite(y[:n])))


def data_artists(ax: Any) -> list[Any]:
    out: list[Any] = []
    data = ax.transData   # compared by identity: on linear axes an axhline's blended transform is == transData
    for ln in ax.get_lines():
        if ln.get_transform() is data and _finite_point(ln.get_xdata(), ln.get_ydata()):
            out.append(ln)
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_data_transform() is data:
            w, h = p.get_width(), p.get_height()
            if np.isfinite(w) and np.isfinite(h) and w != 0 and h != 0:
                out.append(p)
    for c in ax.collections:
        offsets = np.asarray(c.get_offsets(), dtype=float).reshape(-1, 2)
        verts = [np.asarray(path.vertices, dtype=float) for path in c.get_paths()]
        if (offsets.size and c.get_offset_transform() is data and np.isfinite(offsets).all(axis=1).any()) \
                or (c.get_transform() is data and any(v.size and np.isfinite(v).all(axis=1).any() for v in verts)):
            out.append(c)
    out += list(ax.images)
    return out


def empty_axes(fig: Any) -> list[str]:
    """The visible axes of a figure that carry no data, by title (or y label)."""
    return [ax.get_title() or ax.get_ylabel() or f"axes {i}" for i, ax in enumerate(fig.axes)
            if ax.get_visible() and ax.axison and not data_artists(ax)]


def draw(run: Any, names: list[str] | None, write: bool = True) -> tuple[list[Any], list[Any]]:
    """draw_figures(run, names) with every figure kept open: (paths, figures in drawing order).
    write=False draws everything but writes no file (PNG and PDF are most of a figure's
    time). Raises what draw_figures raises (testbed.plots.PlotError for a figure it refuses)."""
    figs: list[Any] = []
    close = st._close
    st._close = figs.append      # style.save closes each figure through this hook
    try:
        with nullcontext() if write else mock.patch.object(Figure, "savefig"):
            paths = draw_figures(run, names)
    except BaseException:
        for f in figs:
            close(f)
        raise
    finally:
        st._close = close
    return paths, figs


def close_all(figs: list[Any]) -> None:
    for f in figs:
        st._close(f)
