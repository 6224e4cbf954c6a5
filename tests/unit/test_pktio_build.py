"""The switch config chooses between the soft switch's packet-ring I/O (_pktio.c)
and the recvmmsg path (`io_impl`), saying which runs. That `make setup` built it:
tests/unit/test_cext.py (every extension of scripts/build_fastpath.py).
The rings themselves need CAP_NET_RAW: tests/mininet/test_switch_io_impls.py.
"""
from __future__ import annotations

import json
import logging

import pytest

from testbed.scenario import ScenarioError, load_scenario_text
from testbed.switch.soft import dataplane
from testbed.switch.soft.config import ConfigError, SwitchConfig
from testbed.switch.soft.switch import SoftSwitch

pytestmark = pytest.mark.unit


def test_io_impl_default_and_fallback(monkeypatch, caplog):
    assert dataplane.resolve_io_impl(None) == "ring_fastpath"
    assert dataplane.resolve_io_impl("mmap_ring") == "mmap_ring"
    assert dataplane.resolve_io_impl("mmsg") == "mmsg"
    monkeypatch.setattr(dataplane, "_pktio", None)
    monkeypatch.setattr(dataplane, "PKTIO_IMPORT_ERROR", "No module named '_pktio'")
    with caplog.at_level(logging.WARNING, logger="softswitch"):
        assert dataplane.resolve_io_impl(None) == "mmsg"          # not built: said, not silent
    assert "packet-ring I/O not built" in caplog.text
    with pytest.raises(ValueError, match="io_impl: mmap_ring is not built .*make setup"):
        dataplane.resolve_io_impl("mmap_ring")
    with pytest.raises(ValueError, match="io_impl: ring_fastpath is not built .*make setup"):
        dataplane.resolve_io_impl("ring_fastpath")


def test_ring_frame_size_holds_the_largest_frame():
    assert dataplane._ring_frame_size(1500) == 2048
    assert dataplane._ring_frame_size(9000) == 16384
    for mtu in (1500, 4000, 9000, 65535):
        size = dataplane._ring_frame_size(mtu)
        assert size & (size - 1) == 0 and size >= mtu + 18 + 128


def test_bad_io_options_are_refused_before_anything_starts():
    base = {"name": "s1", "ports": {"1": "a"}, "stats_path": "x", "ready_path": "y"}
    with pytest.raises(ConfigError, match="io_impl: 'xdp' is not one of ring_fastpath, mmap_ring, mmsg"):
        SwitchConfig.from_dict({**base, "io_impl": "xdp"})
    with pytest.raises(ConfigError, match=r"io_spin_us: must be an integer in 0\.\.1000"):
        SwitchConfig.from_dict({**base, "io_spin_us": -1})
    assert SwitchConfig.from_dict({**base, "io_impl": "mmsg", "io_spin_us": 0}).io_impl == "mmsg"
    text = "name: t\nswitch: {options: {io_impl: rings}}\nworkload: {kind: allreduce, algorithm: ring}\n"
    with pytest.raises(ScenarioError, match=r"switch\.options\.io_impl: must be one of ring_fastpath, mmap_ring, mmsg"):
        load_scenario_text(text, "s.yaml")
    text = "name: t\nswitch: {options: {io_spin_us: 5000}}\nworkload: {kind: allreduce, algorithm: ring}\n"
    with pytest.raises(ScenarioError, match=r"switch\.options\.io_spin_us: must be an integer in 0\.\.1000"):
        load_scenario_text(text, "s.yaml")


class _Port:
    name = "p"

    def __init__(self, mode):
        self.mode = mode

    def fileno(self):
        return -1

    def stats(self):
        return {"io_mode": self.mode}

    def close(self):
        pass


@pytest.mark.parametrize("modes,want", [(("mmap_ring", "mmap_ring"), "mmap_ring"),
                                        (("mmsg", "mmsg"), "mmsg"),
                                        (("udp", "udp"), None), (("mmsg", "mmap_ring"), None)])
def test_switch_stats_name_the_io_impl(tmp_path, modes, want):
    raw = {"name": "s1", "ports": {"1": "p1", "2": "p2"}, "stats_path": str(tmp_path / "st.json"),
           "ready_path": str(tmp_path / "r")}
    sw = SoftSwitch(SwitchConfig.from_dict(raw), ports={1: _Port(modes[0]), 2: _Port(modes[1])})
    try:
        sw.write_stats()
        st = json.loads((tmp_path / "st.json").read_text())
        assert st["io_impl"] == want and st["io_spin_us"] == 20
        assert st["loop"]["spin_hits"] == 0
    finally:
        sw.close()
