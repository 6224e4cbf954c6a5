"""The C extensions' loader (testbed/cext.py), and that `make setup` built every
extension scripts/build_fastpath.py lists, fresh, and its Python side loaded it.

Tests never compile: if an extension is missing or older than its source, the
build test fails and names the fix (like test_declared_dependencies.py for packages).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from testbed import cext

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _build_script():
    spec = importlib.util.spec_from_file_location("build_fastpath", REPO / "scripts" / "build_fastpath.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BUILD = _build_script()
# Each extension's Python side: (the module that loads it, its module attribute, its error attribute).
LOADED_BY = {"testbed.switch.ina._fastpath": ("testbed.switch.ina.fastpath", "_fastpath", "IMPORT_ERROR"),
             "testbed.switch.soft._pktio": ("testbed.switch.soft.dataplane", "_pktio", "PKTIO_IMPORT_ERROR"),
             "hosts.ina._hostpath": ("hosts.ina.hostpath", "_hostpath", "IMPORT_ERROR"),
             "hosts.lhc._peel": ("hosts.lhc.codec", "_peelc", "_PEEL_IMPORT_ERROR")}


def _dotted(src: Path) -> str:
    return ".".join(src.relative_to(REPO).with_suffix("").parts)


@pytest.mark.parametrize("src", [src for src, _flags in BUILD.EXTENSIONS], ids=lambda s: s.name)
def test_make_setup_built_it(src):
    name = _dotted(src)
    assert name in LOADED_BY, f"{name}: which module loads it? add it to LOADED_BY"
    loader, attr, error_attr = LOADED_BY[name]
    loader = importlib.import_module(loader)      # a constants drift fails here, named
    module = getattr(loader, attr)
    assert module is not None, (f"{src.relative_to(REPO).with_suffix('')} is not importable "
                                f"({getattr(loader, error_attr)}): run `make setup` "
                                f"(or .venv/bin/python scripts/build_fastpath.py)")
    so = module.__file__
    assert os.path.getmtime(so) >= os.path.getmtime(src), \
        f"{so} is older than {src}: run `make setup` to rebuild it"


def test_a_missing_extension_gives_the_import_error_text():
    module, error = cext.load("testbed.switch.ina._not_built_ext", {"INA_HLEN": 16})
    assert module is None and "No module named 'testbed.switch.ina._not_built_ext'" in error


def _fake_ext(monkeypatch, constants: dict) -> str:
    fake = types.ModuleType("testbed._fake_ext")
    fake.constants = lambda: dict(constants)
    monkeypatch.setitem(sys.modules, "testbed._fake_ext", fake)
    return "testbed._fake_ext"


def test_constants_that_match_load_the_module(monkeypatch):
    name = _fake_ext(monkeypatch, {"INA_HLEN": 16, "OP_SUM": 0, "C_ONLY": 7})
    module, error = cext.load(name, {"INA_HLEN": 16, "OP_SUM": 0})
    assert error is None and module.constants()["C_ONLY"] == 7
    assert cext.load(name) == (module, None)           # nothing to check


def test_a_constants_mismatch_is_an_error_naming_the_constant(monkeypatch):
    name = _fake_ext(monkeypatch, {"INA_HLEN": 16, "OP_SUM": 1})
    with pytest.raises(ImportError, match=r"testbed/_fake_ext\.c disagrees with testbed/wire\.py "
                                          r"\(name: \(C, Python\)\): \{'OP_SUM': \(1, 0\), "
                                          r"'MAX_WORKERS': \(None, 32\)\}; fix the C constants"):
        cext.load(name, {"INA_HLEN": 16, "OP_SUM": 0, "MAX_WORKERS": 32})
