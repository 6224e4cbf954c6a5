"""Pure parts of the control plane: P4Info checks and value codecs of the
P4Runtime server, arbitration, the server's Write/Read handlers called
directly (no gRPC), message building against the P4Info, the request log
format, the Tofino dry run and the BMv2 argv."""
from __future__ import annotations

import struct
import types
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

from testbed.switch import bmv2, tofino
from testbed.switch import controller as ctl
from testbed.switch import p4runtime_errors, p4runtime_log
from testbed.switch import p4runtime_server as srv
from testbed.switch.ina import InaPipeline

REPO = Path(__file__).resolve().parents[2]
P4INFO_PATH = REPO / "p4" / "ina.p4info.txtpb"
WORKERS = [{"worker_id": 0, "mac": "00:00:00:00:00:01", "ip": "10.0.0.1", "port": 1},
           {"worker_id": 3, "mac": "00:00:00:00:00:04", "ip": "10.0.0.4", "port": 4,
            "udp_port": 23041}]
JOB = {"job_id": 5, "slot_base": 8, "slot_count": 4, "workers": WORKERS}


def p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO_PATH.read_text(), p4info_pb2.P4Info())


def fake_switch(raw: dict | None = None):
    raw = raw or {"name": "s1", "ports": {"1": "a", "2": "b", "4": "d"}, "pipeline": "ina"}
    cfg = types.SimpleNamespace(pipeline="ina", raw=raw)
    return types.SimpleNamespace(name="s1", config=cfg, pipeline=InaPipeline(raw))


# --- server: P4Info against the program ----------------------------------------------

def test_checked_in_p4info_matches_the_soft_switch_program():
    assert srv.check_p4info(p4info(), InaPipeline()) == []


@pytest.mark.parametrize("edit, expect", [
    (lambda i: setattr(i.tables[1].preamble, "name", "Ingress.jobs"),
     "table 'Ingress.jobs' is not in the program"),
    (lambda i: setattr(i.tables[0].match_fields[0], "bitwidth", 32),
     "field 'dst_addr' is bit<32>, the program's is bit<48>"),
    (lambda i: setattr(i.actions[0].params[0], "bitwidth", 16), "action 'Forward.set_egress'"),
    (lambda i: i.counters.pop(), "program counter 'EgressDropSimulator.dropped' is missing"),
    (lambda i: setattr(i.registers[0], "size", 4096),
     "register 'Aggregator.worker_bitmap': size 4096 != program's 8192"),
    (lambda i: setattr(i.tables[1], "const_default_action_id", 0),
     "table 'Ingress.job_table': default action is const in the program"),
])
def test_p4info_mismatch_is_named(edit, expect):
    info = p4info()
    edit(info)
    problems = srv.check_p4info(info, InaPipeline())
    assert any(expect in p for p in problems), problems
    with pytest.raises(srv.P4RTError) as e:
        srv.ProgramBinding(info, InaPipeline(), "ina")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not match the soft switch's program 'ina'" in e.value.message


def test_bytestrings():
    assert srv.encode_value(0) == b"\x00" and srv.encode_value(0x1FF) == b"\x01\xff"
    assert srv.decode_value(b"\x01", 9, "p") == 1
    assert srv.decode_value(b"\x00\x01", 9, "p") == 1          # padded form accepted
    for bad, why in ((b"", "empty"), (b"\x00\x00\x01", "at most 2"), (b"\x02\x00", "bit<9>")):
        with pytest.raises(srv.P4RTError, match=why):
            srv.decode_value(bad, 9, "p")


def test_bind_address_and_device_id():
    assert srv.check_bind_address("127.0.0.1:50001") == ("127.0.0.1", 50001)
    assert srv.check_bind_address("[::1]:9559") == ("::1", 9559)
    assert srv.check_bind_address("localhost:1") == ("localhost", 1)
    assert srv.check_bind_address("192.168.0.5:9559", mgmt_addr="192.168.0.5")[1] == 9559
    for bad in ("0.0.0.0:9559", "[::]:9559", "10.0.0.1:9559"):
        with pytest.raises(ValueError, match="loopback"):
            srv.check_bind_address(bad)
    with pytest.raises(ValueError, match="HOST:PORT"):
        srv.check_bind_address("127.0.0.1")
    assert srv.device_id_for("s3") == 3 and srv.device_id_for("spine") == 1
    assert srv.device_id_for("s3", {"device_id": 9}) == 9


