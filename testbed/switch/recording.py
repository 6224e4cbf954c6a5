"""The dry run's controller: SwitchController with its gRPC client replaced by
one that records every request (testbed.net.plan.PlanRecorder) and sends none.

All messages are built by SwitchController's own code from the P4Info (the
same tables, actions, groups and register writes a real run sends); only the
transport differs. Reads answer empty (a fresh switch), Get answers the P4Info
just pushed, so install_job's checks pass as on a switch that was just committed.
"""
from __future__ import annotations

from typing import Any

from p4.v1 import p4runtime_pb2 as pb

from testbed.switch.controller import SwitchController
from testbed.switch.p4runtime_log import format_message, loggable


class _RecordingStub:
    def __init__(self, controller: "RecordingController"):
        self.c = controller
        self.pushed: pb.ForwardingPipelineConfig | None = None

    def SetForwardingPipelineConfig(self, req: pb.SetForwardingPipelineConfigRequest):  # noqa: N802
        self.pushed = req.config
        shown, notes = loggable(req)
        dev = req.config.p4_device_config
        desc = (dev.decode() if len(dev) <= 64 and dev.isascii() else f"{len(dev)} bytes")
        self.c.record("SetForwardingPipelineConfig (VERIFY_AND_COMMIT)",
                      "\n".join([*notes, f"p4info file: {self.c.p4info_path}",
                                 f"p4_device_config: {desc}"]))
        return pb.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, req):  # noqa: N802, ARG002
        rep = pb.GetForwardingPipelineConfigResponse()
        if self.pushed is not None:
            rep.config.CopyFrom(self.pushed)
        return rep

    def Write(self, req: pb.WriteRequest):  # noqa: N802
        for u in req.updates:
            line = describe_update(self.c, u)
            self.c.record(f"Write {line}", format_message(u, self.c.log.names))
            if u.entity.HasField("register_entry"):
                self.c.recorder.register_write(self.c.name, "P4Runtime", line)
        return pb.WriteResponse()

    def Read(self, req):  # noqa: N802, ARG002
        return iter(())


def _int(b: bytes) -> str:
    return str(int.from_bytes(b, "big"))


def describe_update(c: SwitchController, u: pb.Update) -> str:
    """One line per update: `INSERT Forward.l2_forward(dst_addr=1) -> Forward.set_egress(port=1)`."""
    kind = pb.Update.Type.Name(u.type)
    e, ctx = u.entity, c.context
    if e.HasField("table_entry"):
        te = e.table_entry
        table = ctx.get_name_from_id(te.table_id)
        match = ", ".join(f"{ctx.get_mf_name(table, m.field_id)}={_int(m.exact.value)}" for m in te.match)
        a = te.action.action
        action = ctx.get_name_from_id(a.action_id) if a.action_id else "(none)"
        params = ", ".join(f"{ctx.get_param_name(action, p.param_id)}={_int(p.value)}" for p in a.params)
        default = " (default)" if te.is_default_action else ""
        return f"{kind} {table}({match}){default} -> {action}({params})"
    if e.HasField("packet_replication_engine_entry"):
        g = e.packet_replication_engine_entry.multicast_group_entry
        reps = ", ".join(f"port {r.egress_port} rid {r.instance}" for r in g.replicas)
        return f"{kind} multicast group {g.multicast_group_id}: [{reps}]"
    if e.HasField("register_entry"):
        r = e.register_entry      # p4runtime-shell's Context does not index registers
        name = next((x.preamble.name for x in c.p4info.registers if x.preamble.id == r.register_id),
                    f"id {r.register_id}")
        return (f"{kind} register {name}[{r.index.index}] = "
                f"{_int(r.data.bitstring)}")
    return f"{kind} {e.WhichOneof('entity')}"


class _RecordingClient:
    def __init__(self, controller: "RecordingController"):
        self.stub = _RecordingStub(controller)

    def tear_down(self) -> None:
        pass


class RecordingController(SwitchController):
    """SwitchController(..., recorder=PlanRecorder): connects to nothing."""

    def __init__(self, *args: Any, recorder: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.recorder = recorder

    def record(self, rpc: str, message: str) -> None:
        self.recorder.p4runtime(self.name, rpc, message)

    def connect(self, push_pipeline: bool = True, require_primary: bool = True) -> "RecordingController":  # noqa: ARG002
        self.client = _RecordingClient(self)   # arbitration: we would be primary on a fresh switch
        self.primary = True
        self.record(f"StreamChannel arbitration -> {self.grpc_addr} (device {self.device_id})",
                    f"election_id {self.election_id[0]}:{self.election_id[1]}")
        if push_pipeline:
            self.set_pipeline()
        return self
