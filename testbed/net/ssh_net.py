"""Real hosts over SSH (`net.mode: ssh`): the same host programs, started with
paramiko on the servers of an inventory (testbed.net.inventory), cabled to one
switch (a Tofino, or a soft/bmv2 switch on a server).

Per host program: the point's work folder (the configs the workload wrote) is
copied to `<work_dir>/<run>/points/<point>/` on the server (tar over an SSH
channel), local paths in argv, environment and configs are rewritten to the
server's (the run folder -> its copy, the project -> `project_dir`, the
runner's python -> `python`), and the program is exec'd there with its output
in a log beside it. Its PID is read back first, so teardown and Ctrl-C stop
exactly that process (SIGTERM, then SIGKILL) and nothing else. On stop the
server's copy of the work folder (the program's results) and its log come back
into the run folder.
"""
from __future__ import annotations

import io
import json
import os
import shlex
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable

from testbed.net.base import HostInfo, Network, NetworkError
from testbed.net.inventory import Inventory, SshHost, SshNode
from testbed.net.topology import (SWITCH_VIP, SWITCH_VIP_MAC, HostAddr, LinkPlan, TopologyPlan,
                                  forwarding_tables)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 3.0


def connect_paramiko(node: SshNode, timeout: float = 15.0) -> Any:
    """An SSHClient to node: its key (or the agent's), known_hosts checked."""
    import paramiko  # noqa: PLC0415 - only real-rack runs need it

    client = paramiko.SSHClient()
    client.load_system_host_keys()
    # An unknown server is refused, not trusted silently: add it with ssh-keyscan first.
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(node.address, port=node.port, username=node.user,
                       key_filename=os.path.expanduser(node.key) if node.key else None,
                       timeout=timeout, allow_agent=node.key is None)
    except (OSError, paramiko.SSHException) as e:
        raise NetworkError(f"ssh {node.where} ({node.name}): {type(e).__name__}: {e}") from None
    return client


def _exec(client: Any, command: str, stdin: bytes | None = None, timeout: float = 60.0) -> tuple[int, bytes]:
    """Run a command on the server; (exit status, stdout+stderr)."""
    chan = client.get_transport().open_session(timeout=timeout)
    chan.set_combine_stderr(True)
    chan.exec_command(command)
    if stdin is not None:
        chan.sendall(stdin)
    chan.shutdown_write()
    out = b""
    deadline = time.monotonic() + timeout
    while True:
        if chan.recv_ready():
            out += chan.recv(65536)
        elif chan.exit_status_ready() and not chan.recv_ready():
            break
        elif time.monotonic() > deadline:
            chan.close()
            return 124, out
        else:
            time.sleep(0.01)
    rc = chan.recv_exit_status()
    chan.close()
    return rc, out


class RemoteProcess:
    """A program running on a server, Popen-like (poll, wait, terminate, kill)."""

    def __init__(self, client: Any, node: SshNode, argv: list[str], env: dict[str, str], cwd: str,
                 log: str):
        self.client, self.node, self.args = client, node, argv
        self.log = log
        env_args = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()))
        # `echo $$` then exec: the PID printed is the program's own.
        command = (f"mkdir -p {shlex.quote(cwd)} && cd {shlex.quote(cwd)} && echo $$ && "
                   f"exec env {env_args} {shlex.join(argv)} > {shlex.quote(log)} 2>&1 < /dev/null")
        self.chan = client.get_transport().open_session()
        self.chan.exec_command(command)
        line = b""
        deadline = time.monotonic() + 15
        while not line.endswith(b"\n"):
            if self.chan.recv_ready():
                line += self.chan.recv(1)
            elif self.chan.exit_status_ready() or time.monotonic() > deadline:
                raise NetworkError(f"{node.name} ({node.where}): could not start "
                                   f"{shlex.join(argv)} (exit {self.chan.recv_exit_status() if self.chan.exit_status_ready() else 'none'})")
            else:
                time.sleep(0.01)
        self.pid = int(line.strip())
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.chan.exit_status_ready():
            self.returncode = self.chan.recv_exit_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                import subprocess  # noqa: PLC0415
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: str) -> None:
        if self.poll() is None:
            _exec(self.client, f"kill -{sig} {self.pid}", timeout=15)

    def terminate(self) -> None:
        self.send_signal("TERM")

    def kill(self) -> None:
        self.send_signal("KILL")


