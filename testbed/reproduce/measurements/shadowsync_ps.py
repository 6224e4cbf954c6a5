"""The service cost of the project's own ShadowSync parameter servers, measured on this
machine (data/shadowsync_ps_2026-11-26.json; data/README.md names the machine, the date
and the command).

What is measured: `hosts.shadowsync.servers.Server.serve`, the embedding PS's and the
sync PS's request loop itself (LOOKUP: gather the rows of every table the PS holds and
send them; PUSH: `index_add_` the gradients into the tables; ELASTIC: the elastic
difference into the centre and the reply), called directly in this process on one end
of an in-memory AF_UNIX socket pair, with a client process on the other end sending
requests back to back. No network: the pair is a kernel buffer, so a request's cost is
the server's own (the payload copy in, the table work, the reply copy out). The server
counts its busy time per connection from a request's header to the end of its handler
(`Served.c["busy_s"]`); the cost per request is that over the requests served.
Each request kind is run at several sizes and fitted as a fixed cost per request plus a
cost per embedding row (LOOKUP, PUSH) or per dense value (ELASTIC), least squares on the
relative error over the sizes' medians of `REPEATS` runs (the file keeps every run and
the fit's largest miss). One serving thread (`torch.set_num_threads(1)`, as
the server's main sets).

This is a Python + PyTorch server on this machine's 2 shared cores, not the paper's C++
PS: the per-point projection of the emulated job charges it as measured (the emulated PSs
are this code), while the paper-setting projection (papers/shadowsync.py) keeps its costs
assumed and cites this as the top of their range (a C++ PS costs less, not more).

Run it (writes the JSON the loader reads):
    .venv/bin/python -m testbed.reproduce.measurements.shadowsync_ps --out \
        testbed/reproduce/measurements/data/shadowsync_ps_<date>.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from testbed.reproduce.measurements import Measurement, read_measurement_file

DATA = Path(__file__).with_name("data") / "shadowsync_ps_2026-11-26.json"
SCHEMA = "shadowsync_ps/1"
OPS = ("lookup", "push", "elastic")
BATCHES = (8, 32, 128, 512)          # ids per table per request (the workload's batch is 128)
TABLES = 26                          # one embedding PS holding every table (the emulation's 1 PS)
TABLE_ROWS = 1000                    # the workload's table size
DIMS = (8, 16)                       # the workload's dim; the paper-setting projection's (DLRM Kaggle)
TOWERS = {"workload": ([32], [32]), "dlrm_kaggle": ([512, 256, 64], [512, 256])}
REPEATS = 5
TARGET_S = 0.4                       # requests per run: about this much server time

# Nothing here checks a hardware model (the package's MEASUREMENTS are validations);
# the costs are read by the projections through `ps_cost`.
MEASUREMENTS: list[Measurement] = []


class PsCostError(ValueError):
    """The measurement file is missing, malformed, or lacks the cost asked for."""


@dataclass(frozen=True)
class PsCost:
    """One request kind's fitted cost: fixed_s + per_unit_s x units (rows, or dense values)."""
    op: str
    fixed_s: float
    per_unit_s: float
    unit: str
    source: str

    def seconds(self, units: float) -> float:
        return self.fixed_s + self.per_unit_s * units


@lru_cache(maxsize=None)
def load(path: Path = DATA) -> dict[str, Any]:
    path = Path(path)
    data = read_measurement_file(path, PsCostError)
    if data.get("schema") != SCHEMA or set(data.get("fits", {})) != set(OPS):
        raise PsCostError(f"{path}: not a full {SCHEMA} run (fits for {', '.join(OPS)})")
    return data


def ps_cost(op: str, dim: int = DIMS[0], path: Path = DATA) -> PsCost:
    """The measured cost of one `op` request (lookup and push at embedding `dim`)."""
    data = load(path)
    fits = data["fits"].get(op)
    if fits is None:
        raise PsCostError(f"{path}: no fit for {op!r} (have {sorted(data['fits'])})")
    key = str(dim) if op != "elastic" else "dense"
    if key not in fits:
        raise PsCostError(f"{path}: {op} was measured at {sorted(fits)}, not dim {dim}")
    f = fits[key]
    return PsCost(op, f["fixed_us"] * 1e-6, f["per_unit_ns"] * 1e-9, f["unit"],
                  f"{path.name} ({data['date']}, {data['machine']}; `{data['command']}`)")