# --- server: arbitration -------------------------------------------------------------------

def _drain(conn) -> list[pb.StreamMessageResponse]:
    out = []
    while not conn.out.empty():
        out.append(conn.out.get()[1])
    return out


def test_arbitration_primary_backup_promotion():
    arb = srv.Arbiter(device_id=1)
    a, b, c = srv._Conn("a"), srv._Conn("b"), srv._Conn("c")
    for x in (a, b, c):
        arb.open(x)
    arb.arbitrate(a, 5)
    assert [m.arbitration.status.code for m in _drain(a)] == [code_pb2.OK]
    arb.arbitrate(b, 3)                                   # lower: backup, told who is primary
    [m] = _drain(b)
    assert m.arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert m.arbitration.election_id.low == 5 and not _drain(a)
    with pytest.raises(srv.P4RTError) as e:
        arb.arbitrate(c, 5)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    arb.arbitrate(c, (1 << 64) + 1)                       # higher: everyone hears of it
    assert [m.arbitration.status.code for m in _drain(c)] == [code_pb2.OK]
    assert [m.arbitration.status.code for m in _drain(a)] == [code_pb2.ALREADY_EXISTS]
    assert [m.arbitration.election_id.high for m in _drain(b)] == [1]
    arb.leave(c)                                          # primary leaves: a is promoted
    assert [m.arbitration.status.code for m in _drain(a)] == [code_pb2.OK]
    assert [m.arbitration.status.code for m in _drain(b)] == [code_pb2.ALREADY_EXISTS]
    arb.leave(b)                                          # a backup leaves: nobody is told
    assert not _drain(a) and arb.primary_election_id() == 5


# --- server handlers, called directly, driven by the controller's messages ---------------

class DirectController(ctl.SwitchController):
    """SwitchController whose Write/Read go straight to a servicer (no gRPC)."""

    def __init__(self, servicer, tmp: Path):
        super().__init__("s1", "unused:0", 1, P4INFO_PATH, b"ina", tmp / "s1-requests.txt")
        self.servicer = servicer
        self._fresh_slots = True
        self.client = object()

    def write(self, updates, what="Write"):
        req = pb.WriteRequest(device_id=1, updates=updates)
        req.election_id.low = 1
        try:
            self.servicer._write(req)
        except srv._WriteErrors as e:
            errs = [(i, code_pb2.Code.Name(x.canonical_code), x.message)
                    for i, x in enumerate(_unpack(e.status)) if x.canonical_code]
            raise ctl.WriteError(self.name, "UNKNOWN", errs) from None

    def read(self, entities, what="Read"):
        return [e for r in self.servicer._read_chunks(self.servicer._binding(), entities)
                for e in r.entities]


def _unpack(status):
    out = []
    for a in status.details:
        err = pb.Error()
        a.Unpack(err)
        out.append(err)
    return out


@pytest.fixture
def direct(tmp_path):
    sw = fake_switch()
    s = srv.SoftP4RuntimeServicer(srv.SoftTarget(sw), device_id=1)
    conn = srv._Conn("test")
    s.arbiter.open(conn)
    s.arbiter.arbitrate(conn, 1)
    c = DirectController(s, tmp_path)
    yield sw, s, c
    c.log.close()


def test_install_job_through_p4runtime_mirrors_add_job(direct):
    sw, _, c = direct
    c.install_job(JOB)
    reference = InaPipeline({"ports": {"1": "a", "2": "b", "4": "d"}})
    reference.add_job(JOB)
    for name in ("Ingress.job_table", "Ingress.worker_port", "Egress.replica_rewrite"):
        assert sw.pipeline.tables[name].entries() == reference.tables[name].entries()
    # membership bound to the plan's ports
    assert sorted((e["match"]["worker_id"], e["params"]["port"])
                  for e in sw.pipeline.tables["Ingress.worker_port"].entries()) == [(0, 1), (3, 4)]
    assert sw.pipeline.multicast_groups.read() == reference.multicast_groups.read()
    with pytest.raises(ctl.ControllerError, match="overlap job 5"):
        c.install_job({**JOB, "job_id": 6, "slot_base": 10})
    c.remove_job(5)
    assert sw.pipeline.tables["Ingress.job_table"].entries() == []
    assert sw.pipeline.multicast_groups.read() == {}
    assert sw.pipeline.tables["Egress.replica_rewrite"].entries() == []
    assert sw.pipeline.tables["Ingress.worker_port"].entries() == []


