"""BMv2 backend end to end: p4c compiles p4/ina.p4, simple_switch_grpc runs it
(no data ports: no root needed), and the same SwitchController that drives the
soft switch programs it. Skipped (tests/conftest.py, bmv2 marker) when the
binaries are not installed, which is the case on the development machines."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from testbed.switch import bmv2
from testbed.switch.controller import SwitchController

REPO = Path(__file__).resolve().parents[2]
JOB = {"job_id": 2, "slot_base": 0, "slot_count": 8,
       "workers": [{"worker_id": 0, "mac": "00:00:00:00:00:01", "ip": "10.0.0.1", "port": 1},
                   {"worker_id": 1, "mac": "00:00:00:00:00:02", "ip": "10.0.0.2", "port": 2}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def names(p4info: p4info_pb2.P4Info) -> set[tuple[str, str]]:
    return {(kind, o.preamble.name) for kind in ("tables", "actions", "counters", "registers")
            for o in getattr(p4info, kind)}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return bmv2.compile_p4(REPO / "p4" / "ina.p4", tmp_path_factory.mktemp("bmv2-build"))


def test_compiled_p4info_has_the_contract_names(build):
    compiled = text_format.Parse(build.p4info_path.read_text(), p4info_pb2.P4Info(),
                                 allow_unknown_field=True)
    checked_in = text_format.Parse((REPO / "p4" / "ina.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    assert names(checked_in) <= names(compiled)


def test_controller_programs_simple_switch_grpc(build, tmp_path):
    addr = f"127.0.0.1:{free_port()}"
    argv = bmv2.switch_argv(1, {}, addr, tmp_path / "s1-bmv2.log", thrift_port=free_port())
    proc = bmv2.start_switch(argv, addr, tmp_path / "s1-bmv2.log", tmp_path / "s1-console.log")
    try:
        with SwitchController("s1", addr, 1, build.p4info_path, bmv2.device_config(build),
                              tmp_path / "s1-p4runtime-requests.txt") as c:
            c.connect()
            c.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1}])
            assert c.read_table("Forward.l2_forward")[0]["params"] == {"port": 1}
            c.install_flood_group([1, 2])
            c.install_job(JOB)
            assert c.read_table("Ingress.job_table")[0]["match"] == {"job_id": 2}
            c.set_drop_probability(1, 0.5)
            assert c.read_register("DropSimulator.drop_probability", 1) == {1: 1 << 31}
            assert "Ingress.ina_packets" in c.read_counters()
    finally:
        bmv2.stop_switch(proc)


def test_start_failure_names_command_and_log(tmp_path):
    addr = f"127.0.0.1:{free_port()}"
    argv = bmv2.switch_argv(1, {1: "no-such-intf0"}, addr, tmp_path / "s1-bmv2.log")
    with pytest.raises(bmv2.Bmv2Error) as e:
        bmv2.start_switch(argv, addr, tmp_path / "s1-bmv2.log", tmp_path / "s1-console.log",
                          ready_timeout=5)
    assert "simple_switch_grpc" in str(e.value) and "s1-console.log" in str(e.value)
