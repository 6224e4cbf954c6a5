"""The software cost of this project's two PHub-workload servers, measured side by side
on this machine (data/phub_server_<date>.json; data/README.md names the machine, the
date and the command).

What is measured, each server's own code driven in this process:
  phub     hosts/phub/server.py's core loop (`serve_links`: pump_links, _handle,
           JobState.push's tall aggregation in rank order, the Nesterov step when a
           chunk is complete, the UPDATE to every worker), one core owning every chunk.
  wide_ps  hosts/collectives/ps.py's ParameterServer.reduce_next (what
           hosts/phub/wide_ps.py loops on): receive every worker's whole tensor, sum in
           rank order, send the sum back (the optimizer runs on the workers).
Each over in-memory AF_UNIX socket pairs (one per worker, send and receive buffers
SOCKET_BUFFER: TCP's autotuned size class, so a large message is not cut into many more
syscalls than on a TCP connection), with one client process on the other ends playing
every worker with the real wire encoding (hosts/phub/protocol.py's Link and headers;
hosts/common/tcp.py's frames): per round each worker pushes one key of `values`
float32 and waits for its update (PHub) or sum (wide PS), as a worker does before it
pushes that key again. No network: the pair is a kernel buffer.

The cost is the server process's CPU time (time.process_time) over the whole loop,
divided by the rounds: waiting for the client (poll) is not counted, and neither is
PHub's modeled-device pacing (CoreDevice): a paced core waits for its modeled
deadline in poll, which costs no CPU; the core is also given an unbounded modeled
rate (reduce_bytes_per_s inf, TDF 1), so its modeled work is CORE_MESSAGE_S (1 us),
less than any message's Python time, and it never waits at all. INIT and END (once
per run) are in the total; REPEATS runs per grid point, each ~TARGET_S of server CPU.

Grid: keys of KEY_BYTES (4 KiB-4 MiB) at WORKERS (2-8) workers; PHub at two chunk
sizes, the key itself (one chunk per message) and PHub's 32 KiB (a message carries
the key's chunks). Fits, least squares on the relative error over the grid's medians,
with non-negative coefficients (scipy nnls), per round of N workers:
  wide_ps  N x (message + value x V)
  phub     N x (message + chunk x chunks + value x V) + optimizer_value x V
message: one push in with its reply out; value: one pushed float32 summed (receive,
sum, and the reply's send); optimizer_value: one weight's Nesterov step (once per
round, PHub only). `relative` holds wide_ps / phub per grid point (PHub at 32 KiB
chunks and at one chunk per message) and per fitted coefficient.

This is Python + numpy on this machine's 2 shared cores, not PHub's C++ nor MXNet's
ps-lite: the paper-setting projection (papers/phub.py) keeps its server costs assumed
and widens their ranges to reach these values; the emulated servers' per-point
projection keeps the modeled device (docs/phub.md says why).

    python -m testbed.reproduce.measurements.phub_server --out \\
        testbed/reproduce/measurements/data/phub_server_<date>.json
    python -m testbed.reproduce.measurements.phub_server --smoke --out /tmp/x.json  (seconds)
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
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
from testbed.reproduce.measurements.shadowsync_ps import socketpair_conn

DATA_DIR = Path(__file__).with_name("data")
SCHEMA = "phub_server/1"
SERVERS = ("phub", "wide_ps")
KEY_BYTES = (4096, 32768, 262144, 1048576, 4194304)
WORKERS = (2, 4, 8)
PHUB_CHUNK_BYTES = 32768             # PHub's chunk (hosts/phub/chunking.py DEFAULT_CHUNK_BYTES)
REPEATS = 3
TARGET_S = 0.15                      # server CPU per run
MIN_ROUNDS = 5
SOCKET_BUFFER = 4 << 20
SMOKE = {"key_bytes": (4096, 262144), "workers": (2, 4), "repeats": 1, "target_s": 0.02}
TIMEOUT_S = 60.0

# Nothing here checks a hardware model (the package's MEASUREMENTS are validations);
# papers/phub.py reads the costs through `server_costs`.
MEASUREMENTS: list[Measurement] = []


class ServerCostError(ValueError):
    """The measurement file is missing, malformed, or lacks a fit."""


@dataclass(frozen=True)
class ServerCosts:
    """The fitted costs (module docstring), in seconds."""
    phub_message_s: float          # per PUSH (with its UPDATE out)
    phub_chunk_s: float            # per chunk a PUSH carries
    phub_value_s: float            # per pushed value summed
    phub_optimizer_value_s: float  # per weight stepped (once per round)
    wide_message_s: float          # per push with its reply
    wide_value_s: float            # per pushed value summed
    relative: dict[str, Any]       # wide_ps / phub (the file's `relative`)
    source: str

    @property
    def phub_one_chunk_message_s(self) -> float:
        """A PUSH of one chunk: PHub's smallest message."""
        return self.phub_message_s + self.phub_chunk_s


