"""The DDP hook's overhead against gloo's own allreduce, per bucket size.

Default (Mininet, root): runs scenarios/torch/hook_overhead.yaml (`testbed run`):
LeNet with DDP on 2 emulated workers behind the soft switch, the network
dilated to the device model's TDF, per DDP bucket_cap_mb: gloo's own allreduce
(no hook), the hook calling gloo, the hook over the host ring and over the
in-switch aggregation, side by side in one run. Reported per bucket size: the
hardware time per iteration (emulated / TDF) of each, and its ratio to gloo's;
the fidelity verdict of each point. Compute is the same device model in every
variant, so the differences are communication and the hook.

`--loopback`: the hook's raw Python cost per call on loopback (two processes, no
emulated link; the earlier measurement, kept for the hook's own cost).

    .venv/bin/python -m bench ddp_hook_overhead            # Mininet
    .venv/bin/python -m bench.ddp_hook_overhead --loopback
"""
from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = [1024, 16384, 262144, 1048576]     # float32 values per bucket (4 KiB .. 4 MiB)
REPS = 20
N = 2
ROOT = Path(__file__).resolve().parent.parent


def _free_base() -> int:
    for _ in range(100):
        base = random.randrange(20000, 50000)
        try:
            for ip, port in [("127.0.1.1", base + 1), ("127.0.1.2", base + 2), ("127.0.0.1", base + 60)]:
                with socket.socket() as s:
                    s.bind((ip, port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def _config(tmp: Path, rank: int, base: int, collective: str) -> dict:
    peers = [{"name": f"w{r + 1}", "ip": f"127.0.1.{r + 1}"} for r in range(N)]
    return {"host": f"w{rank + 1}", "role": "worker", "rank": rank, "world": N, "collective": collective,
            "peers": peers, "ps": None, "port": base, "master_addr": "127.0.0.1",
            "master_port": base + 60, "gloo_ifname": "lo", "script": __file__, "args": [],
            "batch_size": 1, "seed": 0, "device": {"type": "cpu"}, "straggler": None, "start_at": None,
            "connect_timeout_s": 60, "timeout_s": 60, "out": str(tmp / f"{collective}-w{rank + 1}.jsonl"),
            "trace": None, "ina": None}


class _Bucket:
    def __init__(self, t):
        self.t = t

    def buffer(self):
        return self.t


def worker(rank: int, base: int, tmp: str) -> None:
    import os
    import statistics

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(N), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(base + 60), GLOO_SOCKET_IFNAME="lo")
    from hosts.dnn import ddp_hook, runtime
    ddp_hook.init_process_group()
    out = {}
    for collective in ("ring", "gloo"):
        rt = runtime.Runtime.open(_config(Path(tmp), rank, base, collective))
        rt.collective.barrier()
        for size in SIZES:
            t = torch.randn(size)
            def gloo():
                dist.all_reduce(t)
            def hook():
                ddp_hook.testbed_hook(None, _Bucket(t)).wait()
            for name, fn in (("gloo", gloo), (f"hook+{collective}", hook)):
                if name == "gloo" and collective != "ring":
                    continue
                fn()
                times = []
                for _ in range(REPS):
                    dist.barrier()
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
                out.setdefault(str(size), {})[name] = statistics.median(times)
        rt.close(True)
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()


SCENARIO = ROOT / "scenarios" / "torch" / "hook_overhead.yaml"
VARIANTS = ("gloo", "hook-gloo", "hook-ring", "hook-switch")


def run(out_dir: Path, quick: bool = False) -> dict:
    """The scenario on Mininet; rows per bucket size (see the module doc)."""
    out_dir = Path(out_dir)
    argv = [sys.executable, "-m", "testbed", "run", str(SCENARIO), "--no-plot", "--out", str(out_dir)]
    if quick:
        argv.append("--quick")
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"testbed run failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    run_dir = max((m.parent for m in out_dir.glob("torch-hook-overhead/*/manifest.json")), key=lambda d: d.name)
    return table(run_dir)


def table(run_dir: Path) -> dict:
    """Rows per bucket cap from a run folder of scenarios/torch/hook_overhead.yaml.

    Per variant: hardware ms per iteration and, for the hooked ones, hardware ms of
    communication per iteration (the hook times each bucket). Ratios: iteration time
    over gloo's own (`over_gloo`), and communication over the hook calling gloo
    (`comm_over_hook_gloo`). Caveat, measured: DDP's own allreduce runs inside the
    step, which the device model paces to TDF x its compute time, so its
    communication hides in that sleep whenever it fits (then its iteration time is
    the compute alone); the hook's buckets are taken out of the step and charged."""
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    by_cap: dict[str, dict[str, dict]] = {}
    ops: dict[str, list] = {}

    def cap_of(m: dict) -> str:
        args = m.get("workload.args") or []
        return args[args.index("--bucket-cap-mb") + 1] if "--bucket-cap-mb" in args else "default"
    for m in metrics:
        if m["type"] == "torch_summary":
            by_cap.setdefault(cap_of(m), {})[m["case"]] = m
        elif m["type"] == "torch_iter" and m.get("case") == "hook-ring" and m.get("rank") == 0 \
                and not m.get("calibration") and m.get("comm_ops"):
            ops.setdefault(cap_of(m), []).append((m["comm_ops"], m["comm_bytes"] / 4 / m["comm_ops"]))
    rows = []
    for cap, v in sorted(by_cap.items(), key=lambda kv: float(kv[0]) if kv[0] != "default" else 1e9):
        base = (v.get("gloo") or {}).get("hw_iter_ms")
        hook_gloo = (v.get("hook-gloo") or {}).get("hw_comm_ms")
        o = ops.get(cap) or [(None, None)]
        row = {"bucket_cap_mb": cap, "buckets_per_iteration": o[-1][0],
               "values_per_bucket": round(o[-1][1]) if o[-1][1] else None}
        for name in VARIANTS:
            s = v.get(name) or {}
            ms, comm = s.get("hw_iter_ms"), s.get("hw_comm_ms")
            row[name] = {"hw_iter_ms": ms, "hw_comm_ms": comm, "valid": s.get("valid"), "tdf": s.get("tdf"),
                         "over_gloo": ms / base if ms and base else None,
                         "comm_over_hook_gloo": comm / hook_gloo if comm and hook_gloo else None,
                         "emulated_over_projected": s.get("emulated_over_projected")}
        rows.append(row)
    nan = float("nan")
    for r in rows:
        cells = "  ".join(f"{n} {r[n]['hw_iter_ms'] or nan:.4f} ms/it ({r[n]['over_gloo'] or nan:.2f}x; comm "
                          f"{r[n]['hw_comm_ms'] or nan:.4f} ms, {r[n]['comm_over_hook_gloo'] or nan:.2f}x"
                          f"{'' if r[n]['valid'] else ', INVALID'})" for n in VARIANTS)
        print(f"cap {r['bucket_cap_mb']} MB ({r['buckets_per_iteration']} buckets of ~{r['values_per_bucket']} "
              f"values): {cells}")
    return {"name": "ddp_hook_overhead", "run": str(run_dir), "network": "mininet, soft switch, dilated",
            "unit": "hardware ms per iteration (emulated / TDF)", "rows": rows}


def run_loopback(out_dir: Path) -> dict:
    base = _free_base()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([sys.executable, "-m", "bench.ddp_hook_overhead", "--worker", str(r),
                                   str(base), tmp], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                 for r in range(N)]
        outs = [p.communicate(timeout=600)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"worker exit codes {[p.returncode for p in procs]}")
    med = json.loads(outs[0].strip().splitlines()[-1])
    rows = []
    for size in SIZES:
        m = med[str(size)]
        rows.append({"values": size, "bytes": 4 * size, "gloo_ms": m["gloo"] * 1e3,
                     "hook_ring_ms": m["hook+ring"] * 1e3, "hook_gloo_ms": m["hook+gloo"] * 1e3,
                     "hook_ring_over_gloo": m["hook+ring"] / m["gloo"],
                     "hook_gloo_over_gloo": m["hook+gloo"] / m["gloo"]})
    for r in rows:
        print(f"{r['bytes']:>9} B  gloo {r['gloo_ms']:8.3f} ms  hook+ring {r['hook_ring_ms']:8.3f} ms "
              f"({r['hook_ring_over_gloo']:.2f}x)  hook+gloo {r['hook_gloo_ms']:8.3f} ms "
              f"({r['hook_gloo_over_gloo']:.2f}x)")
    return {"name": "ddp_hook_overhead", "workers": N, "reps": REPS, "network": "loopback", "rows": rows}


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif "--loopback" in sys.argv:
        print(json.dumps(run_loopback(Path(".")), indent=2))
    elif len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(json.dumps(table(Path(sys.argv[2])), indent=2))
    else:
        print(json.dumps(run(ROOT / "results" / "bench", quick="--quick" in sys.argv), indent=2))