# ---- the microbenchmark ---------------------------------------------------------------

def _settings(dim: int, tower: str):
    from hosts.shadowsync.config import Settings  # noqa: PLC0415
    bottom, top = TOWERS[tower]
    return Settings(algorithm="easgd", mode="shadow", k=5, trainers=1, hogwild_workers=1, embedding_servers=1,
                    iterations=1, batch_size=128, lr_dense=0.05, lr_embed=3.0, alpha=0.3, bmuf_eta=0.5,
                    bmuf_zeta=1.0, nesterov=False, shadow_pause_ms=0.0, sync_hw_s=0.0, calibrated=False,
                    eval_examples=2, seed=0, model={"table_sizes": [TABLE_ROWS] * TABLES, "dim": dim,
                                                    "bottom": bottom, "top": top},
                    dataset={"source": "synthetic"})


def socketpair_conn(sock: socket.socket, peer: str):
    """hosts.common.tcp.Conn over a socket-pair end: Conn's constructor sets TCP_NODELAY,
    which an AF_UNIX socket refuses; every other field is set as it sets it."""
    from hosts.common.tcp import Conn  # noqa: PLC0415
    sock.setblocking(False)
    c = Conn.__new__(Conn)
    c.sock, c.peer, c.timeout_s, c.send_seq, c.recv_seq = sock, peer, 60.0, 0, 0
    return c


def _client(sock: socket.socket, op: str, n: int, width: int, values: int, count: int) -> None:
    """Send `count` requests back to back (a LOOKUP waits for its rows), then END."""
    import numpy as np  # noqa: PLC0415

    from hosts.common.tcp import recv_array, send_array  # noqa: PLC0415
    from hosts.shadowsync import protocol as P  # noqa: PLC0415
    conn = socketpair_conn(sock, "server")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, TABLE_ROWS, size=n * TABLES, dtype=np.int64)
    for _ in range(count):
        if op == "lookup":
            send_array(conn, P.header(P.LOOKUP, n))
            send_array(conn, ids)
            recv_array(conn, np.empty(n * TABLES * width, np.float32))
        elif op == "push":
            send_array(conn, P.header(P.PUSH, n))
            send_array(conn, ids)
            send_array(conn, rng.standard_normal(n * TABLES * width, dtype=np.float32) * 1e-3)
        else:
            send_array(conn, P.header(P.ELASTIC, values))
            send_array(conn, rng.standard_normal(values, dtype=np.float32))
            recv_array(conn, np.empty(values, np.float32))
    send_array(conn, P.header(P.END, count))