def data_files() -> list[Path]:
    """The measurement files, oldest first (dated names sort by date)."""
    return sorted(DATA_DIR.glob("phub_server_*.json"))


@lru_cache(maxsize=None)
def load(path: Path) -> dict[str, Any]:
    path = Path(path)
    data = read_measurement_file(path, ServerCostError)
    if data.get("schema") != SCHEMA or set(data.get("fits", {})) != set(SERVERS):
        raise ServerCostError(f"{path}: not a full {SCHEMA} run (fits for {', '.join(SERVERS)})")
    if data.get("smoke"):
        raise ServerCostError(f"{path}: a --smoke run (a test of the benchmark), not a measurement")
    return data


def server_costs(path: Path | None = None) -> ServerCosts:
    """The fitted costs of `path` (default: the newest data file)."""
    if path is None:
        files = data_files()
        if not files:
            raise ServerCostError(f"no phub_server_*.json in {DATA_DIR}: run "
                                  "python -m testbed.reproduce.measurements.phub_server --out ...")
        path = files[-1]
    data = load(Path(path))
    p, w = data["fits"]["phub"], data["fits"]["wide_ps"]
    return ServerCosts(p["message_us"] * 1e-6, p["chunk_us"] * 1e-6, p["value_ns"] * 1e-9,
                       p["optimizer_value_ns"] * 1e-9, w["message_us"] * 1e-6, w["value_ns"] * 1e-9,
                       data["relative"], f"{Path(path).name} ({data['date']}, {data['machine']}; `{data['command']}`)")


# ---- the two servers and their client ----------------------------------------------------

def _pairs(workers: int) -> tuple[list[socket.socket], list[socket.socket]]:
    mine, theirs = [], []
    for _ in range(workers):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        mine.append(a)
        theirs.append(b)
    return mine, theirs


def _grads(workers: int, values: int):
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(0)
    return [rng.standard_normal(values, dtype=np.float32) * 1e-3 for _ in range(workers)]


def _phub_client(socks: list[socket.socket], values: int, chunk_bytes: int, rounds: int) -> None:
    """Every worker of one job: rank 0's INIT, then per round each rank's PUSH of the key
    and its UPDATEs (all of the key's values) before the next round; END."""
    import numpy as np  # noqa: PLC0415

    from hosts.phub import protocol as P  # noqa: PLC0415
    from hosts.phub.chunking import ChunkPlan  # noqa: PLC0415
    links = [P.Link(socketpair_conn(s, "PHub core 0")) for s in socks]
    ids = list(ChunkPlan([values], chunk_bytes).key_chunks[0])
    grads = _grads(len(links), values)
    links[0].queue(P.header(P.INIT, 1, 0, ids), np.zeros(values, np.float32))
    for it in range(rounds):
        for ln, g in zip(links, grads):
            ln.queue(P.header(P.PUSH, 1, it, ids), g)
        got = [0] * len(links)
        _drive(links, lambda: all(n == values for n in got), got, P)
    for ln in links:
        ln.queue(P.header(P.END, 1, 0, []))
    _drive(links, lambda: not any(ln.busy for ln in links), None, P)
    for ln in links:
        ln.conn.close()


def _drive(links, finished, got: list[int] | None, P) -> None:
    """Pump the links until `finished()`; UPDATE values counted into got[rank]."""
    deadline = time.monotonic() + TIMEOUT_S
    while not finished():
        moved = False
        for r, ln in enumerate(links):
            if ln.busy:
                moved |= ln.pump_send()
            if got is not None:
                for hdr, payload, _, _ in ln.pump_recv():
                    if int(hdr[0]) != P.UPDATE:
                        raise RuntimeError(f"the PHub core sent {P.KINDS.get(int(hdr[0]))}, expected UPDATE")
                    got[r] += payload.size
                    moved = True
        if not moved:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PHub client: no progress for {TIMEOUT_S:g} s")
            P.poll_links(links, 0.05)


def _wide_client(socks: list[socket.socket], values: int, rounds: int) -> None:
    """Every worker: per round, push the key and receive its sum; the empty end."""
    import numpy as np  # noqa: PLC0415

    from hosts.common.tcp import KIND_DATA, RecvOp, SendOp, exchange  # noqa: PLC0415
    conns = [socketpair_conn(s, "parameter server") for s in socks]
    grads = _grads(len(conns), values)
    out = [np.empty(values, np.float32) for _ in conns]
    for _ in range(rounds):
        exchange([SendOp(c, KIND_DATA, g) for c, g in zip(conns, grads)],
                 [RecvOp(c, KIND_DATA, o) for c, o in zip(conns, out)], TIMEOUT_S)
    empty = np.zeros(0, np.float32)
    exchange([SendOp(c, KIND_DATA, empty) for c in conns], [RecvOp(c, KIND_DATA) for c in conns], TIMEOUT_S)
    for c in conns:
        c.close()


