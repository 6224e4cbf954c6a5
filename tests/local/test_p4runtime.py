"""The soft switch's P4Runtime server, driven by p4runtime-shell and by
SwitchController, in a real soft switch process ("ina" pipeline) on loopback.

The switch's ports are UDP sockets (rootless), so INA contributions sent by two
test "workers" go through the pipeline the controller programmed, and the
counters read back over P4Runtime count them.
"""
from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.v1 import p4runtime_pb2 as pb

from testbed import wire
from testbed.loopback_ports import free_port_base
from testbed.switch.controller import ControllerError, SwitchController, WriteError
from testbed.switch.soft.process import SoftSwitchProcess, SwitchStartError, build_config

REPO = Path(__file__).resolve().parents[2]
P4INFO = REPO / "p4" / "ina.p4info.txtpb"
SWITCH_MAC, SWITCH_IP = "02:00:00:00:00:fe", "10.0.0.254"
WORKERS = [{"worker_id": 0, "mac": "00:00:00:00:00:01", "ip": "10.0.0.1", "port": 1},
           {"worker_id": 1, "mac": "00:00:00:00:00:02", "ip": "10.0.0.2", "port": 2}]
JOB = {"job_id": 7, "slot_base": 16, "slot_count": 32, "workers": WORKERS}


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    return free_port_base(1, kind=kind)


class Switch:
    """A soft switch process with a P4Runtime address and two UDP 'links'."""

    def __init__(self, tmp: Path):
        self.workers = []
        ports = {}
        for no in (1, 2):
            w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            w.bind(("127.0.0.1", 0))
            w.settimeout(5.0)
            sp = free_port(socket.SOCK_DGRAM)
            ports[no] = f"udp:127.0.0.1:{sp}>127.0.0.1:{w.getsockname()[1]}"
            self.workers.append((w, ("127.0.0.1", sp)))
        self.addr = f"127.0.0.1:{free_port()}"
        self.tmp = tmp
        cfg = build_config("s1", ports, tmp / "s1.stats.json", tmp / "s1.ready.json",
                           pipeline="ina", p4runtime_addr=self.addr)
        self.proc = SoftSwitchProcess(cfg, tmp, log_path=tmp / "s1.log").start()
        self.bin_path = tmp / "ina.bin"
        self.bin_path.write_bytes(b"ina")

    def controller(self, log_name: str = "s1-p4runtime-requests.txt", **kw) -> SwitchController:
        return SwitchController("s1", self.addr, 1, P4INFO, b"ina", self.tmp / "logs" / log_name, **kw)

    def close(self) -> None:
        self.proc.stop()
        for w, _ in self.workers:
            w.close()


@pytest.fixture(scope="module")
def switch(tmp_path_factory):
    sw = Switch(tmp_path_factory.mktemp("p4rt"))
    yield sw
    sw.close()


def contribution(w: dict, values, seq: int = 1, slot: int = 0) -> bytes:
    return wire.build_frame(w["mac"], SWITCH_MAC, w["ip"], SWITCH_IP, wire.INA_PORT_BASE,
                            wire.INA_PORT_BASE, op=wire.OP_SUM, job_id=JOB["job_id"], slot=slot,
                            slot_ver=0, worker_id=w["worker_id"], seq=seq, values=values)


def test_shell_session_and_backup_controller(switch):
    """p4runtime-shell as a user runs it (setup() pushes the pipeline); a second
    client with a lower election id is a backup: reads work, writes are refused,
    and it is promoted when the primary leaves."""
    import p4runtime_sh.shell as sh

    sh.setup(device_id=1, grpc_addr=switch.addr, election_id=(0, 5),
             config=sh.FwdPipeConfig(str(P4INFO), str(switch.bin_path)), verbose=False)
    backup = None
    try:
        te = sh.TableEntry("Forward.l2_forward")(action="Forward.set_egress")
        te.match["dst_addr"] = "00:00:00:00:00:01"
        te.action["port"] = "1"
        te.insert()
        got = list(sh.TableEntry("Forward.l2_forward").read())
        assert len(got) == 1 and got[0].action["port"].value == b"\x01"
        sh.MulticastGroupEntry(9).add(1, 1).add(2, 2).insert()
        assert [g.group_id for g in sh.MulticastGroupEntry().read()] == [9]
        c = sh.CounterEntry("Ingress.ina_packets")
        c.index = 3
        assert [e.packet_count for e in c.read()] == [0]
        assert sh.APIVersion().startswith("1.")

        backup = switch.controller("s1-backup.txt", election_id=(0, 1))
        backup.connect(push_pipeline=False, require_primary=False)
        assert not backup.primary
        assert backup.read_table("Forward.l2_forward")[0]["params"] == {"port": 1}
        with pytest.raises(WriteError) as e:
            backup.install_forwarding([{"dst_mac": "00:00:00:00:00:02", "port": 2}])
        assert e.value.code == "PERMISSION_DENIED"
        with pytest.raises(ControllerError, match="not primary"):
            switch.controller("s1-backup2.txt", election_id=(0, 2)).connect()
    finally:
        sh.teardown()
    assert backup.poll_arbitration(timeout=5.0), "backup not promoted after the primary left"
    backup.install_forwarding([{"dst_mac": "00:00:00:00:00:02", "port": 2}])
    assert len(backup.read_table("Forward.l2_forward")) == 2
    backup.close()


