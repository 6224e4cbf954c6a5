"""`testbed doctor`: what this machine can run, and how to fix each gap.

Every check is cheap and side-effect free; the ones that need privileges run
in a throwaway network namespace that vanishes when the check ends.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from testbed.net.isolation import isolation_available, run_in_throwaway_netns

APT = "apt-get install -y"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    optional: bool = False  # a missing optional piece only skips a tier


def _which(name: str, package: str, what: str, optional: bool = False, skip: str = "",
           fix: str = "") -> Check:
    path = shutil.which(name)
    if path:
        return Check(name, True, f"{path} ({what})", optional=optional)
    detail = f"not found on PATH ({what})" + (f"; {skip}" if skip else "")
    return Check(name, False, detail, fix=fix or f"{APT} {package}  (or `make setup`)",
                 optional=optional)


def check_namespaces() -> Check:
    ok, reason = isolation_available()
    if ok:
        return Check("namespaces", True, reason)
    return Check("namespaces", False, f"cannot create a private network namespace: {reason}",
                 fix="run as root, or enable unprivileged user namespaces "
                     "(sysctl -w user.max_user_namespaces=10000; on Debian also "
                     "kernel.unprivileged_userns_clone=1); meanwhile use --net local")


def check_veth() -> Check:
    res = run_in_throwaway_netns("ip link add name tbva type veth peer name tbvb")
    if res.returncode == 0:
        return Check("veth", True, "veth pairs can be created (tested in a throwaway namespace)")
    return Check("veth", False, f"creating a veth pair failed: {res.stderr.strip() or res.returncode}",
                 fix="load the veth module (modprobe veth) and install iproute2: "
                     f"{APT} iproute2")


def check_mininet() -> Check:
    if importlib.util.find_spec("mininet") is None:
        return Check("mininet", False, "the mininet package is not importable from this Python",
                     fix="`make setup` (installs Debian's mininet and exposes it to .venv)")
    if shutil.which("mnexec") is None:
        return Check("mininet", False, "mininet imports but `mnexec` is not on PATH",
                     fix=f"{APT} mininet  (or `make setup`)")
    return Check("mininet", True, f"importable, mnexec at {shutil.which('mnexec')}")


def check_htb() -> Check:
    res = run_in_throwaway_netns("ip link set lo up && tc qdisc add dev lo root handle 1: htb default 1")
    if res.returncode == 0:
        return Check("htb", True, "tc htb works (bandwidth limits)")
    return Check("htb", False, f"tc htb failed: {res.stderr.strip() or res.returncode}",
                 fix=f"{APT} iproute2, and a kernel with CONFIG_NET_SCH_HTB")


def check_netem() -> Check:
    from testbed.net.impairments import netem_available  # noqa: PLC0415
    if netem_available():
        return Check("netem", True, "sch_netem available (links.mechanism netem can be used)",
                     optional=True)
    return Check("netem", False, "sch_netem is not in this kernel (expected here): delay, jitter, "
                 "loss, duplication and reordering are emulated by the soft switch "
                 "(links.mechanism auto/switch); nftables covers loss on host ingress",
                 fix="nothing to do; for netem use a kernel with CONFIG_NET_SCH_NETEM "
                     "(modprobe sch_netem)", optional=True)


def check_nft() -> Check:
    c = _which("nft", "nftables", "links.mechanism nftables: loss on host ingress")
    c.name = "nftables"
    return c


def check_p4runtime_shell() -> Check:
    try:
        res = subprocess.run([sys.executable, "-c", "import p4runtime_sh.shell"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return Check("p4runtime-shell", False, f"import check failed to run: {e}", fix="`make setup`")
    if res.returncode == 0:
        return Check("p4runtime-shell", True, "p4runtime_sh.shell imports")
    last = (res.stderr.strip().splitlines() or ["?"])[-1]
    return Check("p4runtime-shell", False, f"import p4runtime_sh.shell failed: {last}",
                 fix="`make setup` (pins protobuf<3.21 and p4runtime==1.4.1)")


def check_bmv2() -> Check:
    """BMv2 + p4c, found the way the backend and the bmv2 test tier find them."""
    from testbed.switch.bmv2_tools import FIX, ToolsMissing, find_tools  # noqa: PLC0415
    try:
        tools = find_tools()
    except ToolsMissing as e:
        why = str(e).split(f" {FIX}")[0]
        return Check("bmv2 + p4c", False, f"{why}; the bmv2 backend and test tier are skipped",
                     fix=FIX, optional=True)
    driver = f"; p4c driver {tools.p4c_driver}" if tools.p4c_driver else ""
    return Check("bmv2 + p4c", True, tools.describe() + driver, optional=True)


def check_tofino_sde() -> Check:
    sde = os.environ.get("SDE")
    if not sde:
        return Check("tofino SDE", False, "$SDE is not set: the tofino backend can only dry-run",
                     fix="export SDE=/path/to/bf-sde and SDE_INSTALL=$SDE/install", optional=True)
    install = os.environ.get("SDE_INSTALL", os.path.join(sde, "install"))
    missing = [b for b in ("bf_switchd", "bf-p4c") if not os.path.exists(os.path.join(install, "bin", b))]
    if missing:
        return Check("tofino SDE", False, f"$SDE={sde} but {', '.join(missing)} missing in {install}/bin",
                     fix="build the SDE (p4studio) or point $SDE_INSTALL at its install folder",
                     optional=True)
    return Check("tofino SDE", True, f"$SDE={sde}", optional=True)


CHECKS: list[Callable[[], Check]] = [
    check_namespaces,
    check_veth,
    check_mininet,
    lambda: _which("brctl", "bridge-utils", "Linux bridge for the forwarding baseline"),
    lambda: _which("tcpdump", "tcpdump", "packet capture"),
    lambda: _which("tshark", "tshark", "reading captures, Wireshark dissector"),
    check_nft,
    lambda: _which("ethtool", "ethtool", "turn off TX checksum offload in hosts"),
    check_htb,
    check_netem,
    check_p4runtime_shell,
    check_bmv2,
    check_tofino_sde,
]


def run_checks() -> list[Check]:
    out = []
    for fn in CHECKS:
        try:
            out.append(fn())
        except Exception as e:  # noqa: BLE001 - a broken check must not hide the others
            out.append(Check(getattr(fn, "__name__", "check"), False, f"check crashed: {e}"))
    return out


def format_report(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks) if checks else 0
    lines = []
    for c in checks:
        mark = "ok  " if c.ok else ("skip" if c.optional else "FAIL")
        lines.append(f"[{mark}] {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"       {'':<{width}}  fix: {c.fix}")
    bad = [c for c in checks if not c.ok and not c.optional]
    lines.append("")
    lines.append("all required pieces present" if not bad else
                 f"{len(bad)} required piece(s) missing: {', '.join(c.name for c in bad)}")
    return "\n".join(lines)


def main() -> int:
    checks = run_checks()
    print(format_report(checks))
    return 1 if any(not c.ok and not c.optional for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