def _tar_dir(local: Path, rewrite: Callable[[str], str]) -> bytes:
    """The folder's files as a tar, text files with their paths rewritten."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(local.rglob("*")):
            if not p.is_file():
                continue
            data = p.read_bytes()
            if p.suffix in (".json", ".yaml", ".txt"):
                data = rewrite(data.decode()).encode()
            info = tarfile.TarInfo(str(p.relative_to(local)))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class SshNetwork(Network):
    def __init__(self, inventory: Inventory, scenario: Any, run_dir: Path, seed: int = 0,
                 recorder: Any = None, connect: Callable[[SshNode], Any] | None = None):
        inventory.check_scenario(scenario)
        self.inventory = inventory
        self.recorder = recorder
        self.connect = connect or (lambda node: connect_paramiko(node))
        self.log_dir = Path(run_dir)                 # <run>/logs/<point>
        self.run_root = self.log_dir.parent.parent   # <run>
        self.point = self.log_dir.name
        self.seed = seed
        names = list(scenario.hosts())
        self.nodes: dict[str, SshHost] = {h: inventory.hosts[h] for h in names}
        self.hosts = {h: HostInfo(h, n.data_ip, n.mac) for h, n in self.nodes.items()}
        sw = inventory.switch
        self.switch_node = sw
        sw_name = sw.name if sw is not None else "s1"
        self.switch_names = [sw.name] if sw is not None else []
        self.program = scenario.switch.program
        self.plan = TopologyPlan(
            "star", [HostAddr(h, n.data_ip, n.mac) for h, n in self.nodes.items()], [sw_name],
            [LinkPlan(h, 0, sw_name, n.switch_port) for h, n in self.nodes.items()],
            {h: sw_name for h in self.nodes})
        self.forwarding = forwarding_tables(self.plan)
        self._clients: dict[str, Any] = {}
        self._procs: list[tuple[str, RemoteProcess, Path]] = []
        self._started = self._stopped = False
        self.tofino = None
        if sw is not None and sw.backend == "tofino" and sw.managed:
            from testbed.results import resolve_project_path  # noqa: PLC0415
            from testbed.switch.tofino import TofinoBackend, TofinoError  # noqa: PLC0415
            try:
                p4 = (f"{sw.project_dir}/p4/tofino/ina_tna.p4" if sw.project_dir else None)
                self.tofino = TofinoBackend(resolve_project_path(sw.ports_file), f"{sw.work_dir or '/tmp/innet'}/build",
                                            sde=sw.sde, sde_install=sw.sde_install, grpc_addr=sw.grpc_addr,
                                            device_id=sw.device_id, env={}, p4_path=p4)
            except TofinoError as e:
                raise NetworkError(f"{inventory.where('switch.ports_file')}: switch.ports_file: {e}") from None
            wired = {p.port for p in self.tofino.ports}
            unwired = sorted({n.switch_port for n in self.nodes.values()} - wired)
            if unwired:
                raise NetworkError(f"{inventory.where('switch.ports_file')}: switch.ports_file has no "
                                   f"front-panel port for testbed port(s) {unwired}")
            # The P4 program sees the ASIC's dev_ports: table entries and groups use them
            # once the ports file knows them all (`pm show`, column D_P).
            dev = {p.port: p.dev_port for p in self.tofino.ports}
            if all(dev[n.switch_port] is not None for n in self.nodes.values()):
                self.plan.links[:] = [LinkPlan(ln.node1, 0, ln.node2, dev[ln.port2]) for ln in self.plan.links]
                self.forwarding = forwarding_tables(self.plan)

    # --- addressing --------------------------------------------------------------
    @property
    def switch_info(self) -> dict[str, Any]:
        sw = self.switch_node
        if sw is None:
            return {}
        return {"ip": SWITCH_VIP, "mac": SWITCH_VIP_MAC, "switches": [sw.name], "backend": sw.backend,
                "plan": self.plan, "forwarding": self.forwarding,
                "ports": {sw.name: sorted(self.plan.switch_ports(sw.name))},
                "p4runtime": {sw.name: sw.grpc_addr}, "device_ids": {sw.name: sw.device_id}}

    def remote_dir(self, node: SshNode) -> str:
        return f"{node.work_dir}/{self.run_root.name}"

    def _rewrite(self, node: SshNode) -> Callable[[str], str]:
        """Local paths -> the server's: the run folder, the project, the runner's python."""
        pairs = [(str(self.run_root), self.remote_dir(node)),
                 (sys.executable, node.python or "python3"),
                 (str(PROJECT_ROOT), node.project_dir or str(PROJECT_ROOT))]

        def rewrite(text: str) -> str:
            for a, b in pairs:
                text = text.replace(a, b)
            return text
        return rewrite

    def _client(self, name: str, node: SshNode) -> Any:
        if name not in self._clients:
            self._clients[name] = self.connect(node)
        return self._clients[name]

    # --- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        rec = self.recorder
        for name, node in self.nodes.items():
            script = self._host_setup(node)
            if rec is not None:
                rec.script(name, script, "host setup over SSH (paramiko)", where=node.where)
            else:
                rc, out = _exec(self._client(name, node), script)
                if rc != 0:
                    raise NetworkError(f"{name} ({node.where}): host setup failed ({rc}): "
                                       f"{out.decode(errors='replace').strip()[-400:]}")
        self._start_switch()

    def _host_setup(self, node: SshHost) -> str:
        lines = [f"mkdir -p {shlex.quote(self.remote_dir(node))}"]
        if node.data_intf:
            # Nothing answers ARP for the switch's virtual address (needs root or CAP_NET_ADMIN).
            lines.append(f"ip neigh replace {SWITCH_VIP} lladdr {SWITCH_VIP_MAC} dev "
                         f"{shlex.quote(node.data_intf)} nud permanent")
        return "\n".join(lines)

    def _start_switch(self) -> None:
        sw, rec = self.switch_node, self.recorder
        if sw is None:
            if rec is not None:
                rec.note("no switch in the inventory: host algorithms over the servers' own network")
            return
        if not sw.managed:
            if rec is not None:
                rec.note(f"switch {sw.name}: {sw.backend}, already running (managed: false); "
                         f"the control plane programs it at {sw.grpc_addr}")
            return
        if self.tofino is not None:
            plan = self.tofino.plan()
            steps = [(plan.compile, "compile p4/tofino/ina_tna.p4 (bf-p4c)"),
                     *((c, "install for bf_switchd") for c in plan.install),
                     (plan.switchd, "bf_switchd (keep running)"),
                     (plan.bfshell, "bring up the front-panel ports (bfshell ucli pm)")]
            if rec is None:
                self._run_tofino(plan, steps)
                return
            for argv, what in steps:
                rec.command(sw.name, argv, what, env=plan.env, where=sw.where)
            rec.config(f"{sw.name}: {plan.bfshell[-1]}", plan.bfshell_script)
            rec.note(f"Tofino device config: pack_tofino_config({', '.join(f'{k}={v}' for k, v in plan.device_config_inputs.items())}); "
                     f"P4Info {plan.p4info_path} (bf-p4c's); this dry run's controller shows the checked-in P4Info")
            for n in plan.notes:
                rec.note(f"tofino: {n}")
            return
        raise NetworkError(f"{self.inventory.where('switch.managed')}: switch {sw.name}: the ssh network "
                           f"does not start a {sw.backend} switch on a server; start it there yourself "
                           f"(its P4Runtime server at {sw.grpc_addr}) and set `managed: false`")

    def _run_tofino(self, plan: Any, steps: list[tuple[list[str], str]]) -> None:
        """The Tofino plan over SSH on the switch's CPU: compile, install, bf_switchd
        (kept as a RemoteProcess, stopped by PID), the ports script through bfshell.
        Never run against a real Tofino (none here): see docs/real-rack.md."""
        sw = self.switch_node
        client = self._client(sw.name, sw)
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in plan.env.items())
        rc, out = _exec(client, f"mkdir -p {shlex.quote(str(Path(plan.bfshell[-1]).parent))} && cat > "
                        f"{shlex.quote(plan.bfshell[-1])}", stdin=plan.bfshell_script.encode())
        for argv, what in steps:
            if argv is plan.switchd:
                p = RemoteProcess(client, sw, argv, dict(plan.env), plan.env["SDE"],
                                  f"{Path(plan.bfshell[-1]).parent}/bf_switchd.log")
                self._procs.append((sw.name, p, self.log_dir / f"{sw.name}-bf_switchd.log"))
                time.sleep(5)   # bf_switchd serves P4Runtime only after the ASIC init; the controller waits too
                if p.poll() is not None:
                    raise NetworkError(f"switch {sw.name}: bf_switchd exited with {p.returncode}")
                continue
            rc, out = _exec(client, f"env {env} {shlex.join(argv)}", timeout=1800)
            if rc != 0:
                raise NetworkError(f"switch {sw.name} ({sw.where}): {what} failed ({rc}): "
                                   f"{shlex.join(argv)}: {out.decode(errors='replace').strip()[-600:]}")

    def popen(self, host: str, argv: list[str], log_path: str | Path,
              env: dict[str, str] | None = None) -> Any:
        if host not in self.nodes:
            raise NetworkError(f"unknown host {host!r}; hosts are {', '.join(self.nodes)}")
        node = self.nodes[host]
        rewrite = self._rewrite(node)
        # Only what the run sets on top of the runner's own environment travels.
        env = {k: rewrite(v) for k, v in (env or {}).items() if os.environ.get(k) != v}
        from testbed.net.registry import ENV_RUN  # noqa: PLC0415
        env[ENV_RUN] = self.run_root.name
        remote_argv = [rewrite(a) for a in argv]
        work = self.run_root / "points" / self.point
        remote_work = rewrite(str(work))
        remote_log = f"{remote_work}/{host}.log"
        if self.recorder is not None:
            from testbed.net.plan import RecordedProcess  # noqa: PLC0415
            self.recorder.command(host, ["tar", "-C", remote_work, "-xf", "-"],
                                  f"copy {work} (the configs) to the server", where=node.where)
            self.recorder.command(host, remote_argv, f"host program (paramiko exec), log {remote_log}, "
                                  f"gathered into {log_path}", env=env, where=node.where)
            return RecordedProcess(host, argv)
        client = self._client(host, node)
        rc, out = _exec(client, f"mkdir -p {shlex.quote(remote_work)} && tar -C {shlex.quote(remote_work)} -xf -",
                        stdin=_tar_dir(work, rewrite) if work.exists() else _tar_dir(Path(os.devnull), rewrite))
        if rc != 0:
            raise NetworkError(f"{host} ({node.where}): copying {work} failed ({rc}): {out.decode(errors='replace')[-300:]}")
        p = RemoteProcess(client, node, remote_argv, env, remote_work, remote_log)
        self._procs.append((host, p, Path(log_path)))
        return p

    def _teardown(self) -> None:
        errors = []
        try:
            live = [p for _, p, _ in self._procs if p.poll() is None]
            for p in live:
                p.terminate()
            deadline = time.monotonic() + GRACE_S
            for p in live:
                try:
                    p.wait(max(0.05, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001 - still running: SIGKILL by its PID
                    p.kill()
            self._gather(errors)
        finally:
            for c in self._clients.values():
                c.close()
            self._clients.clear()
        if errors:
            raise NetworkError("; ".join(errors))

    def _gather(self, errors: list[str]) -> None:
        """Each server's copy of the point's work folder and its logs, back into the run folder."""
        work = self.run_root / "points" / self.point
        for host, p, log_path in self._procs:
            node = self.nodes.get(host)
            if node is None:   # the switch's bf_switchd: its log stays on the switch
                continue
            remote_work = self._rewrite(node)(str(work))
            rc, out = _exec(p.client, f"tar -C {shlex.quote(remote_work)} -cf - .", timeout=120)
            if rc != 0:
                errors.append(f"{host}: gathering {remote_work} failed ({rc})")
                continue
            with tarfile.open(fileobj=io.BytesIO(out)) as tar:
                for m in tar.getmembers():
                    if not m.isfile():
                        continue
                    name = Path(m.name)
                    if name.is_absolute() or ".." in name.parts:
                        continue
                    data = tar.extractfile(m).read()
                    if name.name == f"{host}.log":
                        log_path.parent.mkdir(parents=True, exist_ok=True)
                        log_path.write_bytes(data)
                    elif not (work / name).exists():   # the host's outputs, not our own configs
                        (work / name).parent.mkdir(parents=True, exist_ok=True)
                        (work / name).write_bytes(data)

    def describe(self) -> str:
        return json.dumps({h: n.where for h, n in self.nodes.items()})
