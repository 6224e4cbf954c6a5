"""Where the P4 tools the bmv2 backend runs are installed, and whether they are
new enough. One lookup (`find_tools`) used by the backend, `testbed doctor`
and the test suite's bmv2 tier, so the three never disagree.

    tools = find_tools()                  # or find_tools("/opt/p4")
    tools.switch, tools.p4c, tools.cli    # simple_switch_grpc, p4c-bm2-ss, simple_switch_CLI
    subprocess.run([str(tools.p4c), ...], env=tools.env())

Where it looks, first match wins, and a named prefix is never silently
replaced by PATH:
  1. the prefix given by the caller: the scenario's `switch.options.bmv2_prefix`;
  2. the prefix in $P4TOOLS_PREFIX (PREFIX_ENV);
  3. PATH.
A prefix is an install prefix (`./configure --prefix`, `cmake
-DCMAKE_INSTALL_PREFIX`): the tools are in <prefix>/bin, their libraries in
<prefix>/lib (added to LD_LIBRARY_PATH for the processes we start).

The testbed never builds these tools; FIX says how a user gets them.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PREFIX_ENV = "P4TOOLS_PREFIX"
SWITCH = "simple_switch_grpc"
P4C = "p4c-bm2-ss"
P4C_DRIVER = "p4c"                 # reported by doctor; the backend calls p4c-bm2-ss itself
CLI = "simple_switch_CLI"          # BMv2's Thrift client: registers (PI has no register RPCs)
# The oldest versions this backend was run against (issue 11): BMv2 1.15 (P4Runtime
# through PI, --no-p4), p4c 1.2.4 (v1model, --p4runtime-files text format).
MIN_VERSIONS = {SWITCH: (1, 15, 0), P4C: (1, 2, 4)}
# System Pythons that may have Debian's python3-thrift (simple_switch_CLI imports thrift).
CLI_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
VERSION_TIMEOUT_S = 30.0

FIX = ("BMv2 and p4c are not in Debian 12 or PyPI. Ubuntu 20.04+ and Debian 11: p4lang's "
       "packages p4lang-bmv2 and p4lang-p4c from the openSUSE Build Service repository "
       "home:p4lang (see the READMEs of github.com/p4lang/behavioral-model and p4lang/p4c). "
       "Elsewhere build from source: p4lang/PI (--with-proto), p4lang/behavioral-model "
       "(--with-pi --with-thrift --disable-logging-macros), then "
       "targets/simple_switch_grpc, and p4lang/p4c (ENABLE_BMV2=ON); apt-get install "
       f"python3-thrift for {CLI}. Then put <prefix>/bin on PATH, or export "
       f"{PREFIX_ENV}=<prefix>, or set switch.options.bmv2_prefix")


class ToolsMissing(RuntimeError):
    """A tool is missing, does not run, or is too old; the message says which and the fix."""


@dataclass(frozen=True)
class Bmv2Tools:
    switch: Path
    p4c: Path
    cli: Path
    cli_python: str              # a Python with the thrift module, to run the CLI
    switch_version: str
    p4c_version: str
    prefix: Path | None          # None: found on PATH
    p4c_driver: Path | None = None

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for a tool process: <prefix>/lib first on LD_LIBRARY_PATH."""
        return _tool_env(self.prefix, base)

    def cli_argv(self, thrift_port: int, thrift_ip: str = "127.0.0.1") -> list[str]:
        return [self.cli_python, str(self.cli), "--thrift-ip", thrift_ip,
                "--thrift-port", str(int(thrift_port))]

    def describe(self) -> str:
        return (f"{SWITCH} {self.switch_version} ({self.switch}), {P4C} {self.p4c_version} "
                f"({self.p4c}), {CLI} ({self.cli}, run by {self.cli_python}); "
                + (f"prefix {self.prefix}" if self.prefix else "from PATH"))


