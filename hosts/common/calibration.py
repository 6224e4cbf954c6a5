"""Calibrated time dilation: pick the dilation (TDF) from what the emulated network does.

The emulated network (Python switch and hosts on shared cores) is hundreds to
thousands of times slower than the hardware a scenario models, and how much
slower depends on the collective, the message size and the worker count. The
compute of a modeled device is slept for `TDF x modeled time`; results mean
what the hardware would do only when compute and network are slowed by the
same factor. So a host program first runs a few iterations of its own work on
the built network, measures each collective operation against its modeled
hardware time, and sets

    TDF_net = median over ops of (network time of the op / hardware op time),
              network time = completion - the last worker's submit
    TDF_cmp = max over workers of (real compute time / modeled time) x headroom
    TDF     = max(TDF_net, TDF_cmp)

(research/time-fidelity.md, section 7.4: the workload's own collective, not a
synthetic probe). TDF_cmp only wins when numpy cannot keep up with the dilated
device model; the network then runs "too fast" for that TDF and the fidelity
monitor marks the point invalid rather than hiding it.

Workers must agree on one TDF: `encode` puts each worker's measurements at its
own rank's slots (small numbers: no fixed-point overflow in the in-switch path),
an ordinary SUM allreduce gives every worker the same vector, and `decide`
reads the decision from it, identically everywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

COMPUTE_HEADROOM = 2.0   # [A] slack for numpy jitter on a loaded 2-core machine (1.2 overran 2-7 % of steps here)
MIN_TDF, MAX_TDF = 1.0, 1e6

# The fidelity monitor's validity rule (testbed/fidelity/monitor.py reads these: one place).
# A point is valid when its run-long median network slowdown / TDF lies in VALID_BAND,
# its p99 / TDF is at most P99_INVALID, and at most MAX_OVERRUN_SHARE of its compute
# steps overran their dilated budget.
VALID_BAND = (0.8, 1.25)
P99_INVALID = 10.0
MAX_OVERRUN_SHARE = 0.01
# ... and the point's emulated time (hardware-equivalent) agrees with the projection of
# its own trace within this share (testbed/fidelity/records.py check_agreement).
AGREEMENT_TOLERANCE = 0.15


MAX_OPS = 64   # ops per round sent in the agreement vector (bounds its size)
# Times in the agreement vector are in units of 0.1 s: a dilated calibration round
# lasts up to a few tens of seconds, and P4SGD's fixed point (2^16, |x| < 2^11 at
# 8 workers) carries at most ~200 s at a resolution of 1.5 us (ms units overflowed
# at TDF ~20000 on the wide model).
TIME_UNIT_S = 0.1


def agreement_size(n_ops: int, world: int) -> int:
    """Length of the agreement vector for n_ops measured operations."""
    return 2 * min(n_ops, MAX_OPS) * world + 2 * world


def encode(t0s: Sequence[float], t1s: Sequence[float], compute_ratio: float | None,
           rank: int, world: int) -> np.ndarray:
    """This worker's part of the agreement vector (zeros elsewhere; a SUM fills it in).

    Per op: submit and completion times in TIME_UNIT_S relative to this worker's first
    completion. Completions of one collective reach every worker at nearly the
    same moment (one multicast, one ring step), so that reference lines the
    workers' clocks up without sharing absolute times (large numbers that fixed
    point could not carry). Then log2 of this worker's compute ratio."""
    n = min(len(t0s), MAX_OPS)
    v = np.zeros(agreement_size(n, world), dtype=np.float64)
    if n:
        ref = t1s[0]
        v[rank * n:(rank + 1) * n] = (np.asarray(t0s[:n]) - ref) / TIME_UNIT_S
        off = n * world
        v[off + rank * n:off + (rank + 1) * n] = (np.asarray(t1s[:n]) - ref) / TIME_UNIT_S
    if compute_ratio is not None and compute_ratio > 0:
        off = 2 * n * world
        v[off + rank] = math.log2(compute_ratio * COMPUTE_HEADROOM)
        v[off + world + rank] = 1.0
    return v


