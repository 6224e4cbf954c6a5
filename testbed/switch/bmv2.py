"""BMv2 backend: p4/ina.p4 compiled by p4c, run by `simple_switch_grpc --no-p4`
on a Mininet switch's interfaces, programmed over P4Runtime by the same
SwitchController as the soft switch (device config = the compiled BMv2 JSON).

    build = compile_p4("p4/ina.p4", run_dir / "build")
    net.addSwitch("s1", cls=Bmv2SwitchNode, device_id=1, grpc_port=50001, log_dir=...)
    SwitchController("s1", "127.0.0.1:50001", 1, build.p4info_path,
                     build.json_path.read_bytes(), log_path).connect()

Where the tools are (PATH, $P4TOOLS_PREFIX or switch.options.bmv2_prefix) and
whether they are new enough: testbed/switch/bmv2_tools.py (`bmv2_available()`,
also used by `testbed doctor` and the bmv2 test tier). Registers go through
BMv2's Thrift runtime (testbed/switch/bmv2_registers.py): PI answers register
reads and writes with UNIMPLEMENTED. Each switch has its own gRPC and Thrift
port. Started with --no-p4 because a BMv2 given a JSON on its command line
cannot answer GetForwardingPipelineConfig until a controller pushes a config.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

try:
    from mininet.node import Switch
except ImportError:   # argv building and compile need no Mininet
    Switch = object  # type: ignore[assignment,misc]

from testbed.switch.bmv2_tools import (P4C, SWITCH, Bmv2Tools, ToolsMissing, bmv2_available, find_p4c,
                                       find_tools)

P4_DIR = Path(__file__).resolve().parents[2] / "p4"
THRIFT_BASE_PORT = 9089  # s1 -> 9090 (bmv2's default); every switch of a run needs its own
# switch.options a bmv2 switch understands (the soft switch's options mean nothing to it)
NODE_OPTIONS = ("ready_timeout", "log_level", "bmv2_prefix")
PORT_ADD_FAILED = "Add port operation failed"   # BMv2's log line; the switch keeps running


class Bmv2Error(RuntimeError):
    """p4c or simple_switch_grpc failed; the message has the command, exit code and log."""


def tools(prefix: str | Path | None = None) -> Bmv2Tools:
    """find_tools(), with the backend's error type."""
    try:
        return find_tools(prefix)
    except ToolsMissing as e:
        raise Bmv2Error(str(e)) from None


def thrift_port(device_id: int) -> int:
    return THRIFT_BASE_PORT + int(device_id)


def _tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in lines[-n:]) or "    (log is empty)"


# --- compile ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bmv2Build:
    json_path: Path
    p4info_path: Path
    argv: list[str]


def compile_argv(p4_path: str | Path, out_dir: str | Path, p4c: str = P4C) -> Bmv2Build:
    """The p4c command: P4_16 -> BMv2 JSON plus the P4Info (text) for P4Runtime."""
    p4_path, out = Path(p4_path), Path(out_dir)
    json_path = out / f"{p4_path.stem}.json"
    p4info = out / f"{p4_path.stem}.p4info.txtpb"
    argv = [p4c, "--p4v", "16", "--p4runtime-files", str(p4info), "-o", str(json_path), str(p4_path)]
    return Bmv2Build(json_path, p4info, argv)


def compile_p4(p4_path: str | Path, out_dir: str | Path, p4c: str | None = None,
               timeout: float = 600.0, prefix: str | Path | None = None) -> Bmv2Build:
    """Run p4c (the installed one unless `p4c` names another). Any warning is
    kept in <out>/<program>.p4c.log; Bmv2Build.warnings lists them."""
    env = None
    if p4c is None:
        try:
            path, _, env = find_p4c(prefix)
        except ToolsMissing as e:
            raise Bmv2Error(str(e)) from None
        p4c = str(path)
    build = compile_argv(p4_path, out_dir, p4c)
    build.json_path.parent.mkdir(parents=True, exist_ok=True)
    log_path = build.json_path.with_suffix(".p4c.log")
    with open(log_path, "wb") as logf:
        try:
            rc = subprocess.run(build.argv, stdout=logf, stderr=subprocess.STDOUT,
                                timeout=timeout, env=env).returncode
        except FileNotFoundError:
            raise Bmv2Error(f"{p4c} not found: {bmv2_available(prefix)[1]}") from None
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if rc != 0 or not build.json_path.exists():
        raise Bmv2Error(f"p4c failed ({rc}): {' '.join(build.argv)}\n  log: {log_path}\n{_tail(log_path)}")
    return build