def _tool_env(prefix: Path | None, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if prefix is not None and (prefix / "lib").is_dir():
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = str(prefix / "lib") + (f":{old}" if old else "")
    return env


def parse_version(text: str) -> tuple[int, ...] | None:
    """The first dotted version in a --version output ("1.15.5-9674187f",
    "p4c-bm2-ss\\nVersion 1.2.4.8 (SHA: ...)")."""
    m = re.search(r"(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _version(path: Path, env: dict[str, str]) -> str:
    """`<tool> --version`, checked: the tool must run (libraries found) and be new enough."""
    name = path.name
    try:
        res = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=VERSION_TIMEOUT_S, env=env)
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolsMissing(f"{path} --version did not run: {e}") from None
    out = (res.stdout + res.stderr).strip()
    version = parse_version(out)
    if res.returncode != 0 or version is None:
        last = out.splitlines()[-1] if out else f"exit code {res.returncode}"
        raise ToolsMissing(f"{path} --version failed: {last}" + (
            "; its shared libraries are not found: install them, or name the install prefix "
            f"(${PREFIX_ENV} or switch.options.bmv2_prefix) so <prefix>/lib is used"
            if "error while loading shared libraries" in out else ""))
    want = MIN_VERSIONS.get(name)
    if want and version < want:
        raise ToolsMissing(f"{path} is version {'.'.join(map(str, version))}; the bmv2 backend "
                           f"needs {name} >= {'.'.join(map(str, want))}")
    return ".".join(map(str, version))


def _python_with_thrift(cli: Path) -> str:
    """A Python that can run simple_switch_CLI: its shebang's, if absolute and
    not `env`, else a system Python with the thrift module (the venv has none)."""
    candidates: list[str] = []
    try:
        first = cli.open("rb").readline().decode(errors="replace")
    except OSError:
        first = ""
    if first.startswith("#!"):
        interp = first[2:].split()
        if interp and interp[0].startswith("/") and Path(interp[0]).name != "env":
            candidates.append(interp[0])
    candidates += [p for p in CLI_PYTHONS if p not in candidates]
    tried = []
    for py in candidates:
        if not os.access(py, os.X_OK):
            continue
        tried.append(py)
        try:
            ok = subprocess.run([py, "-c", "import thrift"], capture_output=True,
                                timeout=VERSION_TIMEOUT_S).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return py
    raise ToolsMissing(f"{cli} needs a Python with the thrift module; none of "
                       f"{tried or list(CLI_PYTHONS)} has it: apt-get install python3-thrift")


def _locate(name: str, prefix: Path | None) -> Path:
    if prefix is not None:
        path = prefix / "bin" / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolsMissing(f"{name} not found in {prefix}/bin")
        return path
    found = shutil.which(name)
    if found is None:
        raise ToolsMissing(f"{name} not found on PATH")
    return Path(found)


def resolve_prefix(prefix: str | Path | None = None,
                   environ: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """(prefix or None for PATH, where it came from) after the lookup order above."""
    environ = os.environ if environ is None else environ
    if prefix:
        return Path(prefix).expanduser(), "switch.options.bmv2_prefix"
    if environ.get(PREFIX_ENV):
        return Path(environ[PREFIX_ENV]).expanduser(), f"${PREFIX_ENV}"
    return None, "PATH"


def find_tools(prefix: str | Path | None = None) -> Bmv2Tools:
    """The installed tools, checked; raises ToolsMissing naming every problem and the fix."""
    where, source = resolve_prefix(prefix)
    return _find(where, source, os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=8)
def _find(prefix: Path | None, source: str, _path: str) -> Bmv2Tools:
    # cached per (prefix, PATH): --version runs cost a process each
    if prefix is not None and not prefix.is_dir():
        raise ToolsMissing(f"{source}: {prefix} is not a directory. {FIX}")
    env = _tool_env(prefix)
    problems, paths = [], {}
    for name in (SWITCH, P4C, CLI):
        try:
            paths[name] = _locate(name, prefix)
        except ToolsMissing as e:
            problems.append(str(e))
    versions = {}
    for name in (SWITCH, P4C):
        if name in paths:
            try:
                versions[name] = _version(paths[name], env)
            except ToolsMissing as e:
                problems.append(str(e))
    cli_python = ""
    if CLI in paths:
        try:
            cli_python = _python_with_thrift(paths[CLI])
        except ToolsMissing as e:
            problems.append(str(e))
    if problems:
        raise ToolsMissing(f"{'; '.join(problems)} (looked in {source}). {FIX}")
    try:
        driver = _locate(P4C_DRIVER, prefix)
    except ToolsMissing:
        driver = None
    return Bmv2Tools(paths[SWITCH], paths[P4C], paths[CLI], cli_python, versions[SWITCH],
                     versions[P4C], prefix, driver)


def clear_cache() -> None:
    """Forget earlier lookups (tests that install fake tools; a user who just installed)."""
    _find.cache_clear()


def find_p4c(prefix: str | Path | None = None) -> tuple[Path, str, dict[str, str]]:
    """Only the compiler (all that compiling p4/ina.p4 needs): (path, version,
    environment to run it in); raises ToolsMissing like find_tools."""
    where, source = resolve_prefix(prefix)
    try:
        if where is not None and not where.is_dir():
            raise ToolsMissing(f"{source}: {where} is not a directory")
        path = _locate(P4C, where)
        env = _tool_env(where)
        return path, _version(path, env), env
    except ToolsMissing as e:
        raise ToolsMissing(f"{e} (looked in {source}). {FIX}") from None


def p4c_available(prefix: str | Path | None = None) -> tuple[bool, str]:
    """(True, "p4c-bm2-ss <version> (<path>)") or (False, why and how to fix it)."""
    try:
        path, version, _ = find_p4c(prefix)
        return True, f"{P4C} {version} ({path})"
    except ToolsMissing as e:
        return False, str(e)


def bmv2_available(prefix: str | Path | None = None) -> tuple[bool, str]:
    """(True, what was found) or (False, why and how to fix it)."""
    try:
        return True, find_tools(prefix).describe()
    except ToolsMissing as e:
        return False, str(e)


__all__ = ["PREFIX_ENV", "Bmv2Tools", "ToolsMissing", "find_tools", "find_p4c", "bmv2_available",
           "p4c_available",
           "resolve_prefix", "parse_version", "clear_cache", "FIX"]
