"""The scenario field reference (docs/scenarios.md), generated from the models.

    .venv/bin/python -m testbed.scenario.reference > docs/scenarios.md

Generated, so the reference cannot drift from what the loader accepts; a unit
test fails when the checked-in file is out of date.
"""
from __future__ import annotations

import inspect
import json
import typing
from typing import Any, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from testbed.scenario.models import BUILTIN_FIGURES, DEFAULT_MAX_POINTS, MIN_BANDWIDTH_MBPS, Scenario
from testbed.wire import MAX_WORKERS
from testbed.workloads import workload_models

REGENERATE = ".venv/bin/python -m testbed.scenario.reference > docs/scenarios.md"

_INTRO = f"""\
# Scenario reference

<!-- Generated from testbed/scenario/models.py and the workload models; do not edit.
     Regenerate with: {REGENERATE} -->

A scenario is a YAML file under `scenarios/` (see `scenarios/quickstart.yaml`).
Every field below is optional unless its default says *required*. Unknown keys,
wrong types and out-of-range values are errors reported with the file, the line
and the field path, e.g. `quickstart.yaml:12: topology.wrokers: unknown field;
did you mean 'workers'?`. Types are strict: `"4"` is not an integer and `1` is
not a boolean.

**Overrides.** `--set key.path=value` changes one field before validation; the
value is parsed as YAML (`3`, `1.5`, `true`, `[1, 2]`, `{{host: w2}}`). List items are
addressed by index (`stragglers.0.delay_ms=5`); `sweep.grid` and case `set` keys
are whole dotted paths (`sweep.grid.workload.algorithm=[ring, ps]`).

**Sweeps.** The points of a run are `sweep.cases` (or one case `base`) x every
combination of `sweep.grid` (keys vary in file order) x `sweep.repeats`. A
point's scenario is the file + its grid values + its case's `set` (+ `sweep.quick.set`
with `--quick`), validated again; every point is checked when the file loads.
Each point gets a seed derived from `sweep.seed`, its case, grid values and
repeat, so reruns are reproducible. Point labels look like
`003-loss-algorithm=ps-r0`. A grid key needs at least one value. Points are
counted before anything is expanded: a sweep (or its quick variant) of more than
`sweep.max_points` (default {DEFAULT_MAX_POINTS}) points is refused with its
count; raise the limit in the file or with `testbed run --max-points N`.

**Cross-field rules.** Straggler hosts and `links.hosts` keys must be hosts of
the scenario (`w1..wN`, plus e.g. `ps` when `workload.algorithm: ps`); a host is
a straggler at most once; `topology.leaves <= topology.workers` for a tree; case
names are unique and `sweep.quick.cases` names existing cases; `figures` are
known names. Numbers must be finite (`.inf` and `.nan` are refused);
`links.bandwidth_mbps` is at least {MIN_BANDWIDTH_MBPS} (htb's floor, see the field).
With the soft switch, `switch.program` must have `p4/<program>.p4info.txtpb`,
`switch.options.batch` is an integer in 1..1024 and `switch.options.nice` in
-20..19, and keys the testbed sets itself (`forwarding`, `impairments`, ...) are
refused. A workload's in-switch aggregation job (allreduce `algorithm: switch`,
p4sgd `collective: switch`) holds at most {MAX_WORKERS} workers (the switch's
worker bitmap); checked for every sweep point when the file loads.
"""


def render_markdown() -> str:
    sections: list[tuple[str, str, type[BaseModel]]] = [("Top level", "", Scenario)]
    out = [_INTRO]
    done: set[str] = set()
    while sections:
        title, prefix, model = sections.pop(0)
        if title in done:
            continue
        done.add(title)
        out.append(f"\n## {title}\n")
        if model.__doc__ and model is not Scenario:
            out.append(f"{inspect.cleandoc(model.__doc__).splitlines()[0]}\n")
        out.append("\n| Field | Type | Default | Constraints | Description |\n|---|---|---|---|---|\n")
        nested = []
        for name, field in model.model_fields.items():
            path = f"{prefix}{name}"
            out.append(_row(path, field))
            if field.discriminator:  # the workload union: one section per registered kind
                nested += [(f"`{path}` with `kind: {kind}`", f"{path}.", m) for kind, m in workload_models().items()]
            else:
                nested += _subsections(path, field.annotation)
        sections[0:0] = nested  # nested sections right after their parent
    out.append("\n## Figure names\n\nBuilt in: " + ", ".join(f"`{n}`" for n in sorted(BUILTIN_FIGURES))
               + ". Plot modules may register more (`testbed.scenario.register_figure_names`).\n")
    return "".join(out)


def _subsections(path: str, tp: Any) -> list[tuple[str, str, type[BaseModel]]]:
    """Sections for the models nested in a field (mappings, lists, dicts of them)."""
    tp = _strip(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_model(tp):
        return [(f"`{path}`", f"{path}.", tp)]
    if origin is Union:
        return [s for a in args for s in _subsections(path, a)]
    if origin is list:
        return _subsections(f"{path}[]", args[0])
    if origin is dict:
        return _subsections(f"{path}.<{_key_name(path)}>", args[1])
    return []


def _key_name(path: str) -> str:
    return "host" if path.endswith("hosts") else "key"


def _row(path: str, field: FieldInfo) -> str:
    if field.is_required():
        default = "*required*"
    else:
        value = field.get_default(call_default_factory=True)
        default = "see below" if isinstance(value, BaseModel) else f"`{_yaml(value)}`"
    constraints = "; ".join(_constraints(field.metadata) + _nested_constraints(field.annotation))
    type_text = "mapping, selected by `kind`" if field.discriminator else _type_text(field.annotation)
    cells = [f"`{path}`", type_text, default, constraints, field.description or ""]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"


def _yaml(value: Any) -> str:
    if isinstance(value, str):
        return value or '""'
    return json.dumps(value).replace('"', "")


# --- types and constraints ----------------------------------------------------
def _is_model(tp: Any) -> bool:
    return inspect.isclass(tp) and issubclass(tp, BaseModel)


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _type_text(tp: Any) -> str:
    tp = _strip(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is Union:
        rest = [a for a in args if a is not type(None)]
        if all(_is_model(a) for a in rest) and len(rest) > 1:
            return "mapping, by `kind`"
        text = " or ".join(_type_text(a) for a in rest)
        return f"{text} or null" if len(rest) < len(args) else text
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"mapping of {_type_text(args[0])} to {_type_text(args[1])}"
    if _is_model(tp):
        return "mapping (see below)"
    names = {int: "integer", float: "number", str: "string", bool: "boolean", Any: "any"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


_OPS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="),
        ("min_length", "length >= {}"), ("max_length", "length <= {}"), ("pattern", "matches `{}`"))


def _constraints(metadata: list[Any]) -> list[str]:
    found = []
    for m in metadata:
        if isinstance(m, FieldInfo):
            found += _constraints(m.metadata)
            continue
        for attr, op in _OPS:
            value = getattr(m, attr, None)
            if value is not None:
                found.append(op.format(value) if "{}" in op else f"{op} {value}")
    return found


def _nested_constraints(tp: Any, prefix: str = "") -> list[str]:
    """Constraints inside the type: Optional[Annotated[float, Gt(0)]], list[Annotated[int, Ge(1)]]."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return [prefix + c for c in _constraints(list(args[1:]))] + _nested_constraints(args[0], prefix)
    if origin is Union:
        return [c for a in args for c in _nested_constraints(a, prefix)]
    if origin is list:
        return _nested_constraints(args[0], prefix + "each item ")
    return []


if __name__ == "__main__":
    print(render_markdown(), end="")
