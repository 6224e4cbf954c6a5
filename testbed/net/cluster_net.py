"""Mininet's own cluster mode (`net.mode: cluster`): the same network as
``MininetNetwork``, built by ``mininet.examples.cluster.MininetCluster`` with
hosts placed on several servers (RemoteHost over SSH, links between servers
as GRE or SSH tunnels: RemoteGRELink / RemoteSSHLink). Placement is the
scenario's `net.cluster.placement` (or round robin); the tunnels, the remote
shells and the precheck are Mininet's.

What this module adds to Mininet's classes, each because the testbed needs it
(docs/real-rack.md, section 4):
- the runner runs on `servers[0]`: hosts placed there are ordinary local hosts
  (Mininet's 'localhost'), never an SSH session to the runner's own server
  (a GRE tunnel from a server to itself cannot be created: both ends would
  have the same local/remote/key);
- a link between servers gets Mininet's tunnel class with TCIntf interfaces
  (the bandwidth shaping of TCLink); the switch end gets the few attributes
  Mininet's tunnel code asks of a node (`server`, `user`, `rcmd`, `rpopen`);
- a remote host's programs run as `cd <cwd> && exec env K=V... argv` through
  Mininet's `ssh ... sudo -E mnexec -da PID`, every word shell-quoted (Mininet
  passes the words to ssh unquoted, and ssh runs them through the remote
  shell), with the environment the run sets;
- stopping a remote host's program: SIGTERM (then SIGKILL) to every process in
  that host's namespace on its server but the host's shell, before Mininet
  closes the shells (killing the local ssh client alone would leave the remote
  program running).

Limits: every server reaches every other as root over SSH without a password
(keys, known hosts), runs the same Mininet (mnexec, sudo), and sees the
project, its venv and the run folder at the same paths as the runner (a
shared filesystem: host programs write their results there); the soft switch
runs on `servers[0]`, so every host elsewhere reaches it through a tunnel.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
from itertools import cycle
from typing import Any

from testbed.net.mininet_net import MininetNetwork

# What a remote program gets from the runner's environment besides what the run sets.
_PASS_ENV = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LANG", "LC_ALL", "PYTHONHASHSEED")
LOCAL = "localhost"   # Mininet's name for the server it runs on


def place_hosts(cluster: Any, hosts: list[str]) -> dict[str, str]:
    """host -> server: the scenario's placement, the rest round-robin over the servers."""
    rr = cycle(cluster.servers)
    return {h: cluster.placement.get(h) or next(rr) for h in hosts}


def remote_command(argv: list[str], env: dict[str, str] | None, cwd: str | None) -> list[str]:
    """argv as words for Mininet's remote popen (ssh joins them with spaces and
    the remote login shell parses them): one `sh -c` whose script changes to
    cwd and execs argv under env."""
    base = dict(os.environ)
    env = dict(env or {})
    keep = {k: v for k, v in env.items() if base.get(k) != v or k in _PASS_ENV}
    script = ((f"cd {shlex.quote(cwd)} && " if cwd else "")
              + "exec " + (f"env {' '.join(shlex.quote(f'{k}={v}') for k, v in sorted(keep.items()))} "
                           if keep else "")
              + shlex.join(argv))
    return ["sh", "-c", shlex.quote(script)]


# The shell of a remote host runs this (one line, builtins only): every process
# in its network namespace on that server outside the shell's own session (the
# host's programs: mnexec -d starts each in a session of its own) gets the
# signal; prints how many did (signal 0: how many are alive).
_SIGNAL_HOST_PROCS = ('n=0; read -r l < /proc/$$/stat; set -- ${{l##*) }}; me=$4; '
                      'for d in /proc/[0-9]*; do [ $d/ns/net -ef /proc/$$/ns/net ] || continue; '
                      'read -r l < $d/stat 2>/dev/null || continue; set -- ${{l##*) }}; '
                      '[ "$4" = "$me" ] && continue; kill -{sig} ${{d#/proc/}} 2>/dev/null && n=$((n+1)); '
                      'done; echo $n')


# How long a remote host's shell (the local ssh client) gets to exit after
# Mininet's SIGHUP before it is killed: an ssh client that keeps waiting on its
# remote end would otherwise hold Node.cleanup's wait, and the teardown, forever.
SHELL_EXIT_S = 5.0