def test_job_slot_reset_is_register_writes(direct):
    sw, _, c = direct
    sw.pipeline.aggregator.count[8:12] = 3                # leftovers from an earlier job
    c.install_job(JOB)                                    # fresh commit: no reset needed
    assert sw.pipeline.aggregator.count[8, 0] == 3
    c.remove_job(5)
    c.install_job(JOB)                                    # slots used since: reset
    assert not sw.pipeline.aggregator.count[8:12].any()
    assert sw.pipeline.aggregator.count[12, 0] == 0


def test_write_errors_are_per_update(direct):
    sw, s, c = direct
    good = c.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:01"},
                         "Forward.set_egress", {"port": 2})
    dflt = c.table_entry("Ingress.job_table", action="Ingress.unknown_job", default=True)
    in_entry = c.table_entry("Ingress.job_table", {"job_id": 1}, "Ingress.unknown_job")
    with pytest.raises(ctl.WriteError) as e:
        c.write([c.update(pb.Update.INSERT, good), c.update(pb.Update.INSERT, dflt),
                 c.update(pb.Update.INSERT, in_entry),
                 c.update(pb.Update.INSERT, c.register_entry("Aggregator.slot_seq", 1, 1))])
    assert [(i, code) for i, code, _ in e.value.errors] == [
        (1, "INVALID_ARGUMENT"), (2, "INVALID_ARGUMENT"), (3, "INVALID_ARGUMENT")]
    assert "default-only" in e.value.errors[1][2]
    assert sw.pipeline.forward.forwarder.forward == {b"\0\0\0\0\0\x01": 2}
    # the keyless table's default action is what programs it
    c.set_switch_address("02:00:00:00:00:aa", "10.0.0.250")
    assert sw.pipeline.egress.switch_address.default[1] == {"mac": 0x0200000000AA, "ip": 0x0A0000FA}
    # backups and strangers are refused before anything is looked at
    req = pb.WriteRequest(device_id=1, updates=[c.update(pb.Update.INSERT, good)])
    req.election_id.low = 7
    with pytest.raises(srv.P4RTError) as err:
        s._write(req)
    assert err.value.code == grpc.StatusCode.PERMISSION_DENIED
    req.device_id = 2
    with pytest.raises(srv.P4RTError) as err:
        s._write(req)
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_unknown_ids_are_invalid_argument_as_in_pi(direct):
    """PI/BMv2 answer an id that is not in the P4Info with INVALID_ARGUMENT
    ("Invalid P4 id"), for tables, counters and registers, in Write and Read."""
    _, s, c = direct
    te = c.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:01"},
                       "Forward.set_egress", {"port": 2})
    te.table_id = 0x02FFFFFF
    ce = pb.CounterEntry(counter_id=0x12FFFFFF)
    ce.index.index = 0
    re_ = c.register_entry("Aggregator.slot_seq", 1, 1)
    re_.register_id = 0x16FFFFFF
    with pytest.raises(ctl.WriteError) as e:
        c.write([c.update(pb.Update.INSERT, te), c.update(pb.Update.MODIFY, ce),
                 c.update(pb.Update.MODIFY, re_)])
    assert [(i, code) for i, code, _ in e.value.errors] == [
        (0, "INVALID_ARGUMENT"), (1, "INVALID_ARGUMENT"), (2, "INVALID_ARGUMENT")]
    assert all("Invalid P4 id" in m for _, _, m in e.value.errors), e.value.errors
    for ent in (te, ce, pb.RegisterEntry(register_id=0x16FFFFFF)):
        with pytest.raises(srv.P4RTError) as err:
            c.read([ctl._entity(ent)])
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "Invalid P4 id" in err.value.message


