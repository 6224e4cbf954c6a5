"""switch.backend bmv2 wired into scenario runs, without BMv2 or p4c: the
compile step the factory runs, the addSwitch() params and simple_switch_grpc
argv each switch gets, the device config the control plane pushes, and the
refusals (missing binaries, impairments BMv2 cannot apply, foreign options).
Pure logic: p4c, Mininet nodes and gRPC are replaced by recorders."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.net import factory
from testbed.net import impairments as imp
from testbed.net.base import NetworkError
from testbed.net.mininet_net import P4RUNTIME_BASE_PORT
from testbed.scenario import load_scenario
from testbed.switch import bmv2, bmv2_tools
from testbed.switch import control_plane as cpl
from testbed.switch import controller as ctl
from testbed.switch.bmv2_registers import ThriftRegisters

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"


def scenario(*overrides: str):
    return load_scenario(QUICKSTART, ["switch.backend=bmv2", *overrides])


@pytest.fixture
def fake_bmv2(monkeypatch):
    """BMv2 'installed': p4c writes a JSON and a P4Info; calls are recorded."""
    calls: list[tuple[Path, Path]] = []

    def compile_p4(p4_path, out_dir, p4c=bmv2.P4C, timeout=600.0, prefix=None):
        build = bmv2.compile_argv(p4_path, out_dir, p4c)
        build.json_path.parent.mkdir(parents=True, exist_ok=True)
        build.json_path.write_text('{"program": "%s"}' % Path(p4_path).name)
        build.p4info_path.write_text((REPO / "p4" / "ina.p4info.txtpb").read_text())
        calls.append((Path(p4_path), Path(out_dir)))
        return build

    monkeypatch.setattr(bmv2, "bmv2_available", lambda prefix=None: (True, "simple_switch_grpc=/x, p4c-bm2-ss=/y"))
    monkeypatch.setattr(bmv2, "compile_p4", compile_p4)
    monkeypatch.setattr(bmv2, "tools", lambda prefix=None: bmv2_tools.Bmv2Tools(
        Path(bmv2.SWITCH), Path(bmv2.P4C), Path("simple_switch_CLI"), "/usr/bin/python3",
        "1.15.5", "1.2.4.8", Path(prefix) if prefix else None))
    monkeypatch.setattr(imp, "netem_available", lambda: False)   # this kernel: no sch_netem
    monkeypatch.setattr(imp, "nft_available", lambda: True)
    return calls


def network(tmp_path, *overrides: str):
    logs = tmp_path / "logs" / "p0"
    return factory.build_network("mininet", scenario(*overrides), logs_dir=logs,
                                 pcaps_dir=tmp_path / "pcaps" / "p0", seed=1), logs


class _Intf:
    def __init__(self, name: str):
        self.name = name


class _FakeMininetSwitch:
    """Stands in for mininet.node.Switch: no shell, no namespace."""

    def __init__(self, name, **params):
        self.name, self.params, self.ports = name, params, {}


def node(monkeypatch, name: str, params: dict, ports: dict[int, str]) -> bmv2.Bmv2SwitchNode:
    monkeypatch.setattr(bmv2, "Switch", _FakeMininetSwitch)
    monkeypatch.setattr(bmv2, "_listening", lambda addr: False)
    n = bmv2.Bmv2SwitchNode(name, **params)
    n.ports = {_Intf("lo"): 0, **{_Intf(i): p for p, i in ports.items()}}
    n.cmds = []
    n.cmd = n.cmds.append                     # no node shell
    n.popen = lambda *a, **k: pytest.fail("no process in a unit test")
    return n


# --- which class, which program ----------------------------------------------------------

def test_missing_bmv2_fails_with_the_reason_before_compiling(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(bmv2_tools.PREFIX_ENV, raising=False)
    bmv2_tools.clear_cache()
    monkeypatch.setattr(bmv2, "compile_p4", lambda *a, **k: pytest.fail("compiled without p4c"))
    with pytest.raises(NetworkError) as e:
        network(tmp_path)
    assert str(e.value).startswith("switch.backend bmv2: simple_switch_grpc not found on PATH")
    assert bmv2.bmv2_available()[1] in str(e.value) and "switch.backend soft" in str(e.value)
    with pytest.raises(NetworkError, match=r"not found in /nonexistent-prefix/bin|/nonexistent-prefix is not"):
        network(tmp_path, "switch.options.bmv2_prefix=/nonexistent-prefix")   # the option is used
    bmv2_tools.clear_cache()


def test_switch_class_is_the_bmv2_node_when_installed(fake_bmv2):
    assert factory.switch_class("bmv2") is bmv2.Bmv2SwitchNode


def test_program_compiled_once_into_the_point_logs(fake_bmv2, tmp_path):
    net, logs = network(tmp_path)
    assert fake_bmv2 == [(REPO / "p4" / "ina.p4", logs / "bmv2")]
    assert net.bmv2_build.json_path == logs / "bmv2" / "ina.json"
    assert net.backend == "bmv2" and net.p4runtime and not net.soft


def test_unknown_program_and_failed_compile_are_named(fake_bmv2, monkeypatch, tmp_path):
    with pytest.raises(NetworkError, match=r"no P4 source at .*nope\.p4; programs available: \['ina'\]"):
        network(tmp_path, "switch.program=nope")

    def broken(p4_path, out_dir, **kw):
        raise bmv2.Bmv2Error("p4c failed (1): p4c-bm2-ss ...\n  log: x.p4c.log")
    monkeypatch.setattr(bmv2, "compile_p4", broken)
    with pytest.raises(NetworkError, match=r"switch.backend bmv2: p4c failed \(1\)"):
        network(tmp_path)


def test_soft_switch_options_are_refused_for_bmv2(fake_bmv2, tmp_path):
    with pytest.raises(NetworkError, match=r"switch.options \['nice'\] do not apply to "
                                           r"switch.backend bmv2; it accepts \['ready_timeout', 'log_level', "
                                           r"'bmv2_prefix'\]"):
        network(tmp_path, "switch.options.nice=-5")
    assert fake_bmv2 == []   # refused before compiling


# --- what each switch runs -----------------------------------------------------------------

def test_switch_params_and_argv_per_switch(fake_bmv2, monkeypatch, tmp_path):
    net, logs = network(tmp_path, "topology.kind=tree", "topology.leaves=2")
    assert net.switch_names == ["s1", "s2", "s3"]
    info = net.switch_info
    for sw in net.switch_names:
        n = int(sw[1:])
        params = net._switch_params(sw)
        assert params == {"device_id": n, "grpc_port": P4RUNTIME_BASE_PORT + n,
                          "thrift_port": 9089 + n, "log_dir": logs}
        assert info["p4runtime"][sw] == f"127.0.0.1:{P4RUNTIME_BASE_PORT + n}"

    ports = {p: f"s2-eth{p}" for p in sorted(net.plan.switch_ports("s2"))}
    s2 = node(monkeypatch, "s2", net._switch_params("s2"), ports)
    assert s2.params == {"inNamespace": False}          # the run's own namespace, not a node's
    assert s2.grpc_addr == info["p4runtime"]["s2"]
    assert s2.argv() == [
        "simple_switch_grpc", "--no-p4", "--device-id", "2",
        *[a for p, i in ports.items() for a in ("-i", f"{p}@{i}")],
        "--thrift-port", "9091",
        "--log-file", str(logs / "s2-bmv2.log"), "--log-flush", "-L", "info",
        "--", "--grpc-server-addr", "127.0.0.1:9560"]

    started = {}
    monkeypatch.setattr(bmv2, "start_switch", lambda argv, addr, log_file, console, popen, ready_timeout,
                        ports, env: started.update(argv=argv, addr=addr, console=console,
                                                   timeout=ready_timeout, ports=ports) or "proc")
    s2.start([])
    assert started == {"argv": s2.argv(), "addr": "127.0.0.1:9560",
                       "console": logs / "s2-bmv2-console.log", "timeout": 10.0,
                       "ports": ports}                     # checked up, not only the process
    assert s2.cmds == [f"ip link set {i} up" for i in ports.values()]


def test_bmv2_options_reach_the_node(fake_bmv2, monkeypatch, tmp_path):
    net, _ = network(tmp_path, "switch.options.ready_timeout=30", "switch.options.log_level=warn")
    params = net._switch_params("s1")
    assert params["ready_timeout"] == 30 and params["log_level"] == "warn"
    s1 = node(monkeypatch, "s1", params, {1: "s1-eth1"})
    assert s1.ready_timeout == 30.0 and s1.argv()[s1.argv().index("-L") + 1] == "warn"


# --- what the control plane pushes ------------------------------------------------------------

class _RecordingController:
    made: list[dict] = []

    def __init__(self, name, addr, device_id, p4info_path, device_config, log_path):
        self.rec = {"name": name, "addr": addr, "device_id": device_id, "p4info": p4info_path,
                    "config": device_config, "log": log_path, "calls": [], "registers": None}
        self.log = f"request log of {name}"
        _RecordingController.made.append(self.rec)

    def use_registers(self, backend):
        self.rec["registers"] = backend
        return self

    def connect(self):
        return self

    def install_flood_group(self, ports):
        self.rec["calls"].append(("flood", list(ports)))

    def install_forwarding(self, entries):
        self.rec["calls"].append(("forwarding", len(entries)))

    def install_job(self, job):
        self.rec["calls"].append(("job", job["job_id"]))

    def set_drop_probability(self, port, p, direction):
        self.rec["calls"].append(("drop", port, p, direction))

    def close(self):
        pass


def test_control_plane_pushes_the_compiled_json_and_p4info(fake_bmv2, monkeypatch, tmp_path):
    net, logs = network(tmp_path)
    _RecordingController.made = []
    monkeypatch.setattr(ctl, "SwitchController", _RecordingController)
    cp = cpl.ControlPlane.start(net, "ina", logs, [])
    (rec,) = _RecordingController.made
    assert rec["config"] == (logs / "bmv2" / "ina.json").read_bytes() == b'{"program": "ina.p4"}'
    assert rec["p4info"] == str(logs / "bmv2" / "ina.p4info.txtpb")
    assert (rec["name"], rec["addr"], rec["device_id"]) == ("s1", "127.0.0.1:9559", 1)
    assert net._switch_params("s1")["device_id"] == rec["device_id"]   # --device-id agrees
    assert rec["calls"] == [("flood", [1, 2, 3, 4]), ("forwarding", 4)]
    assert list(cp.controllers) == ["s1"]
    # registers through the switch's own Thrift port (PI has no register RPCs)
    regs = rec["registers"]
    assert isinstance(regs, ThriftRegisters) and regs.log == "request log of s1"
    assert regs.argv[-4:] == ["--thrift-ip", "127.0.0.1", "--thrift-port",
                              str(net._switch_params("s1")["thrift_port"])]


def test_soft_switch_still_gets_the_program_name():
    info = {"p4runtime": {"s1": "127.0.0.1:9559"}}
    p4info, config = cpl.pipeline_config(info, "ina")
    assert (p4info, config) == (str(REPO / "p4" / "ina.p4info.txtpb"), b"ina")


# --- impairments: BMv2 has no soft-switch port impairments -------------------------------------

@pytest.mark.parametrize("overrides, expect", [
    (["links.delay_ms=5"], "cannot apply delay_ms=5 on w1-s1: the bmv2 switch does not impair links "
                           "and this kernel has no sch_netem; use switch.backend soft"),
    (["links.jitter_ms=1"], "jitter_ms=1 on w1-s1: the bmv2 switch does not impair links"),
    (["links.duplicate_pct=1"], "duplicate_pct=1 on w1-s1: the bmv2 switch does not impair links"),
    (["links.reorder_pct=1"], "reorder_pct=1 on w1-s1: the bmv2 switch does not impair links"),
    (["links.loss_pct=1", "links.delay_ms=1"], "loss alone on host links (links.mechanism nftables)"),
    (["links.mechanism=switch", "links.loss_pct=1"],
     "links.mechanism switch needs the soft switch, but the backend is bmv2"),
    (["links.mechanism=nftables", "links.delay_ms=5"], "nftables can only drop packets (loss_pct)"),
])
def test_impairments_bmv2_cannot_apply_are_refused(fake_bmv2, tmp_path, overrides, expect):
    with pytest.raises(imp.ImpairmentError) as e:
        network(tmp_path, *overrides)
    assert expect in str(e.value)


def test_loss_alone_goes_through_the_programs_drop_simulators(fake_bmv2, monkeypatch, tmp_path):
    """links.loss_pct on BMv2: both directions of every host link through the
    compiled program's DropSimulator / EgressDropSimulator registers, which the
    control plane sets (through the controller's register path: Thrift)."""
    net, logs = network(tmp_path, "links.loss_pct=2")
    assert net.impairments.mechanism == "drop_simulator" and net.impairments.switch_ports == {}
    loss = {r["direction"]: r for r in net.impairments.rows if r["parameter"] == "loss_pct"}
    assert len(loss) == 8 and all(r["applied"] for r in loss.values())
    assert loss["w3->s1"]["where"] == "s1 port 3 ingress DropSimulator"
    assert loss["s1->w3"]["where"] == "s1 port 3 egress EgressDropSimulator"
    _RecordingController.made = []
    monkeypatch.setattr(ctl, "SwitchController", _RecordingController)
    cpl.ControlPlane.start(net, "ina", logs, [])
    (rec,) = _RecordingController.made
    drops = sorted(c[1:] for c in rec["calls"] if c[0] == "drop")
    assert drops == [(p, 0.02, d) for p in (1, 2, 3, 4) for d in ("egress", "ingress")]


def test_loss_with_nftables_is_on_the_hosts_both_ways(fake_bmv2, tmp_path):
    net, _ = network(tmp_path, "links.mechanism=nftables", "links.loss_pct=1")
    assert net.impairments.nft_loss == {"w1": 1.0, "w2": 1.0, "w3": 1.0, "w4": 1.0}
    assert net.impairments.nft_egress["w4"] == {"intf": "w4-eth0", "loss_pct": 1.0}
    assert net.impairments.switch_ports == {} and net.impairments.drop_simulator == {}
    loss = [r for r in net.impairments.rows if r["parameter"] == "loss_pct"]
    assert all(r["applied"] and r["mechanism"] == "nftables" for r in loss) and len(loss) == 8


def test_auto_loss_without_aggregation_traffic_is_nftables(fake_bmv2, tmp_path):
    """The runner says whether the point has in-network aggregation traffic; a
    point without it (ring, PS) does not get the drop simulators, which would
    drop nothing of it."""
    logs = tmp_path / "logs" / "p0"
    net = factory.build_network("mininet", scenario("links.loss_pct=2"), logs_dir=logs,
                                pcaps_dir=tmp_path / "pcaps" / "p0", seed=1, ina_traffic=False)
    assert net.impairments.mechanism == "nftables" and net.impairments.drop_simulator == {}
    with_ina, _ = network(tmp_path, "links.loss_pct=2")
    assert with_ina.impairments.mechanism == "drop_simulator"
