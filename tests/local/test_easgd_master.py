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
            "dataset": {"source": "digits"}, "exchange_order": "step_then_exchange", "pack": True}


UPDATE_HW_S = 2e-5


def start_master(tmp: Path, variant: str, widths: dict, servers: int = 1,
                 calibration: dict | None = None) -> tuple[subprocess.Popen, int, dict]:
    port = PointContext(None, {}, tmp, "local", 0.0).tcp_port_base(48000, span=16)
    s = settings(variant, widths)
    cfg = {"master": {"host": "master", "ip": MASTER_IP, "port": port,
                      "workers": [{"name": f"w{i + 1}", "ip": ip} for i, ip in enumerate(IPS)],
                      "servers": servers, "connect_timeout_s": 30.0, "timeout_s": 60.0, "start_at": None,
                      "out": str(tmp / "master.jsonl"), "snapshots": str(tmp / "centre.npz"),
                      "trace": str(tmp), "timing": {"time_scale": 1.0, "update_hw_s": UPDATE_HW_S,
                                                    "calibration": calibration}},
           "easgd": s}
    path = tmp / "master.config.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "hosts.easgd.master", "--config", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, port, s


class Client:
    """A worker as far as the master can tell: hello, then messages of the centre's size."""

    def __init__(self, rank: int, port: int, s: dict, calibrated: bool = False):
        ident = dict(s, workers=len(IPS), calibrated=calibrated)
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
    # (On a loaded machine client 0's thread can be descheduled past rank 1's pause, so
    # one of its messages may find the master already waiting for it: allow one.)
    fast_wait = [b - a for a, b in clients[0].replies[1:]]
    assert sum(w > 0.1 for w in fast_wait) >= len(fast_wait) - 1, fast_wait


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


def test_master_calibration_protocol_and_server_trace(tmp_path):
    """The master's side of time_scale auto (hosts/easgd/timing.py calibrate_master):
    one worker at a time ("go", probe, paced update on a scratch centre, reply), the
    exact sum of the workers' agreement vectors back to each, then the TDF they chose.
    The probes leave the centre alone (the first real reply is the rule on C0), and the
    master's trace is a server's: recv / update / send per message, p2p groups per worker."""
    from hosts.common import calibration as cal
    from hosts.common.trace import read_trace
    from hosts.easgd.timing import PUSH_TAG, REPLY_TAG
    from hosts.common.tcp import KIND_BARRIER, RecvOp, exchange

    proc, port, s = start_master(tmp_path, "async_easgd", SMALL, calibration={"rounds": 2, "iterations": 2})
    c0 = initial_weights(3, SMALL)
    # the workers' vectors as encode_messages lays them out for 2 workers + the master
    # (3 parties, 2 round trips each): durations, then the compute ratios' slots
    vecs = [cal.encode_messages([1.5, 2.0], 10.0, 0, 3), cal.encode_messages([4.25, 1.0], 20.0, 1, 3)]
    try:
        c = [Client(r, port, s, calibrated=True) for r in range(2)]
        for x in c:
            x.hello_done()
        sums = []
        for rnd in range(2):
            for _ in range(2):
                for x in c:                                  # the master takes rank order
                    exchange([], [RecvOp(x.conn, KIND_BARRIER)], 30)
                    send_array(x.conn, (c0 + 7.0).numpy())
                    recv_array(x.conn, np.empty(c0.numel(), np.float32))
            for x, v in zip(c, vecs):
                send_array(x.conn, v)
            sums.append([recv_array(x.conn) for x in c])
            for x in c:
                send_array(x.conn, np.asarray([300.0 + rnd], np.float64))
        replies = []
        for x in c:
            send_array(x.conn, (c0 + 1.0).numpy())
            replies.append(recv_array(x.conn, np.empty(c0.numel(), np.float32)))
            send_array(x.conn, np.zeros(0, np.float32))
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    off = 2 * 3                                               # after the round trips
    for per_worker in sums:
        for got in per_worker:
            # the workers' slots summed exactly; the master's compute ratio (party 2) added:
            # its worst update's real / modeled time, flagged
            mine = np.zeros_like(got)
            mine[[off + 2, off + 3 + 2]] = got[[off + 2, off + 3 + 2]]
            assert np.array_equal(got - mine, vecs[0] + vecs[1])
            assert got[off + 3 + 2] == 1.0 and got[off + 2] > np.log2(2.0)   # ratio x headroom > 1
    # rank 0's first real message meets the untouched C0: e = alpha (W - C0) exactly
    assert np.array_equal(replies[0], (0.45 * ((c0 + 1.0) - c0)).numpy())
    summary = next(json.loads(x) for x in (tmp_path / "master.jsonl").read_text().splitlines()
                   if json.loads(x)["type"] == "summary")
    assert summary["tdf"] == 301.0 and summary["exchanges"] == {"0": 1, "1": 1}
    header, nodes = read_trace(tmp_path / "master.trace.jsonl")
    assert header["role"] == "server" and header["serve_order"] == "fcfs"
    assert header["rank"] == 2 and header["world"] == 3 and header["tdf"] == 301.0
    assert [n.get("op", n["kind"]) for n in nodes] == ["recv", "compute", "send"] * 2
    assert {n["group"] for n in nodes if n.get("op") == "recv"} == {f"p2p:{PUSH_TAG}:w1>master",
                                                                   f"p2p:{PUSH_TAG}:w2>master"}
    assert {n["group"] for n in nodes if n.get("op") == "send"} == {f"p2p:{REPLY_TAG}:master>w1",
                                                                   f"p2p:{REPLY_TAG}:master>w2"}
    comp = [n for n in nodes if n["kind"] == "compute"]
    assert all(n["hw_s"] == UPDATE_HW_S for n in comp)
    assert all(n["deps"][-1] == n["id"] - 1 for n in comp)      # the update waited for its message
    # paced: the updates lasted TDF x their modeled time (in sum: an oversleep is carried
    # as credit into the next update, hosts/common/device.py, so one alone may be shorter)
    assert sum(n["t1"] - n["t0"] for n in comp) >= 0.95 * 301.0 * UPDATE_HW_S * len(comp)


