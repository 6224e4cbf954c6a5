"""The INA worker's real socket: `UdpIo`, a UDP socket with recvmmsg/sendmmsg
bursts (hosts/ina/_mmsg.py) where libc has them."""
from __future__ import annotations

import select
import socket

import numpy as np

from hosts.ina import _mmsg
from hosts.ina.chunks import RX_DTYPE


class UdpIo:
    """A UDP socket bound to the worker's ip:port, sending to the switch.

    switch: (ip, port) the switch receives on: Mininet (10.0.0.254, INA port),
    local mode the soft switch's UDP endpoint for this worker's port. Results
    arrive from the switch at the bound address; the client checks their header.

    Besides send/recv, where libc has recvmmsg/sendmmsg (Linux), `recv_block`
    and `send_many` move bursts of datagrams in one system call each; the
    client uses them for whole windows of chunks (mmsg=False: plain calls only).
    gso=True: runs of equal-length chunks go as UDP GSO messages (the datagrams on
    the wire are the same); only where the network allows it (InaSettings.gso)."""

    def __init__(self, bind: tuple[str, int], switch: tuple[str, int], rcvbuf: int = 4 << 20,
                 *, mmsg: bool = True, batch: int = 256, gso: bool = False):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
            s.bind(bind)
        except OSError as e:
            s.close()
            raise OSError(e.errno, f"INA worker socket: cannot bind {bind[0]}:{bind[1]}: "
                                   f"{e.strerror or e}") from None
        s.setblocking(False)
        self.sock, self.bind, self.switch = s, bind, tuple(switch)
        self._send_errors = 0
        self._mm = None
        if mmsg and _mmsg.HAVE_MMSG:
            try:
                self._mm = _mmsg.MmsgUdp(s, self.switch, RX_DTYPE, batch, gso=gso)
            except OSError:
                self._mm = None
        if self._mm is not None:
            self.recv_block = self._recv_block
            self.send_many = self._mm.send
        self._empty = np.zeros(0, np.uint32)

    @property
    def send_errors(self) -> int:
        return self._send_errors + (self._mm.send_errors if self._mm is not None else 0)

    @property
    def gso(self) -> bool:
        """Whether bursts go as UDP GSO messages (False once the kernel refused one)."""
        return self._mm is not None and self._mm.gso

    @gso.setter
    def gso(self, on: bool) -> None:
        if self._mm is not None:
            self._mm.gso = on

    @property
    def gso_msgs(self) -> int:
        return self._mm.gso_msgs if self._mm is not None else 0

    def loop_socket(self) -> tuple[int, bytes] | None:
        """(fd, the switch's sockaddr_in) for the compiled loop (hosts/ina/hostloop.py),
        which then reads and writes the socket itself; None without recvmmsg/sendmmsg."""
        if self._mm is None:
            return None
        return self.sock.fileno(), bytes(self._mm._name)[:16]

    def count_send_errors(self, n: int) -> None:
        """Datagrams the compiled loop's sendmmsg could not send (losses, as send's)."""
        self._send_errors += n

    def send(self, payload: bytes) -> None:
        try:
            self.sock.sendto(payload, self.switch)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError, OSError):
            self._send_errors += 1     # treated as a loss: the retransmission timer covers it

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            pass
        except ConnectionRefusedError:
            return None
        if timeout <= 0:
            return None
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return None
        try:
            return self.sock.recv(4096)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError):
            return None

    def _recv_block(self, timeout: float) -> tuple[np.ndarray, np.ndarray]:
        """A burst: (RX_DTYPE records, lengths), valid until the next call."""
        mm = self._mm
        n = mm.recv()
        if n == 0:
            if timeout <= 0:
                return mm.rec, self._empty
            r, _, _ = select.select([self.sock], [], [], timeout)
            if not r:
                return mm.rec, self._empty
            n = mm.recv()
        return mm.rec, mm.lens[:n]

    def close(self) -> None:
        self.sock.close()

    def __repr__(self) -> str:
        return f"UdpIo({self.bind[0]}:{self.bind[1]} -> {self.switch[0]}:{self.switch[1]})"
