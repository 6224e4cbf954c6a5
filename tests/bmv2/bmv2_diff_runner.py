"""Send frames through a real simple_switch_grpc and record what comes out:
the BMv2 half of test_differential.py. Run as root in a private network
namespace (the test wraps it in `unshare -n`): it makes one veth pair per
switch port (swpN on the switch, hN for us), starts BMv2 on the swp ends,
programs it with the testbed's SwitchController (registers over Thrift), then
per step either sends one frame on hN and collects what leaves on every port,
or changes a drop simulator's probability through the controller (a
"set_drop" step, as the run's control plane does it).

A frame step is over when BMv2 has visibly handled the frame: the expected
number of frames came out (the soft switch's count, given in the spec), or,
for a frame expected to produce nothing, one of the program's per-packet
counters moved. Then 0.2 s more of listening catches frames nobody expected.

    python bmv2_diff_runner.py spec.json out.json workdir
"""
from __future__ import annotations

import ctypes
import json
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from testbed.switch import bmv2
from testbed.switch.bmv2_registers import ThriftRegisters
from testbed.switch.controller import SwitchController

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
STEP_TIMEOUT_S = 60.0
QUIET_S = 0.2


def _die_with_parent() -> None:
    # if this runner is killed (the test's timeout), BMv2 must not outlive it
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def popen(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(*args, preexec_fn=_die_with_parent, **kwargs)


def sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True)


def counters_total(c: SwitchController) -> int:
    return sum(p for by_index in c.read_counters().values() for p, _ in by_index.values())


def main(spec_path: str, out_path: str, workdir: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    work = Path(workdir)
    ports = [int(p) for p in spec["ports"]]
    sh("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
    for p in ports:
        sh(f"ip link add swp{p} type veth peer name h{p} && ip link set swp{p} up && ip link set h{p} up")
    tools = bmv2.tools()
    grpc_addr, thrift = "127.0.0.1:9559", 9090
    argv = bmv2.switch_argv(1, {p: f"swp{p}" for p in ports}, grpc_addr, work / "s1-bmv2.log",
                            thrift_port=thrift, binary=str(tools.switch), log_level="warn")
    proc = bmv2.start_switch(argv, grpc_addr, work / "s1-bmv2.log", work / "s1-console.log",
                             popen=popen, ready_timeout=60, ports={p: f"swp{p}" for p in ports},
                             env=tools.env())
    socks = {}
    try:
        for p in ports:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((f"h{p}", 0))
            s.setblocking(False)
            socks[p] = s
        with SwitchController("s1", grpc_addr, 1, spec["p4info"], Path(spec["json"]).read_bytes(),
                              work / "s1-p4runtime-requests.txt") as c:
            c.use_registers(ThriftRegisters("s1", f"127.0.0.1:{thrift}", tools, c.log))
            c.connect()
            c.install_forwarding(spec["forwarding"])
            c.install_flood_group(ports)
            c.set_switch_address(spec["switch_mac"], spec["switch_ip"])
            c.install_job(spec["job"])
            _drain(socks)
            steps = []
            for step in spec["steps"]:
                if "set_drop" in step:
                    d = step["set_drop"]
                    c.set_drop_probability(d["port"], d["p"], d["direction"])
                    steps.append({"label": step["label"], "out": [], "ended": "control"})
                    continue
                before = counters_total(c)
                socks[step["port"]].send(bytes.fromhex(step["frame"]))
                out, why = _collect(socks, c, step["expect"], before)
                steps.append({"label": step["label"], "out": out, "ended": why})
            got = c.registers.read_cells([(n, i) for n, cells in spec["register_cells"].items()
                                          for i in cells])
            regs = {n: {str(i): got[(n, i)] for i in cells}
                    for n, cells in spec["register_cells"].items()}
            counters = {name: {str(i): p for i, (p, _) in by_index.items()}
                        for name, by_index in c.read_counters().items()}
        Path(out_path).write_text(json.dumps({"steps": steps, "registers": regs,
                                              "counters": counters}))
    finally:
        for s in socks.values():
            s.close()
        bmv2.stop_switch(proc)
    return 0


def _receive(socks, wait_s: float) -> list[tuple[int, str]]:
    """[(port, hex)] of the frames the switch sent out (our own sends, seen as
    PACKET_OUTGOING on hN, left out) that arrive within wait_s."""
    by_fd = {s.fileno(): (p, s) for p, s in socks.items()}
    out: list[tuple[int, str]] = []
    for fd in select.select(list(by_fd), [], [], wait_s)[0]:
        port, s = by_fd[fd]
        try:
            while True:
                data, addr = s.recvfrom(65535)
                if addr[2] != PACKET_OUTGOING:
                    out.append((port, data.hex()))
        except BlockingIOError:
            pass
    return out


def _drain(socks) -> None:
    while _receive(socks, QUIET_S):
        pass


def _collect(socks, c: SwitchController, expect: int, before: int) -> tuple[list, str]:
    """[(port, hex)] that left the switch for one step, and why the step ended."""
    out: list[tuple[int, str]] = []
    deadline = time.monotonic() + STEP_TIMEOUT_S
    why = "timeout"
    while time.monotonic() < deadline:
        out += _receive(socks, 0.05)
        if expect and len(out) >= expect:
            why = "expected frames"
            break
        if not expect and counters_total(c) != before:
            why = "counter moved"
            break
    end = time.monotonic() + QUIET_S              # anything nobody expected
    while (left := end - time.monotonic()) > 0:
        out += _receive(socks, left)
    return sorted(out), why


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
