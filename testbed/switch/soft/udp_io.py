"""Rootless local mode for INA: the soft switch's ports as UDP endpoints on loopback.

Workers send bare INA payloads (header + values) over UDP; each switch port p is
a UDP socket at `udp_listen` host, port base + p (one "link" per worker, so
per-port impairments, drop simulator and pcaps work as on Mininet). A datagram
received on port p becomes the frame the worker's NIC would have sent:
Eth(src = the worker's registered MAC, dst = switch MAC) / IPv4(src = the
datagram's source IP, dst = switch IP) / UDP(sport = its source port, dport =
INA_PORT_BASE) / payload, and goes through the very same pipeline (InaPipeline).
Every frame the pipeline emits on a port is unwrapped again: its UDP payload is
sent to the frame's destination ip:port (results are addressed to the
worker's registered ip and udp_port), from that port's socket.

Config: the soft switch's config plus
    "io": "udp", "udp_listen": "127.0.0.1:40000"   # port p listens on 40000 + p
and the pipeline's keys (pipeline "ina", jobs [...] with each worker's real
loopback ip and udp_port). `python -m testbed.switch.soft --config cfg.json`
(or SoftSwitchProcess) then opens these ports instead of interfaces.

How a port moves datagrams (config "udp_io"): "mmsg" (the default where libc has
them) receives a batch with one recvmmsg (each datagram lands behind room for
its Ethernet/IPv4/UDP header, its source address beside it) and sends a batch
with one sendmmsg whose per-datagram destinations and payload slices are
computed with numpy from the frames; "python" makes one recvfrom/sendto per
datagram (the reference). Both emit the same frames and count alike
(tests/local/test_udp_ina_port.py); with "mmsg" a datagram longer than
RX_SLOT - 42 bytes is dropped and counted (`rx_truncated`). In the 16,384-value
allreduce at 4 workers "mmsg" took the switch 20-27 % less CPU per frame
(bench/switch_frame_cost.py, docs/time-fidelity.md "The in-switch path's cost
per frame"); the rest is mostly the kernel's own per-datagram work.
"""
from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

import numpy as np

from testbed import wire
from testbed.linux_mmsg import FLAGS_IDX, HAVE_MMSG, HDR_SIZE, LEN_IDX, MSG_DONTWAIT, MSG_TRUNC, MMsgHdr, \
    recvmmsg, sendmmsg
from testbed.loopback_ports import free_port_base
from testbed.switch.soft.config import ConfigError, SwitchConfig


DEFAULT_SWITCH_MAC = "02:00:00:00:00:fe"
DEFAULT_SWITCH_IP = "10.0.0.254"
UDP_IMPLS = ("mmsg", "python")
# mmsg: bytes per received datagram, header room included: an INA payload is at
# most 16 + 4 * 64 = 272 bytes; a whole Ethernet frame's worth is far beyond it.
RX_SLOT = 2048
TX_BATCH = 256           # datagrams per sendmmsg call (more: several calls)
# up to this many frames a send fills its messages frame by frame, above it with numpy
# (about 35 numpy calls per batch, ~1 us each, against ~1.5 us of Python per frame)
SMALL_TX = 24
_HROOM = wire.INA_OFFSET  # 42: Ethernet + IPv4 + UDP header in front of the payload
_SOCKADDR_IN = np.dtype([("family", "<u2"), ("port", "V2"), ("addr", "V4"), ("zero", "V8")])


def default_udp_impl() -> str:
    return "mmsg" if HAVE_MMSG else "python"


def parse_listen(spec: str) -> tuple[str, int]:
    host, _, port = str(spec).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"udp_listen: {spec!r} is not HOST:PORT (e.g. 127.0.0.1:40000)")
    return host, int(port)


def port_endpoint(listen: str, port_no: int) -> tuple[str, int]:
    """The UDP address of switch port `port_no` (what that worker sends to)."""
    host, base = parse_listen(listen)
    return host, base + int(port_no)


