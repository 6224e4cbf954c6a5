"""net cluster: what a remote host's program gets (testbed.net.cluster_net).
Mininet's RemoteHost hands its words to ssh, which joins them with spaces for
the remote login shell; `remote_command` must survive that with argv, the
run's environment and the working folder intact. Simulated here by joining
the words and running them through `sh -c`, as the server's shell would."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from testbed.net.cluster_net import LOCAL, end_shell, place_hosts, remote_command

PROBE = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('RUN_ID'), os.getcwd()]))"


def test_argv_environment_and_folder_survive_the_remote_shell(tmp_path):
    argv = [sys.executable, "-c", PROBE, "a b", "it's", '{"k": [1, 2]}', "$HOME", "*"]
    words = remote_command(argv, {"RUN_ID": "run 1; $x"}, str(tmp_path))
    res = subprocess.run(["sh", "-c", " ".join(words)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [argv[3:], "run 1; $x", str(tmp_path)]


def test_only_what_the_run_sets_and_the_interpreter_paths_travel(monkeypatch):
    monkeypatch.setenv("INNET_SOMETHING_LOCAL", "x")
    monkeypatch.setenv("PATH", "/opt/venv/bin:/usr/bin")
    script = remote_command(["prog"], {"INNET_SOMETHING_LOCAL": "x", "PATH": "/opt/venv/bin:/usr/bin",
                                       "NEW": "1"}, None)[2]
    assert "NEW=1" in script and "PATH=/opt/venv/bin:/usr/bin" in script
    assert "INNET_SOMETHING_LOCAL" not in script and "cd " not in script


def test_round_robin_placement_after_the_named_hosts():
    cluster = SimpleNamespace(servers=["srv-a", "srv-b"], placement={"w3": "srv-a"})
    assert place_hosts(cluster, ["w1", "w2", "w3", "w4"]) == {"w1": "srv-a", "w2": "srv-b", "w3": "srv-a",
                                                               "w4": "srv-a"}
    assert LOCAL == "localhost"   # Mininet's name for the runner's own server


def _shell(script: str) -> subprocess.Popen:
    # SIGHUP at its default, whatever pytest inherited: under nohup it is ignored, and an
    # ignored signal stays ignored across exec (the shell would ignore the hangup too).
    p = subprocess.Popen(["sh", "-c", script], start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    time.sleep(0.2)                       # the trap is set before the signal comes
    return p


def test_a_shell_that_exits_on_hangup_ends_at_once():
    p = _shell("sleep 30")
    t = time.monotonic()
    assert end_shell(p, grace_s=5) is None
    assert p.returncode is not None and time.monotonic() - t < 3


def test_a_shell_that_ignores_hangup_is_killed_after_the_grace_and_named():
    """The cluster teardown's hang: Node.cleanup waits for a remote host's ssh client
    without a bound; end_shell bounds it and says what it had to do."""
    p = _shell("trap '' HUP; sleep 30 & wait")
    t = time.monotonic()
    problem = end_shell(p, grace_s=0.5)
    assert p.returncode == -9 and time.monotonic() - t < 5
    assert problem == f"its shell (pid {p.pid}) ignored SIGHUP for 0.5 s and was killed"
    assert end_shell(p) is None           # already gone: nothing to do
