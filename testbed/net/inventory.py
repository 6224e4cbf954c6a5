"""The inventory of a real rack (`net.mode: ssh`): which server plays which
testbed host, how to reach it over SSH, and the switch node.

    hosts:
      w1: {address: 10.1.0.11, user: lab, key: ~/.ssh/id_ed25519, port: 22,
           python: /opt/innet/.venv/bin/python, project_dir: /opt/innet,
           work_dir: /tmp/innet, data_ip: 192.168.10.1, mac: "0c:42:a1:00:00:01",
           switch_port: 1}
    switch:
      name: s1
      backend: tofino                    # tofino | soft | bmv2 (the scenario's switch.backend)
      address: 10.1.0.2                  # the switch's CPU (SDE) or the server running it
      user: lab
      key: ~/.ssh/id_ed25519
      grpc_addr: 10.1.0.2:9559           # its P4Runtime server, as the runner reaches it
      ports_file: rack/tofino-ports.yaml # tofino: front-panel ports (testbed.switch.tofino)
      sde: /opt/bf-sde                   # tofino: $SDE on the switch
      interfaces: {1: enp1s0f0}          # soft/bmv2: the server's NIC per switch port
      managed: true                      # false: already running at grpc_addr; only programmed

Without `switch:` the hosts run host algorithms only (ring, ps) over the
servers' own network; in-network points are skipped with the reason.

Every error names the file and line (`rack.yaml:7: hosts.w2.mac: ...`) and is
raised before anything connects.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.net.base import NetworkError

HOST_KEYS = {"address": str, "user": str, "key": str, "port": int, "python": str, "project_dir": str,
             "work_dir": str, "data_ip": str, "mac": str, "switch_port": int, "data_intf": str}
HOST_REQUIRED = ("address", "user", "python", "project_dir", "work_dir", "data_ip", "mac", "switch_port")
SWITCH_KEYS = {"name": str, "backend": str, "address": str, "user": str, "key": str, "port": int,
               "grpc_addr": str, "device_id": int, "ports_file": str, "sde": str, "sde_install": str,
               "interfaces": dict, "python": str, "project_dir": str, "work_dir": str, "managed": bool}
SWITCH_REQUIRED = {"tofino": ("name", "backend", "address", "user", "grpc_addr", "ports_file", "sde"),
                   "soft": ("name", "backend", "grpc_addr"),
                   "bmv2": ("name", "backend", "grpc_addr")}
_MAC = re.compile(r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$")
_IPV4 = re.compile(r"^(\d{1,3}\.){3}\d{1,3}$")


class InventoryError(NetworkError):
    """A bad inventory file; the message names file:line and the field."""


@dataclass(frozen=True)
class SshNode:
    """One server reached over SSH (a host, or the switch's server)."""
    name: str
    address: str
    user: str
    key: str | None = None
    port: int = 22
    python: str | None = None
    project_dir: str | None = None
    work_dir: str | None = None

    @property
    def where(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class SshHost(SshNode):
    data_ip: str = ""
    mac: str = ""
    switch_port: int = 0
    data_intf: str | None = None


@dataclass(frozen=True)
class SwitchNode(SshNode):
    backend: str = "tofino"
    grpc_addr: str = ""
    device_id: int = 1
    ports_file: str | None = None
    sde: str | None = None
    sde_install: str | None = None
    interfaces: dict[int, str] = field(default_factory=dict)
    # False: the switch is already running its program's P4Runtime server at
    # grpc_addr (started by hand); the run only programs it.
    managed: bool = True


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, SshHost]
    switch: SwitchNode | None
    lines: dict[str, int]     # dotted field path -> line in the file

    def where(self, dotted: str) -> str:
        return f"{self.path}:{self.lines.get(dotted, self.lines.get(dotted.rsplit('.', 1)[0], 1))}"

    def check_scenario(self, scenario: Any) -> None:
        """The scenario fits this rack: every host has a server, one switch of its backend."""
        missing = [h for h in scenario.hosts() if h not in self.hosts]
        if missing:
            raise InventoryError(f"{self.where('hosts')}: hosts: no server for {', '.join(missing)} "
                                 f"(the scenario has {', '.join(scenario.hosts())})")
        if scenario.topology.kind != "star":
            raise InventoryError(f"{self.path}: net ssh runs a star (one switch, every server cabled "
                                 f"to it); the scenario's topology.kind is {scenario.topology.kind}")
        if self.switch is None:
            return   # no switch to program: host algorithms only (in-network points are skipped)
        if self.switch.backend != scenario.switch.backend:
            raise InventoryError(f"{self.where('switch.backend')}: switch.backend: the rack's switch is "
                                 f"{self.switch.backend}, the scenario asks for {scenario.switch.backend}; "
                                 f"use --set switch.backend={self.switch.backend}")


def _compose_lines(node: Any, prefix: str, lines: dict[str, int]) -> Any:
    """The YAML node as plain data, recording each key's line (1-based)."""
    if isinstance(node, yaml.MappingNode):
        out = {}
        for k, v in node.value:
            key = str(k.value)
            path = f"{prefix}.{key}" if prefix else key
            lines[path] = k.start_mark.line + 1
            out[key] = _compose_lines(v, path, lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_compose_lines(v, f"{prefix}.{i}", lines) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node)) if node is not None else None


