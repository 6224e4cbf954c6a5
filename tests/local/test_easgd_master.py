"""The EASGD master's serving disciplines, measured on loopback against the real
master program (`python -m hosts.easgd.master`) with test clients that speak its
protocol: the round robin makes a fast worker wait for a slow one, first come
first served does not, and Hogwild's server processes really are inside the
shared centre at the same time. The master counts every exchange."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from hosts.collectives import make_hello
from hosts.common.tcp import connect_with_retry, recv_array, recv_json, send_array, send_json
from hosts.easgd.config import server_port
from hosts.easgd.model import initial_weights
from testbed.workloads.base import PointContext
from testbed.workloads.easgd import hogwild_overlap

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
IPS = ["127.0.1.1", "127.0.1.2"]
MASTER_IP = "127.0.1.200"


def settings(variant: str, widths: dict) -> dict:
    return {"variant": variant, "steps": 1, "tau": 1, "lr": 0.1, "alpha": 0.45, "momentum": 0.9,
            "batch_size": 8, "seed": 3, "model": widths, "snapshot_every_s": 0.05,
            "dataset": {"source": "digits"}}


def start_master(tmp: Path, variant: str, widths: dict, servers: int = 1) -> tuple[subprocess.Popen, int, dict]:
    port = PointContext(None, {}, tmp, "local", 0.0).tcp_port_base(48000, span=16)
    s = settings(variant, widths)
    cfg = {"master": {"host": "master", "ip": MASTER_IP, "port": port,
                      "workers": [{"name": f"w{i + 1}", "ip": ip} for i, ip in enumerate(IPS)],
                      "servers": servers, "connect_timeout_s": 30.0, "timeout_s": 60.0, "start_at": None,
                      "out": str(tmp / "master.jsonl"), "snapshots": str(tmp / "centre.npz")},
           "easgd": s}
    path = tmp / "master.config.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "hosts.easgd.master", "--config", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, port, s


class Client:
    """A worker as far as the master can tell: hello, then messages of the centre's size."""

    def __init__(self, rank: int, port: int, s: dict):
        ident = dict(s, workers=len(IPS))
        self.conn = connect_with_retry(MASTER_IP, port, peer="master", connect_timeout_s=30,
                                       io_timeout_s=60, src_ip=IPS[rank])
        send_json(self.conn, make_hello(f"w{rank + 1}", rank, ident))
        self.rank = rank
        self.replies: list[tuple[float, float]] = []    # (sent, reply received)

    def hello_done(self) -> None:
        recv_json(self.conn, timeout_s=30)

    def run(self, w: np.ndarray, n: int, pause_s: float) -> None:
        for _ in range(n):
            time.sleep(pause_s)
            t0 = time.perf_counter()
            send_array(self.conn, w)
            recv_array(self.conn, np.empty_like(w))
            self.replies.append((t0, time.perf_counter()))
        send_array(self.conn, np.zeros(0, np.float32))
        self.conn.close()


def serve_two(tmp: Path, variant: str, widths: dict, pauses: tuple[float, float], n: int,
              servers: int = 1) -> tuple[list[dict], dict, list[Client]]:
    proc, port, s = start_master(tmp, variant, widths, servers)
    try:
        hog = variant.startswith("hogwild")
        clients = [Client(r, server_port(port, r % servers) if hog else port, s) for r in range(2)]
        for c in clients:
            c.hello_done()
        w = (initial_weights(3, widths) + 1.0).numpy()
        ts = [threading.Thread(target=c.run, args=(w, n, p)) for c, p in zip(clients, pauses)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    recs = [json.loads(x) for x in (tmp / "master.jsonl").read_text().splitlines()]
    summary = next(r for r in recs if r["type"] == "summary")
    return [r for r in recs if r["type"] == "exchange"], summary, clients


SMALL = {"c1": 4, "c2": 8, "hidden": 16}


def test_round_robin_makes_the_fast_worker_wait(tmp_path):
    # rank 0 sends at once every time; rank 1 sleeps 0.15 s before each message
    ex, summary, clients = serve_two(tmp_path, "easgd", SMALL, (0.0, 0.15), 6)
    order = [r["rank"] for r in sorted(ex, key=lambda r: r["t_in"])]
    assert order == [0, 1] * 6
    assert summary["exchanges"] == {"0": 6, "1": 6}
    # Rank 0's k-th reply (k >= 1) came only after rank 1's (k-1)-th message was served:
    # it waited about rank 1's pause every round, though it asked at once.
    fast_wait = [b - a for a, b in clients[0].replies[1:]]
    assert min(fast_wait) > 0.1, fast_wait


def test_first_come_first_served_does_not_wait(tmp_path):
    ex, summary, clients = serve_two(tmp_path, "async_easgd", SMALL, (0.0, 0.15), 6)
    order = [r["rank"] for r in sorted(ex, key=lambda r: r["t_in"])]
    assert order[:6] == [0] * 6 or order.index(1) >= 3, order   # the fast one runs ahead
    assert summary["exchanges"] == {"0": 6, "1": 6}
    assert max(b - a for a, b in clients[0].replies) < 0.1


def test_elastic_reply_is_the_rule_on_the_master_centre(tmp_path):
    # one exchange of W = C0 + 1 from rank 0 (rank 1 ends at once): e = alpha (W - C0) = 0.45
    proc, port, s = start_master(tmp_path, "async_easgd", SMALL)
    try:
        c = [Client(r, port, s) for r in range(2)]
        for x in c:
            x.hello_done()
        c0 = initial_weights(3, SMALL)
        send_array(c[0].conn, (c0 + 1.0).numpy())
        e = recv_array(c[0].conn, np.empty(c0.numel(), np.float32))
        for x in c:
            send_array(x.conn, np.zeros(0, np.float32))
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    expect = (0.45 * ((c0 + 1.0) - c0)).numpy()
    assert np.array_equal(e, expect)
    saved = np.load(tmp_path / "centre.npz")["centre"][-1]
    assert np.array_equal(saved, (c0 + torch.from_numpy(expect)).numpy())


def test_hogwild_servers_overlap_in_the_shared_centre(tmp_path):
    # a wide model (~1M values: the centre update takes ~1 ms) so two server processes
    # are inside it at once often enough to be seen; the overlap is measured from
    # each server's [read, write] interval, not assumed.
    wide = {"c1": 4, "c2": 8, "hidden": 8192}
    ex, summary, _ = serve_two(tmp_path, "hogwild_easgd", wide, (0.0, 0.0), 40, servers=2)
    assert summary["servers"] == 2 and summary["exchanges"] == {"0": 40, "1": 40}
    assert {r["server"] for r in ex} == {0, 1}
    ov = hogwild_overlap(ex)
    assert ov is not None and ov["overlapping_pairs"] > 0, ov
