"""p4/ina.p4 as p4c compiles it: no warnings, and the P4Info p4c generates is
the repo's (p4/ina.p4info.txtpb) in every name, width, size, match kind,
action scope, const default and annotation; only ids differ (p4c hashes them;
the controller looks everything up by name). Needs only p4c-bm2-ss (marker
p4c_only): runs whenever the compiler is found, with or without BMv2."""
from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from testbed.switch import bmv2

pytestmark = pytest.mark.p4c_only
REPO = Path(__file__).resolve().parents[2]


def contract(p4info: p4info_pb2.P4Info) -> dict:
    """Everything the control plane relies on, ids left out: names, widths,
    sizes, match kinds, action scopes, const defaults, counter units."""
    names = {o.preamble.id: o.preamble.name for kind in ("tables", "actions") for o in
             getattr(p4info, kind)}
    return {
        "tables": {t.preamble.name: {
            "match": [(m.name, m.bitwidth, p4info_pb2.MatchField.MatchType.Name(m.match_type))
                      for m in t.match_fields],
            "actions": sorted((names[a.id], p4info_pb2.ActionRef.Scope.Name(a.scope))
                              for a in t.action_refs),
            "const_default": names.get(t.const_default_action_id), "size": t.size}
            for t in p4info.tables},
        "actions": {a.preamble.name: [(p.name, p.bitwidth) for p in a.params]
                    for a in p4info.actions},
        "counters": {c.preamble.name: (p4info_pb2.CounterSpec.Unit.Name(c.spec.unit), c.size)
                     for c in p4info.counters},
        "registers": {r.preamble.name: (r.type_spec.bitstring.bit.bitwidth, r.size)
                      for r in p4info.registers},
    }


def annotations(p4info: p4info_pb2.P4Info) -> dict[str, list[str]]:
    """Annotations of tables and actions, and of each table's action references."""
    names = {a.preamble.id: a.preamble.name for a in p4info.actions}
    out = {o.preamble.name: list(o.preamble.annotations) for kind in ("tables", "actions")
           for o in getattr(p4info, kind) if o.preamble.annotations}
    out.update({f"{t.preamble.name} -> {names[a.id]}": list(a.annotations)
                for t in p4info.tables for a in t.action_refs if a.annotations})
    return out


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return bmv2.compile_p4(REPO / "p4" / "ina.p4", tmp_path_factory.mktemp("p4c-build"))


def test_ina_p4_compiles_without_warnings(build):
    assert build.json_path.stat().st_size > 0
    assert bmv2.compile_warnings(build) == []


def test_compiled_p4info_is_the_repos_ids_aside(build):
    compiled = text_format.Parse(build.p4info_path.read_text(), p4info_pb2.P4Info(),
                                 allow_unknown_field=True)
    checked_in = text_format.Parse((REPO / "p4" / "ina.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    assert contract(compiled) == contract(checked_in)
    assert annotations(compiled) == annotations(checked_in)


