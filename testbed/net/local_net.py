"""The rootless network: host programs are plain processes on loopback.

Host ``w<i>`` is 127.0.1.<i> and ``ps`` is 127.0.1.200 (Linux routes all of
127/8 to lo, so no setup is needed). Host-to-host traffic goes straight over
lo with no switch in the path, so no link impairment or shaping can be
applied: any non-zero one is refused (use ``--net mininet``).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from testbed.net.base import HostInfo, Network, NetworkError, stop_processes
from testbed.net.impairments import ImpairmentError, resolve_links
from testbed.net.registry import RunRegistry
from testbed.net.topology import host_octets

LOCAL_PREFIX = "127.0.1."


def check_no_impairments(links: Any, hosts: list[str]) -> None:
    base, per_host, _ = resolve_links(links, hosts)
    asked = []
    for host, v in per_host.items():
        asked += [f"{k}={val:g} ({host})" for k, val in v.nonzero().items()]
        if v.bandwidth_mbps is not None:
            asked.append(f"bandwidth_mbps={v.bandwidth_mbps:g} ({host})")
    if asked:
        raise ImpairmentError(
            f"--net local cannot apply {', '.join(asked[:6])}{' ...' if len(asked) > 6 else ''}: "
            f"local hosts talk over loopback with no switch in the path; use --net mininet "
            f"(root or user namespaces) for link impairments and bandwidth limits")


class LocalNetwork(Network):
    def __init__(self, hosts: list[str], run_dir: str | Path, links: Any = None,
                 registry: RunRegistry | None = None, log_dir: str | Path | None = None,
                 recorder: Any = None):
        check_no_impairments(links, list(hosts))
        octs = host_octets(list(hosts))
        self.hosts = {h: HostInfo(h, f"{LOCAL_PREFIX}{octs[h]}", None) for h in hosts}
        self.switch_names: list[str] = []
        self.run_dir = Path(run_dir)
        self.log_dir = Path(log_dir) if log_dir else self.run_dir / "logs"
        self._registry = registry
        self._own_registry = False
        self._procs: list[subprocess.Popen] = []
        self._started = self._stopped = False
        self.recorder = recorder  # dry run: testbed.net.plan.PlanRecorder

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.recorder is not None:
            for h in self.hosts.values():
                self.recorder.note(f"local host {h.name}: processes on this machine, address {h.ip} (loopback)")
            return
        if self._registry is None:
            self._registry = RunRegistry.create(self.run_dir)
            self._own_registry = True

    def popen(self, host: str, argv: list[str], log_path: str | Path,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        if not self._started or self._stopped:
            raise NetworkError(f"popen({host}): the network is not running (call start() first)")
        if self.recorder is not None:
            return self._spawn(None, host, argv, log_path, env, "dry-run")
        # Own session: stop() can signal the program together with its helpers.
        p = self._spawn(subprocess.Popen, host, argv, log_path, env, self._registry.run_id,
                        start_new_session=True)
        self._registry.register_pid(p.pid, role=f"{host}: {os.path.basename(argv[0])}")
        self._procs.append(p)
        return p

    def _teardown(self) -> None:
        try:
            stop_processes(self._procs)
        finally:
            if self._own_registry and self._registry is not None:
                self._registry.close()
