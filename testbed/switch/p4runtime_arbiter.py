"""P4Runtime mastership for the soft switch's service: one StreamChannel per
client; the highest election id is primary, the others backups; every client is
told when that changes (testbed/switch/p4runtime_server.py serves it)."""
from __future__ import annotations

import itertools
import logging
import queue
import threading

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from testbed.switch.p4runtime_binding import P4RTError

log = logging.getLogger("p4runtime")
SC = grpc.StatusCode
MAX_STREAMS = 8              # each open StreamChannel holds one server thread


def election_int(eid: pb.Uint128) -> int:
    return (eid.high << 64) | eid.low


def election_str(v: int | None) -> str:
    return "none" if v is None else f"{v >> 64}:{v & ((1 << 64) - 1)}"



# --- arbitration -------------------------------------------------------------------

class _Conn:
    """One StreamChannel."""
    _ids = itertools.count(1)

    def __init__(self, peer: str):
        self.id = next(self._ids)
        self.peer = f"client #{self.id} ({peer})"   # channels to one address share a peer
        self.election_id: int | None = None
        self.out: queue.Queue = queue.Queue()   # ("resp", msg) | ("req", msg) | ("end", None)


class Arbiter:
    """Primary/backup election among the streams of one device (default role)."""

    def __init__(self, device_id: int):
        self.device_id = device_id
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}

    def open(self, conn: _Conn) -> None:
        with self._lock:
            if len(self._conns) >= MAX_STREAMS:
                raise P4RTError(SC.RESOURCE_EXHAUSTED,
                                f"too many StreamChannels ({MAX_STREAMS}); close unused clients")
            self._conns[conn.id] = conn

    def _primary(self) -> _Conn | None:
        elected = [c for c in self._conns.values() if c.election_id is not None]
        return max(elected, key=lambda c: c.election_id) if elected else None

    def primary_election_id(self) -> int | None:
        with self._lock:
            p = self._primary()
            return None if p is None else p.election_id

    def arbitrate(self, conn: _Conn, election_id: int) -> None:
        with self._lock:
            for c in self._conns.values():
                if c is not conn and c.election_id == election_id:
                    raise P4RTError(SC.INVALID_ARGUMENT,
                                    f"election id {election_str(election_id)} is already used by "
                                    "another client; each client needs its own")
            before = self._primary()
            conn.election_id = election_id
            after = self._primary()
            if after is not before:
                log.info("P4Runtime: primary is now %s (election id %s)", after.peer,
                         election_str(after.election_id))
                self._notify_all()
            else:
                self._notify(conn, after)

    def leave(self, conn: _Conn) -> None:
        with self._lock:
            before = self._primary()
            if self._conns.pop(conn.id, None) is None:
                return
            if conn is before:   # the primary left: promote the next highest, tell everyone
                new = self._primary()
                log.info("P4Runtime: primary %s left; %s", conn.peer,
                         f"promoted {new.peer} (election id {election_str(new.election_id)})"
                         if new else "no client left")
                self._notify_all()

    def _notify_all(self) -> None:
        p = self._primary()
        for c in self._conns.values():
            if c.election_id is not None:
                self._notify(c, p)

    def _notify(self, conn: _Conn, primary: _Conn | None) -> None:
        msg = pb.StreamMessageResponse()
        arb = msg.arbitration
        arb.device_id = self.device_id
        if primary is not None:
            arb.election_id.high = primary.election_id >> 64
            arb.election_id.low = primary.election_id & ((1 << 64) - 1)
        if conn is primary:
            arb.status.code = code_pb2.OK
            arb.status.message = "primary"
        else:
            arb.status.code = code_pb2.ALREADY_EXISTS
            arb.status.message = ("backup: a client with a higher election id "
                                  f"({election_str(primary.election_id)}) is primary")
        conn.out.put(("resp", msg))


