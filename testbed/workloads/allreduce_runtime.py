"""Runtime of the allreduce workload: which host programs to start and how to
summarize what they measured. (Merged into allreduce.py once its params model
settles; kept apart meanwhile to avoid edit clashes.)"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from testbed.workloads.base import HostProgram, PointContext, WorkloadRuntime, register_runtime

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
