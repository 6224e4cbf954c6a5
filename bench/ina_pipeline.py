"""In-process throughput of the soft switch's INA pipeline (bytes in -> frames out),
the numpy reference and the compiled path (testbed/switch/ina/fastpath.py) side
by side in one run, at the batch sizes real traffic produces (16, 64, 256).

N workers stream chunks of 64 int32 values through a window of slots, as the
host library does (chunk seq -> slot seq % window, version (seq // window) % 2);
frames arrive worker-interleaved and are handed to `process_batch` in batches.
Frames are built before timing; the clock covers only the pipeline.
CPU time is time.process_time (one core), so the numbers are per core.
"""
from __future__ import annotations

import os
import time

import numpy as np

from testbed import wire
from testbed.switch.ina import CompiledInaPipeline, InaPipeline, fastpath

SWITCH_MAC, SWITCH_IP = "02:00:00:00:00:fe", "10.0.0.254"


def make_job(n_workers: int, window: int, job_id: int = 1, slot_base: int = 0) -> dict:
    workers = [{"worker_id": i, "mac": f"02:00:00:00:{job_id:02x}:{i + 1:02x}",
                "ip": f"10.{job_id}.0.{i + 1}", "port": i + 1} for i in range(n_workers)]
    return {"job_id": job_id, "workers": workers, "slot_base": slot_base, "slot_count": window}


def make_stream(job: dict, chunks: int, window: int, seed: int = 0) -> tuple[list[bytes], list[int]]:
    """Every worker's contribution to `chunks` chunks, worker-interleaved per chunk."""
    rng = np.random.default_rng(seed)
    vals = rng.integers(-1000, 1000, size=(len(job["workers"]), wire.MAX_VALUES_PER_PACKET))
    frames, ports = [], []
    prefix = {}
    for w in job["workers"]:
        payload_len = wire.INA_HLEN + 4 * wire.MAX_VALUES_PER_PACKET
        prefix[w["worker_id"]] = wire.eth_ip_udp(w["mac"], SWITCH_MAC, w["ip"], SWITCH_IP,
                                                 wire.INA_PORT_BASE, wire.INA_PORT_BASE, payload_len)
    body = {w["worker_id"]: wire.values_to_bytes(vals[w["worker_id"]]) for w in job["workers"]}
    for seq in range(chunks):
        for w in job["workers"]:
            wid = w["worker_id"]
            hdr = wire.pack_header(op=wire.OP_SUM, job_id=job["job_id"], slot=seq % window,
                                   slot_ver=(seq // window) % 2, worker_id=wid, seq=seq,
                                   count=wire.MAX_VALUES_PER_PACKET)
            frames.append(prefix[wid] + hdr + body[wid])
            ports.append(w["port"])
    return frames, ports


IMPLS = {
    # what the switch runs with pipeline_impl: reference (vectorized, scalar below 32 frames)
    "reference": lambda cfg: InaPipeline(cfg),
    "reference_scalar": lambda cfg: InaPipeline(cfg, vectorized=False),
    "compiled": lambda cfg: CompiledInaPipeline(cfg),
}


def measure(n_workers: int, batch: int, chunks: int = 8192, window: int = 256,
            impl: str = "reference", repeats: int = 3) -> dict:
    """Best of `repeats` (a fresh pipeline each time): shared machines are noisy."""
    job = make_job(n_workers, window)
    frames, ports = make_stream(job, chunks, window)
    batches = [(frames[i:i + batch], ports[i:i + batch]) for i in range(0, len(frames), batch)]
    cpus, walls = [], []
    for _ in range(repeats):
        pipe = IMPLS[impl]({"ports": {i + 1: f"p{i + 1}" for i in range(n_workers)},
                            "jobs": [job]})
        out_frames = 0
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for fb, pb in batches:
            out_frames += len(pipe.process_batch(fb, pb, 0.0))
        cpus.append(time.process_time() - cpu0)
        walls.append(time.perf_counter() - wall0)
        results = pipe.counters_by_name["Ingress.ina_results"].total()
        if results != chunks or out_frames != chunks * n_workers:
            raise AssertionError(f"N={n_workers}: {results} results / {out_frames} frames, "
                                 f"expected {chunks} / {chunks * n_workers}")
    n, cpu, wall = len(frames), min(cpus), min(walls)
    return {"workers": n_workers, "batch": batch, "impl": impl,
            "input_packets": n, "output_frames": chunks * n_workers,
            "input_pps_cpu": round(n / cpu), "input_pps_wall": round(n / wall),
            "cpu_us_per_packet": round(cpu / n * 1e6, 3),
            "cpu_us_per_packet_median": round(sorted(cpus)[len(cpus) // 2] / n * 1e6, 3)}


def run(out_dir=None, workers=(2, 4, 8), batches=(16, 64, 256)) -> dict:
    if not fastpath.available():
        raise RuntimeError(f"the compiled pipeline is not built ({fastpath.IMPORT_ERROR}): run make setup")
    load0, t0 = os.getloadavg(), time.time()
    rows, ratios = [], []
    for n in workers:
        for b in batches:
            ref, comp = measure(n, b, impl="reference"), measure(n, b, impl="compiled")
            rows += [ref, comp]
            ratios.append({"workers": n, "batch": b,
                           "reference_us": ref["cpu_us_per_packet"],
                           "compiled_us": comp["cpu_us_per_packet"],
                           "speedup": round(ref["cpu_us_per_packet"] / comp["cpu_us_per_packet"], 2)})
    rows += [measure(n, 256, chunks=1024, impl="reference_scalar") for n in (2, 8)]
    return {"benchmark": "ina_pipeline", "target_us_per_packet": 1.5,
            "values_per_packet": wire.MAX_VALUES_PER_PACKET,
            "note": "in-process, bytes in -> frames out; cpu = time.process_time of one core, "
                    "best of 3; reference = InaPipeline (numpy, one by one below 32 frames), "
                    "reference_scalar = its one-by-one path, compiled = CompiledInaPipeline",
            "machine": {"cpus": os.cpu_count(), "loadavg_before": load0,
                        "loadavg_after": os.getloadavg()},
            "wall_s": round(time.time() - t0, 1),
            "ratios": ratios, "results": rows}


if __name__ == "__main__":
    res = run()
    print(f"load {res['machine']['loadavg_before']} -> {res['machine']['loadavg_after']}")
    for r in res["ratios"]:
        print(f"N={r['workers']} batch={r['batch']:3d}: reference {r['reference_us']:6.2f} us/pkt, "
              f"compiled {r['compiled_us']:6.2f} us/pkt, x{r['speedup']}")
