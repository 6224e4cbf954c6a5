"""Packet I/O for the soft switch: one `PortIO` per switch port.

- `AfPacketPort`: an AF_PACKET/SOCK_RAW socket bound to one interface, in one
  of three modes (the switch's `io_impl` picks the first two; io_impl
  "ring_fastpath" opens "mmap_ring" ports, which fastloop.py's compiled loop
  reads directly when it can):
  "mmap_ring": receives from a PACKET_MMAP ring and sends with sendmmsg, both
  in C (_pktio.c, built by `make setup`; no system call per received batch);
  "mmsg": recvmmsg/sendmmsg through ctypes (no compiled code needed);
  "drain": a non-blocking recv/send loop, when libc lacks recvmmsg.
- `UdpPortIO`: a "port" that is a UDP socket on loopback, each datagram one
  Ethernet frame (rootless local mode).

The switch loop only uses the `PortIO` methods: fileno, recv_batch,
send_batch, stats, close.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import socket
import struct
from typing import Protocol

import numpy as np

from testbed import cext
from testbed.linux_mmsg import (FLAGS_IDX, HAVE_MMSG, HDR_SIZE, LEN_IDX, MSG_DONTWAIT, MSG_TRUNC,
                                IoVec, MMsgHdr, recvmmsg, sendmmsg)

_pktio, PKTIO_IMPORT_ERROR = cext.load("testbed.switch.soft._pktio")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23  # not exported by Python's socket module
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32

# io_impls whose ports receive through a PACKET_MMAP ring: ring_fastpath is
# mmap_ring ports read by the compiled loop (fastloop.py) when it can.
RING_IMPLS = ("ring_fastpath", "mmap_ring")

# Receive ring per port. A port whose link the switch shapes (config ingress_mbps)
# holds that link's queue in its ring: 8 MiB, 4096 slots of 2 KiB, as much as the
# socket buffer of the mmsg path. An unshaped port's ring only absorbs the times the
# switch process waits for a core while frames keep arriving (a 4096-slot ring is
# 8 ms at 500k frames/s; bench/switch_forwarding.py's no-drop rate was 0.73x the
# Linux bridge's with it, 0.87-0.94x with 32 MiB): deeper, within a budget per
# switch, as its pages are the kernel's.
RING_BYTES = 8 << 20
UNSHAPED_RING_MAX_BYTES = 32 << 20
RING_BUDGET_BYTES = 256 << 20


def rx_ring_bytes(shaped: bool, ports: int) -> int:
    """One port's receive ring on a switch with `ports` ring ports (see above)."""
    if shaped:
        return RING_BYTES
    return max(RING_BYTES, min(UNSHAPED_RING_MAX_BYTES, RING_BUDGET_BYTES // max(1, ports)))


def ring_available() -> bool:
    """The compiled ring I/O (_pktio.c) was built by `make setup`."""
    return _pktio is not None


def resolve_io_impl(requested: str | None) -> str:
    """The switch's io_impl: as asked, or ring_fastpath when built, else mmsg
    (logged; the switch stats say which ran). Asking for a ring unbuilt is an error."""
    if requested in RING_IMPLS and _pktio is None:
        raise ValueError(f"io_impl: {requested} is not built ({PKTIO_IMPORT_ERROR}); run `make setup` "
                         f"(scripts/build_fastpath.py) or use io_impl: mmsg")
    if requested is not None:
        return requested
    if _pktio is None:
        logging.getLogger("softswitch").warning(
            "packet-ring I/O not built (%s): ports use recvmmsg/sendmmsg; run `make setup`",
            PKTIO_IMPORT_ERROR)
        return "mmsg"
    return "ring_fastpath"


def _ring_frame_size(mtu: int) -> int:
    """Ring slot: TPACKET2 header + the largest frame (+VLAN tag), as a power of two."""
    need = mtu + 14 + 4 + 128
    size = 2048
    while size < need:
        size *= 2
    return size


# The interface went away or down: normal during teardown (Mininet deletes
# links before stopping switches).
PORT_GONE_ERRNOS = frozenset({errno.ENETDOWN, errno.ENXIO, errno.ENODEV, errno.EBADF})


class PortDown(Exception):
    """The port's interface is down or gone; the switch stops using the port."""


class PortIO(Protocol):
    name: str
    mode: str

    def fileno(self) -> int: ...
    def recv_batch(self, max_frames: int) -> list[bytes]: ...
    def send_batch(self, frames: list[bytes]) -> list[bytes]:
        """Send; returns the frames actually handed to the kernel (pcap 'out')."""
        ...
    def stats(self) -> dict: ...
    def close(self) -> None: ...


# --- recvmmsg/sendmmsg (ctypes binding in testbed.linux_mmsg) -------------------

class MmsgRx:
    """recvmmsg into `batch` fixed slots of `slot` bytes; frames come out as bytes."""

    def __init__(self, fd: int, batch: int, slot: int):
        if not HAVE_MMSG:
            raise OSError(errno.ENOSYS, "recvmmsg not available in libc")
        self.fd, self.batch, self.slot = fd, batch, slot
        self._buf = bytearray(batch * slot)
        self._mv = memoryview(self._buf)
        base = ctypes.addressof((ctypes.c_char * len(self._buf)).from_buffer(self._buf))
        self._iov = (IoVec * batch)()
        self._raw = np.zeros(batch * HDR_SIZE, np.uint8)  # the mmsghdr array, viewed by numpy too
        self._hdrs = (MMsgHdr * batch).from_buffer(self._raw)
        for i in range(batch):
            self._iov[i].iov_base = base + i * slot
            self._iov[i].iov_len = slot
            self._hdrs[i].msg_hdr.msg_iov = ctypes.addressof(self._iov[i])
            self._hdrs[i].msg_hdr.msg_iovlen = 1
        u32 = self._raw.view(np.uint32)
        stride = HDR_SIZE // 4
        self._lens = u32[LEN_IDX::stride]
        self._flags = u32[FLAGS_IDX::stride]
        self._offs = list(range(0, batch * slot, slot))
        self._ptr = ctypes.addressof(self._hdrs)
        self.truncated = 0

    def recv(self, max_frames: int | None = None) -> tuple[list[bytes], int]:
        """Non-blocking: (frames, total bytes). Raises OSError (not EAGAIN)."""
        vlen = self.batch if max_frames is None else min(max_frames, self.batch)
        n = recvmmsg(self.fd, self._ptr, vlen, MSG_DONTWAIT, None)
        if n <= 0:
            if n == 0:
                return [], 0
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EINTR):
                return [], 0
            raise OSError(e, os.strerror(e))
        # Plain lists, not numpy reductions: at small batches (low rates) numpy's
        # per-call overhead would dominate the whole loop iteration.
        lens = self._lens[:n].tolist()
        mv, offs = self._mv, self._offs
        if any(self._flags[:n].tolist()):  # MSG_TRUNC: frame bigger than a slot
            flags = self._flags[:n].tolist()
            keep = [i for i in range(n) if not flags[i] & MSG_TRUNC]
            self.truncated += n - len(keep)
            return ([mv[offs[i]:offs[i] + lens[i]].tobytes() for i in keep],
                    sum(lens[i] for i in keep))
        return [mv[o:o + ln].tobytes() for o, ln in zip(offs, lens)], sum(lens)


class MmsgTx:
    """sendmmsg of a list of bytes: the frames are joined into one buffer and
    the iovecs computed with numpy, so there is no per-frame ctypes work."""

    def __init__(self, fd: int, batch: int):
        if not HAVE_MMSG:
            raise OSError(errno.ENOSYS, "sendmmsg not available in libc")
        self.fd, self.batch = fd, batch
        self._iov_raw = np.zeros(batch * 2, np.uint64)  # (base, len) pairs
        iov_addr = self._iov_addr = self._iov_raw.ctypes.data
        self._raw = np.zeros(batch * HDR_SIZE, np.uint8)
        self._hdrs = (MMsgHdr * batch).from_buffer(self._raw)
        for i in range(batch):
            self._hdrs[i].msg_hdr.msg_iov = iov_addr + 16 * i
            self._hdrs[i].msg_hdr.msg_iovlen = 1
        self._ptr = ctypes.addressof(self._hdrs)

    def prepare(self, frames: list[bytes]) -> tuple[bytes, int]:
        """Fill the iovecs for frames[:batch]; returns (buffer to keep alive, total bytes)."""
        n = len(frames)
        joined = b"".join(frames)
        base = ctypes.cast(ctypes.c_char_p(joined), ctypes.c_void_p).value or 0
        if n <= 16:
            # Few frames: struct + memmove beats half a dozen numpy calls.
            vals = []
            off = base
            for f in frames:
                ln = len(f)
                vals.append(off)
                vals.append(ln)
                off += ln
            ctypes.memmove(self._iov_addr, struct.pack(f"{2 * n}Q", *vals), 16 * n)
        else:
            lens = np.fromiter(map(len, frames), np.uint64, n)
            offs = np.cumsum(lens)
            offs -= lens
            offs += np.uint64(base)
            self.point_at(offs, lens)
        return joined, len(joined)

    def point_at(self, addrs: np.ndarray, lens: np.ndarray) -> None:
        """Point the first len(addrs) messages at caller-owned memory (which the
        caller keeps alive): e.g. a traffic generator's fixed packet buffer."""
        n = len(addrs)
        self._iov_raw[0:2 * n:2] = addrs
        self._iov_raw[1:2 * n:2] = lens

    def send_prepared(self, start: int, count: int) -> int:
        """sendmmsg of prepared messages [start, start+count); returns sent or -errno."""
        r = sendmmsg(self.fd, self._ptr + start * HDR_SIZE, count, MSG_DONTWAIT)
        return r if r >= 0 else -ctypes.get_errno()


# --- AF_PACKET port -----------------------------------------------------------

def _intf_mtu(sock: socket.socket, intf: str) -> int:
    # ioctl, not /sys/class/net: sysfs shows the namespace it was mounted in,
    # which under `unshare -n` is not ours.
    import fcntl
    try:
        req = struct.pack("16si12x", intf.encode()[:15], 0)
        return struct.unpack("16si12x", fcntl.ioctl(sock.fileno(), 0x8921, req))[1]  # SIOCGIFMTU
    except OSError:
        return 1500


def interfaces() -> list[str]:
    """Interface names of this process's network namespace."""
    return sorted(name for _, name in socket.if_nameindex())


def _set_buf(sock: socket.socket, force_opt: int, opt: int, size: int) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, force_opt, size)  # root: beyond rmem_max
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)


