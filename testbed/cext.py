"""Loading the C extensions `make setup` builds (scripts/build_fastpath.py):
the switch's INA pipeline (_fastpath), its packet-ring I/O (_pktio) and the INA
worker's host path (_hostpath). Tests and imports never compile one.

    _fastpath, IMPORT_ERROR = cext.load("testbed.switch.ina._fastpath", {"INA_HLEN": wire.INA_HLEN})

Not built (or not importable): (None, why), and the caller runs its Python
reference, saying so. Built but disagreeing with the constants the Python side
holds (a C file repeats testbed/wire.py's layout): ImportError naming each
constant, since a drift would corrupt packets silently. Lives beside wire.py, the
lowest layer, so that hosts/ and testbed/switch/ can both use it.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


def load(name: str, expected_constants: dict[str, Any] | None = None
         ) -> tuple[ModuleType | None, str | None]:
    """(module, None) when `name` imports and its `constants()` match
    `expected_constants` (when given); (None, the import error's text) when it
    does not import. A constant that differs raises ImportError."""
    try:
        module = importlib.import_module(name)
    except ImportError as e:        # not built: `make setup` compiles it
        return None, str(e)
    if expected_constants:
        got = module.constants()
        bad = {k: (got.get(k), v) for k, v in expected_constants.items() if got.get(k) != v}
        if bad:
            raise ImportError(f"{name.replace('.', '/')}.c disagrees with testbed/wire.py "
                              f"(name: (C, Python)): {bad}; fix the C constants and run make setup")
    return module, None
