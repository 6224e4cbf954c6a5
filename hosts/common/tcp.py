"""Framed numpy arrays over TCP, with every wait bounded by a timeout.

Frame = 20-byte header + raw little-endian payload:
    magic "HAR1" | kind u8 | dtype u8 | reserved u16 | seq u32 | count u64   (network order)
`seq` counts frames per connection direction; both ends count, so a host that
gets out of step with its peer fails loudly instead of mixing up tensors.

Sockets are non-blocking and driven by `exchange()`, which progresses any
number of sends and receives at once (poll). Sending and receiving at the same
time is what keeps a ring of large tensors from deadlocking on full socket
buffers. A timeout means *no progress at all* for timeout_s, so a big tensor on
a slow link is not cut off while it is still moving.
"""
from __future__ import annotations

import errno
import json
import math
import select
import socket
import struct
import time
from typing import Any, Callable, Hashable, Sequence

import numpy as np

MAGIC = b"HAR1"
HEADER = struct.Struct("!4sBBHIQ")
SEQ_MASK = 0xFFFFFFFF

KIND_HELLO, KIND_DATA, KIND_BARRIER = 1, 2, 3
KIND_NAMES = {KIND_HELLO: "HELLO", KIND_DATA: "DATA", KIND_BARRIER: "BARRIER"}

_DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i4"),
           4: np.dtype("<i8"), 5: np.dtype("u1"), 6: np.dtype("<u4")}
_CODES = {dt.str: code for code, dt in _DTYPES.items()}

MAX_HELLO_BYTES = 1 << 20


class NetError(Exception):
    """A peer or the network failed; the message says which peer and what to check."""


class PeerUnreachable(NetError):
    pass


class PeerTimeout(NetError):
    pass


class PeerClosed(NetError):
    pass


class ProtocolError(NetError):
    pass


# --- header (pure functions, unit-testable) ---------------------------------

def pack_header(kind: int, dtype: np.dtype, seq: int, count: int) -> bytes:
    return HEADER.pack(MAGIC, kind, _CODES[np.dtype(dtype).str], 0, seq & SEQ_MASK, count)


def unpack_header(buf: bytes | bytearray) -> tuple[int, np.dtype, int, int]:
    """-> (kind, dtype, seq, count); ProtocolError on anything malformed."""
    magic, kind, code, _, seq, count = HEADER.unpack(bytes(buf))
    if magic != MAGIC:
        raise ProtocolError(f"bad frame magic {magic!r}: not an allreduce peer, or the stream is corrupt")
    if kind not in KIND_NAMES:
        raise ProtocolError(f"unknown frame kind {kind}")
    if code not in _DTYPES:
        raise ProtocolError(f"unknown dtype code {code}")
    return kind, _DTYPES[code], seq, count


def as_wire(arr: np.ndarray) -> np.ndarray:
    """1-D, C-contiguous, little-endian view (or copy) of `arr` in a wire dtype."""
    arr = np.ascontiguousarray(arr).reshape(-1)
    if arr.dtype.str not in _CODES:
        arr = arr.astype(arr.dtype.newbyteorder("<"))
        if arr.dtype.str not in _CODES:
            raise TypeError(f"dtype {arr.dtype} cannot be sent (supported: {sorted(_CODES)})")
    return arr


# --- connections and operations ---------------------------------------------

class Conn:
    """A non-blocking TCP connection to one named peer."""

    def __init__(self, sock: socket.socket, peer: str, timeout_s: float):
        sock.setblocking(False)
        # Small frames (barriers, tiny tensors) must not wait for Nagle.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.peer = peer
        self.timeout_s = timeout_s
        self.send_seq = 0
        self.recv_seq = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class SendOp:
    EVENT = select.POLLOUT

    def __init__(self, conn: Conn, kind: int, arr: np.ndarray | None = None):
        arr = as_wire(arr) if arr is not None else np.empty(0, dtype="<f4")
        hdr = pack_header(kind, arr.dtype, conn.send_seq, arr.size)
        conn.send_seq = (conn.send_seq + 1) & SEQ_MASK
        self.conn = conn
        self.what = f"sending {KIND_NAMES[kind]} to {conn.peer}"
        self._bufs = [memoryview(hdr)]
        if arr.nbytes:
            self._bufs.append(memoryview(arr.view(np.uint8)))
        self.done = False

    def advance(self) -> bool:
        """Send what the socket takes now; True if any byte went out."""
        progressed = False
        while self._bufs:
            try:
                n = self.conn.sock.sendmsg(self._bufs)
            except (BlockingIOError, InterruptedError):
                return progressed
            except OSError as e:
                raise PeerClosed(f"{self.what} failed: {e.strerror or e} "
                                 f"(the peer probably exited; see its log)") from None
            progressed = True
            while n:
                head = self._bufs[0]
                if n >= len(head):
                    n -= len(head)
                    self._bufs.pop(0)
                else:
                    self._bufs[0] = head[n:]
                    n = 0
        self.done = True
        return progressed


