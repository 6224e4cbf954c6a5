"""Build the network a scenario point asks for (``--net mininet|local``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.net.base import Network, NetworkError
from testbed.net.registry import RunRegistry
from testbed.results import resolve_project_path


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
        raise BackendUnavailable("switch.backend tofino is a real switch, not one Mininet can emulate: "
                                 "run it with --net ssh and an inventory whose switch is the Tofino "
                                 "(docs/real-rack.md); `testbed run --dry-run --net ssh` prints its plan")
    raise NetworkError(f"unknown switch.backend {backend!r}; use soft, bmv2 or tofino")


NET_MODES = ("mininet", "local", "ssh", "cluster")


def build_network(net_mode: str, scenario: Any, *, logs_dir: Path, pcaps_dir: Path, seed: int,
                  registry: RunRegistry | None = None, recorder: Any = None,
                  ina_traffic: bool = True) -> Network:
    """Plan (and validate) the network of one point; call ``start()`` on it.

    recorder (testbed.net.plan.PlanRecorder): a dry run. The network plans as
    usual, then records what start() and popen() would do instead of doing it;
    a backend this machine lacks (bmv2) is noted, and its compile recorded.
    ina_traffic: the point has in-network aggregation traffic (what a switch
    program's drop simulators can drop; otherwise loss goes through nftables)."""
    hosts = list(scenario.hosts())
    if net_mode == "local":
        from testbed.net.local_net import LocalNetwork  # noqa: PLC0415
        return LocalNetwork(hosts, logs_dir, links=scenario.links, registry=registry, log_dir=logs_dir,
                            recorder=recorder)
    if net_mode == "ssh":
        from testbed.net.inventory import load_inventory  # noqa: PLC0415
        from testbed.net.ssh_net import SshNetwork  # noqa: PLC0415
        inventory = load_inventory(resolve_project_path(scenario.net.inventory or ""))
        return SshNetwork(inventory, scenario, run_dir=Path(logs_dir), seed=seed, recorder=recorder)
    if net_mode not in ("mininet", "cluster"):
        raise NetworkError(f"unknown --net {net_mode!r}; use {', '.join(NET_MODES)}")
    sw = scenario.switch
    base = {"pipeline": sw.program, **dict(sw.options)}
    if recorder is not None and sw.backend == "bmv2":
        from testbed.switch.bmv2 import Bmv2SwitchNode, bmv2_available  # noqa: PLC0415
        ok, reason = bmv2_available(dict(sw.options or {}).get("bmv2_prefix"))
        if not ok:
            recorder.note(f"switch.backend bmv2 is not available on this machine: {reason} "
                          f"(a real run skips the point)")
        cls = Bmv2SwitchNode
    else:
        cls = switch_class(sw.backend, sw.options)
    build = None
    if sw.backend == "bmv2":
        build = compile_bmv2(sw.program, sw.options, Path(logs_dir), recorder)
    kw = dict(run_dir=Path(logs_dir), seed=seed, capture=sw.capture, capture_bytes=sw.capture_bytes,
              capture_hosts=list(sw.capture_hosts),
              log_dir=logs_dir, pcap_dir=pcaps_dir, registry=registry, backend=sw.backend,
              p4runtime=sw.backend in ("soft", "bmv2"), bmv2_build=build, recorder=recorder,
              ina_traffic=ina_traffic)
    if net_mode == "cluster":
        from testbed.net.cluster_net import ClusterNetwork  # noqa: PLC0415
        return ClusterNetwork(scenario.net.cluster, scenario.topology, scenario.links, hosts, cls, base, **kw)
    from testbed.net.mininet_net import MininetNetwork  # noqa: PLC0415
    return MininetNetwork(scenario.topology, scenario.links, hosts, cls, base, **kw)


def compile_bmv2(program: str, options: Any, logs_dir: Path, recorder: Any = None) -> Any:
    """p4/<program>.p4 -> BMv2 JSON + P4Info in the point's logs (logs/<point>/bmv2/),
    once per point; a bad option or a failed compile ends the point with p4c's log.
    Dry run: the compile command is recorded, and None returned (nothing compiled:
    the plan's controller shows the checked-in P4Info)."""
    from testbed.switch import bmv2  # noqa: PLC0415
    try:
        options = bmv2.check_options(dict(options or {}))
        if recorder is not None:
            build = bmv2.compile_argv(bmv2.P4_DIR / f"{program}.p4", Path(logs_dir) / "bmv2")
            recorder.command("runner", build.argv, "compile the P4 program for BMv2 (p4c)")
            recorder.note(f"BMv2 device config: {build.json_path} (p4c's output), P4Info "
                          f"{build.p4info_path}; this dry run shows the checked-in P4Info instead")
            return None
        return bmv2.compile_program(program, Path(logs_dir) / "bmv2",
                                    prefix=options.get("bmv2_prefix"))
    except bmv2.Bmv2Error as e:
        raise NetworkError(f"switch.backend bmv2: {e}") from None
