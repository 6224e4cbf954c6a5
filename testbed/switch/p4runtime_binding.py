"""The soft switch's program as P4Runtime sees it: P4Info ids bound to the
pipeline's tables, actions, counters and registers (names, bitwidths and sizes
checked against the program), P4Runtime bytestrings to and from ints, and the
error a refused request raises. Used by the P4Runtime service
(testbed/switch/p4runtime_server.py)."""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import grpc
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

SC = grpc.StatusCode


class P4RTError(Exception):
    """A request the server refuses: gRPC code + a message that says why."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message



# --- bytestrings ---------------------------------------------------------------

def decode_value(data: bytes, bitwidth: int, what: str) -> int:
    """A P4Runtime bytestring (canonical or padded) -> int that fits bit<bitwidth>."""
    if not data:
        raise P4RTError(SC.INVALID_ARGUMENT, f"{what}: empty bytestring")
    nbytes = (bitwidth + 7) // 8
    if len(data) > nbytes:
        raise P4RTError(SC.INVALID_ARGUMENT,
                        f"{what}: {len(data)} bytes, but bit<{bitwidth}> takes at most {nbytes}")
    v = int.from_bytes(data, "big")
    if v >> bitwidth:
        raise P4RTError(SC.INVALID_ARGUMENT, f"{what}: {v:#x} does not fit in bit<{bitwidth}>")
    return v


def encode_value(v: int) -> bytes:
    """int -> canonical bytestring (no leading zero bytes, at least one byte)."""
    v = int(v)
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


# --- the program as P4Info names it ------------------------------------------------

@dataclass(frozen=True)
class _Param:
    id: int
    name: str
    bitwidth: int


class _TableBinding:
    """One P4Info table bound to the pipeline's Table of the same name."""

    def __init__(self, info: p4info_pb2.Table, actions: dict[int, p4info_pb2.Action], table):
        self.id = info.preamble.id
        self.name = info.preamble.name
        self.table = table
        self.fields = {mf.id: _Param(mf.id, mf.name, mf.bitwidth) for mf in info.match_fields}
        self.field_ids = {p.name: p.id for p in self.fields.values()}
        self.actions: dict[int, tuple[str, dict[int, _Param]]] = {}
        self.default_only: set[int] = set()
        self.table_only: set[int] = set()
        for ref in info.action_refs:
            a = actions[ref.id]
            self.actions[ref.id] = (a.preamble.name,
                                    {p.id: _Param(p.id, p.name, p.bitwidth) for p in a.params})
            if ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
                self.default_only.add(ref.id)
            elif ref.scope == p4info_pb2.ActionRef.TABLE_ONLY:
                self.table_only.add(ref.id)
        self.action_ids = {name: aid for aid, (name, _) in self.actions.items()}
        self.const_default = info.const_default_action_id != 0
        self.initial_default = (table.default[0], dict(table.default[1]))

    # -- decoding requests ---------------------------------------------------------
    def decode_match(self, fms) -> dict[str, int]:
        match: dict[str, int] = {}
        for fm in fms:
            f = self.fields.get(fm.field_id)
            if f is None:
                raise P4RTError(SC.INVALID_ARGUMENT,
                                f"{self.name}: no match field with id {fm.field_id}")
            if fm.WhichOneof("field_match_type") != "exact":
                raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: field {f.name} is an exact "
                                f"match, got {fm.WhichOneof('field_match_type')}")
            if f.name in match:
                raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: field {f.name} given twice")
            match[f.name] = decode_value(fm.exact.value, f.bitwidth, f"{self.name} match {f.name}")
        missing = [f.name for f in self.fields.values() if f.name not in match]
        if missing:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: missing match field(s) {missing} "
                            "(exact fields cannot be wildcarded)")
        return match

    def decode_action(self, ta: pb.TableAction, default: bool) -> tuple[str, dict[str, int]]:
        kind = ta.WhichOneof("type")
        if kind is None:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: the entry has no action")
        if kind != "action":
            raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: has no action profile; "
                            f"use a direct action, not {kind}")
        a = ta.action
        if a.action_id not in self.actions:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: action id {a.action_id} is not "
                            f"one of its actions {sorted(self.action_ids)}")
        name, params = self.actions[a.action_id]
        if not default and a.action_id in self.default_only:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: {name} is a default-only action")
        if default and a.action_id in self.table_only:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{self.name}: {name} cannot be the default action")
        values: dict[str, int] = {}
        for p in a.params:
            spec = params.get(p.param_id)
            if spec is None:
                raise P4RTError(SC.INVALID_ARGUMENT, f"{name}: no parameter with id {p.param_id}")
            if spec.name in values:
                raise P4RTError(SC.INVALID_ARGUMENT, f"{name}: parameter {spec.name} given twice")
            values[spec.name] = decode_value(p.value, spec.bitwidth, f"{name}.{spec.name}")
        missing = [s.name for s in params.values() if s.name not in values]
        if missing:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{name}: missing parameter(s) {missing}")
        return name, values

    # -- encoding reads ------------------------------------------------------------
    def encode(self, ent: pb.Entity, match: dict[str, int], action: str, params: dict[str, int],
               metadata: bytes = b"", default: bool = False) -> None:
        te = ent.table_entry
        te.table_id = self.id
        te.is_default_action = default
        for name, v in match.items():
            fm = te.match.add()
            fm.field_id = self.field_ids[name]
            fm.exact.value = encode_value(v)
        aid = self.action_ids[action]
        te.action.action.action_id = aid
        for spec in self.actions[aid][1].values():
            p = te.action.action.params.add()
            p.param_id = spec.id
            p.value = encode_value(params[spec.name])
        if metadata:
            te.metadata = metadata


