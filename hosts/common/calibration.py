"""Calibrated time dilation: pick the dilation (TDF) from what the emulated network does.

The emulated network (Python switch and hosts on shared cores) is hundreds to
thousands of times slower than the hardware a scenario models, and how much
slower depends on the collective, the message size and the worker count. The
compute of a modeled device is slept for `TDF x modeled time`; results mean
what the hardware would do only when compute and network are slowed by the
same factor. So a host program first runs a few iterations of its own work on
the built network, measures each collective operation against its modeled
hardware time, and sets

    TDF_net = median over workers of (median op latency / hardware op time)
    TDF_cmp = max over workers of p90(real compute time / modeled time) x headroom
    TDF     = max(TDF_net, TDF_cmp)

(research/time-fidelity.md, section 7.4: the workload's own collective, not a
synthetic probe). TDF_cmp only wins when numpy cannot keep up with the dilated
device model; the network then runs "too fast" for that TDF and the fidelity
monitor marks the point invalid rather than hiding it.

Workers must agree on one TDF: `encode_for_agreement` puts each worker's
proposals at its own rank's slots as log2 values (small numbers: no fixed-point
overflow in the in-switch path, whatever the TDF), an ordinary SUM allreduce
gives every worker the same vector, and `agree` reads the decision from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

COMPUTE_HEADROOM = 1.2   # [A] slack for numpy jitter on a loaded machine (research 7.4)
MIN_TDF, MAX_TDF = 1.0, 1e6


@dataclass(frozen=True)
class Proposal:
    tdf_net: float | None      # None: no communication to measure (e.g. one worker, ring)
    tdf_cmp: float | None      # None: no modeled compute steps


def propose(op_latencies_s: Sequence[float], hw_op_s: float,
            compute_ratios: Sequence[float]) -> Proposal:
    """One worker's proposal from its measured ops and compute steps.

    compute_ratios: real numpy seconds / modeled (undilated) seconds per step."""
    lat = np.asarray([x for x in op_latencies_s if x is not None and x > 0], dtype=np.float64)
    net = float(np.median(lat) / hw_op_s) if lat.size and hw_op_s > 0 else None
    r = np.asarray(compute_ratios, dtype=np.float64)
    cmp = float(np.percentile(r, 90) * COMPUTE_HEADROOM) if r.size else None
    return Proposal(net, cmp)


def encode_for_agreement(p: Proposal, rank: int, world: int) -> np.ndarray:
    """[net_0..net_{W-1}, cmp_0..cmp_{W-1}, has_net_0.., has_cmp_0..] with this rank's log2 values."""
    v = np.zeros(4 * world, dtype=np.float64)
    if p.tdf_net is not None:
        v[rank], v[2 * world + rank] = math.log2(max(p.tdf_net, 1e-9)), 1.0
    if p.tdf_cmp is not None:
        v[world + rank], v[3 * world + rank] = math.log2(max(p.tdf_cmp, 1e-9)), 1.0
    return v


def agree(summed: np.ndarray, world: int, fallback: float) -> tuple[float, dict]:
    """The common TDF from the summed agreement vector (identical on every worker)."""
    s = np.asarray(summed, dtype=np.float64)
    has_net, has_cmp = s[2 * world:3 * world] > 0.5, s[3 * world:] > 0.5
    nets = np.exp2(s[:world][has_net])
    cmps = np.exp2(s[world:2 * world][has_cmp])
    tdf_net = float(np.median(nets)) if nets.size else None
    tdf_cmp = float(np.max(cmps)) if cmps.size else None
    candidates = [x for x in (tdf_net, tdf_cmp) if x is not None]
    tdf = max(candidates) if candidates else fallback
    tdf = float(min(MAX_TDF, max(MIN_TDF, _round_sig(tdf, 3))))
    return tdf, {"tdf_net": tdf_net, "tdf_cmp": tdf_cmp,
                 "limited_by": ("compute" if tdf_cmp is not None and (tdf_net is None or tdf_cmp > tdf_net)
                                else "network" if tdf_net is not None else "none")}


def _round_sig(x: float, digits: int) -> float:
    if x <= 0:
        return x
    return round(x, -int(math.floor(math.log10(x))) + digits - 1)
