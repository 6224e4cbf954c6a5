"""Scenario schema, loader errors, overrides and sweep expansion."""
from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from testbed.scenario import (
    Scenario,
    ScenarioError,
    apply_overrides,
    expand_points,
    load_scenario,
    load_scenario_text,
    register_figure_names,
)
from testbed import wire
from testbed.scenario import models as scenario_models
from testbed.scenario.models import DEFAULT_MAX_POINTS
from testbed.scenario.reference import REGENERATE, render_markdown
from testbed.workloads import register_workload
from testbed.workloads.allreduce import AllreduceWorkload

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
MINIMAL = "name: t\nworkload: {kind: allreduce}\n"


def errors_of(text: str, overrides: tuple[str, ...] = (), source: str = "s.yaml") -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(text, source, overrides)
    return str(info.value).splitlines()


# --- loading ------------------------------------------------------------------
def test_quickstart_loads():
    scn = load_scenario(QUICKSTART)
    assert scn.name == "quickstart"
    assert scn.topology.kind == "star" and scn.topology.workers == 4
    assert scn.switch.backend == "soft"
    assert scn.links.bandwidth_mbps == 100
    assert scn.workload.kind == "allreduce"
    assert scn.workload.sizes == [64, 1024, 16384, 262144]
    assert (scn.workload.iterations, scn.workload.warmup) == (10, 2)
    assert scn.sweep.grid == {"workload.algorithm": ["switch", "ring", "ps"]}
    assert [c.name for c in scn.sweep.cases] == ["baseline", "straggler", "loss"]
    assert scn.figures == ["goodput_vs_size", "latency_cdf"]
    assert scn.hosts() == ["w1", "w2", "w3", "w4"]


def test_hosts_include_workload_hosts():
    scn = load_scenario_text(MINIMAL, "s.yaml", ["workload.algorithm=ps"])
    assert scn.hosts() == ["w1", "w2", "w3", "w4", "ps"]