def _with_client(target, args, socks_theirs) -> Any:
    ctx = mp.get_context("fork")
    child = ctx.Process(target=target, args=(socks_theirs, *args), daemon=True)
    child.start()
    for s in socks_theirs:
        s.close()
    return child


def _join(child, what: str) -> None:
    child.join(TIMEOUT_S)
    if child.exitcode != 0:
        raise RuntimeError(f"{what}: the client process exited {child.exitcode}")


def run_phub(values: int, workers: int, chunk_bytes: int, rounds: int) -> float:
    """Server CPU seconds per round of PHub's core loop (module docstring)."""
    from hosts.phub import protocol as P  # noqa: PLC0415
    from hosts.phub.config import JobSpec  # noqa: PLC0415
    from hosts.phub.optimizer import OptimizerSpec  # noqa: PLC0415
    from hosts.phub.server import CoreDevice, JobState, Stages, serve_links  # noqa: PLC0415
    spec = JobSpec(job=1, world=workers, sizes=[values], chunk_bytes=chunk_bytes, optimizer=OptimizerSpec(),
                   workers=[f"w{r}" for r in range(workers)])
    # Pacing off: an unbounded modeled rate at TDF 1 leaves CORE_MESSAGE_S as the modeled work.
    state = JobState(spec, 0, 1, reduce_bytes_per_s=float("inf"), order="rank")
    mine, theirs = _pairs(workers)
    child = _with_client(_phub_client, (values, chunk_bytes, rounds), theirs)
    links = {(1, r): P.Link(socketpair_conn(s, f"worker w{r}")) for r, s in enumerate(mine)}
    st = Stages()
    try:
        c0 = time.process_time()
        serve_links(links, {1: state}, st, None, CoreDevice(1.0, 0), TIMEOUT_S)
        cpu = time.process_time() - c0
    finally:
        for ln in links.values():
            ln.conn.close()
        _join(child, "phub")
    chunks = len(state.local)
    if st.chunks_done != rounds * chunks or st.messages_in != (rounds + 1) * workers + 1:
        raise RuntimeError(f"phub: {st.chunks_done} chunk rounds and {st.messages_in} messages, expected "
                           f"{rounds * chunks} and {(rounds + 1) * workers + 1}")
    return cpu / rounds


def run_wide(values: int, workers: int, rounds: int) -> float:
    """Server CPU seconds per round of the wide PS's reduce_next loop."""
    from hosts.collectives.ps import ParameterServer  # noqa: PLC0415
    mine, theirs = _pairs(workers)
    child = _with_client(_wide_client, (values, rounds), theirs)
    ps = ParameterServer([socketpair_conn(s, f"worker w{r}") for r, s in enumerate(mine)], TIMEOUT_S)
    ops = 0
    try:
        c0 = time.process_time()
        while ps.reduce_next() > 0:
            ops += 1
        cpu = time.process_time() - c0
    finally:
        ps.close()
        _join(child, "wide_ps")
    if ops != rounds:
        raise RuntimeError(f"wide_ps: served {ops} of {rounds} rounds")
    return cpu / rounds


# ---- the grid and the fits -----------------------------------------------------------------

def _cases(key_bytes, workers) -> list[dict[str, Any]]:
    out = []
    for kb in key_bytes:
        for n in workers:
            out.append({"server": "wide_ps", "key_bytes": kb, "workers": n, "chunk_bytes": None})
            for cb in sorted({kb, min(kb, PHUB_CHUNK_BYTES)}):
                out.append({"server": "phub", "key_bytes": kb, "workers": n, "chunk_bytes": cb})
    return out


def _one(case: dict[str, Any], rounds: int) -> float:
    values = case["key_bytes"] // 4
    if case["server"] == "phub":
        return run_phub(values, case["workers"], case["chunk_bytes"], rounds)
    return run_wide(values, case["workers"], rounds)


def _regressors(row: dict[str, Any]) -> list[float]:
    n, v = row["workers"], row["values"]
    if row["server"] == "wide_ps":
        return [n, n * v]
    return [n, n * row["chunks"], n * v, v]


COEFFS = {"wide_ps": (("message_us", 1e6), ("value_ns", 1e9)),
          "phub": (("message_us", 1e6), ("chunk_us", 1e6), ("value_ns", 1e9), ("optimizer_value_ns", 1e9))}


