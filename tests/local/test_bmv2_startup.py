"""simple_switch_grpc start-up is judged by its ports, not only its process:
BMv2 logs "Add port operation failed" for an interface it cannot open and
keeps running. A Python stand-in that serves "gRPC" (a listening socket) and
writes that log line must be refused, and stopped by its PID. The real binary:
tests/bmv2/test_bmv2.py::test_nonexistent_interface_is_refused_and_stopped."""
from __future__ import annotations

import socket
import sys

import pytest

from testbed.loopback_ports import free_port_base
from testbed.switch import bmv2


def free_port() -> int:
    return free_port_base()


def test_port_add_failure_in_the_log_is_a_failed_start(tmp_path):
    port, log = free_port(), tmp_path / "s1-bmv2.log"
    stand_in = (f"import socket, time; open({str(log)!r}, 'w').write("
                "'[09:00:00.000] [bmv2] [E] [thread 7] Add port operation failed\\n'); "
                f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    started = []

    def popen(*a, **k):
        started.append(bmv2.subprocess.Popen(*a, **k))
        return started[0]

    with pytest.raises(bmv2.Bmv2Error) as e:
        bmv2.start_switch([sys.executable, "-c", stand_in], f"127.0.0.1:{port}", log,
                          tmp_path / "s1-console.log", popen=popen, ready_timeout=30)
    assert "ports did not come up: s1-bmv2.log: [09:00:00.000] [bmv2] [E] [thread 7] Add port " \
           "operation failed" in str(e.value)
    assert started[0].poll() is not None, "the refused switch was left running"


def test_a_port_without_the_switchs_socket_is_a_failed_start(tmp_path):
    port = free_port()
    stand_in = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); "
                "s.listen(); time.sleep(60)")
    started = []

    def popen(*a, **k):
        started.append(bmv2.subprocess.Popen(*a, **k))
        return started[0]

    with pytest.raises(bmv2.Bmv2Error, match="port 1: the switch has no packet socket on lo; "
                                             "port 2: interface nope0 does not exist"):
        bmv2.start_switch([sys.executable, "-c", stand_in], f"127.0.0.1:{port}",
                          tmp_path / "s1-bmv2.log", tmp_path / "s1-console.log", popen=popen,
                          ready_timeout=30, ports={1: "lo", 2: "nope0"})
    assert started[0].poll() is not None