def _pipeline_objects(pipeline) -> tuple[dict, dict, dict]:
    tables = getattr(pipeline, "tables", None)
    tables = tables() if callable(tables) else (tables or {})
    return (dict(tables), dict(getattr(pipeline, "counters_by_name", None) or {}),
            dict(getattr(pipeline, "registers", None) or {}))


def check_p4info(p4info: p4info_pb2.P4Info, pipeline) -> list[str]:
    """What in `p4info` does not describe `pipeline` (empty: it matches), by name."""
    tables, counters, registers = _pipeline_objects(pipeline)
    actions = {a.preamble.id: a for a in p4info.actions}
    problems: list[str] = []
    seen = set()
    for t in p4info.tables:
        name = t.preamble.name
        seen.add(name)
        pt = tables.get(name)
        if pt is None:
            problems.append(f"table {name!r} is not in the program")
            continue
        fields = {mf.name: mf for mf in t.match_fields}
        if set(fields) != set(pt.match_fields):
            problems.append(f"table {name!r}: match fields {sorted(fields)} != program's "
                            f"{sorted(pt.match_fields)}")
        for fname, mf in fields.items():
            if fname in pt.match_fields and mf.bitwidth != pt.match_fields[fname]:
                problems.append(f"table {name!r}: field {fname!r} is bit<{mf.bitwidth}>, "
                                f"the program's is bit<{pt.match_fields[fname]}>")
            if mf.match_type != p4info_pb2.MatchField.EXACT:
                problems.append(f"table {name!r}: field {fname!r} must be an EXACT match")
        refs = {}
        for ref in t.action_refs:
            a = actions.get(ref.id)
            if a is None:
                problems.append(f"table {name!r}: action id {ref.id} is not in the P4Info")
                continue
            refs[a.preamble.name] = (a, ref.scope)
        if set(refs) != set(pt.actions):
            problems.append(f"table {name!r}: actions {sorted(refs)} != program's {sorted(pt.actions)}")
        for aname, (a, scope) in refs.items():
            spec = pt.actions.get(aname)
            if spec is None:
                continue
            params = {p.name: p.bitwidth for p in a.params}
            if params != spec:
                problems.append(f"action {aname!r}: params {params} != program's {spec}")
            if (scope == p4info_pb2.ActionRef.DEFAULT_ONLY) != (aname in pt.default_only):
                problems.append(f"table {name!r}: action {aname!r} default-only scope differs")
        if t.size and t.size != pt.size:
            problems.append(f"table {name!r}: size {t.size} != program's {pt.size}")
        const = bool(getattr(pt, "const_default", False))
        if const != bool(t.const_default_action_id):
            problems.append(f"table {name!r}: default action is {'' if const else 'not '}const "
                            "in the program")
        elif const and actions.get(t.const_default_action_id) is not None and \
                actions[t.const_default_action_id].preamble.name != pt.default[0]:
            problems.append(f"table {name!r}: const default action is {pt.default[0]!r} "
                            "in the program")
    problems += [f"program table {n!r} is missing from the P4Info" for n in tables if n not in seen]
    for kind, infos, objs in (("counter", p4info.counters, counters),
                              ("register", p4info.registers, registers)):
        names = set()
        for c in infos:
            name = c.preamble.name
            names.add(name)
            o = objs.get(name)
            if o is None:
                problems.append(f"{kind} {name!r} is not in the program")
                continue
            if c.size != o.size:
                problems.append(f"{kind} {name!r}: size {c.size} != program's {o.size}")
            if kind == "register":
                bw = c.type_spec.bitstring.bit.bitwidth
                if not c.type_spec.bitstring.HasField("bit") or bw != o.bitwidth:
                    problems.append(f"register {name!r}: must be bit<{o.bitwidth}>")
        problems += [f"program {kind} {n!r} is missing from the P4Info" for n in objs if n not in names]
    return problems


