"""P4Runtime server for the soft switch: the subset of P4Runtime 1.4 that
p4runtime-shell and `testbed.switch.controller` need, served by gRPC threads
inside the switch process (`serve(switch, addr)` is the soft switch's hook).

Supported (one device, default role only):
  StreamChannel  arbitration: the highest election id is primary (status OK);
                 the others are backups (ALREADY_EXISTS, as PI/BMv2 answer).
                 When the primary leaves or is outbid, every client is told the
                 new state. A duplicate election id -> INVALID_ARGUMENT. Packet-out
                 and digest acks -> StreamError UNIMPLEMENTED (the program has none).
  SetForwardingPipelineConfig  VERIFY; VERIFY_AND_SAVE then COMMIT;
                 VERIFY_AND_COMMIT (a fresh instance of the program from the switch
                 config: forwarding state cleared); RECONCILE_AND_COMMIT (state kept,
                 ids re-mapped). The P4Info must describe the switch's program (names,
                 bitwidths, sizes) and p4_device_config is the program name (b"ina").
  GetForwardingPipelineConfig  all response types.
  Write          primary only; CONTINUE_ON_ERROR. Table entries (exact match,
                 direct actions, default action MODIFY), multicast groups,
                 register and counter cells (MODIFY).
  Read           table entries (wildcards, default entry), counters, registers,
                 multicast groups.
  Capabilities
Errors, as PI does them: a request-level problem is that gRPC code (NOT_FOUND
device, PERMISSION_DENIED not primary, FAILED_PRECONDITION no pipeline, ...);
per-update failures make the call fail with UNKNOWN and one p4.v1.Error per
update (OK for those that succeeded) in `grpc-status-details-bin`. That trailer
is kept under DETAILS_BUDGET bytes (gRPC clients refuse trailers over 8 KiB
soft / 16 KiB hard by default, and would then report RESOURCE_EXHAUSTED with no
word of which update failed): messages are shortened first, and a Write too
large for one Error per update gets a status message naming the failed updates
instead. An id that is not in the P4Info is INVALID_ARGUMENT "Invalid P4 id",
as PI answers; multicast replicas must name one of the switch's ports.

Thread safety: RPCs are serialized by one lock (a commit never races a write).
Table changes go through the pipeline's tables, which take the pipeline lock
the data plane holds for a whole batch, so a packet sees a table before or
after a change. Register and counter cells are read and written under that same
lock when the pipeline exposes it: a read sees the state between two batches.
"""
from __future__ import annotations

import collections
import hashlib
import ipaddress
import logging
import re
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc

from testbed.switch.p4runtime_arbiter import MAX_STREAMS, Arbiter, _Conn, election_int, election_str
from testbed.switch.p4runtime_binding import (P4RTError, ProgramBinding, _indices, _key,  # noqa: F401
                                              check_p4info, decode_value, encode_value)

log = logging.getLogger("p4runtime")

P4_DIR = Path(__file__).resolve().parents[2] / "p4"
READ_CHUNK = 1024            # entities per ReadResponse (stays far below gRPC's 4 MB)
DETAILS_BUDGET = 6144        # bytes of a failed Write's per-update errors (see the docstring)
SC = grpc.StatusCode
_SetAction = pb.SetForwardingPipelineConfigRequest
_GetType = pb.GetForwardingPipelineConfigRequest


def api_version() -> str:
    try:
        from importlib.metadata import version
        return version("p4runtime")
    except Exception:  # noqa: BLE001 - metadata missing: still answer
        return "1.4.1"


def _code_int(code: grpc.StatusCode) -> int:
    return code.value[0]


# --- the service ---------------------------------------------------------------------

class _RichStatus(collections.namedtuple("_RichStatus", "code details trailing_metadata"),
                  grpc.Status):
    """A grpc.Status carrying google.rpc.Status details (no grpcio-status needed)."""


@dataclass
class _PipelineConfig:
    p4info: p4info_pb2.P4Info
    device_config: bytes
    cookie: int | None
    binding: ProgramBinding | None = None