def end_shell(shell: subprocess.Popen, grace_s: float = SHELL_EXIT_S) -> str | None:
    """SIGHUP the shell's process group (what Mininet's Node.terminate sends),
    SIGKILL it if it is still there after grace_s; the problem, or None."""
    if shell.poll() is not None:
        return None
    try:
        os.killpg(shell.pid, signal.SIGHUP)
        shell.wait(timeout=grace_s)
        return None
    except ProcessLookupError:
        return None
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(shell.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        shell.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return f"its shell (pid {shell.pid}) outlived SIGKILL"
    return f"its shell (pid {shell.pid}) ignored SIGHUP for {grace_s:g} s and was killed"


def _cluster_classes() -> tuple[type, type]:
    """(the remote host class, the MininetCluster subclass), built on first use:
    mininet is imported only where a cluster network is built."""
    from mininet.examples.cluster import MininetCluster, RemoteHost  # noqa: PLC0415
    from mininet.link import TCIntf  # noqa: PLC0415
    from mininet.node import Node  # noqa: PLC0415

    class ClusterHost(RemoteHost):
        """Mininet's RemoteHost whose popen keeps argv, environment and cwd."""

        def popen(self, *args: Any, **kw: Any) -> Any:
            if not self.isRemote or kw.get("mncmd") is not None:
                return super().popen(*args, **kw)
            argv = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else (
                args[0].split() if len(args) == 1 else list(args))
            cmd = remote_command(argv, kw.pop("env", None), kw.pop("cwd", None) or os.getcwd())
            return super().popen(cmd, **kw)

        def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:
            """RemoteMixin._popen without its preexec_fn (os.setpgrp run in the
            child between fork and exec, which can hang or abort a child of a
            process holding gRPC threads: the P4Runtime controller's; see
            testbed.net.base.with_parent_death_signal): a new session instead."""
            cmd = cmd.split() if isinstance(cmd, str) else list(cmd)
            if self.isRemote:
                ssh = [w for w in self.sshcmd if tt or w != "-tt"]
                cmd = ssh + (["sudo", "-E"] if sudo else []) + cmd
            elif self.user and not sudo:
                cmd = ["sudo", "-E", "-u", self.user, *cmd]
            params.pop("preexec_fn", None)
            params.setdefault("start_new_session", True)
            return Node._popen(self, cmd, **params)

        stop_problem: str | None = None

        def terminate(self) -> None:
            """Node.terminate with a bound: the shell (for a remote host, the
            ssh client) is ended by end_shell first, so Node.cleanup's wait for
            it returns at once."""
            if self.shell is not None:
                self.stop_problem = end_shell(self.shell)
            super().terminate()

        def addIntf(self, intf: Any, port: Any = None, moveIntfFn: Any = None) -> Any:  # noqa: N802
            # Mininet's tunnel code has already put the interface into this
            # host's namespace on its server; a move from here would look for
            # it in the runner's namespace.
            if self.isRemote:
                return super().addIntf(intf, port=port, moveIntfFn=lambda *_a, **_k: True)
            return super().addIntf(intf, port=port) if moveIntfFn is None else \
                super().addIntf(intf, port=port, moveIntfFn=moveIntfFn)

    class Cluster(MininetCluster):
        """MininetCluster with per-link classes: a link between two servers is
        Mininet's tunnel (TCIntf ends), a link within one server stays TCLink."""

        tunnel_link: type = None  # type: ignore[assignment]

        def addSwitch(self, name: str, cls: Any = None, **params: Any) -> Any:  # noqa: N802
            sw = super().addSwitch(name, cls=cls, **params)
            _as_server_side(sw, self.user)
            return sw

        def addLink(self, node1: Any, node2: Any, port1: Any = None, port2: Any = None,  # noqa: N802
                    cls: Any = None, **params: Any) -> Any:
            n1 = self[node1] if isinstance(node1, str) else node1
            n2 = self[node2] if isinstance(node2, str) else node2
            if getattr(n1, "server", LOCAL) != getattr(n2, "server", LOCAL):
                cls = self.tunnel_link
                params["intf"] = TCIntf
            return super().addLink(n1, n2, port1, port2, cls=cls, **params)

    return ClusterHost, Cluster


def _as_server_side(node: Any, user: str) -> None:
    """Give a node on the runner's server (the switch) what Mininet's tunnel
    code asks of a RemoteNode: server, serverIP, user, rcmd, rpopen (run in
    the runner's namespace, where the switch's ports are)."""
    if hasattr(node, "rcmd"):
        return

    def rpopen(*cmd: Any, sudo: bool = True, **opts: Any) -> subprocess.Popen:  # noqa: ARG001
        argv = cmd[0] if len(cmd) == 1 else list(cmd)
        argv = argv.split() if isinstance(argv, str) else list(argv)
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def rcmd(*cmd: Any, **opts: Any) -> str:
        out, _ = rpopen(*cmd, **opts).communicate()
        return out.decode(errors="replace")

    node.server, node.serverIP, node.user = LOCAL, "127.0.0.1", user
    node.rpopen, node.rcmd = rpopen, rcmd


class ClusterNetwork(MininetNetwork):
    def __init__(self, cluster: Any, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.cluster = cluster
        self.placement = place_hosts(cluster, list(self.hosts))

    def _mininet_server(self, server: str) -> str:
        """The runner runs on servers[0]: Mininet calls that one localhost."""
        return LOCAL if server == self.cluster.servers[0] else server

    def _link_cls(self) -> type:
        from mininet.examples.cluster import RemoteGRELink, RemoteSSHLink  # noqa: PLC0415
        return RemoteGRELink if self.cluster.link == "gre" else RemoteSSHLink

    def _cluster_kw(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"servers": list(self.cluster.servers), "link": self._link_cls()}
        if self.cluster.user:
            kw["user"] = self.cluster.user
        return kw

    def _make_mininet(self, **kw: Any) -> Any:
        host_cls, cluster_cls = _cluster_classes()
        cluster_kw = self._cluster_kw()
        cluster_cls.tunnel_link = cluster_kw.pop("link")
        cluster_kw["servers"] = [self._mininet_server(s) for s in cluster_kw["servers"]]
        kw.pop("link", None)   # links within a server: TCLink (addLink's cls); between: the tunnel
        kw["host"] = host_cls
        return cluster_cls(**kw, **cluster_kw)

    def _host_params(self, host: str) -> dict[str, Any]:
        server = self._mininet_server(self.placement[host])
        if server == LOCAL:   # exactly a mininet-mode host
            from mininet.node import Host  # noqa: PLC0415
            return {"cls": Host}
        params: dict[str, Any] = {"server": server}
        if self.cluster.user:
            params["user"] = self.cluster.user
        return params

    def remote_hosts(self) -> list[str]:
        """Hosts placed on a server other than the runner's."""
        return [h for h, s in self.placement.items() if self._mininet_server(s) != LOCAL]

    def _stop_remote_programs(self, grace_s: float = 3.0) -> None:
        """SIGTERM, then SIGKILL, every process in each remote host's namespace
        but its shell: the programs the run started there through ssh."""
        import time  # noqa: PLC0415
        live = []
        for host in self.remote_hosts():
            try:
                node = self._net[host]
                if node.shell is None or node.waiting:
                    continue
                if node.cmd(_SIGNAL_HOST_PROCS.format(sig="TERM")).strip() not in ("", "0"):
                    live.append(node)
            except Exception as e:  # noqa: BLE001 - teardown goes on
                self.errors.append(f"stopping programs on {host}: {type(e).__name__}: {e}")
        deadline = time.monotonic() + grace_s
        while live and time.monotonic() < deadline:
            time.sleep(0.2)
            live = [n for n in live
                    if n.cmd(_SIGNAL_HOST_PROCS.format(sig="0")).strip() not in ("", "0")]
        for node in live:
            node.cmd(_SIGNAL_HOST_PROCS.format(sig="KILL"))
            self.errors.append(f"had to SIGKILL programs on remote host {node.name}")

    def _teardown(self) -> None:
        net = self._net
        if net is not None:
            self._stop_remote_programs()
        super()._teardown()
        for host in self.remote_hosts() if net is not None else []:
            problem = getattr(net.nameToNode.get(host), "stop_problem", None)
            if problem:
                self.errors.append(f"stopping remote host {host}: {problem}")

    def _record_build(self, rec: Any) -> None:
        kw = self._cluster_kw()
        rec.note(f"MininetCluster(servers={kw['servers']}, link={kw['link'].__name__}"
                 + (f", user={kw['user']}" if "user" in kw else "") + "): mininet.examples.cluster")
        for host, server in self.placement.items():
            rec.note(f"placement: {host} on {server}")
        rec.note(f"switches {', '.join(self.switch_names)} and the runner on {self.cluster.servers[0]}")
        super()._record_build(rec)