class RecvOp:
    EVENT = select.POLLIN

    def __init__(self, conn: Conn, kind: int, out: np.ndarray | None = None,
                 max_bytes: int = 1 << 34):
        if out is not None and not (out.ndim == 1 and out.flags.c_contiguous):
            raise ValueError("receive buffer must be 1-D and contiguous")
        self.conn = conn
        self.kind = kind
        self.out = out
        self.max_bytes = max_bytes
        self.what = f"receiving {KIND_NAMES[kind]} from {conn.peer}"
        self._hdr = bytearray(HEADER.size)
        self._view = memoryview(self._hdr)
        self._off = 0
        self._in_header = True
        self.array: np.ndarray | None = None
        self.done = False

    def _start_payload(self) -> None:
        kind, dtype, seq, count = unpack_header(self._hdr)
        peer = self.conn.peer
        if kind != self.kind:
            raise ProtocolError(f"expected {KIND_NAMES[self.kind]} from {peer} but got {KIND_NAMES[kind]}: "
                                "the hosts are out of step (do their configs match?)")
        if seq != self.conn.recv_seq:
            raise ProtocolError(f"frame {seq} from {peer}, expected {self.conn.recv_seq}: hosts out of step")
        self.conn.recv_seq = (seq + 1) & SEQ_MASK
        if self.out is not None:
            if dtype != self.out.dtype.newbyteorder("<") or count != self.out.size:
                raise ProtocolError(f"{peer} sent {count} x {dtype}, expected {self.out.size} x {self.out.dtype} "
                                    "(do the hosts' configs match?)")
            self.array = self.out
        else:
            if count * dtype.itemsize > self.max_bytes:
                raise ProtocolError(f"{peer} announced {count * dtype.itemsize} bytes, limit {self.max_bytes}")
            self.array = np.empty(count, dtype=dtype)
        self._view = memoryview(self.array.view(np.uint8))
        self._off = 0
        self._in_header = False
        if len(self._view) == 0:
            self.done = True

    def advance(self) -> bool:
        """Read what has arrived; True if any byte came in."""
        progressed = False
        while not self.done:
            try:
                n = self.conn.sock.recv_into(self._view[self._off:])
            except (BlockingIOError, InterruptedError):
                return progressed
            except OSError as e:
                raise PeerClosed(f"{self.what} failed: {e.strerror or e} "
                                 f"(the peer probably exited; see its log)") from None
            if n == 0:
                raise PeerClosed(f"{self.conn.peer} closed the connection while we were {self.what} "
                                 "(it probably failed or exited early; see its log)")
            progressed = True
            self._off += n
            if self._off == len(self._view):
                if self._in_header:
                    self._start_payload()
                else:
                    self.done = True
        return progressed


def exchange(sends: Sequence[SendOp], recvs: Sequence[RecvOp], timeout_s: float) -> None:
    """Drive all operations to completion concurrently.

    Raises PeerTimeout if none of them makes progress for timeout_s seconds.
    """
    pending: list[SendOp | RecvOp] = [*sends, *recvs]
    last_progress = time.monotonic()
    while True:
        progressed = False
        for op in pending:
            if op.advance():
                progressed = True
        pending = [op for op in pending if not op.done]
        if not pending:
            return
        now = time.monotonic()
        if progressed:
            last_progress = now
        remaining = timeout_s - (now - last_progress)
        if remaining <= 0:
            stuck = "; ".join(op.what for op in pending)
            raise PeerTimeout(f"no progress for {timeout_s:g} s while {stuck} "
                              "(peer hung, crashed, or unreachable; see its log)")
        masks: dict[int, int] = {}
        for op in pending:
            fd = op.conn.sock.fileno()
            masks[fd] = masks.get(fd, 0) | op.EVENT
        poller = select.poll()
        for fd, mask in masks.items():
            poller.register(fd, mask)
        poller.poll(max(1, math.ceil(remaining * 1000)))


def send_array(conn: Conn, arr: np.ndarray, kind: int = KIND_DATA) -> None:
    exchange([SendOp(conn, kind, arr)], [], conn.timeout_s)


def recv_array(conn: Conn, out: np.ndarray | None = None, kind: int = KIND_DATA) -> np.ndarray:
    op = RecvOp(conn, kind, out)
    exchange([], [op], conn.timeout_s)
    assert op.array is not None
    return op.array


def send_json(conn: Conn, obj: Any) -> None:
    data = np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)
    send_array(conn, data, KIND_HELLO)


def recv_json(conn: Conn, timeout_s: float | None = None) -> Any:
    op = RecvOp(conn, KIND_HELLO, max_bytes=MAX_HELLO_BYTES)
    exchange([], [op], conn.timeout_s if timeout_s is None else timeout_s)
    try:
        return json.loads(op.array.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"unreadable HELLO from {conn.peer}: {e}") from None


