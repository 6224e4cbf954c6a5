"""Registers of a BMv2 through its Thrift runtime (testbed/switch/bmv2_registers.py)
and the controller's register path (use_registers), against a fake
simple_switch_CLI that speaks the real one's stdin/stdout protocol (banner,
a prompt before each command, `name[i]= v` answers, `Error: ...` refusals).
Also the switch start-up check that ports came up (bmv2.ports_not_up).
The real CLI and switch: tests/bmv2."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from testbed.switch import bmv2
from testbed.switch.bmv2_registers import RegisterError, ThriftRegisters, parse_replies
from testbed.switch.bmv2_tools import Bmv2Tools
from testbed.switch.controller import ControllerError, SwitchController
from testbed.switch.p4runtime_log import RequestLog

REPO = Path(__file__).resolve().parents[2]

FAKE_CLI = r'''
import json, sys
state_path = sys.argv[sys.argv.index("--state") + 1]
sizes = {"DropSimulator.drop_probability": 512, "Aggregator.worker_count": 8192}
try:
    state = json.load(open(state_path))
except OSError:
    state = {}
print("Obtaining JSON from switch...\nDone\nControl utility for runtime P4 table manipulation")
while True:
    sys.stdout.write("RuntimeCmd: ")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        print()
        break
    cmd, *args = line.split()
    name = args[0]
    if name not in sizes:
        print(f"Error: Invalid register name ({name})")
        continue
    cells = state.setdefault(name, {})
    if cmd == "register_write":
        if int(args[1]) >= sizes[name]:
            print("Invalid register operation (INVALID_INDEX)")
            continue
        cells[args[1]] = int(args[2])
    elif len(args) == 2:
        print(f"{name}[{args[1]}]=", cells.get(args[1], 0))
    else:
        print(f"{name}=", ", ".join(str(cells.get(str(i), 0)) for i in range(4)))
json.dump(state, open(state_path, "w"))
'''


@pytest.fixture
def regs(tmp_path):
    cli = tmp_path / "simple_switch_CLI"
    cli.write_text(FAKE_CLI)
    tools = Bmv2Tools(Path("simple_switch_grpc"), Path("p4c-bm2-ss"), cli, sys.executable,
                      "1.15.5", "1.2.4.8", None)
    r = ThriftRegisters("s1", "127.0.0.1:9090", tools, RequestLog(tmp_path / "s1-req.txt", "s1"))
    r.argv += ["--state", str(tmp_path / "state.json")]
    return r


def test_writes_then_reads_one_cell_and_all(regs):
    regs.write([("DropSimulator.drop_probability", 1, 1 << 31),
                ("DropSimulator.drop_probability", 3, 7)])
    assert regs.read("DropSimulator.drop_probability", 1) == {1: 1 << 31}
    assert regs.read("DropSimulator.drop_probability") == {0: 0, 1: 1 << 31, 2: 0, 3: 7}
    assert regs.read_cells([("DropSimulator.drop_probability", 3), ("Aggregator.worker_count", 1)]) \
        == {("DropSimulator.drop_probability", 3): 7, ("Aggregator.worker_count", 1): 0}
    logged = regs.log.path.read_text()
    assert "-> Thrift register_write" in logged and "> register_write DropSimulator.drop_probability 3 7" in logged


def test_refused_writes_are_named(regs):
    with pytest.raises(RegisterError) as e:
        regs.write([("DropSimulator.drop_probability", 1, 5), ("Nope.reg", 0, 1),
                    ("DropSimulator.drop_probability", 999, 1)])
    msg = str(e.value)
    assert msg.startswith("s1: 2 of 3 register writes refused")
    assert "'register_write Nope.reg 0 1': Error: Invalid register name (Nope.reg)" in msg
    assert "INVALID_INDEX" in msg
    assert isinstance(e.value, ControllerError)


def test_cli_that_stops_early_or_fails(regs, tmp_path):
    with pytest.raises(RegisterError, match="answered 1 of 3 commands"):
        parse_replies("banner\nRuntimeCmd: x\nRuntimeCmd: ", 3)
    regs.argv = [sys.executable, "-c", "import sys; print('Could not connect to thrift client'); sys.exit(1)"]
    with pytest.raises(RegisterError, match=r"simple_switch_CLI exited 1 .*Could not connect to thrift client"):
        regs.read("DropSimulator.drop_probability", 0)
    assert "Could not connect" in regs.log.path.read_text()


def test_controller_registers_through_the_backend(regs, tmp_path):
    c = SwitchController("s1", "127.0.0.1:1", 1, REPO / "p4" / "ina.p4info.txtpb", b"{}",
                         tmp_path / "s1-p4runtime-requests.txt").use_registers(regs)
    c.set_drop_probability(2, 0.25)                 # no P4Runtime connection needed
    assert c.read_register("DropSimulator.drop_probability", 2) == {2: 1 << 30}
    c.write_registers([("Aggregator.worker_count", 5, 3)])
    assert c.read_register("Aggregator.worker_count", 5) == {5: 3}
    # the P4Info is still the judge of names, indexes and widths
    with pytest.raises(ControllerError, match="index 512 not in 0..511"):
        c.set_drop_probability(512, 0.5)
    with pytest.raises(ControllerError, match="does not fit bit<8>"):
        c.write_registers([("Aggregator.worker_count", 0, 256)])
    with pytest.raises(ControllerError, match="no register 'Nope.reg'"):
        c.read_register("Nope.reg", 0)


def test_ports_not_up_reads_the_log_and_the_interfaces(tmp_path):
    log = tmp_path / "s1-bmv2.log"
    log.write_text("[12:00:00.000] [bmv2] [E] [thread 1] Add port operation failed\n")
    problems = bmv2.ports_not_up(os.getpid(), {1: "no-such-intf0", 2: "lo"}, [log])
    assert problems[0] == "s1-bmv2.log: [12:00:00.000] [bmv2] [E] [thread 1] Add port operation failed"
    assert "port 1: interface no-such-intf0 does not exist" in problems
    assert "port 2: the switch has no packet socket on lo" in problems     # this process has none
    log.write_text("[12:00:00.000] [bmv2] [I] ready\n")
    assert bmv2.ports_not_up(os.getpid(), {}, [log]) == []


def test_control_info_gives_each_switch_its_thrift_port():
    info = bmv2.control_info(["s1", "s2", "s3"], {"bmv2_prefix": "/opt/p4"})
    assert info == {"thrift": {"s1": "127.0.0.1:9090", "s2": "127.0.0.1:9091", "s3": "127.0.0.1:9092"},
                    "prefix": "/opt/p4"}
    assert len(set(info["thrift"].values())) == 3
    assert json.dumps(info)   # goes into switch_info as plain data