class UdpInaPort:
    """One switch port: a UDP socket carrying bare INA payloads (see module doc)."""

    def __init__(self, bind: tuple[str, int], *, switch_mac: str, switch_ip: str,
                 macs: dict[bytes, bytes], bufsize: int = 8 << 20, impl: str | None = None,
                 batch: int = 256):
        impl = impl or default_udp_impl()
        if impl not in UDP_IMPLS:
            raise ConfigError(f"udp_io: {impl!r} is not one of {', '.join(UDP_IMPLS)}")
        if impl == "mmsg" and not HAVE_MMSG:
            raise ConfigError("udp_io: mmsg needs recvmmsg/sendmmsg, which this libc lacks; "
                              "use udp_io: python")
        self.name = f"udp-ina:{bind[0]}:{bind[1]}"
        self.mode = "udp-ina"
        self.impl = impl
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            s.setsockopt(socket.SOL_SOCKET, opt, bufsize)
        s.bind(bind)
        s.setblocking(False)
        self.sock = s
        self._smac, self._sip = wire.mac_bytes(switch_mac), wire.ip_bytes(switch_ip)
        self._macs = macs                       # registered worker ip -> mac
        # header per (sender, length): python keys (ip, port, length), mmsg (ip << 16 | port, length)
        self._prefix: dict[tuple, bytes] = {}
        self.rx = self.tx = self.rx_bytes = self.tx_bytes = self.tx_dropped = 0
        self.not_udp = 0                        # emitted frames that are not IPv4/UDP: dropped
        self.truncated = 0                      # mmsg: datagrams longer than a receive slot
        self.down = False
        if impl == "mmsg":
            self._mm = _MmsgIo(s.fileno(), batch)
            self.recv_batch = self._recv_mmsg
            self.send_batch = self._send_mmsg

    def fileno(self) -> int:
        return self.sock.fileno()

    def _wrap(self, payload: bytes, addr: tuple[str, int]) -> bytes:
        key = (addr[0], addr[1], len(payload))
        pre = self._prefix.get(key)
        if pre is None:
            ip = wire.ip_bytes(addr[0])
            # unknown senders get a locally administered MAC derived from their IP
            mac = self._macs.get(ip, b"\x02\x01" + ip)
            if len(self._prefix) > 4096:
                self._prefix.clear()
            pre = self._prefix[key] = wire.eth_ip_udp(mac, self._smac, ip, self._sip, addr[1],
                                                      wire.INA_PORT_BASE, len(payload))
        return pre + payload

    def recv_batch(self, max_frames: int) -> list[bytes]:
        out: list[bytes] = []
        recvfrom = self.sock.recvfrom
        for _ in range(max_frames):
            try:
                data, addr = recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:
                continue
            out.append(self._wrap(data, addr))
            self.rx_bytes += len(data)
        self.rx += len(out)
        return out

    def send_batch(self, frames: list[bytes]) -> list[bytes]:
        sent: list[bytes] = []
        sendto = self.sock.sendto
        for f in frames:
            if len(f) < wire.UDP_OFFSET + wire.UDP_HLEN or f[12:14] != b"\x08\x00" \
                    or f[23] != wire.IPPROTO_UDP:
                self.not_udp += 1
                continue
            ulen = (f[38] << 8) | f[39]
            payload = f[wire.INA_OFFSET:wire.UDP_OFFSET + ulen]
            dst = (wire.ip_str(f[30:34]), (f[36] << 8) | f[37])
            try:
                sendto(payload, dst)
            except OSError:
                self.tx_dropped += 1
                continue
            sent.append(f)
            self.tx_bytes += len(payload)
        self.tx += len(sent)
        return sent

    # -- udp_io "mmsg": one system call per batch each way -----------------------------
    def _recv_mmsg(self, max_frames: int) -> list[bytes]:
        mm = self._mm
        n = mm.recv(max_frames)
        if not n:
            return []
        lens = mm.lens[:n]
        if mm.flags[:n].any():             # MSG_TRUNC: longer than a slot, dropped
            keep = (mm.flags[:n] & MSG_TRUNC) == 0
            self.truncated += int(n - keep.sum())
            rows = np.flatnonzero(keep).tolist()
        else:
            rows = range(n)
        names = mm.names
        # sender (ip, port) as one int per datagram, and the header cache's key
        keys = ((names["addr"][:n].view(">u4").astype(np.int64) << 16)
                | names["port"][:n].view(">u2")).tolist()
        ln = lens.tolist()
        mv, slot, prefix = mm.mv, RX_SLOT, self._prefix
        out: list[bytes] = []
        nbytes = 0
        for i in rows:
            k, m = keys[i], ln[i]
            pre = prefix.get((k, m))
            if pre is None:
                pre = self._new_prefix(k, m)
            o = i * slot + _HROOM
            out.append(pre + mv[o:o + m])
            nbytes += m
        self.rx += len(out)
        self.rx_bytes += nbytes
        return out

    def _new_prefix(self, key: int, length: int) -> bytes:
        """The Ethernet/IPv4/UDP header of a `length`-byte datagram from `key` (ip << 16 | port)."""
        ip = (key >> 16).to_bytes(4, "big")
        mac = self._macs.get(ip, b"\x02\x01" + ip)
        if len(self._prefix) > 4096:
            self._prefix.clear()
        pre = self._prefix[(key, length)] = wire.eth_ip_udp(mac, self._smac, ip, self._sip, key & 0xFFFF,
                                                            wire.INA_PORT_BASE, length)
        return pre

    def _send_mmsg(self, frames: list[bytes]) -> list[bytes]:
        if not frames:
            return []
        if len(frames) > TX_BATCH:
            sent: list[bytes] = []
            for i in range(0, len(frames), TX_BATCH):
                sent += self._send_mmsg(frames[i:i + TX_BATCH])
            return sent
        n = len(frames)
        if n <= SMALL_TX:
            return self._send_few(frames)
        joined = b"".join(frames)     # kept alive until sendmmsg returns
        lens = np.fromiter(map(len, frames), np.int64, n)
        offs = np.cumsum(lens) - lens
        buf = np.frombuffer(joined, np.uint8)
        # frames too short for the headers read nothing past their own end
        whole = lens >= wire.UDP_OFFSET + wire.UDP_HLEN
        if not whole.any():
            self.not_udp += n
            return []
        at = np.where(whole, offs, int(offs[np.argmax(whole)]))
        ok = whole & (buf[at + 12] == 0x08) & (buf[at + 13] == 0x00) & (buf[at + 23] == wire.IPPROTO_UDP)
        ulen = (buf[at + 38].astype(np.int64) << 8) | buf[at + 39]
        # the UDP payload as the Python path slices it: f[42:34 + ulen], clipped to the frame
        plen = np.clip(np.minimum(ulen - wire.UDP_HLEN, lens - _HROOM), 0, None)
        rows = np.flatnonzero(ok)
        self.not_udp += n - len(rows)
        if not len(rows):
            return []
        k = len(rows)
        mm = self._mm
        tn = mm.tx_names[:k].view(np.uint8).reshape(k, 16)
        a = at[rows]
        tn[:, 0], tn[:, 1] = socket.AF_INET & 0xFF, socket.AF_INET >> 8
        tn[:, 2:4] = buf[a[:, None] + _DPORT_COLS]
        tn[:, 4:8] = buf[a[:, None] + _DADDR_COLS]
        base = ctypes.cast(ctypes.c_char_p(joined), ctypes.c_void_p).value or 0
        mm.tx_iov[0:2 * k:2] = (a + (_HROOM + base)).astype(np.uint64)
        mm.tx_iov[1:2 * k:2] = plen[rows].astype(np.uint64)
        skipped = mm.send(k)
        if skipped:
            self.tx_dropped += len(skipped)
            rows = np.delete(rows, skipped)
        sent = [frames[i] for i in rows.tolist()]
        self.tx += len(sent)
        self.tx_bytes += int(plen[rows].sum())
        return sent

    def _send_few(self, frames: list[bytes]) -> list[bytes]:
        """_send_mmsg for a few frames: the same messages, filled frame by frame with
        struct (a numpy call costs about as much as a frame here)."""
        mm = self._mm
        joined = b"".join(frames)     # kept alive until sendmmsg returns
        base = ctypes.cast(ctypes.c_char_p(joined), ctypes.c_void_p).value or 0
        names, iov = mm.tx_names_u8, mm.tx_iov_u8
        rows: list[int] = []
        plens: list[int] = []
        off = 0
        for i, f in enumerate(frames):
            ln = len(f)
            if ln < _HROOM or f[12] != 0x08 or f[13] != 0x00 or f[23] != wire.IPPROTO_UDP:
                off += ln
                continue
            pl = min(((f[38] << 8) | f[39]) - wire.UDP_HLEN, ln - _HROOM)
            if pl < 0:
                pl = 0
            k = len(rows)
            _NAME.pack_into(names, 16 * k, socket.AF_INET, f[36:38], f[30:34])
            _IOV.pack_into(iov, 16 * k, base + off + _HROOM, pl)
            rows.append(i)
            plens.append(pl)
            off += ln
        self.not_udp += len(frames) - len(rows)
        if not rows:
            return []
        skipped = mm.send(len(rows))
        if skipped:
            self.tx_dropped += len(skipped)
            drop = set(skipped)
            keep = [j for j in range(len(rows)) if j not in drop]
            rows, plens = [rows[j] for j in keep], [plens[j] for j in keep]
        self.tx += len(rows)
        self.tx_bytes += sum(plens)
        return [frames[i] for i in rows]

    def stats(self) -> dict:
        return {"intf": self.name, "io_mode": self.mode, "udp_io": self.impl, "rx": self.rx, "tx": self.tx,
                "rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes,
                "tx_dropped": self.tx_dropped, "tx_not_udp": self.not_udp, "rx_truncated": self.truncated,
                "rx_kernel_drops": 0, "down": self.down}

    def close(self) -> None:
        self.sock.close()


