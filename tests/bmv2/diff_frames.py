"""The frame sequence of the BMv2-vs-soft-switch differential test: what is
sent on which switch port, in order. Normal traffic (unicast, flood), an
aggregation job with duplicates, reordering, a lost contribution resent, a
lost result asked for again (unicast reply), a stale copy, the next chunk on
the same slot (shadow copy), all three ops; hostile frames (bad version, op,
count, slot_ver, short payload, unknown job, a worker outside the job,
impersonation from another port, a slot beyond the job's range)."""
from __future__ import annotations

from testbed import wire

SWITCH_MAC, SWITCH_IP = "02:00:00:00:00:fe", "10.0.0.254"
PORTS = (1, 2, 3, 4)
HOSTS = {p: {"mac": f"00:00:00:00:00:0{p}", "ip": f"10.0.0.{p}", "port": p} for p in PORTS}
JOB = {"job_id": 3, "slot_base": 8, "slot_count": 2,
       "workers": [{"worker_id": i, **HOSTS[p]} for i, p in enumerate((1, 2, 3))]}
WINDOW = 2          # slot_ver = (seq // WINDOW) % 2, as hosts/ina/transport.py sends them
FORWARDING = [{"dst_mac": h["mac"], "port": p} for p, h in HOSTS.items()]


def contribution(port: int, *, seq: int, values, slot: int | None = None, op: int = wire.OP_SUM,
                 worker: int | None = None, job: int = JOB["job_id"], flags: int = 0,
                 exponent: int = 0, **kw) -> tuple[int, bytes]:
    h = HOSTS[port]
    wid = worker if worker is not None else next(w["worker_id"] for w in JOB["workers"]
                                                  if w["port"] == port)
    slot = seq % WINDOW if slot is None else slot
    frame = wire.build_frame(h["mac"], SWITCH_MAC, h["ip"], SWITCH_IP, wire.INA_PORT_BASE,
                             wire.INA_PORT_BASE, op=op, job_id=job, slot=slot,
                             slot_ver=kw.pop("slot_ver", (seq // WINDOW) % 2), worker_id=wid,
                             seq=seq, values=values, flags=flags, exponent=exponent, **kw)
    return port, frame


def plain(src: int, dst_mac: str, payload: bytes = b"hello") -> tuple[int, bytes]:
    h = HOSTS[src]
    dst_ip = "10.0.0.99"
    return src, wire.eth_ip_udp(h["mac"], dst_mac, h["ip"], dst_ip, 4000, 5000, len(payload)) + payload


def sequence() -> list[tuple[str, int, bytes]]:
    """[(label, in_port, frame)] in sending order."""
    s: list[tuple[str, tuple[int, bytes]]] = [
        ("unicast to w2", plain(1, HOSTS[2]["mac"])),
        ("unknown MAC floods", plain(3, "00:00:00:00:00:77")),
        ("broadcast floods", plain(4, "ff:ff:ff:ff:ff:ff")),
        # chunk seq 0 (slot 0): w1, w1 again (duplicate), w3 (reordered), w2 completes
        ("seq0 w1", contribution(1, seq=0, values=[1, 2, 3, 4])),
        ("seq0 w1 duplicate", contribution(1, seq=0, values=[1, 2, 3, 4])),
        ("seq0 w3", contribution(3, seq=0, values=[100, 200, 300, 400], exponent=2)),
        ("seq0 w2 completes", contribution(2, seq=0, values=[10, 20, 30, 40], exponent=-1)),
        ("seq0 w2 resend: result lost", contribution(2, seq=0, values=[10, 20, 30, 40],
                                                    flags=wire.FLAG_RETX)),
        # chunk seq 1 (slot 1): w2's contribution is lost (never sent), then resent
        ("seq1 w1 (OR)", contribution(1, seq=1, values=[0x0F, 0x100], op=wire.OP_OR)),
        ("seq1 w3 (OR)", contribution(3, seq=1, values=[0xF0, 0x1], op=wire.OP_OR)),
        ("seq1 w2 resent after loss", contribution(2, seq=1, values=[0x300, 0], op=wire.OP_OR,
                                                   flags=wire.FLAG_RETX)),
        # chunk seq 2 reuses slot 0 in the other version (shadow copy of seq 0 kept)
        ("seq2 w3 (MAX)", contribution(3, seq=2, values=[-5, 7, -(2**31)], op=wire.OP_MAX)),
        ("seq0 w1 stale after seq2 began", contribution(1, seq=0, values=[1, 2, 3, 4])),
        ("seq2 w1 (MAX)", contribution(1, seq=2, values=[-9, 70, 5], op=wire.OP_MAX)),
        ("seq2 w2 completes (MAX)", contribution(2, seq=2, values=[-1, -70, 6], op=wire.OP_MAX)),
        ("seq0 w1 late retransmit (shadow)", contribution(1, seq=0, values=[1, 2, 3, 4],
                                                         flags=wire.FLAG_RETX)),
        # 64 values, the widest contribution
        ("seq3 w1 64 values", contribution(1, seq=3, values=list(range(64)))),
        ("seq3 w2 64 values", contribution(2, seq=3, values=[2**31 - 1] * 64)),
        ("seq3 w3 64 values wraps", contribution(3, seq=3, values=[1] * 64)),
        # hostile
        ("bad version", contribution(1, seq=4, values=[1], version=2)),
        ("bad op", contribution(1, seq=4, values=[1], op=7)),
        ("count > 64", contribution(1, seq=4, values=[1], count=65)),
        ("bad slot_ver", contribution(1, seq=4, values=[1], slot_ver=3)),
        ("short payload", contribution(1, seq=4, values=[1, 2], count=5)),
        ("unknown job", contribution(1, seq=4, values=[1], job=9)),
        ("worker outside the job", contribution(4, seq=4, values=[1], worker=5)),
        ("impersonation from port 4", contribution(4, seq=4, values=[1], worker=0)),
        ("slot beyond the job", contribution(1, seq=4, values=[1], slot=2)),
        ("a result passing through is forwarded", contribution(1, seq=4, values=[1],
                                                               flags=wire.FLAG_RESULT)),
    ]
    return [(label, port, frame) for label, (port, frame) in s]


def soft_config() -> dict:
    return {"ports": {str(p): f"swp{p}" for p in PORTS}, "forwarding": FORWARDING, "flood": True,
            "switch_mac": SWITCH_MAC, "switch_ip": SWITCH_IP, "jobs": [JOB]}
