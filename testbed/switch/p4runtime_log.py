"""The P4Runtime request log: every request and response a controller exchanges
with one switch, appended in protobuf text format with P4Info names next to the
ids they stand for (one file per switch in the run folder,
`logs/<point>/<switch>-p4runtime-requests.txt`).

    log = RequestLog(path, "s1"); log.names = {33554433: "Forward.l2_forward", ...}
    token = log.request("Write", req); ...; log.response("Write", token, status="OK")

Large messages are shortened for the reader (`loggable`): P4Info and big device
configs summarized by size and digest, long update/entity lists cut to
LOG_MAX_ITEMS. The dry run's recorder (testbed/switch/recording.py) formats its
plan with the same functions.
"""
from __future__ import annotations

import hashlib
import re
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Iterable

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

LOG_MAX_ITEMS = 32           # updates/entities shown per logged message; the rest are counted

_ID_LINE = re.compile(r"^(\s*)(table_id|action_id|counter_id|register_id|id): (\d+)$")


def format_message(msg, names: dict[int, str] | None = None) -> str:
    """A protobuf message as text format; P4Info names follow the ids they stand for."""
    text = text_format.MessageToString(msg)
    if not names:
        return text.rstrip("\n")
    out = []
    for line in text.splitlines():
        m = _ID_LINE.match(line)
        if m and int(m.group(3)) in names:
            line = f"{line}  # {names[int(m.group(3))]}"
        out.append(line)
    return "\n".join(out)


def summarize_p4info(p4info: p4info_pb2.P4Info) -> str:
    digest = hashlib.sha256(p4info.SerializeToString(deterministic=True)).hexdigest()[:16]
    return (f"{len(p4info.tables)} tables, {len(p4info.actions)} actions, "
            f"{len(p4info.counters)} counters, {len(p4info.registers)} registers; sha256 {digest}")


def loggable(msg):
    """The message as the log shows it: P4Info and large device configs summarized,
    long update/entity lists cut to LOG_MAX_ITEMS. Returns (message, comment lines)."""
    notes: list[str] = []
    cfg = None
    if isinstance(msg, pb.SetForwardingPipelineConfigRequest) and msg.HasField("config"):
        msg = copy_message(msg)
        cfg = msg.config
    elif isinstance(msg, pb.GetForwardingPipelineConfigResponse):
        msg = copy_message(msg)
        cfg = msg.config
    if cfg is not None:
        if cfg.HasField("p4info"):
            notes.append(f"p4info: {summarize_p4info(cfg.p4info)}")
            cfg.ClearField("p4info")
        dev = cfg.p4_device_config
        if len(dev) > 64:
            notes.append(f"p4_device_config: {len(dev)} bytes, sha256 "
                         f"{hashlib.sha256(dev).hexdigest()[:16]}")
            cfg.ClearField("p4_device_config")
    for field in ("updates", "entities"):
        if hasattr(msg, field) and len(getattr(msg, field)) > LOG_MAX_ITEMS:
            n = len(getattr(msg, field))
            msg = _head(msg, field, LOG_MAX_ITEMS)
            notes.append(f"{field}: {n} in total, the first {LOG_MAX_ITEMS} shown")
    return msg, notes


def _head(msg, field: str, n: int):
    """`msg` with only the first n items of its repeated `field` (no full copy)."""
    head = type(msg)()
    for f, v in msg.ListFields():
        if f.name == field:
            getattr(head, field).extend(v[:n])
        elif f.label == f.LABEL_REPEATED:
            getattr(head, f.name).extend(v)
        elif f.message_type is not None:
            getattr(head, f.name).CopyFrom(v)
        else:
            setattr(head, f.name, v)
    return head


def copy_message(msg):
    """A deep copy of a protobuf message."""
    c = type(msg)()
    c.CopyFrom(msg)
    return c


class RequestLog:
    """Append-only, human-readable record of one switch's P4Runtime traffic."""

    def __init__(self, path: str | Path, switch: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.switch = switch
        self.names: dict[int, str] = {}
        self._lock = threading.Lock()
        self._seq = 0
        self.path.touch()

    def _stamp(self) -> str:
        return datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    def request(self, rpc: str, msg=None, note: str = "") -> tuple[int, float]:
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._emit(f"==== {self._stamp()} {self.switch} -> {rpc} #{seq}"
                       + (f"  ({note})" if note else ""), msg)
        return seq, time.monotonic()

    def response(self, rpc: str, token: tuple[int, float], msg=None, status: str = "OK",
                 notes: Iterable[str] = ()) -> None:
        seq, t0 = token
        with self._lock:
            self._emit(f"---- {self._stamp()} {self.switch} <- {rpc} #{seq} {status} "
                       f"({(time.monotonic() - t0) * 1e3:.1f} ms)", msg, notes)

    def _emit(self, head: str, msg, extra: Iterable[str] = ()) -> None:
        lines = [head] + [f"# {n}" for n in extra]
        if msg is not None:
            shown, notes = loggable(msg)
            lines += [f"# {n}" for n in notes]
            body = format_message(shown, self.names)
            if body:
                lines.append(body)
        # opened per record: nothing to leak when a controller is never closed
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def close(self) -> None:
        """Nothing held open (kept for symmetry with the controller)."""