def compile_warnings(build: Bmv2Build) -> list[str]:
    """The warning lines p4c wrote to the build's log (p4/ina.p4 must have none)."""
    log_path = build.json_path.with_suffix(".p4c.log")
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if "warning" in line.lower()]


def compile_program(program: str, out_dir: str | Path, p4_dir: str | Path = P4_DIR,
                    compile: Callable[..., Bmv2Build] | None = None,
                    prefix: str | Path | None = None) -> Bmv2Build:
    """switch.program -> p4/<program>.p4 compiled into out_dir (the point's logs),
    by p4c once per run: later points copy the first one's output (_run_cache)."""
    p4_path = Path(p4_dir) / f"{program}.p4"
    if not p4_path.exists():
        have = sorted(p.stem for p in Path(p4_dir).glob("*.p4"))
        raise Bmv2Error(f"switch.program {program!r}: no P4 source at {p4_path}; "
                        f"programs available: {have}")
    if compile is not None:
        return compile(p4_path, out_dir)
    cached = _run_cache(p4_path, Path(out_dir))
    if cached is not None and _copy_build(cached, Path(out_dir)):
        return compile_argv(p4_path, out_dir)   # what produced the cached copy
    build = compile_p4(p4_path, out_dir, prefix=prefix)
    if cached is not None:
        _copy_build(Path(out_dir), cached, into_cache=True)
    return build


# A run compiles the same program for every point: p4c takes tens of seconds on a loaded
# machine, so the first point's output is kept in the run's logs (logs/.p4c-cache/<hash
# of the P4 sources>/) and copied into each later point's bmv2/ folder. Per run only: a
# new run (maybe another p4c) compiles again.
CACHE_DIR = ".p4c-cache"


def _run_cache(p4_path: Path, out_dir: Path) -> Path | None:
    """logs/.p4c-cache/<sha256 of every .p4 beside the program> for out_dir =
    logs/<point>/bmv2; None when out_dir is not laid out like a run's point."""
    if out_dir.name != "bmv2" or len(out_dir.parents) < 3:
        return None
    h = hashlib.sha256()
    for src in sorted(p4_path.parent.rglob("*.p4")):
        h.update(str(src.relative_to(p4_path.parent)).encode() + b"\0" + src.read_bytes())
    return out_dir.parents[1] / CACHE_DIR / f"{p4_path.stem}-{h.hexdigest()[:16]}"


def _copy_build(src: Path, dst: Path, into_cache: bool = False) -> bool:
    """Copy a build's files (JSON, P4Info, p4c log) from src to dst; False when src
    lacks one. Into the cache: through a temporary folder renamed at the end, so a
    half-written cache is never read."""
    names = [f for f in sorted(p.name for p in src.glob("*")) if f.endswith(
        (".json", ".p4info.txtpb", ".p4c.log"))] if src.is_dir() else []
    if len(names) < 3:
        return False
    target = dst.with_name(dst.name + f".tmp{os.getpid()}") if into_cache else dst
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(src / name, target / name)
    if into_cache:
        try:
            target.rename(dst)
        except OSError:        # another point stored it first
            shutil.rmtree(target, ignore_errors=True)
    return True


# --- the switch process --------------------------------------------------------------------

def switch_argv(device_id: int, ports: dict[int, str], grpc_addr: str, log_file: str | Path,
                thrift_port: int | None = None, pcap_dir: str | Path | None = None,
                cpu_port: int | None = None, log_level: str = "info",
                binary: str = SWITCH) -> list[str]:
    """simple_switch_grpc argv: general bmv2 options, then `--`, then the gRPC target's."""
    argv = [binary, "--no-p4", "--device-id", str(int(device_id))]
    for no, intf in sorted(ports.items()):
        argv += ["-i", f"{int(no)}@{intf}"]
    if thrift_port is not None:
        argv += ["--thrift-port", str(int(thrift_port))]
    if pcap_dir is not None:
        argv.append(f"--pcap={pcap_dir}")
    argv += ["--log-file", str(log_file), "--log-flush", "-L", log_level]
    argv += ["--", "--grpc-server-addr", grpc_addr]
    if cpu_port is not None:
        argv += ["--cpu-port", str(int(cpu_port))]
    return argv