def decide(summed: np.ndarray, n_ops: int, world: int, hw_op_s: "float | Sequence[float]",
           fallback: float) -> tuple[float, dict]:
    """The common TDF from the summed vector (identical on every worker).

    Network time of op k = median over workers of its completion - the last
    worker's submit (waiting for a late peer is compute, not network).
    hw_op_s: one hardware time for every op, or one per op (ops of different
    sizes, e.g. LHC's support and sketch rounds); TDF_net is then the median of
    the ops' own slowdowns."""
    n = min(n_ops, MAX_OPS)
    s = np.asarray(summed, dtype=np.float64)
    tdf_net = None
    hw = np.broadcast_to(np.asarray(hw_op_s, dtype=np.float64), (n,)) if n else np.zeros(0)
    if n and np.all(hw > 0):
        submit = s[:n * world].reshape(world, n)
        done = s[n * world:2 * n * world].reshape(world, n)
        net_s = np.clip(np.median(done, axis=0) - submit.max(axis=0), 0, None) * TIME_UNIT_S
        if np.any(net_s > 0):
            tdf_net = float(np.median(net_s[net_s > 0] / hw[net_s > 0]))
        ops, slow = net_s[net_s > 0], net_s[net_s > 0] / hw[net_s > 0]
    else:
        ops = slow = np.zeros(0)
    off = 2 * n * world
    return _decision(s, off, world, tdf_net, fallback, ops, slow)


def encode_messages(durations: Sequence[float], compute_ratio: float | None,
                    rank: int, world: int) -> np.ndarray:
    """As `encode`, for point-to-point round trips (a worker's message to a master and
    its reply): each is timed alone on its sender (the master takes one worker at a
    time), so this worker's slots carry durations (TIME_UNIT_S), not submit/done times."""
    n = min(len(durations), MAX_OPS)
    v = np.zeros(n * world + 2 * world, dtype=np.float64)
    v[rank * n:(rank + 1) * n] = np.asarray(durations[:n], dtype=np.float64) / TIME_UNIT_S
    if compute_ratio is not None and compute_ratio > 0:
        off = n * world
        v[off + rank] = math.log2(compute_ratio * COMPUTE_HEADROOM)
        v[off + world + rank] = 1.0
    return v


def decide_messages(summed: np.ndarray, n_ops: int, world: int, hw_op_s: "float | Sequence[float]",
                    fallback: float) -> tuple[float, dict]:
    """`decide` for `encode_messages` vectors: TDF_net = median over every worker's round
    trips of (measured / its hardware time); TDF_cmp and the result as in `decide`.
    hw_op_s: one hardware time for every message, or one per op index (the same on
    every worker, e.g. ShadowSync's lookups of each embedding PS in turn)."""
    n = min(n_ops, MAX_OPS)
    s = np.asarray(summed, dtype=np.float64)
    d = (s[:n * world] * TIME_UNIT_S).reshape(world, n) if n else np.zeros((world, 0))
    hw = np.broadcast_to(np.asarray(hw_op_s, dtype=np.float64)[:n] if np.ndim(hw_op_s) else
                         np.asarray(hw_op_s, dtype=np.float64), (world, n))
    ok = (d > 0) & (hw > 0)
    tdf_net = float(np.median(d[ok] / hw[ok])) if np.any(ok) else None
    off = n * world
    return _decision(s, off, world, tdf_net, fallback, d[ok], d[ok] / hw[ok])


def messages_agreement_size(n_ops: int, world: int) -> int:
    return min(n_ops, MAX_OPS) * world + 2 * world


# With a dilated network (the soft switch's delay line) the emulator's own time per
# operation must be a small part of the dilated hardware time: the network then
# measures the model, not the emulator. Dilated, an operation lasts its dilated
# hardware time plus, at most, the emulator's own time in series (host send and
# receive paths, the switch's processing; frames that pipeline hide part of it), so
# op k's ratio to the TDF is at most about
#
#     ratio_k = 1 + s_k / TDF        s_k: op k's slowdown measured undilated (round 0)
#
# (calibration's later rounds take part of the emulator's share off the delay line,
# `compensation`; the rule counts it as 0, the worst case). The TDF the validity rule
# needs follows from round 0's distribution of s (headroom "auto", the default):
#
#     typical op within the agreement tolerance:  TDF >= s_p50 / AGREEMENT_TOLERANCE   (6.7 x s_p50)
#     (so also the median in the band:            TDF >= s_p50 / (VALID_BAND[1] - 1) = 4 x s_p50)
#     tail not invalid:                           TDF >= TAIL_MARGIN x s_p99 / (P99_INVALID - 1)
#
# The agreement bound decides: a point's time is a sum of its ops, so the typical
# op's excess is what its total carries (measured, bench/tdf.py: at 4 x s_p50 the
# median stayed in the band but P4SGD's total came out 1.27 x its projection).
# The margin left is the compensation, and a dilated network's emulator being faster
# than round 0's (its cores are idler while devices sleep). Round 0's p99 comes from
# few ops (4-64): TAIL_MARGIN doubles it.
# A number instead of "auto" (workload field network_headroom) is the older fixed rule:
# TDF = that x s_p50 (16 was the default: the emulator kept 1/16 of each operation).
TAIL_MARGIN = 2.0     # [A] see above
COMPENSATION_MAX_SHARE = (1 - VALID_BAND[0]) / 2   # of a dilated op: see Calibrator.after_round
AUTO = "auto"


def slowdown_summary(slowdowns: Sequence[float] | np.ndarray) -> dict:
    """p50, p90, p99 and max of measured per-op slowdowns (what the headroom rule reads)."""
    s = np.asarray(slowdowns, dtype=np.float64)
    s = s[np.isfinite(s) & (s > 0)]
    if not s.size:
        return {"n": 0}
    p50, p90, p99 = (float(x) for x in np.percentile(s, [50, 90, 99]))
    return {"n": int(s.size), "p50": p50, "p90": p90, "p99": p99, "max": float(s.max())}


def network_headroom(tdf_net: float, headroom: "float | str", slowdown: dict | None = None) -> tuple[float, dict]:
    """(TDF the dilated network needs, why): `headroom` a number: that x tdf_net (fixed
    rule); "auto": what the validity rule needs given round 0's per-op slowdown
    distribution (`slowdown_summary`; without one, its median tdf_net alone)."""
    if headroom != AUTO:
        h = float(headroom)
        return tdf_net * h, {"rule": "fixed", "factor": h, "by": "fixed",
                             "why": f"fixed headroom {h:g} x the median slowdown {tdf_net:.4g}"}
    sd = slowdown or {}
    p99 = sd.get("p99") or tdf_net
    bounds = {"agreement": tdf_net / AGREEMENT_TOLERANCE, "band": tdf_net / (VALID_BAND[1] - 1),
              "tail": TAIL_MARGIN * p99 / (P99_INVALID - 1)}
    by = max(bounds, key=bounds.get)
    need = bounds[by]
    why = {"agreement": f"median slowdown {tdf_net:.4g} / {AGREEMENT_TOLERANCE:g} (the agreement tolerance)",
           "band": f"median slowdown {tdf_net:.4g} / {VALID_BAND[1] - 1:g} (band edge {VALID_BAND[1]:g})",
           "tail": f"p99 slowdown {p99:.4g} x {TAIL_MARGIN:g} / {P99_INVALID - 1:g} (tail limit {P99_INVALID:g})"}[by]
    return need, {"rule": "measured", "factor": need / tdf_net, "by": by, "why": why,
                  "slowdown": sd or {"p50": tdf_net}}


def dilated_tdf(tdf_net: float | None, tdf_cmp: float | None, headroom: "float | str",
                fallback: float, slowdown: dict | None = None) -> float:
    """The TDF for a network the switch dilates: high enough that neither the
    emulated network (`network_headroom` of its own slowdown) nor the host's numpy +
    glue (tdf_cmp, which carries COMPUTE_HEADROOM) shows in the results."""
    return dilated_decision(tdf_net, tdf_cmp, headroom, fallback, slowdown)[0]


def dilated_decision(tdf_net: float | None, tdf_cmp: float | None, headroom: "float | str",
                     fallback: float, slowdown: dict | None = None) -> tuple[float, dict]:
    """`dilated_tdf` and why: {rule, factor (TDF / median slowdown), by (median, tail,
    fixed or compute), why (a sentence), slowdown}."""
    # The host's need is an average over steps; single steps vary (GC, scheduling), and
    # on a dilated network nothing else pushes TDF up, so give compute twice the slack.
    net, why = network_headroom(tdf_net, headroom, slowdown) if tdf_net else (None, {"rule": "none"})
    cmp = 2 * tdf_cmp if tdf_cmp else None
    if cmp and (net is None or cmp > net):
        why = dict(why, by="compute", why=f"the hosts' compute: 2 x {tdf_cmp:.4g} (their real / modeled "
                                            f"time with its own headroom {COMPUTE_HEADROOM:g})")
    candidates = [x for x in (net, cmp) if x]
    tdf = max(candidates) if candidates else fallback
    tdf = float(min(MAX_TDF, max(MIN_TDF, _round_sig(tdf, 2))))
    if tdf_net:
        why["factor"] = tdf / tdf_net
    return tdf, why


