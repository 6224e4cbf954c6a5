"""Bad scenario input is refused at load, with `file:line: field: reason`, before
anything starts (issue 7: NUL bytes, huge or empty sweeps, values that only
failed once the network was built)."""
from __future__ import annotations

import time

import pytest

from testbed import wire
from testbed.scenario import ScenarioError, expand_points, load_scenario, load_scenario_text
from testbed.scenario.sweep import DEFAULT_MAX_POINTS

pytestmark = pytest.mark.unit

BASE = "name: t\nworkload: {kind: allreduce}\n"


def errors_of(text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(text, "s.yaml", overrides)
    return str(info.value)


# --- NUL and other unreadable characters ---------------------------------------
def test_nul_byte_is_a_clean_file_line_error(tmp_path):
    path = tmp_path / "nul.yaml"
    path.write_text(BASE + "description: \"a\x00b\"\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:3: "), msg
    assert "#x0000" in msg and "\n" not in msg, msg


def test_control_character_on_first_line_has_line_1():
    msg = errors_of("\x07name: t\n")
    assert msg.startswith("s.yaml:1: "), msg


# --- sweeps: empty lists, too many points, lazy expansion ---------------------
def test_empty_grid_list_names_the_key():
    msg = errors_of(BASE + "sweep: {grid: {workload.iterations: []}}\n")
    assert msg.startswith("s.yaml:3: sweep.grid.workload.iterations: "), msg
    assert "at least 1" in msg, msg


def test_empty_quick_grid_list_and_empty_quick_cases_are_errors():
    assert "sweep.quick.grid.workload.iterations" in errors_of(
        BASE + "sweep: {quick: {grid: {workload.iterations: []}}}\n")
    assert "sweep.quick.cases" in errors_of(BASE + "sweep: {quick: {cases: []}}\n")


def _grid(n: int, m: int) -> str:
    return (BASE + "sweep:\n  grid:\n"
            f"    workload.iterations: [{', '.join(str(i) for i in range(1, n + 1))}]\n"
            f"    workload.warmup: [{', '.join(str(i) for i in range(m))}]\n")


def test_huge_grid_is_refused_with_the_count_and_how_to_raise_the_limit():
    t0 = time.process_time()
    msg = errors_of(_grid(1000, 1000))
    # Counted, not expanded: a million points would take minutes to validate.
    assert time.process_time() - t0 < 30
    assert "1000000 points" in msg and str(DEFAULT_MAX_POINTS) in msg, msg
    assert "sweep.max_points" in msg and "--max-points" in msg, msg
    assert msg.startswith("s.yaml:3: sweep: "), msg


def test_max_points_can_be_raised_in_the_file_or_by_set():
    text = _grid(30, 10) + "  max_points: 300\n"
    assert len(expand_points(load_scenario_text(text, "s.yaml"))) == 300
    msg = errors_of(_grid(30, 10) + "  max_points: 299\n")
    assert "300 points" in msg and "limit of 299" in msg, msg
    scn = load_scenario_text(_grid(30, 10), "s.yaml", ["sweep.max_points=300"])
    assert len(expand_points(scn)) == 300
    # repeats and cases count too
    msg = errors_of(_grid(30, 10) + "  max_points: 300\n  repeats: 2\n")
    assert "600 points" in msg, msg


def test_quick_sweep_has_its_own_count():
    text = _grid(30, 10) + "  max_points: 300\n  quick: {grid: {workload.warmup: [0]}, repeats: 400}\n"
    msg = errors_of(text)
    assert "quick sweep: 400 points" in msg and "limit of 300" in msg, msg


def test_expansion_is_lazy_with_a_known_length():
    scn = load_scenario_text(_grid(100, 10), "s.yaml")
    points = expand_points(scn)
    assert len(points) == 1000
    # Index without expanding the rest; iteration agrees with indexing.
    assert points[999].label == "999-base-iterations=100-warmup=9-r0"
    assert points[-1].label == points[999].label
    assert points[999].scenario.workload.iterations == 100
    first = next(iter(points))
    assert first.label == points[0].label and first.scenario.workload.warmup == 0
    with pytest.raises(IndexError):
        points[1000]
    headers = list(points.headers())
    assert [h["label"] for h in headers[:2]] == [p.label for p in list(points)[:2]]


# --- values that used to fail only after the network was built ----------------
def test_inf_and_nan_link_values_are_refused():
    for value in (".inf", ".nan"):
        msg = errors_of(BASE + f"links: {{delay_ms: {value}}}\n")
        assert msg.startswith("s.yaml:3: links.delay_ms: ") and "finite" in msg, msg
    assert "finite" in errors_of(BASE, ("stragglers=[{host: w1, delay_ms: .inf}]",))


def test_bandwidth_below_the_documented_minimum_is_refused():
    from testbed.scenario.models import MIN_BANDWIDTH_MBPS
    msg = errors_of(BASE + "links: {bandwidth_mbps: 0.000000001}\n")
    assert msg.startswith("s.yaml:3: links.bandwidth_mbps: "), msg
    assert f">= {MIN_BANDWIDTH_MBPS}" in msg, msg
    assert "links.hosts.w1.bandwidth_mbps" in errors_of(BASE + "links: {hosts: {w1: {bandwidth_mbps: 0.001}}}\n")
    assert load_scenario_text(BASE + f"links: {{bandwidth_mbps: {MIN_BANDWIDTH_MBPS}}}\n", "s.yaml")


def test_unknown_switch_program_is_refused():
    msg = errors_of(BASE + "switch: {program: nosuch}\n")
    assert msg.startswith("s.yaml:3: switch.program: "), msg
    assert "nosuch" in msg and "ina" in msg, msg


@pytest.mark.parametrize("options, needle", [
    ("{batch: -5}", "switch.options.batch: "),
    ("{batch: 5000}", "switch.options.batch: "),
    ("{batch: '8'}", "switch.options.batch: "),
    ("{nice: 50}", "switch.options.nice: "),
    ("{forwarding: []}", "switch.options.forwarding: "),
])
def test_bad_soft_switch_options_are_refused(options, needle):
    msg = errors_of(BASE + f"switch: {{options: {options}}}\n")
    assert f"s.yaml:3: {needle}" in msg, msg


def test_good_soft_switch_options_load():
    scn = load_scenario_text(BASE + "switch: {options: {batch: 64, nice: 0}}\n", "s.yaml")
    assert scn.switch.options == {"batch": 64, "nice": 0}


def test_in_switch_job_larger_than_the_worker_bitmap_is_refused():
    n = wire.MAX_WORKERS + 1
    msg = errors_of(BASE.replace("allreduce}", "allreduce, algorithm: switch}") + f"topology: {{workers: {n}}}\n")
    assert f"{n} workers" in msg and f"holds {wire.MAX_WORKERS}" in msg, msg
    assert "topology.workers" in msg, msg
    # A host algorithm has no such limit; two jobs of 17 fit.
    assert load_scenario_text(BASE + f"topology: {{workers: {n}}}\n", "s.yaml")
    assert load_scenario_text(BASE.replace("allreduce}", "allreduce, algorithm: switch, jobs: 2}")
                              + f"topology: {{workers: {n + 1}}}\n", "s.yaml")


def test_in_switch_limit_is_checked_per_sweep_point():
    n = wire.MAX_WORKERS + 1
    text = (BASE + f"topology: {{workers: {n}}}\n"
            "sweep: {grid: {workload.algorithm: [ring, switch]}}\n")
    msg = errors_of(text)
    assert "sweep.grid.workload.algorithm" in msg and f"{n} workers" in msg, msg
    text = (BASE + "sweep:\n  cases: [{name: big, set: {topology.workers: 40}}]\n"
            "  grid: {workload.algorithm: [ring, switch]}\n")
    msg = errors_of(text)
    assert "algorithm=switch" in msg and "40 workers" in msg, msg


def test_p4sgd_switch_collective_limit():
    n = wire.MAX_WORKERS + 1
    msg = errors_of(f"name: t\ntopology: {{workers: {n}}}\n"
                    "workload: {kind: p4sgd, collective: switch}\n")
    assert f"{n} workers" in msg, msg
