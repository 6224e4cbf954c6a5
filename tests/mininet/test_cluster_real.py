"""`net.mode: cluster` run for real on one machine: two "servers" as network
namespaces joined by a veth pair (10.231.0.1 and 10.231.0.2, inside those
namespaces only), each with its own sshd on its address, SSH keys made for
the test; the runner runs on the first server (`ip netns exec` into it, with
the test's ssh_config bound over /etc/ssh/ssh_config in a private mount
namespace and HOME in tmp: nothing of the machine's SSH setup is read or
written), Mininet's MininetCluster places w2 and w4 on the second server
(RemoteHost over SSH) and the quickstart's in-switch point runs across them.

GRE (RemoteGRELink) needs the kernel's gretap device: where it is missing
(this machine's kernel: `ip link add ... type gretap` says "Unknown device
type") the GRE run is skipped with that reason and the SSH tap tunnel
(RemoteSSHLink) carries the links between servers.

Skipped with the reason where sshd (Debian: openssh-server), sudo, ssh or
ssh-keygen is missing, or without root.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from e2e_harness import ENV_RUN, QUICKSTART, ROOT, TESTBED, root_interfaces

SSHD = "/usr/sbin/sshd"
SERVERS = {"a": "10.231.0.1", "b": "10.231.0.2"}


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces named with `ip netns`, sshd)"
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (Debian package openssh-server)"
    for tool, pkg in (("ssh", "openssh-client"), ("ssh-keygen", "openssh-client"), ("sudo", "sudo"),
                      ("ip", "iproute2"), ("mnexec", "mininet")):
        if shutil.which(tool) is None:
            return f"{tool} is missing (Debian package {pkg}); Mininet's cluster code runs it"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing: Mininet's SSH tunnels are tap devices"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def sh(*argv: str, check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {res.returncode}: {res.stdout}{res.stderr}")
    return res


class Servers:
    """Two namespaces with an sshd each; everything the test made, to undo."""

    def __init__(self, d: Path):
        tag = str(os.getpid())
        self.ns = {k: f"innet-cl{k}-{tag}" for k in SERVERS}
        self.dir = d
        self.home = d / "home"
        self.ssh_config = d / "ssh_config"
        self.sshd: dict[str, subprocess.Popen] = {}
        self.made_run_sshd = False

    def ssh_in(self, server: str, *argv: str, timeout: float = 120, env: dict | None = None
               ) -> subprocess.CompletedProcess:
        """Run argv on `server`'s namespace with the test's SSH client setup."""
        script = f'mount --bind "$1" /etc/ssh/ssh_config && shift && exec "$@"'
        return subprocess.run(["ip", "netns", "exec", self.ns[server], "unshare", "-m", "--propagation",
                               "private", "sh", "-c", script, "sh", str(self.ssh_config), *argv],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**{k: v for k, v in os.environ.items() if k != ENV_RUN},
                                   "HOME": str(self.home), **(env or {})})

    def up(self) -> None:
        a, b = self.ns["a"], self.ns["b"]
        for ns in (a, b):
            sh("ip", "netns", "add", ns)
        # The veth is made inside the first namespace, its peer straight into the second.
        sh("ip", "-n", a, "link", "add", "srv0", "type", "veth", "peer", "name", "srv0", "netns", b)
        for k, ns in self.ns.items():
            sh("ip", "-n", ns, "addr", "add", f"{SERVERS[k]}/24", "dev", "srv0")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", "srv0", "up")
        key, host_key = self.dir / "id_ed25519", self.dir / "host_ed25519"
        for k in (key, host_key):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "innet-cluster-test", "-f", str(k))
        (self.dir / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        host_pub = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
        (self.dir / "known_hosts").write_text("".join(f"{ip} {host_pub}\n" for ip in SERVERS.values()))
        self.ssh_config.write_text(
            "Host 10.231.0.*\n"
            f"  IdentityFile {key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.dir / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
        (self.home / ".ssh").mkdir(parents=True)
        if not os.path.isdir("/run/sshd"):       # sshd's privilege separation directory
            os.makedirs("/run/sshd", mode=0o755)
            self.made_run_sshd = True
        for k, ns in self.ns.items():
            conf = self.dir / f"sshd_{k}.conf"
            conf.write_text(
                f"ListenAddress {SERVERS[k]}\nHostKey {host_key}\n"
                f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
                "PermitTunnel yes\n"            # RemoteSSHLink: ssh -w (tap tunnels)
                f"PidFile {self.dir / f'sshd_{k}.pid'}\n")
            # `ip netns exec` execs sshd: this Popen's pid is the sshd listener's.
            self.sshd[k] = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(conf)],
                                            stdout=open(self.dir / f"sshd_{k}.log", "w"),
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        for k in SERVERS:
            other = "b" if k == "a" else "a"
            while True:
                res = self.ssh_in(other, "ssh", "-o", "BatchMode=yes", f"root@{SERVERS[k]}", "true",
                                  timeout=20)
                if res.returncode == 0:
                    break
                assert self.sshd[k].poll() is None, (self.dir / f"sshd_{k}.log").read_text()
                assert time.monotonic() < deadline, f"sshd on {SERVERS[k]} not reachable: {res.stderr}"
                time.sleep(0.2)

    def down(self) -> None:
        for p in self.sshd.values():          # only the sshd listeners this test started
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)
        if self.made_run_sshd:
            shutil.rmtree("/run/sshd", ignore_errors=True)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    before_intf = root_interfaces()
    s = Servers(tmp_path_factory.mktemp("cluster"))
    try:
        s.up()
        yield s
    finally:
        s.down()
    # Nothing left: the namespaces, the sshd listeners and their sessions, /run/sshd.
    left = [ns for ns in s.ns.values() if ns in sh("ip", "netns", "list").stdout]
    assert not left, left
    assert all(p.poll() is not None for p in s.sshd.values())
    assert not [pid for pid in _pids() if f"-f {s.dir}" in _cmd(pid)], "an sshd of the test survived"
    assert root_interfaces() == before_intf
    if s.made_run_sshd:
        assert not os.path.isdir("/run/sshd")


def _pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _in_netns_of_server(pid: int, servers: Servers) -> bool:
    try:
        ino = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return False
    return any(os.stat(f"/run/netns/{ns}").st_ino == ino for ns in servers.ns.values())


def _sshd_pids(servers: Servers) -> set[int]:
    return {p.pid for p in servers.sshd.values()}


def _interfaces(ns: str) -> set[str]:
    out = sh("ip", "-n", ns, "-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def gretap_missing(ns: str) -> str | None:
    """Why RemoteGRELink cannot work here (None: the kernel has gretap)."""
    res = sh("ip", "-n", ns, "link", "add", "innet-gre-probe", "type", "gretap", "local", SERVERS["a"],
             "remote", SERVERS["b"], "key", "1", check=False)
    if res.returncode == 0:
        sh("ip", "-n", ns, "link", "del", "innet-gre-probe", check=False)
        return None
    return (f"this kernel ({os.uname().release}) cannot make a gretap device (`ip link add ... type "
            f"gretap`: {res.stderr.strip()}): Mininet's RemoteGRELink needs ip_gre; the SSH tunnel run "
            f"covers the cluster path here")


def test_each_server_reaches_the_other_over_ssh_as_root_with_sudo_and_mnexec(servers):
    """What MininetCluster's precheck and RemoteHost ask of a server: ssh as
    root without a password, sudo, mnexec; each session lands in the server's
    own namespace (its address, not the runner's)."""
    for src, dst in (("a", "b"), ("b", "a")):
        res = servers.ssh_in(src, "ssh", "-o", "BatchMode=yes", f"root@{SERVERS[dst]}",
                             "sudo -n true && command -v mnexec && ip -o -4 addr show dev srv0")
        assert res.returncode == 0, res.stderr
        assert "mnexec" in res.stdout and f"inet {SERVERS[dst]}/24" in res.stdout, res.stdout


@pytest.mark.parametrize("link", ["ssh", "gre"])
def test_quickstart_in_switch_point_across_two_servers(servers, link, tmp_path):
    if link == "gre" and (why := gretap_missing(servers.ns["a"])):
        pytest.skip(why)
    out = tmp_path / "out"
    before = {k: _interfaces(ns) for k, ns in servers.ns.items()}
    sshd_b_log = servers.dir / "sshd_b.log"
    accepted_before = sshd_b_log.read_text().count("Accepted publickey for root")
    res = servers.ssh_in(
        "a", TESTBED, "run", QUICKSTART, "--quick", "--net", "cluster", "--out", str(out),
        "--set", f"net.cluster={{servers: [{SERVERS['a']}, {SERVERS['b']}], link: {link}}}",
        "--set", "sweep.grid={workload.algorithm: [switch]}", "--set", "sweep.cases=[{name: baseline}]",
        timeout=400, env={"INNET_TESTBED_REGISTRY": str(tmp_path / "registry")})
    runs = sorted((out / "quickstart").iterdir()) if (out / "quickstart").is_dir() else []
    logs = "".join(p.read_text()[-3000:] for r in runs for p in sorted(r.glob("logs/*/*.log")))
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}\n{logs}"
    run_dir = runs[-1]
    rows = list(csv.DictReader(open(run_dir / "summary.csv")))
    assert [(r["algorithm"], r["size"], r["all_correct"]) for r in rows] == [
        ("switch", "64", "True"), ("switch", "16384", "True")], rows
    # w2 and w4 ran on the second server: Mininet's precheck and every remote
    # shell and program came in over its sshd.
    mlog = next(run_dir.glob("logs/*/mininet.log")).read_text()
    assert f"*** Checking servers\n{SERVERS['b']}" in mlog, mlog
    assert sshd_b_log.read_text().count("Accepted publickey for root") - accepted_before >= 4
    dry = servers.ssh_in("a", TESTBED, "run", QUICKSTART, "--quick", "--net", "cluster", "--dry-run",
                         "--set", f"net.cluster={{servers: [{SERVERS['a']}, {SERVERS['b']}], link: {link}}}",
                         "--set", "sweep.grid={workload.algorithm: [switch]}",
                         "--set", "sweep.cases=[{name: baseline}]")
    for host, ip in (("w1", "a"), ("w2", "b"), ("w3", "a"), ("w4", "b")):
        assert f"placement: {host} on {SERVERS[ip]}" in dry.stdout, dry.stdout
    # Nothing left behind: no process of the run on either server, no new
    # namespace, each server's interfaces as before (tunnels and veths gone).
    assert not [p for p in _pids() if str(out) in _cmd(p)], "a process of the run is still alive"
    assert not [p for p in _pids() if _in_netns_of_server(p, servers) and p not in _sshd_pids(servers)], \
        "a process is left in a server's namespace"
    assert {k: _interfaces(ns) for k, ns in servers.ns.items()} == before