@pytest.mark.parametrize("port", [7, 3, 512, 2**32 - 1])
def test_multicast_replica_on_a_port_that_does_not_exist_is_refused(direct, port):
    sw, _, c = direct                                   # the switch has ports 1, 2 and 4
    with pytest.raises(ctl.WriteError) as e:
        c.write([c.update(pb.Update.INSERT, c.multicast_group(9, [(1, 1), (port, 2)]))])
    assert [(i, code) for i, code, _ in e.value.errors] == [(0, "INVALID_ARGUMENT")]
    assert f"replica port {port} does not exist" in e.value.errors[0][2]
    assert sw.pipeline.multicast_groups.read() == {}
    c.write([c.update(pb.Update.INSERT, c.multicast_group(9, [(1, 1), (4, 2)]))])
    with pytest.raises(ctl.WriteError):
        c.write([c.update(pb.Update.MODIFY, c.multicast_group(9, [(port, 1)]))])
    assert sw.pipeline.multicast_groups.read() == {9: [(1, 1), (4, 2)]}


def test_failed_write_details_fit_the_grpc_trailer():
    """One p4.v1.Error per update, within DETAILS_BUDGET bytes: at the
    controller's batch size every update keeps its code (messages are left out
    once they no longer fit); a batch too large for that gets a status message
    naming the failed updates instead of a trailer gRPC would refuse."""
    long = "x" * 200
    errors = [None] * ctl.WRITE_CHUNK
    errors[3] = (code_pb2.ALREADY_EXISTS, "first " + long)
    w = srv._WriteErrors(errors)
    assert len(w.status.details) == ctl.WRITE_CHUNK and w.status.ByteSize() <= srv.DETAILS_BUDGET
    assert [e.message for e in _unpack(w.status)][3] == "first " + long
    every = srv._WriteErrors([(code_pb2.NOT_FOUND, f"update {i}: " + long) for i in range(ctl.WRITE_CHUNK)])
    got = _unpack(every.status)
    assert len(got) == ctl.WRITE_CHUNK and all(e.canonical_code == code_pb2.NOT_FOUND for e in got)
    assert every.status.ByteSize() <= srv.DETAILS_BUDGET
    assert got[0].message.startswith("update 0: ") and got[-1].message == ""
    assert "messages of" in every.summary and "left out" in every.summary
    big = [None] * 2048
    big[1500] = (code_pb2.INVALID_ARGUMENT, "bad port")
    huge = srv._WriteErrors(big)
    assert len(huge.status.details) == 0 and huge.status.ByteSize() <= srv.DETAILS_BUDGET
    assert "update 1500: INVALID_ARGUMENT: bad port" in huge.summary
    assert "failed updates: 1500 INVALID_ARGUMENT" in huge.summary and "at most" in huge.summary


def test_const_default_action_cannot_be_modified(direct):
    _, _, c = direct
    dflt = c.table_entry("Ingress.job_table", action="Ingress.unknown_job", default=True)
    with pytest.raises(ctl.WriteError) as e:
        c.write([c.update(pb.Update.MODIFY, dflt)])
    assert e.value.errors[0][1] == "PERMISSION_DENIED"
    [read] = c.read([ctl._entity(c.table_entry("Ingress.job_table", default=True))])
    assert read.table_entry.is_default_action and read.table_entry.is_const
    [read] = c.read([ctl._entity(c.table_entry("Egress.switch_address", default=True))])
    assert read.table_entry.is_default_action and not read.table_entry.is_const


def test_reads_counters_registers_and_wildcards(direct):
    sw, _, c = direct
    c.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1},
                          {"dst_mac": "00:00:00:00:00:02", "port": 2}])
    sw.pipeline.ina_packets.count(5, 3)
    sw.pipeline.drop_simulator.dropped.count(2)
    counters = c.read_counters()
    assert counters["Ingress.ina_packets"] == {5: (3, 0)}
    assert counters["DropSimulator.dropped"] == {2: (1, 0)}
    assert len(c.read_counters(nonzero_only=False)["Ingress.malformed"]) == 1
    everything = c.read([ctl._entity(pb.TableEntry())])          # table_id 0: all tables
    assert len(everything) == 2
    [dflt] = c.read([ctl._entity(c.table_entry("Forward.l2_forward", default=True))])
    assert dflt.table_entry.is_default_action
    assert c.context.get_name_from_id(dflt.table_entry.action.action.action_id) == "Forward.flood"
    c.set_drop_probability(4, 1.0)
    assert c.read_register("DropSimulator.drop_probability", 4) == {4: 0xFFFFFFFF}
    assert len(c.read_register("DropSimulator.drop_probability")) == 512
    with pytest.raises(srv.P4RTError, match="index 512 not in 0..511"):
        e = ctl._entity(pb.RegisterEntry(register_id=0x16000006))
        e.register_entry.index.index = 512
        c.read([e])


