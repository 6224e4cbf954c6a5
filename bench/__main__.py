"""`python -m bench [NAME ...] [--out DIR] [--list]`: run the benchmarks.

Discovers every module in this package that defines `run(out_dir) -> dict`.
A result without a `json_path` (the module did not save it) is written to
`<out>/<name>-<timestamp>.json`. Exit code 1 if any benchmark raised.
"""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path

import bench

ROOT = Path(__file__).resolve().parent.parent


def discover() -> dict[str, object]:
    found = {}
    for m in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if m.name.startswith("_"):
            continue
        mod = importlib.import_module(f"bench.{m.name}")
        if callable(getattr(mod, "run", None)):
            found[m.name] = mod
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"), help="output directory")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    a = ap.parse_args(argv)
    mods = discover()
    if a.list:
        print("\n".join(mods))
        return 0
    unknown = [n for n in a.names if n not in mods]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {sorted(mods)}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in a.names or list(mods):
        print(f"=== bench {name}", flush=True)
        t0 = time.monotonic()
        try:
            res = mods[name].run(out)
        except Exception:  # noqa: BLE001 - report and go on with the others
            traceback.print_exc()
            failed.append(name)
            continue
        if isinstance(res, dict) and "json_path" not in res:
            path = out / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
            path.write_text(json.dumps(res, indent=1, default=str))
            res["json_path"] = str(path)
        where = res.get("json_path") if isinstance(res, dict) else None
        skipped = res.get("skipped") if isinstance(res, dict) else None
        print(f"=== {name}: {'skipped: ' + skipped if skipped else 'done'} in "
              f"{time.monotonic() - t0:.1f}s" + (f" -> {where}" if where else ""), flush=True)
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
