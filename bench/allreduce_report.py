"""The reporting half of bench/allreduce_ratios.py (and bench/ina_aggrate.py, which
analyses its run as allreduce_ratios' third): from the run folders and the /proc
sampler (bench/testbed_runs.py) to the result JSON's numbers, verdicts, warnings
and the printed table. `finish(res)` redoes the verdicts, warnings and table from
a saved result's numbers alone (`python -m bench.allreduce_ratios --retable FILE`).
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import numpy as np

from bench.testbed_runs import ProcSampler, RunData

VALUES_PER_PACKET = 64
INA_FRAME = 14 + 20 + 8 + 16 + 4 * VALUES_PER_PACKET     # 314 B on the wire (htb counts it)
INA_PAYLOAD = 4 * VALUES_PER_PACKET                      # 256 B of values
TCP_FRAME, TCP_PAYLOAD = 1514, 1448                      # MTU 1500, TCP timestamps on
INA_WINDOW = 64                                          # hosts.common.config.InaSettings.window


def iteration_latencies(recs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(all per-rank latencies pooled, per-iteration max over ranks), measured only."""
    pooled, per_iter = [], defaultdict(list)
    for r in recs:
        if r.get("type") == "allreduce" and not r.get("warmup"):
            pooled.append(r["latency_s"])
            per_iter[(r["size"], r["iter"])].append(r["latency_s"])
    return np.array(pooled), np.array([max(v) for v in per_iter.values()])


def transport_totals(recs: list[dict]) -> dict[str, Any]:
    tot: dict[str, Any] = defaultdict(int)
    per_host, rtt50, rtt99 = {}, [], []
    for r in recs:
        t = r.get("transport") if r.get("type") == "summary" else None
        if not t:
            continue
        for k, v in t.items():
            if isinstance(v, int) and not isinstance(v, bool):
                tot[k] += v
        per_host[r["host"]] = {"retransmissions": t.get("retransmissions"),
                               "chunks_sent": t.get("chunks_sent"),
                               "chunk_rtt_p50_ms": _ms(t.get("chunk_latency_p50_s")),
                               "chunk_rtt_p99_ms": _ms(t.get("chunk_latency_p99_s"))}
        if t.get("chunk_latency_p50_s") is not None:
            rtt50.append(t["chunk_latency_p50_s"])
            rtt99.append(t["chunk_latency_p99_s"])
    out = dict(tot)
    if out.get("chunks_sent"):
        out["retx_pct"] = round(100 * out.get("retransmissions", 0) / out["chunks_sent"], 2)
        worst = max(per_host.items(), key=lambda kv: (kv[1]["retransmissions"] or 0)
                    / max(1, kv[1]["chunks_sent"] or 1))
        out["worst_host"] = {"host": worst[0], **worst[1],
                             "retx_pct": round(100 * (worst[1]["retransmissions"] or 0)
                                               / max(1, worst[1]["chunks_sent"] or 1), 2)}
        out["chunk_rtt_p50_ms_median_host"] = _ms(float(np.median(rtt50))) if rtt50 else None
        out["chunk_rtt_p99_ms_max_host"] = _ms(max(rtt99)) if rtt99 else None
    return out


def ina_counters(recs: list[dict]) -> dict[str, int]:
    for r in recs:
        if r.get("type") == "switch_counters" and r.get("switch") == "s1":
            return {k.split(".", 1)[-1]: sum(int(v.get("packets", 0)) for v in d.values())
                    for k, d in r["counters"].items()}
    return {}


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1e3, 3)


def _r(x: float | None, n: int = 3) -> float | None:
    return None if x is None else round(float(x), n)


def cpu_in_window(run: RunData, label: str, sampler: ProcSampler) -> dict[str, Any]:
    w = run.window(label)
    if w is None:
        return {}
    t0, t1 = w
    dt = t1 - t0
    by_role = sampler.cpu_by_role(label, t0, t1)
    hosts = sum(v for k, v in by_role.items() if not k.startswith("switch:"))
    switch = by_role.get("switch:s1")
    m = sampler.machine_cores(t0, t1) or {}
    machine = m.get("busy")
    runner = sampler.runner_cpu(t0, t1)
    mine = hosts + (switch or 0) + runner
    return {"window_s": round(dt, 3), "t0": round(t0, 3), "t1": round(t1, 3),
            "machine_busy_cores": _r(machine, 2), "cores": os.cpu_count(),
            "irq_softirq_cores": _r(m.get("irq"), 2), "steal_cores": _r(m.get("steal"), 2),
            "hosts_cores": _r(hosts / dt, 2), "switch_cores": _r(switch / dt, 2) if switch is not None else None,
            "runner_cores": _r(runner / dt, 2),
            # everything else: other processes on the machine, kernel packet processing
            # (softirq, also counted in irq_softirq_cores), Mininet's shells
            "other_cores": _r(machine - mine / dt, 2) if machine is not None else None,
            "top_other_processes": sampler.top_others(t0, t1),
            "switch_cpu_s": _r(switch), "hosts_cpu_s": _r(hosts),
            "per_host_cores": {k: _r(v / dt, 2) for k, v in sorted(by_role.items()) if not k.startswith("switch:")}}


def switch_brief(st: dict) -> dict[str, Any]:
    if not st:
        return {}
    ports = st.get("ports", {}).values()
    loop = st.get("loop", {})
    rx = sum(p.get("rx", 0) for p in ports)
    return {"cpu_time_s": _r(st.get("cpu_time_s")), "wall_time_s": _r(st.get("wall_time_s")),
            "runqueue_wait_s": _r(st.get("runqueue_wait_s")),
            "rx": rx, "tx": sum(p.get("tx", 0) for p in ports),
            "rx_bytes": sum(p.get("rx_bytes", 0) for p in ports),
            "rx_kernel_drops": sum(p.get("rx_kernel_drops", 0) for p in ports),
            "tx_dropped": sum(p.get("tx_dropped", 0) for p in ports),
            "mean_rx_batch": _r(rx / loop["rx_batches"], 1) if loop.get("rx_batches") else None,
            "max_rx_batch": loop.get("max_rx_batch"),
            "ctx_switches": st.get("ctx_switches")}


# --- analyses -------------------------------------------------------------------------------

def analyze_latency(run: RunData, sampler: ProcSampler) -> dict[str, Any]:
    rows = {}
    for p in run.points:
        label = p["label"]
        alg = p["params"].get("workload.algorithm")
        row: dict[str, Any] = {"label": label, "status": p["status"], "error": p.get("error")}
        if p["status"] == "ok":
            pooled, per_iter = iteration_latencies(run.records[label])
            row.update({"samples": int(pooled.size), "iterations": int(per_iter.size),
                        "p50_ms": _ms(np.percentile(pooled, 50)), "p99_ms": _ms(np.percentile(pooled, 99)),
                        "iter_max_p50_ms": _ms(np.percentile(per_iter, 50)),
                        "iter_max_p99_ms": _ms(np.percentile(per_iter, 99)),
                        "cpu": cpu_in_window(run, label, sampler),
                        "switch": switch_brief(run.switch_stats(label))})
            if alg == "switch":
                tr = transport_totals(run.records[label])
                row["transport"] = tr
                row["ina_counters"] = ina_counters(run.records[label])
                # one MAX round (scale) + one SUM round per float tensor
                row["rounds_per_allreduce"] = 2
            else:
                n = 8
                row["ring_steps_per_allreduce"] = 2 * (n - 1)
        rows[alg] = row
    out: dict[str, Any] = {"workers": 8, "values": 64, "dtype": "float32", "points": rows,
                           "target_ratio_max": 0.3}
    s, r = rows.get("switch", {}), rows.get("ring", {})
    if s.get("p50_ms") and r.get("p50_ms"):
        out["ratio_p50"] = _r(s["p50_ms"] / r["p50_ms"])
        out["ratio_p99"] = _r(s["p99_ms"] / r["p99_ms"])
        out["ratio_iter_max_p50"] = _r(s["iter_max_p50_ms"] / r["iter_max_p50_ms"])
        out["ratio_iter_max_p99"] = _r(s["iter_max_p99_ms"] / r["iter_max_p99_ms"])
        out["meets_target"] = out["ratio_p50"] <= 0.3 and out["ratio_p99"] <= 0.3
    return out


