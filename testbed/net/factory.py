"""Build the network a scenario point asks for (``--net mininet|local``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.net.base import Network, NetworkError
from testbed.net.registry import RunRegistry


class BackendUnavailable(NetworkError):
    """The scenario's switch backend cannot run on this machine (the point is skipped)."""


def switch_class(backend: str, options: Any = None) -> type:
    """The Mininet switch class of a backend (options: the scenario's switch.options)."""
    if backend == "soft":
        from testbed.switch.soft.node import SoftSwitchNode  # noqa: PLC0415
        return SoftSwitchNode
    if backend == "bmv2":
        from testbed.switch.bmv2 import Bmv2SwitchNode, bmv2_available  # noqa: PLC0415
        ok, reason = bmv2_available(dict(options or {}).get("bmv2_prefix"))
        if not ok:
            raise BackendUnavailable(f"switch.backend bmv2: {reason}. Use switch.backend soft here.")
        return Bmv2SwitchNode
    if backend == "tofino":
        raise BackendUnavailable("switch.backend tofino targets a real switch, not Mininet: "
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
    cls = switch_class(sw.backend, sw.options)
    build = None
    if sw.backend == "bmv2":
        build = compile_bmv2(sw.program, sw.options, Path(logs_dir))
    return MininetNetwork(scenario.topology, scenario.links, hosts, cls, base,
                          run_dir=Path(logs_dir), seed=seed, capture=sw.capture, log_dir=logs_dir,
                          pcap_dir=pcaps_dir, registry=registry, backend=sw.backend,
                          p4runtime=sw.backend in ("soft", "bmv2"), bmv2_build=build)


def compile_bmv2(program: str, options: Any, logs_dir: Path) -> Any:
    """p4/<program>.p4 -> BMv2 JSON + P4Info in the point's logs (logs/<point>/bmv2/),
    once per point; a bad option or a failed compile ends the point with p4c's log."""
    from testbed.switch import bmv2  # noqa: PLC0415
    try:
        options = bmv2.check_options(dict(options or {}))
        return bmv2.compile_program(program, Path(logs_dir) / "bmv2",
                                    prefix=options.get("bmv2_prefix"))
    except bmv2.Bmv2Error as e:
        raise NetworkError(f"switch.backend bmv2: {e}") from None
