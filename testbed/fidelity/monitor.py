"""Fidelity monitor: is the emulated network slowed down as much as the compute?

Compute on a modeled device is slept for `tdf x hw_s` (time dilation, TDF). A
point's times mean something only if the network is slowed by the same factor:
for every communication op of the traces (one per rank and collective)

    L        = max over ranks of t0 (perf_counter seconds, wall: the last
               participant's arrival, so a late peer's compute is not counted
               as network time)
    measured = t1 - L
    modeled  = what remains of the op after L on the hardware, given when every
               rank arrived: network_model.finish_after_arrivals(op, algo, values,
               value_bytes, arrivals, profile) for this rank, minus L (arrivals
               taken from the ranks' t0, / tdf). All ranks together: exactly
               network_model.collective_time(op, algo, values, value_bytes,
               members, profile) (members: the ranks whose traces have that
               collective). Comparing with the whole collective_time instead
               made a ring of 4 read 0.83x: the early ranks' first steps were
               already done when the last one joined.
    slowdown = measured / modeled
    (an op the early ranks finished for this rank, modeled < 1 % of the whole
    op, measures nothing: skipped)

Point-to-point messages (send/recv, hosts/common/trace.py) count once, on the
receiver's recv node, against its sender's send node (same group and seq):

    measured = recv.t1 - max(send.t0, recv.t0)   (from when both were there)
    modeled  = network_model.message_time(bytes, profile, switches)

where `switches` is how many switches the path from sender to receiver crosses
(1 on a star; on a tree 2 between a leaf and the spine, 3 leaf to leaf). The
runner writes the point's table beside the traces (`paths.json`:
{"switches": {src: {dst: k}}}, testbed.net.topology.TopologyPlan.path_switches);
`load_traces` puts each host's row in its trace header (`path_switches`;
testbed/fidelity/paths.py). A pair not in the table (no paths.json: runs from
before it, `--net local`) counts 1, as every run did before. Collectives are
costed through the switches of their paths too (`paths.collective_switches`).

Messages queue on the hardware as in the emulation: one host's uplink sends its
messages one after another, one host's downlink receives them one after
another (a server's N replies, N workers' pushes to one server). Time a
message spends waiting behind others on those links is the modeled network's
own queueing, not a slow emulator, so it is taken out like a late peer's
compute: replaying every message in order of its send on per-host up- and
downlinks, each busy TDF x link_busy_s (network_model.message_cost), gives each
message's queueing delay q, and

    measured = recv.t1 - max(send.t0 + q, recv.t0)

(`p2p_queued` counts the messages with q > 0).
A message whose receiver began waiting after its sender had finished sending
(recv.t0 >= send.t1) was buffered: the bytes were already in, so the wait
measures nothing of the network. It is counted (`p2p_buffered`) and left out of
the statistics. A recv whose sender has no trace is skipped (`comm_ops_skipped`).
A message between two endpoints on one host's NIC (paths.same_host: a worker and
the parameter server colocated with it) crosses no link on the hardware and
only loopback in the emulation: it is not a network operation, and is counted
(`p2p_local`) and left out of the statistics and of the links' queueing.

and the point is valid when `ratio_p50 = median(slowdown) / tdf` lies in the band
(default [0.8, 1.25], issue 8). The tail is checked too: `ratio_p99 =
p99(slowdown) / tdf` above the band's upper edge only warns (the emulator's
stalls, a scheduler quantum or a loss retransmission, show up there, and a few
such ops do not change a point's total), but above `p99_invalid` (default 10:
one op in a hundred an order of magnitude slower than the dilated hardware)
the point's tail measures the emulator, not the modeled network, and the point
is invalid.

Compute nodes: `dilation = (t1 - t0) / hw_s` (reported, p50), and an overrun
where the real CPU/numpy time exceeded the dilated budget, `real_s > tdf * hw_s`:
the emulation could not keep up at this TDF. Devices carry a sleep debt
(hosts/glm/devices.py), so a rare overrun is absorbed; more than
`max_overrun_share` (default 1 %) of compute nodes overrunning makes the point
invalid, fewer only warn.

`reasons` are sentences with the numbers; `flags` are short codes for tables
and plots (dilation_mismatch, net_tail, net_tail_extreme, compute_overrun,
ops_outside_band, incomplete_ops, no_comm_ops).

`calibrate_tdf(measured_op_s, modeled_op_s)` is the median slowdown of a
calibration run, rounded to two significant digits (at most 5 % off the median,
well inside the band, while keeping TDFs readable and repeatable: 1834 -> 1800).
`converged(prev, new, tol)` says whether a recalibration changed it by <= tol.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from hosts.common.calibration import MAX_OVERRUN_SHARE, P99_INVALID, VALID_BAND
from hosts.common.trace import parse_p2p_group, read_trace
from testbed.fidelity.constants import HardwareProfile
from testbed.fidelity.network_model import (collective_time, finish_after_arrivals, message_cost,
                                            message_time)
from testbed.fidelity.paths import (PATHS_FILE, PATHS_HEADER_KEY, Table, collective_switches, nic_table,
                                    path_switches, read_path_table, same_host)

Trace = tuple[dict[str, Any], list[dict[str, Any]]]
DEFAULT_BAND = VALID_BAND      # calibration's headroom rule reads the same numbers
TRACE_GLOB = "*.trace.jsonl"


@dataclass
class FidelityReport:
    tdf: float
    profile: str
    band: tuple[float, float]
    valid: bool
    reasons: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    comm_ops: int = 0                  # ops with a slowdown (modeled > 0, completed)
    comm_ops_skipped: int = 0          # world 1 / algo none: nothing to compare with
    comm_ops_incomplete: int = 0       # t1 missing: never completed
    p2p_messages: int = 0              # messages with a slowdown (in comm_ops)
    p2p_buffered: int = 0              # messages the receiver found already in: not measured
    p2p_queued: int = 0                # messages that waited behind others on a host's link
    p2p_local: int = 0                 # messages between endpoints on one host: not network ops
    net_slowdown_p50: float | None = None
    net_slowdown_p90: float | None = None
    net_slowdown_p99: float | None = None
    ratio_p50: float | None = None     # net_slowdown_p50 / tdf
    ratio_p99: float | None = None
    outside_band_share: float | None = None   # ops whose slowdown / tdf is outside the band
    compute_nodes: int = 0
    compute_dilation_p50: float | None = None
    overrun_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["band"] = list(self.band)
        return d


def load_traces(folder: str | Path) -> list[Trace]:
    """Every `*.trace.jsonl` of a point's work folder, sorted by rank."""
    paths = sorted(Path(folder).glob(TRACE_GLOB))
    if not paths:
        raise ValueError(f"{folder}: no {TRACE_GLOB} files (did the hosts record traces?)")
    traces = sorted((read_trace(p) for p in paths), key=lambda t: t[0].get("rank", 0))
    table = read_path_table(Path(folder) / PATHS_FILE)
    for header, _ in traces:
        row = table.get(str(header.get("host")))
        if row is not None:
            header[PATHS_HEADER_KEY] = row
    return traces