# --- setup: listen, connect with retry, accept --------------------------------

def listen(ip: str, port: int, backlog: int = 64) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((ip, port))
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        hint = {errno.EADDRINUSE: "another process (an earlier run?) holds the port",
                errno.EADDRNOTAVAIL: f"{ip} is not an address of this host"}.get(e.errno, "")
        raise NetError(f"cannot listen on {ip}:{port}: {e.strerror or e}"
                       + (f"; {hint}" if hint else "")) from None
    sock.setblocking(False)
    return sock


def connect_with_retry(ip: str, port: int, *, peer: str, connect_timeout_s: float,
                       io_timeout_s: float, src_ip: str | None = None) -> Conn:
    """Connect, retrying (the peer may not listen yet) until connect_timeout_s."""
    deadline = time.monotonic() + connect_timeout_s
    delay = 0.02
    last_err = "no attempt"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PeerUnreachable(
                f"could not connect to {peer} at {ip}:{port} within {connect_timeout_s:g} s "
                f"(last error: {last_err}); did it start? (see its log)")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if src_ip:
                # Use this host's own address, so local mode's 127.0.1.x hosts look
                # like separate hosts on the wire too.
                sock.bind((src_ip, 0))
            sock.settimeout(min(remaining, 2.0))
            sock.connect((ip, port))
            return Conn(sock, peer, io_timeout_s)
        except OSError as e:
            sock.close()
            last_err = e.strerror or str(e) or type(e).__name__
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.25)


def accept_one(server: socket.socket, *, waiting_for: str, timeout_s: float) -> socket.socket:
    """Accept one connection within timeout_s, else PeerTimeout naming who we waited for."""
    deadline = time.monotonic() + timeout_s
    poller = select.poll()
    poller.register(server.fileno(), select.POLLIN)
    while True:
        try:
            sock, _ = server.accept()
            return sock
        except (BlockingIOError, InterruptedError):
            pass
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            ip, port = server.getsockname()[:2]
            raise PeerTimeout(f"{waiting_for} did not connect to {ip}:{port} within {timeout_s:g} s; "
                              "did it start? (see its log)")
        poller.poll(max(1, math.ceil(remaining * 1000)))


def accept_until(server: socket.socket, expected: set, handshake: Callable[[Conn, float], tuple[Hashable, Any]],
                 *, what: str, connect_timeout_s: float, io_timeout_s: float) -> dict[Hashable, Conn]:
    """Accept on `server` until every key of `expected` has its connection, within
    connect_timeout_s in all. `handshake(conn, seconds_left)` reads and checks the
    peer's hello, names the peer (conn.peer) and returns (its key, our answer); the
    answer is sent (JSON) once the key is known to be expected and new, else
    ProtocolError. On any failure every connection accepted so far is closed.
    `what` names the peers in errors."""
    conns: dict[Hashable, Conn] = {}
    deadline = time.monotonic() + connect_timeout_s
    try:
        while len(conns) < len(expected):
            missing = sorted(expected - set(conns))
            sock = accept_one(server, waiting_for=f"{what} {missing[:6]}",
                              timeout_s=max(0.5, deadline - time.monotonic()))
            conn = Conn(sock, f"a connecting {what.rstrip('s')}", io_timeout_s)
            try:
                key, answer = handshake(conn, max(1.0, deadline - time.monotonic()))
                if key not in expected or key in conns:
                    raise ProtocolError(f"unexpected or duplicate {conn.peer} (waiting for {what} {missing[:6]})")
                send_json(conn, answer)
            except BaseException:
                conn.close()
                raise
            conns[key] = conn
    except BaseException:
        for c in conns.values():
            c.close()
        raise
    return conns


# --- barriers -------------------------------------------------------------------

def ring_barrier(left: Conn | None, right: Conn | None, world: int, timeout_s: float) -> None:
    """N-1 rounds of pass-to-the-right: afterwards every rank has (transitively)
    heard from every other, i.e. all have entered the barrier."""
    for _ in range(world - 1):
        exchange([SendOp(right, KIND_BARRIER)], [RecvOp(left, KIND_BARRIER)], timeout_s)


def star_barrier_leader(members: Sequence[Conn], timeout_s: float) -> None:
    """Hub side: wait for every member's token, then release them all."""
    exchange([], [RecvOp(c, KIND_BARRIER) for c in members], timeout_s)
    exchange([SendOp(c, KIND_BARRIER) for c in members], [], timeout_s)


def star_barrier_member(hub: Conn, timeout_s: float) -> None:
    exchange([SendOp(hub, KIND_BARRIER)], [RecvOp(hub, KIND_BARRIER)], timeout_s)
