"""Shared look of every figure, and the footer saying what was emulated."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on these machines
import matplotlib.pyplot as plt  # noqa: E402

from testbed.results import Run  # noqa: E402

plt.rcParams.update({
    "figure.figsize": (6.0, 4.0), "figure.dpi": 120, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
    "font.size": 10,
})


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
    """Worker count, or the counts a sweep ran ('1/2/4/8')."""
    swept = sorted({p["params"]["topology.workers"] for p in run.points
                    if "topology.workers" in (p.get("params") or {})})
    return "/".join(map(str, swept)) if swept else str(topo.get("workers", "?"))


def save(fig: "plt.Figure", run: Run, out_dir: Path, name: str) -> list[Path]:
    fig.text(0.01, 0.005, emulation_footer(run), fontsize=6.5, color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths
