"""Decode the in-network aggregation protocol in packet traces.

Per packet: job, slot, version, worker, seq, op, flags, count. Per chunk
(job, seq): when the first contribution was seen, when the first result was
seen (completion latency as observed at the capture point), how many
contributions, retransmissions and duplicates. Per worker: contributions,
retransmissions, results received.

Give it the switch's `<intf>_in.pcap` files for contributions and `_out.pcap`
files for results (or all of a point's pcaps): frames from several files are
merged by timestamp.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from testbed import wire
from testbed.pcap import read_frames


@dataclass
class InaPacket:
    ts: float
    src_ip: str
    dst_ip: str
    job: int
    slot: int
    slot_ver: int
    worker: int
    seq: int
    op: str
    flags: int
    count: int
    exponent: int
    source: str

    @property
    def is_result(self) -> bool:
        return bool(self.flags & wire.FLAG_RESULT)

    @property
    def is_retx(self) -> bool:
        return bool(self.flags & wire.FLAG_RETX)


@dataclass
class ChunkStats:
    job: int
    seq: int
    slot: int
    slot_ver: int
    first_contribution: float | None = None
    first_result: float | None = None
    contributions: int = 0
    retransmissions: int = 0
    duplicates: int = 0
    results: int = 0
    workers: set = field(default_factory=set)

    @property
    def latency_s(self) -> float | None:
        if self.first_contribution is None or self.first_result is None:
            return None
        return self.first_result - self.first_contribution


@dataclass
class InaAnalysis:
    packets: list[InaPacket]
    chunks: dict[tuple[int, int], ChunkStats]
    workers: dict[tuple[int, int], dict[str, int]]

    def to_dict(self) -> dict:
        lat = [c.latency_s for c in self.chunks.values() if c.latency_s is not None]
        return {
            "packets": len(self.packets),
            "contributions": sum(not p.is_result for p in self.packets),
            "results": sum(p.is_result for p in self.packets),
            "chunks": len(self.chunks),
            "completed_chunks": sum(c.first_result is not None for c in self.chunks.values()),
            "retransmissions": sum(c.retransmissions for c in self.chunks.values()),
            "duplicates": sum(c.duplicates for c in self.chunks.values()),
            "completion_latency_s": _percentiles(lat),
            "per_worker": {f"job{j}/worker{w}": v for (j, w), v in sorted(self.workers.items())},
        }

    def format(self, show_packets: int = 0) -> str:
        d = self.to_dict()
        lines = ["in-network aggregation:",
                 f"  {d['packets']} packets: {d['contributions']} contributions, {d['results']} results",
                 f"  chunks: {d['chunks']} seen, {d['completed_chunks']} completed; "
                 f"retransmissions {d['retransmissions']}, duplicates {d['duplicates']}"]
        p = d["completion_latency_s"]
        if p:
            lines.append("  completion latency (first contribution -> first result at this capture point): "
                         f"p50 {p['p50'] * 1e6:.0f} us, p99 {p['p99'] * 1e6:.0f} us, max {p['max'] * 1e6:.0f} us")
        lines.append("  per worker:          contributions  retransmissions  results received")
        for k, v in d["per_worker"].items():
            lines.append(f"    {k:<18}{v['contributions']:>14}{v['retransmissions']:>17}{v['results']:>18}")
        if show_packets:
            lines.append(f"  first {min(show_packets, len(self.packets))} packets:")
            lines.append("    time(s)      dir     job slot ver worker seq        op   flags   count exp")
            t0 = self.packets[0].ts if self.packets else 0.0
            for pk in self.packets[:show_packets]:
                direction = "result" if pk.is_result else "contrib"
                flags = "|".join(n for n, b in (("RESULT", wire.FLAG_RESULT), ("RETX", wire.FLAG_RETX))
                                 if pk.flags & b) or "-"
                lines.append(f"    {pk.ts - t0:<12.6f} {direction:<7} {pk.job:>3} {pk.slot:>4} {pk.slot_ver:>3} "
                             f"{pk.worker:>6} {pk.seq:<10} {pk.op:<4} {flags:<7} {pk.count:>5} {pk.exponent:>3}")
        return "\n".join(lines)


def _percentiles(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    a = np.asarray(xs)
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "max": float(a.max()), "n": int(a.size)}


def decode(paths: Iterable[str | Path]) -> list[InaPacket]:
    out: list[InaPacket] = []
    for path in paths:
        for fr in read_frames(path):
            parsed = wire.parse_frame(fr.data)
            if parsed is None:
                continue
            h = parsed.header
            out.append(InaPacket(fr.ts, wire.ip_str(parsed.src_ip), wire.ip_str(parsed.dst_ip), h.job_id, h.slot,
                                 h.slot_ver, h.worker_id, h.seq, wire.OP_NAMES.get(h.op, str(h.op)), h.flags,
                                 h.count, h.exponent, Path(path).name))
    out.sort(key=lambda p: p.ts)
    return out


def analyze(paths: str | Path | Iterable[str | Path]) -> InaAnalysis:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    packets = decode(paths)
    chunks: dict[tuple[int, int], ChunkStats] = {}
    workers: dict[tuple[int, int], dict[str, int]] = defaultdict(
        lambda: {"contributions": 0, "retransmissions": 0, "results": 0})
    seen_contrib: set[tuple[int, int, int]] = set()
    for pk in packets:
        c = chunks.get((pk.job, pk.seq))
        if c is None:
            c = chunks[(pk.job, pk.seq)] = ChunkStats(pk.job, pk.seq, pk.slot, pk.slot_ver)
        if pk.is_result:
            c.results += 1
            if c.first_result is None:
                c.first_result = pk.ts
            # A result names the worker it is addressed to only through its IP;
            # count it against the worker field the switch wrote (0 on multicast copies).
            workers[(pk.job, pk.worker)]["results"] += 1
            continue
        w = workers[(pk.job, pk.worker)]
        w["contributions"] += 1
        key = (pk.job, pk.seq, pk.worker)
        if key in seen_contrib:
            if pk.is_retx:
                c.retransmissions += 1
                w["retransmissions"] += 1
            else:
                c.duplicates += 1
        else:
            seen_contrib.add(key)
            c.contributions += 1
            c.workers.add(pk.worker)
            if pk.is_retx:  # first copy we saw was already a resend: the original was lost upstream
                c.retransmissions += 1
                w["retransmissions"] += 1
        if c.first_contribution is None:
            c.first_contribution = pk.ts
    return InaAnalysis(packets, chunks, dict(workers))
