"""Compile the INA pipeline's C hot loop (testbed/switch/ina/_fastpath.c) into
the package, next to its source, with the system C compiler.

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
SRC = ROOT / "testbed" / "switch" / "ina" / "_fastpath.c"
# -O3: the lane loops (byte swap + add/or/max of 64 int32) vectorize.
CFLAGS = ["-O3", "-fPIC", "-shared", "-std=c11", "-Wall", "-Wextra", "-Werror",
          "-Wno-missing-field-initializers", "-Wno-unused-parameter"]


def target() -> Path:
    return SRC.with_name("_fastpath" + sysconfig.get_config_var("EXT_SUFFIX"))


def command(out: Path) -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
    include = sysconfig.get_paths()["include"]
    return [cc, *CFLAGS, f"-I{include}", str(SRC), "-o", str(out)]


def main() -> int:
    out = target()
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        print(f"build_fastpath: {include}/Python.h missing: install the Python development "
              f"headers (apt-get install python3-dev) and run make setup again", file=sys.stderr)
        return 1
    if out.exists() and out.stat().st_mtime >= SRC.stat().st_mtime and "--force" not in sys.argv:
        print(f"build_fastpath: {out.relative_to(ROOT)} up to date")
        return 0
    cmd = command(out)
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
        print(f"build_fastpath: compiling {SRC.relative_to(ROOT)} failed:\n{r.stderr}", file=sys.stderr)
        tmp.unlink(missing_ok=True)
        return 1
    os.replace(tmp, out)        # a running switch keeps the old mapping; new ones load this
    print(f"build_fastpath: built {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
