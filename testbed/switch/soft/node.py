"""Mininet node for the soft switch.

    net.addSwitch("s1", cls=SoftSwitchNode, switch_config={...},
                  run_dir=Path(...), log_path=Path(...), nice=None)

The switch process runs in the run's root namespace (inNamespace=False) on the
switch's veth ends. Port numbers are Mininet's port numbers. switch_config
holds everything except `name` and `ports`, which the node fills in.
"""
from __future__ import annotations

from pathlib import Path

from mininet.node import Switch

from testbed.switch.soft.process import SoftSwitchProcess

# Offloads would hand the packet socket frames with partial checksums or
# GRO-merged super-frames larger than the MTU; VLAN offload would hide tags.
OFFLOADS_OFF = "tx off rx off tso off gso off gro off rxvlan off txvlan off"


class SoftSwitchNode(Switch):
    def __init__(self, name: str, switch_config: dict | None = None,
                 run_dir: str | Path | None = None, log_path: str | Path | None = None,
                 ready_timeout: float = 15.0, nice: int | None = None, **params):
        params["inNamespace"] = False
        Switch.__init__(self, name, **params)
        self.switch_config = dict(switch_config or {})
        self.run_dir = Path(run_dir) if run_dir else Path.cwd() / "run" / name
        self.log_path = Path(log_path) if log_path else self.run_dir / f"{name}.log"
        self.ready_timeout = ready_timeout
        self.nice = nice  # e.g. -10: the switch before host programs (SoftSwitchProcess.prioritize)
        self.process: SoftSwitchProcess | None = None
        self.stats: dict | None = None

    def port_map(self) -> dict[int, str]:
        return {port: intf.name for intf, port in self.ports.items()
                if intf.name != "lo" and port > 0}

    def start(self, controllers) -> None:
        ports = self.port_map()
        for intf in ports.values():
            # `ethtool -K` fails for unsupported features but applies the others.
            self.cmd(f"ethtool -K {intf} {OFFLOADS_OFF} >/dev/null 2>&1")
            self.cmd(f"ip link set {intf} up")
        cfg = dict(self.switch_config)
        cfg["name"] = self.name
        cfg["ports"] = {str(k): v for k, v in ports.items()}
        self.process = SoftSwitchProcess(cfg, self.run_dir, popen=self.popen,
                                         log_path=self.log_path, ready_timeout=self.ready_timeout,
                                         nice=self.nice)
        self.process.start()

    def connected(self) -> bool:
        return self.process is not None and self.process.running

    def snapshot(self) -> dict:
        """Current counters without stopping (SIGUSR1)."""
        if self.process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.process.snapshot()

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.process is not None:
            self.stats = self.process.stop()
            self.process = None
        super().stop(deleteIntfs)
