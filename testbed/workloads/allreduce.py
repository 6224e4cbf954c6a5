"""Allreduce workload: every worker contributes a float32 tensor, all end with the sum.

Baseline for the in-network systems: host ring allreduce, a parameter server, or
in-switch aggregation, over a range of tensor sizes.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any, Literal, Optional

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, model_validator

from testbed.workloads import register_workload
from testbed.workloads.base import (HostProgram, PointContext, WorkloadRuntime, ina_settings, register_runtime,
                                    straggler_for)

# ---------------------------------------------------------------------------
# Params model (validated as `workload:` in scenario files)
# ---------------------------------------------------------------------------


class InaParams(BaseModel):
    """Host transport settings for algorithm switch (hosts/common/config.py InaSettings)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    window: int = Field(256, ge=1, le=256, description="Chunks outstanding per worker (at most the "
                                                          "job's 256 switch slots).")
    retx_timeout_s: float = Field(0.05, gt=0, description="First retransmission timeout (then doubled).")
    scale_exp: Optional[int] = Field(None, ge=-64, le=64, description=(
        "Fixed-point scale 2^k shared by all workers; null agrees on one per tensor (one extra "
        "MAX round trip), a fixed k saves that round trip for latency-bound small vectors."))
    impl: Optional[Literal["compiled", "python"]] = Field(None, description=(
        "The workers' packet and receive/send loops: compiled (hosts/ina/_hostpath.c, built by "
        "make setup) or python (the numpy reference); null: compiled where built."))


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
        120.0, gt=0, description="A host gives up if one operation makes no progress for this long.")
    ina: InaParams = Field(default_factory=InaParams,
                           description="In-switch transport settings (algorithm switch only).")
    jobs: int = Field(
        1, ge=1, le=8, description="Independent jobs sharing the network: the workers split into this "
                                   "many contiguous groups, each its own allreduce (and, for switch, "
                                   "its own aggregation job on the switch).")

    @model_validator(mode="after")
    def _jobs_need_peer_algorithms(self) -> "AllreduceWorkload":
        if self.jobs > 1 and self.algorithm == "ps":
            raise ValueError("jobs > 1 needs algorithm ring or switch (there is one parameter server host)")
        return self

    def extra_hosts(self) -> list[str]:
        """Hosts besides the workers w1..wN that this workload needs."""
        return ["ps"] if self.algorithm == "ps" else []


# ---------------------------------------------------------------------------
# Runtime: which host programs run, and how their records are summarized.
# Import testbed.scenario only inside functions (see testbed/workloads/__init__.py).
# ---------------------------------------------------------------------------

ALLREDUCE_TCP_PORT = 47000


def job_groups(scenario: Any) -> list[list[str]]:
    """Workers split into `workload.jobs` contiguous groups (w1..wk, wk+1..)."""
    workers = [h for h in scenario.hosts() if h.startswith("w")]
    n = scenario.workload.jobs
    if n > len(workers):
        raise ValueError(f"workload.jobs={n} but only {len(workers)} workers; each job needs at least one")
    size, extra = divmod(len(workers), n)
    groups, start = [], 0
    for j in range(n):
        end = start + size + (1 if j < extra else 0)
        groups.append(workers[start:end])
        start = end
    return groups


@register_runtime
class AllreduceRuntime(WorkloadRuntime):
    kind = "allreduce"

    def programs(self, ctx: PointContext) -> list[HostProgram]:
        scn = ctx.point.scenario
        wl = scn.workload
        ps = {"name": "ps", "ip": ctx.hosts["ps"].ip} if wl.algorithm == "ps" else None
        progs = []
        port = ctx.tcp_port_base(ALLREDUCE_TCP_PORT)
        for job_id, group in enumerate(job_groups(scn), start=1):
            peers = [{"name": h, "ip": ctx.hosts[h].ip} for h in group]
            common = {
                "world": len(group), "algorithm": wl.algorithm, "peers": peers, "ps": ps,
                "port": port, "sizes": list(wl.sizes), "iterations": wl.iterations,
                "warmup": wl.warmup, "compute_ms": wl.compute_ms, "seed": ctx.point.seed,
                "start_at": ctx.start_at, "connect_timeout_s": 30, "timeout_s": wl.timeout_s,
            }
            if ps is not None:
                cfg = dict(common, host="ps", role="ps", rank=-1, straggler=straggler_for(scn, "ps"),
                           out=str(ctx.work_dir / "ps.jsonl"))
                progs.append(HostProgram("ps", self.module_argv("hosts.allreduce", self.write_config(ctx, "ps", cfg)), phase=0))
            for rank, h in enumerate(group):
                cfg = dict(common, host=h, role="worker", rank=rank, straggler=straggler_for(scn, h),
                           out=str(ctx.work_dir / f"{h}.jsonl"))
                if wl.algorithm == "switch":
                    # the network's asks (BMv2: an adaptive window), then the scenario's settings
                    cfg["ina"] = {**ina_settings(ctx.switch, h), "job_id": job_id,
                                  **wl.ina.model_dump(exclude_none=True)}
                progs.append(HostProgram(h, self.module_argv("hosts.allreduce", self.write_config(ctx, h, cfg)), phase=1))
        return progs

    def ina_jobs(self, point: Any) -> list[Any]:
        from testbed.switch.jobs import JobRequest  # noqa: PLC0415

        scn = point.scenario
        if scn.workload.algorithm != "switch":
            return []
        return [JobRequest(j, tuple(g)) for j, g in enumerate(job_groups(scn), start=1)]

    def timeout_s(self, ctx: PointContext) -> float:
        # The host programs bound themselves with timeout_s per operation; give the
        # whole point room for every size and iteration before declaring it hung.
        # Hosts fail on their own after timeout_s without progress; this is only
        # a safety net for a host that hangs outright.
        wl = ctx.point.scenario.workload
        return wl.timeout_s * 2 * len(wl.sizes) + 60.0

    def collect(self, ctx: PointContext) -> list[dict[str, Any]]:
        job_of = {h: j for j, g in enumerate(job_groups(ctx.point.scenario), start=1) for h in g}
        records = super().collect(ctx)
        for r in records:
            if r.get("host") in job_of:
                r["job"] = job_of[r["host"]]
        return records

    def summarize(self, ctx: PointContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_key: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            if r.get("type") == "allreduce" and not r.get("warmup"):
                by_key[(r.get("job", 1), r["size"])].append(r)
        multi_job = len({j for j, _ in by_key}) > 1
        rows = []
        for job, size in sorted(by_key):
            rs = by_key[(job, size)]
            lat = np.array([r["latency_s"] for r in rs])
            nbytes = rs[0]["bytes"]
            rows.append({
                **({"job": job} if multi_job else {}),
                "algorithm": rs[0]["algorithm"], "size": size, "bytes": nbytes,
                "samples": len(rs),
                # Emulated wall time on the emulated network (links at the scenario's rates,
                # no time dilation and no hardware model: there is no hardware-equivalent time).
                "emu_p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
                "emu_p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
                # Mbit/s, as the links and the goodput figure state them
                "emu_goodput_mbps": round(nbytes * 8 / float(np.percentile(lat, 50)) / 1e6, 2),
                "all_correct": all(r.get("ok") for r in rs),
            })
        return rows
