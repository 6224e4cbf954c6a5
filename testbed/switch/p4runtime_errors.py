"""What went wrong in a P4Runtime exchange, as the controller reports it: its
error types, and the readers of a failed gRPC call (the call's status line, and
a Write's per-update failures carried in the call's google.rpc.Status details).

    except grpc.RpcError as e:
        raise WriteError("s1", e.code().name, write_errors(e), e.details())
"""
from __future__ import annotations

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as pb


class ControllerError(RuntimeError):
    """A switch refused or could not be reached; the message says which and why."""


class WriteError(ControllerError):
    """A Write failed. `errors`: [(update index, code name, message)]; `code`: the
    call's gRPC code name (UNKNOWN when the failures are per update, as PI reports
    them; e.g. PERMISSION_DENIED with no per-update errors for a backup)."""

    def __init__(self, switch: str, code: str, errors: list[tuple[int, str, str]], detail: str = ""):
        self.code = code
        self.errors = errors
        lines = [f"{switch}: Write failed ({code}){': ' + detail if detail else ''}"]
        lines += [f"  update {i}: {c}: {m}" for i, c, m in errors[:10]]
        if len(errors) > 10:
            lines.append(f"  ... {len(errors) - 10} more")
        super().__init__("\n".join(lines))


def write_errors(e: grpc.RpcError) -> list[tuple[int, str, str]]:
    """Per-update failures of a Write: [(index, code name, message)] from the
    p4.v1.Error list in the call's google.rpc.Status details (OK ones skipped)."""
    out = []
    for key, value in e.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for i, any_ in enumerate(status.details):
            err = pb.Error()
            if any_.Unpack(err) and err.canonical_code != code_pb2.OK:
                out.append((i, code_pb2.Code.Name(err.canonical_code), err.message))
    return out


def rpc_status(e: grpc.RpcError) -> str:
    """A failed call's status as the request log shows it: `CODE: details`."""
    return f"{e.code().name}: {e.details()}"
