"""No-drop rate (RFC 2544 "throughput"): the highest offered rate a device
forwards with at most LOSS_OK_PCT loss, found by bisection over paced trials.

Why beside the unpaced rate: the Linux bridge forwards inside the sender's own
system call, so an unpaced sender is slowed by the bridge's work and can never
overrun it. A switch that runs as a process gets no such backpressure (a veth
hands frames on without blocking the sender; a full receive ring drops), so
"as fast as the sender can" measures the scheduler's split of the cores among
sender, switch and receiver as much as the switch. The no-drop rate asks
instead how fast the device forwards without loss, which a switch datasheet
means by throughput; both are reported.

`search` knows nothing of networks: it calls `trial(rate_pps) -> dict` with
at least sent_pps, delivered_pps and loss_pct (bench/switch_forwarding.measure).
"""
from __future__ import annotations

from typing import Callable

LOSS_OK_PCT = 0.1       # the bound on loss at the forwarding target
SENDER_KEPT_UP = 0.98   # a trial whose sender offered less than this share of the asked rate did not test it


def passed(trial: dict) -> bool:
    return trial["sent"] > 0 and trial["loss_pct"] <= LOSS_OK_PCT


def search(trial: Callable[[int], dict], hi_pps: float, steps: int = 6) -> dict:
    """Bisect [0, hi_pps]: first a trial at hi_pps, then `steps` halvings.

    Result: `ndr_pps`, the delivered rate of the fastest trial that passed (0 if
    none did); `limited_by`: "device" (some faster trial lost more), "sender"
    (a trial passed but its sender could not offer the asked rate, so the
    device was never the limit) or "range" (hi_pps itself passed);
    `resolution_pps`: the gap between the fastest pass and the slowest failure
    asked for; `trials`: every trial as run."""
    if hi_pps <= 0 or steps < 0:
        raise ValueError(f"search needs hi_pps > 0 and steps >= 0 (got {hi_pps}, {steps})")
    lo, hi = 0.0, float(hi_pps)
    rate = hi
    best: dict | None = None
    limited_by = "device"
    trials: list[dict] = []
    for step in range(steps + 1):
        r = dict(trial(int(rate)), rate_asked_pps=int(rate))
        trials.append(r)
        ok = passed(r)
        if ok and (best is None or r["delivered_pps"] > best["delivered_pps"]):
            best = r
        if ok and r["sent_pps"] < SENDER_KEPT_UP * rate:
            limited_by = "sender"
            break
        if ok and step == 0:
            limited_by = "range"
            break
        lo, hi = (rate, hi) if ok else (lo, rate)
        rate = (lo + hi) / 2
    return {"ndr_pps": best["delivered_pps"] if best else 0.0,
            "limited_by": limited_by if best else "device",
            "resolution_pps": (hi - lo) if limited_by == "device" else 0.0,
            "loss_ok_pct": LOSS_OK_PCT, "trials": trials}
