"""Published measurements the hardware models are checked against (validation.py).

Each is a number someone measured on real hardware, with its source; none was
used to set a model's constants and none comes from a paper this testbed
reproduces. Some the project measured itself: those files are under data/ with
the device, the date and the command (gpu_h100.py reads the H100 run).
`predict` computes the same quantity from the model.

One module per family of models, each defining `MEASUREMENTS`; a model key is
a fidelity profile's name (testbed/fidelity/profiles/*.yaml) or `device:<name>`
for a compute device model. MEASUREMENTS here is all of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Measurement:
    id: str
    model: str                 # the hardware model: a fidelity profile name or a device model key
    quantity: str              # what was measured
    setting: str               # under which conditions
    published: float
    unit: str
    source: str                # who measured it, where (paper section / table / figure)
    predict: Callable[[], float]


def read_measurement_file(path, error: type[Exception]) -> dict:
    """A measurement file's JSON, or `error` naming the file: the one reader every
    loader of data/ uses before checking its own schema."""
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{path}: no such measurement file") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not JSON ({e})") from None


def _all() -> list[Measurement]:
    import importlib  # noqa: PLC0415
    import pkgutil  # noqa: PLC0415

    out: list[Measurement] = []
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        out += importlib.import_module(f"{__name__}.{mod}").MEASUREMENTS
    return out


MEASUREMENTS: list[Measurement] = _all()