def test_controller_programs_the_data_plane(switch):
    with switch.controller() as c:
        c.connect()
        assert c.read_table("Forward.l2_forward") == []     # a commit clears the state
        c.install_forwarding([{"dst_mac": w["mac"], "port": w["port"]} for w in WORKERS])
        c.install_forwarding([{"dst_mac": WORKERS[0]["mac"], "port": 2}])   # modify: idempotent
        fwd = {e["match"]["dst_addr"]: e["params"]["port"] for e in c.read_table("Forward.l2_forward")}
        assert fwd == {1: 2, 2: 2}
        c.install_flood_group([1, 2])
        c.set_switch_address(SWITCH_MAC, SWITCH_IP)
        c.install_job(JOB)
        [job] = c.read_table("Ingress.job_table")
        assert job["match"] == {"job_id": 7}
        assert job["params"] == {"num_workers": 2, "mcast_grp": 0x107, "worker_mask": 3,
                                 "slot_base": 16, "slot_count": 32}
        rids = {0x8000 | 7 << 5, 0x8000 | 7 << 5 | 1}
        assert {e["match"]["egress_rid"] for e in c.read_table("Egress.replica_rewrite")} == rids
        groups = c.read_multicast_groups()
        assert sorted(groups[0x107]) == [(1, 0x80E0), (2, 0x80E1)]
        assert groups[1] == [(1, 0), (2, 0)]
        with pytest.raises(ControllerError, match="already installed"):
            c.install_job(JOB)

        assert sorted((e["match"]["worker_id"], e["params"]["port"])
                      for e in c.read_table("Ingress.worker_port")) == [(0, 1), (1, 2)]

        # the programmed pipeline aggregates: both workers get the sum; worker 1
        # (port 2) also sending as worker 0 is refused and counted, before and after
        w1_sock, w1_port = switch.workers[1]
        w1_sock.sendto(contribution(WORKERS[0], [1000, 1000, 1000]), w1_port)
        for (sock, sw_port), w, vals in zip(switch.workers, WORKERS, ([1, 2, 3], [10, 20, 30])):
            sock.sendto(contribution(w, vals), sw_port)
        w1_sock.sendto(contribution(WORKERS[0], [1000, 1000, 1000]), w1_port)
        for sock, _ in switch.workers:
            res = wire.parse_frame(sock.recv(4096))
            assert res is not None and res.header.flags & wire.FLAG_RESULT
            assert res.values.tolist() == [11, 22, 33]
        counters = c.read_counters()
        assert counters["Ingress.ina_packets"] == {7: (2, 0)}
        assert counters["Ingress.ina_results"] == {7: (1, 0)}
        assert counters["Ingress.bad_job"] == {}
        assert counters["Ingress.bad_port"] == {7: (2, 0)}
        assert c.read_register("Aggregator.worker_count", 2 * 16) == {32: 2}

        c.set_drop_probability(1, 0.25)
        assert c.read_register("DropSimulator.drop_probability", 1) == {1: 1 << 30}
        c.remove_job(7)
        assert c.read_table("Ingress.job_table") == []
        assert c.read_table("Ingress.worker_port") == []
        assert 0x107 not in c.read_multicast_groups()