def ideal_times(n: int, mbps: float, size_values: int) -> dict[str, float]:
    """Link-limited times of one allreduce of size_values float32 on links of mbps."""
    s = size_values * 4
    bps = mbps * 1e6
    ring_payload = 2 * (n - 1) / n * s
    nchunks = -(-size_values // VALUES_PER_PACKET)
    return {"ring_payload_s": ring_payload * 8 / bps,
            "ring_wire_s": ring_payload * TCP_FRAME / TCP_PAYLOAD * 8 / bps,
            "switch_payload_s": s * 8 / bps,
            "switch_wire_s": (s + nchunks * (INA_FRAME - INA_PAYLOAD)) * 8 / bps}


def bound_verdict(row: dict) -> str:
    """What limited one goodput point (median iteration), from its saved numbers."""
    link_eff = row.get("link_efficiency")
    if link_eff is None:
        return "unknown"
    cpu, tr = row.get("cpu") or {}, row.get("transport") or {}
    machine = cpu.get("machine_busy_cores")
    cores = cpu.get("cores") or 2
    sw = cpu.get("switch_cores")
    retx = tr.get("retx_pct") or 0
    parts = []
    if link_eff >= 0.9:
        parts.append(f"link-bound ({link_eff:.0%} of the header-adjusted link time)")
    else:
        if retx >= 10:
            parts.append(f"retransmission-bound: {retx:.0f}% spurious INA retransmissions add "
                         f"frames on both directions of the shaped links")
        if machine is not None and machine >= 0.9 * cores:
            parts.append(f"CPU-bound: machine {machine:.2f}/{cores} cores busy (hosts "
                         f"{cpu.get('hosts_cores')}, switch {sw}, others+kernel {cpu.get('other_cores')})")
        elif sw is not None and sw >= 0.9:
            parts.append(f"switch CPU-bound ({sw:.2f} cores)")
        else:
            parts.append(f"neither link nor CPU saturated (machine {machine} of {cores} cores, switch {sw})")
    if retx >= 2 and (link_eff >= 0.9 or retx < 10):
        parts.append(f"{retx:.1f}% spurious retransmissions")
    its = [t for t in row.get("iter_times_s") or [] if t]
    if its and row.get("time_s") and max(its) > 1.5 * row["time_s"]:
        parts.append(f"one iteration took {max(its):.1f} s (median {row['time_s']:.2f} s)")
    return "; ".join(parts)


def analyze_goodput(run: RunData, sampler: ProcSampler, size: int) -> dict[str, Any]:
    pts: dict[tuple[int, float], dict[str, dict]] = defaultdict(dict)
    for p in run.points:
        label = p["label"]
        n, mbps, alg = (p["params"]["topology.workers"], p["params"]["links.bandwidth_mbps"],
                        p["params"]["workload.algorithm"])
        ideal = ideal_times(n, mbps, size)
        row: dict[str, Any] = {"label": label, "status": p["status"], "error": p.get("error")}
        if p["status"] == "ok":
            recs = run.records[label]
            pooled, per_iter = iteration_latencies(recs)
            t = float(np.median(per_iter))
            wire_ideal = ideal["switch_wire_s"] if alg == "switch" else ideal["ring_wire_s"]
            row.update({"iterations": int(per_iter.size), "iter_times_s": [_r(x) for x in per_iter],
                        "time_s": _r(t), "pooled_p50_s": _r(np.percentile(pooled, 50)),
                        "goodput_mbps": _r(size * 4 * 8 / t / 1e6, 2),
                        "ideal_wire_s": _r(wire_ideal),
                        "link_efficiency": _r(wire_ideal / t),
                        "cpu": cpu_in_window(run, label, sampler),
                        "switch": switch_brief(run.switch_stats(label))})
            if alg == "switch":
                tr = transport_totals(recs)
                row["transport"] = tr
                row["ina_counters"] = ina_counters(recs)
                # window-limited rate of one worker: window frames per chunk round trip
                rtt = tr.get("chunk_rtt_p50_ms_median_host")
                row["window_limited_mbps"] = _r(INA_WINDOW * INA_FRAME * 8 / (rtt / 1e3) / 1e6, 1) if rtt else None
                row["window_serialization_ms"] = _r(INA_WINDOW * INA_FRAME * 8 / (mbps * 1e6) * 1e3, 2)
            else:
                sw = row["switch"]
                n_iters = per_iter.size
                payload = n_iters * n * 2 * (n - 1) / n * size * 4
                row["wire_bytes_per_payload_byte"] = _r(sw["rx_bytes"] / payload) if payload and sw else None
        pts[(n, mbps)][alg] = row
    rows = []
    for (n, mbps), d in sorted(pts.items()):
        lim = 2 * (n - 1) / n
        hdr = lim * (INA_PAYLOAD / INA_FRAME) / (TCP_PAYLOAD / TCP_FRAME)
        row = {"workers": n, "mbps": mbps, "limit": _r(lim), "limit_header_adjusted": _r(hdr),
               "max_reachable_fraction_of_limit": _r(hdr / lim), "switch": d.get("switch"), "ring": d.get("ring")}
        s, r = d.get("switch") or {}, d.get("ring") or {}
        if s.get("time_s") and r.get("time_s"):
            ratio = r["time_s"] / s["time_s"]           # = goodput switch / goodput ring
            row.update({"goodput_ratio": _r(ratio), "fraction_of_limit": _r(ratio / lim),
                        "fraction_of_header_adjusted_limit": _r(ratio / hdr),
                        "meets_target": ratio / lim >= 0.9})
        rows.append(row)
    return {"size_values": size, "tensor_bytes": size * 4, "target_fraction_min": 0.9,
            "frames": {"ina": [INA_PAYLOAD, INA_FRAME], "tcp": [TCP_PAYLOAD, TCP_FRAME]},
            "note": "time = median over iterations of the per-iteration max latency over ranks; "
                    "goodput_ratio = ring time / switch time; limit = 2(N-1)/N; header-adjusted "
                    "limit = limit x (256/314) / (1448/1514) (TCP ACKs on the reverse path, ~2% "
                    "more for ring, are not counted); link_efficiency = header-adjusted link-limited "
                    "time / measured time",
            "rows": rows}


def analyze_aggrate(run: RunData, sampler: ProcSampler, size: int) -> dict[str, Any]:
    rows = []
    for p in run.points:
        label = p["label"]
        n = p["params"]["topology.workers"]
        row: dict[str, Any] = {"workers": n, "label": label, "status": p["status"], "error": p.get("error")}
        if p["status"] == "ok":
            recs = run.records[label]
            _, per_iter = iteration_latencies(recs)
            busy_s = float(per_iter.sum())
            c = ina_counters(recs)
            st = run.switch_stats(label)
            cpu = cpu_in_window(run, label, sampler)
            pk = c.get("ina_packets", 0)
            sw_cpu = cpu.get("switch_cpu_s")
            row.update({
                "iterations": int(per_iter.size), "allreduce_busy_s": _r(busy_s),
                "ina_packets": pk, "ina_results": c.get("ina_results"),
                "ina_retransmits_answered": c.get("ina_retransmits"),
                "ina_duplicates_dropped": c.get("ina_duplicates_dropped"),
                "switch_stats_ina_packets": st.get("pipeline", {}).get("counters", {})
                .get("Ingress.ina_packets", {}).get("total"),
                "input_pps": round(pk / busy_s) if busy_s else None,
                "input_pps_per_worker": round(pk / busy_s / n) if busy_s else None,
                "values_per_s": round(pk / busy_s * VALUES_PER_PACKET) if busy_s else None,
                "switch_cpu_us_per_packet": _r(sw_cpu / pk * 1e6, 2) if sw_cpu and pk else None,
                "switch_cpu_us_per_packet_whole_process": _r(st["cpu_time_s"] / pk * 1e6, 2)
                if st.get("cpu_time_s") and pk else None,
                "switch_capacity_pps_one_core": round(pk / sw_cpu) if sw_cpu and pk else None,
                "cpu": cpu, "switch": switch_brief(st),
                "transport": transport_totals(recs)})
        rows.append(row)
    return {"size_values": size, "values_per_packet": VALUES_PER_PACKET,
            "note": "input_pps = INA packets at the switch (switch_counters) / sum of the per-iteration "
                    "allreduce times (max over ranks); switch_cpu_us_per_packet = the switch process's CPU "
                    "in the active window (sampled from /proc) / INA packets; _whole_process includes "
                    "start-up and control plane; capacity = packets per CPU-second at this load's batch "
                    "sizes (an upper bound only if the switch were alone on a core)",
            "rows": rows}


# --- table --------------------------------------------------------------------------------

def cell(x: Any, fmt: str = "{:.2f}") -> str:
    """A table cell: `x` formatted, "-" when not measured."""
    return "-" if x is None else fmt.format(x)


def format_table(res: dict) -> str:
    L = [f"allreduce_ratios: {res['cpus']} CPUs, load avg {res['loadavg_before'][0]:.2f} -> "
         f"{res['loadavg_after'][0]:.2f}, {res['wall_s']:.0f} s"]
    lat = res.get("latency", {})
    if lat:
        L.append(f"\n1) latency: N=8, 64 float32, unlimited links, {res['params']['lat_iters']} iterations "
                 f"(pooled over ranks | per-iteration max over ranks)")
        L.append(f"   {'algorithm':<9} {'p50 ms':>8} {'p99 ms':>8} | {'p50 ms':>8} {'p99 ms':>8} "
                 f"{'machine cores':>13} {'switch cores':>12} {'other':>5}")
        for alg in ("switch", "ring"):
            r = lat["points"].get(alg, {})
            c = r.get("cpu", {})
            L.append(f"   {alg:<9} {cell(r.get('p50_ms')):>8} {cell(r.get('p99_ms')):>8} | "
                     f"{cell(r.get('iter_max_p50_ms')):>8} {cell(r.get('iter_max_p99_ms')):>8} "
                     f"{cell(c.get('machine_busy_cores')):>13} {cell(c.get('switch_cores')):>12} "
                     f"{cell(c.get('other_cores')):>5}"
                     + (f"  [{r['status']}: {r.get('error')}]" if r.get("status") not in (None, "ok") else ""))
        sw = lat["points"].get("switch", {})
        tr = sw.get("transport") or {}
        L.append(f"   switch = 2 INA round trips per allreduce (scale MAX + SUM), chunk RTT p50 "
                 f"{cell(tr.get('chunk_rtt_p50_ms_median_host'))} ms, retx {cell(tr.get('retx_pct'), '{:.1f}')}%; "
                 f"ring = 2(N-1) = 14 dependent TCP steps")
        L.append(f"   switch/ring: p50 {cell(lat.get('ratio_p50'))}, p99 {cell(lat.get('ratio_p99'))} "
                 f"(per-iteration max: {cell(lat.get('ratio_iter_max_p50'))}, {cell(lat.get('ratio_iter_max_p99'))}); "
                 f"target <= 0.3: {'met' if lat.get('meets_target') else 'NOT met'}")
    gp = res.get("goodput", {})
    if gp:
        L.append(f"\n2) goodput: {gp['size_values']} float32 ({gp['tensor_bytes'] / 2**20:.0f} MiB), "
                 f"time = median per-iteration max over ranks; eff = header-adjusted link time / measured")
        L.append(f"   {'N':>2} {'Mbit/s':>6} {'ring s':>7} {'eff':>5} {'switch s':>8} {'eff':>5} "
                 f"{'ratio':>6} {'limit':>6} {'frac':>5} {'hdr lim':>7} {'frac':>5} {'retx%':>6} "
                 f"{'mach':>5} {'sw':>5} {'hosts':>5} {'other':>5}  in-switch bound")
        for row in gp["rows"]:
            s, r = row.get("switch") or {}, row.get("ring") or {}
            c = s.get("cpu", {})
            L.append(f"   {row['workers']:>2} {row['mbps']:>6g} {cell(r.get('time_s')):>7} "
                     f"{cell(r.get('link_efficiency')):>5} {cell(s.get('time_s')):>8} {cell(s.get('link_efficiency')):>5} "
                     f"{cell(row.get('goodput_ratio')):>6} {cell(row['limit']):>6} {cell(row.get('fraction_of_limit')):>5} "
                     f"{cell(row['limit_header_adjusted']):>7} {cell(row.get('fraction_of_header_adjusted_limit')):>5} "
                     f"{cell((s.get('transport') or {}).get('retx_pct'), '{:.1f}'):>6} "
                     f"{cell(c.get('machine_busy_cores')):>5} {cell(c.get('switch_cores')):>5} "
                     f"{cell(c.get('hosts_cores')):>5} {cell(c.get('other_cores')):>5}  "
                     f"{s.get('bound', s.get('error') or '-')}")
        wb = [(row.get("ring") or {}).get("wire_bytes_per_payload_byte") for row in gp["rows"]]
        wb = [x for x in wb if x]
        if wb:
            L.append(f"   ring wire bytes per payload byte {min(wb):.3f}..{max(wb):.3f} (TCP/IP headers + "
                     f"delayed ACKs alone: ~1.067; more would be TCP retransmissions)")
        reach = {row["workers"]: row["max_reachable_fraction_of_limit"] for row in gp["rows"]}
        L.append("   target: frac >= 0.9 of 2(N-1)/N; header-adjusted (256 B in 314 B INA frames vs "
                 "1448 B in 1514 B TCP) at most " + ", ".join(f"N={n}: {f}" for n, f in reach.items())
                 + " of it is reachable")
    ag = res.get("aggrate", {})
    if ag:
        L.append(f"\n3) soft-switch aggregation rate: switch algorithm, unlimited links, "
                 f"{ag['size_values']} float32, {VALUES_PER_PACKET} int32 per packet")
        L.append(f"   {'N':>2} {'input pkt/s':>11} {'per worker':>10} {'sw us/pkt':>9} {'(whole)':>8} "
                 f"{'sw cores':>8} {'mach':>5} {'hosts':>5} {'other':>5} {'batch':>5} {'retx%':>6} {'pkt/CPU-s':>9}")
        for row in ag["rows"]:
            c = row.get("cpu", {})
            L.append(f"   {row['workers']:>2} {cell(row.get('input_pps'), '{:,}'):>11} "
                     f"{cell(row.get('input_pps_per_worker'), '{:,}'):>10} "
                     f"{cell(row.get('switch_cpu_us_per_packet')):>9} "
                     f"{cell(row.get('switch_cpu_us_per_packet_whole_process')):>8} "
                     f"{cell(c.get('switch_cores')):>8} {cell(c.get('machine_busy_cores')):>5} "
                     f"{cell(c.get('hosts_cores')):>5} {cell(c.get('other_cores')):>5} "
                     f"{cell((row.get('switch') or {}).get('mean_rx_batch'), '{:.1f}'):>5} "
                     f"{cell((row.get('transport') or {}).get('retx_pct'), '{:.1f}'):>6} "
                     f"{cell(row.get('switch_capacity_pps_one_core'), '{:,}'):>9}"
                     + (f"  [{row['status']}: {row.get('error')}]" if row.get("status") != "ok" else ""))
    for w in res.get("warnings", []):
        L.append(f"! {w}")
    return "\n".join(L)


def finish(res: dict) -> None:
    """Verdicts, warnings and the table, from the measured numbers alone (re-runnable
    on a saved result: python -m bench.allreduce_ratios --retable FILE)."""
    for row in res.get("goodput", {}).get("rows", []):
        for alg in ("switch", "ring"):
            if (row.get(alg) or {}).get("status") == "ok":
                row[alg]["bound"] = bound_verdict(row[alg])
    res["warnings"] = warnings_for(res)
    res["table"] = format_table(res)


def warnings_for(res: dict) -> list[str]:
    out = []
    for kind in ("latency", "goodput", "aggrate"):
        info = res["runs"].get(kind, {})
        q = info.get("quiet_wait") or {}
        if q and not q.get("quiet"):
            out.append(f"{kind}: the machine was busy when the run started ({q.get('busy_cores_at_start')} "
                       f"cores after waiting {q.get('waited_s')} s): other work shared the cores "
                       f"(column 'other' = other processes + kernel packet processing)")
        if info.get("sources_changed_during_run"):
            out.append(f"{kind}: the host/switch sources changed while the run went (someone edited the "
                       f"tree): points may mix code versions; sources_before/after in runs.{kind}")
        if info.get("returncode") not in (0, None):
            out.append(f"{kind} run returned {info.get('returncode')}; see {info.get('log')}")
    for row in res.get("goodput", {}).get("rows", []):
        for alg in ("switch", "ring"):
            p = row.get(alg) or {}
            if p.get("status") not in (None, "ok"):
                out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s {alg}: {p['status']}: {p.get('error')}")
            sw = p.get("switch") or {}
            if sw.get("rx_kernel_drops") or sw.get("tx_dropped"):
                out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s {alg}: switch dropped "
                           f"(kernel rx {sw.get('rx_kernel_drops')}, tx {sw.get('tx_dropped')})")
        sp = row.get("switch") or {}
        tr = sp.get("transport") or {}
        worst = tr.get("worst_host") or {}
        lost = (tr.get("packets_sent") or 0) - ((sp.get("ina_counters") or {}).get("ina_packets") or 0)
        if tr and lost > 0:
            ss = sp.get("switch") or {}
            out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s switch: {lost} INA packets the hosts "
                       f"sent never reached the switch's pipeline (no loss configured; switch kernel rx "
                       f"drops {ss.get('rx_kernel_drops')}): dropped on the way (host htb queue or socket)")
        for alg in ("switch", "ring"):
            p = row.get(alg) or {}
            its = [t for t in p.get("iter_times_s") or [] if t]
            if its and p.get("time_s") and max(its) > 1.5 * p["time_s"]:
                out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s {alg}: iteration times {its} s "
                           f"(the table shows the median)")
        if (tr.get("retx_pct") or 0) >= 2 or (worst.get("retx_pct") or 0) >= 10:
            c = (row.get("switch") or {}).get("ina_counters", {})
            out.append(f"goodput N={row['workers']} {row['mbps']}Mbit/s switch: {tr.get('retx_pct')}% INA "
                       f"retransmissions ({tr.get('retransmissions')} of {tr.get('chunks_sent')} chunks; worst "
                       f"{worst.get('host')} {worst.get('retx_pct')}%), no loss configured; the switch answered "
                       f"{c.get('ina_retransmits')} as already complete and dropped {c.get('ina_duplicates_dropped')} "
                       f"as duplicates, the hosts ignored {tr.get('duplicates_ignored')} duplicate results: "
                       f"spurious (chunk RTT p50 {tr.get('chunk_rtt_p50_ms_median_host')} ms, worst p99 "
                       f"{tr.get('chunk_rtt_p99_ms_max_host')} ms; the first RTO is at most ina.retx_timeout_s, 50 ms "
                       f"by default)")
    return out