def retune_tdf(tdf: float, net_slowdown: float, headroom: "float | str | None",
               net_slowdown_p99: float | None = None) -> float | None:
    """The fixed TDF to run a calibrated point once more at, when the fidelity
    monitor found its run-long network slowdown (p50, `net_slowdown`; p99
    `net_slowdown_p99` where known) outside the band at `tdf`: the rule calibration
    applies, with what the whole run measured.

    headroom None (the network was not dilated): the network's own slowdown is the
    TDF, as in calibration's undilated rounds. Dilated (headroom: the workload's
    network_headroom, a number or "auto"): the switch's delay line made the network
    `tdf` times slower and the emulator's own time came on top of it, so the
    emulator's run-long slowdown is net_slowdown - tdf (a slight underestimate:
    calibration's compensation took part of it off; a fixed-TDF retry runs without
    one), and the TDF is `dilated_tdf` of it, as round 0 sets it. Re-running at the
    measured slowdown itself left the emulator's share on top of the new TDF again:
    the point stayed invalid. None where no TDF helps: a dilated network that was not
    slower than its TDF (the emulator is not what is slow)."""
    if not net_slowdown or net_slowdown <= 0:
        return None
    if headroom is None:
        return float(min(MAX_TDF, max(MIN_TDF, _round_sig(net_slowdown, 3))))
    own = net_slowdown - tdf
    if own <= 0:
        return None
    tail = {"p50": own, "p99": net_slowdown_p99 - tdf} if net_slowdown_p99 and net_slowdown_p99 > tdf else None
    return dilated_tdf(own, None, headroom, tdf, tail)


def compensation(prev_s: float, tdf_net: float | None, tdf: float, hw_op_s: float,
                 cap_s: float) -> float:
    """Next compensation of the delay line: the previous one plus the measured
    excess of an operation over its dilated hardware time (median), within
    [0, cap_s] (cap: a share of the dilated fixed latency, which it is taken from)."""
    if not tdf_net or hw_op_s <= 0:
        return prev_s
    return float(min(cap_s, max(0.0, prev_s + (tdf_net - tdf) * hw_op_s)))


def damped(tdf_in: float, measured: float) -> float:
    """Next round's TDF. The network's slowdown itself depends on the TDF (longer
    dilated compute leaves the shared cores idler, so packets move faster): a
    plain fixed-point iteration oscillates; the geometric mean of the two
    converges (seen here: 100 -> 1420 -> 566 undamped)."""
    return float(_round_sig(math.sqrt(tdf_in * measured), 3))


def _decision(s: np.ndarray, off: int, world: int, tdf_net: float | None,
              fallback: float, op_net_s: np.ndarray, op_slowdowns: np.ndarray) -> tuple[float, dict]:
    """The TDF from the network's slowdown and the workers' compute ratios (the
    vector's slots from `off`), shared by `decide` and `decide_messages`.
    op_net_s: the measured ops' network times, summarized in the record so that an
    outlier round shows what it measured (one stalled op looks like a slow emulator);
    op_slowdowns: each op's network time / its hardware time, whose distribution
    (`slowdown_summary`) sets a dilated network's headroom."""
    has = s[off + world:off + 2 * world] > 0.5
    cmps = np.exp2(s[off:off + world][has])
    tdf_cmp = float(np.max(cmps)) if cmps.size else None
    candidates = [x for x in (tdf_net, tdf_cmp) if x is not None]
    tdf = max(candidates) if candidates else fallback
    tdf = float(min(MAX_TDF, max(MIN_TDF, _round_sig(tdf, 3))))
    ops = np.asarray(op_net_s, dtype=np.float64)
    op_s = ({"n": int(ops.size), "min": float(ops.min()), "p50": float(np.median(ops)),
             "max": float(ops.max())} if ops.size else {"n": 0})
    return tdf, {"tdf_net": tdf_net, "tdf_cmp": tdf_cmp, "op_net_s": op_s,
                 "slowdown": slowdown_summary(op_slowdowns),
                 "limited_by": ("compute" if tdf_cmp is not None and (tdf_net is None or tdf_cmp > tdf_net)
                                else "network" if tdf_net is not None else "none")}


