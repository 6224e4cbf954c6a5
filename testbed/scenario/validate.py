"""Validating scenarios: YAML with line numbers, `--set` overrides, schema and semantic checks.

Every problem is reported as `<file>:<line>: <field.path>: <what is wrong>`,
all problems at once, so a person can fix a file in one pass. Line numbers come
from the composed YAML node tree; values that came from `--set` say so instead.
"""
from __future__ import annotations

import copy
import difflib
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

import yaml
from pydantic import BaseModel, ValidationError

from testbed.scenario.models import SKIP_SEMANTIC, Loc, Scenario, format_loc, semantic_problems
from testbed.workloads import workload_models


# --- errors -----------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    file: Optional[str]
    line: Optional[int]
    path: str
    message: str
    origin: Optional[str] = None  # the `--set` that produced the value, if any

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file and self.line else (self.file or "")
        text = ": ".join(p for p in (where, self.path, self.message) if p)
        return f"{text} (from --set {self.origin})" if self.origin else text


class ScenarioError(Exception):
    """A scenario that cannot be used; `problems` lists every reason, one per line."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class _Source:
    """Where raw values came from: file lines, or a `--set` override."""

    def __init__(self, file: Optional[str], lines: dict[Loc, int] | None = None):
        self.file = file
        self.lines = lines or {}
        self.origins: dict[Loc, str] = {}

    def problem(self, loc: Loc, message: str, path: Optional[str] = None) -> Problem:
        path = format_loc(loc) if path is None else path
        for set_loc, override in self.origins.items():
            if loc[:len(set_loc)] == set_loc:
                return Problem(self.file, None, path, message, origin=override)
        for n in range(len(loc), -1, -1):  # nearest enclosing key that is in the file
            if loc[:n] in self.lines:
                return Problem(self.file, self.lines[loc[:n]], path, message)
        return Problem(self.file, None, path, message)


# --- YAML with line numbers -------------------------------------------------
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _parse_yaml(text: str, source: str) -> tuple[Any, dict[Loc, int]]:
    try:
        # The reader checks every character when it is built: a NUL byte fails here.
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as e:
        raise ScenarioError([_reader_problem(text, source, e)]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: dict[Loc, int] = {(): node.start_mark.line + 1}
        duplicates: list[Problem] = []
        _index_lines(loader, source, node, (), lines, duplicates, set())
        if duplicates:
            raise ScenarioError(duplicates)
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        col = f" (column {mark.column + 1})" if mark else ""
        context = f", {e.context}" if e.context else ""
        raise ScenarioError([Problem(source, line, "", f"YAML syntax error: {e.problem}{context}{col}")]) from None
    except yaml.reader.ReaderError as e:
        raise ScenarioError([_reader_problem(text, source, e)]) from None
    except yaml.YAMLError as e:
        raise ScenarioError([Problem(source, None, "", f"YAML error: {e}")]) from None
    finally:
        loader.dispose()


def _reader_problem(text: str, source: str, e: yaml.reader.ReaderError) -> Problem:
    """A character YAML does not allow (NUL, most control characters), with its line."""
    line = text.count("\n", 0, e.position) + 1
    col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
    char = e.character if isinstance(e.character, str) else chr(e.character)
    return Problem(source, line, "", f"character #x{ord(char):04x} is not allowed in YAML (column {col}); "
                                     f"remove it (a binary or corrupted file?)")


def _index_lines(loader: yaml.SafeLoader, source: str, node: yaml.Node, loc: Loc, lines: dict[Loc, int],
                 problems: list[Problem], active: set[int]) -> None:
    """Record the line of every key path; report duplicate keys (PyYAML keeps the last silently)."""
    if id(node) in active:  # recursive alias
        return
    active = active | {id(node)}
    if isinstance(node, yaml.MappingNode):
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in first_line:
                problems.append(Problem(source, line, format_loc(loc + (key,)),
                                        f"duplicate key (first on line {first_line[key]}); keep only one"))
                continue
            first_line[key] = line
            lines[loc + (key,)] = line
            _index_lines(loader, source, value_node, loc + (key,), lines, problems, active)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[loc + (i,)] = item.start_mark.line + 1
            _index_lines(loader, source, item, loc + (i,), lines, problems, active)


# --- walking the schema along a path -----------------------------------------
def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and Optional[...] down to the type that matters."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is Union and type(None) in typing.get_args(tp):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = rest[0] if len(rest) == 1 else Union[tuple(rest)]
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return inspect.isclass(tp) and issubclass(tp, BaseModel)


def _models_for(tp: Any, node: Any) -> list[type[BaseModel]]:
    """The model(s) a raw mapping is validated as; a union picks by its `kind`."""
    tp = _unwrap(tp)
    if _is_model(tp):
        return [tp]
    if typing.get_origin(tp) is Union:
        members = [m for m in typing.get_args(tp) if _is_model(m)]
        kind = node.get("kind") if isinstance(node, dict) else None
        chosen = [m for m in members if typing.get_args(m.model_fields["kind"].annotation) == (kind,)]
        return chosen or members
    return []


def _child_type(tp: Any, node: Any, key: Any) -> Any:
    """Type of `node[key]` when `node` is validated as `tp` (None if unknown)."""
    models = _models_for(tp, node)
    if models:
        fields = [m.model_fields[key] for m in models if key in m.model_fields]
        return fields[0].annotation if fields else None
    tp = _unwrap(tp)
    args = typing.get_args(tp)
    if typing.get_origin(tp) is dict:
        return args[1]
    if typing.get_origin(tp) is list:
        return args[0]
    return Any if tp is Any else None


def _raw_child(node: Any, key: Any) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None


def _type_at(raw: Any, loc: Loc) -> Any:
    tp, node = Scenario, raw
    for key in loc:
        tp = _child_type(tp, node, key)
        if tp is None:
            return None
        node = _raw_child(node, key)
    return tp


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"valid names: {', '.join(choices)}"


def _is_container(tp: Any) -> bool:
    tp = _unwrap(tp)
    return tp is Any or bool(_models_for(tp, None)) or typing.get_origin(tp) in (dict, list)


def _type_name(tp: Any) -> str:
    tp = _unwrap(tp)
    if typing.get_origin(tp) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


class PathError(Exception):
    def __init__(self, loc: Loc, message: str):
        self.loc, self.message = loc, message
        super().__init__(f"{format_loc(loc)}: {message}")


def set_path(raw: dict[str, Any], path: str, value: Any) -> Loc:
    """Set `value` at dotted `path` in `raw` (in place), checked against the schema.

    Missing mappings on the way are created; an unknown field, a list index out
    of range or a path through a scalar raises PathError. Returns the resolved
    location (dict keys that are themselves dotted paths stay one element).
    """
    segments = path.split(".")
    if not path or any(not s for s in segments):
        raise PathError((), f"bad path {path!r}; expected names separated by dots, e.g. links.loss_pct")
    node: Any = raw
    tp: Any = Scenario
    dotted = False
    loc: Loc = ()
    i = 0
    while True:
        seg = segments[i]
        models = _models_for(tp, node)
        key: Union[str, int]
        if models and not isinstance(node, dict):
            raise PathError(loc, f"is {_describe(node)}, not a mapping; cannot set {seg!r} inside it")
        if models:
            fields = {name: f for m in models for name, f in m.model_fields.items()}
            if seg not in fields:
                raise PathError(loc + (seg,), f"unknown field; {_did_you_mean(seg, fields)}")
            key, field = seg, fields[seg]
            child_tp = field.annotation
            child_dotted = bool((field.json_schema_extra or {}).get("dotted_keys"))  # type: ignore[union-attr]
            i += 1
        elif isinstance(node, list):
            if not seg.lstrip("-").isdigit():
                raise PathError(loc, f"is a list; use an index such as {format_loc(loc)}.0, got {seg!r}")
            key = int(seg)
            if not 0 <= key < len(node):
                raise PathError(loc + (key,), f"index out of range; the list has {len(node)} item(s)")
            child_tp, child_dotted = _child_type(tp, node, key), False
            i += 1
        elif isinstance(node, dict):
            # Keys of grid/set are whole dotted paths: the rest of the path is one key.
            key = ".".join(segments[i:]) if dotted else seg
            child_tp, child_dotted = _child_type(tp, node, key), False
            i = len(segments) if dotted else i + 1
        else:
            raise PathError(loc, f"is {_describe(node)}, not a mapping or list; cannot set {seg!r} inside it")
        loc += (key,)
        if i == len(segments):
            node[key] = value
            return loc
        if not _is_container(child_tp):
            raise PathError(loc, f"is a single value ({_type_name(child_tp)}); "
                                 f"it has no field {segments[i]!r}")
        child = _raw_child(node, key)
        if child is None:
            # Create the mapping on the way (a list cannot be grown this way).
            if typing.get_origin(_unwrap(child_tp)) is list:
                child = []
            else:
                child = node[key] = {}
        node, tp, dotted = child, child_tp, child_dotted


# --- overrides --------------------------------------------------------------
def _parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise PathError((), "expected key.path=value, e.g. workload.iterations=5")
    path, _, value_text = text.partition("=")
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else None
    except yaml.YAMLError as e:
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise PathError((), f"cannot parse the value {value_text!r} as YAML: {reason}; "
                            f"quote strings that contain YAML syntax") from None
    return path.strip(), value


def _apply_overrides(raw: dict[str, Any], overrides: Iterable[str], source: _Source) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    problems = []
    for text in overrides:
        try:
            path, value = _parse_override(text)
            source.origins[set_path(out, path, value)] = text
        except PathError as e:
            problems.append(Problem(source.file, None, format_loc(e.loc) if e.loc else "", e.message, origin=text))
    if problems:
        raise ScenarioError(problems)
    return out


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A copy of `raw` with each `a.b.c=value` applied (value parsed as YAML)."""
    return _apply_overrides(raw, overrides, _Source(None))


