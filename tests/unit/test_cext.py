"""The C extensions' loader (testbed/cext.py)."""
from __future__ import annotations

import sys
import types

import pytest

from testbed import cext

pytestmark = pytest.mark.unit

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