def _round_sig(x: float, digits: int) -> float:
    if x <= 0:
        return x
    return round(x, -int(math.floor(math.log10(x))) + digits - 1)


class CalibrationRefused(RuntimeError):
    """A calibration round decided a TDF the run cannot live with (see `refuse_if_crawling`)."""


def refuse_if_crawling(tdf: float, step_hw_s: float, budget_s: float, round_no: int, why: dict) -> None:
    """Refuse, naming what was measured, a TDF at which one hardware step (an
    iteration's compute and network op, as modeled) would take longer in wall time
    than `budget_s`, what the point's deadline allows a step. A stall in an
    undilated round, such as a retransmission timeout, reads as the emulator's
    slowness and picks such a TDF: the run would crawl into its deadline."""
    if step_hw_s <= 0 or budget_s <= 0 or tdf * step_hw_s <= budget_s:
        return
    ops = why.get("op_net_s") or {}
    seen = (f"{ops['n']} op(s) took {ops['min']:.4g} .. {ops['max']:.4g} s (median {ops['p50']:.4g} s)"
            if ops.get("n") else "no op was measured")
    raise CalibrationRefused(
        f"calibration round {round_no} chose TDF {tdf:g} (network {why.get('tdf_net')}, compute "
        f"{why.get('tdf_cmp')}): one step of {step_hw_s * 1e3:.4g} ms on the hardware would take "
        f"{tdf * step_hw_s:.0f} s, beyond the {budget_s:g} s the point's deadline allows a step. "
        f"In that round {seen}. If one op stalled (a retransmission timeout), run the point again.")