def test_typo_in_key_names_file_line_path_and_suggestion(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("name: t\nworkload: {kind: allreduce}\ntopology:\n  kind: star\n  wrokers: 4\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == f"{path}:5: topology.wrokers: unknown field; did you mean 'workers'?"
    problem = info.value.problems[0]
    assert (problem.line, problem.path) == (5, "topology.wrokers")


def test_typo_in_workload_key_drops_the_union_tag_from_the_path():
    [line] = errors_of("name: t\nworkload:\n  kind: allreduce\n  iteratons: 5\n")
    assert line == "s.yaml:4: workload.iteratons: unknown field; did you mean 'iterations'?"


def test_wrong_type_says_expected_and_given():
    [line] = errors_of(MINIMAL + "topology:\n  workers: four\n")
    assert line == "s.yaml:4: topology.workers: expected an integer, got 'four' (a string)"
    [line] = errors_of(MINIMAL + "switch: {capture: 1}\n")
    assert "switch.capture: expected true or false, got 1 (an integer)" in line


def test_out_of_range_values():
    lines = errors_of(MINIMAL + "links:\n  loss_pct: 150\n  delay_ms: -1\n")
    assert "s.yaml:4: links.loss_pct: must be <= 100.0, got 150 (an integer)" in lines
    assert "s.yaml:5: links.delay_ms: must be >= 0.0, got -1 (an integer)" in lines


def test_literal_value_suggestion_and_unknown_workload_kind():
    [line] = errors_of("name: t\nworkload: {kind: allreduce, algorithm: rign}\n")
    assert "workload.algorithm: expected one of" in line and "did you mean 'ring'?" in line
    [line] = errors_of("name: t\nworkload: {kind: allreduc}\n")
    assert line == "s.yaml:2: workload.kind: unknown workload kind 'allreduc'; did you mean 'allreduce'?"


def test_missing_required_fields():
    lines = errors_of("description: x\n")
    assert "s.yaml:1: name: required field is missing" in lines
    assert "s.yaml:1: workload: required field is missing" in lines


def test_unknown_straggler_host():
    [line] = errors_of(MINIMAL + "stragglers:\n  - host: w7\n")
    assert line == "s.yaml:4: stragglers.0.host: unknown host 'w7'; hosts are w1, w2, w3, w4"
    # The PS exists only when the algorithm asks for it.
    assert errors_of(MINIMAL + "stragglers: [{host: ps}]\n")
    load_scenario_text(MINIMAL + "stragglers: [{host: ps}]\n", "s.yaml", ["workload.algorithm=ps"])


def test_other_cross_field_checks():
    lines = errors_of(MINIMAL + "topology: {kind: tree, workers: 2, leaves: 3}\n"
                      "links: {hosts: {w9: {loss_pct: 1}}}\nfigures: [nope]\n"
                      "sweep: {cases: [{name: a}, {name: a}], quick: {cases: [b]}}\n")
    text = "\n".join(lines)
    assert "topology.leaves: 3 leaves for 2 workers" in text
    assert "links.hosts.w9: unknown host 'w9'" in text
    assert "figures.0: unknown figure 'nope'" in text
    assert "sweep.cases.1.name: duplicate case name 'a'" in text
    assert "sweep.quick.cases.0: no case named 'b'" in text


def test_capture_bytes_defaults_to_whole_frames():
    sw = load_scenario_text(MINIMAL, "s.yaml").switch
    assert sw.capture is True and sw.capture_bytes is None
    # The quickstart keeps every header but not the payloads.
    quick = load_scenario(QUICKSTART).switch.capture_bytes
    assert scenario_models.MIN_CAPTURE_BYTES <= quick < 1500


def test_capture_bytes_must_keep_the_aggregation_headers():
    # Ethernet 14 + IPv4 20 + UDP 8 + INA header 16, as testbed.wire lays out a frame.
    assert scenario_models.MIN_CAPTURE_BYTES == wire.VALUES_OFFSET == 58
    [line] = errors_of(MINIMAL + "switch: {capture_bytes: 57}\n")
    assert line.startswith("s.yaml:3: switch.capture_bytes: must be >= 58, got 57 (an integer); a capture "
                           "keeps at least the headers `testbed pcap` decodes, Ethernet + IPv4 + UDP + "
                           "aggregation header = 58 bytes (testbed/wire.py)")
    assert load_scenario_text(MINIMAL + "switch: {capture_bytes: 58}\n", "s.yaml").switch.capture_bytes == 58
    [line] = errors_of(MINIMAL + "switch: {capture_bytes: 262145}\n")
    assert "switch.capture_bytes: must be <= 262144, got 262145" in line and "largest pcap snaplen" in line
    [line] = errors_of(MINIMAL, ("switch.capture_bytes=40",))
    assert "switch.capture_bytes: must be >= 58, got 40" in line and line.endswith(
        "(from --set switch.capture_bytes=40)")
    [line] = errors_of(MINIMAL + "switch: {capture_bytes: true}\n")
    assert "switch.capture_bytes: expected an integer, got true" in line


def test_capture_bytes_without_capture_is_an_error_that_says_how_to_fix_it():
    [line] = errors_of(MINIMAL + "switch: {capture: false, capture_bytes: 96}\n")
    assert "switch.capture_bytes: 96, but switch.capture is false (nothing is captured)" in line
    assert "--set switch.capture_bytes=null" in line
    # ... which is what turning capture off on the quickstart takes.
    [line] = errors_of(QUICKSTART.read_text(), ("switch.capture=false",))
    assert "switch.capture_bytes" in line
    scn = load_scenario(QUICKSTART, ["switch.capture=false", "switch.capture_bytes=null"])
    assert (scn.switch.capture, scn.switch.capture_bytes) == (False, None)


def test_pcap_snaplen_is_not_a_soft_switch_option():
    [line] = errors_of(MINIMAL + "switch: {options: {pcap_snaplen: 96}}\n")
    assert "switch.options.pcap_snaplen: set by the testbed from switch.capture_bytes" in line


def test_registered_figure_names_are_accepted():
    errors_of(MINIMAL + "figures: [speedup_vs_workers]\n")
    register_figure_names("speedup_vs_workers")
    try:
        load_scenario_text(MINIMAL + "figures: [speedup_vs_workers]\n", "s.yaml")
    finally:
        scenario_models.known_figures.discard("speedup_vs_workers")


@pytest.mark.parametrize("text, expected", [
    ("", "s.yaml: the file is empty"),
    ("# only a comment\n", "s.yaml: the file is empty"),
    ("- a\n- b\n", "s.yaml:1: the top level must be a mapping"),
    ("name: t\n  oops: [\n", "s.yaml:2: YAML syntax error:"),
    ("name: t\nname: u\n", "s.yaml:2: name: duplicate key (first on line 1)"),
])
def test_file_level_errors(text, expected):
    lines = errors_of(text)
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path / "nope.yaml")


# --- sweep validation at load time -------------------------------------------------
def test_bad_sweep_paths_and_values_fail_at_load():
    text = MINIMAL + (
        "sweep:\n"
        "  grid:\n"
        "    workload.algoritm: [ring]\n"
        "    workload.algorithm: [ring, pss]\n"
        "  cases:\n"
        "    - name: loss\n"
        "      set: {links.loss_pct: 200}\n"
        "  quick:\n"
        "    set: {workload.iterations: x}\n")
    lines = errors_of(text)
    assert "s.yaml:5: sweep.grid.workload.algoritm: unknown field; did you mean 'algorithm'?" in lines
    assert any(line.startswith("s.yaml:6: sweep.grid.workload.algorithm: expected one of") and "'pss'" in line
               for line in lines)
    assert "s.yaml:9: sweep.cases[loss].set.links.loss_pct: must be <= 100.0, got 200 (an integer)" in lines
    assert "s.yaml:11: sweep.quick.set.workload.iterations: expected an integer, got 'x' (a string)" in lines


def test_sweep_value_that_breaks_another_field_names_both():
    [line] = errors_of(MINIMAL + "stragglers: [{host: w4}]\nsweep:\n  grid:\n    topology.workers: [2, 4]\n")
    assert line == ("s.yaml:6: sweep.grid.topology.workers: value 2: stragglers.0.host: "
                    "unknown host 'w4'; hosts are w1, w2")


def test_conflicting_case_and_grid_combination_fails_at_load():
    text = MINIMAL + ("sweep:\n  grid: {workload.algorithm: [ring, ps]}\n"
                      "  cases: [{name: slowps, set: {stragglers: [{host: ps}]}}]\n")
    lines = errors_of(text)
    assert any("sweep.cases[slowps].set.stragglers" in line and "unknown host 'ps'" in line for line in lines)


# --- overrides ----------------------------------------------------------------------
def test_apply_overrides_parses_yaml_values_and_creates_mappings():
    raw = {"name": "t", "workload": {"kind": "allreduce"}, "stragglers": [{"host": "w2"}]}
    out = apply_overrides(raw, [
        "topology.workers=3", "links.loss_pct=1.5", "switch.capture=false",
        "workload.sizes=[1, 2]", "switch.options={a: 1}", "stragglers.0.delay_ms=5",
        "links.hosts.w2.loss_pct=3", "sweep.grid.workload.algorithm=[ring, ps]", "description=a=b",
    ])
    assert out["topology"] == {"workers": 3}
    assert out["links"] == {"loss_pct": 1.5, "hosts": {"w2": {"loss_pct": 3}}}
    assert out["switch"] == {"capture": False, "options": {"a": 1}}
    assert out["workload"]["sizes"] == [1, 2]
    assert out["stragglers"] == [{"host": "w2", "delay_ms": 5}]
    assert out["sweep"] == {"grid": {"workload.algorithm": ["ring", "ps"]}}
    assert out["description"] == "a=b"
    assert raw == {"name": "t", "workload": {"kind": "allreduce"}, "stragglers": [{"host": "w2"}]}


@pytest.mark.parametrize("override, expected", [
    ("topology.wrokers=5", "topology.wrokers: unknown field; did you mean 'workers'?"),
    ("topolgy.workers=5", "topolgy: unknown field; did you mean 'topology'?"),
    ("workload.itrations=5", "workload.itrations: unknown field; did you mean 'iterations'?"),
    ("stragglers.0.delay_ms=5", "stragglers.0: index out of range; the list has 0 item(s)"),
    ("topology.workers.x=1", "topology.workers: is a single value (int); it has no field 'x'"),
    ("workload.iterations", "expected key.path=value"),
    ("workload.sizes=[1,", "cannot parse the value"),
])
def test_override_errors_name_the_key(override, expected):
    with pytest.raises(ScenarioError) as info:
        apply_overrides({"name": "t", "workload": {"kind": "allreduce"}}, [override])
    message = str(info.value)
    assert message.startswith(expected) and message.endswith(f"(from --set {override})"), message


def test_override_validation_error_says_it_came_from_set():
    [line] = errors_of(MINIMAL, ("workload.iterations=0",))
    assert line == "s.yaml: workload.iterations: must be >= 1, got 0 (an integer) " \
                   "(from --set workload.iterations=0)"


def test_overrides_apply_to_quickstart():
    scn = load_scenario(QUICKSTART, ["workload.iterations=50", "links.loss_pct=2", "topology.workers=8"])
    assert (scn.workload.iterations, scn.links.loss_pct, scn.topology.workers) == (50, 2.0, 8)


# --- sweep expansion ---------------------------------------------------------------
def test_expansion_count_labels_and_params():
    points = expand_points(load_scenario(QUICKSTART))
    assert [p.label for p in points] == [
        "000-baseline-algorithm=switch-r0", "001-baseline-algorithm=ring-r0",
        "002-baseline-algorithm=ps-r0", "003-straggler-algorithm=switch-r0",
        "004-straggler-algorithm=ring-r0", "005-straggler-algorithm=ps-r0",
        "006-loss-algorithm=switch-r0", "007-loss-algorithm=ring-r0", "008-loss-algorithm=ps-r0",
    ]
    assert [p.index for p in points] == list(range(9))
    loss_ps = points[8]
    assert loss_ps.case == "loss" and loss_ps.params == {"workload.algorithm": "ps"}
    assert loss_ps.scenario.links.loss_pct == 1 and loss_ps.scenario.workload.algorithm == "ps"
    assert loss_ps.scenario.hosts()[-1] == "ps"
    straggler = points[3].scenario.stragglers
    assert [(s.host, s.delay_ms) for s in straggler] == [("w2", 20)]
    assert points[0].scenario.stragglers == [] and points[0].scenario.links.loss_pct == 0


def test_expansion_with_repeats_and_several_grid_keys():
    scn = load_scenario_text(MINIMAL + "sweep:\n  repeats: 2\n  grid:\n"
                             "    topology.workers: [2, 3]\n    links.delay_ms: [0, 1.5]\n"
                             "    links.hosts.w1.delay_ms: [0, 3]\n", "s.yaml")
    points = expand_points(scn)
    assert len(points) == 2 * 2 * 2 * 2
    labels = [p.label for p in points]
    assert len(set(labels)) == len(labels)
    assert all(re.fullmatch(r"[A-Za-z0-9._+=-]+", label) for label in labels)
    # Two grid keys end in delay_ms, so both keep their full path in labels.
    assert labels[0] == "000-base-workers=2-links.delay_ms=0-links.hosts.w1.delay_ms=0-r0"
    assert labels[-1] == "015-base-workers=3-links.delay_ms=1.5-links.hosts.w1.delay_ms=3-r1"
    last = points[-1].scenario
    assert last.topology.workers == 3 and last.links.for_host("w1").delay_ms == 3
    assert last.links.for_host("w2").delay_ms == 1.5


def test_seeds_are_stable_and_distinct():
    points = expand_points(load_scenario(QUICKSTART))
    again = expand_points(load_scenario(QUICKSTART))
    assert [p.seed for p in points] == [p.seed for p in again]
    assert len({p.seed for p in points}) == len(points)
    # Fixed value: the derivation must not change between runs, machines or releases.
    assert points[1].seed == 1582049270  # baseline ring: same as before switch joined the grid
    assert all(0 <= p.seed < 2**31 for p in points)
    reseeded = expand_points(load_scenario(QUICKSTART, ["sweep.seed=2"]))
    assert not {p.seed for p in points} & {p.seed for p in reseeded}
    repeats = expand_points(load_scenario(QUICKSTART, ["sweep.repeats=2"]))
    assert repeats[0].seed != repeats[1].seed and repeats[0].seed == points[0].seed


def test_each_repeat_runs_with_its_own_workload_seed_shared_by_every_case():
    """Repeats are independent samples (data order, initialisation): repeat r runs
    workload.seed + r, the same in every case so systems compare on the same data."""
    path = Path(__file__).resolve().parents[2] / "scenarios" / "p4sgd" / "convergence.yaml"
    scn = load_scenario(path, ["sweep.repeats=3"])
    pts = list(expand_points(scn))
    base = scn.workload.seed
    by_combo: dict = {}
    for p in pts:
        assert p.scenario.workload.seed == base + p.repeat
        by_combo.setdefault(p.repeat, set()).add(p.scenario.workload.seed)
    assert sorted(by_combo) == [0, 1, 2] and all(len(v) == 1 for v in by_combo.values())
    assert expand_points(scn)[2].scenario.workload.seed == pts[2].scenario.workload.seed   # indexing agrees


def test_quick_mode():
    scn = load_scenario(QUICKSTART)
    points = expand_points(scn, quick=True)
    assert len(points) == 9
    assert all(p.scenario.workload.iterations == 5 for p in points)
    assert all(p.scenario.workload.sizes == [64, 16384] for p in points)
    # Same combination, same seed in quick and full mode.
    assert [p.seed for p in points] == [p.seed for p in expand_points(scn)]
    narrowed = load_scenario(QUICKSTART, ["sweep.quick.cases=[loss]", "sweep.quick.repeats=2",
                                          "sweep.quick.grid={workload.algorithm: [ps]}"])
    assert [p.label for p in expand_points(narrowed, quick=True)] == ["000-loss-algorithm=ps-r0",
                                                                      "001-loss-algorithm=ps-r1"]
    assert len(expand_points(narrowed)) == 9


def test_scenario_built_in_python_expands():
    scn = Scenario(name="py", workload=AllreduceWorkload(algorithm="ps"),
                   sweep={"grid": {"topology.workers": [2, 3]}})
    points = expand_points(scn)
    assert [p.scenario.hosts() for p in points] == [["w1", "w2", "ps"], ["w1", "w2", "w3", "ps"]]
    with pytest.raises(ValidationError, match="unknown host"):
        Scenario(name="py", workload=AllreduceWorkload(), stragglers=[{"host": "w9"}])


# --- model behaviour -----------------------------------------------------------------
def test_scenario_is_immutable_and_dump_round_trips():
    scn = load_scenario_text(MINIMAL + "links:\n  bandwidth_mbps: 50\n  hosts: {w2: {bandwidth_mbps: null}}\n",
                             "s.yaml")
    with pytest.raises(ValidationError):
        scn.name = "other"  # type: ignore[misc]
    dumped = scn.model_dump(mode="json")
    assert dumped["links"]["hosts"] == {"w2": {"bandwidth_mbps": None}}
    again = Scenario.model_validate(dumped)
    assert again == scn
    assert again.links.for_host("w2").bandwidth_mbps is None
    assert again.links.for_host("w1").bandwidth_mbps == 50


def test_workload_registry_rejects_late_or_malformed_models():
    with pytest.raises(RuntimeError, match="registered after"):
        @register_workload
        class Late(BaseModel):
            kind: typing.Literal["late"] = "late"
    with pytest.raises(TypeError, match="kind"):
        @register_workload
        class NoKind(BaseModel):
            name: str = "x"


def test_docs_scenarios_md_is_up_to_date():
    current = (ROOT / "docs" / "scenarios.md").read_text()
    assert current == render_markdown(), f"docs/scenarios.md is out of date; run `{REGENERATE}`"


# --- property: int overrides round-trip ------------------------------------------------
def _int_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, int | None, int | None]]:
    """(path, min, max) of every int field reachable through nested models."""
    found = []
    for name, field in model.model_fields.items():
        tp = typing.get_args(field.annotation)[0] if typing.get_origin(field.annotation) is typing.Union \
            else field.annotation
        if tp is int:
            lo = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
            hi = next((m.le for m in field.metadata if getattr(m, "le", None) is not None), None)
            found.append((prefix + name, lo, hi))
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            found += _int_fields(tp, f"{prefix}{name}.")
    return found