def test_failed_write_at_the_controllers_batch_size_names_every_update(switch):
    """Over real gRPC: a Write of WRITE_CHUNK updates that all fail comes back with
    one error per update (not RESOURCE_EXHAUSTED for an oversized trailer); the
    controller splits longer lists into such Writes and numbers updates across
    them; a larger Write sent by hand names its failed updates in the status."""
    from testbed.switch.controller import WRITE_CHUNK

    with switch.controller() as c:
        c.connect()
        missing = [c.update(pb.Update.DELETE, c.table_entry(
            "Forward.l2_forward", {"dst_addr": f"00:00:00:00:{i >> 8:02x}:{i & 0xFF:02x}"}))
            for i in range(WRITE_CHUNK)]
        with pytest.raises(WriteError) as e:
            c.write(missing)
        assert e.value.code == "UNKNOWN"
        assert [(i, code) for i, code, _ in e.value.errors] == [(i, "NOT_FOUND") for i in range(WRITE_CHUNK)]
        assert "no entry" in e.value.errors[0][2]

        good = [c.update(pb.Update.INSERT, c.table_entry(
            "Forward.l2_forward", {"dst_addr": f"00:00:00:01:{i >> 8:02x}:{i & 0xFF:02x}"},
            "Forward.set_egress", {"port": 1})) for i in range(WRITE_CHUNK + 10)]
        good.append(c.update(pb.Update.INSERT, c.multicast_group(9, [(7, 1)])))   # no port 7
        with pytest.raises(WriteError) as e:
            c.write(good)
        assert [(i, code) for i, code, _ in e.value.errors] == [(WRITE_CHUNK + 10, "INVALID_ARGUMENT")]
        assert "replica port 7 does not exist" in e.value.errors[0][2]

        req = pb.WriteRequest(device_id=1)
        req.election_id.low = 1
        req.updates.extend(missing[:1] * 2048)
        with pytest.raises(grpc.RpcError) as rpc:
            c.client.stub.Write(req)
        assert rpc.value.code() == grpc.StatusCode.UNKNOWN, rpc.value.details()
        assert "2048 of 2048 updates failed; first: update 0: NOT_FOUND" in rpc.value.details()


def test_malformed_requests_get_errors_and_the_switch_keeps_running(switch):
    with switch.controller() as c:
        c.connect()
        entry = c.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:09"},
                              "Forward.set_egress", {"port": 600})    # 600 > bit<9>
        with pytest.raises(WriteError) as e:
            c.write([c.update(pb.Update.INSERT, entry)])
        assert [err[1] for err in e.value.errors] == ["INVALID_ARGUMENT"]
        assert "bit<9>" in e.value.errors[0][2]

        good = c.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:09"},
                             "Forward.set_egress", {"port": 1})
        unknown = pb.TableEntry()
        unknown.CopyFrom(good)
        unknown.table_id = 0x02FFFFFF
        no_action = c.table_entry("Ingress.job_table", {"job_id": 3})
        bad_job = c.table_entry("Ingress.job_table", {"job_id": 3}, "Ingress.set_job",
                                {"num_workers": 0, "mcast_grp": 5, "worker_mask": 1,
                                 "slot_base": 0, "slot_count": 1})
        missing = c.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:0a"})
        batch = [c.update(pb.Update.INSERT, good), c.update(pb.Update.INSERT, good),
                 c.update(pb.Update.INSERT, unknown), c.update(pb.Update.INSERT, no_action),
                 c.update(pb.Update.INSERT, bad_job), c.update(pb.Update.DELETE, missing),
                 pb.Update(type=pb.Update.INSERT)]
        with pytest.raises(WriteError) as e:
            c.write(batch)
        codes = {i: code for i, code, _ in e.value.errors}
        assert codes == {1: "ALREADY_EXISTS", 2: "INVALID_ARGUMENT", 3: "INVALID_ARGUMENT",
                         4: "INVALID_ARGUMENT", 5: "NOT_FOUND", 6: "INVALID_ARGUMENT"}
        assert c.read_table("Forward.l2_forward")[0]["match"] == {"dst_addr": 9}  # update 0 applied

        # bytes that are not a WriteRequest at all
        with grpc.insecure_channel(switch.addr) as ch:
            raw = ch.unary_unary("/p4.v1.P4Runtime/Write")
            with pytest.raises(grpc.RpcError) as rpc:
                raw(b"\xff\xfe\xfd garbage", timeout=5)
            assert rpc.value.code() != grpc.StatusCode.OK
        other_device = pb.WriteRequest(device_id=42, updates=[c.update(pb.Update.INSERT, good)])
        other_device.election_id.low = 1
        with pytest.raises(grpc.RpcError) as rpc:
            c.client.stub.Write(other_device)
        assert rpc.value.code() == grpc.StatusCode.NOT_FOUND
        assert "unknown device id 42" in rpc.value.details()
        assert switch.proc.running

    # a P4Info or device config that does not describe the switch's program
    bad = switch.tmp / "bad.p4info.txtpb"
    bad.write_text(P4INFO.read_text().replace('"Ingress.job_table"', '"Ingress.jobs"'))
    with pytest.raises(ControllerError, match="does not match the soft switch's program 'ina'"):
        with SwitchController("s1", switch.addr, 1, bad, b"ina", switch.tmp / "logs" / "bad.txt") as b:
            b.connect()
    with pytest.raises(ControllerError, match="runs program 'ina'"):
        with SwitchController("s1", switch.addr, 1, P4INFO, b"forward",
                              switch.tmp / "logs" / "bad.txt") as b:
            b.connect()
    with pytest.raises(ControllerError, match="unknown device id 3"):
        with SwitchController("s1", switch.addr, 3, P4INFO, b"ina",
                              switch.tmp / "logs" / "bad.txt") as b:
            b.connect()
    assert switch.proc.running
    with switch.controller() as c:      # and it still serves a well-behaved client
        c.connect()
        c.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1}])


