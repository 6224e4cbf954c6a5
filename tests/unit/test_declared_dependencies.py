"""Every third-party module the project imports is installed by `make setup`.

A module installed by hand on a developer's machine passes every other test there
and fails on CI's fresh clone; this test reads the imports and pyproject.toml so
that the mismatch shows up on the machine where it was made.
"""
import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"testbed", "hosts", "bench", "tests", "p4"}
# Not pip dependencies, on purpose: mininet comes from Debian's python3-mininet
# (scripts/setup.sh links it into the venv); pyxrt only exists on a host with an
# Alveo card and hosts/glm/u280_xrt.py imports it lazily (without it only the
# adapter's dry run works; a real run is refused up front, never silently dry).
NOT_FROM_PIP = {"mininet", "pyxrt"}


def _top_level_imports(paths):
    found = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path.relative_to(ROOT))
    return found


def _declared_distributions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    names = {re.split(r"[\s<>=!~\[;]", s, maxsplit=1)[0] for s in specs}
    return {n.lower().replace("_", "-") for n in names}


def _required_by(dists):
    """Declared distributions plus everything they pull in (p4runtime-shell brings grpc...)."""
    seen, todo = set(), list(dists)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            if "extra ==" in r:
                continue
            todo.append(re.split(r"[\s<>=!~\[;(]", r, maxsplit=1)[0].lower().replace("_", "-"))
    return seen


def test_every_imported_package_is_declared_in_pyproject():
    sources = [p for d in ("testbed", "hosts", "bench", "tests") for p in (ROOT / d).rglob("*.py")]
    imports = _top_level_imports(sources)
    module_to_dists = md.packages_distributions()
    declared = _required_by(_declared_distributions())
    local_test_helpers = {p.stem for p in (ROOT / "tests").rglob("*.py")}

    undeclared = []
    for module, where in sorted(imports.items()):
        if (module in sys.stdlib_module_names or module in FIRST_PARTY
                or module in NOT_FROM_PIP or module in local_test_helpers):
            continue
        dists = {d.lower().replace("_", "-") for d in module_to_dists.get(module, [])}
        if not dists & declared:
            undeclared.append(f"{module} (imported in {where}; from {sorted(dists) or 'nowhere'})")
    assert not undeclared, "imported but not installed by make setup: " + "; ".join(undeclared)