def trace_tdf(traces: Sequence[Trace]) -> float:
    """The TDF all headers agree on; ValueError if they differ."""
    tdfs = {float(h["tdf"]) for h, _ in traces}
    if len(tdfs) != 1:
        raise ValueError(f"traces disagree on tdf: {sorted(tdfs)} (hosts: "
                         f"{', '.join(str(h.get('host')) for h, _ in traces)})")
    return tdfs.pop()


def fidelity_report(traces: Sequence[Trace] | str | Path, profile: HardwareProfile,
                    tdf: float | None = None, *, band: tuple[float, float] = DEFAULT_BAND,
                    p99_invalid: float = P99_INVALID, max_overrun_share: float = MAX_OVERRUN_SHARE,
                    max_outside_share: float | None = None) -> FidelityReport:
    """Compare every comm op's measured time with its modeled hardware time (see module doc).

    traces: (header, nodes) pairs as `hosts.common.trace.read_trace` returns, or a
    work folder. tdf: the point's dilation; None = the traces' headers' value.
    max_outside_share: if set, more ops than this share outside the band is invalid.
    """
    if isinstance(traces, (str, Path)):
        traces = load_traces(traces)
    if not traces:
        raise ValueError("fidelity_report: no traces")
    lo, hi = band
    if not 0 < lo <= 1 <= hi:
        raise ValueError(f"band must satisfy 0 < lo <= 1 <= hi, got {band}")
    if tdf is None:
        tdf = trace_tdf(traces)
    if tdf <= 0:
        raise ValueError(f"tdf must be positive, got {tdf}")

    rep = FidelityReport(tdf=tdf, profile=profile.label(), band=(lo, hi), valid=True)
    slowdowns, dilations, overruns = [], [], 0
    sends = {(n["group"], n["seq"]): n for _, nodes in traces for n in nodes
             if n["kind"] == "comm" and n["op"] == "send" and n["algo"] == "p2p"}
    switches = path_switches(traces)
    nics = nic_table(traces)
    local = {k for k in sends if same_host(*parse_p2p_group(k[0])[1:], nics)}
    sends = {k: v for k, v in sends.items() if k not in local}
    remaining = _remaining_after_last_arrival(traces, profile, tdf, switches)
    queued = _link_queueing(sends, profile, tdf, rep)
    for header, nodes in traces:
        for n in nodes:
            if n["kind"] == "comm":
                if n.get("t1") is None:
                    rep.comm_ops_incomplete += 1
                    continue
                if n["algo"] == "p2p":
                    if (n["group"], n["seq"]) in local:
                        rep.p2p_local += n["op"] == "recv"      # counted once, on its recv
                        continue
                    slowdown = _message_slowdown(n, sends, profile, rep, queued, switches)
                    if slowdown is not None:
                        slowdowns.append(slowdown)
                    continue
                # From the last participant's arrival: waiting for a late peer is the
                # peers' compute (which the device model paces), not the network.
                last, modeled = remaining[id(n)]
                if modeled <= 0:
                    rep.comm_ops_skipped += 1
                    continue
                slowdowns.append(max(0.0, n["t1"] - last) / modeled)
            elif n["kind"] == "compute":
                rep.compute_nodes += 1
                if n["hw_s"] > 0:
                    dilations.append((n["t1"] - n["t0"]) / n["hw_s"])
                if n["real_s"] > tdf * n["hw_s"]:
                    overruns += 1
            else:
                raise ValueError(f"trace of {header.get('host')}: node {n.get('id')} has unknown kind {n['kind']!r}")

    if dilations:
        rep.compute_dilation_p50 = float(np.median(dilations))
    if rep.compute_nodes:
        rep.overrun_share = overruns / rep.compute_nodes
        if overruns:
            bad = rep.overrun_share > max_overrun_share
            rep.reasons.append(f"compute overrun: {overruns} of {rep.compute_nodes} compute nodes "
                               f"({rep.overrun_share:.1%}) took more CPU time than tdf x hw_s "
                               f"(limit {max_overrun_share:.1%}{'' if bad else ', warning only'})")
            rep.flags.append("compute_overrun")
            rep.valid &= not bad
    if rep.comm_ops_incomplete:
        rep.reasons.append(f"{rep.comm_ops_incomplete} communication ops never completed (no t1)")
        rep.flags.append("incomplete_ops")
        rep.valid = False

    rep.comm_ops = len(slowdowns)
    if not slowdowns:
        rep.reasons.append("no communication op with a modeled time: network fidelity not checked"
                           + (f" ({rep.p2p_buffered} messages were buffered)" if rep.p2p_buffered else ""))
        rep.flags.append("no_comm_ops")
        return rep
    sd = np.asarray(slowdowns)
    rep.net_slowdown_p50, rep.net_slowdown_p90, rep.net_slowdown_p99 = (
        float(x) for x in np.percentile(sd, [50, 90, 99]))
    rep.ratio_p50 = rep.net_slowdown_p50 / tdf
    rep.ratio_p99 = rep.net_slowdown_p99 / tdf
    ratios = sd / tdf
    rep.outside_band_share = float(np.mean((ratios < lo) | (ratios > hi)))
    if not lo <= rep.ratio_p50 <= hi:
        rep.valid = False
        rep.flags.append("dilation_mismatch")
        rep.reasons.append(f"network slowdown p50 {rep.net_slowdown_p50:.4g}x is {rep.ratio_p50:.2g}x the "
                           f"compute dilation {tdf:.4g}x (band {lo:g}-{hi:g})")
    if rep.ratio_p99 > p99_invalid:
        rep.valid = False
        rep.flags.append("net_tail_extreme")
        rep.reasons.append(f"network slowdown p99 {rep.net_slowdown_p99:.4g}x is {rep.ratio_p99:.2g}x the "
                           f"compute dilation {tdf:.4g}x (invalid above {p99_invalid:g}x)")
    elif rep.ratio_p99 > hi:
        rep.flags.append("net_tail")
        rep.reasons.append(f"network slowdown p99 {rep.net_slowdown_p99:.4g}x is {rep.ratio_p99:.2g}x the "
                           f"compute dilation {tdf:.4g}x (above the band's {hi:g}; warning only)")
    if max_outside_share is not None and rep.outside_band_share > max_outside_share:
        rep.valid = False
        rep.flags.append("ops_outside_band")
        rep.reasons.append(f"{rep.outside_band_share:.1%} of {rep.comm_ops} communication ops are outside "
                           f"the band {lo:g}-{hi:g} x tdf (limit {max_outside_share:.1%})")
    return rep


