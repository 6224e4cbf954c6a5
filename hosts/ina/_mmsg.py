"""recvmmsg/sendmmsg for the INA worker's UDP socket (ctypes, Linux).

`MmsgUdp(sock, dest, batch)`:
- `recv()` fills `rec` (a numpy structured array over one fixed receive buffer,
  `stride` bytes per datagram) and returns how many datagrams arrived; their
  lengths are in `lens[:n]`. The buffer is reused by the next call.
- `send(base_addr, offs, lens)` sends datagrams that are slices of caller-owned
  memory (base_addr + offs[i], lens[i] bytes) to `dest` in one system call per
  `batch` datagrams: no bytes objects, no per-datagram Python work. With
  `gso`, each run of equal-length datagrams (`gso_groups`) goes as
  one UDP GSO message, which the kernel cuts back into those datagrams after one
  pass through its output path; a message it refuses goes datagram by datagram,
  and a refusal of GSO itself turns it off for the socket.
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

SOL_UDP, UDP_SEGMENT = 17, 103
GSO_MAX_SEGS = 64            # the kernel's UDP_MAX_SEGMENTS up to Linux 6.8 (hosts/ina/_hostpath.c)
# errors that say the kernel or the route cannot do UDP GSO at all
GSO_REFUSALS = (errno.EIO, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOPROTOOPT)
# one control message: cmsg_len, level, type, then the segment size (CMSG_SPACE(2) bytes)
_CMSG = np.dtype([("len", "<u8"), ("level", "<i4"), ("type", "<i4"), ("seg", "<u2"), ("pad", "V6")])
_HDR_WORDS = HDR_SIZE // 8   # an mmsghdr as 64-bit words: name, namelen, iov, iovlen, control, controllen, ...


def gso_groups(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first datagram, count) of each GSO message: the runs of equal length, at
    most GSO_MAX_SEGS long (the compiled loop's gso_groups applies the same rule)."""
    n = len(lens)
    brk = np.flatnonzero(lens[1:] != lens[:-1]) + 1
    starts = np.concatenate(([0], brk))
    ends = np.append(brk, n)
    if (ends - starts > GSO_MAX_SEGS).any():
        starts = np.concatenate([np.arange(a, b, GSO_MAX_SEGS) for a, b in zip(starts, ends)])
    return starts, np.diff(np.append(starts, n))


def _sockaddr_in(addr: tuple[str, int]) -> bytes:
    ip = socket.inet_aton(socket.gethostbyname(addr[0]))
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", int(addr[1])) + ip + bytes(8)


class MmsgUdp:
    def __init__(self, sock: socket.socket, dest: tuple[str, int], rx_dtype: np.dtype,
                 batch: int = 256, *, gso: bool = False):
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
        siov = self._siov_addr = self._siov.ctypes.data
        for i in range(batch):
            sh[i].msg_hdr.msg_name = name
            sh[i].msg_hdr.msg_namelen = 16
            sh[i].msg_hdr.msg_iov = siov + 16 * i
            sh[i].msg_hdr.msg_iovlen = 1
        self._shdrs = sh
        self._sptr = ctypes.addressof(sh)
        # GSO messages: their headers (as 64-bit words) and control messages
        self.gso, self.gso_msgs = gso, 0
        self._graw = np.zeros(batch * HDR_SIZE, np.uint8)
        self._gwords = self._graw.view(np.uint64).reshape(batch, _HDR_WORDS)
        self._gwords[:, 0] = name
        self._gwords[:, 1] = 16
        self._gptr = self._graw.ctypes.data
        self._cmsg = np.zeros(batch, _CMSG)
        self._cmsg["len"] = 16 + 2           # CMSG_LEN(sizeof(uint16_t))
        self._cmsg["level"], self._cmsg["type"] = SOL_UDP, UDP_SEGMENT
        self._cmsg_base = self._cmsg.ctypes.data
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
            if self.gso and k > 1:
                self._send_gso(np.asarray(lens[done:done + k]))
            else:
                self._send_plain(0, k)
            done += k
        return done

    def _send_plain(self, first: int, k: int) -> None:
        """Datagrams first..first+k-1 of the iovecs now set, one message each."""
        done = 0
        while done < k:
            r = sendmmsg(self.fd, self._sptr + HDR_SIZE * (first + done), k - done, 0)
            if r <= 0:
                e = ctypes.get_errno() if r < 0 else 0
                if e == errno.EINTR:
                    continue
                if e == errno.EBADF:
                    raise OSError(e, os.strerror(e))
                r = 1                      # skip the datagram the kernel refused
                self.send_errors += 1
            done += r

    def _send_gso(self, lens: np.ndarray) -> None:
        """The len(lens) datagrams whose iovecs are set, as GSO messages."""
        starts, counts = gso_groups(lens)
        g = len(starts)
        w = self._gwords
        w[:g, 2] = self._siov_addr + 16 * starts.astype(np.uint64)
        w[:g, 3] = counts
        multi = counts > 1
        w[:g, 4] = np.where(multi, self._cmsg_base + _CMSG.itemsize * np.arange(g, dtype=np.uint64), 0)
        w[:g, 5] = np.where(multi, _CMSG.itemsize, 0)
        self._cmsg["seg"][:g] = lens[starts]
        done = 0
        while done < g:
            r = sendmmsg(self.fd, self._gptr + HDR_SIZE * done, g - done, 0)
            if r > 0:
                self.gso_msgs += r
                done += r
                continue
            e = ctypes.get_errno() if r < 0 else 0
            if e == errno.EINTR:
                continue
            if e == errno.EBADF:
                raise OSError(e, os.strerror(e))
            if e in GSO_REFUSALS:              # no GSO here: the rest one message per datagram
                self.gso = False
                self._send_plain(int(starts[done]), len(lens) - int(starts[done]))
                return
            self._send_plain(int(starts[done]), int(counts[done]))
            done += 1
