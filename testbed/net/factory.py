"""Build the network a scenario point asks for (``--net mininet|local``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.net.base import Network, NetworkError
from testbed.net.registry import RunRegistry


def switch_class(backend: str) -> type:
    """The Mininet switch class of a backend."""
    if backend == "soft":
        from testbed.switch.soft.node import SoftSwitchNode  # noqa: PLC0415
        return SoftSwitchNode
    raise NetworkError(f"switch.backend {backend!r} has no Mininet switch class here; "
                       f"use switch.backend soft (bmv2 needs simple_switch_grpc and p4c, "
                       f"tofino a Tofino SDE)")


def build_network(net_mode: str, scenario: Any, *, logs_dir: Path, pcaps_dir: Path, seed: int,
                  registry: RunRegistry | None = None) -> Network:
    """Plan (and validate) the network of one point; call ``start()`` on it."""
    hosts = list(scenario.hosts())
    if net_mode == "local":
        from testbed.net.local_net import LocalNetwork  # noqa: PLC0415
        return LocalNetwork(hosts, logs_dir, links=scenario.links, registry=registry, log_dir=logs_dir)
    if net_mode != "mininet":
        raise NetworkError(f"unknown --net {net_mode!r}; use mininet or local")
    from testbed.net.mininet_net import MininetNetwork  # noqa: PLC0415
    sw = scenario.switch
    base = {"pipeline": sw.program, **dict(sw.options)}
    return MininetNetwork(scenario.topology, scenario.links, hosts, switch_class(sw.backend), base,
                          run_dir=Path(logs_dir), seed=seed, capture=sw.capture, log_dir=logs_dir,
                          pcap_dir=pcaps_dir, registry=registry, backend=sw.backend,
                          p4runtime=sw.backend == "soft")