def test_drop_probability_in_both_directions(direct):
    """The same controller call arms either DropSimulator instance: results
    leaving port 3 (egress) are a separate register from contributions arriving."""
    sw, _, c = direct
    c.set_drop_probability(3, 0.25, "egress")
    assert c.read_register("EgressDropSimulator.drop_probability", 3) == {3: 1 << 30}
    assert c.read_register("DropSimulator.drop_probability", 3) == {3: 0}
    assert sw.pipeline.egress_drop_simulator.probability(3) == 0.25
    assert sw.pipeline.drop_simulator.probability(3) == 0.0
    with pytest.raises(ctl.ControllerError, match="direction 'both'"):
        c.set_drop_probability(3, 0.25, "both")


def test_pipeline_config_actions(direct, tmp_path):
    sw, s, _ = direct
    cfg = pb.ForwardingPipelineConfig(p4info=p4info(), p4_device_config=b"ina")
    cfg.cookie.cookie = 42

    def set_config(action, config=cfg):
        req = pb.SetForwardingPipelineConfigRequest(device_id=1, action=action)
        req.election_id.low = 1
        if config is not None:
            req.config.CopyFrom(config)
        return s._set_config(req)

    A = pb.SetForwardingPipelineConfigRequest
    before = sw.pipeline
    set_config(A.VERIFY)
    assert sw.pipeline is before
    set_config(A.RECONCILE_AND_COMMIT)
    assert sw.pipeline is before                          # state kept
    set_config(A.VERIFY_AND_COMMIT)
    assert sw.pipeline is not before                      # a fresh program instance
    with pytest.raises(srv.P4RTError) as e:
        set_config(A.COMMIT, None)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    set_config(A.VERIFY_AND_SAVE)
    set_config(A.COMMIT, None)
    rep = s._get_config(pb.GetForwardingPipelineConfigRequest(device_id=1))
    assert rep.config.cookie.cookie == 42 and rep.config.p4_device_config == b"ina"
    bad = pb.ForwardingPipelineConfig()
    bad.CopyFrom(cfg)
    bad.p4_device_config = b"switch.json"
    with pytest.raises(srv.P4RTError, match="runs program 'ina'"):
        set_config(A.VERIFY_AND_COMMIT, bad)


# --- controller: messages, shell context, log format ---------------------------------------

@pytest.fixture
def controller(tmp_path):
    c = ctl.SwitchController("s2", "127.0.0.1:1", 2, P4INFO_PATH, b"ina", tmp_path / "s2.txt")
    yield c
    c.close()


def test_messages_are_built_from_p4info_names(controller):
    import p4runtime_sh.shell as sh
    before = sh.context
    te = controller.table_entry("Egress.replica_rewrite", {"egress_rid": 0x80A3},
                                "Egress.rewrite_dst", {"dst_mac": "00:00:00:00:00:04",
                                                       "dst_ip": "10.0.0.4", "dst_port": 23041})
    assert sh.context is before                           # the shell's global is restored
    assert te.table_id == 0x02000003
    assert te.match[0].exact.value == b"\x80\xa3"         # canonical bytestrings
    assert [p.value for p in te.action.action.params] == [b"\x04", b"\x0a\x00\x00\x04", b"\x5a\x01"]
    mg = controller.multicast_group(0x105, [(1, 0x80A0), (4, 0x80A3)])
    assert [(r.egress_port, r.instance) for r in mg.multicast_group_entry.replicas] == \
        [(1, 0x80A0), (4, 0x80A3)]
    ce = controller.counter_entry("Ingress.ina_results", 5)
    assert (ce.counter_id, ce.index.index) == (0x12000002, 5)
    re_ = controller.register_entry("DropSimulator.drop_probability", 3, 0xFFFFFFFF)
    assert (re_.register_id, re_.data.bitstring) == (0x16000006, b"\xff" * 4)
    with pytest.raises(ctl.ControllerError, match="Unknown action"):
        controller.table_entry("Forward.l2_forward", {"dst_addr": 1}, "Forward.drop", {})
    with pytest.raises(ctl.ControllerError, match="not in 0..511"):
        controller.register_entry("DropSimulator.drop_probability", 512, 0)
    with pytest.raises(ctl.ControllerError, match="not connected"):
        controller.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1}])


