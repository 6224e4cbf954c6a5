"""A point's `fidelity` and `projection` records: one helper for every workload.

`fidelity_and_projection(...)` reads a point's traces (a work folder or the
traces themselves) and:

  fidelity    the monitor's report (monitor.fidelity_report) as a record
              {"type": "fidelity", ...report, "valid", "reasons"}. `valid` is the
              report's verdict and the summary's own `valid` (the device model's
              validity, set by the workload before); `reasons` lists the device's
              failure (`device_reason`) and every sentence of the report.
  projection  the point replayed on the hardware model at its own worker count,
              every rank's own trace (projector.project: a straggler stays one):
              {"type": "projection", "workload", "workers", "emulated": True,
              "profile", "hw_run_s", "hw_iter_ms", "truncated", **extra}; a trace
              the projector refuses gives {"type": "projection", "workload",
              "error"} and the error in the fidelity record (`projection_error`).

and fills the summary: `valid`, `invalid_reasons` (device failure, and the
report's reasons when the report is invalid), `net_slowdown_p50`,
`net_ratio_p50`, `projected_hw_iter_ms` (projected makespan / iterations, None
without a projection) and, when the summary has `iter_ms` (emulated wall time
per iteration) or `hw_iter_ms` (the same / TDF) and the TDF,
`emulated_over_projected` = emulated hardware ms / projected_hw_iter_ms; outside
1 +- agreement_tolerance (15 %) the point is invalid with the reason
(`check_agreement`). Reasons already in the summary (the workload's own) are
kept. Without traces (a host failed):
valid False with "no traces: ..." and no projection.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from hosts.common.calibration import AGREEMENT_TOLERANCE   # issue 8: within 15 %; calibration aims at it
from testbed.fidelity.constants import HardwareProfile, load_profile
from testbed.fidelity.monitor import fidelity_report, load_traces
from testbed.fidelity.projector import ComputeTime, Projection, Trace, project



@dataclass
class PointFidelity:
    fidelity: dict[str, Any]
    projection: dict[str, Any] | None = None
    traces: list[Trace] = field(default_factory=list)     # for workloads that project further
    profile: HardwareProfile | None = None
    projected: Projection | None = None

    @property
    def records(self) -> list[dict[str, Any]]:
        return [self.fidelity] + ([self.projection] if self.projection else [])


def fidelity_and_projection(source: str | Path | Sequence[Trace], profile_name: str, tdf: float,
                            workload: str, iterations: int | None, summary: dict[str, Any],
                            compute_time: ComputeTime | None = None, *, max_overrun_share: float = 0.05,
                            max_nodes: int | None = 600, device_reason: str = "device model exceeded",
                            extra: dict[str, Any] | None = None,
                            agreement_tolerance: float | None = AGREEMENT_TOLERANCE) -> PointFidelity:
    """The point's fidelity verdict and own-count projection (module docstring)."""
    try:
        traces = load_traces(source) if isinstance(source, (str, Path)) else list(source)
    except ValueError as e:          # a failed host wrote none: say so, don't invent one
        summary.update(valid=False, invalid_reasons=[f"no traces: {e}"])
        return PointFidelity({"type": "fidelity", "valid": False, "reasons": [f"no traces: {e}"]})
    profile = load_profile(profile_name)
    report = fidelity_report(traces, profile, tdf, max_overrun_share=max_overrun_share)
    # The workload's own reasons (e.g. calibration incomplete) stay; a bare invalid
    # summary is the device model's failure.
    device = list(summary.get("invalid_reasons") or ([] if summary.get("valid", True) else [device_reason]))
    fid = {"type": "fidelity", **report.to_dict(), "valid": bool(report.valid and not device),
           "reasons": device + list(report.reasons)}
    summary.update(valid=fid["valid"], invalid_reasons=device + ([] if report.valid else list(report.reasons)),
                   net_slowdown_p50=report.net_slowdown_p50, net_ratio_p50=report.ratio_p50)
    # what a retry needs (WorkloadRuntime.retune): whether the network was dilated
    # (its rule differs) and, below, the hardware iteration (its deadline)
    fid.setdefault("network_dilated", bool(summary.get("network_dilated")))
    out = PointFidelity(fid, traces=traces, profile=profile)
    try:
        proj = project(traces, profile, compute_time, max_nodes=max_nodes)
    except ValueError as e:         # a trace the models cannot play: named, not hidden
        summary["projected_hw_iter_ms"] = None
        fid["projection_error"] = str(e)
        out.projection = {"type": "projection", "workload": workload, "error": str(e)}
        return out
    iter_ms = proj.makespan_s / iterations * 1e3 if iterations else None
    out.projected = proj
    out.projection = {"type": "projection", "workload": workload, "workers": proj.world, "emulated": True,
                      "profile": profile.label(), "hw_run_s": proj.makespan_s, "hw_iter_ms": iter_ms,
                      "truncated": bool(proj.truncated), **(extra or {})}
    summary["projected_hw_iter_ms"] = iter_ms
    fid["hw_iter_s"] = iter_ms / 1e3 if iter_ms else None
    emulated_hw_ms = summary.get("hw_iter_ms") or (summary["iter_ms"] / tdf if summary.get("iter_ms") and tdf
                                                   else None)
    if iter_ms and emulated_hw_ms:
        ratio = summary["emulated_over_projected"] = emulated_hw_ms / iter_ms
        check_agreement(summary, fid, ratio, agreement_tolerance)
    return out



def check_agreement(summary: dict[str, Any], fid: dict[str, Any], ratio: float,
                    tolerance: float | None = AGREEMENT_TOLERANCE, detail: str = "") -> None:
    """Emulated / projected hardware time of the point's own trace: outside
    1 +- tolerance the point is invalid (time the projection does not have: loss
    recovery, host work outside the device model, ...), with the reason."""
    fid["emulated_vs_projected"] = ratio
    if tolerance is None or abs(ratio - 1) <= tolerance:
        return
    why = f"emulated time is {ratio:.2f}x the projection of its own trace (tolerance {tolerance:.0%})" + detail
    summary["valid"] = fid["valid"] = False
    summary["invalid_reasons"] = list(summary.get("invalid_reasons") or []) + [why]
    fid["reasons"] = list(fid.get("reasons") or []) + [why]
    fid.setdefault("flags", []).append("projection_disagrees")


def headroom_line(calibrations: Sequence[dict[str, Any]]) -> str | None:
    """One line on the headroom a calibrated point's TDF kept over the emulator's own
    slowdown, and why (hosts.common.calibration.dilated_decision's record in round 0),
    from the point's `calibration` records (one per host; they agree on the TDF).
    None where the point was not calibrated on a dilated network."""
    for rec in calibrations:
        rounds = rec.get("rounds") or []
        if not rec.get("network_dilated") or not rounds:
            continue
        r0 = rounds[0]
        head, net = r0.get("headroom"), r0.get("tdf_net")
        if not net:
            return f"headroom: round 0 timed no network op (TDF {rec.get('tdf', 0):.4g})"
        if not head:        # a run from before the headroom rule was recorded
            return f"headroom: fixed {rec.get('headroom')} x the median slowdown {net:.4g}"
        sd = head.get("slowdown") or {}
        tail = (f", p99 {sd['p99']:.4g} of {sd['n']} ops" if sd.get("p99") and sd.get("n") else "")
        return (f"headroom: TDF {r0.get('tdf_out', 0):.4g} = {head.get('factor', 0):.2f} x the median slowdown "
                f"{net:.4g}{tail} ({head.get('rule')} rule, set by {head.get('by')}: {head.get('why')})")
    return None
