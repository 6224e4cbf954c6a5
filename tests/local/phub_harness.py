"""Start a PHub (or wide-PS) server and its workers on loopback for the local tests."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hosts.phub.profiles import get_profile
from testbed.loopback_ports import free_port_base

PY = sys.executable


def free_port(span: int = 8) -> int:
    return free_port_base(span)


def sizes_of(model: dict) -> list[int]:
    if model["kind"] == "cnn":
        import torch  # noqa: PLC0415
        from hosts.dnn.lenet import LeNet  # noqa: PLC0415
        torch.manual_seed(0)
        return [p.numel() for p in LeNet().parameters()]
    p = get_profile(model["name"])
    return [max(1, round(x.params * model["size_scale"])) for x in p.layers]


def launch(tmp: Path, *, algorithm: str, world: int, model: dict, optimizer: dict, iterations: int = 3,
           chunk_bytes: int = 1024, cores: int = 2, jobs: int = 1, exit_at: dict | None = None,
           trace: bool = False) -> dict:
    """Start everything; returns {"procs": {name: Popen}, "out": {name: path}}."""
    port = free_port(16)
    sizes = sizes_of(model)
    procs, outs = {}, {}
    job_specs = []
    for j in range(jobs):
        job_specs.append({"job": j + 1, "world": world, "sizes": sizes, "chunk_bytes": chunk_bytes,
                          "optimizer": optimizer, "workers": [f"j{j + 1}w{r}" for r in range(world)]})
    server = "wide_ps" if algorithm == "wide_ps" else "server"
    if algorithm in ("phub", "wide_ps"):
        cfg = {"host": "ps", "ip": "127.0.0.1", "port": port, "cores": cores if algorithm == "phub" else 1,
               "jobs": job_specs, "out": str(tmp / "ps.jsonl"), "timeout_s": 60.0, "connect_timeout_s": 150.0,
               "trace": str(tmp / "ps.trace.jsonl") if trace else None, "trace_rank": world,
               "trace_world": world + 1}
        (tmp / "ps.config.json").write_text(json.dumps(cfg))
        procs["ps"] = subprocess.Popen([PY, "-m", f"hosts.phub.{server}", "--config", str(tmp / "ps.config.json")],
                                       stderr=open(tmp / "ps.log", "w"))
        outs["ps"] = tmp / "ps.jsonl"
    for js in job_specs:
        for r, name in enumerate(js["workers"]):
            cfg = {"host": name, "ip": "127.0.0.1", "rank": r, "job": js, "algorithm": algorithm,
                   "model": model, "iterations": iterations, "warmup": 0, "seed": 7, "batch_size": 16,
                   "device": {"type": "v100", "time_scale": 1.0} if model["kind"] == "profile" else {},
                   "out": str(tmp / f"{name}.jsonl"), "server": {"name": "ps", "ip": "127.0.0.1"},
                   "port": port, "cores": cores,
                   "peers": [{"name": n, "ip": "127.0.0.1"} for n in js["workers"]],
                   "exit_at": exit_at if (exit_at and r == world - 1) else None,
                   "trace": str(tmp / f"{name}.trace.jsonl") if trace else None, "trace_world": world + 1,
                   "timeout_s": 60.0, "connect_timeout_s": 150.0}
            p = tmp / f"{name}.config.json"
            p.write_text(json.dumps(cfg))
            procs[name] = subprocess.Popen([PY, "-m", "hosts.phub.worker", "--config", str(p)],
                                           stderr=open(tmp / f"{name}.log", "w"))
            outs[name] = tmp / f"{name}.jsonl"
    return {"procs": procs, "out": outs}


def wait_all(run: dict, timeout: float = 120) -> dict[str, int]:
    codes = {}
    try:
        for name, p in run["procs"].items():
            codes[name] = p.wait(timeout)
    finally:
        for p in run["procs"].values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()] if Path(path).exists() else []
