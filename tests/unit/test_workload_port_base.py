"""Local runs pick their TCP ports below the kernel's ephemeral range."""
from __future__ import annotations

import socket

from testbed.workloads.base import PointContext, _ephemeral_low


def test_local_port_base_is_free_and_below_the_ephemeral_range(tmp_path):
    ctx = PointContext(point=None, hosts={}, work_dir=tmp_path, net_mode="local", start_at=0.0)
    low = _ephemeral_low()
    for _ in range(20):
        base = ctx.tcp_port_base(40000, span=180)
        assert 10000 <= base and base + 180 <= low
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + 179))


def test_mininet_keeps_the_fixed_port():
    ctx = PointContext(point=None, hosts={}, work_dir=None, net_mode="mininet", start_at=0.0)
    assert ctx.tcp_port_base(48500) == 48500