def _remaining_after_last_arrival(traces: Sequence[Trace], profile: HardwareProfile, tdf: float,
                                  table: Table | None = None) -> dict[int, tuple[float, float]]:
    """id(node) -> (L, modeled): the last participant's arrival (emulated seconds)
    and the hardware seconds the op has left after it for that node's rank
    (module docstring; 0: nothing to measure).

    Every host's times are time.perf_counter() (CLOCK_MONOTONIC, one clock for the
    machine), so arrivals of different ranks compare directly. Ring order is rank order."""
    groups: dict[tuple[str, int], list[tuple[int, dict[str, Any], str]]] = {}
    for header, nodes in traces:
        for n in nodes:
            if n["kind"] == "comm" and n["algo"] != "p2p":
                groups.setdefault((n["group"], n["seq"]), []).append(
                    (int(header.get("rank", 0)), n, str(header.get("host"))))
    out: dict[int, tuple[float, float]] = {}
    for trio in groups.values():
        trio.sort(key=lambda rnh: rnh[0])
        members = [(r, n) for r, n, _ in trio]
        n0 = members[0][1]
        args = (n0["op"], n0["algo"], int(n0["values"]), int(n0["value_bytes"]))
        scale_round = bool(n0.get("scale_round"))
        k = collective_switches(n0["algo"], [h for _, _, h in trio], table or {})
        whole = collective_time(*args, len(members), profile, scale_round, k)
        t0s = [n["t0"] for _, n in members]
        first, last = min(t0s), max(t0s)
        if whole <= 0:
            out.update((id(n), (last, 0.0)) for _, n in members)
            continue
        finish = finish_after_arrivals(*args, [(t - first) / tdf for t in t0s], profile, scale_round, k)
        last_hw = (last - first) / tdf
        for (_, n), f in zip(members, finish):
            left = f - last_hw
            out[id(n)] = (last, left if left >= 0.01 * whole else 0.0)
    return out