class Calibrator:
    """The dilation decisions of a calibration, round by round, for any workload.

    A workload runs a round of its own work, measures it and agrees with the other
    workers (`encode`/`decide`), then calls `after_round`; that returns the TDF
    for the next round and, on a network the soft switch can dilate
    (`network_dilation`, hosts.common.network_dilation), asks for the dilated
    network (rank 0) and keeps every worker's transport timers above a dilated
    answer (`expect_delay(DilationSettings)`: hosts.ina.transport.InaClient's).
    `record(host)` is the calibration record.

    Undilated network: TDF follows the network's own slowdown (damped rounds).
    Dilated: round 0 runs undilated and sets TDF with headroom (`dilated_tdf`);
    later rounds run dilated and tune the delay line's compensation.
    """

    def __init__(self, hw_op_s: float, tdf: float, network_dilation: dict | None, rank: int,
                 expect_delay=lambda network: None, iteration_wall_s: float = 0.0):
        self.hw_op_s, self.tdf, self.nd, self.rank = hw_op_s, float(tdf), network_dilation, rank
        self.expect_delay = expect_delay
        # The wall time the point allows an iteration: a round's TDF that would make its
        # step (after_round's step_hw_s) longer is refused (refuse_if_crawling); 0: no check.
        self.iteration_wall_s = iteration_wall_s
        self._barrier: Callable[[], None] | None = None
        self.comp, self.version = 0.0, 0
        self.own_op_s = math.inf       # round 0's measured emulator time per op (the compensation's cap)
        self._calibrating = False
        self.rounds: list[dict] = []

    def start(self, barrier: Callable[[], None] | None = None) -> None:
        """Before round 0: on a dilatable network, rank 0 asks the switches to hold
        their impairments (loss, delay) off while calibration measures the emulator,
        undilated; `finish` turns them back on. Without this a lossy point's every
        calibration op carried a retransmission timeout and its TDF came out ~50x too
        high (850,000 for LHC at 5 % loss).

        barrier: the workers' own barrier, passed where a worker's first measured op
        can leave before rank 0 has asked (PHub's pushes wait for nobody): rank 0
        joins it only once the switches hold, so no op is measured on the lossy
        network, where one TCP retransmission timeout (200 ms or more) in a one-op
        round 0 would read as an emulator thousands of times slower."""
        self._barrier = barrier
        if self.nd is not None and self.rank == 0:
            self._request(0.0, impairments=False)
        if self.nd is not None and barrier is not None:
            barrier()

    def finish(self) -> None:
        """After the last round: the network at the final TDF, impairments applied;
        with start's barrier, no worker starts the measured run before that."""
        if self.nd is not None and self.rank == 0:
            self._request(self.tdf, impairments=True)
        if self.nd is not None and self._barrier is not None:
            self._barrier()

    def after_round(self, measured: float, why: dict, step_hw_s: float = 0.0, **extra) -> float:
        """The next TDF from this round's measurement (the network dilated to it);
        step_hw_s: one iteration on the modeled hardware, checked against
        iteration_wall_s before anything is dilated (CalibrationRefused)."""
        r, nd = len(self.rounds), self.nd
        entry = {"round": r, "tdf_in": self.tdf, "tdf_measured": measured,
                 "network_dilated": nd is not None and r > 0, **extra, **why}
        if nd is None:
            tdf = measured if r == 0 else damped(self.tdf, measured)
            refuse_if_crawling(tdf, step_hw_s, self.iteration_wall_s, r, why)
        else:
            if r == 0:
                tdf, entry["headroom"] = dilated_decision(why.get("tdf_net"), why.get("tdf_cmp"),
                                                          nd["headroom"], self.tdf, why.get("slowdown"))
                # The emulator's own time per op, measured undilated: all a compensation
                # may take off (the dilated network leaves the cores idler, not busier).
                if why.get("tdf_net") and self.hw_op_s > 0:
                    self.own_op_s = why["tdf_net"] * self.hw_op_s
                    entry["own_op_s"] = self.own_op_s
            else:
                tdf = self.tdf
                entry["net_ratio"] = why["tdf_net"] / tdf if why.get("tdf_net") else None
                # Never more than half of what the band's lower edge allows: where frames
                # pipeline, the emulator's time hides behind the dilated serialization and
                # taking all of it off made the network run fast (0.73 x TDF at 4 x s_p50).
                cap = min(0.9 * tdf * nd["hardware"]["latency_s"], self.own_op_s,
                          COMPENSATION_MAX_SHARE * tdf * self.hw_op_s)
                self.comp = compensation(self.comp, why.get("tdf_net"), tdf, self.hw_op_s, cap)
            refuse_if_crawling(tdf, step_hw_s, self.iteration_wall_s, r, why)
            self.dilate(tdf)
            entry["compensate_s"] = self.comp
        entry["tdf_out"] = tdf
        self.rounds.append(entry)
        self.tdf = tdf
        return tdf

    def dilate(self, tdf: float) -> None:
        """Dilate the network to `tdf` (no-op where it cannot be): every worker's
        transport learns how long a dilated operation may take; rank 0 asks the
        switches and waits until they applied it (no worker's next collective can
        complete before rank 0 joins it, so no barrier is needed)."""
        if self.nd is None:
            return
        from hosts.common.network_dilation import DilationSettings  # noqa: PLC0415

        # The transport keeps each chunk's timer above its dilated answer time.
        self.expect_delay(DilationSettings(version=0, tdf=tdf, **self.nd["hardware"]))
        if self.rank == 0:
            # During calibration (between start and finish) the impairments stay held.
            self._request(tdf, impairments=not self._calibrating)

    def _request(self, tdf: float, impairments: bool) -> None:
        from hosts.common.network_dilation import request  # noqa: PLC0415

        self._calibrating = not impairments
        self.version += 1
        request(self.nd["control"], {"version": self.version, "tdf": tdf, "compensate_s": self.comp,
                                     "impairments": 1.0 if impairments else 0.0, **self.nd["hardware"]})

    def record(self, host: str) -> dict:
        if self.nd is None:
            prev = self.rounds[-2]["tdf_out"] if len(self.rounds) > 1 else self.rounds[-1]["tdf_in"]
            converged = abs(self.tdf / prev - 1) <= 0.1 if prev else False
        else:
            # Converged when the last dilated round's network ran at TDF (within 10 %).
            last = self.rounds[-1].get("net_ratio")
            converged = last is not None and abs(last - 1) <= 0.1
        nd = self.nd
        return {"type": "calibration", "host": host, "rounds": self.rounds, "hw_op_s": self.hw_op_s,
                "tdf": self.tdf, "converged": converged, "network_dilated": nd is not None,
                "compensate_s": self.comp if nd else None, "headroom": nd["headroom"] if nd else None}