@pytest.mark.parametrize("job, why", [
    ({**JOB, "workers": []}, "no workers"),
    ({**JOB, "workers": [WORKERS[0], WORKERS[0]]}, "must be distinct"),
    ({**JOB, "mcast_group": 1}, "reserved"),
    ({"job_id": 1}, "expected"),
])
def test_job_validation(job, why):
    with pytest.raises(ctl.ControllerError, match=why):
        ctl._job_fields(job)


def test_log_format(tmp_path, controller):
    te = controller.table_entry("Forward.l2_forward", {"dst_addr": "00:00:00:00:00:01"},
                                "Forward.set_egress", {"port": 1})
    text = p4runtime_log.format_message(te, controller.log.names)
    assert "table_id: 33554433  # Forward.l2_forward" in text
    assert "action_id: 16777217  # Forward.set_egress" in text
    assert text_format.Parse(text, pb.TableEntry()) == te    # the annotations are comments
    req = pb.SetForwardingPipelineConfigRequest(device_id=2)
    req.config.p4info.CopyFrom(p4info())
    req.config.p4_device_config = b"x" * 1000
    shown, notes = p4runtime_log.loggable(req)
    assert not shown.config.HasField("p4info") and req.config.HasField("p4info")
    assert notes[0].startswith("p4info: 5 tables, 9 actions, 11 counters, 7 registers")
    assert notes[1].startswith("p4_device_config: 1000 bytes")
    w = pb.WriteRequest(device_id=2, updates=[pb.Update(type=pb.Update.MODIFY)] * 100)
    w.election_id.low = 1
    shown, notes = p4runtime_log.loggable(w)
    assert len(shown.updates) == p4runtime_log.LOG_MAX_ITEMS and shown.election_id.low == 1
    assert notes == [f"updates: 100 in total, the first {p4runtime_log.LOG_MAX_ITEMS} shown"]

    log = p4runtime_log.RequestLog(tmp_path / "logs" / "s1-p4runtime-requests.txt", "s1")
    token = log.request("Write", w)
    log.response("Write", token, status="UNKNOWN: bad", notes=["update 3: NOT_FOUND: x"])
    log.close()
    lines = (tmp_path / "logs" / "s1-p4runtime-requests.txt").read_text().splitlines()
    assert lines[0].startswith("==== ") and lines[0].endswith(" s1 -> Write #1")
    assert lines[1] == "# updates: 100 in total, the first 32 shown"
    assert any(x.startswith("---- ") and " s1 <- Write #1 UNKNOWN: bad (" in x for x in lines)
    assert "# update 3: NOT_FOUND: x" in lines


def test_write_errors_parse_status_details():
    status = srv._WriteErrors([None, (code_pb2.NOT_FOUND, "gone")]).status

    class Err(grpc.RpcError):
        def trailing_metadata(self):
            return (("grpc-status-details-bin", status.SerializeToString()),)

    assert p4runtime_errors.write_errors(Err()) == [(1, "NOT_FOUND", "gone")]


# --- Tofino dry run ------------------------------------------------------------------------

PORTS_YAML = """\
ports:
  1/0: {speed: 100G, fec: rs, autoneg: default, port: 1, dev_port: 132}
  2/0: {speed: 25g, fec: none, autoneg: false, port: 2}
"""


def test_tofino_dry_run(tmp_path, capsys):
    ports = tmp_path / "ports.yaml"
    ports.write_text(PORTS_YAML)
    tb = tofino.TofinoBackend(ports, tmp_path / "build", env={"SDE": "/opt/sde",
                                                              "SDE_INSTALL": "/opt/sde/install"})
    plan = tb.run(dry_run=True)
    out = tmp_path / "build" / "ina_tna"
    assert plan.compile == ["/opt/sde/install/bin/bf-p4c", "--target", "tofino", "--arch", "tna",
                            "--std", "p4-16", "-o", str(out), "--p4runtime-files",
                            str(out / "p4info.txtpb"), "--p4runtime-force-std-externs",
                            str(REPO / "p4" / "tofino" / "ina_tna.p4")]
    assert plan.switchd == ["/opt/sde/run_switchd.sh", "-p", "ina_tna"]
    assert plan.bfshell == ["/opt/sde/run_bfshell.sh", "-f", str(tmp_path / "build" / "ports.bfshell")]
    assert plan.bfshell_script.splitlines() == [
        "ucli", "pm",
        "port-add 1/0 100G RS", "an-set 1/0 0", "port-enb 1/0",
        "port-add 2/0 25G NONE", "an-set 2/0 2", "port-enb 2/0",
        "show", "exit", "exit"]
    assert plan.port_map == {1: 132, 2: None}
    assert plan.env == {"SDE": "/opt/sde", "SDE_INSTALL": "/opt/sde/install"}
    assert any("dev_port unknown for 2/0" in n for n in plan.notes)
    assert plan.commands()[0] == plan.compile and plan.commands()[-1] == plan.bfshell
    text = tb.describe()
    assert "run_switchd.sh -p ina_tna" in capsys.readouterr().out and "port-add 1/0 100G RS" in text
    # without $SDE the plan still describes itself, with placeholders
    assert tofino.TofinoBackend(ports, tmp_path / "b", env={}).plan().switchd[0] == "$SDE/run_switchd.sh"


