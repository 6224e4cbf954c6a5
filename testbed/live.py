"""Live networks: `testbed net up` (one point's network kept up, as p4run does)
and `testbed switch read|counters|tables` (a running switch's state over P4Runtime).

A live network is a point's network built and programmed exactly as a run
builds it (testbed.runner.plan_point_network / start_point_network: switches,
forwarding, flood group, the point's aggregation jobs, impairments), with no
workload started. Every live network, and every point of a `testbed run` while
it runs, is announced in the registry folder (`live/<name>.json`: the owning
process with its start time, the switches' P4Runtime addresses, the program,
the run folder; testbed.net.live_registry) and withdrawn when it ends. A run lives in a network namespace
of its own, so `testbed switch` first enters the namespace of the announcing
process (setns: root), then connects to the switch as a *backup* controller:
it reads, never writes, and the run's own controller stays primary.

Registers: the soft switch answers P4Runtime register reads; BMv2's P4Runtime
server does not, so its registers are read through its Thrift runtime, as the
run's controller does (testbed.switch.control_plane.register_backends).
"""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from testbed.net.live_registry import (LiveError, LiveNetwork, announce, find, live_networks, stop,  # noqa: F401
                                       withdraw)

CLONE_NEWNET = 0x40000000


def enter_netns_of(pid: int) -> None:
    """Join the network namespace of `pid` (the run's own), before any thread starts."""
    import ctypes  # noqa: PLC0415

    from testbed.net.isolation import netns_inode  # noqa: PLC0415
    from testbed.libc import libc  # noqa: PLC0415

    if netns_inode(pid) == netns_inode():
        return
    try:
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except OSError as e:
        raise LiveError(f"cannot open the network namespace of process {pid}: {e.strerror} "
                        f"(reading a live switch needs root)") from None
    try:
        if libc().setns(fd, CLONE_NEWNET) != 0:
            err = os.strerror(ctypes.get_errno())
            raise LiveError(f"cannot enter the network namespace of process {pid}: {err} (needs root)")
    finally:
        os.close(fd)


def controllers(net: LiveNetwork, switch: str | None, log_dir: Path) -> dict[str, Any]:
    """A backup P4Runtime controller per switch (or the one named), connected."""
    from testbed.switch.control_plane import p4info_path, pipeline_config, register_backends  # noqa: PLC0415
    from testbed.switch.controller import SwitchController  # noqa: PLC0415
    from testbed.switch.p4runtime_server import device_id_for  # noqa: PLC0415

    addrs = net.p4runtime
    if not addrs:
        raise LiveError(f"{net.name}: its switches serve no P4Runtime")
    if switch is not None and switch not in addrs:
        raise LiveError(f"{net.name}: no switch {switch!r}; switches: {', '.join(sorted(addrs))}")
    registers = register_backends(net.switch_info)
    _, device_config = pipeline_config(net.switch_info, net.program)
    out = {}
    for sw in sorted(addrs) if switch is None else [switch]:
        c = SwitchController(sw, addrs[sw], net.switch_info.get("device_ids", {}).get(sw, device_id_for(sw)),
                             p4info_path(net.program), device_config, log_dir / f"{sw}-live-reads.txt",
                             election_id=(0, 0), connect_timeout=5.0)
        if sw in registers:
            c.use_registers(registers[sw](c.log))
        out[sw] = c.connect(push_pipeline=False, require_primary=False)
    return out


def keep_up(point: Any, run_dir: Path, name: str, cli: bool, on_ready: Any = None) -> None:
    """Build and program `point`'s network (as a run does, no workload), announce
    it, then open Mininet's CLI (cli=True) or wait for SIGINT/SIGTERM; tear
    everything down on the way out, whatever happens. The caller has entered
    the run's own network namespace."""
    from testbed import results as res  # noqa: PLC0415
    from testbed.net import registry  # noqa: PLC0415
    from testbed.runner import plan_point_network, start_point_network  # noqa: PLC0415

    reg = registry.RunRegistry.create(run_dir)
    net = control = announced = None
    stop_requested = {"sig": None}

    def on_signal(signum, frame):  # noqa: ARG001
        stop_requested["sig"] = signum
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        net, _, job_requests, (logs, _, _) = plan_point_network(point, run_dir, "mininet", reg)
        control = start_point_network(net, point, logs, job_requests)
        announced = announce(name, run_dir, point.scenario.name, point.label, point.scenario.switch.program,
                             net.switch_info)
        res.write_json(run_dir / "live.json", {"name": name, "point": point.label, "pid": os.getpid(),
                                               "hosts": {h: vars(i) for h, i in net.hosts.items()}})
        if on_ready:
            on_ready(net)
        if cli:
            from mininet.cli import CLI  # noqa: PLC0415
            from mininet.log import lg  # noqa: PLC0415
            # Mininet's CLI handles Ctrl-C itself (it cancels the line); SIGTERM ends it.
            signal.signal(signal.SIGINT, old[signal.SIGINT])
            lg.setLogLevel("output")
            lg.propagate = False         # its own handler only: no second copy through the root logger
            CLI(net.mininet)
        else:
            while True:
                signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if announced is not None:
            withdraw(announced)
        if control is not None:
            control.close()
        if net is not None:
            net.stop()
        reg.close()
