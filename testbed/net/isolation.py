"""Run the whole emulation inside a private network namespace.

``enter_private_netns()`` moves the calling process into a fresh network
namespace (plus a user namespace when not root). Every interface, bridge and
host namespace the run creates afterwards hangs off it, so concurrent runs
never see each other's ``s1-eth1``, and nothing survives the run's processes,
even after SIGKILL: the kernel frees a namespace, with its veths and bridges,
when its last process is gone.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


class IsolationError(RuntimeError):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def netns_inode(pid: int | str = "self") -> int | None:
    """Inode of a process's network namespace (identifies the namespace)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def in_initial_netns() -> bool:
    """True when we share PID 1's namespace (i.e. no isolation is in effect)."""
    mine, init = netns_inode(), netns_inode(1)
    return mine is not None and mine == init


def _unshare(flags: int) -> None:
    if _libc().unshare(flags) != 0:
        e = ctypes.get_errno()
        raise IsolationError(f"unshare(0x{flags:x}) failed: {os.strerror(e)} (errno {e})")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _lo_up() -> None:
    # ioctl instead of `ip link set lo up`: no dependency, no child process.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, req + b"\0" * 22)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP) + b"\0" * 22)


def _remount_sys() -> None:
    """A fresh sysfs shows this namespace's interfaces under /sys/class/net
    (what `ip netns exec` does); the old one keeps showing the machine's."""
    libc = _libc()
    libc.umount2(b"/sys", MNT_DETACH)  # may fail if /sys was not a mount; the mount still works
    if libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None) != 0:
        e = ctypes.get_errno()
        raise IsolationError(f"mounting sysfs for the private namespace failed: {os.strerror(e)}")


def enter_private_netns() -> int:
    """Move this process into a new network namespace; returns its inode.

    As root: ``unshare(CLONE_NEWNET | CLONE_NEWNS)``. Otherwise a user
    namespace too, where we are root mapped to our own uid/gid. The private
    mount namespace (propagation private, so nothing leaks out) exists to
    mount a sysfs that belongs to the new network namespace: tools that read
    /sys/class/net (the soft switch does) then see the run's interfaces.
    Files written to existing filesystems are visible outside as usual.

    Must be called while the process is single-threaded: unshare only moves
    the calling thread, and other threads would stay behind.
    """
    if threading.active_count() != 1:
        raise IsolationError(f"enter_private_netns() must run before any thread starts "
                             f"({threading.active_count()} threads are running)")
    flags = CLONE_NEWNET | CLONE_NEWNS
    if os.geteuid() == 0:
        _unshare(flags)
    else:
        uid, gid = os.geteuid(), os.getegid()
        try:
            _unshare(CLONE_NEWUSER | flags)
        except IsolationError as e:
            raise IsolationError(f"{e}: not root and unprivileged user namespaces are not "
                                 f"allowed; run as root or enable user namespaces "
                                 f"(sysctl user.max_user_namespaces)") from None
        _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    if _libc().mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        e = ctypes.get_errno()
        raise IsolationError(f"making mounts private failed: {os.strerror(e)}")
    _remount_sys()
    _lo_up()
    inode = netns_inode()
    assert inode is not None
    return inode


def _probe_script() -> str:
    return ("import sys; sys.path.insert(0, %r)\n"
            "from testbed.net.isolation import enter_private_netns\n"
            "print(enter_private_netns())\n") % os.path.dirname(os.path.dirname(
                os.path.dirname(os.path.abspath(__file__))))


def isolation_available() -> tuple[bool, str]:
    """Can this process enter a private network namespace? (ok, reason)."""
    try:
        res = subprocess.run([sys.executable, "-c", _probe_script()], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"probe failed to run: {e}"
    if res.returncode == 0:
        how = "root" if os.geteuid() == 0 else "unprivileged user namespace"
        return True, f"private network namespaces work ({how})"
    last = (res.stderr.strip().splitlines() or ["no output"])[-1]
    return False, last


def run_in_throwaway_netns(shell_cmd: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """Run a shell command in a namespace that disappears when it exits."""
    if shutil.which("unshare") is None:
        return subprocess.CompletedProcess(shell_cmd, 127, "", "unshare (util-linux) not installed")
    argv = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-Urn"]
    try:
        return subprocess.run([*argv, "sh", "-c", shell_cmd], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(shell_cmd, errno.ETIMEDOUT, "", "timed out")