class SoftTarget:
    """What the server needs from a soft switch: its program and pipeline."""

    def __init__(self, switch):
        self.switch = switch
        self.name = getattr(switch, "name", "switch")
        self.program = switch.config.pipeline

    @property
    def pipeline(self):
        return self.switch.pipeline

    def fresh_pipeline(self):
        """A new instance of the program, as a freshly started switch has it."""
        from testbed.switch.pipeline import make_pipeline
        return make_pipeline(self.program, self.switch.config.raw)

    def install(self, pipeline) -> None:
        self.switch.pipeline = pipeline   # the switch loop picks it up at its next batch


class SoftP4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, target: SoftTarget, device_id: int):
        self.target = target
        self.device_id = device_id
        self.arbiter = Arbiter(device_id)
        self._lock = threading.RLock()
        self._config: _PipelineConfig | None = None
        self._saved: _PipelineConfig | None = None
        self._load_checked_in_p4info()

    def _load_checked_in_p4info(self) -> None:
        """Serve the program's checked-in P4Info until a controller pushes one: the soft
        switch starts with its program loaded (unlike BMv2 --no-p4)."""
        path = P4_DIR / f"{self.target.program}.p4info.txtpb"
        if not path.exists():
            return
        try:
            p4info = text_format.Parse(path.read_text(), p4info_pb2.P4Info())
            binding = ProgramBinding(p4info, self.target.pipeline, self.target.program)
        except (text_format.ParseError, P4RTError) as e:
            log.warning("P4Runtime: %s does not fit the running program (%s); waiting for "
                        "SetForwardingPipelineConfig", path, getattr(e, "message", e))
            return
        self._config = _PipelineConfig(p4info, self.target.program.encode(), None, binding)

    # -- request checks -------------------------------------------------------------
    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise P4RTError(SC.NOT_FOUND, f"unknown device id {device_id}: this is soft switch "
                            f"{self.target.name}, device id {self.device_id}")

    def _check_role(self, role: str) -> None:
        if role:
            raise P4RTError(SC.UNIMPLEMENTED, f"role {role!r}: only the default role is supported")

    def _check_primary(self, election_id: pb.Uint128, what: str) -> None:
        primary = self.arbiter.primary_election_id()
        mine = election_int(election_id)
        if primary is None:
            raise P4RTError(SC.PERMISSION_DENIED, f"{what}: no primary client; open a "
                            "StreamChannel and send an arbitration update first")
        if mine != primary:
            raise P4RTError(SC.PERMISSION_DENIED, f"{what}: not primary (election id "
                            f"{election_str(mine)}, primary's is {election_str(primary)})")

    def _binding(self) -> ProgramBinding:
        if self._config is None or self._config.binding is None:
            raise P4RTError(SC.FAILED_PRECONDITION, "no forwarding pipeline config set for this "
                            "device: push one with SetForwardingPipelineConfig")
        return self._config.binding

    # -- error plumbing -----------------------------------------------------------------
    def _unary(self, name: str, fn, request, context):
        try:
            return fn(request)
        except P4RTError as e:
            err, details = e, None
        except _WriteErrors as e:
            err, details = P4RTError(SC.UNKNOWN, e.summary), e.status
        except Exception as e:  # noqa: BLE001 - a bad request must never take the switch down
            log.exception("P4Runtime %s failed", name)
            err, details = P4RTError(SC.INTERNAL, f"{name}: soft switch P4Runtime server error: "
                                     f"{e!r} (see the switch log)"), None
        if details is not None:
            context.abort_with_status(_RichStatus(
                err.code, err.message, (("grpc-status-details-bin", details.SerializeToString()),)))
        context.abort(err.code, err.message)

    # -- RPCs -------------------------------------------------------------------------------
    def Capabilities(self, request, context):
        return pb.CapabilitiesResponse(p4runtime_api_version=api_version())

    def GetForwardingPipelineConfig(self, request, context):
        return self._unary("GetForwardingPipelineConfig", self._get_config, request, context)

    def SetForwardingPipelineConfig(self, request, context):
        return self._unary("SetForwardingPipelineConfig", self._set_config, request, context)

    def Write(self, request, context):
        return self._unary("Write", self._write, request, context)

    def Read(self, request, context):
        try:
            with self._lock:
                self._check_device(request.device_id)
                self._check_role(request.role)
                b = self._binding()
                chunks = list(self._read_chunks(b, request.entities))
        except P4RTError as e:
            err = e
        except Exception as e:  # noqa: BLE001
            log.exception("P4Runtime Read failed")
            err = P4RTError(SC.INTERNAL, f"Read: soft switch P4Runtime server error: {e!r}")
        else:
            log.debug("P4Runtime Read: %d entities", sum(len(c.entities) for c in chunks))
            yield from chunks
            return
        context.abort(err.code, err.message)

    def StreamChannel(self, request_iterator, context):
        conn = _Conn(context.peer())
        try:
            self.arbiter.open(conn)
        except P4RTError as e:
            context.abort(e.code, e.message)
        context.add_callback(lambda: conn.out.put(("end", None)))

        def pump() -> None:   # requests -> the same queue as notifications
            try:
                for req in request_iterator:
                    conn.out.put(("req", req))
            except Exception:  # noqa: BLE001 - cancelled or broken stream
                pass
            finally:
                conn.out.put(("end", None))

        threading.Thread(target=pump, daemon=True, name=f"p4rt-stream-{conn.id}").start()
        error: P4RTError | None = None
        try:
            while error is None:
                kind, item = conn.out.get()
                if kind == "end":
                    return
                if kind == "resp":
                    yield item
                    continue
                try:
                    reply = self._stream_request(conn, item)
                except P4RTError as e:
                    error = e
                    continue
                if reply is not None:
                    yield reply
        finally:
            self.arbiter.leave(conn)
        context.abort(error.code, error.message)

    # -- stream ---------------------------------------------------------------------------------
    def _stream_request(self, conn: _Conn, req: pb.StreamMessageRequest):
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            arb = req.arbitration
            self._check_device(arb.device_id)
            if arb.role.name:
                raise P4RTError(SC.UNIMPLEMENTED, f"role {arb.role.name!r}: only the default "
                                "role is supported")
            self.arbiter.arbitrate(conn, election_int(arb.election_id))
            return None
        reply = pb.StreamMessageResponse()
        reply.error.canonical_code = code_pb2.UNIMPLEMENTED
        reply.error.message = f"{kind}: not supported by the soft switch (its program has no " \
                              "controller packet I/O or digests)"
        if kind == "packet":
            reply.error.packet_out.packet_out.CopyFrom(req.packet)
        else:
            reply.error.other.SetInParent()
        return reply

    # -- pipeline config ------------------------------------------------------------------------------
    def _get_config(self, req: pb.GetForwardingPipelineConfigRequest):
        self._check_device(req.device_id)
        with self._lock:
            cfg = self._config
        if cfg is None:
            raise P4RTError(SC.FAILED_PRECONDITION, "no forwarding pipeline config set for this device")
        rep = pb.GetForwardingPipelineConfigResponse()
        rt = req.response_type
        if cfg.cookie is not None:
            rep.config.cookie.cookie = cfg.cookie
        if rt in (_GetType.ALL, _GetType.P4INFO_AND_COOKIE):
            rep.config.p4info.CopyFrom(cfg.p4info)
        if rt in (_GetType.ALL, _GetType.DEVICE_CONFIG_AND_COOKIE):
            rep.config.p4_device_config = cfg.device_config
        return rep

    def _verify(self, config: pb.ForwardingPipelineConfig, pipeline) -> _PipelineConfig:
        program = self.target.program
        dev = bytes(config.p4_device_config)
        if dev.strip() != program.encode():
            shown = dev[:40] + (b"..." if len(dev) > 40 else b"")
            raise P4RTError(SC.INVALID_ARGUMENT, f"p4_device_config {shown!r} is not for this "
                            f"switch: the soft switch runs program {program!r}; send "
                            f"p4_device_config={program.encode()!r}")
        binding = ProgramBinding(config.p4info, pipeline, program)
        cookie = config.cookie.cookie if config.HasField("cookie") else None
        p4info = p4info_pb2.P4Info()
        p4info.CopyFrom(config.p4info)
        return _PipelineConfig(p4info, dev, cookie, binding)

    def _set_config(self, req: pb.SetForwardingPipelineConfigRequest):
        self._check_device(req.device_id)
        self._check_role(req.role)
        with self._lock:
            self._check_primary(req.election_id, "SetForwardingPipelineConfig")
            act = req.action
            if act == _SetAction.COMMIT:
                if req.HasField("config"):
                    raise P4RTError(SC.INVALID_ARGUMENT, "COMMIT takes no config: it commits the "
                                    "one saved by VERIFY_AND_SAVE")
                if self._saved is None:
                    raise P4RTError(SC.FAILED_PRECONDITION, "COMMIT: no config saved "
                                    "(use VERIFY_AND_SAVE first, or VERIFY_AND_COMMIT)")
                self._commit(self._saved, fresh=True)
                self._saved = None
                return pb.SetForwardingPipelineConfigResponse()
            if act not in (_SetAction.VERIFY, _SetAction.VERIFY_AND_SAVE,
                           _SetAction.VERIFY_AND_COMMIT, _SetAction.RECONCILE_AND_COMMIT):
                raise P4RTError(SC.INVALID_ARGUMENT, f"action {_SetAction.Action.Name(act)}: use "
                                "VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT or "
                                "RECONCILE_AND_COMMIT")
            if not req.HasField("config"):
                raise P4RTError(SC.INVALID_ARGUMENT, f"{_SetAction.Action.Name(act)} needs a config")
            cfg = self._verify(req.config, self.target.pipeline)
            if act == _SetAction.VERIFY_AND_SAVE:
                self._saved = cfg
            elif act == _SetAction.VERIFY_AND_COMMIT:
                self._commit(cfg, fresh=True)
            elif act == _SetAction.RECONCILE_AND_COMMIT:
                if self._config is not None and self._config.binding is not None:
                    cfg.binding.metadata = self._config.binding.metadata   # state is kept
                self._commit(cfg, fresh=False)
            log.info("P4Runtime: SetForwardingPipelineConfig %s for program %r (P4Info sha256 %s)",
                     _SetAction.Action.Name(act), self.target.program,
                     hashlib.sha256(cfg.p4info.SerializeToString(deterministic=True)).hexdigest()[:12])
        return pb.SetForwardingPipelineConfigResponse()

    def _commit(self, cfg: _PipelineConfig, fresh: bool) -> None:
        if fresh:   # realize the config: a new program instance, forwarding state cleared
            pipeline = self.target.fresh_pipeline()
            cfg.binding = ProgramBinding(cfg.p4info, pipeline, self.target.program)
            self.target.install(pipeline)
        self._config = cfg

    # -- Write ---------------------------------------------------------------------------------------
    def _write(self, req: pb.WriteRequest):
        self._check_device(req.device_id)
        self._check_role(req.role)
        if req.atomicity != pb.WriteRequest.CONTINUE_ON_ERROR:
            raise P4RTError(SC.UNIMPLEMENTED, f"atomicity {pb.WriteRequest.Atomicity.Name(req.atomicity)}"
                            ": only CONTINUE_ON_ERROR is supported")
        with self._lock:
            self._check_primary(req.election_id, "Write")
            b = self._binding()
            errors: list[tuple[int, str] | None] = []
            for u in req.updates:
                try:
                    self._apply(b, u)
                    errors.append(None)
                except P4RTError as e:
                    errors.append((_code_int(e.code), e.message))
        failed = sum(e is not None for e in errors)
        log.info("P4Runtime Write: %d updates, %d failed", len(errors), failed)
        if failed:
            raise _WriteErrors(errors)
        return pb.WriteResponse()

    def _apply(self, b: ProgramBinding, u: pb.Update) -> None:
        if u.type not in (pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE):
            raise P4RTError(SC.INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
        kind = u.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table(b, u.type, u.entity.table_entry)
        elif kind == "packet_replication_engine_entry":
            self._write_pre(b, u.type, u.entity.packet_replication_engine_entry)
        elif kind == "register_entry":
            self._write_register(b, u.type, u.entity.register_entry)
        elif kind == "counter_entry":
            self._write_counter(b, u.type, u.entity.counter_entry)
        elif kind is None:
            raise P4RTError(SC.INVALID_ARGUMENT, "update has no entity")
        else:
            raise P4RTError(SC.UNIMPLEMENTED, f"{kind}: not supported (the program has none)")

    def _write_table(self, b: ProgramBinding, utype: int, te: pb.TableEntry) -> None:
        tb = b.table(te.table_id)
        if te.priority:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{tb.name}: exact-match table, priority must be 0")
        for f in ("counter_data", "meter_config", "meter_counter_data", "time_since_last_hit"):
            if te.HasField(f):
                raise P4RTError(SC.INVALID_ARGUMENT, f"{tb.name}: has no direct resources ({f})")
        if te.idle_timeout_ns:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{tb.name}: does not support idle timeouts")
        table = tb.table
        if te.is_default_action:
            if utype != pb.Update.MODIFY:
                raise P4RTError(SC.INVALID_ARGUMENT, f"{tb.name}: the default entry can only be "
                                "modified (MODIFY), not inserted or deleted")
            if len(te.match):
                raise P4RTError(SC.INVALID_ARGUMENT, f"{tb.name}: a default entry has no match")
            if tb.const_default:
                raise P4RTError(SC.PERMISSION_DENIED, f"{tb.name}: the default action is const")
            if te.action.WhichOneof("type") is None:   # no action: back to the program's default
                action, params = tb.initial_default
            else:
                action, params = tb.decode_action(te.action, default=True)
            _call(table.set_default, action, params)
            return
        match = tb.decode_match(te.match)
        key = _key(tb.name, match)
        if not tb.fields:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{tb.name} is keyless: MODIFY its default entry")
        if utype == pb.Update.DELETE:
            _call(table.delete, match, missing=SC.NOT_FOUND)
            b.metadata.pop(key, None)
            return
        action, params = tb.decode_action(te.action, default=False)
        if utype == pb.Update.INSERT:
            if len(table) >= table.size:
                raise P4RTError(SC.RESOURCE_EXHAUSTED, f"{tb.name}: table full ({table.size} entries)")
            _call(table.insert, match, action, params, missing=SC.ALREADY_EXISTS)
        else:
            _call(table.modify, match, action, params, missing=SC.NOT_FOUND)
        b.metadata[key] = bytes(te.metadata)

    def _write_pre(self, b: ProgramBinding, utype: int, pre: pb.PacketReplicationEngineEntry) -> None:
        if pre.WhichOneof("type") != "multicast_group_entry":
            raise P4RTError(SC.UNIMPLEMENTED, "clone sessions are not supported")
        groups = getattr(b.pipeline, "multicast_groups", None)
        if groups is None:
            raise P4RTError(SC.UNIMPLEMENTED, f"program {b.program!r} has no multicast engine")
        mg = pre.multicast_group_entry
        gid = mg.multicast_group_id
        if gid == 0:
            raise P4RTError(SC.INVALID_ARGUMENT, "multicast group id 0 is not valid")
        if utype == pb.Update.DELETE:
            _call(groups.delete, gid, missing=SC.NOT_FOUND)
            return
        replicas = []
        for r in mg.replicas:
            kind = r.WhichOneof("port_kind")
            if kind is None:
                raise P4RTError(SC.INVALID_ARGUMENT, f"multicast group {gid}: a replica has no port")
            port = r.egress_port if kind == "egress_port" else \
                decode_value(r.port, 32, f"multicast group {gid} replica port")
            if r.instance >> 16:
                raise P4RTError(SC.INVALID_ARGUMENT, f"multicast group {gid}: instance "
                                f"{r.instance} does not fit the 16-bit replica id")
            replicas.append((port, r.instance))
        if len(set(replicas)) != len(replicas):
            raise P4RTError(SC.INVALID_ARGUMENT, f"multicast group {gid}: (port, instance) "
                            "pairs must be unique")
        if utype == pb.Update.INSERT:
            _call(groups.insert, gid, replicas, missing=SC.ALREADY_EXISTS)
        else:
            _call(groups.modify, gid, replicas, missing=SC.NOT_FOUND)

    def _write_register(self, b: ProgramBinding, utype: int, re_: pb.RegisterEntry) -> None:
        if utype != pb.Update.MODIFY:
            raise P4RTError(SC.INVALID_ARGUMENT, "register cells can only be modified (MODIFY)")
        name, reg = b.register(re_.register_id)
        if re_.data.WhichOneof("data") != "bitstring":
            raise P4RTError(SC.INVALID_ARGUMENT, f"{name}: data must be a bitstring")
        value = decode_value(re_.data.bitstring, reg.bitwidth, f"{name} value")
        cells = _indices(re_.HasField("index"), re_.index.index, reg.size, name)
        with b.state_lock():
            for i in cells:
                reg.write(i, value)

    def _write_counter(self, b: ProgramBinding, utype: int, ce: pb.CounterEntry) -> None:
        if utype != pb.Update.MODIFY:
            raise P4RTError(SC.INVALID_ARGUMENT, "counter cells can only be modified (MODIFY)")
        name, counter = b.counter(ce.counter_id)
        if ce.data.packet_count < 0 or ce.data.byte_count < 0:
            raise P4RTError(SC.INVALID_ARGUMENT, f"{name}: counts cannot be negative")
        cells = _indices(ce.HasField("index"), ce.index.index, counter.size, name)
        with b.state_lock():
            for i in cells:
                counter.write(i, ce.data.packet_count)

    # -- Read ------------------------------------------------------------------------------------------
    def _read_chunks(self, b: ProgramBinding, entities) -> list[pb.ReadResponse]:
        out = _Chunks()
        for ent in entities:
            kind = ent.WhichOneof("entity")
            if kind == "table_entry":
                self._read_tables(b, ent.table_entry, out)
            elif kind == "counter_entry":
                self._read_counters(b, ent.counter_entry, out)
            elif kind == "register_entry":
                self._read_registers(b, ent.register_entry, out)
            elif kind == "packet_replication_engine_entry":
                self._read_pre(b, ent.packet_replication_engine_entry, out)
            else:
                raise P4RTError(SC.UNIMPLEMENTED, f"reading {kind} is not supported")
        return out.responses

    def _read_tables(self, b: ProgramBinding, te: pb.TableEntry, out: "_Chunks") -> None:
        tbs = [b.table(te.table_id)] if te.table_id else list(b.tables.values())
        if te.is_default_action:
            if not te.table_id:
                raise P4RTError(SC.INVALID_ARGUMENT, "reading a default entry needs a table id")
            action, params = tbs[0].table.default
            ent = out.new()
            tbs[0].encode(ent, {}, action, params, default=True)
            ent.table_entry.is_const = tbs[0].const_default
            return
        if te.match and not te.table_id:
            raise P4RTError(SC.INVALID_ARGUMENT, "a match needs a table id")
        want = tbs[0].decode_match(te.match) if te.match else None
        for tb in tbs:
            for e in tb.table.entries():
                if want is None or e["match"] == want:
                    tb.encode(out.new(), e["match"], e["action"], e["params"],
                              b.metadata.get(_key(tb.name, e["match"]), b""))

    def _read_counters(self, b: ProgramBinding, ce: pb.CounterEntry, out: "_Chunks") -> None:
        for cid in ([ce.counter_id] if ce.counter_id else list(b.counters)):
            name, counter = b.counter(cid)
            cells = _indices(ce.HasField("index"), ce.index.index, counter.size, name)
            with b.state_lock():
                values = [counter.read(i) for i in cells]
            for i, v in zip(cells, values):
                c = out.new().counter_entry
                c.counter_id = cid
                c.index.index = i
                c.data.packet_count = v

    def _read_registers(self, b: ProgramBinding, re_: pb.RegisterEntry, out: "_Chunks") -> None:
        for rid in ([re_.register_id] if re_.register_id else list(b.registers)):
            name, reg = b.register(rid)
            cells = _indices(re_.HasField("index"), re_.index.index, reg.size, name)
            with b.state_lock():
                values = reg.read_all() if len(cells) == reg.size else [reg.read(i) for i in cells]
            for i, v in zip(cells, values):
                r = out.new().register_entry
                r.register_id = rid
                r.index.index = i
                r.data.bitstring = encode_value(v)

    def _read_pre(self, b: ProgramBinding, pre: pb.PacketReplicationEngineEntry,
                  out: "_Chunks") -> None:
        if pre.WhichOneof("type") != "multicast_group_entry":
            raise P4RTError(SC.UNIMPLEMENTED, "clone sessions are not supported")
        groups = getattr(b.pipeline, "multicast_groups", None)
        if groups is None:
            return
        gid = pre.multicast_group_entry.multicast_group_id
        for g, replicas in sorted(groups.read().items()):
            if gid and g != gid:
                continue
            mg = out.new().packet_replication_engine_entry.multicast_group_entry
            mg.multicast_group_id = g
            for port, rid in replicas:
                r = mg.replicas.add()
                r.egress_port = port
                r.instance = rid


class _Chunks:
    """ReadResponses of at most READ_CHUNK entities, filled in place (protobuf in
    pure Python: appending a built message would copy it)."""

    def __init__(self):
        self.responses = [pb.ReadResponse()]

    def new(self) -> pb.Entity:
        if len(self.responses[-1].entities) >= READ_CHUNK:
            self.responses.append(pb.ReadResponse())
        return self.responses[-1].entities.add()


class _WriteErrors(Exception):
    """Per-update results of a failed Write, as google.rpc.Status details that
    fit in DETAILS_BUDGET bytes: one p4.v1.Error per update (OK for those that
    succeeded) with the failures' messages as long as they fit, the rest of the
    messages dropped (their codes kept); when even codes alone do not fit, no
    details and a status message that names the failed updates."""

    def __init__(self, errors: list[tuple[int, str] | None], budget: int = DETAILS_BUDGET):
        bad = [(i, e) for i, e in enumerate(errors) if e is not None]
        first = bad[0]
        self.summary = (f"Write: {len(bad)} of {len(errors)} updates failed; first: update "
                        f"{first[0]}: {code_pb2.Code.Name(first[1][0])}: {first[1][1][:400]}")
        self.status = status_pb2.Status(code=code_pb2.UNKNOWN, message=self.summary)
        for e in errors:
            self.status.details.add().Pack(pb.Error(canonical_code=code_pb2.OK if e is None else e[0]))
        budget -= 200                     # room for what the summary may get appended below
        size = self.status.ByteSize()
        if size > budget:
            per_update = -(-size // len(errors))
            self.status.ClearField("details")
            shown = ", ".join(f"{i} {code_pb2.Code.Name(e[0])}" for i, e in bad[:20])
            self.summary += (f"; failed updates: {shown}{', ...' if len(bad) > 20 else ''}. One "
                             f"p4.v1.Error per update would not fit gRPC's metadata limit: send at "
                             f"most {budget // per_update} updates per Write")
        else:
            dropped = 0
            for i, e in bad:              # messages, in update order, while they fit
                cell = self.status.details[i]
                cell.Pack(pb.Error(canonical_code=e[0], message=e[1]))
                if self.status.ByteSize() > budget:
                    cell.Pack(pb.Error(canonical_code=e[0]))
                    dropped += 1
            if dropped:
                self.summary += (f"; the messages of {dropped} failed updates were left out to fit "
                                 "gRPC's metadata limit (their codes are in the details)")
        self.status.message = self.summary
        super().__init__(self.summary)


def _call(fn, *args, missing: grpc.StatusCode | None = None) -> None:
    """Run a pipeline control call; its KeyError (entry exists / not found) and
    ValueError (invalid value) become P4Runtime codes."""
    try:
        fn(*args)
    except KeyError as e:
        msg = e.args[0] if e.args else str(e)
        raise P4RTError(missing or SC.INVALID_ARGUMENT, str(msg)) from None
    except (ValueError, TypeError) as e:
        raise P4RTError(SC.INVALID_ARGUMENT, str(e)) from None


# --- the server -------------------------------------------------------------------------------------

def device_id_for(name: str, config: dict | None = None) -> int:
    """The switch's P4Runtime device id: config "device_id", else the digits of
    its name (s1 -> 1, like Mininet's dpid), else 1. The runner uses the same."""
    if config and config.get("device_id") is not None:
        return int(config["device_id"])
    digits = re.findall(r"\d+", name or "")
    return int(digits[-1]) if digits else 1


def check_bind_address(addr: str, mgmt_addr: str | None = None) -> tuple[str, int]:
    """host:port -> (host, port); only loopback or the switch's management address."""
    host, sep, port = (addr or "").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"p4runtime_addr {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:50001")
    if mgmt_addr and host == mgmt_addr:
        return host, int(port)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"p4runtime_addr {addr!r}: the P4Runtime server listens on loopback "
                         "(127.0.0.1:PORT) or on the switch's management address "
                         "(config p4runtime_mgmt_addr) only; it has no authentication")
    return host, int(port)