def _listening(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def _log_files(log_file: Path) -> list[Path]:
    # older bmv2 (spdlog rotating sink) appends ".txt" to --log-file
    return [p for p in (log_file, Path(f"{log_file}.txt")) if p.exists()]


def _packet_socket_ifindexes(pid: int) -> set[int]:
    """Interfaces (ifindex) on which process `pid` holds a bound packet socket:
    how BMv2 receives a port's frames (libpcap). /proc/<pid>/net/packet lists the
    packet sockets of pid's network namespace; its fds say which are pid's."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for line in Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]:
        cols = line.split()   # sk RefCnt Type Proto Iface R Rmem User Inode
        if len(cols) >= 9 and cols[8] in inodes:
            out.add(int(cols[4]))
    return out


def ports_not_up(pid: int, ports: dict[int, str], log_files: list[Path]) -> list[str]:
    """Why some of `ports` did not come up in switch process `pid` ([] = all up):
    BMv2 logs PORT_ADD_FAILED and keeps running, so the process being alive
    proves nothing. Checked: the log has no such line, and each port's
    interface exists and has one of pid's packet sockets bound to it."""
    problems = []
    for path in log_files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        problems += [f"{path.name}: {line.strip()}" for line in text.splitlines()
                     if PORT_ADD_FAILED in line]
    if not ports:
        return problems
    try:
        bound = _packet_socket_ifindexes(pid)
    except OSError as e:
        return problems + [f"cannot inspect the switch's sockets in /proc/{pid}: {e}"]
    for no, intf in sorted(ports.items()):
        try:   # this process's network namespace (the switch's); /sys may show another's
            ifindex = socket.if_nametoindex(intf)
        except OSError:
            problems.append(f"port {no}: interface {intf} does not exist")
            continue
        if ifindex not in bound:
            problems.append(f"port {no}: the switch has no packet socket on {intf}")
    return problems


def start_switch(argv: list[str], grpc_addr: str, log_file: str | Path, console_log: str | Path,
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen,
                 ready_timeout: float = 10.0, ports: dict[int, str] | None = None,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start simple_switch_grpc and wait until it is ready: PID alive, its gRPC
    port listening (BMv2 adds its ports before it serves gRPC) and every port up
    (ports_not_up). Otherwise stop it, by its PID, and raise Bmv2Error with what
    to look at."""
    log_file, console_log = Path(log_file), Path(console_log)
    console_log.parent.mkdir(parents=True, exist_ok=True)
    with open(console_log, "ab") as out:
        kw = {"env": env} if env is not None else {}
        proc = popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **kw)
    try:
        why = _wait_ready(proc, grpc_addr, ready_timeout, ports or {}, log_file, console_log)
    except BaseException:
        stop_switch(proc)
        raise
    if why is None:
        return proc
    stop_switch(proc)
    logs = [console_log] + _log_files(log_file)
    raise Bmv2Error(
        f"simple_switch_grpc did not become ready ({why})\n"
        f"  command: {' '.join(map(str, argv))}\n"
        + "".join(f"  log: {p}\n{_tail(p)}\n" for p in logs))


def _wait_ready(proc: subprocess.Popen, grpc_addr: str, ready_timeout: float,
                ports: dict[int, str], log_file: Path, console_log: Path) -> str | None:
    """None when ready, else why not."""
    deadline = time.monotonic() + ready_timeout
    while True:
        rc = proc.poll()
        if rc is not None:
            return f"exit code {rc}"
        if _listening(grpc_addr):
            problems = ports_not_up(proc.pid, ports, [console_log] + _log_files(log_file))
            return None if not problems else "ports did not come up: " + "; ".join(problems)
        if time.monotonic() > deadline:
            return f"no gRPC on {grpc_addr} after {ready_timeout:.0f}s"
        time.sleep(0.1)


def stop_switch(proc: subprocess.Popen, timeout: float = 5.0) -> int | None:
    """SIGTERM, then SIGKILL: only this process, by its PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(2.0)
    return proc.returncode


def check_options(options: dict | None) -> dict:
    """switch.options for bmv2 (without the testbed's "pipeline"); refuses the rest."""
    options = {k: v for k, v in (options or {}).items() if k != "pipeline"}
    unknown = sorted(set(options) - set(NODE_OPTIONS))
    if unknown:
        raise Bmv2Error(f"switch.options {unknown} do not apply to switch.backend bmv2; "
                        f"it accepts {list(NODE_OPTIONS)}")
    return options


def node_params(sw: str, device_id: int, grpc_port: int, log_dir: str | Path,
                options: dict | None = None) -> dict:
    """The addSwitch() keyword arguments of one Bmv2SwitchNode in a run. Ports
    are fixed per switch (the run has its own network namespace); pcaps are
    the network's tcpdumps, not bmv2's --pcap. Unknown options are refused."""
    options = check_options(options)
    n = int(device_id)
    return {"device_id": n, "grpc_port": int(grpc_port), "thrift_port": thrift_port(n),
            "log_dir": Path(log_dir), **options}


def control_info(switches: list[str], options: dict | None = None) -> dict:
    """What the control plane needs beside P4Runtime to drive a run's BMv2
    switches: each one's Thrift address (registers) and the tools' prefix."""
    from testbed.switch.p4runtime_server import device_id_for  # noqa: PLC0415
    options = dict(options or {})
    return {"thrift": {sw: f"127.0.0.1:{thrift_port(device_id_for(sw))}" for sw in switches},
            "prefix": options.get("bmv2_prefix")}


class Bmv2SwitchNode(Switch):
    """Mininet switch running simple_switch_grpc on its veth ends (root namespace).

    net.addSwitch("s1", cls=Bmv2SwitchNode, device_id=1, grpc_port=50001,
                  log_dir=run/"logs"/"p0", pcap_dir=run/"pcaps"/"p0")
    """

    accepts_switch_config = False   # testbed.net.mininet_net: not the soft switch

    def __init__(self, name: str, device_id: int = 1, grpc_port: int = 50001,
                 log_dir: str | Path | None = None, pcap_dir: str | Path | None = None,
                 thrift_port: int | None = None, ready_timeout: float = 10.0,
                 binary: str | None = None, log_level: str = "info",
                 bmv2_prefix: str | None = None, **params):
        if Switch is object:
            raise Bmv2Error("Bmv2SwitchNode needs Mininet (run `make setup`)")
        params["inNamespace"] = False
        Switch.__init__(self, name, **params)
        self.device_id = device_id
        self.grpc_addr = f"127.0.0.1:{int(grpc_port)}"
        self.log_dir = Path(log_dir) if log_dir else Path.cwd() / "logs"
        self.log_file = self.log_dir / f"{name}-bmv2.log"
        self.console_log = self.log_dir / f"{name}-bmv2-console.log"
        self.pcap_dir = pcap_dir
        self.thrift_port = thrift_port
        self.ready_timeout = float(ready_timeout)
        self.bmv2_prefix = bmv2_prefix
        self.binary = binary      # None: the installed one (bmv2_tools), resolved at start
        self.env: dict[str, str] | None = None
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        if _listening(self.grpc_addr):   # two runs must not share a switch silently
            raise Bmv2Error(f"{name}: {self.grpc_addr} is already in use; pick another grpc_port")

    def port_map(self) -> dict[int, str]:
        return {port: intf.name for intf, port in self.ports.items()
                if intf.name != "lo" and port > 0}

    def argv(self) -> list[str]:
        return switch_argv(self.device_id, self.port_map(), self.grpc_addr, self.log_file,
                           self.thrift_port, self.pcap_dir, log_level=self.log_level,
                           binary=self.binary or SWITCH)

    def start(self, controllers) -> None:
        for intf in self.port_map().values():
            self.cmd(f"ip link set {intf} up")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.binary is None:
            found = tools(self.bmv2_prefix)
            self.binary, self.env = str(found.switch), found.env()
        self.proc = start_switch(self.argv(), self.grpc_addr, self.log_file, self.console_log,
                                 popen=self.popen, ready_timeout=self.ready_timeout,
                                 ports=self.port_map(), env=self.env)

    def connected(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.proc is not None:
            stop_switch(self.proc)
            self.proc = None
        super().stop(deleteIntfs)


def device_config(build: Bmv2Build) -> bytes:
    """What SetForwardingPipelineConfig carries for BMv2: the JSON itself."""
    return build.json_path.read_bytes()


__all__ = ["bmv2_available", "tools", "thrift_port", "control_info", "compile_argv", "compile_p4",
           "compile_program", "compile_warnings", "check_options", "node_params", "ports_not_up",
           "switch_argv", "start_switch",
           "stop_switch", "Bmv2SwitchNode", "Bmv2Build", "Bmv2Error", "device_config"]