_NAME = struct.Struct("<H2s4s8x")    # sockaddr_in: family, port and address as in the frame
_IOV = struct.Struct("<QQ")          # iovec: base, length
_DPORT_COLS = np.arange(36, 38)     # UDP destination port, network order
_DADDR_COLS = np.arange(30, 34)     # IPv4 destination address


class _MmsgIo:
    """recvmmsg/sendmmsg buffers of one UDP port (testbed.linux_mmsg's binding).

    Receive: `batch` slots of RX_SLOT bytes; datagram i lands at i * RX_SLOT + 42
    (room for the header the port puts in front), its source in names[i].
    Send: the caller fills tx_names[:k] (destinations) and tx_iov (payload
    address, length pairs) and calls send(k)."""

    def __init__(self, fd: int, batch: int):
        self.fd, self.batch = fd, batch
        self.buf = bytearray(batch * RX_SLOT)
        self.mv = memoryview(self.buf)
        base = ctypes.addressof((ctypes.c_char * len(self.buf)).from_buffer(self.buf))
        self.names = np.zeros(batch, _SOCKADDR_IN)
        self._riov = np.zeros(2 * batch, np.uint64)
        self._riov[0::2] = base + _HROOM + RX_SLOT * np.arange(batch, dtype=np.uint64)
        self._riov[1::2] = RX_SLOT - _HROOM
        self._rraw = np.zeros(batch * HDR_SIZE, np.uint8)
        self._rhdrs = (MMsgHdr * batch).from_buffer(self._rraw)
        self.tx_names = np.zeros(max(batch, TX_BATCH), _SOCKADDR_IN)
        self.tx_iov = np.zeros(2 * len(self.tx_names), np.uint64)
        self.tx_names_u8 = self.tx_names.view(np.uint8)      # the same memory, for struct
        self.tx_iov_u8 = self.tx_iov.view(np.uint8)
        self._traw = np.zeros(len(self.tx_names) * HDR_SIZE, np.uint8)
        self._thdrs = (MMsgHdr * len(self.tx_names)).from_buffer(self._traw)
        for hdrs, names, iov in ((self._rhdrs, self.names, self._riov),
                                 (self._thdrs, self.tx_names, self.tx_iov)):
            for i in range(len(hdrs)):
                h = hdrs[i].msg_hdr
                h.msg_name = names.ctypes.data + 16 * i
                h.msg_namelen = 16
                h.msg_iov = iov.ctypes.data + 16 * i
                h.msg_iovlen = 1
        u32 = self._rraw.view(np.uint32)
        self.lens = u32[LEN_IDX::HDR_SIZE // 4]
        self.flags = u32[FLAGS_IDX::HDR_SIZE // 4]
        self._rptr = ctypes.addressof(self._rhdrs)
        self._tptr = ctypes.addressof(self._thdrs)

    def recv(self, max_frames: int) -> int:
        """Non-blocking: how many datagrams are now in the slots (0: none)."""
        vlen = min(max_frames, self.batch)
        while True:
            n = recvmmsg(self.fd, self._rptr, vlen, MSG_DONTWAIT, None)
            if n >= 0:
                return n
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EINTR):
                return 0
            if e == errno.ECONNREFUSED:   # an ICMP error of an earlier send: as recvfrom's, skipped
                continue
            raise OSError(e, os.strerror(e))

    def send(self, k: int) -> list[int]:
        """sendmmsg of the first k prepared messages; the indexes the kernel refused
        (each skipped, as a failed sendto is)."""
        skipped: list[int] = []
        done = 0
        while done < k:
            r = sendmmsg(self.fd, self._tptr + HDR_SIZE * done, k - done, MSG_DONTWAIT)
            if r > 0:
                done += r
                continue
            e = ctypes.get_errno() if r < 0 else 0
            if e == errno.EINTR:
                continue
            skipped.append(done)
            done += 1
        return skipped


def _ina_keys(raw: dict) -> dict:
    return {**raw, **dict(raw.get("ina") or {})}


def udp_ports(config: SwitchConfig) -> dict[int, UdpInaPort]:
    """One UdpInaPort per configured port number (config.raw["udp_listen"])."""
    raw = config.raw
    if "udp_listen" not in raw:
        raise ConfigError(f'{config.name}: "io": "udp" needs "udp_listen": "HOST:BASEPORT" '
                          f"(port p listens on BASEPORT + p)")
    host, base = parse_listen(raw["udp_listen"])
    impl = raw.get("udp_io")
    if impl is not None and impl not in UDP_IMPLS:
        raise ConfigError(f"{config.name}: udp_io: {impl!r} is not one of {', '.join(UDP_IMPLS)}")
    ina = _ina_keys(raw)
    macs: dict[bytes, bytes] = {}
    for job in ina.get("jobs") or []:
        for w in job.get("workers") or []:
            macs[wire.ip_bytes(w["ip"])] = wire.mac_bytes(w["mac"])
    ports: dict[int, UdpInaPort] = {}
    try:
        for no in config.ports:
            if not 0 < base + no < 65536:
                raise ConfigError(f"udp_listen {host}:{base}: port {no} would listen on {base + no}")
            ports[no] = UdpInaPort((host, base + no), macs=macs,
                                   switch_mac=ina.get("switch_mac", DEFAULT_SWITCH_MAC),
                                   switch_ip=ina.get("switch_ip", DEFAULT_SWITCH_IP),
                                   impl=impl, batch=config.batch)
    except BaseException:
        for p in ports.values():
            p.close()
        raise
    return ports


# -- loopback setups (tests, benchmarks) -----------------------------------------------
def loopback_ip(rank: int) -> str:
    """Worker `rank`'s address in local mode (w<rank+1>, as testbed.net.local_net)."""
    from testbed.net.local_net import LOCAL_PREFIX  # noqa: PLC0415
    return f"{LOCAL_PREFIX}{rank + 1}"


def free_loopback_ports(n_workers: int) -> tuple[int, int]:
    """(switch listen base, worker UDP port) with every needed UDP port free now
    (testbed.loopback_ports: below the kernel's ephemeral range)."""
    base = free_port_base(n_workers + 1, kind=socket.SOCK_DGRAM)
    wport = free_port_base(1, [loopback_ip(r) for r in range(n_workers)], kind=socket.SOCK_DGRAM)
    return base, wport


def loopback_switch_config(n_workers: int, listen_base: int, worker_port: int, *, job_id: int = 1,
                           slot_count: int = 256, **extra) -> dict:
    """Config of an INA soft switch in UDP mode whose port r+1 is worker r's link;
    run it with SoftSwitchProcess (`python -m testbed.switch.soft`)."""
    workers = [{"worker_id": r, "mac": f"02:00:00:00:01:{r + 1:02x}", "ip": loopback_ip(r),
                "port": r + 1, "udp_port": worker_port} for r in range(n_workers)]
    return {"name": "s1", "ports": {str(r + 1): f"w{r + 1}" for r in range(n_workers)},
            "pipeline": "ina", "seed": 3, "io": "udp", "udp_listen": f"127.0.0.1:{listen_base}",
            "jobs": [{"job_id": job_id, "workers": workers, "slot_base": 0, "slot_count": slot_count}],
            **extra}
