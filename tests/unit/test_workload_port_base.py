"""Local runs pick their TCP ports below the kernel's ephemeral range."""
from __future__ import annotations

import socket

from testbed.loopback_ports import ephemeral_low, free_port_base
from testbed.workloads.base import PointContext


def test_local_port_base_is_free_and_below_the_ephemeral_range(tmp_path):
    ctx = PointContext(point=None, hosts={}, work_dir=tmp_path, net_mode="local", start_at=0.0)
    low = ephemeral_low()
    for _ in range(20):
        base = ctx.tcp_port_base(40000, span=180)
        assert 10000 <= base and base + 180 <= low
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + 179))


def test_mininet_keeps_the_fixed_port():
    ctx = PointContext(point=None, hosts={}, work_dir=None, net_mode="mininet", start_at=0.0)
    assert ctx.tcp_port_base(48500) == 48500


def test_free_port_bases_are_below_the_ephemeral_range_for_every_address_and_kind():
    low = ephemeral_low()
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        base = free_port_base(8, ["127.0.0.1", "127.0.0.2"], kind=kind)
        assert 10000 <= base and base + 8 <= low
    with socket.socket() as held:                   # a port in use is never handed out
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]

        class Fixed:
            def randrange(self, lo, hi):
                return taken

        import pytest
        with pytest.raises(RuntimeError, match="no 1 free TCP port"):
            free_port_base(1, kind=socket.SOCK_STREAM, tries=3, rng=Fixed())
