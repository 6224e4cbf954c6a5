"""Decode the in-network aggregation protocol in packet traces.

Per packet: job, slot, version, worker, seq, op, flags, count. Per chunk
(job, seq): when the first contribution was seen, when the first result was
seen (completion latency as observed at the capture point), how many
contributions, retransmissions and duplicates. Per worker (named by its host,
w1.., when the run folder's job plan is there): contributions,
retransmissions, results received (the results addressed to its IP).
A retransmission is a contribution the worker marked as resent (the RETX
flag), the same count as tshark's `ina.flags.retx == 1` and the trace
summary's flow rows.

Give it the switch's `<intf>_in.pcap` files for contributions and `_out.pcap`
files for results (or all of a point's pcaps): frames from several files are
merged by timestamp. Frames the capture cut short (`switch.capture_bytes`, at
least the headers) decode from their headers as whole ones do; the summary
counts them.

Refusals. Membership is bound to ports: the aggregation switch drops a
contribution whose worker id is not bound to the port it came in on
(`Ingress.bad_port`). When the pcaps sit in a run folder
(<run>/pcaps/<point>/), the decoder reads the jobs the control plane installed
(<run>/logs/<point>/ina-jobs.json: each worker's port) and counts, per claimed
(job, worker), the contributions that entered the aggregation switch on another
port (`<switch>-eth<port>_in.pcap`) as refused by the binding: they are left
out of the chunk and worker statistics, which describe aggregation. It also
shows the switch's own refusal counters for the point (metrics.jsonl,
`switch_counters`), the authoritative number.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from testbed import wire
from testbed.pcap import read_frames

JOBS_FILE = "ina-jobs.json"        # written by testbed.switch.control_plane (same name)
# Per-job counters of contributions the switch refused, and what each means.
REFUSAL_COUNTERS = {
    "Ingress.bad_port": "worker id not bound to the ingress port (impersonation)",
    "Ingress.bad_worker": "worker id not a member of the job",
    "Ingress.bad_job": "unknown job",
    "Ingress.bad_slot": "slot outside the job's range",
    "Ingress.malformed": "malformed INA header",
}
_INTF_PCAP = re.compile(r"^(?P<switch>[A-Za-z]+\d+)-eth(?P<port>\d+)_(?P<dir>in|out)\.pcap$")


def by_capture_point(paths: Iterable[str | Path]) -> dict[str, list[Path]]:
    """{"switch": a soft switch's per-port <sw>-eth<p>_in/_out pcaps, "other": the
    rest (host captures, switch.capture_hosts; tcpdump's per-interface pcaps)}:
    one frame seen at a host and again at the switch port must not count twice,
    so each capture point is decoded on its own."""
    out: dict[str, list[Path]] = {"switch": [], "other": []}
    for p in map(Path, paths):
        out["switch" if _INTF_PCAP.match(p.name) else "other"].append(p)
    return {k: v for k, v in out.items() if v}


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
    refused_port: bool = False       # refused by the port binding (see the module docstring)
    truncated: bool = False          # captured without all its values (the capture's snaplen)

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
class PointContext:
    """What the run folder says about the point whose pcaps are decoded."""

    label: str
    switch: str | None = None                                 # the aggregation switch
    bindings: dict[tuple[int, int], int] = field(default_factory=dict)   # (job, worker) -> port
    hosts: dict[tuple[int, int], str] = field(default_factory=dict)      # (job, worker) -> host name
    ips: dict[tuple[int, str], int] = field(default_factory=dict)        # (job, host IP) -> worker
    counters: dict[str, dict] = field(default_factory=dict)   # switch -> counter -> {index: {packets}}


def point_context(paths: Iterable[str | Path]) -> PointContext | None:
    """The job plan and switch counters of the point, when the pcaps are in
    <run>/pcaps/<point>/ (None otherwise)."""
    dirs = {Path(p).resolve().parent for p in paths}
    if len(dirs) != 1:
        return None
    d = dirs.pop()
    if d.parent.name != "pcaps":
        return None
    run, label = d.parent.parent, d.name
    ctx = PointContext(label)
    jobs_path = run / "logs" / label / JOBS_FILE
    if jobs_path.exists():
        plan = json.loads(jobs_path.read_text())
        ctx.switch = plan.get("switch")
        for job in plan.get("jobs", []):
            for w in job["workers"]:
                key = (int(job["job_id"]), int(w["worker_id"]))
                ctx.bindings[key] = int(w["port"])
                if w.get("host"):
                    ctx.hosts[key] = w["host"]
                if w.get("ip"):
                    ctx.ips[(key[0], w["ip"])] = key[1]
    metrics = run / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            if '"switch_counters"' not in line:
                continue
            r = json.loads(line)
            if r.get("type") == "switch_counters" and r.get("label") == label:
                ctx.counters[r["switch"]] = r.get("counters", {})
    return ctx


def refusal_lines(counters: dict[str, dict], indent: str = "  ") -> list[str]:
    """Non-zero refusal counters per switch and job, one line each."""
    lines = []
    for sw, by_name in sorted(counters.items()):
        for name, what in REFUSAL_COUNTERS.items():
            for idx, cell in sorted((by_name.get(name) or {}).items(), key=lambda kv: int(kv[0])):
                n = cell.get("packets", 0) if isinstance(cell, dict) else int(cell)
                if n:
                    where = "" if name == "Ingress.malformed" else f" job {idx}"
                    lines.append(f"{indent}{sw}{where}: {name} {n} ({what})")
    return lines


@dataclass
class InaAnalysis:
    packets: list[InaPacket]
    chunks: dict[tuple[int, int], ChunkStats]
    workers: dict[tuple[int, int], dict[str, int]]
    context: PointContext | None = None
    # (job, claimed worker, ingress port) -> contributions refused by the port binding
    refused_port: dict[tuple[int, int, int], int] = field(default_factory=dict)

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
            "truncated_packets": sum(p.truncated for p in self.packets),
            "completion_latency_s": _percentiles(lat),
            "per_worker": {self.worker_name(j, w): v for (j, w), v in sorted(self.workers.items(),
                                                                                key=lambda kv: str(kv[0]))},
            "refused_by_port_binding": [
                {"job": j, "worker": w, "port": p, "bound_port": self._bound(j, w), "packets": n}
                for (j, w, p), n in sorted(self.refused_port.items())],
            "switch_refusals": {sw: {name: {str(i): (c.get("packets", 0) if isinstance(c, dict) else c)
                                            for i, c in (by.get(name) or {}).items()}
                                     for name in REFUSAL_COUNTERS if by.get(name)}
                                for sw, by in (self.context.counters if self.context else {}).items()},
        }

    def worker_name(self, job: int, worker: int | str) -> str:
        """`job1/w2` (the scenario's host name, from the run folder's job plan),
        else `job1/worker1` (the protocol's worker id); results addressed to an
        IP no contribution came from: `job1/10.0.0.9`."""
        if isinstance(worker, str):
            return f"job{job}/{worker}"
        host = self.context.hosts.get((job, worker)) if self.context else None
        return f"job{job}/{host}" if host else f"job{job}/worker{worker}"

    def _bound(self, job: int, worker: int) -> int | None:
        return self.context.bindings.get((job, worker)) if self.context else None

    def format(self, show_packets: int = 0) -> str:
        d = self.to_dict()
        lines = ["in-network aggregation:",
                 f"  {d['packets']} packets: {d['contributions']} contributions, {d['results']} results",
                 f"  chunks: {d['chunks']} seen, {d['completed_chunks']} completed; "
                 f"retransmissions {d['retransmissions']}, duplicates {d['duplicates']}"]
        if d["truncated_packets"]:
            lines.append(f"  truncated: {d['truncated_packets']} packets captured without all their values "
                         "(snaplen); decoded from their headers")
        p = d["completion_latency_s"]
        if p:
            lines.append("  completion latency (first contribution -> first result at this capture point): "
                         f"p50 {p['p50'] * 1e6:.0f} us, p99 {p['p99'] * 1e6:.0f} us, max {p['max'] * 1e6:.0f} us")
        lines.append("  per worker:          contributions  retransmissions  results received")
        for k, v in d["per_worker"].items():
            lines.append(f"    {k:<18}{v['contributions']:>14}{v['retransmissions']:>17}{v['results']:>18}")
        lines.append("  (retransmissions: contributions a worker marked as resent, the RETX flag: "
                     "tshark's ina.flags.retx == 1; results: those addressed to the worker's IP)")
        if self.refused_port:
            lines.append(f"  refused by the port binding (contributions into {self.context.switch} "
                         "under a worker id bound to another port; not counted above): "
                         f"{sum(self.refused_port.values())}")
            for r in d["refused_by_port_binding"]:
                bound = "no port" if r["bound_port"] is None else f"port {r['bound_port']}"
                name = self.worker_name(r["job"], r["worker"])
                if not name.endswith(f"/worker{r['worker']}"):
                    name += f" (worker id {r['worker']})"
                lines.append(f"    {name} arriving on port {r['port']} "
                             f"(bound to {bound}): {r['packets']}")
        if self.context and self.context.counters:
            refusals = refusal_lines(self.context.counters, "    ")
            lines.append(f"  switch refusal counters, point {self.context.label} (metrics.jsonl): "
                         + ("none" if not refusals else ""))
            lines += refusals
        if show_packets:
            lines.append(f"  first {min(show_packets, len(self.packets))} packets:")
            lines.append("    time(s)      dir     job slot ver worker seq        op   flags   count exp")
            t0 = self.packets[0].ts if self.packets else 0.0
            for pk in self.packets[:show_packets]:
                direction = "result" if pk.is_result else ("refused" if pk.refused_port else "contrib")
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
            parsed = wire.parse_frame(fr.data, fr.wire_len)
            if parsed is None:
                continue
            h = parsed.header
            out.append(InaPacket(fr.ts, wire.ip_str(parsed.src_ip), wire.ip_str(parsed.dst_ip), h.job_id, h.slot,
                                 h.slot_ver, h.worker_id, h.seq, wire.OP_NAMES.get(h.op, str(h.op)), h.flags,
                                 h.count, h.exponent, Path(path).name,
                                 truncated=len(parsed.values) < h.count))
    out.sort(key=lambda p: p.ts)
    return out


def _mark_refused(packets: list[InaPacket], ctx: PointContext | None) -> dict[tuple[int, int, int], int]:
    """Contributions that entered the aggregation switch on a port their
    (job, worker) is not bound to, as the switch's `Ingress.worker_port` sees it."""
    refused: dict[tuple[int, int, int], int] = defaultdict(int)
    if ctx is None or ctx.switch is None or not ctx.bindings:
        return {}
    jobs = {j for j, _ in ctx.bindings}
    for pk in packets:
        m = _INTF_PCAP.match(pk.source)
        if pk.is_result or pk.job not in jobs or m is None or m["dir"] != "in" \
                or m["switch"] != ctx.switch:
            continue
        port = int(m["port"])
        if ctx.bindings.get((pk.job, pk.worker)) != port:
            pk.refused_port = True
            refused[(pk.job, pk.worker, port)] += 1
    return dict(refused)


def analyze(paths: str | Path | Iterable[str | Path],
            context: PointContext | None = None) -> InaAnalysis:
    """Decode and tally; `context` defaults to what the run folder around the
    pcaps says (point_context)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    if context is None:
        context = point_context(paths)
    packets = decode(paths)
    refused = _mark_refused(packets, context)
    # Who a result is for: the worker whose IP it is addressed to (the job plan's
    # addresses, else the source address of that worker's contributions). The
    # header's worker field of a result is whatever the switch left there.
    ip_worker: dict[tuple[int, str], int] = dict(context.ips) if context else {}
    for pk in packets:
        if not pk.is_result and not pk.refused_port:
            ip_worker.setdefault((pk.job, pk.src_ip), pk.worker)
    chunks: dict[tuple[int, int], ChunkStats] = {}
    workers: dict[tuple[int, int | str], dict[str, int]] = defaultdict(
        lambda: {"contributions": 0, "retransmissions": 0, "results": 0})
    seen_contrib: set[tuple[int, int, int]] = set()
    for pk in packets:
        if pk.refused_port:
            continue
        c = chunks.get((pk.job, pk.seq))
        if c is None:
            c = chunks[(pk.job, pk.seq)] = ChunkStats(pk.job, pk.seq, pk.slot, pk.slot_ver)
        if pk.is_result:
            c.results += 1
            if c.first_result is None:
                c.first_result = pk.ts
            workers[(pk.job, ip_worker.get((pk.job, pk.dst_ip), pk.dst_ip))]["results"] += 1
            continue
        w = workers[(pk.job, pk.worker)]
        w["contributions"] += 1
        # One count of retransmissions everywhere (chunks, workers, flows, tshark's
        # ina.flags.retx == 1): the contributions a worker marked as resent.
        if pk.is_retx:
            c.retransmissions += 1
            w["retransmissions"] += 1
        key = (pk.job, pk.seq, pk.worker)
        if key in seen_contrib:
            if not pk.is_retx:
                c.duplicates += 1      # the same contribution again, not marked as a resend
        else:
            seen_contrib.add(key)
            c.contributions += 1
            c.workers.add(pk.worker)
        if c.first_contribution is None:
            c.first_contribution = pk.ts
    return InaAnalysis(packets, chunks, dict(workers), context, refused)