INT_FIELDS = _int_fields(Scenario) + [("workload." + p, lo, hi) for p, lo, hi in _int_fields(AllreduceWorkload)]


def test_int_fields_are_found():
    paths = {p for p, _, _ in INT_FIELDS}
    assert {"topology.workers", "topology.leaves", "workload.iterations", "workload.warmup",
            "sweep.repeats", "sweep.seed"} <= paths


@settings(max_examples=150, deadline=None)
@given(field=st.sampled_from(INT_FIELDS), value=st.integers(min_value=-10**9, max_value=10**9))
def test_int_override_round_trips(field, value):
    path, lo, hi = field
    # More repeats than sweep.max_points is refused for the sweep's size (test_bad_input.py).
    assume(path != "sweep.repeats" or value <= DEFAULT_MAX_POINTS)
    override = f"{path}={value}"
    if (lo is None or value >= lo) and (hi is None or value <= hi):
        scn = load_scenario_text(MINIMAL, "s.yaml", [override])
        got = scn
        for part in path.split("."):
            got = getattr(got, part)
        assert got == value and type(got) is int
    else:
        with pytest.raises(ScenarioError) as info:
            load_scenario_text(MINIMAL, "s.yaml", [override])
        assert f"s.yaml: {path}: must be" in str(info.value)
        assert str(info.value).endswith(f"(from --set {override})")


def test_cli_set_wins_over_cases_and_quick_and_pins_grid_keys():
    scn = load_scenario(QUICKSTART, ["workload.iterations=3", "links.loss_pct=5",
                                     "workload.algorithm=switch"])
    points = expand_points(scn, quick=True)
    # The grid axis the override names collapses to its value...
    assert [p.params for p in points] == [{"workload.algorithm": "switch"}] * 3
    # ...and --set beats both the quick `set` (iterations: 5) and the loss case (1 %).
    assert all(p.scenario.workload.iterations == 3 for p in points)
    assert all(p.scenario.links.loss_pct == 5 for p in points)