def _link_queueing(sends: dict[tuple[str, int], dict[str, Any]], profile: HardwareProfile, tdf: float,
                   rep: FidelityReport) -> dict[tuple[str, int], float]:
    """Each message's wait (emulated seconds) behind other messages on its sender's
    uplink and its receiver's downlink, replayed in order of send (module docstring)."""
    up_free: dict[str, float] = {}
    down_free: dict[str, float] = {}
    out: dict[tuple[str, int], float] = {}
    for key, send in sorted(sends.items(), key=lambda kv: kv[1]["t0"]):
        _, src, dst = parse_p2p_group(key[0])
        busy = tdf * message_cost(int(send["values"]) * int(send["value_bytes"]), profile).link_busy_s
        start = max(send["t0"], up_free.get(src, 0.0), down_free.get(dst, 0.0))
        up_free[src] = down_free[dst] = start + busy
        out[key] = start - send["t0"]
        if out[key] > 0:
            rep.p2p_queued += 1
    return out


def _message_slowdown(recv: dict[str, Any], sends: dict[tuple[str, int], dict[str, Any]],
                      profile: HardwareProfile, rep: FidelityReport,
                      queued: dict[tuple[str, int], float] | None = None,
                      switches: Table | None = None) -> float | None:
    """A recv node's slowdown against its send (module docstring); None when not measured."""
    if recv["op"] != "recv":
        return None                      # the send side: measured on its recv
    send = sends.get((recv["group"], recv["seq"]))
    if send is None or send.get("t1") is None:
        rep.comm_ops_skipped += 1        # the sender is not traced (or never finished: counted there)
        return None
    if recv["t0"] >= send["t1"]:
        rep.p2p_buffered += 1
        return None
    rep.p2p_messages += 1
    _, src, dst = parse_p2p_group(recv["group"])
    modeled = message_time(int(recv["values"]) * int(recv["value_bytes"]), profile,
                           (switches or {}).get((src, dst), 1))
    q = (queued or {}).get((recv["group"], recv["seq"]), 0.0)
    return max(0.0, recv["t1"] - max(send["t0"] + q, recv["t0"])) / modeled


def calibrate_tdf(measured_op_s: Iterable[float], modeled_op_s: float) -> float:
    """TDF = median(measured) / modeled, rounded to two significant digits (module doc)."""
    xs = [float(x) for x in measured_op_s]
    if not xs:
        raise ValueError("calibrate_tdf: no measured op times")
    if not modeled_op_s > 0:
        raise ValueError(f"calibrate_tdf: modeled op time must be positive, got {modeled_op_s}")
    if any(not (x > 0 and math.isfinite(x)) for x in xs):
        raise ValueError("calibrate_tdf: measured op times must be positive and finite")
    return round_sig(float(np.median(xs)) / modeled_op_s, 2)


def converged(prev: float | None, new: float, tol: float = 0.1) -> bool:
    """True when `new` is within `tol` (relative) of `prev` (None: first calibration, False)."""
    if prev is None:
        return False
    if prev <= 0 or new <= 0:
        raise ValueError(f"converged: TDFs must be positive, got {prev} and {new}")
    return abs(new - prev) <= tol * prev


def round_sig(x: float, digits: int) -> float:
    if x <= 0:
        raise ValueError(f"round_sig: expected a positive number, got {x}")
    return float(round(x, digits - 1 - int(math.floor(math.log10(x)))))
