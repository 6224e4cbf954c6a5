"""The Mininet network: hosts in namespaces, veths, a switch class of choice.

The testbed, not the switch, decides ports, addresses, ARP and the L2
forwarding table (see ``topology``), and which mechanism applies each
impairment (see ``impairments``). Bandwidth uses htb through TCLink(bw=...)
only: this kernel has no sch_netem, so TCLink never gets delay or loss.

Call ``isolation.enter_private_netns()`` first (the CLI does): Mininet then
builds everything inside the run's own namespace.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from hosts.common.network_dilation import CONTROL_FILE
from testbed.net import impairments as imp
from testbed.net.base import (
    DeadSwitch, HostInfo, Network, NetworkError, open_log, stop_processes,
)
from testbed.net.captures import Captures
from testbed.net.isolation import in_initial_netns
from testbed.net.registry import RunRegistry, alive, signal_recorded
from testbed.net.topology import (
    PREFIX_LEN, SWITCH_VIP, SWITCH_VIP_MAC, TopologyPlan, forwarding_tables, plan_topology,
    switch_port_mac,
)
from testbed.results import PROJECT_ROOT

log = logging.getLogger("testbed.net")


def accepts_switch_config(switch_cls: type) -> bool:
    """Does the switch class take the testbed's config (the soft switch does)?"""
    flag = getattr(switch_cls, "accepts_switch_config", None)
    if flag is not None:
        return bool(flag)
    try:
        return "switch_config" in inspect.signature(switch_cls.__init__).parameters
    except (TypeError, ValueError):
        return False


def _topology_fields(topology: Any) -> tuple[str, int, int]:
    get = topology.get if isinstance(topology, dict) else (lambda k, d=None: getattr(topology, k, d))
    return get("kind", "star"), int(get("workers", 1)), int(get("leaves", 1) or 1)


SOFT_SWITCH_NICE = -10  # override with switch.options.nice
P4RUNTIME_BASE_PORT = 9558  # s1 -> 9559, the P4Runtime default


