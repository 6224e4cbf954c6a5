"""recvmmsg/sendmmsg for the INA worker's UDP socket (ctypes, Linux).

`MmsgUdp(sock, dest, batch)`:
- `recv()` fills `rec` (a numpy structured array over one fixed receive buffer,
  `stride` bytes per datagram) and returns how many datagrams arrived; their
  lengths are in `lens[:n]`. The buffer is reused by the next call.
- `send(base_addr, offs, lens)` sends datagrams that are slices of caller-owned
  memory (base_addr + offs[i], lens[i] bytes) to `dest` in one system call per
  `batch` datagrams: no bytes objects, no per-datagram Python work.
`HAVE_MMSG` is False where libc lacks them; callers then fall back to
recv/sendto.
"""
from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

import numpy as np

from testbed.linux_mmsg import HAVE_MMSG, HDR_SIZE, LEN_IDX, MSG_DONTWAIT, MMsgHdr, recvmmsg, sendmmsg


def _sockaddr_in(addr: tuple[str, int]) -> bytes:
    ip = socket.inet_aton(socket.gethostbyname(addr[0]))
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", int(addr[1])) + ip + bytes(8)


class MmsgUdp:
    def __init__(self, sock: socket.socket, dest: tuple[str, int], rx_dtype: np.dtype,
                 batch: int = 256):
        if not HAVE_MMSG:
            raise OSError(errno.ENOSYS, "recvmmsg/sendmmsg not available")
        self.fd, self.batch = sock.fileno(), batch
        stride = self.stride = rx_dtype.itemsize
        # receive side: `batch` slots of `stride` bytes, viewed as rx_dtype records
        self.rec = np.zeros(batch, rx_dtype)
        base = self.rec.ctypes.data
        self._riov = np.zeros(2 * batch, np.uint64)
        self._riov[0::2] = base + stride * np.arange(batch, dtype=np.uint64)
        self._riov[1::2] = stride
        self._rraw = np.zeros(batch * HDR_SIZE, np.uint8)
        rh = (MMsgHdr * batch).from_buffer(self._rraw)
        riov = self._riov.ctypes.data
        for i in range(batch):
            rh[i].msg_hdr.msg_iov = riov + 16 * i
            rh[i].msg_hdr.msg_iovlen = 1
        self._rhdrs = rh
        self._rptr = ctypes.addressof(rh)
        self.lens = self._rraw.view(np.uint32)[LEN_IDX::HDR_SIZE // 4]
        # send side: iovecs filled per call, all messages addressed to `dest`
        self._name = ctypes.create_string_buffer(_sockaddr_in(dest), 16)
        name = ctypes.addressof(self._name)
        self._siov = np.zeros(2 * batch, np.uint64)
        self._sraw = np.zeros(batch * HDR_SIZE, np.uint8)
        sh = (MMsgHdr * batch).from_buffer(self._sraw)
        siov = self._siov.ctypes.data
        for i in range(batch):
            sh[i].msg_hdr.msg_name = name
            sh[i].msg_hdr.msg_namelen = 16
            sh[i].msg_hdr.msg_iov = siov + 16 * i
            sh[i].msg_hdr.msg_iovlen = 1
        self._shdrs = sh
        self._sptr = ctypes.addressof(sh)
        self.send_errors = 0

    def recv(self) -> int:
        """Non-blocking: datagrams now in rec[:n] (lengths lens[:n])."""
        n = recvmmsg(self.fd, self._rptr, self.batch, MSG_DONTWAIT, None)
        if n < 0:
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EINTR, errno.ECONNREFUSED):
                return 0
            raise OSError(e, os.strerror(e))
        return n

    def send(self, base_addr: int, offs: np.ndarray, lens: np.ndarray) -> int:
        """Send len(offs) datagrams; returns how many the kernel took (the rest
        count as losses in send_errors: the retransmission timers cover them)."""
        total, done, b = len(offs), 0, self.batch
        while done < total:
            k = min(b, total - done)
            iov = self._siov
            iov[0:2 * k:2] = offs[done:done + k]
            iov[0:2 * k:2] += np.uint64(base_addr)
            iov[1:2 * k:2] = lens[done:done + k]
            r = sendmmsg(self.fd, self._sptr, k, 0)
            if r <= 0:
                e = ctypes.get_errno() if r < 0 else 0
                if e == errno.EINTR:
                    continue
                if e == errno.EBADF:
                    raise OSError(e, os.strerror(e))
                r = 1                      # skip the datagram the kernel refused
                self.send_errors += 1
            done += r
        return done