def test_tofino_device_config_bytes(tmp_path):
    packed = tofino.pack_tofino_config("myprog", b"\xab", b"{}")
    assert packed == b"\x06\x00\x00\x00myprog" b"\x01\x00\x00\x00\xab" b"\x02\x00\x00\x00{}"
    assert tofino.unpack_tofino_config(packed) == ("myprog", b"\xab", b"{}")
    with pytest.raises(tofino.TofinoError):
        tofino.unpack_tofino_config(packed[:-1])
    ports = tmp_path / "ports.yaml"
    ports.write_text(PORTS_YAML)
    tb = tofino.TofinoBackend(ports, tmp_path / "build", env={"SDE": "/sde"})
    with pytest.raises(tofino.TofinoError, match="compile first"):
        tb.device_config()
    pipe = tmp_path / "build" / "ina_tna" / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "tofino.bin").write_bytes(b"\x01\x02\x03")
    (pipe / "context.json").write_bytes(b'{"a": 1}')
    cfg = tb.device_config()
    assert cfg[:4] == struct.pack("<i", 7) and cfg[4:11] == b"ina_tna"
    assert tofino.unpack_tofino_config(cfg) == ("ina_tna", b"\x01\x02\x03", b'{"a": 1}')


@pytest.mark.parametrize("doc, why", [
    ({"1/0": {"speed": "7G", "port": 1}}, "speed"),
    ({"1/0": {"speed": "100G", "fec": "xx", "port": 1}}, "fec"),
    ({"1/0": {"speed": "100G", "autoneg": "maybe", "port": 1}}, "autoneg"),
    ({"1/0": {"speed": "100G"}}, "port"),
    ({"x": {"speed": "100G", "port": 1}}, "CAGE/LANE"),
    ({"1/0": {"speed": "100G", "port": 1}, "2/0": {"speed": "100G", "port": 1}}, "used twice"),
    ({"1/0": {"speed": "100G", "port": 1, "mtu": 9000}}, "unknown keys"),
])
def test_tofino_ports_file_errors(doc, why):
    with pytest.raises(tofino.TofinoError, match=why):
        tofino.parse_ports(doc, "ports.yaml")


# --- BMv2 argv -------------------------------------------------------------------------------

def test_bmv2_argv(tmp_path):
    b = bmv2.compile_argv("p4/ina.p4", tmp_path)
    assert b.argv == ["p4c-bm2-ss", "--p4v", "16", "--p4runtime-files",
                      str(tmp_path / "ina.p4info.txtpb"), "-o", str(tmp_path / "ina.json"), "p4/ina.p4"]
    assert bmv2.switch_argv(2, {2: "s2-eth2", 1: "s2-eth1"}, "127.0.0.1:50002", "/r/s2.log",
                            thrift_port=9092, pcap_dir="/r/pcaps", cpu_port=255) == [
        "simple_switch_grpc", "--no-p4", "--device-id", "2", "-i", "1@s2-eth1", "-i", "2@s2-eth2",
        "--thrift-port", "9092", "--pcap=/r/pcaps", "--log-file", "/r/s2.log", "--log-flush",
        "-L", "info", "--", "--grpc-server-addr", "127.0.0.1:50002", "--cpu-port", "255"]


# bmv2_available(): tests/unit/test_bmv2_tools.py (fake tools in temporary prefixes)