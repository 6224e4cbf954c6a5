"""Compile the project's C extensions into the package, next to their sources,
with the system C compiler: the INA pipeline's hot loop
(testbed/switch/ina/_fastpath.c) and the soft switch's packet-ring I/O
(testbed/switch/soft/_pktio.c).

Run by `make setup` (scripts/setup.sh) with the venv's Python, whose headers
and extension suffix it builds for. No setuptools, no new dependency: one cc
command, printed. Rebuilds only when the source is newer than the library.
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
# One entry per extension (module name = file stem).
SOURCES = [
    ROOT / "testbed" / "switch" / "ina" / "_fastpath.c",
    ROOT / "testbed" / "switch" / "soft" / "_pktio.c",
]
# -O3: the lane loops (byte swap + add/or/max of 64 int32) vectorize.
CFLAGS = ["-O3", "-fPIC", "-shared", "-std=c11", "-Wall", "-Wextra", "-Werror",
          "-Wno-missing-field-initializers", "-Wno-unused-parameter"]


def target(src: Path) -> Path:
    return src.with_name(src.stem + sysconfig.get_config_var("EXT_SUFFIX"))


def command(src: Path, out: Path) -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
    include = sysconfig.get_paths()["include"]
    return [cc, *CFLAGS, f"-I{include}", str(src), "-o", str(out)]


def main() -> int:
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        print(f"build_fastpath: {include}/Python.h missing: install the Python development "
              f"headers (apt-get install python3-dev) and run make setup again", file=sys.stderr)
        return 1
    return max(build(src) for src in SOURCES)


def build(src: Path) -> int:
    out = target(src)
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime and "--force" not in sys.argv:
        print(f"build_fastpath: {out.relative_to(ROOT)} up to date")
        return 0
    cmd = command(src, out)
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
