"""bench/link_shaper.py and bench/lossy_path.py: their scenarios are valid and differ
only in what each compares (the shaper; the switch's packet path); the link-rate
bounds link_shaper reports are the quickstart's (pure parts, nothing run)."""
from __future__ import annotations

import pytest

from bench import link_shaper as ls
from testbed.scenario import load_scenario_text

pytestmark = pytest.mark.unit


def test_the_two_scenarios_differ_only_in_who_shapes():
    auto, htb = (load_scenario_text(ls.scenario(sh, 10), "t.yaml") for sh in ls.SHAPERS)
    assert (auto.links.shaper, htb.links.shaper) == ("auto", "htb")
    assert auto.links.bandwidth_mbps == htb.links.bandwidth_mbps == 100
    assert auto.switch.capture is False and auto.topology.workers == 4
    assert auto.workload.sizes == [262144]


def test_link_bounds_are_the_frames_each_algorithm_puts_on_a_link():
    b = ls.link_bounds_ms()
    # 4096 frames of 314 B up per worker; ring: 1.5 MiB of TCP payload per host, 1514/1448 framing
    assert b["switch"] == pytest.approx(4096 * 314 * 8 / 100e6 * 1e3)
    assert b["ring"] == pytest.approx(1.5 * 2 ** 20 * 1514 / 1448 * 8 / 100e6 * 1e3)
    assert b["switch"] < b["ring"]


def test_the_lossy_path_scenarios_differ_only_in_the_switchs_packet_path(tmp_path):
    from bench import lossy_path as lp
    from bench.testbed_runs import p50_by_algorithm

    fast, py = (load_scenario_text(lp.scenario(io, 10), "t.yaml") for io in lp.IO_IMPLS)
    assert (fast.switch.options["io_impl"], py.switch.options["io_impl"]) == ("ring_fastpath", "mmap_ring")
    assert fast.links.loss_pct == py.links.loss_pct == 1.0 and fast.switch.capture is False
    assert fast.workload.sizes == py.workload.sizes == [262144]
    (tmp_path / "summary.csv").write_text("label,algorithm,status,p50_ms\na,switch,ok,12.5\nb,ring,failed,\n")
    assert p50_by_algorithm(str(tmp_path)) == {"switch": 12.5}
    (tmp_path / "summary.csv").write_text("label,algorithm,status,emu_p50_ms\na,switch,ok,12.5\nb,ring,failed,\n")
    assert p50_by_algorithm(str(tmp_path)) == {"switch": 12.5}
    assert p50_by_algorithm(None) == {} and lp.packet_paths(str(tmp_path)) == {}
