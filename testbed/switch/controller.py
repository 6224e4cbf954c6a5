"""One P4Runtime controller for every switch backend (soft, BMv2, Tofino).

    c = SwitchController("s1", "127.0.0.1:50001", 1, "p4/ina.p4info.txtpb", b"ina",
                         run_dir / "logs/p0/s1-p4runtime-requests.txt").connect()
    c.install_forwarding([{"dst_mac": "00:00:00:00:00:01", "port": 1}, ...])
    c.install_job(job); c.set_drop_probability(port, 0.01)      # + "egress": results out
    c.read_counters(); c.close()
    # BMv2: registers over its Thrift runtime (PI has no register RPCs)
    c.use_registers(ThriftRegisters("s1", "127.0.0.1:9090", bmv2.tools()))

Built on p4runtime-shell: `P4RuntimeClient` does the stream, the arbitration
and the RPCs; the shell's entity helpers (TableEntry, MulticastGroupEntry,
CounterEntry) build the messages from P4Info names, each controller with its own
client and P4Info context (testbed/switch/p4runtime_shell.py says how several
switches share the shell's globals). Registers have no helper in p4runtime-shell
0.0.6: RegisterEntry is built here. Writes go through the client's stub, not
`client.write` (see `write`). Always close() (or use `with`): the client's
stream thread is not a daemon and would keep the process alive.

Every request and response is appended, in protobuf text format with P4Info
names next to ids, to `log_path` (one file per switch in the run folder;
testbed/switch/p4runtime_log.py). Errors: testbed/switch/p4runtime_errors.py.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Iterable

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4runtime_sh import shell as sh
from p4runtime_sh.context import Context

from testbed import wire
from testbed.switch.ina.aggregator import Aggregator
from testbed.switch.ina.drop_simulator import DropSimulator, EgressDropSimulator
from testbed.switch.ina.egress import REWRITE_DST, SET_SWITCH_ADDRESS, Egress, replica_id
from testbed.switch.ina.forward import SET_EGRESS, Forward
from testbed.switch.ina.job_table import FLOOD_MCAST_GRP, SET_JOB, JobTable
from testbed.switch.ina.worker_port import SET_WORKER_PORT, WorkerPortTable
from testbed.switch.p4runtime_errors import ControllerError, WriteError, rpc_status, write_errors
from testbed.switch.p4runtime_log import LOG_MAX_ITEMS, RequestLog, copy_message, summarize_p4info
from testbed.switch.p4runtime_shell import ShellClient, shell_context, shell_value

log = logging.getLogger(__name__)

# Aggregator state a job's slots start from. agg_values is not reset: a slot
# with worker_count 0 takes the first contribution's values as they are.
SLOT_RESET_REGISTERS = (Aggregator.COUNT, Aggregator.BITMAP, Aggregator.SEQ, Aggregator.EXPONENT)
# Updates per WriteRequest. A failed Write answers one p4.v1.Error per update in
# a gRPC trailer (~35 bytes each even when OK); gRPC clients refuse trailers over
# 8 KiB (soft) / 16 KiB (hard), and then report RESOURCE_EXHAUSTED with no word of
# which update failed. 128 updates keep that list under 5 KiB, room for messages.
WRITE_CHUNK = 128


def _eid_tuple(election_id) -> tuple[int, int]:
    if isinstance(election_id, int):
        return (election_id >> 64, election_id & ((1 << 64) - 1))
    hi, lo = election_id
    return int(hi), int(lo)


# --- the controller -----------------------------------------------------------------------

class SwitchController:
    """The control plane of one switch, over P4Runtime."""

    def __init__(self, name: str, grpc_addr: str, device_id: int, p4info_path: str | Path,
                 device_config: bytes, log_path: str | Path, election_id=(0, 1),
                 connect_timeout: float = 15.0, arbitration_timeout: float = 5.0):
        self.name = name
        self.grpc_addr = grpc_addr
        self.device_id = int(device_id)
        self.p4info_path = Path(p4info_path)
        self.device_config = bytes(device_config)
        self.election_id = _eid_tuple(election_id)
        self.connect_timeout = connect_timeout
        self.arbitration_timeout = arbitration_timeout
        try:
            self.p4info = text_format.Parse(self.p4info_path.read_text(), p4info_pb2.P4Info(),
                                            allow_unknown_field=True)
        except (OSError, text_format.ParseError) as e:
            raise ControllerError(f"{name}: cannot load P4Info {self.p4info_path}: {e}") from None
        self.log = RequestLog(log_path, name)
        self.log_path = self.log.path
        self.context = Context()
        self._set_p4info(self.p4info)
        self.client: ShellClient | None = None
        self.registers = None     # None: registers over P4Runtime; else use_registers()
        self.primary = False
        self._fresh_slots: bool = False            # every slot zero since our commit
        self._used_slots: list[tuple[int, int]] = []   # (base, count) of jobs since then

    def _set_p4info(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info
        self.context.set_p4info(p4info)
        self.log.names = {o.preamble.id: o.preamble.name for kind in
                          ("tables", "actions", "counters", "registers")
                          for o in getattr(p4info, kind)}

    def __repr__(self) -> str:
        return f"SwitchController({self.name} at {self.grpc_addr}, device {self.device_id})"

    def __enter__(self) -> "SwitchController":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- session ---------------------------------------------------------------------------
    def connect(self, push_pipeline: bool = True, require_primary: bool = True) -> "SwitchController":
        """Arbitration (stream open, election), then SetForwardingPipelineConfig
        (VERIFY_AND_COMMIT: the switch starts from a clean state) and a
        GetForwardingPipelineConfig that must return the P4Info just pushed."""
        self._wait_reachable()
        try:
            self.client = ShellClient(self.device_id, self.grpc_addr, self.election_id,
                                  arbitration_timeout=self.arbitration_timeout,
                                  request_log=self.log)
        except ControllerError as e:
            raise ControllerError(f"{self.name} ({self.grpc_addr}): {e}") from None
        self._update_primary(self.client.arbitration)
        if require_primary and not self.primary:
            arb = self.client.arbitration.arbitration
            self.close()
            raise ControllerError(
                f"{self.name}: not primary: the switch answered {code_pb2.Code.Name(arb.status.code)} "
                f"({arb.status.message}); primary election id is "
                f"{arb.election_id.high}:{arb.election_id.low}, ours {self.election_id[0]}:"
                f"{self.election_id[1]}. Use a higher election_id or stop the other controller.")
        if push_pipeline:
            self.set_pipeline()
        else:
            self._set_p4info(self.get_p4info())   # a backup programs nothing; read in its ids
        return self

    def _wait_reachable(self) -> None:
        ch = grpc.insecure_channel(self.grpc_addr)
        try:
            grpc.channel_ready_future(ch).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            raise ControllerError(
                f"{self.name}: no P4Runtime server at {self.grpc_addr} after "
                f"{self.connect_timeout:.0f}s: is the switch running (check its log) and is "
                "this its p4runtime address?") from None
        finally:
            ch.close()

    def _update_primary(self, rep: pb.StreamMessageResponse | None) -> None:
        if rep is not None:
            self.primary = rep.arbitration.status.code == code_pb2.OK

    def poll_arbitration(self, timeout: float = 0.0) -> bool:
        """Take arbitration updates the switch sent since (e.g. this backup was
        promoted when the primary left); returns whether this client is primary."""
        deadline = time.monotonic() + timeout
        while self.client is not None:
            left = deadline - time.monotonic()
            rep = self.client.get_stream_packet("arbitration", timeout=max(left, 0.001))
            if rep is None:
                if left <= 0:
                    break
                continue
            token = self.log.request("StreamChannel arbitration update (from switch)")
            self.log.response("StreamChannel arbitration update", token, rep)
            self._update_primary(rep)
            if self.primary:
                break
        return self.primary

    def _require_client(self) -> ShellClient:
        if self.client is None:
            raise ControllerError(f"{self.name}: not connected (call connect() first)")
        return self.client

    def _election(self, msg) -> None:
        msg.device_id = self.device_id
        msg.election_id.high, msg.election_id.low = self.election_id

    def set_pipeline(self, action=pb.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT) -> None:
        client = self._require_client()
        req = pb.SetForwardingPipelineConfigRequest(action=action)
        self._election(req)
        req.config.p4info.CopyFrom(self.p4info)
        req.config.p4_device_config = self.device_config
        token = self.log.request("SetForwardingPipelineConfig", req)
        try:
            client.stub.SetForwardingPipelineConfig(req)
        except grpc.RpcError as e:
            self.log.response("SetForwardingPipelineConfig", token, status=rpc_status(e))
            raise ControllerError(f"{self.name}: SetForwardingPipelineConfig refused: "
                                  f"{e.code().name}: {e.details()}") from None
        self.log.response("SetForwardingPipelineConfig", token)
        if action == pb.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT:
            self._fresh_slots, self._used_slots = True, []   # a commit clears all state
        got = self.get_p4info()
        if got != self.p4info:
            raise ControllerError(f"{self.name}: the switch reports a different P4Info than the "
                                  f"one just pushed ({summarize_p4info(got)})")

    def get_p4info(self) -> p4info_pb2.P4Info:
        client = self._require_client()
        req = pb.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=pb.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
        token = self.log.request("GetForwardingPipelineConfig", req)
        try:
            rep = client.stub.GetForwardingPipelineConfig(req)
        except grpc.RpcError as e:
            self.log.response("GetForwardingPipelineConfig", token, status=rpc_status(e))
            raise ControllerError(f"{self.name}: GetForwardingPipelineConfig failed: "
                                  f"{e.code().name}: {e.details()}") from None
        self.log.response("GetForwardingPipelineConfig", token, rep)
        return rep.config.p4info

    def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            token = self.log.request("StreamChannel close")
            try:
                client.tear_down()
            finally:
                self.log.response("StreamChannel close", token)
        self.primary = False
        self.log.close()

    # -- generic Write / Read ----------------------------------------------------------------------
    def write(self, updates: list[pb.Update], what: str = "Write") -> None:
        """Send updates (in chunks of WRITE_CHUNK); raise WriteError on any failure."""
        client = self._require_client()
        for start in range(0, len(updates), WRITE_CHUNK):
            req = pb.WriteRequest()
            self._election(req)
            req.updates.extend(updates[start:start + WRITE_CHUNK])
            token = self.log.request(what, req)
            try:
                # stub.Write, not client.write: 0.0.6's P4RuntimeErrorIterator loops forever
                # on a batch whose per-update errors include OK entries (what PI sends).
                client.stub.Write(req)
            except grpc.RpcError as e:
                code, detail = e.code().name, e.details()
                errors = [(start + i, c, m) for i, c, m in write_errors(e)]
                self.log.response(what, token, status=f"{code}: {detail}", notes=[
                    f"update {i}: {c}: {m}" for i, c, m in errors])
                raise WriteError(self.name, code, errors, detail) from None
            self.log.response(what, token)

    def read(self, entities: list[pb.Entity], what: str = "Read") -> list[pb.Entity]:
        client = self._require_client()
        req = pb.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        token = self.log.request(what, req)
        got: list[pb.Entity] = []
        try:
            for rep in client.stub.Read(req):
                got.extend(rep.entities)
        except grpc.RpcError as e:
            self.log.response(what, token, status=rpc_status(e))
            raise ControllerError(f"{self.name}: {what} failed: {e.code().name}: {e.details()}") from None
        shown = pb.ReadResponse()
        shown.entities.extend(got[:LOG_MAX_ITEMS])
        self.log.response(what, token, shown, notes=[f"entities: {len(got)} in total, the first "
                                                     f"{LOG_MAX_ITEMS} shown"]
                          if len(got) > LOG_MAX_ITEMS else ())
        return got

    # -- message building (p4runtime-shell helpers, by P4Info name) ------------------------------------
    def table_entry(self, table: str, match: dict | None = None, action: str | None = None,
                    params: dict | None = None, default: bool = False) -> pb.TableEntry:
        with shell_context(self.context):
            te = sh.TableEntry(table)
            if default:
                te.is_default = True
            for f, v in (match or {}).items():
                te.match[f] = shell_value(v)
            if action is not None:
                te.action = sh.Action(action)
                for p, v in (params or {}).items():
                    te.action[p] = shell_value(v)
            return copy_message(te.msg())

    def multicast_group(self, group_id: int, replicas: Iterable[tuple[int, int]] = ()):
        with shell_context(self.context):
            g = sh.MulticastGroupEntry(int(group_id))
            for port, instance in replicas:
                g.add(int(port), int(instance))
            return copy_message(g.msg())

    def counter_entry(self, counter: str, index: int | None = None) -> pb.CounterEntry:
        with shell_context(self.context):
            c = sh.CounterEntry(counter)
            if index is not None:
                c.index = int(index)
            return copy_message(c.msg())

    def register_entry(self, register: str, index: int | None = None,
                       value: int | None = None) -> pb.RegisterEntry:
        info = self._register_info(register)
        e = pb.RegisterEntry(register_id=info.preamble.id)
        if index is not None:
            if not 0 <= index < info.size:
                raise ControllerError(f"{register}: index {index} not in 0..{info.size - 1}")
            e.index.index = int(index)
        if value is not None:
            bw = info.type_spec.bitstring.bit.bitwidth
            if not 0 <= int(value) < (1 << bw):
                raise ControllerError(f"{register}: {value} does not fit bit<{bw}>")
            e.data.bitstring = int(value).to_bytes(max(1, (int(value).bit_length() + 7) // 8), "big")
        return e

    # -- registers: P4Runtime, or the switch's own runtime where P4Runtime has none ------------------
    def use_registers(self, backend) -> "SwitchController":
        """Read and write registers through `backend` (`write([(name, index, value)],
        what)`, `read(name, index) -> {index: value}`) instead of P4Runtime: BMv2's
        P4Runtime server answers register RPCs with UNIMPLEMENTED, so its control
        plane passes testbed.switch.bmv2_registers.ThriftRegisters. Names, indexes
        and widths are still checked against this controller's P4Info."""
        self.registers = backend
        return self

    def write_registers(self, cells: Iterable[tuple[str, int, int]], what: str = "Write registers") -> None:
        """Set (register, index, value) cells."""
        cells = [(self._register_info(n).preamble.name, int(i), int(v)) for n, i, v in cells]
        entries = [self.register_entry(n, i, v) for n, i, v in cells]   # range/width checks
        if self.registers is not None:
            self.registers.write(cells, what)
        else:
            self.write([self.update(pb.Update.MODIFY, e) for e in entries], what)

    def _find_register(self, name: str) -> p4info_pb2.Register | None:
        for r in self.p4info.registers:
            if r.preamble.name == name or r.preamble.alias == name:
                return r
        return None

    def _register_info(self, name: str) -> p4info_pb2.Register:
        r = self._find_register(name)
        if r is None:
            raise ControllerError(f"{self.name}: no register {name!r} in {self.p4info_path}")
        return r

    @staticmethod
    def update(kind: int, entry) -> pb.Update:
        u = pb.Update(type=kind)
        if isinstance(entry, pb.TableEntry):
            u.entity.table_entry.CopyFrom(entry)
        elif isinstance(entry, pb.PacketReplicationEngineEntry):
            u.entity.packet_replication_engine_entry.CopyFrom(entry)
        elif isinstance(entry, pb.RegisterEntry):
            u.entity.register_entry.CopyFrom(entry)
        elif isinstance(entry, pb.CounterEntry):
            u.entity.counter_entry.CopyFrom(entry)
        else:
            raise TypeError(f"no Update for {type(entry).__name__}")
        return u

    # -- the program's control (mirrors testbed/switch/ina: InaPipeline.add_job etc.) ----------------
    def install_forwarding(self, entries: Iterable[dict]) -> None:
        """`Forward.l2_forward`: dst_mac -> `Forward.set_egress(port)`; an entry that
        exists already is modified, so calling this twice is harmless."""
        entries = list(entries)
        tes = []
        for i, e in enumerate(entries):
            try:
                mac = wire.mac_str(wire.mac_bytes(e["dst_mac"]))
                tes.append(self.table_entry(Forward.NAME, {"dst_addr": mac}, SET_EGRESS,
                                            {"port": int(e["port"])}))
            except (KeyError, TypeError, ValueError) as err:
                raise ControllerError(f"{self.name}: forwarding[{i}] {e!r}: {err}; expected "
                                      "{dst_mac: 'aa:bb:cc:dd:ee:ff', port: N}") from None
        if not tes:
            return
        try:
            self.write([self.update(pb.Update.INSERT, te) for te in tes], "Write forwarding")
        except WriteError as e:
            exists = [i for i, code, _ in e.errors if code == "ALREADY_EXISTS"]
            if e.code != "UNKNOWN" or len(exists) != len(e.errors):
                raise
            self.write([self.update(pb.Update.MODIFY, tes[i]) for i in exists],
                       "Write forwarding (modify existing)")

    def install_flood_group(self, ports: Iterable[int]) -> None:
        """Multicast group FLOOD_MCAST_GRP (1) with every port: `Forward.flood` on
        BMv2/Tofino (Egress prunes the ingress port). The soft switch floods by
        itself and keeps the group only as configuration."""
        g = self.multicast_group(FLOOD_MCAST_GRP, [(int(p), 0) for p in sorted(set(ports))])
        try:
            self.write([self.update(pb.Update.INSERT, g)], "Write flood group")
        except WriteError as e:
            if [c for _, c, _ in e.errors] != ["ALREADY_EXISTS"]:
                raise
            self.write([self.update(pb.Update.MODIFY, g)], "Write flood group (modify)")

    def set_switch_address(self, mac: str, ip: str) -> None:
        """`Egress.switch_address` default action: the source MAC/IP of every result."""
        te = self.table_entry(Egress.SWITCH_ADDRESS, action=SET_SWITCH_ADDRESS,
                              params={"mac": mac, "ip": ip}, default=True)
        self.write([self.update(pb.Update.MODIFY, te)], "Write switch address")

    def install_job(self, job: dict, reset_slots: bool | None = None) -> None:
        """What InaPipeline.add_job installs, through P4Runtime: per worker a
        `Egress.replica_rewrite` entry (rid = replica_id(job, worker) ->
        `Egress.rewrite_dst`) and its port binding (`Ingress.worker_port`:
        (job, worker) -> `Ingress.set_worker_port(port)`, so that no other port
        can contribute under its worker id), the job's multicast group with one
        replica per worker (port, rid), the job's slot range reset, then the
        `Ingress.job_table` entry -> `Ingress.set_job`. In this order, so that no
        contribution is admitted before its results can be delivered.

        reset_slots: True/False: always/never zero the slots' Aggregator state
        (SLOT_RESET_REGISTERS, 8 register writes per slot). None (default): only
        when they may hold state, i.e. unless this controller committed the
        pipeline (a commit zeroes every register) and no job used them since.
        Resetting all 4096 slots is ~32k writes, seconds on a soft switch."""
        jid, workers, ids, base, count, grp = _job_fields(job)
        counts = self._find_register(Aggregator.COUNT)
        slots = counts.size // 2 if counts is not None else 1 << 16
        if base + count > slots:
            raise ControllerError(f"{self.name}: job {jid}: slots {base}..{base + count - 1} exceed "
                                  f"the switch's {slots} slots")
        for other in self.read_table(JobTable.NAME):
            ojid, p = other["match"]["job_id"], other["params"]
            if ojid == jid:
                raise ControllerError(f"{self.name}: job {jid} is already installed; "
                                      "remove_job() it first")
            if p["slot_base"] < base + count and base < p["slot_base"] + p["slot_count"]:
                raise ControllerError(f"{self.name}: job {jid}: slots {base}..{base + count - 1} "
                                      f"overlap job {ojid}")
        rewrites, bindings, replicas = [], [], []
        for wid, w in zip(ids, workers):
            rid = replica_id(jid, wid)
            rewrites.append(self.update(pb.Update.INSERT, self.table_entry(
                Egress.REPLICA_REWRITE, {"egress_rid": rid}, REWRITE_DST,
                {"dst_mac": wire.mac_str(wire.mac_bytes(w["mac"])), "dst_ip": w["ip"],
                 "dst_port": int(w.get("udp_port", wire.INA_PORT_BASE))})))
            bindings.append(self.update(pb.Update.INSERT, self.table_entry(
                WorkerPortTable.NAME, {"job_id": jid, "worker_id": wid}, SET_WORKER_PORT,
                {"port": int(w["port"])})))
            replicas.append((int(w["port"]), rid))
        group = self.update(pb.Update.INSERT, self.multicast_group(grp, replicas))
        self.write(rewrites + [group] + bindings, f"Write job {jid} replicas and port bindings")
        if reset_slots is None:
            reset_slots = not self._fresh_slots or any(
                b < base + count and base < b + n for b, n in self._used_slots)
        if reset_slots:   # v1model layout: (slot, version) cells; TNA's pair registers differ
            regs = [r for r in SLOT_RESET_REGISTERS if (info := self._find_register(r)) is not None
                    and info.type_spec.HasField("bitstring") and info.size >= 2 * (base + count)]
            self.write_registers([(r, i, 0) for r in regs for i in range(2 * base, 2 * (base + count))],
                                 f"Write job {jid} slot reset")
        self.write([self.update(pb.Update.INSERT, self.table_entry(
            JobTable.NAME, {"job_id": jid}, SET_JOB,
            {"num_workers": int(job.get("num_workers", len(workers))), "mcast_grp": grp,
             "worker_mask": sum(1 << x for x in ids), "slot_base": base, "slot_count": count}))],
            f"Write job {jid}")
        self._used_slots.append((base, count))

    def remove_job(self, job_id: int) -> None:
        """Reverse of install_job: job entry first (no more admissions), then the
        workers' port bindings, the group and its replica rewrites."""
        jid = int(job_id)
        entry = [e for e in self.read_table(JobTable.NAME) if e["match"]["job_id"] == jid]
        if not entry:
            raise ControllerError(f"{self.name}: job {jid} is not installed")
        grp = entry[0]["params"]["mcast_grp"]
        self.write([self.update(pb.Update.DELETE, self.table_entry(JobTable.NAME, {"job_id": jid}))],
                   f"Write remove job {jid}")
        rids = [rid for _, rid in self.read_multicast_groups().get(grp, [])]
        bound = [e["match"] for e in self.read_table(WorkerPortTable.NAME) if e["match"]["job_id"] == jid]
        self.write([self.update(pb.Update.DELETE, self.table_entry(WorkerPortTable.NAME, m))
                    for m in bound]
                   + [self.update(pb.Update.DELETE, self.multicast_group(grp))]
                   + [self.update(pb.Update.DELETE, self.table_entry(
                       Egress.REPLICA_REWRITE, {"egress_rid": rid})) for rid in rids],
                   f"Write remove job {jid} port bindings and replicas")

    def set_drop_probability(self, port: int, p: float, direction: str = "ingress") -> None:
        """`DropSimulator.drop_probability[port]` (ingress: contributions arriving on
        `port`) or `EgressDropSimulator.drop_probability[port]` (egress: results
        leaving through it) = p * 2^32 (a packet is dropped when a 32-bit random
        number is below it), as DropSimulator.set_probability does."""
        sims = {"ingress": DropSimulator, "egress": EgressDropSimulator}
        if direction not in sims:
            raise ControllerError(f"{self.name}: drop probability direction {direction!r}: "
                                  f"use ingress or egress")
        if not 0.0 <= float(p) <= 1.0:
            raise ControllerError(f"{self.name}: drop probability for port {port}: {p} not in [0, 1]")
        threshold = min(int(round(float(p) * 4294967296.0)), 0xFFFFFFFF)
        what = "drop probability" if direction == "ingress" else "egress drop probability"
        self.write_registers([(sims[direction].PROBABILITY, int(port), threshold)],
                             f"Write {what} port {port}")

    # -- reads --------------------------------------------------------------------------------------------
    def read_table(self, name: str) -> list[dict]:
        """Entries of one table: [{match: {field: int}, action: name, params: {p: int}}]."""
        ents = self.read([_entity(self.table_entry(name))], f"Read {name}")
        out = []
        for e in ents:
            te = e.table_entry
            tname = self.context.get_name_from_id(te.table_id)
            a = te.action.action
            aname = self.context.get_name_from_id(a.action_id)
            out.append({
                "match": {self.context.get_mf_name(tname, fm.field_id):
                          int.from_bytes(fm.exact.value, "big") for fm in te.match},
                "action": aname,
                "params": {self.context.get_param_name(aname, p.param_id):
                           int.from_bytes(p.value, "big") for p in a.params}})
        return out

    def read_counters(self, nonzero_only: bool = True) -> dict[str, dict[int, tuple[int, int]]]:
        """Every counter of the P4Info: {name: {index: (packets, bytes)}} (only cells
        that counted something, unless nonzero_only=False)."""
        names = [c.preamble.name for c in self.p4info.counters]
        ents = self.read([_entity(self.counter_entry(n)) for n in names], "Read counters")
        out: dict[str, dict[int, tuple[int, int]]] = {n: {} for n in names}
        for e in ents:
            ce = e.counter_entry
            cell = (ce.data.packet_count, ce.data.byte_count)
            if cell != (0, 0) or not nonzero_only:
                out[self.context.get_name_from_id(ce.counter_id)][ce.index.index] = cell
        return out

    def read_register(self, name: str, index: int | None = None) -> dict[int, int]:
        if self.registers is not None:
            info = self._register_info(name)
            self.register_entry(name, index)                  # index range check
            return self.registers.read(info.preamble.name, index)
        ents = self.read([_entity(self.register_entry(name, index))], f"Read {name}")
        return {e.register_entry.index.index: int.from_bytes(e.register_entry.data.bitstring, "big")
                for e in ents}

    def read_multicast_groups(self) -> dict[int, list[tuple[int, int]]]:
        ents = self.read([_entity(self.multicast_group(0))], "Read multicast groups")
        return {e.packet_replication_engine_entry.multicast_group_entry.multicast_group_id:
                [(r.egress_port, r.instance)
                 for r in e.packet_replication_engine_entry.multicast_group_entry.replicas]
                for e in ents}