class ProgramBinding:
    """P4Info ids <-> the pipeline's objects, built once per pipeline config."""

    def __init__(self, p4info: p4info_pb2.P4Info, pipeline, program: str):
        problems = check_p4info(p4info, pipeline)
        if problems:
            shown = "; ".join(problems[:12]) + (f"; ... ({len(problems) - 12} more)"
                                                 if len(problems) > 12 else "")
            raise P4RTError(SC.INVALID_ARGUMENT,
                            f"P4Info does not match the soft switch's program {program!r}: {shown}")
        tables, counters, registers = _pipeline_objects(pipeline)
        actions = {a.preamble.id: a for a in p4info.actions}
        self.pipeline = pipeline
        self.program = program
        self.tables = {t.preamble.id: _TableBinding(t, actions, tables[t.preamble.name])
                       for t in p4info.tables}
        self.counters = {c.preamble.id: (c.preamble.name, counters[c.preamble.name])
                         for c in p4info.counters}
        self.registers = {r.preamble.id: (r.preamble.name, registers[r.preamble.name])
                          for r in p4info.registers}
        self.names = {o.preamble.id: o.preamble.name for o in itertools.chain(
            p4info.tables, p4info.actions, p4info.counters, p4info.registers)}
        self.metadata: dict[tuple, bytes] = {}   # (table, match key) -> controller metadata

    def table(self, table_id: int) -> _TableBinding:
        tb = self.tables.get(table_id)
        if tb is None:
            raise P4RTError(SC.INVALID_ARGUMENT, f"Invalid P4 id: no table with id "
                            f"{table_id:#x} in the P4Info")
        return tb

    def counter(self, counter_id: int):
        c = self.counters.get(counter_id)
        if c is None:
            raise P4RTError(SC.INVALID_ARGUMENT, f"Invalid P4 id: no counter with id "
                            f"{counter_id:#x} in the P4Info")
        return c

    def register(self, register_id: int):
        r = self.registers.get(register_id)
        if r is None:
            raise P4RTError(SC.INVALID_ARGUMENT, f"Invalid P4 id: no register with id "
                            f"{register_id:#x} in the P4Info")
        return r

    def state_lock(self):
        """The data plane's batch lock, when the pipeline has one (InaPipeline does)."""
        lock = getattr(self.pipeline, "lock", None) or getattr(self.pipeline, "_lock", None)
        return lock if lock is not None else contextlib.nullcontext()


def _key(table: str, match: dict[str, int]) -> tuple:
    return (table, tuple(sorted(match.items())))


def _indices(index_msg_set: bool, index: int, size: int, what: str) -> range:
    if not index_msg_set:
        return range(size)
    if not 0 <= index < size:
        raise P4RTError(SC.OUT_OF_RANGE, f"{what}: index {index} not in 0..{size - 1}")
    return range(index, index + 1)