def test_request_log_is_readable(switch):
    log = switch.tmp / "logs" / "s1-p4runtime-requests.txt"
    with switch.controller() as c:
        c.connect()
        c.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1}])
        c.read_counters()
    text = log.read_text()
    assert "-> StreamChannel arbitration" in text and "-> SetForwardingPipelineConfig" in text
    assert "# p4info: 5 tables, 9 actions, 11 counters, 7 registers" in text
    assert "table_id: 33554433  # Forward.l2_forward" in text
    assert "# entities: " in text                      # the counter read is summarized
    # a logged request is protobuf text format: it parses back into the message
    block = text.split("-> Write forwarding")[-1].split("\n", 1)[1].split("\n---- ")[0]
    req = text_format.Parse(block, pb.WriteRequest())
    assert req.updates[0].entity.table_entry.table_id == 0x02000001


def test_non_loopback_address_is_refused(tmp_path):
    cfg = build_config("s9", {1: f"udp:127.0.0.1:{free_port(socket.SOCK_DGRAM)}"},
                       tmp_path / "s9.stats.json", tmp_path / "s9.ready.json", pipeline="ina",
                       p4runtime_addr=f"0.0.0.0:{free_port()}")
    with pytest.raises(SwitchStartError, match="loopback"):
        SoftSwitchProcess(cfg, tmp_path, log_path=tmp_path / "s9.log", ready_timeout=20).start()


def test_values_are_canonical_bytestrings(switch):
    """The server answers with canonical bytestrings and accepts padded ones."""
    with switch.controller() as c:
        c.connect()
        padded = c.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:05"},
                               "Forward.set_egress", {"port": 2})
        padded.match[0].exact.value = b"\x00" * 5 + b"\x05"
        padded.action.action.params[0].value = b"\x00\x02"
        c.write([c.update(pb.Update.INSERT, padded)])
        [e] = c.read([_entity(padded)])
        assert e.table_entry.match[0].exact.value == b"\x05"
        assert e.table_entry.action.action.params[0].value == b"\x02"
        assert c.read_table("Forward.l2_forward")[0]["params"]["port"] == 2


def _entity(te: pb.TableEntry) -> pb.Entity:
    e = pb.Entity()
    e.table_entry.CopyFrom(te)
    e.table_entry.ClearField("action")
    return e


def test_bmv2_readiness_probe_with_a_stand_in_binary(tmp_path):
    """start_switch's probe (PID alive + gRPC port listening) and its error, with
    a Python stand-in for simple_switch_grpc (BMv2 is not installable here)."""
    import sys

    from testbed.switch import bmv2

    port = free_port()
    listen = ("import socket, time; s = socket.socket(); "
              f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    proc = bmv2.start_switch([sys.executable, "-c", listen], f"127.0.0.1:{port}",
                             tmp_path / "s1-bmv2.log", tmp_path / "s1-console.log")
    assert proc.poll() is None
    assert bmv2.stop_switch(proc) is not None
    crash = "import sys; print('cannot open interface s1-eth1'); sys.exit(3)"
    with pytest.raises(bmv2.Bmv2Error) as e:
        bmv2.start_switch([sys.executable, "-c", crash], f"127.0.0.1:{free_port()}",
                          tmp_path / "s2-bmv2.log", tmp_path / "s2-console.log")
    msg = str(e.value)
    assert "exit code 3" in msg and "command: " in msg and "s2-console.log" in msg
    assert "cannot open interface s1-eth1" in msg