def _run(op: str, size: int, dim: int, tower: str, count: int) -> float:
    """Seconds of server busy time per request of `op` at `size` (ids per table, or tower)."""
    import torch  # noqa: PLC0415

    from hosts.shadowsync.config import ServerConfig  # noqa: PLC0415
    from hosts.shadowsync.servers import Served, Server  # noqa: PLC0415
    torch.set_num_threads(1)
    s = _settings(dim, tower)
    role = "sync_ps" if op == "elastic" else "embedding_ps"
    cfg = ServerConfig(host="emb1" if role == "embedding_ps" else "syncps", ip="127.0.0.1", index=0, port=1,
                       rank=1, world=2, clients=1, connect_timeout_s=1.0, timeout_s=60.0, out="/dev/null",
                       trace=None)
    srv = Server(role, cfg, s)
    values = srv.centre.numel() if role == "sync_ps" else 0
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ctx = mp.get_context("fork")
    child = ctx.Process(target=_client, args=(b, op, size, dim, values, count), daemon=True)
    child.start()
    b.close()
    st = Served("w1", 0)
    try:
        srv.serve(socketpair_conn(a, "client"), st)
    finally:
        a.close()
        child.join(30)
    if child.exitcode != 0:
        raise RuntimeError(f"{op} client exited {child.exitcode}")
    served = st.c["lookups"] + st.c["pushes"] + st.c["elastic"]
    if served != count:
        raise RuntimeError(f"{op}: served {served} of {count} requests")
    return st.c["busy_s"] / count


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """y = a + b x by least squares on the relative error (each size weighs alike; a plain
    fit lets the largest size set the line and misses the small ones by 2x), and the
    largest relative residual."""
    w = [1.0 / y for y in ys]
    sw, sx, sy = sum(v * v for v in w), sum(v * v * x for v, x in zip(w, xs)), sum(v * v * y for v, y in zip(w, ys))
    sxx, sxy = sum((v * x) ** 2 for v, x in zip(w, xs)), sum(v * v * x * y for v, x, y in zip(w, xs, ys))
    b = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    a = (sy - b * sx) / sw
    return a, b, max(abs(a + b * x - y) / y for x, y in zip(xs, ys))


def measure(repeats: int = REPEATS) -> dict[str, Any]:
    rows, fits = [], {}
    for op in OPS:
        fits[op] = {}
        cases = [(str(d), d, "workload", [(n, n * TABLES) for n in BATCHES]) for d in DIMS] if op != "elastic" \
            else [("dense", DIMS[0], "", [])]
        for key, dim, _, sizes in cases:
            if op == "elastic":          # the dense vector of each tower: the unit is one value
                sizes = [(tw, _settings_values(tw)) for tw in TOWERS]
            xs, ys = [], []
            for size, units in sizes:
                tower = size if op == "elastic" else "workload"
                probe = _run(op, size if op != "elastic" else 0, dim, tower, 20)
                count = max(20, min(20000, int(TARGET_S / max(probe, 1e-6))))
                per = [_run(op, size if op != "elastic" else 0, dim, tower, count) for _ in range(repeats)]
                med = statistics.median(per)
                rows.append({"op": op, "dim": dim, "size": size, "units": units, "count": count,
                             "per_request_us": [p * 1e6 for p in per], "median_us": med * 1e6})
                xs.append(units)
                ys.append(med)
                print(f"{op:8s} dim {dim:3d} size {size!s:12s} units {units:8d}: {med * 1e6:9.2f} us "
                      f"(min {min(per) * 1e6:.2f}, max {max(per) * 1e6:.2f}, {count} requests x {repeats})",
                      flush=True)
            a, b, worst = _fit(xs, ys)
            fits[op][key] = {"fixed_us": a * 1e6, "per_unit_ns": b * 1e9, "max_rel_residual": worst,
                             "unit": "dense value" if op == "elastic" else "embedding row"}
    return {"rows": rows, "fits": fits}


def _settings_values(tower: str) -> int:
    from hosts.shadowsync.replica import initial_flat  # noqa: PLC0415
    return int(initial_flat(_settings(DIMS[0], tower)).numel())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.reproduce.measurements.shadowsync_ps",
                                description="measure the ShadowSync PSs' service cost per request (module doc)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--repeats", type=int, default=REPEATS)
    a = p.parse_args(argv)
    import torch  # noqa: PLC0415
    t0 = time.time()
    got = measure(a.repeats)
    out = {"schema": SCHEMA, "date": time.strftime("%Y-%m-%d"),
           "command": "python -m testbed.reproduce.measurements.shadowsync_ps " + " ".join(argv or sys.argv[1:]),
           "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
                      f"{len(__import__('os').sched_getaffinity(0))} cores, Python {platform.python_version()}, "
                      f"torch {torch.__version__}",
           "method": "hosts.shadowsync.servers.Server.serve over an AF_UNIX socket pair, a client process "
                     "sending back to back; busy_s per request; median of repeats per size; least-squares fit on the "
                     "relative error",
           "wall_s": time.time() - t0, **got}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["fits"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
