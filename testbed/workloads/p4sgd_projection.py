"""The projection of a P4SGD point to the modeled hardware (docs/p4sgd.md): the
fidelity monitor's verdict on the point's own traces, their replay on the
hardware profile at the emulated worker count and at PROJECTED_WORKERS, and the
band over the assumed network and device constants (_sensitivity_band).

The workload module (testbed/workloads/p4sgd.py) runs and collects the point;
this one only reads what it recorded and imports nothing of it (the workload is
typed `P4sgdWorkload` by name only): the dependency points one way, workload ->
projection.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


# Worker counts the projection adds beyond what one machine emulates.
PROJECTED_WORKERS = (16, 32, 64, 128, 256)


def fidelity_records(scenario: Any, work_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The fidelity monitor's verdict on the point and its hardware projection.

    Updates `summary` in place (valid, invalid_reasons, projected time) and
    returns a `fidelity` record (the runner copies it into points.jsonl) and
    `projection` records: the point's own trace replayed on the hardware model
    at its worker count, and the same trace shape at PROJECTED_WORKERS."""
    from testbed.fidelity.projector import project_world  # noqa: PLC0415
    from testbed.fidelity.records import check_agreement, fidelity_and_projection  # noqa: PLC0415

    wl: P4sgdWorkload = scenario.workload
    compute_time = p4sgd_compute_time(wl)
    # A modeled device carries a sleep debt (hosts/glm/devices.py): single steps over
    # budget are absorbed; the device validity check (5 % of steps) is the same bound.
    point = fidelity_and_projection(work_dir, wl.hardware, summary["tdf"], "p4sgd", summary.get("iterations"),
                                    summary, compute_time, max_nodes=PROJECT_MAX_NODES,
                                    device_reason="device model exceeded (see validity records)")
    fid = point.fidelity
    fid["calibrated"] = wl.calibrated
    # What retune needs: its rule depends on the dilation; a retry's length on hw_train_s.
    fid["network_dilated"], fid["hw_train_s"] = bool(summary.get("network_dilated")), summary.get("hw_train_s")
    if point.projected is None:      # no traces, or the projector refused them (named in the record)
        return point.records
    traces, profile = point.traces, point.profile
    world = point.projected.world
    samples = summary.get("samples") or 0
    records = []
    for n in (world, *[w for w in PROJECTED_WORKERS if w > world]):
        cap = PROJECT_MAX_NODES if n == world else max(40, PROJECT_MAX_NODES * 4 // n)
        # At the emulated count every rank's own trace (a straggler stays a straggler,
        # records.py); beyond it, rank 0's program replicated.
        proj = (point.projected if n == world
                else project_world(traces, n, profile, compute_time=compute_time, max_nodes=cap))
        # Bands at the emulated count and the largest projected one (each band costs
        # ~10 projections; the counts between follow the same constants).
        band = (_sensitivity_band(traces, n, profile, wl, cap) if n in (world, PROJECTED_WORKERS[-1])
                else {"lo_s": proj.makespan_s, "hi_s": proj.makespan_s, "swept": [], "not_computed": True})
        base = point.projection if n == world else {"type": "projection", "workload": "p4sgd", "workers": n,
                                                    "emulated": False, "profile": profile.label()}
        records.append({**base, "mode": wl.mode, "collective": wl.collective,
                        "hw_train_s": proj.makespan_s,
                        "hw_throughput_sps": samples / proj.makespan_s if proj.makespan_s > 0 else None,
                        "band_lo_sps": samples / band["hi_s"] if band["hi_s"] > 0 else None,
                        "band_hi_sps": samples / band["lo_s"] if band["lo_s"] > 0 else None,
                        "band": band, "truncated": bool(proj.truncated)})
    own = records[0]
    summary["projected_hw_train_s"] = own["hw_train_s"]
    if summary.get("hw_train_s") and own["hw_train_s"]:
        ratio = summary["hw_train_s"] / own["hw_train_s"]
        summary["emulated_vs_projected"] = ratio
        # Time the projection does not have: host work outside the modeled device
        # (Python per micro-batch, packet building) is not dilated away.
        other = summary.get("other_share")
        check_agreement(summary, fid, ratio, detail=(f"; host work outside the device model is {other:.0%} "
                                                     f"of the emulated time" if other is not None else ""))
    return [fid, *records]


# Nodes per rank replayed (the rest extrapolated by rate, projector docs): all of a
# quick point's at its own worker count; fewer per rank at projected counts, so a
# point's projections and bands take seconds, not minutes, on 2 cores.
PROJECT_MAX_NODES = 600
# [A] device constants swept for the projection's band: the U280 engine's share of
# HBM bandwidth (default 0.5) and the V100 kernels' (default 0.7).
DEVICE_RANGES = {"u280": {"hbm_efficiency": (0.3, 0.9)}, "gpu": {"hbm_efficiency": (0.4, 0.9)}}


def _sensitivity_band(traces: list, world: int, profile: Any, wl: P4sgdWorkload,
                      max_nodes: int) -> dict[str, Any]:
    """Projected makespan over the [A]/[I] network constants' ranges (testbed.fidelity
    .sensitivity) and the device model's assumed constants (DEVICE_RANGES)."""
    from testbed.fidelity.projector import project_world, reusing_preparations  # noqa: PLC0415
    from testbed.fidelity.sensitivity import projection_sensitivity  # noqa: PLC0415

    with reusing_preparations():      # every replay below is of the same traces
        net = projection_sensitivity(traces, profile, world, p4sgd_compute_time(wl), max_nodes=max_nodes)
        lo, hi, moved = net.lo, net.hi, {net.most_sensitive: (net.lo, net.hi)} if net.most_sensitive else {}
        for name, (a, b) in DEVICE_RANGES.get(wl.device, {}).items():
            vals = [project_world(traces, world, profile, p4sgd_compute_time(wl, {name: v}),
                                  max_nodes=max_nodes).makespan_s for v in (a, b)]
            lo, hi = min(lo, *vals), max(hi, *vals)
            moved[f"device.{name}"] = (min(vals), max(vals))
    return {"lo_s": lo, "hi_s": hi, "nominal_s": net.nominal, "swept": sorted(moved),
            "network_constants": [c.name for c in profile.uncertain()]}


def p4sgd_compute_time(wl: P4sgdWorkload, device_overrides: dict[str, Any] | None = None):
    """compute_time(header, node, world) for the projector: P4SGD's scaling rule.

    Model parallel: a worker's feature slice is D / world wide, so each compute
    step is the device model at that width (nnz scaled alike); data parallel:
    a worker's share of the global batch is batch / world samples. Stalls keep
    their recorded time; the device is the one the point ran."""
    from hosts.glm.devices import make_device  # noqa: PLC0415

    device_overrides = dict(device_overrides or {})
    devices: dict[str, Any] = {}
    # A trace's header is one dict shared by all its nodes: its device is found once
    # (the header is kept beside it, so a reused id() cannot match), and a step's time,
    # a pure function of the device and the step's shape, once per shape.
    by_header: dict[int, tuple[dict[str, Any], Any]] = {}
    steps: dict[tuple, float] = {}

    def device_of(header: dict[str, Any]) -> Any:
        """The header's modeled device with the overrides; None: a measured CPU."""
        got = by_header.get(id(header))
        if got is not None and got[0] is header:
            return got[1]
        spec = dict(header.get("device") or {})
        dev = None
        if spec.get("type", "cpu") != "cpu":
            spec.update(time_scale=1.0, **device_overrides)
            key = repr(sorted(spec.items()))
            dev = devices.get(key) or devices.setdefault(key, make_device(spec))
        by_header[id(header)] = (header, dev)
        return dev

    def compute_time(header: dict[str, Any], node: dict[str, Any], world: int) -> float:
        work = node.get("work") or {}
        recorded = int(header.get("recorded_world", header["world"]))
        if "n" not in work or (world == recorded and not device_overrides):
            return node["hw_s"]
        dev = device_of(header)
        if dev is None:
            return node["hw_s"] * recorded / world      # measured CPU: scale with the share
        n, f, nnz = work["n"], work["f"], work.get("nnz")
        if wl.mode == "model_parallel":
            f2 = max(1, -(-int(header.get("n_features", f * recorded)) // world))
            nnz2 = None if nnz is None else max(1, round(nnz * f2 / max(1, f)))
            shape = (n, f2, nnz2)
        else:
            n2 = max(1, round(n * recorded / world))
            nnz2 = None if nnz is None else max(1, round(nnz * n2 / max(1, n)))
            shape = (n2, f, nnz2)
        key = (id(dev), *shape, work.get("phase", "step"))
        t = steps.get(key)
        if t is None:
            t = steps[key] = dev.step_time(*shape, work.get("phase", "step"))
        return t

    return compute_time
