"""The DDP hook's overhead against gloo's own allreduce, per bucket size.

Two worker processes on loopback (127.0.1.1 and .2, no emulated switch, no
bandwidth limit): per bucket size, each times `reps` calls of
  * gloo:      torch.distributed.all_reduce(bucket)     (what DDP does without a hook)
  * hook+ring: hosts.dnn.ddp_hook.testbed_hook(...)     (the testbed ring, timed and traced)
  * hook+gloo: testbed_hook with collective "gloo"       (the hook's own cost around gloo)
and reports the median per call and the ratio to gloo, side by side in one
run. Measurements only; loopback numbers say what the hook's Python costs,
not what an emulated link would.

    .venv/bin/python -m bench ddp_hook_overhead
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


def run(out_dir: Path) -> dict:
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
    else:
        print(json.dumps(run(Path(".")), indent=2))