def test_master_refuses_when_its_workers_refused_the_calibrated_tdf(tmp_path):
    """Workers that refuse a round's TDF (hosts/easgd/timing.py calibrate_master: one
    iteration would outrun the point's deadline) tell the master REFUSED_TDF, as they
    would tell it the TDF: the master, waiting for every worker's, refuses too
    (EXIT_REFUSED, its summary names it) instead of serving nobody until its timeout."""
    from hosts.common import calibration as cal
    from hosts.common.program import EXIT_REFUSED
    from hosts.common.tcp import KIND_BARRIER, RecvOp, exchange
    from hosts.easgd.timing import REFUSED_TDF

    proc, port, s = start_master(tmp_path, "async_easgd", SMALL, calibration={"rounds": 2, "iterations": 1})
    c0 = initial_weights(3, SMALL)
    try:
        c = [Client(r, port, s, calibrated=True) for r in range(2)]
        for x in c:
            x.hello_done()
        for x in c:                                           # round 0: one probe each, in rank order
            exchange([], [RecvOp(x.conn, KIND_BARRIER)], 30)
            send_array(x.conn, c0.numpy())
            recv_array(x.conn, np.empty(c0.numel(), np.float32))
        for r, x in enumerate(c):                             # 2 workers + the master, one trip each
            send_array(x.conn, cal.encode_messages([1.0], 10.0, r, 3))
        for x in c:
            recv_array(x.conn)
            send_array(x.conn, np.asarray([REFUSED_TDF], np.float64))
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_REFUSED, out[-3000:]
    summary = next(json.loads(x) for x in (tmp_path / "master.jsonl").read_text().splitlines()
                   if json.loads(x)["type"] == "summary")
    assert not summary["ok"] and summary["error"].startswith("CalibrationRefused: calibration round 0: "
                                                             "the workers refused the TDF"), summary
