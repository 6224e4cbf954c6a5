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
    if backend == "bmv2":
        from testbed.switch.bmv2 import bmv2_available  # noqa: PLC0415
        ok, reason = bmv2_available()
        if not ok:
            raise NetworkError(f"switch.backend bmv2: {reason}. Use switch.backend soft here.")
        # The node class, compile step and controller exist (testbed/switch/bmv2.py)
        # but runs are not yet wired to them: say so rather than run something else.
        raise NetworkError("switch.backend bmv2: simple_switch_grpc is installed, but scenario runs "
                           "do not drive BMv2 yet (testbed/switch/bmv2.py has the node class and "
                           "compile step); use switch.backend soft")
    if backend == "tofino":
        raise NetworkError("switch.backend tofino targets a real switch, not Mininet: "
                           "see testbed/switch/tofino.py (TofinoBackend(...).run(dry_run=True) "
                           "prints the exact commands) and p4/README.md")
    raise NetworkError(f"unknown switch.backend {backend!r}; use soft, bmv2 or tofino")


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
