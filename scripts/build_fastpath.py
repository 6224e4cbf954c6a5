"""Compile the C hot loops into their packages, next to their sources, with the
system C compiler: the INA pipeline's (testbed/switch/ina/_fastpath.c), the soft
switch's packet-ring I/O (testbed/switch/soft/_pktio.c) and the INA worker's
(hosts/ina/_hostpath.c).

Run by `make setup` (scripts/setup.sh) with the venv's Python, whose headers
and extension suffix it builds for. No setuptools, no new dependency: one cc
command per extension, printed. Rebuilds only when a source is newer than its library.
Exit status non-zero, with the compiler's message, when it fails.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "testbed" / "switch" / "ina" / "_fastpath.c"
# (source, extra compiler flags), one entry per extension.
EXTENSIONS = [
    (SRC, []),
    (ROOT / "testbed" / "switch" / "soft" / "_pktio.c", []),
    # -ffp-contract=off: no fused multiply-add, so its float arithmetic rounds as
    # the numpy reference does (bit-identical results, tests/unit/test_ina_hostpath.py).
    (ROOT / "hosts" / "ina" / "_hostpath.c", ["-ffp-contract=off"]),
    (ROOT / "hosts" / "lhc" / "_peel.c", []),
]
# Headers a source includes (a change rebuilds it): the ring loop's program interface.
RING_PROGRAM_H = ROOT / "testbed" / "switch" / "soft" / "ring_program.h"
HEADERS = {SRC: [RING_PROGRAM_H], ROOT / "testbed" / "switch" / "soft" / "_pktio.c": [RING_PROGRAM_H]}
# -O3: the lane loops (byte swap + add/or/max of 64 int32) vectorize.
CFLAGS = ["-O3", "-fPIC", "-shared", "-std=c11", "-Wall", "-Wextra", "-Werror",
          "-Wno-missing-field-initializers", "-Wno-unused-parameter"]


def target(src: Path = SRC) -> Path:
    return src.with_name(src.stem + sysconfig.get_config_var("EXT_SUFFIX"))


def command(out: Path, src: Path = SRC, extra: list[str] | None = None) -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
    include = sysconfig.get_paths()["include"]
    return [cc, *CFLAGS, *(extra or []), f"-I{include}", str(src), "-o", str(out)]


def main() -> int:
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        print(f"build_fastpath: {include}/Python.h missing: install the Python development "
              f"headers (apt-get install python3-dev) and run make setup again", file=sys.stderr)
        return 1
    for src, extra in EXTENSIONS:
        rc = build(src, extra)
        if rc:
            return rc
    return 0


def build(src: Path, extra: list[str]) -> int:
    out = target(src)
    newest = max(p.stat().st_mtime for p in [src, *HEADERS.get(src, [])])
    if out.exists() and out.stat().st_mtime >= newest and "--force" not in sys.argv:
        print(f"build_fastpath: {out.relative_to(ROOT)} up to date")
        return 0
    cmd = command(out, src, extra)
    print("build_fastpath:", shlex.join(cmd))
    tmp = out.with_name(out.name + ".tmp")
    cmd[-1] = str(tmp)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        print(f"build_fastpath: C compiler {cmd[0]!r} not found: apt-get install gcc "
              f"(or set CC) and run make setup again", file=sys.stderr)
        return 1
    if r.returncode != 0:
        print(f"build_fastpath: compiling {src.relative_to(ROOT)} failed:\n{r.stderr}", file=sys.stderr)
        tmp.unlink(missing_ok=True)
        return 1
    os.replace(tmp, out)        # a running switch keeps the old mapping; new ones load this
    print(f"build_fastpath: built {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