# --- validation -------------------------------------------------------------
_EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "string_type": "a string", "bool_type": "true or false", "bool_parsing": "true or false",
    "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value} (a number)"
    if isinstance(value, str):
        short = value if len(value) <= 40 else value[:37] + "..."
        return f"{short!r} (a string)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _explain(err: dict[str, Any], raw: Any) -> tuple[Loc, str]:
    """A pydantic error as (location, message a person can act on)."""
    loc: Loc = tuple(err["loc"])
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    # The workload union puts its tag in the location: workload.allreduce.sizes.
    if loc[:1] == ("workload",) and len(loc) > 1 and loc[1] in workload_models():
        loc = loc[:1] + loc[2:]
    if kind == "extra_forbidden":
        parent = _models_for(_type_at(raw, loc[:-1]), _raw_child_at(raw, loc[:-1]))
        fields = [f for m in parent for f in m.model_fields]
        return loc, f"unknown field; {_did_you_mean(str(loc[-1]), fields)}"
    if kind == "missing":
        return loc, "required field is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        kinds = list(workload_models())
        if kind == "union_tag_not_found":
            return loc + ("kind",), f"required field is missing; one of: {', '.join(kinds)}"
        tag = str(ctx.get("tag"))
        return loc + ("kind",), f"unknown workload kind {tag!r}; {_did_you_mean(tag, kinds)}"
    if kind in _EXPECTED:
        return loc, f"expected {_EXPECTED[kind]}, got {_describe(value)}"
    if kind == "literal_error":
        msg = f"expected one of {ctx.get('expected')}, got {_describe(value)}"
        choices = typing.get_args(_unwrap(_type_at(raw, loc)))
        if isinstance(value, str) and choices:
            close = difflib.get_close_matches(value, [str(c) for c in choices], n=1)
            if close:
                msg += f"; did you mean {close[0]!r}?"
        return loc, msg
    if kind == "finite_number":
        return loc, f"must be a finite number, got {_describe(value)}"
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        return loc, f"must be {_BOUNDS[kind]} {bound}, got {_describe(value)}{_bounds_why(raw, loc)}"
    if kind == "too_short":
        return loc, f"needs at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length', 0)}"
    if kind == "string_pattern_mismatch":
        return loc, f"{value!r} is not allowed; use lowercase letters, digits, '_' and '-' " \
                    f"(pattern {ctx.get('pattern')})"
    if kind == "value_error":
        return loc, str(err["msg"]).removeprefix("Value error, ")
    return loc, f"{err['msg']}; got {_describe(value)}"


