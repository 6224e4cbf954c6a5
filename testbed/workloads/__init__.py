"""Registry of workload params models.

Each workload kind lives in one module of this package and registers its
pydantic params model with `@register_workload`. The scenario schema builds its
`workload:` field as a union of every registered model, discriminated by the
model's `kind` literal, so a new workload only adds a module here and one import
line at the bottom of this file.

Workload modules must not import `testbed.scenario` at module level (the
scenario package imports this one to build its schema); import it inside
functions or under `typing.TYPE_CHECKING`.
"""
from __future__ import annotations

import typing
from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=type[BaseModel])

_MODELS: dict[str, type[BaseModel]] = {}
# Set once the scenario schema has been built from the registry: a model
# registered after that would silently be missing from the schema.
_sealed = False


def _kind_of(model_cls: type[BaseModel]) -> str:
    field = model_cls.model_fields.get("kind")
    args = typing.get_args(field.annotation) if field else ()
    if field is None or typing.get_origin(field.annotation) is not typing.Literal or len(args) != 1:
        raise TypeError(f"{model_cls.__name__}: a workload model needs a field "
                        f"`kind: Literal['<name>']` with exactly one value")
    return args[0]


def register_workload(model_cls: M) -> M:
    """Class decorator: add a workload params model to the scenario schema."""
    kind = _kind_of(model_cls)
    if _sealed:
        raise RuntimeError(f"workload {kind!r} registered after testbed.scenario was imported; "
                           f"import its module from testbed/workloads/__init__.py")
    if kind in _MODELS and _MODELS[kind] is not model_cls:
        raise ValueError(f"workload kind {kind!r} is already registered by {_MODELS[kind].__name__}")
    _MODELS[kind] = model_cls
    return model_cls


def workload_models() -> dict[str, type[BaseModel]]:
    """Registered params models by kind, in registration order."""
    return dict(_MODELS)


def seal_registry() -> dict[str, type[BaseModel]]:
    """Called by the scenario schema when it builds its union (see `_sealed`)."""
    global _sealed
    _sealed = True
    return workload_models()


# Built-in workloads: importing them registers their models. ----------------
from testbed.workloads import allreduce  # noqa: E402,F401
from testbed.workloads import p4sgd  # noqa: E402,F401
from testbed.workloads import torch  # noqa: E402,F401
from testbed.workloads import lhc  # noqa: E402,F401
from testbed.workloads import easgd  # noqa: E402,F401
from testbed.workloads import phub  # noqa: E402,F401
from testbed.workloads import shadowsync  # noqa: E402,F401