def _job_fields(job: dict):
    """Validated job fields, with InaPipeline.add_job's rules and messages."""
    try:
        jid = int(job["job_id"])
        workers = list(job["workers"])
        base, count = int(job["slot_base"]), int(job["slot_count"])
        ids = [int(w.get("worker_id", i)) for i, w in enumerate(workers)]
        grp = int(job.get("mcast_group", 0x100 + jid))
    except (KeyError, TypeError, ValueError) as e:
        raise ControllerError(f"job {job!r}: {e!r}; expected {{job_id, workers: [{{worker_id, mac, "
                              "ip, port, udp_port?}], slot_base, slot_count, mcast_group?}") from None
    if not workers:
        raise ControllerError(f"job {jid}: no workers")
    if len(set(ids)) != len(ids) or not all(0 <= x < wire.MAX_WORKERS for x in ids):
        raise ControllerError(f"job {jid}: worker ids {ids} must be distinct, 0..{wire.MAX_WORKERS - 1}")
    if grp in (0, FLOOD_MCAST_GRP):
        raise ControllerError(f"job {jid}: mcast_group {grp} is reserved (0 = none, "
                              f"{FLOOD_MCAST_GRP} = flood)")
    return jid, workers, ids, base, count, grp


def _entity(entry) -> pb.Entity:
    e = pb.Entity()
    if isinstance(entry, pb.TableEntry):
        e.table_entry.CopyFrom(entry)
    elif isinstance(entry, pb.PacketReplicationEngineEntry):
        e.packet_replication_engine_entry.CopyFrom(entry)
    elif isinstance(entry, pb.CounterEntry):
        e.counter_entry.CopyFrom(entry)
    elif isinstance(entry, pb.RegisterEntry):
        e.register_entry.CopyFrom(entry)
    else:
        raise TypeError(f"no Entity for {type(entry).__name__}")
    return e


# ControllerError and WriteError are what this controller's methods raise: callers catch them from here.
__all__ = ["SwitchController", "ControllerError", "WriteError", "SLOT_RESET_REGISTERS", "WRITE_CHUNK"]
