"""Allreduce workload: every worker contributes a float32 tensor, all end with the sum.

Baseline for the in-network systems: host ring allreduce, a parameter server, or
in-switch aggregation, over a range of tensor sizes.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any, Literal

import numpy as np

from pydantic import BaseModel, ConfigDict, Field

from testbed.workloads import register_workload
from testbed.workloads.base import HostProgram, PointContext, WorkloadRuntime, register_runtime

# ---------------------------------------------------------------------------
# Params model (validated as `workload:` in scenario files)
# ---------------------------------------------------------------------------


@register_workload
class AllreduceWorkload(BaseModel):
    """Repeated allreduce of float32 tensors of several sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Literal["allreduce"] = Field(
        "allreduce", description="Workload type; selects which fields below apply.")
    algorithm: Literal["ring", "ps", "switch"] = Field(
        "ring", description="ring: host ring allreduce; ps: a parameter-server host `ps`; "
                            "switch: in-network aggregation on the switch.")
    sizes: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [256, 4096, 65536, 1048576], min_length=1,
        description="Tensor sizes to allreduce, in float32 elements (run in this order).")
    iterations: int = Field(
        20, ge=1, description="Measured allreduce operations per size.")
    warmup: int = Field(
        2, ge=0, description="Unmeasured operations per size before the measured ones.")
    compute_ms: float = Field(
        0.0, ge=0, description="Modeled compute time per iteration; a straggler's `slowdown` scales it.")
    timeout_s: float = Field(
        120.0, gt=0, description="A host gives up if one operation takes longer than this.")

    def extra_hosts(self) -> list[str]:
        """Hosts besides the workers w1..wN that this workload needs."""
        return ["ps"] if self.algorithm == "ps" else []


# ---------------------------------------------------------------------------
# Runtime: which host programs run, and how their records are summarized.
# Import testbed.scenario only inside functions (see testbed/workloads/__init__.py).
# ---------------------------------------------------------------------------

ALLREDUCE_TCP_PORT = 47000


def straggler_for(scenario: Any, host: str) -> dict[str, float] | None:
    for s in scenario.stragglers:
        if s.host == host:
            return {"start_s": s.start_s, "slowdown": s.slowdown, "delay_ms": s.delay_ms}
    return None


@register_runtime
class AllreduceRuntime(WorkloadRuntime):
    kind = "allreduce"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl = scn.workload
        workers = [h for h in scn.hosts() if h.startswith("w")]
        peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in workers]
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.algorithm == "ps" else None
        common = {
            "world": len(workers), "algorithm": wl.algorithm, "peers": peers, "ps": ps,
            "port": ALLREDUCE_TCP_PORT, "sizes": list(wl.sizes), "iterations": wl.iterations,
            "warmup": wl.warmup, "compute_ms": wl.compute_ms, "seed": ctx.point.seed,
            "start_at": ctx.start_at, "connect_timeout_s": 30, "timeout_s": wl.timeout_s,
        }
        progs = []
        if ps is not None:
            cfg = dict(common, host="ps", role="ps", rank=-1, straggler=straggler_for(scn, "ps"),
                       out=str(ctx.work_dir / "ps.jsonl"))
            progs.append(HostProgram("ps", self.module_argv("hosts.allreduce", self.write_config(ctx, "ps", cfg)), phase=0))
        for rank, h in enumerate(workers):
            cfg = dict(common, host=h, role="worker", rank=rank, straggler=straggler_for(scn, h),
                       out=str(ctx.work_dir / f"{h}.jsonl"))
            progs.append(HostProgram(h, self.module_argv("hosts.allreduce", self.write_config(ctx, h, cfg)), phase=1))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        from testbed.switch.jobs import JobRequest  # noqa: PLC0415

        scn = point.scenario
        if scn.workload.algorithm != "switch":
            return []
        return [JobRequest(1, tuple(h for h in scn.hosts() if h.startswith("w")))]

    def timeout_s(self, ctx: PointContext) -> float:
        # The host programs bound themselves with timeout_s per operation; give the
        # whole point room for every size and iteration before declaring it hung.
        wl = ctx.point.scenario.workload
        return wl.timeout_s + 30.0

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_size: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            if r.get("type") == "allreduce" and not r.get("warmup"):
                by_size[r["size"]].append(r)
        rows = []
        for size in sorted(by_size):
            rs = by_size[size]
            lat = np.array([r["latency_s"] for r in rs])
            nbytes = rs[0]["bytes"]
            rows.append({
                "algorithm": rs[0]["algorithm"], "size": size, "bytes": nbytes,
                "samples": len(rs),
                "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
                "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
                "goodput_gbps": round(nbytes * 8 / float(np.percentile(lat, 50)) / 1e9, 4),
                "all_correct": all(r.get("ok") for r in rs),
            })
        return rows