def fit(rows: list[dict[str, Any]], server: str) -> dict[str, Any]:
    """Non-negative least squares on the relative error of the rows' medians."""
    import numpy as np  # noqa: PLC0415
    from scipy.optimize import nnls  # noqa: PLC0415
    mine = [r for r in rows if r["server"] == server]
    y = np.array([r["median_us"] * 1e-6 for r in mine])
    a = np.array([_regressors(r) for r in mine], float)
    coef, _ = nnls(a / y[:, None], np.ones(len(y)))
    pred = a @ coef
    miss = np.abs(pred - y) / y
    worst = int(np.argmax(miss))
    out = {name: float(c * scale) for (name, scale), c in zip(COEFFS[server], coef)}
    return {**out, "max_rel_residual": float(miss[worst]),
            "worst_point": {k: mine[worst][k] for k in ("key_bytes", "workers", "chunk_bytes")},
            "points": len(mine)}


def relative(rows: list[dict[str, Any]], fits: dict[str, Any]) -> dict[str, Any]:
    """wide_ps / phub per grid point and per coefficient."""
    med = {(r["server"], r["key_bytes"], r["workers"], r["chunk_bytes"]): r["median_us"] for r in rows}
    points = []
    for (srv, kb, n, _), wide in sorted(med.items()):
        if srv != "wide_ps":
            continue
        chunked = med.get(("phub", kb, n, min(kb, PHUB_CHUNK_BYTES)))
        whole = med.get(("phub", kb, n, kb))
        points.append({"key_bytes": kb, "workers": n, "wide_over_phub_32k_chunks": wide / chunked,
                       "wide_over_phub_one_chunk": wide / whole})
    p, w = fits["phub"], fits["wide_ps"]
    ratios = [x["wide_over_phub_32k_chunks"] for x in points]
    return {"points": points,
            "per_message": w["message_us"] / (p["message_us"] + p["chunk_us"]),
            "per_value": w["value_ns"] / p["value_ns"] if p["value_ns"] else None,
            "per_round_32k_range": [min(ratios), max(ratios)],
            "note": "wide_ps / phub; per_message against a one-chunk PHub PUSH; per round PHub also runs the "
                    "optimizer, which the wide PS leaves to the workers"}


def measure(key_bytes=KEY_BYTES, workers=WORKERS, repeats: int = REPEATS, target_s: float = TARGET_S,
            log=print) -> dict[str, Any]:
    rows = []
    for case in _cases(key_bytes, workers):
        probe = _one(case, 3)
        rounds = max(MIN_ROUNDS, min(5000, int(target_s / max(probe, 1e-6))))
        per = [_one(case, rounds) for _ in range(repeats)]
        values = case["key_bytes"] // 4
        cb = case["chunk_bytes"]
        row = {**case, "values": values, "chunks": -(-case["key_bytes"] // cb) if cb else 1, "rounds": rounds,
               "per_round_us": [x * 1e6 for x in per], "median_us": statistics.median(per) * 1e6}
        rows.append(row)
        log(f"{case['server']:8s} key {case['key_bytes']:8d} B  workers {case['workers']}  chunk "
            f"{str(cb):8s}: {row['median_us']:10.1f} us/round (min {min(per) * 1e6:.1f}, max "
            f"{max(per) * 1e6:.1f}; {rounds} rounds x {repeats})")
    fits = {s: fit(rows, s) for s in SERVERS}
    return {"rows": rows, "fits": fits, "relative": relative(rows, fits)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.reproduce.measurements.phub_server",
                                description="measure PHub's and the wide PS's server CPU cost (module doc)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--smoke", action="store_true", help="a small grid in seconds (tests), not a measurement")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415  (the versions recorded; the servers use numpy)
    torch.set_num_threads(1)
    t0 = time.time()
    grid = dict(SMOKE) if a.smoke else {"key_bytes": KEY_BYTES, "workers": WORKERS, "repeats": a.repeats,
                                        "target_s": TARGET_S}
    got = measure(**grid)
    out = {"schema": SCHEMA, "smoke": a.smoke, "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "command": "python -m testbed.reproduce.measurements.phub_server " + " ".join(
               argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, {len(os.sched_getaffinity(0))} "
                      f"cores, Python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}",
           "method": "each server's own loop in this process (phub: hosts.phub.server.serve_links, one core, "
                     "pacing off; wide_ps: ParameterServer.reduce_next) over AF_UNIX socket pairs, one client "
                     "process playing every worker; server process CPU time per round; median of repeats; "
                     "non-negative least squares on the relative error",
           "grid": {k: list(v) if isinstance(v, tuple) else v for k, v in grid.items()},
           "wall_s": time.time() - t0, **got}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"fits": out["fits"], "relative": {k: v for k, v in out["relative"].items()
                                                        if k != "points"}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
