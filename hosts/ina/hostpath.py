"""The INA worker's compiled loops (hosts/ina/_hostpath.c), when built.

`make setup` (scripts/build_fastpath.py) compiles the extension; tests never
do. Without it the client runs the numpy code, the reference the compiled
loops must match bit for bit (tests/unit/test_ina_hostpath.py); the client
says which it runs in `stats.impl` ("compiled" or "python").

    hp = hostpath.choose(impl)      # impl: None (compiled when built), "compiled", "python"
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from hosts.ina.chunks import RX_STRIDE
from testbed import cext, wire

IMPLS = ("compiled", "python")

# The C file repeats wire.py's layout (and the receive buffer's stride); a drift
# would corrupt packets silently, so the loader refuses it.
_hostpath, IMPORT_ERROR = cext.load("hosts.ina._hostpath", {
    "INA_HLEN": wire.INA_HLEN, "MAX_VALUES_PER_PACKET": wire.MAX_VALUES_PER_PACKET,
    "RX_STRIDE": RX_STRIDE, "INA_VERSION": wire.INA_VERSION, "FLAG_RESULT": wire.FLAG_RESULT})


def available() -> bool:
    return _hostpath is not None


def choose(impl: str | None) -> ModuleType | None:
    """The compiled module for `impl`, or None for the numpy path."""
    if impl is None:
        return _hostpath
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS} or None, got {impl!r}")
    if impl == "python":
        return None
    if _hostpath is None:
        raise RuntimeError(f"impl 'compiled': hosts/ina/_hostpath.c is not built ({IMPORT_ERROR}): "
                           f"run `make setup` (or .venv/bin/python scripts/build_fastpath.py)")
    return _hostpath


def quantize(hp: ModuleType, x: np.ndarray, k: int, n_workers: int) -> tuple[np.ndarray, int]:
    """fixed_point.quantize(x, k, n_workers, "saturate"), compiled."""
    from hosts.ina import fixed_point as fp
    src = np.ascontiguousarray(x)
    if src.dtype not in (np.float32, np.float64):
        src = src.astype(np.float64)
    out = np.empty(src.size, np.int32)
    r = hp.quantize(src.reshape(-1), int(k), float(fp.contribution_limit(n_workers)), out)
    if r < 0:                # a non-finite value: the reference raises the error naming it
        return fp.quantize(x, k, n_workers, "saturate")
    return out, r