def _bounds_why(raw: Any, loc: Loc) -> str:
    """Why a field's bounds are what they are, where the field says (models.bounds_why)."""
    for model in _models_for(_type_at(raw, loc[:-1]), _raw_child_at(raw, loc[:-1])):
        field = model.model_fields.get(str(loc[-1]))
        extra = field.json_schema_extra if field is not None else None
        if isinstance(extra, dict) and extra.get("bounds_why"):
            return f"; {extra['bounds_why']}"
    return ""


def _raw_child_at(raw: Any, loc: Loc) -> Any:
    for key in loc:
        raw = _raw_child(raw, key)
    return raw


def validate_raw(raw: Any) -> tuple[Optional[Scenario], list[tuple[Loc, str]]]:
    """Validate a raw mapping: the model first, then the cross-field checks."""
    try:
        scenario = Scenario.model_validate(raw, context={SKIP_SEMANTIC: True})
    except ValidationError as e:
        return None, [_explain(err, raw) for err in e.errors()]  # type: ignore[arg-type]
    problems = semantic_problems(scenario) + ina_problems(scenario)
    if problems:
        return None, problems
    scenario._raw = copy.deepcopy(raw)
    return scenario, []


def ina_problems(scenario: Scenario) -> list[tuple[Loc, str]]:
    """The in-switch aggregation jobs this scenario's workload will ask for must
    fit the switch (its worker bitmap), checked with the scenario, not mid-run.

    The workload's runtime knows which settings aggregate in the switch
    (allreduce algorithm switch, p4sgd collective switch): ask it.
    """
    from testbed import wire  # noqa: PLC0415
    from testbed.scenario.point import Point  # noqa: PLC0415
    from testbed.workloads.base import get_runtime  # noqa: PLC0415

    try:
        runtime = get_runtime(scenario.workload.kind)
    except KeyError:
        return []  # a params model without a runtime: nothing runs it
    try:
        jobs = runtime.ina_jobs(Point(-1, "", "", {}, 0, 0, scenario))
    except ValueError as e:  # e.g. more jobs than workers
        return [(("workload",), str(e))]
    return [(("topology", "workers"),
             f"{len(job.workers)} workers in in-switch aggregation job {job.job_id}; the switch's "
             f"worker bitmap holds {wire.MAX_WORKERS} (testbed/wire.py MAX_WORKERS); use at most "
             f"{wire.MAX_WORKERS} workers per job, or a host algorithm")
            for job in jobs if len(job.workers) > wire.MAX_WORKERS]