class MininetNetwork(Network):
    def __init__(self, topology: Any, links: Any, hosts: list[str] | None, switch_cls: type,
                 switch_config_base: dict[str, Any] | None, run_dir: str | Path, seed: int = 0,
                 capture: bool = False, *, capture_bytes: int | None = None,
                 capture_hosts: list[str] | None = None, log_dir: str | Path | None = None,
                 pcap_dir: str | Path | None = None, registry: RunRegistry | None = None,
                 backend: str | None = None, p4runtime: bool = False, bmv2_build: Any = None,
                 recorder: Any = None, ina_traffic: bool = True):
        kind, workers, leaves = _topology_fields(topology)
        # With a control plane the switches boot with empty tables and a
        # P4Runtime server; the runner's controller programs them.
        self.p4runtime = p4runtime
        # BMv2: the compiled program (testbed.switch.bmv2.Bmv2Build) its controllers push.
        self.bmv2_build = bmv2_build
        self.host_names = list(hosts) if hosts else [f"w{i}" for i in range(1, workers + 1)]
        self.run_dir = Path(run_dir)
        self.log_dir = Path(log_dir) if log_dir else self.run_dir / "logs"
        self.pcap_dir = Path(pcap_dir) if pcap_dir else self.run_dir / "pcaps"
        self.switch_cls = switch_cls
        self.switch_config_base = dict(switch_config_base or {})
        self.seed = int(seed)
        self.capture = capture
        self.capture_bytes = capture_bytes  # snaplen of the captures; None: whole frames
        self.capture_hosts = list(capture_hosts or []) if capture else []   # host-side captures too
        self.soft = accepts_switch_config(switch_cls)
        self.backend = backend or ("soft" if self.soft else switch_cls.__name__)

        # Planning first: a bad request fails here, before anything is created.
        self.plan: TopologyPlan = plan_topology(kind, self.host_names, leaves)
        self.forwarding = forwarding_tables(self.plan)
        self._base_values, self.link_values, mechanism = imp.resolve_links(links, self.host_names)
        wants_netem = mechanism == "netem" or (mechanism == "auto" and not self.soft)
        if wants_netem and recorder is not None:
            # The probe starts a process (tc in a throwaway namespace): a dry run starts none.
            recorder.note("netem not probed in a dry run: planned as unavailable (a real run probes it "
                          "and applies what the kernel allows)")
        caps = imp.Capabilities(switch_impairs=self.soft,
                                netem=imp.netem_available() if wants_netem and recorder is None else False,
                                nftables=imp.nft_available(), backend=self.backend,
                                # the drop simulators drop aggregation traffic only
                                drop_simulator=ina_traffic and self._has_drop_simulators(),
                                switch_shapes=self.soft and self._soft_switch_has_rings())
        self.impairments = imp.plan_impairments(self.plan, links, caps)

        self.hosts = {h.name: HostInfo(h.name, h.ip, h.mac) for h in self.plan.hosts}
        self.switch_names = list(self.plan.switches)
        self._registry = registry
        self._own_registry = False
        self._net: Any = None
        self._procs: list[subprocess.Popen] = []
        self._captures = Captures(self.pcap_dir, self.log_dir, capture_bytes, self._spawn_capture,
                                  self._frames_counted, self._register)
        self._mine: list[dict] = []            # registry entries of this network's processes
        self._preexisting: set[int] = set()    # runner children that are not ours
        self._started = self._stopped = self._built = False
        self._stats: dict[str, dict] = {}
        self._nft_counters: dict[str, dict[str, int]] = {}
        self._report = list(self.impairments.rows)
        self.errors: list[str] = []  # teardown problems: teardown_problems(), warnings of the point
        self._start_error: str | None = None  # why start() failed (noted on every impairment row)
        self.recorder = recorder  # dry run: testbed.net.plan.PlanRecorder

    def _soft_switch_has_rings(self) -> bool:
        """The soft switch will read its ports through receive rings (they can shape
        the links into it): its io_impl, as the switch resolves it, is a ring one."""
        from testbed.switch.soft.dataplane import RING_IMPLS, resolve_io_impl  # noqa: PLC0415
        try:
            return resolve_io_impl(self.switch_config_base.get("io_impl")) in RING_IMPLS
        except ValueError:      # asked for a ring that is not built: the switch will say so
            return False

    def _has_drop_simulators(self) -> bool:
        """BMv2 runs a program with both of ina.p4's drop simulators (its P4Info
        names them): loss can go through their registers (impairments.py). A dry
        run compiles nothing: the checked-in P4Info of the program stands in."""
        if self.backend != "bmv2":
            return False
        if self.bmv2_build is not None:
            p4info = Path(self.bmv2_build.p4info_path)
        else:
            p4info = PROJECT_ROOT / "p4" / f"{self.switch_config_base.get('pipeline')}.p4info.txtpb"
        names = p4info.read_text() if p4info.exists() else ""
        return all(f'"{n}.drop_probability"' in names for n in ("DropSimulator", "EgressDropSimulator"))

    # --- public ------------------------------------------------------------
    @property
    def switch_info(self) -> dict[str, Any]:
        info = {"ip": SWITCH_VIP, "mac": SWITCH_VIP_MAC, "switches": list(self.switch_names),
                "backend": self.backend, "plan": self.plan, "forwarding": self.forwarding,
                "ports": {sw: sorted(self.plan.switch_ports(sw)) for sw in self.switch_names}}
        if self.p4runtime:
            info["p4runtime"] = {sw: self._p4runtime_addr(sw) for sw in self.switch_names}
        if self.soft:
            # Where a host asks the soft switches for network dilation (time fidelity).
            info["dilation_control"] = [str(self.run_dir / "switches" / sw / CONTROL_FILE)
                                        for sw in self.switch_names]
        if self.bmv2_build is not None:
            # What ControlPlane pushes to a BMv2: the compiled JSON and p4c's P4Info.
            info["pipeline_config"] = {"p4info": str(self.bmv2_build.p4info_path),
                                       "device_config": str(self.bmv2_build.json_path)}
            from testbed.switch.bmv2 import control_info  # noqa: PLC0415
            info["bmv2"] = control_info(self.switch_names, self.switch_config_base)
            # BMv2 serves a few thousand packets/s: its packet sockets drop the excess of
            # a burst, so the workers' INA clients adapt their window (hosts/ina/cwnd.py).
            info["ina"] = {**info.get("ina", {}), "congestion_window": True}
        info["workers"] = {h: {"gso": gso} for h, gso in self._host_gso().items()}
        return info

    def _host_gso(self) -> dict[str, bool]:
        """Per host: may its INA worker send UDP GSO messages (impairments.host_egress_untouched:
        no htb, nftables egress rule or netem at its own interface)?"""
        return {ln.node1: imp.host_egress_untouched(self.impairments, ln.node1, self._htb_at_node1(ln))
                for ln in self.plan.links if ln.node1 in self.hosts}

    def _htb_at_node1(self, ln: Any) -> bool:
        """htb shapes the link at its node1 end (a link with a rate is shaped by htb at
        both ends, except a host uplink the soft switch shapes at its receive ring)."""
        return (self.link_values.get(ln.node1, self._base_values).bandwidth_mbps is not None
                and not imp.shaped_by_switch(self.impairments, ln.node2, ln.port2))

    @staticmethod
    def _p4runtime_port(sw: str) -> int:
        # The run has its own network namespace, so fixed ports never collide.
        return P4RUNTIME_BASE_PORT + int(sw[1:])

    @classmethod
    def _p4runtime_addr(cls, sw: str) -> str:
        return f"127.0.0.1:{cls._p4runtime_port(sw)}"

    def start(self) -> None:
        if self._started:
            return
        if self._stopped:
            raise NetworkError("this network was stopped; build a new one")
        self._started = True
        if self.recorder is not None:
            self._record_build(self.recorder)
            return
        if in_initial_netns():
            log.warning("building Mininet in the machine's own network namespace; call "
                        "testbed.net.isolation.enter_private_netns() first to isolate runs")
        if self._registry is None:
            self._registry = RunRegistry.create(self.run_dir)
            self._own_registry = True
        self._preexisting = set(_children_of(os.getpid()))
        try:
            with self._mininet_log():
                self._build()
        except Exception as e:
            self._start_error = str(e)
            self.stop()
            if isinstance(e, (NetworkError, imp.ImpairmentError)):
                raise
            raise NetworkError(f"building the Mininet network failed: {type(e).__name__}: {e}") from e

    @property
    def mininet(self) -> Any:
        """The started Mininet object (for Mininet's own CLI: `testbed net up`)."""
        if self._net is None:
            raise NetworkError("the network is not started")
        return self._net

    def node(self, name: str) -> Any:
        """The Mininet node (for tests and tools that need it)."""
        if self._net is None:
            raise NetworkError("the network is not running")
        return self._net[name]

    def run(self, node: str, argv: list[str], timeout: float = 30,
            stdin: str | None = None) -> tuple[int, str]:
        """Run a short command on a host or switch; (exit code, output)."""
        p = self.node(node).popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            return 124, out
        return p.returncode, out

    def popen(self, host: str, argv: list[str], log_path: str | Path,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        if self.recorder is not None:
            return self._spawn(None, host, argv, log_path, env, "dry-run")
        if self._net is None or self._stopped:
            raise NetworkError(f"popen({host}): the network is not running (call start() first)")
        p = self._spawn(lambda *a, **kw: self.node(host).popen(*a, **kw), host, argv, log_path, env, self._registry.run_id)
        self._register(p.pid, f"{host}: {os.path.basename(argv[0])}")
        self._procs.append(p)
        return p

    def _stop_dry_run(self) -> None:
        self._report = [{**r, "applied": False, "note": "dry run"} for r in self._report]

    def _teardown(self) -> None:
        try:
            if self._net is not None:
                stop_processes(self._procs)
                self._read_nft_counters()
                self._captures.stop()
                for note in self._captures.notes:
                    log.info(note)
                try:
                    with self._mininet_log():
                        self._net.stop()
                except Exception as e:  # noqa: BLE001 - teardown goes on
                    self.errors.append(f"mininet stop: {type(e).__name__}: {e}")
                    log.warning("mininet stop failed: %s", e)
                self._collect_switch_stats()
                self._kill_registered_leftovers()
                self._report = imp.fill_observed(self.impairments.rows, self._stats,
                                                 self._nft_counters)
            if not self._built:
                # Never report as applied what a network that failed to start did not do.
                note = "the network failed to start" + (f": {self._start_error}" if self._start_error else "")
                self._report = [{**r, "applied": False, "note": note} for r in self._report]
        finally:
            if self._own_registry and self._registry is not None:
                self._registry.close()

    def switch_stats(self) -> dict[str, dict]:
        return dict(self._stats)

    def teardown_problems(self) -> list[str]:
        return [*self._captures.problems, *self.errors]

    def dead_switches(self) -> list[DeadSwitch]:
        """Soft switch processes (SoftSwitchNode.process) that are no longer running."""
        if self._net is None or self._stopped or not self._built:
            return []
        dead = []
        for sw in self.switch_names:
            node = self.node(sw)
            soft = getattr(node, "process", None)  # SoftSwitchNode: a SoftSwitchProcess
            if soft is not None:
                if soft.pid is None or soft.running:
                    continue
                popen = soft.proc
                code = None
                if popen is not None and popen.pid == soft.pid:
                    # A killed multi-threaded process shows as a zombie before its
                    # other threads have exited and it can be reaped: wait for that.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        code = popen.wait(timeout=2.0)
                dead.append(DeadSwitch(sw, code, Path(soft.log_path)))
                continue
            popen = getattr(node, "proc", None)  # Bmv2SwitchNode: the simple_switch_grpc Popen
            if isinstance(popen, subprocess.Popen) and popen.poll() is not None:
                log_file = getattr(node, "console_log", None) or getattr(node, "log_file", None)
                dead.append(DeadSwitch(sw, popen.returncode, Path(log_file) if log_file else None))
        return dead

    def impairment_report(self) -> list[dict]:
        return [dict(r) for r in self._report]

    # --- building ----------------------------------------------------------
    @contextlib.contextmanager
    def _mininet_log(self):
        """Mininet prints to stdout; send it to logs/mininet.log instead."""
        from mininet.log import StreamHandlerNoNewline, lg  # noqa: PLC0415
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stream = open(self.log_dir / "mininet.log", "a")
        handler = StreamHandlerNoNewline(stream)
        handler.setFormatter(logging.Formatter("%(message)s"))
        old_level, old_handlers = lg.level, list(lg.handlers)
        for h in old_handlers:
            lg.removeHandler(h)
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        # ...and only there: not also through a root handler someone configured.
        old_propagate, lg.propagate = lg.propagate, False
        try:
            yield
        finally:
            lg.propagate = old_propagate
            lg.removeHandler(handler)
            for h in old_handlers:
                lg.addHandler(h)
            lg.setLevel(old_level)
            stream.close()

    def _switch_params(self, sw: str) -> dict[str, Any]:
        if self.bmv2_build is not None or self.backend == "bmv2":
            from testbed.switch.bmv2 import node_params  # noqa: PLC0415
            from testbed.switch.p4runtime_server import device_id_for  # noqa: PLC0415
            # The same device id and address the ControlPlane's controller will use.
            return node_params(sw, device_id_for(sw), self._p4runtime_port(sw), self.log_dir,
                               self.switch_config_base)
        if not self.soft:
            return {}
        sw_dir = self.run_dir / "switches" / sw
        sw_dir.mkdir(parents=True, exist_ok=True)
        base = dict(self.switch_config_base)
        # A hardware switch never waits for a CPU; on 2 shared cores the soft
        # switch must run before host programs or it drops packets no scenario
        # asked for (bench/switch_forwarding.py measured 28% loss at normal priority).
        nice = base.pop("nice", SOFT_SWITCH_NICE)
        cfg = {
            **base,
            "forwarding": self.forwarding[sw],
            "impairments": {str(p): v for p, v in self.impairments.switch_ports.get(sw, {}).items()},
            # Distinct, reproducible random streams per switch.
            "seed": self.seed * 1000 + int(sw[1:]),
            "pcap_dir": str(self.pcap_dir) if self.capture else None,
            "pcap_snaplen": self.capture_bytes if self.capture else None,
            # A tree's uplinks: the delay line charges L0 once per path (dilation.py, "Trees").
            "inter_switch_ports": self.plan.inter_switch_ports(sw),
            # Host uplinks this switch shapes at its receive rings (links.shaper auto).
            "ingress_mbps": {str(p): v for p, v in self.impairments.switch_shaping.get(sw, {}).items()},
        }
        if self.p4runtime:
            cfg["forwarding"] = []
            cfg["p4runtime_addr"] = self._p4runtime_addr(sw)
        return {"switch_config": cfg, "run_dir": sw_dir, "log_path": self.log_dir / f"{sw}.log", "nice": nice}

    def _build(self) -> None:
        from mininet.link import TCLink  # noqa: PLC0415 - mininet is optional for the rest
        from mininet.net import Mininet  # noqa: PLC0415
        from mininet.node import Host  # noqa: PLC0415

        for d in (self.run_dir, self.log_dir, *( [self.pcap_dir] if self.capture else [])):
            d.mkdir(parents=True, exist_ok=True)
        self._write_plan()
        if not in_initial_netns():
            # Our own namespace: bridged frames need not cross iptables/nftables.
            for table in ("arptables", "iptables", "ip6tables"):
                with contextlib.suppress(OSError):
                    Path(f"/proc/sys/net/bridge/bridge-nf-call-{table}").write_text("0")
            # ... and no IGMP reports for link-local groups from this namespace's own stack:
            # a Linux bridge's device joins 224.0.0.106 (all-snoopers) when it comes up and
            # reports it into the captures (no per-device switch for that, unlike IPv6).
            with contextlib.suppress(OSError):
                Path("/proc/sys/net/ipv4/igmp_link_local_mcast_reports").write_text("0")
        net = self._make_mininet(topo=None, switch=self.switch_cls, host=Host, controller=None, link=TCLink,
                                 build=False, autoSetMacs=False, autoStaticArp=False)
        self._net = net
        for h in self.plan.hosts:
            net.addHost(h.name, ip=f"{h.ip}/{PREFIX_LEN}", mac=h.mac, **self._host_params(h.name))
        for sw in self.plan.switches:
            net.addSwitch(sw, cls=self.switch_cls, **self._switch_params(sw))
        for ln in self.plan.links:
            values = self.link_values.get(ln.node1, self._base_values)
            params = {"bw": values.bandwidth_mbps} if values.bandwidth_mbps is not None else {}
            mac1 = (self.hosts[ln.node1].mac if ln.node1 in self.hosts
                    else switch_port_mac(ln.node1, ln.port1))
            # htb at each sending end, but not at a host whose uplink the switch shapes.
            params1 = params if self._htb_at_node1(ln) else {}
            net.addLink(ln.node1, ln.node2, port1=ln.port1, port2=ln.port2, cls=TCLink,
                        addr1=mac1, addr2=switch_port_mac(ln.node2, ln.port2),
                        params1=params1, params2=params)
        self._register_children()
        net.build()
        self._configure_hosts()
        self._configure_switch_ports()
        self._check_shaping()
        self._apply_nftables()
        self._apply_netem()
        net.start()
        self._quiet_bridge_devices()
        self._register_children()
        self._wait_ports_ready()
        if self.capture and not self.soft:
            self._start_captures()
        if self.capture_hosts:
            self._start_host_captures()
        self._built = True

    def _make_mininet(self, **kw: Any) -> Any:
        """The Mininet object (testbed.net.cluster_net: MininetCluster)."""
        from mininet.net import Mininet  # noqa: PLC0415
        return Mininet(**kw)

    def _host_params(self, host: str) -> dict[str, Any]:  # noqa: ARG002 - cluster: the server
        return {}

    def _read_sys(self, node: Any, rel: str) -> str | None:
        """A /sys/class/net file as the node sees it (None if absent)."""
        if node.inNamespace:
            rc, out = self.run(node.name, ["cat", f"/sys/class/net/{rel}"])
            return out.strip() if rc == 0 else None
        try:
            return Path(f"/sys/class/net/{rel}").read_text().strip()
        except OSError:
            return None

    def _wait_ports_ready(self, timeout: float = 10.0) -> None:
        """Carrier reaches a switch port (and a bridge port leaves the
        'disabled' state) up to ~1 s after the link is set up: wait for it,
        or the first packets of a run vanish."""
        pending = [(self.node(sw), f"{sw}-eth{p}") for sw in self.plan.switches
                   for p in self.plan.switch_ports(sw)]
        deadline = time.monotonic() + timeout
        while pending:
            pending = [(n, i) for n, i in pending
                       if self._read_sys(n, f"{i}/operstate") not in ("up", "unknown", None)
                       or self._read_sys(n, f"{i}/brport/state") not in ("3", None)]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise NetworkError(f"switch ports not up after {timeout:.0f}s: "
                                   f"{', '.join(i for _, i in pending)}")
            time.sleep(0.02)

    def _write_plan(self) -> None:
        (self.run_dir / "network.json").write_text(json.dumps(self._plan_doc(), indent=1, default=str) + "\n")

    def _plan_doc(self) -> dict[str, Any]:
        return {
            "kind": self.plan.kind,
            "hosts": [vars(h) for h in self.plan.hosts],
            "switches": self.plan.switches,
            "links": [vars(ln) for ln in self.plan.links],
            "forwarding": self.forwarding,
            "switch_vip": {"ip": SWITCH_VIP, "mac": SWITCH_VIP_MAC},
            "impairments": {"mechanism": self.impairments.mechanism, "rows": self.impairments.rows,
                            "switch_ports": self.impairments.switch_ports,
                            "nft_loss": self.impairments.nft_loss, "nft_egress": self.impairments.nft_egress,
                            "netem": self.impairments.netem},
        }

    def _sh(self, node: str, script: str, what: str) -> str:
        rc, out = self.run(node, ["sh", "-c", script])
        if rc != 0:
            raise NetworkError(f"{what} on {node} failed (exit {rc}): {out.strip()[-800:]}")
        return out

    HOST_SETUP = ("host setup (sysctl, ethtool -K tx off, static ARP; "
                  "needs ethtool: apt-get install ethtool)")

    def _configure_hosts(self) -> None:
        for h in self.plan.hosts:
            self._sh(h.name, self._host_setup_script(h), self.HOST_SETUP)

    def _host_setup_script(self, h: Any) -> str:
        """No IPv6 chatter, no TX checksum offload (the switch sees real
        checksums), static ARP for every host and the switch virtual IP, and no
        TCP slow start after idle: under time dilation a connection idle for a
        few modeled milliseconds is idle TDF x longer in wall time, past the
        kernel's idle limit, so every exchange would restart from the initial
        congestion window (a ~48 kB ShadowSync message then took ~3 round trips
        instead of one); the hardware model, like a real host between
        back-to-back syncs, has the window open."""
        intf = f"{h.name}-eth0"
        lines = [
            "set -e",
            "if [ -d /proc/sys/net/ipv6 ]; then sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
            "net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1; fi",
            "sysctl -qw net.ipv4.tcp_slow_start_after_idle=0",
            f"ethtool -K {intf} tx off >/dev/null",
        ]
        neigh = [(o.ip, o.mac) for o in self.plan.hosts if o.name != h.name]
        neigh.append((SWITCH_VIP, SWITCH_VIP_MAC))
        lines += [f"ip neigh replace {ip} lladdr {mac} dev {intf} nud permanent"
                  for ip, mac in neigh]
        return "\n".join(lines)

    def _configure_switch_ports(self) -> None:
        # Per interface, so this is safe even outside a private namespace.
        for sw in self.plan.switches:
            intfs = [i.name for i in self.node(sw).intfList() if i.name != "lo"]
            if intfs:
                self._sh(sw, _switch_port_script(intfs), "switch port setup")

    def _quiet_bridge_devices(self) -> None:
        """No IPv6 on a Linux bridge's own device either (named after the switch,
        made by its start; the other switch classes have none): it has a link-local
        address and floods MLD reports and router solicitations (4 s apart) out of
        every port, into the captures and, once, past their drain."""
        for sw in self.plan.switches:
            if self._read_sys(self.node(sw), f"{sw}/address") is not None:
                self._sh(sw, _switch_port_script([sw]), "bridge device setup")

    def _check_shaping(self) -> None:
        """Mininet only logs tc failures (and then runs the link unshaped): read
        every htb rate back and refuse the point unless it is the one asked for."""
        for ln in self.plan.links:
            values = self.link_values.get(ln.node1, self._base_values)
            if values.bandwidth_mbps is None:
                continue
            ends = [(ln.node1, ln.port1)] if self._htb_at_node1(ln) else []
            ends.append((ln.node2, ln.port2))
            for node, port in ends:
                intf = f"{node}-eth{port}"
                rc, out = self.run(node, ["tc", "class", "show", "dev", intf])
                why = imp.check_htb_rate(out, values.bandwidth_mbps) if rc == 0 else f"tc failed ({rc}): {out.strip()}"
                if why:
                    raise imp.ImpairmentError(
                        f"bandwidth_mbps={values.bandwidth_mbps:g} on {intf} was not applied: {why}; "
                        f"see {self.log_dir / 'mininet.log'} (check that the kernel has sch_htb)")

    def _apply_nftables(self) -> None:
        for host, loss in self.impairments.nft_loss.items():
            self._load_nft(host, f"loss_pct={loss:g} with nftables on {host}", imp.nft_ruleset(loss),
                           "inet", imp.NFT_TABLE, loss)
        for host, eg in self.impairments.nft_egress.items():
            intf, loss = eg["intf"], eg["loss_pct"]
            what = f"loss_pct={loss:g} with nftables on {intf} egress"
            # One frame per packet first (impairments.py says why), so nft sees every frame.
            rc, out = self.run(host, ["sh", "-c", f"ip link set lo up && ip link set dev {intf} gso_max_segs 1 "
                                                  f"&& ip -d link show dev {intf}"])
            if rc != 0 or " gso_max_segs 1 " not in out:
                raise imp.ImpairmentError(f"cannot apply {what}: could not make it send one frame per "
                                          f"packet (ip link set gso_max_segs 1): {out.strip()[-300:]}; "
                                          f"use links.mechanism switch (soft backend)")
            self._load_nft(host, what, imp.nft_egress_ruleset(intf, loss), "netdev", imp.NFT_EGRESS_TABLE,
                           loss, hint=" (the netdev egress hook needs Linux >= 5.16 with "
                                      "CONFIG_NETFILTER_EGRESS)")

    def _load_nft(self, host: str, what: str, ruleset: str, family: str, table: str, loss: float,
                  hint: str = "") -> None:
        """Load a loss ruleset in `host` and read it back: what is recorded as
        applied is what the kernel has."""
        rc, out = self.run(host, ["nft", "-f", "-"], stdin=ruleset)
        if rc != 0:
            raise imp.ImpairmentError(f"cannot apply {what}: nft failed{hint}: {out.strip()}; "
                                      f"use links.mechanism switch")
        rc, out = self.run(host, ["nft", "-j", "list", "table", family, table])
        why = imp.check_nft_loss(out, loss) if rc == 0 else f"nft list failed ({rc}): {out.strip()}"
        if why:
            raise imp.ImpairmentError(f"{what} was not applied: {why}; use links.mechanism switch")

    def _apply_netem(self) -> None:
        for e in self.impairments.netem:
            argv = imp.netem_command(e["intf"], e["impair"], e["shaped"])
            rc, out = self.run(e["node"], argv)
            if rc != 0:
                raise imp.ImpairmentError(f"cannot apply netem on {e['intf']}: `{shlex.join(argv)}` "
                                          f"failed: {out.strip()}; use links.mechanism switch")

    def _start_captures(self) -> None:
        """The switch class cannot capture: tcpdump on every switch port instead."""
        for sw in self.plan.switches:
            self._captures.start(sw, [f"{sw}-eth{port}" for port in self.plan.switch_ports(sw)])

    def _start_host_captures(self) -> None:
        """tcpdump at each named host's interface, inside its namespace: what the
        host sent and received, before the switch (switch.capture_hosts)."""
        for h in self.capture_hosts:
            self._captures.start(h, [f"{h}-eth0"])

    def _spawn_capture(self, node: str, argv: list[str], log_path: Path) -> subprocess.Popen:
        with open_log(log_path) as f:
            return self.node(node).popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)

    def _frames_counted(self, node: str, intf: str) -> int | None:
        """Frames intf has sent plus received, as its node sees it (None: unreadable)."""
        n = [self._read_sys(self.node(node), f"{intf}/statistics/{d}_packets") for d in ("rx", "tx")]
        return None if None in n or not all(v.isdigit() for v in n) else int(n[0]) + int(n[1])

    # --- dry run -------------------------------------------------------------
    def _record_build(self, rec: Any) -> None:
        """What _build does, recorded (testbed.net.plan): the plan, Mininet's
        nodes and links, every setup script, the switch processes and their
        configs, impairments and captures. Nothing is created."""
        rec.config(self.run_dir / "network.json", json.dumps(self._plan_doc(), indent=1, default=str))
        for h in self.plan.hosts:
            rec.note(f"Mininet host {h.name}: own network namespace, {h.ip}/{PREFIX_LEN}, mac {h.mac}")
        for ln in self.plan.links:
            values = self.link_values.get(ln.node1, self._base_values)
            bw = ""
            if values.bandwidth_mbps is not None:
                bw = (f", {values.bandwidth_mbps:g} Mbit/s: htb at {ln.node2}-eth{ln.port2} (TCLink bw), "
                      f"{ln.node1}'s uplink shaped by {ln.node2} at its port's receive ring"
                      if imp.shaped_by_switch(self.impairments, ln.node2, ln.port2) else
                      f", htb {values.bandwidth_mbps:g} Mbit/s both ends (TCLink bw)")
            rec.note(f"Mininet link {ln.node1}-eth{ln.port1} <-> {ln.node2}-eth{ln.port2}{bw}")
        for h in self.plan.hosts:
            rec.script(h.name, self._host_setup_script(h), self.HOST_SETUP)
        for sw in self.plan.switches:
            intfs = [f"{sw}-eth{p}" for p in self.plan.switch_ports(sw)]
            rec.script(sw, _switch_port_script(intfs), "switch port setup")
        for host, loss in self.impairments.nft_loss.items():
            rec.command(host, ["nft", "-f", "-"], f"nftables loss {loss:g}% on ingress (ruleset on stdin)")
            rec.config(f"{host}: nft ruleset", imp.nft_ruleset(loss))
        for host, eg in self.impairments.nft_egress.items():
            rec.command(host, ["ip", "link", "set", "dev", eg["intf"], "gso_max_segs", "1"],
                        "one frame per packet, so nft sees every frame")
            rec.command(host, ["nft", "-f", "-"], f"nftables loss {eg['loss_pct']:g}% on {eg['intf']} "
                        f"egress (ruleset on stdin)")
            rec.config(f"{host}: nft egress ruleset", imp.nft_egress_ruleset(eg["intf"], eg["loss_pct"]))
        for e in self.impairments.netem:
            rec.command(e["node"], imp.netem_command(e["intf"], e["impair"], e["shaped"]), "netem")
        for sw in self.plan.switches:
            self._record_switch(rec, sw)
        if self.capture and not self.soft:
            for sw in self.plan.switches:
                for port in self.plan.switch_ports(sw):
                    rec.command(sw, self._captures.argv(f"{sw}-eth{port}"),
                                "capture")
        for h in self.capture_hosts:
            rec.command(h, self._captures.argv(f"{h}-eth0"), "capture at the host")

    def _record_switch(self, rec: Any, sw: str) -> None:
        ports = {p: f"{sw}-eth{p}" for p in self.plan.switch_ports(sw)}  # Mininet's port names
        params = self._switch_params(sw)
        if self.soft:
            from testbed.switch.soft.node import OFFLOADS_OFF  # noqa: PLC0415
            from testbed.switch.soft.process import SoftSwitchProcess  # noqa: PLC0415
            # What SoftSwitchNode.start adds to the config: its name and ports.
            cfg = {**params["switch_config"], "name": sw, "ports": {str(k): v for k, v in ports.items()}}
            proc = SoftSwitchProcess(cfg, params["run_dir"], log_path=params["log_path"], nice=params["nice"])
            rec.script(sw, "\n".join(f"ethtool -K {i} {OFFLOADS_OFF}; ip link set {i} up"
                                     for i in ports.values()), "switch ports: offloads off, up")
            rec.command(sw, proc.argv, f"soft switch (renice {params['nice']} once ready), "
                                       f"log {proc.log_path}")
            rec.config(proc.config_path, json.dumps(proc.config, indent=1))
        elif self.backend == "bmv2":
            from testbed.switch import bmv2  # noqa: PLC0415
            argv = bmv2.switch_argv(params["device_id"], ports, f"127.0.0.1:{params['grpc_port']}",
                                    Path(params["log_dir"]) / f"{sw}-bmv2.log", params.get("thrift_port"))
            rec.command(sw, argv, "simple_switch_grpc (Bmv2SwitchNode)")
        else:
            rec.note(f"switch {sw}: {self.switch_cls.__name__} (no recorder for this class)")

    def _register(self, pid: int, role: str) -> None:
        self._registry.register_pid(pid, role=role)
        if self._registry.record["children"] and self._registry.record["children"][-1]["pid"] == pid:
            self._mine.append(self._registry.record["children"][-1])

    def _register_children(self) -> None:
        """Record every process Mininet or the switch class started for us:
        node shells and switch processes are the runner's direct children."""
        known = {c["pid"] for c in self._mine} | self._preexisting
        for pid, cmd in _children_of(os.getpid()).items():
            if pid not in known:
                self._register(pid, f"mininet: {cmd[:100]}")

    # --- teardown ----------------------------------------------------------
    def _read_nft_counters(self) -> None:
        tables = [(host, host, "inet", imp.NFT_TABLE) for host in self.impairments.nft_loss]
        tables += [(host, f"{host} egress", "netdev", imp.NFT_EGRESS_TABLE)
                   for host in self.impairments.nft_egress]
        for host, key, family, table in tables:
            try:
                rc, out = self.run(host, ["nft", "-j", "list", "table", family, table], timeout=10)
                if rc == 0:
                    self._nft_counters[key] = imp.parse_nft_counters(out)
                else:
                    self.errors.append(f"nft counters on {key}: {out.strip()}")
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"nft counters on {key}: {e}")

    def _collect_switch_stats(self) -> None:
        for sw in self.switch_names:
            try:
                stats = getattr(self._net[sw], "stats", None)
            except KeyError:
                continue
            if isinstance(stats, dict):
                self._stats[sw] = stats

    def _kill_registered_leftovers(self) -> None:
        """Whatever we recorded and is still alive after Mininet's stop goes now."""
        live = [c for c in self._mine if alive(c["pid"], c["start"])]
        for c in live:
            signal_recorded(c["pid"], c["start"], signal.SIGTERM)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and any(alive(c["pid"], c["start"]) for c in live):
            time.sleep(0.05)
        for c in live:
            if signal_recorded(c["pid"], c["start"], signal.SIGKILL):
                self.errors.append(f"had to SIGKILL {c['role']} (pid {c['pid']}) after stop")
        for p in [*self._procs, *self._captures.processes]:
            try:
                p.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass


def _switch_port_script(devices: list[str]) -> str:
    return "\n".join(f"sysctl -qw net.ipv6.conf.{i}.disable_ipv6=1 2>/dev/null || true" for i in devices)


def _children_of(parent: int) -> dict[int, str]:
    """Live direct children of a process: pid -> command line."""
    out: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) != parent:  # field 4: parent PID
                continue
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError, IndexError):
            continue
        out[int(entry.name)] = cmd.decode(errors="replace").strip()
    return out
