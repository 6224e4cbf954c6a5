"""The steps of the BMv2-vs-soft-switch differential test, in order: a frame
sent on a switch port (`Frame`), or a control-plane change (`SetDrop`: a drop
simulator's probability, through SwitchController.set_drop_probability on
BMv2, InaPipeline.set_drop_probability on the soft switch).

`sequence()`: normal traffic (unicast, flood), an aggregation job with
duplicates, reordering, a lost contribution resent, a lost result asked for
again (unicast reply), a stale copy, the next chunk on the same slot (shadow
copy), all three ops; hostile frames (bad version, op, count, slot_ver, short
payload, truncated headers, unknown job, a worker outside the job,
impersonation from another port, a slot beyond the job's range); loss in both
directions through the drop simulators (probability 1, then 0 again: BMv2's
random numbers are not numpy's, so only certain outcomes can be compared);
then `schedule(seed)` chunks as the property tests make them: contributions in
random order, duplicated, lost and resent, results lost and asked for again,
two chunks of the window interleaved."""
from __future__ import annotations

import random
from typing import NamedTuple

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


class Frame(NamedTuple):
    label: str
    port: int
    frame: bytes


class SetDrop(NamedTuple):
    label: str
    port: int
    probability: float
    direction: str          # "ingress": contributions arriving; "egress": results leaving


def _frames(s: list[tuple[str, tuple[int, bytes]]]) -> list[Frame]:
    return [Frame(label, port, frame) for label, (port, frame) in s]


def sequence() -> list[Frame | SetDrop]:
    """Every step in sending order: the fixed cases, then two seeded schedules."""
    return fixed() + lossy() + schedule(1, first_seq=8) + schedule(2, first_seq=40)


def fixed() -> list[Frame]:
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
        ("truncated INA header", (1, contribution(1, seq=4, values=[1])[1][:50])),
        ("truncated UDP header", (1, contribution(1, seq=4, values=[1])[1][:38])),
        ("truncated IPv4 header", (1, contribution(1, seq=4, values=[1])[1][:30])),
        ("count 0", contribution(1, seq=4, values=[])),
    ]
    return _frames(s)


def lossy() -> list[Frame | SetDrop]:
    """Loss in both directions, applied by the P4 program's drop simulators."""
    return [
        SetDrop("w1's contributions lost on the way in", 1, 1.0, "ingress"),
        *_frames([("seq5 w1 lost (DropSimulator)", contribution(1, seq=5, values=[5, 6])),
                  ("a plain frame from port 1 is not impaired", plain(1, HOSTS[3]["mac"]))]),
        SetDrop("ingress loss off", 1, 0.0, "ingress"),
        SetDrop("results to w2 lost on the way out", 2, 1.0, "egress"),
        *_frames([("seq5 w2", contribution(2, seq=5, values=[7, 8])),
                  ("seq5 w3", contribution(3, seq=5, values=[9, 10])),
                  ("seq5 w1 resent completes: w2's result lost (EgressDropSimulator)",
                   contribution(1, seq=5, values=[5, 6], flags=wire.FLAG_RETX)),
                  ("seq5 w2 resend: unicast reply lost too",
                   contribution(2, seq=5, values=[7, 8], flags=wire.FLAG_RETX)),
                  ("seq5 w3 resend: unicast reply to port 3 kept",
                   contribution(3, seq=5, values=[9, 10], flags=wire.FLAG_RETX)),
                  ("a plain frame to port 2 is not impaired", plain(1, HOSTS[2]["mac"]))]),
        SetDrop("egress loss off", 2, 0.0, "egress"),
        *_frames([("seq5 w2 resend after loss: unicast reply arrives",
                   contribution(2, seq=5, values=[7, 8], flags=wire.FLAG_RETX))]),
    ]


def schedule(seed: int, *, first_seq: int, chunks: int = 16) -> list[Frame]:
    """Chunks first_seq.. of the job as a lossy, duplicating, reordering network
    delivers them (the shape of tests/unit/test_ina_property.py's schedules):
    each chunk's contributions in random order, some duplicated, some lost and
    resent (RETX) after the others, some results lost and asked for again; the
    two chunks of the window (WINDOW) interleaved. Values: random int32 with
    extremes, 1..64 per chunk, one op per chunk."""
    rng = random.Random(seed)
    workers = [w["port"] for w in JOB["workers"]]
    out: list[Frame] = []
    for base in range(first_seq, first_seq + chunks, WINDOW):
        lanes = []
        for seq in range(base, base + WINDOW):
            op = rng.choice([wire.OP_SUM, wire.OP_OR, wire.OP_MAX])
            count = rng.choice([1, 2, 7, 64])
            order = rng.sample(workers, len(workers))
            sent: list[Frame] = []
            later: list[Frame] = []          # after the others: resends of what was lost
            for p in order:
                vals = [rng.choice([0, 1, -1, 2**31 - 1, -2**31, rng.randrange(-2**31, 2**31)])
                        for _ in range(count)]
                c = dict(seq=seq, values=vals, op=op, exponent=rng.randrange(-8, 8))
                if rng.random() < 0.2:       # lost on the way: never sent, resent later
                    later.append(Frame(f"seq{seq} port {p} resent after loss", *contribution(
                        p, flags=wire.FLAG_RETX, **c)))
                    continue
                sent.append(Frame(f"seq{seq} port {p}", *contribution(p, **c)))
                if rng.random() < 0.25:      # duplicated by the network
                    sent.append(Frame(f"seq{seq} port {p} duplicate", *contribution(p, **c)))
                if rng.random() < 0.2:       # its result lost: it asks again
                    later.append(Frame(f"seq{seq} port {p} asks again", *contribution(
                        p, flags=wire.FLAG_RETX, **c)))
            lanes.append(sent + later)
        while any(lanes):                    # interleave the window's chunks
            lane = rng.choice([x for x in lanes if x])
            out.append(lane.pop(0))
    return out


def soft_config() -> dict:
    return {"ports": {str(p): f"swp{p}" for p in PORTS}, "forwarding": FORWARDING, "flood": True,
            "switch_mac": SWITCH_MAC, "switch_ip": SWITCH_IP, "jobs": [JOB]}
