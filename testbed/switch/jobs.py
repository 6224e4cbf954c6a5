"""Aggregation jobs: which hosts aggregate together on which switch, in the
form the switch's job table, multicast groups and replica rewrites take
(`InaPipeline.add_job` and `SwitchController.install_job` both accept it).

Aggregation happens on the root switch s1 (the spine of a tree; leaves forward
the switch's virtual MAC up to it), so a worker's port is s1's port toward it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed import wire

AGGREGATION_SWITCH = "s1"
# Slots per job: a window of outstanding chunks per worker; jobs get disjoint
# ranges of the switch's pool so they never touch each other's state.
DEFAULT_SLOTS_PER_JOB = 256


@dataclass(frozen=True)
class JobRequest:
    """What a workload asks for: these hosts aggregate together as job `job_id`."""

    job_id: int
    workers: tuple[str, ...]
    slot_count: int = DEFAULT_SLOTS_PER_JOB


def plan_job(plan: Any, request: JobRequest, slot_base: int) -> dict[str, Any]:
    """Job entry for the aggregation switch from a topology plan (testbed.net.topology)."""
    from testbed.net.topology import _next_hops  # noqa: PLC0415 - the one routing walk

    if len(request.workers) > wire.MAX_WORKERS:
        raise ValueError(f"job {request.job_id}: {len(request.workers)} workers, "
                         f"the worker bitmap holds {wire.MAX_WORKERS}")
    hops = _next_hops(plan, AGGREGATION_SWITCH)
    workers = []
    for wid, name in enumerate(request.workers):
        h = plan.host(name)
        workers.append({"worker_id": wid, "host": name, "mac": h.mac, "ip": h.ip,
                        "port": hops[name], "udp_port": wire.INA_PORT_BASE})
    return {"job_id": request.job_id, "workers": workers, "slot_base": slot_base,
            "slot_count": request.slot_count, "mcast_group": 0x100 + request.job_id}


def plan_jobs(plan: Any, requests: list[JobRequest]) -> list[dict[str, Any]]:
    jobs, base = [], 0
    for r in requests:
        jobs.append(plan_job(plan, r, base))
        base += r.slot_count
    return jobs