class AfPacketPort:
    """One switch port on a Linux interface."""

    def __init__(self, intf: str, batch: int = 64, bufsize: int = 8 << 20,
                 mode: str | None = None, ring_bytes: int = RING_BYTES):
        self.name = intf
        self.batch = batch
        mode = mode or resolve_io_impl(None)
        if mode not in ("ring_fastpath", "mmap_ring", "mmsg", "drain"):
            raise ValueError(f"unknown I/O mode {mode!r} (ring_fastpath|mmap_ring|mmsg|drain)")
        if mode in RING_IMPLS:
            resolve_io_impl(mode)  # raises, naming the fix, when not built
            mode = "mmap_ring"     # the port itself: a ring (the loop decides who reads it)
        if mode == "mmsg" and not HAVE_MMSG:
            mode = "drain"
        self.mode = mode
        try:
            socket.if_nametoindex(intf)
        except OSError:
            raise OSError(errno.ENODEV, f"interface {intf!r} does not exist in this network "
                                        f"namespace (present: {interfaces()})") from None
        # Protocol 0 at creation: the socket sees nothing until bound to the interface,
        # so no frames of other interfaces get queued in between.
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            # Without this the switch would receive every frame it sends.
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError as e:
            s.close()
            raise OSError(e.errno, f"{intf}: PACKET_IGNORE_OUTGOING unsupported (needs Linux >= 4.20): {e}")
        _set_buf(s, SO_RCVBUFFORCE, socket.SO_RCVBUF, bufsize)
        _set_buf(s, SO_SNDBUFFORCE, socket.SO_SNDBUF, bufsize)
        mtu = _intf_mtu(s, intf)
        # Slot = largest frame the interface can carry (+VLAN tag), rounded up.
        self.slot = max(2048, (mtu + 14 + 4 + 63) // 64 * 64)
        self._rx: MmsgRx | _pktio.RxRing | None = None
        self._tx: MmsgTx | None = None
        self.ring = None
        try:
            if mode == "mmap_ring":
                # Before bind: frames queued on the socket itself would never be read.
                size = _ring_frame_size(mtu)
                self._rx = self.ring = _pktio.RxRing(s.fileno(), size, max(256, ring_bytes // size))
            s.bind((intf, ETH_P_ALL))
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        self.sock = s
        self._fd = s.fileno()
        if mode == "mmsg":
            self._rx = MmsgRx(self._fd, batch, self.slot)
            self._tx = MmsgTx(self._fd, max(4 * batch, 256))
        self.rx = self.tx = self.rx_bytes = self.tx_bytes = 0
        self.tx_dropped = 0
        self.kernel_rx_drops = 0
        self.kernel_rx_packets = 0
        self.down = False
        self.down_events = 0  # ENETDOWN seen while the interface still existed

    def fileno(self) -> int:
        return self._fd

    def _exists(self) -> bool:
        try:
            socket.if_nametoindex(self.name)
            return True
        except OSError:
            return False

    def _gone(self, e: OSError) -> PortDown:
        self.down = True
        return PortDown(f"{self.name}: {os.strerror(e.errno) if e.errno else e}")

    def check_error(self) -> None:
        """The ring never makes a system call, so a pending socket error (the
        interface went down or away: epoll says EPOLLERR) is read here, and
        handled as a failed recvmmsg would be."""
        e = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # reading clears it
        if not e:
            return
        if e not in PORT_GONE_ERRNOS:
            raise OSError(e, f"{self.name}: {os.strerror(e)}")
        if self._exists():
            self.down_events += 1
            return
        raise self._gone(OSError(e, os.strerror(e)))

    def note_send_error(self, err: int) -> None:
        """A send found the interface down or gone (the compiled loop's report;
        _send_mmsg decides the same way)."""
        if err == errno.EBADF or not self._exists():
            self.down = True
        else:
            self.down_events += 1

    def recv_batch(self, max_frames: int) -> list[bytes]:
        if self.ring is not None:
            frames, nbytes = self.ring.recv(max_frames)
            if frames:
                self.rx += len(frames)
                self.rx_bytes += nbytes
            return frames
        try:
            if self._rx is not None:
                frames, nbytes = self._rx.recv(max_frames)
            else:
                frames, nbytes = self._recv_drain(max_frames)
        except OSError as e:
            if e.errno not in PORT_GONE_ERRNOS:
                raise
            if e.errno != errno.EBADF and self._exists():
                # Down for a moment (link setup, `ip link set down`): the kernel
                # re-attaches the socket when it comes back up.
                self.down_events += 1
                return []
            raise self._gone(e) from None
        if frames:
            self.rx += len(frames)
            self.rx_bytes += nbytes
        return frames

    def _recv_drain(self, max_frames: int) -> tuple[list[bytes], int]:
        recv = self.sock.recv
        slot = self.slot
        out: list[bytes] = []
        for _ in range(max_frames):
            try:
                out.append(recv(slot))
            except (BlockingIOError, InterruptedError):
                break
        return out, sum(map(len, out))

    def send_batch(self, frames: list[bytes]) -> list[bytes]:
        if not frames:
            return frames
        if self.down:
            self.tx_dropped += len(frames)
            return []
        cap = self._tx.batch if self._tx is not None else _pktio.MAX_SEND if self.ring else 0
        if not cap:
            sent = self._send_drain(frames)
            nbytes = sum(map(len, sent))
        elif len(frames) <= cap:
            sent, nbytes = self._send_mmsg(frames)
        else:
            sent, nbytes = [], 0
            for i in range(0, len(frames), cap):
                s, b = self._send_mmsg(frames[i:i + cap])
                sent.extend(s)
                nbytes += b
        self.tx += len(sent)
        self.tx_bytes += nbytes
        return sent

    def _send_mmsg(self, chunk: list[bytes]) -> tuple[list[bytes], int]:
        """Send one chunk (<= tx batch): (frames sent, their bytes)."""
        tx = self._tx
        if tx is None:
            # mmap_ring: sendmmsg in C, straight from the frames' own buffers.
            fd, chunk = self._fd, list(chunk)
            joined, nbytes = None, sum(map(len, chunk))

            def send(start: int, count: int) -> int:
                return _pktio.send_frames(fd, chunk, start, count)
        else:
            joined, nbytes = tx.prepare(chunk)  # `joined` must stay alive until sendmmsg returns
            send = tx.send_prepared
        n = len(chunk)
        pos = 0
        skipped: list[int] = []
        waited = False
        while pos < n:
            r = send(pos, n - pos)
            if r > 0:
                pos += r
                continue
            e = -r
            if e == errno.EINTR:
                continue
            if e == errno.EAGAIN and not waited:
                # Socket buffer full (e.g. an htb-shaped interface): wait briefly once.
                waited = True
                select.select([], [self._fd], [], 0.005)
                continue
            if e in PORT_GONE_ERRNOS:
                if e == errno.EBADF or not self._exists():
                    self.down = True
                else:
                    self.down_events += 1
                skipped.extend(range(pos, n))
                break
            if e == errno.EAGAIN:
                skipped.extend(range(pos, n))  # still full: tail drop, like a full egress queue
                break
            # ENOBUFS (qdisc dropped it), EMSGSIZE (frame > MTU), ...: drop this frame.
            skipped.append(pos)
            pos += 1
        del joined
        if not skipped:
            return chunk, nbytes
        self.tx_dropped += len(skipped)
        sk = set(skipped)
        sent = [f for j, f in enumerate(chunk) if j not in sk]
        return sent, sum(map(len, sent))

    def _send_drain(self, frames: list[bytes]) -> list[bytes]:
        send = self.sock.send
        sent: list[bytes] = []
        for f in frames:
            try:
                send(f)
                sent.append(f)
            except OSError as e:
                self.tx_dropped += 1
                if e.errno in PORT_GONE_ERRNOS:
                    if e.errno == errno.EBADF or not self._exists():
                        self.down = True
                    self.tx_dropped += len(frames) - len(sent) - 1
                    break
        return sent

    def _read_kernel_stats(self) -> None:
        if self.sock.fileno() < 0:
            return
        try:
            pk, dr = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        except OSError:
            return
        # Reading resets the kernel's counters, so accumulate.
        self.kernel_rx_packets += pk
        self.kernel_rx_drops += dr

    def stats(self) -> dict:
        self._read_kernel_stats()
        return {"intf": self.name, "io_mode": self.mode, "rx": self.rx, "tx": self.tx,
                "rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes,
                "tx_dropped": self.tx_dropped,
                "rx_truncated": self._rx.truncated if self._rx is not None else 0,
                "ring_frames": self.ring.frames if self.ring is not None else 0,
                "rx_kernel_drops": self.kernel_rx_drops,
                "down": self.down or not self._exists(), "down_events": self.down_events}

    def close(self) -> None:
        self._read_kernel_stats()
        if self.ring is not None:
            self.ring.close()
        self.sock.close()


# --- UDP "port" for the rootless local mode ------------------------------------

class UdpPortIO:
    """A port that is a UDP socket: each datagram carries one Ethernet frame.

    spec: "udp:<bind_host>:<bind_port>[><peer_host>:<peer_port>]". Without a
    peer, the source of the first datagram received becomes the peer.
    (Thin version: plain recvfrom/sendto loop.)
    """

    def __init__(self, spec: str, batch: int = 64):
        self.name = spec
        self.mode = "udp"
        self.batch = batch
        local, _, peer = spec[len("udp:"):].partition(">")
        self.local = _hostport(local, spec)
        self.peer = _hostport(peer, spec) if peer else None
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _set_buf(s, SO_RCVBUFFORCE, socket.SO_RCVBUF, 8 << 20)
        _set_buf(s, SO_SNDBUFFORCE, socket.SO_SNDBUF, 8 << 20)
        s.bind(self.local)
        s.setblocking(False)
        self.sock = s
        self.rx = self.tx = self.rx_bytes = self.tx_bytes = self.tx_dropped = 0
        self.down = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_batch(self, max_frames: int) -> list[bytes]:
        out: list[bytes] = []
        recvfrom = self.sock.recvfrom
        for _ in range(max_frames):
            try:
                data, addr = recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                break
            if self.peer is None:
                self.peer = addr
            out.append(data)
        if out:
            self.rx += len(out)
            self.rx_bytes += sum(map(len, out))
        return out

    def send_batch(self, frames: list[bytes]) -> list[bytes]:
        if self.peer is None:
            self.tx_dropped += len(frames)
            return []
        sent = []
        sendto, peer = self.sock.sendto, self.peer
        for f in frames:
            try:
                sendto(f, peer)
                sent.append(f)
            except OSError:
                self.tx_dropped += 1
        self.tx += len(sent)
        self.tx_bytes += sum(map(len, sent))
        return sent

    def stats(self) -> dict:
        return {"intf": self.name, "io_mode": self.mode, "rx": self.rx, "tx": self.tx,
                "rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes,
                "tx_dropped": self.tx_dropped, "rx_truncated": 0, "rx_kernel_drops": 0,
                "down": self.down}

    def close(self) -> None:
        self.sock.close()


def _hostport(s: str, spec: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad UDP port spec {spec!r}: expected udp:HOST:PORT[>HOST:PORT]")
    return host, int(port)


def open_port(spec: str, batch: int = 64, io_impl: str | None = None,
              ring_bytes: int = RING_BYTES) -> PortIO:
    """An interface name -> AfPacketPort (io_impl: ring_fastpath|mmap_ring|mmsg, None = the
    default; ring_bytes: its receive ring, rx_ring_bytes()); 'udp:...' -> UdpPortIO."""
    if spec.startswith("udp:"):
        return UdpPortIO(spec, batch)
    return AfPacketPort(spec, batch, mode=io_impl, ring_bytes=ring_bytes)