def load_inventory(path: str | Path) -> Inventory:
    path = Path(path)
    try:
        node = yaml.compose(path.read_text())
    except OSError as e:
        raise InventoryError(f"{path}: cannot read the inventory: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InventoryError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML: "
                             f"{getattr(e, 'problem', e)}") from None
    lines: dict[str, int] = {}
    doc = _compose_lines(node, "", lines)
    return parse_inventory(doc, path, lines)


def parse_inventory(doc: Any, path: Path, lines: dict[str, int]) -> Inventory:
    def at(dotted: str) -> str:
        while dotted and dotted not in lines:
            dotted = dotted.rpartition(".")[0]
        return f"{path}:{lines.get(dotted, 1)}"

    def fail(dotted: str, msg: str) -> InventoryError:
        return InventoryError(f"{at(dotted)}: {dotted}: {msg}")

    if not isinstance(doc, dict):
        raise InventoryError(f"{path}:1: expected a mapping with `hosts:` and `switch:`")
    unknown = sorted(set(doc) - {"hosts", "switch"})
    if unknown:
        raise fail(unknown[0], "unknown section; an inventory has `hosts` and `switch`")
    raw_hosts = doc.get("hosts")
    if not isinstance(raw_hosts, dict) or not raw_hosts:
        raise fail("hosts", "a mapping of testbed host name (w1, w2, ps) -> server is required")

    def fields(spec: Any, base: str, keys: dict[str, type], required: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(spec, dict):
            raise fail(base, f"expected a mapping with {', '.join(required)}")
        for k, v in spec.items():
            if k not in keys:
                raise fail(f"{base}.{k}", f"unknown field; known: {', '.join(sorted(keys))}")
            want = keys[k]
            if not isinstance(v, want) or (isinstance(v, bool) and want is not bool):
                raise fail(f"{base}.{k}", f"expected {want.__name__}, got {v!r}")
        for k in required:
            if k not in spec:
                raise fail(base, f"missing `{k}`")
        return dict(spec)

    hosts: dict[str, SshHost] = {}
    ports: dict[int, str] = {}
    for name, spec in raw_hosts.items():
        base = f"hosts.{name}"
        f = fields(spec, base, HOST_KEYS, HOST_REQUIRED)
        if not _MAC.match(f["mac"]):
            raise fail(f"{base}.mac", f"not a MAC address: {f['mac']!r}")
        if not _IPV4.match(f["data_ip"]):
            raise fail(f"{base}.data_ip", f"not an IPv4 address: {f['data_ip']!r}")
        if f["switch_port"] in ports:
            raise fail(f"{base}.switch_port", f"port {f['switch_port']} is already {ports[f['switch_port']]}'s")
        ports[f["switch_port"]] = name
        hosts[name] = SshHost(name=name, **f)
    switch = None
    if "switch" in doc:
        spec = doc["switch"]
        backend = spec.get("backend") if isinstance(spec, dict) else None
        if backend not in SWITCH_REQUIRED:
            raise fail("switch.backend" if isinstance(spec, dict) else "switch",
                       f"one of {', '.join(SWITCH_REQUIRED)} is required, got {backend!r}")
        f = fields(spec, "switch", SWITCH_KEYS, SWITCH_REQUIRED[backend])
        if "interfaces" in f:
            ifs = f["interfaces"]
            if not all(isinstance(k, int) and isinstance(v, str) for k, v in ifs.items()):
                raise fail("switch.interfaces", "expected {switch port (int): interface name}")
            unwired = sorted(set(ports) - set(ifs))
            if unwired:
                raise fail("switch.interfaces", f"no interface for switch port(s) {unwired} "
                                                f"(hosts {', '.join(ports[p] for p in unwired)})")
        switch = SwitchNode(**f)
    return Inventory(path, hosts, switch, lines)
