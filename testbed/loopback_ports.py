"""Free ports on this machine's loopback for runs and tests that share it (local
mode, the loopback benchmarks and tests): one place that knows where to look.

A port found free and bound again later can be taken in between. The kernel hands
out ports of its ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 here)
to every outgoing connection of any process, so a port found there is the likeliest
to go: a local ShadowSync run once lost its ring port 42859, a CI run gloo's store
port 58077. Ports are therefore picked at random below that range, every one of a
span checked at once.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Sequence

LOWEST = 10000          # below: well-known and registered services


def ephemeral_low(default: int = 32768) -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def bindable(addrs: Sequence[tuple[str, int]], kind: int = socket.SOCK_DGRAM) -> bool:
    """Every (ip, port) can be bound now (sockets of `kind`, closed again)."""
    socks = []
    try:
        for a in addrs:
            s = socket.socket(socket.AF_INET, kind)
            socks.append(s)
            s.bind(a)
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def free_port_base(span: int = 1, ips: Sequence[str] = ("127.0.0.1",), kind: int = socket.SOCK_STREAM,
                   tries: int = 200, rng: random.Random | None = None) -> int:
    """A base port with base .. base+span-1 free on every ip, below the ephemeral range."""
    rng = rng or random.Random()
    top = max(LOWEST + 1, ephemeral_low() - span)
    for _ in range(tries):
        base = rng.randrange(LOWEST, top)
        if bindable([(ip, p) for ip in ips for p in range(base, base + span)], kind):
            return base
    raise RuntimeError(f"no {span} free {'TCP' if kind == socket.SOCK_STREAM else 'UDP'} port(s) on "
                       f"{list(ips)} below the ephemeral range after {tries} tries")
