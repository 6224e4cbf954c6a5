"""p4/ina.p4info.txtpb parses, and its names, widths and sizes agree with
p4/ina.p4 and with the soft switch's pipeline (testbed/switch/ina)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from testbed.switch.ina import InaPipeline

import ina_harness as H

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
P4 = ROOT / "p4" / "ina.p4"
P4INFO = ROOT / "p4" / "ina.p4info.txtpb"
TNA = ROOT / "p4" / "tofino" / "ina_tna.p4"
PY_DIR = ROOT / "testbed" / "switch" / "ina"
PREFIX = p4info_pb2.P4Ids


@pytest.fixture(scope="module")
def info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO.read_text(), p4info_pb2.P4Info())


@pytest.fixture(scope="module")
def src() -> str:
    return P4.read_text()


@pytest.fixture(scope="module")
def pipe() -> InaPipeline:
    return InaPipeline(H.pipeline_config(H.job_config()))


def all_names(info):
    for group in (info.tables, info.actions, info.counters, info.registers):
        for obj in group:
            yield obj.preamble.name


# -- P4 source helpers --------------------------------------------------------------
def defines(src: str) -> dict[str, str]:
    return dict(re.findall(r"^#define\s+(\w+)\s+(\S+)", src, re.M))


def evaluate(expr: str, src: str) -> int:
    d = defines(src)
    expr = re.sub(r"\b[A-Z_][A-Z0-9_]*\b", lambda m: d.get(m.group(0), m.group(0)), expr)
    assert re.fullmatch(r"[\d\s*+()]+", expr), expr
    return eval(expr)  # noqa: S307 - digits and * + ( ) only


def control_body(src: str, control: str) -> str:
    """The body of `control`, or of the control type an instance @named
    ".<control>" has (ina.p4's two DropSimulator instances)."""
    inst = re.search(rf'@name\("\.{control}"\)\s*(\w+)\(\)', src)
    if inst:
        control = inst.group(1)
    m = re.search(rf"^control {control}\(", src, re.M)
    assert m, f"control {control} not in ina.p4"
    end = re.search(r"^(control |V1Switch)", src[m.end():], re.M)
    return src[m.start(): m.end() + (end.start() if end else len(src))]


def declaration(src: str, name: str) -> str:
    """Source text from the declaration of P4Info object `name` to its ';' or body."""
    ctl, local = name.rsplit(".", 1)
    m = re.search(rf'@name\("\.{re.escape(name)}"\)\s*\n?\s*', src)
    if m:
        rest = src[m.end():]
    else:
        body = control_body(src, ctl)
        m = re.search(rf"^\s*(?:@\w+\s*)?(table|action)\s+{local}\b|^\s*(register|counter)\b[^;\n]*\b{local};",
                      body, re.M)
        assert m, f"{name}: no declaration of {local} in control {ctl}"
        rest = body[m.start():].lstrip()
    if not rest.startswith(("table", "action")):
        return rest[: rest.index(";")]
    depth, i = 0, rest.index("{")
    for j in range(i, len(rest)):                   # up to the matching brace
        depth += {"{": 1, "}": -1}.get(rest[j], 0)
        if depth == 0:
            return rest[: j + 1]
    raise AssertionError(f"{name}: unbalanced braces")


def header_widths(src: str) -> dict[str, int]:
    """'hdr.<member>.<field>' -> bit width, from the header types and headers_t."""
    types = {}
    for hname, body in re.findall(r"header (\w+)\s*\{(.*?)\}", src, re.S):
        types[hname] = {f: int(w) for w, f in re.findall(r"bit<(\d+)>\s+(\w+);", body)}
    members = re.search(r"struct headers_t\s*\{(.*?)\}", src, re.S).group(1)
    out = {}
    for t, m in re.findall(r"(\w+)\s+(\w+);", members):
        for f, w in types.get(t, {}).items():
            out[f"hdr.{m}.{f}"] = w
    out["standard_metadata.egress_rid"] = 16     # v1model
    return out


# -- the P4Info itself ---------------------------------------------------------------
def test_p4info_parses_and_ids_follow_prefixes(info):
    assert info.pkg_info.arch == "v1model"
    groups = {PREFIX.TABLE: info.tables, PREFIX.ACTION: info.actions,
              PREFIX.COUNTER: info.counters, PREFIX.REGISTER: info.registers}
    ids = []
    local = [n.rsplit(".", 1)[1] for n in all_names(info)]
    for prefix, objs in groups.items():
        assert len(objs) > 0
        for o in objs:
            assert o.preamble.id >> 24 == prefix, o.preamble.name
            short = o.preamble.name.rsplit(".", 1)[1]    # p4c: the full name where shared
            assert o.preamble.alias == (short if local.count(short) == 1 else o.preamble.name)
            ids.append(o.preamble.id)
    assert len(ids) == len(set(ids))
    names = list(all_names(info))
    assert len(names) == len(set(names))
    action_ids = {a.preamble.id for a in info.actions}
    for t in info.tables:
        assert {r.id for r in t.action_refs} <= action_ids
    for a in info.actions:
        assert [p.id for p in a.params] == list(range(1, len(a.params) + 1))


def test_the_names_the_brief_asks_for(info):
    names = set(all_names(info))
    for n in ["Forward.l2_forward", "Forward.set_egress", "Forward.flood", "Ingress.job_table",
              "Egress.replica_rewrite", "Aggregator.worker_bitmap", "Aggregator.worker_count",
              "Aggregator.agg_values", "Aggregator.result_exponent", "DropSimulator.drop_probability",
              "DropSimulator.dropped", "EgressDropSimulator.drop_probability",
              "EgressDropSimulator.dropped", "Ingress.ina_packets", "Ingress.ina_results",
              "Ingress.ina_retransmits", "Ingress.ina_duplicates_dropped", "Ingress.bad_job",
              "Ingress.bad_worker", "Ingress.malformed"]:
        assert n in names, n


# -- P4Info <-> ina.p4 ------------------------------------------------------------------
def test_every_p4info_name_is_declared_in_ina_p4(info, src):
    for name in all_names(info):
        declaration(src, name)                      # asserts


def test_tables_agree_with_ina_p4(info, src):
    actions = {a.preamble.id: a.preamble.name for a in info.actions}
    widths = header_widths(src)
    for t in info.tables:
        decl = declaration(src, t.preamble.name)
        keys = re.findall(r"([\w.]+)\s*:\s*exact\s*@name\(\"(\w+)\"\)", decl)
        assert [k for _, k in keys] == [m.name for m in t.match_fields], t.preamble.name
        for (expr, _), m in zip(keys, t.match_fields):
            assert widths[expr] == m.bitwidth, (t.preamble.name, expr)
        listed = re.search(r"actions\s*=\s*\{(.*?)\}", decl, re.S).group(1)
        local = [re.sub(r"@\w+\s*", "", a).strip() for a in listed.split(";") if a.strip()]
        assert sorted(local) == sorted(actions[r.id].rsplit(".", 1)[1] for r in t.action_refs)
        for r in t.action_refs:
            default_only = actions[r.id].rsplit(".", 1)[1] in re.findall(r"@defaultonly\s+(\w+)", listed)
            assert default_only == (r.scope == p4info_pb2.ActionRef.DEFAULT_ONLY), actions[r.id]
        size = re.search(r"size\s*=\s*([^;]+);", decl).group(1)
        assert evaluate(size, src) == t.size, t.preamble.name
        const = re.search(r"const\s+default_action\s*=\s*(\w+)", decl)
        if t.const_default_action_id:
            assert const and const.group(1) == actions[t.const_default_action_id].rsplit(".", 1)[1]
        else:
            assert const is None, t.preamble.name


def test_action_params_agree_with_ina_p4(info, src):
    for a in info.actions:
        decl = declaration(src, a.preamble.name)
        params = re.findall(r"bit<(\d+)>\s+(\w+)", decl[: decl.index(")")])
        assert [(p.name, p.bitwidth) for p in a.params] == [(n, int(w)) for w, n in params], a.preamble.name


def test_registers_and_counters_agree_with_ina_p4(info, src):
    for r in info.registers:
        decl = declaration(src, r.preamble.name)
        w, size = re.search(r"register<bit<(\d+)>>\((.*?)\)", decl).groups()
        assert (int(w), evaluate(size, src)) == (r.type_spec.bitstring.bit.bitwidth, r.size), r.preamble.name
    for c in info.counters:
        decl = declaration(src, c.preamble.name)
        size, kind = re.search(r"counter\((.*?),\s*CounterType\.(\w+)\)", decl).groups()
        assert evaluate(size, src) == c.size and kind == "packets", c.preamble.name
        assert c.spec.unit == p4info_pb2.CounterSpec.PACKETS


# -- P4Info <-> soft switch ----------------------------------------------------------------
def test_every_p4info_name_appears_in_the_python_pipeline(info):
    py = "\n".join(p.read_text() for p in PY_DIR.glob("*.py"))
    for name in all_names(info):
        local = name.rsplit(".", 1)[1]
        assert f'"{name}"' in py or (name.startswith("Ingress.") and f'"{local}"' in py), name


def test_python_tables_mirror_p4info(info, pipe):
    actions = {a.preamble.id: a for a in info.actions}
    assert set(pipe.tables) == {t.preamble.name for t in info.tables}
    for t in info.tables:
        py = pipe.tables[t.preamble.name]
        assert py.match_fields == {m.name: m.bitwidth for m in t.match_fields}
        assert py.size == t.size
        assert py.const_default == bool(t.const_default_action_id), t.preamble.name
        if t.const_default_action_id:
            assert py.default[0] == actions[t.const_default_action_id].preamble.name
        want = {actions[r.id].preamble.name: {p.name: p.bitwidth for p in actions[r.id].params}
                for r in t.action_refs}
        assert py.actions == want, t.preamble.name
        assert py.default_only == {actions[r.id].preamble.name for r in t.action_refs
                                   if r.scope == p4info_pb2.ActionRef.DEFAULT_ONLY}


def test_python_registers_and_counters_mirror_p4info(info, pipe):
    assert set(pipe.registers) == {r.preamble.name for r in info.registers}
    for r in info.registers:
        py = pipe.registers[r.preamble.name]
        assert (py.size, py.bitwidth) == (r.size, r.type_spec.bitstring.bit.bitwidth), r.preamble.name
    assert set(pipe.counters_by_name) == {c.preamble.name for c in info.counters}
    for c in info.counters:
        assert pipe.counters_by_name[c.preamble.name].size == c.size, c.preamble.name


# -- the Tofino version keeps the names ---------------------------------------------------
def test_tofino_program_uses_the_same_names(info):
    """Every P4Info object is declared in the TNA program under the same name,
    or the TNA program's header comment names it and says why not."""
    tna = TNA.read_text()
    header = tna[: tna.index("*/")]
    code = re.sub(r"/\*.*?\*/|//[^\n]*", "", tna, flags=re.S)
    missing = []
    for name in all_names(info):
        local = name.rsplit(".", 1)[1]
        declared = f'@name(".{name}")' in code or re.search(
            rf"\b(table|action)\s+{local}\b|>\s*\(.*?\)\s+{local};|Counter<.*?\)\s+{local};", code)
        if not declared:
            missing.append(name)
            assert name in header, f"{name}: neither in {TNA.name} nor in its list of differences"
    assert set(missing) <= {"Aggregator.agg_values", "Aggregator.worker_count"}, missing