class P4RuntimeServer:
    """gRPC server threads serving one soft switch; start() returns at once."""

    def __init__(self, switch, addr: str, device_id: int | None = None,
                 mgmt_addr: str | None = None, max_workers: int = MAX_STREAMS + 8):
        raw = getattr(switch.config, "raw", {}) or {}
        self.host, port = check_bind_address(addr, mgmt_addr or raw.get("p4runtime_mgmt_addr"))
        self.target = SoftTarget(switch)
        self.device_id = device_id if device_id is not None else device_id_for(self.target.name, raw)
        self.servicer = SoftP4RuntimeServicer(self.target, self.device_id)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="p4rt"),
            options=[("grpc.so_reuseport", 0),   # a port in use must fail, not be shared
                     ("grpc.max_receive_message_length", 256 << 20),
                     ("grpc.max_send_message_length", 256 << 20)])
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.servicer, self._server)
        bind = f"[{self.host}]:{port}" if ":" in self.host else f"{self.host}:{port}"
        try:
            self.port = self._server.add_insecure_port(bind)
        except RuntimeError as e:
            raise OSError(f"P4Runtime server: cannot listen on {bind} ({e}); is the port in "
                          "use by another switch or run?") from None
        if not self.port:
            raise OSError(f"P4Runtime server: cannot listen on {bind}; is the port in use?")
        self.addr = f"{self.host}:{self.port}"

    def start(self) -> "P4RuntimeServer":
        self._server.start()
        log.info("P4Runtime server for %s (device id %d, program %r) on %s", self.target.name,
                 self.device_id, self.target.program, self.addr)
        return self

    def stop(self, grace: float = 0.5) -> None:
        self._server.stop(grace).wait(grace + 1.0)


def serve(switch, addr: str) -> P4RuntimeServer:
    """The soft switch's hook: start serving `switch` on `addr`; .stop() on exit."""
    return P4RuntimeServer(switch, addr).start()


__all__ = ["P4RuntimeServer", "serve", "check_p4info", "check_bind_address", "device_id_for",
           "ProgramBinding", "P4RTError", "decode_value", "encode_value"]
