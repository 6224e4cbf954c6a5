"""net ssh against a real SSH server: an in-process paramiko server on
127.0.0.1 (this machine has no sshd) whose exec requests run `sh -c` here.
Each "server" of the inventory is this machine under another loopback
address, so the host programs really run through paramiko, their PIDs are
read back, stopped by PID, and their results and logs gathered back."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

paramiko = pytest.importorskip("paramiko")

from testbed import runner  # noqa: E402
from testbed.net.inventory import SshNode, load_inventory  # noqa: E402
from testbed.net.ssh_net import SshNetwork  # noqa: E402
from testbed.results import PROJECT_ROOT  # noqa: E402
from testbed.scenario import expand_points, load_scenario_text  # noqa: E402

pytestmark = pytest.mark.local


class _Server(paramiko.ServerInterface):
    def __init__(self, client_key):
        self.client_key = client_key

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL if key == self.client_key else paramiko.AUTH_FAILED

    def get_allowed_auths(self, username):
        return "publickey"

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        proc = subprocess.Popen(["sh", "-c", command.decode()], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def feed():
            while True:
                data = channel.recv(65536)
                if not data:
                    break
                proc.stdin.write(data)
            proc.stdin.close()

        def pump():
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                channel.sendall(chunk)
            rc = proc.wait()
            channel.send_exit_status(rc if rc >= 0 else 128 - rc)   # as a shell reports a signal
            # EOF, and the client closes the channel. paramiko answers the exec
            # request only after check_channel_exec_request returns: a command that
            # ends first (`kill`, `true`) and a close from here would beat that answer,
            # and the client's exec_command failed with "Channel closed" (under load).
            # Data, the exit status and EOF before the answer are fine for the client.
            channel.shutdown_write()

        threading.Thread(target=feed, daemon=True).start()
        threading.Thread(target=pump, daemon=True).start()
        return True


@pytest.fixture(scope="module")
def sshd():
    """(port, host key, client key); the listening socket closes at the end."""
    host_key = paramiko.RSAKey.generate(2048)
    client_key = paramiko.RSAKey.generate(2048)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    transports = []

    def serve():
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(host_key)
            t.start_server(server=_Server(client_key))
            transports.append(t)

    threading.Thread(target=serve, daemon=True).start()
    yield lsock.getsockname()[1], host_key, client_key
    lsock.close()
    for t in transports:
        t.close()


def _connect(sshd):
    port, host_key, client_key = sshd

    def connect(node: SshNode):
        c = paramiko.SSHClient()
        c.get_host_keys().add(f"[{node.address}]:{node.port}", host_key.get_name(), host_key)
        c.set_missing_host_key_policy(paramiko.RejectPolicy())   # the key above, or refused
        c.connect(node.address, port=node.port, username=node.user, pkey=client_key,
                  look_for_keys=False, allow_agent=False, timeout=10)
        return c
    return connect


def _inventory(tmp_path: Path, port: int, hosts: list[str]) -> Path:
    lines = ["hosts:"]
    for i, h in enumerate(hosts, 1):
        lines.append(f"  {h}: {{address: 127.0.0.1, port: {port}, user: tester, python: {sys.executable}, "
                     f"project_dir: {PROJECT_ROOT}, work_dir: {tmp_path / 'remote' / h}, "
                     f"data_ip: 127.0.1.{i}, mac: '02:00:00:00:10:{i:02x}', switch_port: {i}}}")
    path = tmp_path / "inventory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


SCENARIO = """
name: ssh-ring
topology: {{kind: star, workers: 2}}
net: {{mode: ssh, inventory: {inv}}}
workload: {{kind: allreduce, algorithm: ring, sizes: [64, 1024], iterations: 3, warmup: 1, timeout_s: 60}}
"""


def test_ring_allreduce_runs_on_ssh_hosts_and_results_come_back(tmp_path, sshd, monkeypatch):
    inv = _inventory(tmp_path, sshd[0], ["w1", "w2"])
    scn = load_scenario_text(SCENARIO.format(inv=inv), "ssh-ring.yaml")
    import testbed.net.ssh_net as ssh_net
    monkeypatch.setattr(ssh_net, "connect_paramiko", _connect(sshd))
    out = runner.run_points(scn, expand_points(scn), net_mode="ssh", quick=False,
                            out_dir=tmp_path / "results", cli={})
    assert [o.status for o in out.outcomes] == ["ok"], out.outcomes
    label = out.outcomes[0].label
    # The hosts' outputs and logs came back from the servers' work folders.
    metrics = (out.run_dir / "metrics.jsonl").read_text()
    assert '"host": "w1"' in metrics and '"host": "w2"' in metrics
    assert (out.run_dir / "logs" / label / "w1.log").exists()
    # ... and they ran there: the server's copy holds the configs with its own paths.
    remote_cfg = tmp_path / "remote" / "w1" / out.run_dir.name / "points" / label / "w1.config.json"
    assert remote_cfg.exists()
    assert str(out.run_dir) not in remote_cfg.read_text()


def _wait_for_remote_line(root: Path, name: str, text: str, limit_s: float = 120.0) -> None:
    """Wait until the program's log on the "remote" side says `text` (on a
    loaded machine the interpreter may not have printed anything when the test
    would stop it: the log gathered back would then be empty)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if any(text in f.read_text() for f in root.rglob(name)):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {name} under {root} said {text!r} within {limit_s} s")


def test_stop_kills_the_remote_program_by_pid(tmp_path, sshd):
    inv = load_inventory(_inventory(tmp_path, sshd[0], ["w1", "w2"]))
    scn = load_scenario_text(SCENARIO.format(inv=tmp_path / "inventory.yaml"), "ssh-ring.yaml")
    logs = tmp_path / "run" / "logs" / "p0"
    (tmp_path / "run" / "points" / "p0").mkdir(parents=True)
    net = SshNetwork(inv, scn, logs, connect=_connect(sshd))
    net.start()
    p = net.popen("w1", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
                  logs / "w1.log")
    os.kill(p.pid, 0)   # running on this machine under the PID the server reported
    assert p.poll() is None
    _wait_for_remote_line(tmp_path / "remote", "w1.log", "up")   # started, not just spawned
    net.stop()
    assert p.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(p.pid, 0)
    assert "up" in (logs / "w1.log").read_text()
