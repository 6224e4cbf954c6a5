"""PHub's messages on TCP (hosts/common/tcp.py framing): two frames per message,
a uint32 header [kind, job, iteration, n, chunk ids...] and the float32 payload
(the chunks' values, concatenated in header order; empty for END).

  INIT    rank 0 -> core: the initial weights of the core's chunks (once per job)
  PUSH    worker -> core: gradient chunks of one layer that the core owns
  UPDATE  core -> worker: updated weights of chunks whose sum was complete
  END     worker -> core: no more pushes (after the last update arrived)
  TDF     rank 0 -> core: the time dilation the workers agreed on (payload: one
          float32), so the core paces its modeled work at the workers' TDF
          (time_scale auto changes it after every calibration round)
  PREFIX  rack r -> rack r+1 server: the chunks' running sum over ranks of racks 0..r
  SUM     last rack -> the chunk's owner rack: the complete sum
  XUPDATE owner rack -> every other rack server: the updated weights, which it
          forwards to its workers as UPDATE
  (INIT, TDF and END also travel between rack servers: rank 0's rack forwards the
  weights of other racks' chunks and the TDF; END is a server's last message.)
Workers never ask for weights (PHub's pull-request elision): the core sends a
chunk's new weights as soon as its optimizer step ran.

`Link` drives one connection without blocking (a queue of outgoing messages,
the incoming message being assembled), so one thread serves many links with
poll(): a server core all its workers, a worker all the cores.
"""
from __future__ import annotations

import math
import os
import select
import time
from collections import deque
from typing import Callable, Sequence

import numpy as np

from hosts.common.tcp import KIND_DATA, Conn, PeerTimeout, ProtocolError, RecvOp, SendOp

INIT, PUSH, UPDATE, END, TDF = 1, 2, 3, 4, 5
# Between rack servers (cross-rack PHub, hosts/phub/rack.py):
PREFIX, SUM, XUPDATE = 6, 7, 8
KINDS = {INIT: "INIT", PUSH: "PUSH", UPDATE: "UPDATE", END: "END", TDF: "TDF", PREFIX: "PREFIX", SUM: "SUM",
         XUPDATE: "XUPDATE"}
_EMPTY = np.zeros(0, np.float32)


def message_tag(kind: str, job: int, core: int) -> str:
    """The trace tag of a PUSH or UPDATE: one per job and core (jobs sharing a server
    aggregate separately: the projector's server model keeps their rounds apart)."""
    return f"{kind}.j{job}.c{core}"


def header(kind: int, job: int, iteration: int, ids: Sequence[int]) -> np.ndarray:
    h = np.empty(4 + len(ids), np.uint32)
    h[:4] = (kind, job, iteration, len(ids))
    h[4:] = ids
    return h


def parse(h: np.ndarray, peer: str) -> tuple[int, int, int, np.ndarray]:
    """(kind, job, iteration, chunk ids); ProtocolError names the peer on a bad header."""
    if h.dtype != np.uint32 or h.size < 4 or int(h[0]) not in KINDS or h.size != 4 + int(h[3]):
        raise ProtocolError(f"{peer} sent a malformed PHub header ({h.dtype}, {h[:6].tolist()})")
    return int(h[0]), int(h[1]), int(h[2]), h[4:]


class Link:
    """One peer's message stream on a non-blocking connection."""

    def __init__(self, conn: Conn):
        self.conn = conn
        self.out: deque[tuple[np.ndarray, np.ndarray, Callable[[float], None] | None]] = deque()
        self.sending: list[SendOp] = []
        self.on_sent: Callable[[float], None] | None = None
        self.rx = RecvOp(conn, KIND_DATA)
        self.rx_t0: float | None = None
        self.rx_hdr: np.ndarray | None = None
        self.bytes_out = self.bytes_in = 0

    def queue(self, hdr: np.ndarray, payload: np.ndarray | None = None,
              on_sent: Callable[[float], None] | None = None) -> None:
        """Send a message once those before it are out; on_sent(t) when its last byte left."""
        self.out.append((hdr, _EMPTY if payload is None else payload, on_sent))

    @property
    def busy(self) -> bool:
        return bool(self.sending or self.out)

    def pump_send(self) -> bool:
        progressed = False
        while True:
            if not self.sending:
                if not self.out:
                    return progressed
                hdr, payload, self.on_sent = self.out.popleft()
                # Both frames are built now, in order: frame sequence numbers stay in step.
                self.sending = [SendOp(self.conn, KIND_DATA, hdr), SendOp(self.conn, KIND_DATA, payload)]
                self.bytes_out += hdr.nbytes + payload.nbytes
            op = self.sending[0]
            progressed |= op.advance()
            if not op.done:
                return progressed
            self.sending.pop(0)
            if not self.sending and self.on_sent is not None:
                self.on_sent(time.perf_counter())

    def pump_recv(self) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
        """The message completed now, if any: [(header, payload, t first byte seen, t complete)].
        One at a time: after an END the peer may close, and reading on would fail."""
        got = []
        while True:
            if self.rx_t0 is None:
                self.rx_t0 = time.perf_counter()
            if not self.rx.advance() and not self.rx.done:
                return got
            if not self.rx.done:
                continue
            arr = self.rx.array
            self.bytes_in += arr.nbytes
            self.rx = RecvOp(self.conn, KIND_DATA)
            if self.rx_hdr is None:
                if arr.dtype != np.uint32:
                    raise ProtocolError(f"{self.conn.peer} sent {arr.dtype} where a PHub header belongs")
                self.rx_hdr = arr
            else:
                got.append((self.rx_hdr, arr, self.rx_t0, time.perf_counter()))
                self.rx_hdr, self.rx_t0 = None, None
                return got


def poll_links(links: Sequence[Link], timeout_s: float, wake_fd: int | None = None) -> None:
    """Wait until a link can read (always asked) or write (when it has output), or wake_fd."""
    poller = select.poll()
    for ln in links:
        poller.register(ln.conn.sock.fileno(), select.POLLIN | (select.POLLOUT if ln.busy else 0))
    if wake_fd is not None:
        poller.register(wake_fd, select.POLLIN)
    for fd, _ in poller.poll(max(1, math.ceil(timeout_s * 1000))):
        if fd == wake_fd:
            os.read(wake_fd, 4096)


class Stall:
    """No progress on any link for timeout_s: a PeerTimeout naming what was awaited."""

    def __init__(self, timeout_s: float):
        self.timeout_s, self.last = timeout_s, time.monotonic()

    def check(self, progressed: bool, waiting_for: Callable[[], str]) -> None:
        now = time.monotonic()
        if progressed:
            self.last = now
        elif now - self.last > self.timeout_s:
            raise PeerTimeout(f"no PHub message for {self.timeout_s:g} s while waiting for {waiting_for()}")
