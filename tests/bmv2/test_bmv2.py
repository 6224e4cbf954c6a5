"""BMv2 backend end to end with the real tools: simple_switch_grpc runs
p4/ina.p4 as p4c compiles it (the compile itself: test_p4c.py), and the same SwitchController that drives the soft
switch programs it, registers included (through BMv2's Thrift runtime).
Skipped (tests/conftest.py, bmv2 marker) when the tools are not found on PATH
or under $P4TOOLS_PREFIX (testbed/switch/bmv2_tools.py). Every switch a test
starts is stopped by its PID, also when the test fails."""
from __future__ import annotations

from pathlib import Path

import pytest
from testbed.loopback_ports import free_port_base
from testbed.switch import bmv2
from testbed.switch.bmv2_registers import ThriftRegisters
from testbed.switch.controller import SwitchController

REPO = Path(__file__).resolve().parents[2]
JOB = {"job_id": 2, "slot_base": 0, "slot_count": 8,
       "workers": [{"worker_id": 0, "mac": "00:00:00:00:00:01", "ip": "10.0.0.1", "port": 1},
                   {"worker_id": 1, "mac": "00:00:00:00:00:02", "ip": "10.0.0.2", "port": 2}]}


def free_port() -> int:
    return free_port_base()


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return bmv2.compile_p4(REPO / "p4" / "ina.p4", tmp_path_factory.mktemp("bmv2-build"))


@pytest.fixture
def switch(build, tmp_path):
    """A running simple_switch_grpc (no data ports: no root needed), stopped by PID."""
    addr, thrift = f"127.0.0.1:{free_port()}", free_port()
    argv = bmv2.switch_argv(1, {}, addr, tmp_path / "s1-bmv2.log", thrift_port=thrift,
                            binary=str(bmv2.tools().switch))
    proc = bmv2.start_switch(argv, addr, tmp_path / "s1-bmv2.log", tmp_path / "s1-console.log",
                             env=bmv2.tools().env())
    try:
        yield addr, thrift
    finally:
        bmv2.stop_switch(proc)
        assert proc.poll() is not None


def test_controller_programs_simple_switch_grpc(build, switch, tmp_path):
    addr, thrift = switch
    with SwitchController("s1", addr, 1, build.p4info_path, bmv2.device_config(build),
                          tmp_path / "s1-p4runtime-requests.txt") as c:
        c.use_registers(ThriftRegisters("s1", f"127.0.0.1:{thrift}", bmv2.tools(), c.log))
        c.connect()
        c.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1}])
        assert c.read_table("Forward.l2_forward")[0]["params"] == {"port": 1}
        c.install_flood_group([1, 2])
        c.install_job(JOB, reset_slots=True)          # 64 register writes through Thrift
        assert c.read_table("Ingress.job_table")[0]["match"] == {"job_id": 2}
        assert c.read_table("Ingress.worker_port")[1]["params"] == {"port": 2}
        c.set_drop_probability(1, 0.5)
        assert c.read_register("DropSimulator.drop_probability", 1) == {1: 1 << 31}
        assert c.read_register("Aggregator.worker_count", 3) == {3: 0}
        assert "Ingress.ina_packets" in c.read_counters(nonzero_only=False)
    log = (tmp_path / "s1-p4runtime-requests.txt").read_text()
    assert "Thrift Write drop probability port 1" in log


def test_nonexistent_interface_is_refused_and_stopped(build, tmp_path):
    addr = f"127.0.0.1:{free_port()}"
    argv = bmv2.switch_argv(1, {1: "no-such-intf0"}, addr, tmp_path / "s1-bmv2.log",
                            thrift_port=free_port(), binary=str(bmv2.tools().switch))
    started = []

    def popen(*a, **k):
        started.append(bmv2.subprocess.Popen(*a, **k))
        return started[0]

    with pytest.raises(bmv2.Bmv2Error) as e:
        bmv2.start_switch(argv, addr, tmp_path / "s1-bmv2.log", tmp_path / "s1-console.log",
                          popen=popen, ready_timeout=30, ports={1: "no-such-intf0"},
                          env=bmv2.tools().env())
    assert "ports did not come up" in str(e.value) and "no-such-intf0" in str(e.value)
    assert started and started[0].poll() is not None, "the refused switch was left running"
