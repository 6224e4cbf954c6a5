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
"""
from __future__ import annotations

import socket

from testbed import wire
from testbed.loopback_ports import free_port_base
from testbed.switch.soft.config import ConfigError, SwitchConfig


DEFAULT_SWITCH_MAC = "02:00:00:00:00:fe"
DEFAULT_SWITCH_IP = "10.0.0.254"


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
                 macs: dict[bytes, bytes], bufsize: int = 8 << 20):
        self.name = f"udp-ina:{bind[0]}:{bind[1]}"
        self.mode = "udp-ina"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            s.setsockopt(socket.SOL_SOCKET, opt, bufsize)
        s.bind(bind)
        s.setblocking(False)
        self.sock = s
        self._smac, self._sip = wire.mac_bytes(switch_mac), wire.ip_bytes(switch_ip)
        self._macs = macs                       # registered worker ip -> mac
        self._prefix: dict[tuple[str, int, int], bytes] = {}
        self.rx = self.tx = self.rx_bytes = self.tx_bytes = self.tx_dropped = 0
        self.not_udp = 0                        # emitted frames that are not IPv4/UDP: dropped
        self.down = False

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

    def stats(self) -> dict:
        return {"intf": self.name, "io_mode": self.mode, "rx": self.rx, "tx": self.tx,
                "rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes,
                "tx_dropped": self.tx_dropped, "tx_not_udp": self.not_udp, "rx_truncated": 0,
                "rx_kernel_drops": 0, "down": self.down}

    def close(self) -> None:
        self.sock.close()


def _ina_keys(raw: dict) -> dict:
    return {**raw, **dict(raw.get("ina") or {})}


def udp_ports(config: SwitchConfig) -> dict[int, UdpInaPort]:
    """One UdpInaPort per configured port number (config.raw["udp_listen"])."""
    raw = config.raw
    if "udp_listen" not in raw:
        raise ConfigError(f'{config.name}: "io": "udp" needs "udp_listen": "HOST:BASEPORT" '
                          f"(port p listens on BASEPORT + p)")
    host, base = parse_listen(raw["udp_listen"])
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
                                   switch_ip=ina.get("switch_ip", DEFAULT_SWITCH_IP))
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
