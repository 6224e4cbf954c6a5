"""The results folder: where a run writes, and how it is read back.

Layout (one folder per run)::

    results/<scenario>/<YYYYmmdd-HHMMSS>/
        manifest.json      resolved scenario, versions, seeds, backends, status
        points.jsonl       one line per sweep point (status, params, impairments)
        metrics.jsonl      one line per measurement, tagged with its point index
        summary.csv        one row per point x key metric, for spreadsheets
        logs/<point>/      one log per host and switch, control-plane logs
        pcaps/<point>/     per-interface captures
        figures/           written by `testbed plot`

Lines are appended and flushed as points finish, so an interrupted or crashed
run keeps every completed point on disk.
"""
from __future__ import annotations

import csv
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS_ROOT = PROJECT_ROOT / "results"


class ResultsDirError(Exception):
    """The results root cannot be written; the message is one line saying why."""


def _unwritable(root: Path, e: OSError) -> ResultsDirError:
    where = f" ({e.filename})" if e.filename else ""
    return ResultsDirError(f"cannot write results under {root}: {e.strerror or e}{where}; "
                           f"choose another --out folder")


def check_writable(scenario_name: str, root: Path | None = None) -> Path:
    """Create <root>/<scenario>/ and write a probe file in it, so a run that
    cannot keep its results stops before anything starts. Returns that folder."""
    root = root or DEFAULT_RESULTS_ROOT
    base = root / scenario_name
    try:
        base.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=base, prefix=".write-probe-"):
            pass
    except OSError as e:
        raise _unwritable(root, e) from None
    return base


# Results roots other than results/ that runs were written to (`--out`), one absolute
# path a line, so `testbed list` finds those runs too.
OTHER_ROOTS_FILE = DEFAULT_RESULTS_ROOT / ".other-roots"


def remember_root(root: Path) -> None:
    """Note a results root given with --out (best effort: listing is a convenience)."""
    root = root.resolve()
    if root == DEFAULT_RESULTS_ROOT.resolve():
        return
    try:
        known = set(OTHER_ROOTS_FILE.read_text().splitlines()) if OTHER_ROOTS_FILE.exists() else set()
        if str(root) not in known:
            OTHER_ROOTS_FILE.parent.mkdir(parents=True, exist_ok=True)
            with OTHER_ROOTS_FILE.open("a") as f:
                f.write(f"{root}\n")
    except OSError:
        pass


def known_roots() -> list[Path]:
    """results/ and every --out root a run was written to that still exists."""
    roots = [DEFAULT_RESULTS_ROOT]
    if OTHER_ROOTS_FILE.exists():
        roots += [Path(line) for line in OTHER_ROOTS_FILE.read_text().splitlines() if line and Path(line).is_dir()]
    return roots


def new_stamped_dir(base: Path, subdirs: tuple[str, ...] = ()) -> Path:
    """Create <base>/<YYYYmmdd-HHMMSS>/ (suffixing -2, -3 on a clash) and its subdirs."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = base / stamp
    n = 2
    while candidate.exists():
        candidate = base / f"{stamp}-{n}"
        n += 1
    try:
        candidate.mkdir(parents=True)
        for sub in subdirs:
            (candidate / sub).mkdir()
    except OSError as e:
        raise _unwritable(base, e) from None
    return candidate


def new_run_dir(scenario_name: str, root: Path | None = None) -> Path:
    """Create results/<scenario>/<timestamp>/ with logs/ and pcaps/."""
    if root is not None:
        remember_root(root)
    return new_stamped_dir((root or DEFAULT_RESULTS_ROOT) / scenario_name, ("logs", "pcaps"))


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record, default=_json_default) + "\n")
        f.flush()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # A run killed mid-write can leave a torn last line; keep the rest.
                if lineno != _count_lines(path):
                    raise ValueError(f"{path}:{lineno}: not valid JSON")
    return out


def _count_lines(path: Path) -> int:
    with path.open() as f:
        return sum(1 for _ in f)


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a manifest


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, set):
        return sorted(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


@dataclass
class Run:
    """A results folder read back: what plots, `show` and tests consume."""

    path: Path
    manifest: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def metrics_of(self, type_: str) -> Iterator[dict[str, Any]]:
        return (m for m in self.metrics if m.get("type") == type_)

    def point(self, index: int) -> dict[str, Any] | None:
        return next((p for p in self.points if p.get("index") == index), None)


class NotARunError(Exception):
    pass


def load_run(path: str | Path) -> Run:
    p = Path(path)
    if not (p / "manifest.json").exists():
        # Accept results/<scenario>: take its newest run.
        runs = sorted(d for d in p.iterdir() if (d / "manifest.json").exists()) if p.is_dir() else []
        if not runs:
            raise NotARunError(
                f"{p}: no manifest.json here; give a run folder such as "
                f"results/<scenario>/<timestamp> (see `testbed list`)")
        p = runs[-1]
    manifest = json.loads((p / "manifest.json").read_text())
    return Run(p, manifest, read_jsonl(p / "points.jsonl"), read_jsonl(p / "metrics.jsonl"))


def list_runs(root: Path | None = None) -> list[Path]:
    """Manifests of the runs under `root` (default: results/ and every --out root
    seen), oldest first; a reproduction's runs (reproduce/<paper>/<ts>/runs/) too."""
    roots = [root] if root is not None else known_roots()
    found: set[Path] = set()
    for r in roots:
        if r.exists():
            found.update(r.glob("*/*/manifest.json"))
            found.update(r.glob("reproduce/*/*/runs/*/*/manifest.json"))
    return sorted(found, key=lambda m: m.stat().st_mtime)


# What a summary column's prefix says of its time or rate (each workload's summary_row).
SUMMARY_PREFIXES = (
    ("hw_", "hw_*: hardware-equivalent (emulated / TDF), comparable across points"),
    ("projected_hw_", "projected_hw_*: the hardware model's projection of the point's own trace"),
    ("emu_", "emu_*: emulated wall time (dilated by the point's TDF where it has one)"),
)
_UNIT = re.compile(r"(^|_)(ms|s|us|sps|mbps|gbps)($|[_/@])|per_s")


def summary_legend(columns: Iterable[str]) -> list[str]:
    """Lines under the summary table: what its columns' hw_ / projected_hw_ / emu_
    prefixes mean (those present), and, for a table written before the columns said
    so, that its unprefixed times are emulated."""
    cols = list(columns)
    out = [text for prefix, text in SUMMARY_PREFIXES if any(c.startswith(prefix) for c in cols)]
    bare = [c for c in cols if _UNIT.search(c) and not c.startswith(("hw_", "projected_hw_", "emu_", "proj"))]
    if bare:
        out.append("written before the columns said which: unprefixed times are emulated (LHC's net_gbps: "
                   f"on hardware-equivalent time), proj* projected: {', '.join(bare)}")
    return out


def write_summary_csv(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    if not rows:
        return
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def drop_point_records(path: Path, point_index: int) -> None:
    """Remove one point's records from a metrics file (a point that is run again)."""
    if not path.exists():
        return
    keep = [r for r in read_jsonl(path) if r.get("point") != point_index]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for r in keep:
            f.write(json.dumps(r) + "\n")
    tmp.replace(path)


def resolve_project_path(path: str) -> Path:
    """A scenario's file path: absolute; or relative to the folder the command runs
    in, where it exists there (a user's own script or inventory); else relative to
    the project root (the shipped scenarios name scenarios/... from there)."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    here = Path.cwd() / p
    return here.resolve() if here.exists() else PROJECT_ROOT / p
