"""Host allreduce baselines as real processes on loopback hosts 127.0.1.x.

Each test starts `python -m hosts.allreduce` per host (the same command the
runner uses), waits with a deadline, and kills only the processes it started.
"""
from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from hosts.common.config import ps_port, ring_port

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
PS_IP = "127.0.1.200"


def worker_ip(rank: int) -> str:
    return f"127.0.1.{rank + 1}"


def free_base_port(world: int, with_ps: bool) -> int:
    """A base port whose ring ports (and PS port) are all bindable right now."""
    for _ in range(200):
        base = random.randrange(20000, 60000)
        wanted = [(worker_ip(r), ring_port(base, r)) for r in range(world)]
        if with_ps:
            wanted.append((PS_IP, ps_port(base)))
        socks = []
        try:
            for addr in wanted:
                s = socket.socket()
                socks.append(s)
                s.bind(addr)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range found")


def make_configs(tmp_path: Path, world: int, algorithm: str = "ring", **over) -> dict[str, dict]:
    """Per-host configs; `over` applies to all hosts, `per_host={name: {...}}` to one."""
    per_host = over.pop("per_host", {})
    tmp_path.mkdir(parents=True, exist_ok=True)
    peers = [{"name": f"w{r + 1}", "ip": worker_ip(r)} for r in range(world)]
    ps = {"name": "ps", "ip": PS_IP} if algorithm == "ps" else None
    common = {
        "world": world, "algorithm": algorithm, "peers": peers, "ps": ps,
        "port": free_base_port(world, ps is not None), "sizes": [1, 256], "iterations": 3,
        "warmup": 1, "compute_ms": 0, "seed": 123, "straggler": None, "start_at": None,
        "connect_timeout_s": 10, "timeout_s": 10,
    }
    common.update(over)
    cfgs = {}
    if ps is not None:
        cfgs["ps"] = dict(common, host="ps", role="ps", rank=-1, out=str(tmp_path / "ps.jsonl"))
    for r, p in enumerate(peers):
        cfgs[p["name"]] = dict(common, host=p["name"], role="worker", rank=r,
                               out=str(tmp_path / f"{p['name']}.jsonl"))
    for host, extra in per_host.items():
        cfgs[host].update(extra)
    return cfgs


def run_hosts(tmp_path: Path, cfgs: dict[str, dict], hosts: list[str] | None = None,
              deadline_s: float = 30.0) -> dict[str, tuple[int, str, list[dict]]]:
    """Start the given hosts (default: all), wait for them -> {host: (rc, stderr, records)}."""
    procs = {}
    for host in hosts or list(cfgs):
        path = tmp_path / f"{host}.config.json"
        path.write_text(json.dumps(cfgs[host]))
        err = open(tmp_path / f"{host}.log", "w+")
        procs[host] = (subprocess.Popen([sys.executable, "-m", "hosts.allreduce", "--config", str(path)],
                                        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err), err)
    end = time.monotonic() + deadline_s
    out = {}
    try:
        for host, (p, err) in procs.items():
            try:
                rc = p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{host} still running after {deadline_s} s (a host program hung)")
            err.seek(0)
            out_path = Path(cfgs[host]["out"])
            records = [json.loads(line) for line in out_path.read_text().splitlines()] if out_path.exists() else []
            out[host] = (rc, err.read(), records)
    finally:
        for p, err in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
    return out


def assert_all_ok(results: dict) -> None:
    for host, (rc, err, records) in results.items():
        assert rc == 0, f"{host} exited {rc}:\n{err}"
        assert records and records[-1]["type"] == "summary" and records[-1]["ok"], f"{host}: {records[-1:]}"
        assert all(r["ok"] for r in records if r["type"] == "allreduce"), host


def allreduce_records(results: dict) -> dict[str, list[dict]]:
    return {h: [r for r in recs if r["type"] == "allreduce"]
            for h, (_, _, recs) in results.items() if h != "ps"}


def assert_identical_results(results: dict, cfg: dict) -> None:
    by_host = allreduce_records(results)
    n = len(cfg["sizes"]) * (cfg["warmup"] + cfg["iterations"])
    digests = defaultdict(set)
    for host, recs in by_host.items():
        assert len(recs) == n, host
        for r in recs:
            digests[(r["size"], r["iter"])].add(r["digest"])
    assert all(len(d) == 1 for d in digests.values()), "ranks disagree on some results"


# world 2 uses a 4 MiB tensor: 2 MiB chunks overflow socket buffers, so a ring that
# did not send and receive concurrently would deadlock here.
@pytest.mark.parametrize("world, sizes", [(1, [1, 300]), (2, [1, 7, 1 << 20]), (4, [1, 3, 4097])])
def test_ring(tmp_path, world, sizes):
    cfgs = make_configs(tmp_path, world, "ring", sizes=sizes)
    results = run_hosts(tmp_path, cfgs)
    assert_all_ok(results)
    assert_identical_results(results, cfgs["w1"])
    summary = results["w1"][2][-1]
    assert set(summary["per_size"]) == {str(s) for s in sizes}
    stats = summary["per_size"][str(sizes[-1])]
    assert stats["n"] == 3 and stats["p50_s"] > 0 and stats["goodput_gbps"] > 0
    warm = [r["warmup"] for r in allreduce_records(results)["w1"] if r["size"] == sizes[0]]
    assert warm == [True, False, False, False]


def test_parameter_server(tmp_path):
    cfgs = make_configs(tmp_path, 3, "ps", sizes=[1, 256, 50000])
    results = run_hosts(tmp_path, cfgs)
    assert_all_ok(results)
    assert_identical_results(results, cfgs["w1"])
    ps = results["ps"][2][-1]
    assert ps["role"] == "ps" and ps["iterations_served"] == 3 * 4
    assert ps["bytes_received"] == 3 * 4 * 4 * (1 + 256 + 50000)


def test_straggler_delay_shows_in_the_others_latency(tmp_path):
    # Why this is not a timing race: every iteration starts with a barrier, and a
    # worker's allreduce cannot finish before the straggler's data arrives, which
    # the straggler sends only after sleeping DELAY past that barrier. So each
    # non-straggler latency is >= DELAY minus the skew in leaving the barrier
    # (sub-ms, unless a process is descheduled for DELAY/2 in most iterations).
    # The baseline p50 would have to exceed DELAY/2 = 50 ms to break the
    # assertion; loopback allreduces of 256 floats take ~1 ms. Medians over 5
    # iterations absorb a single hiccup on a noisy 2-core machine.
    delay_ms = 100
    base = run_hosts(tmp_path / "base", make_configs(tmp_path / "base", 3, "ring", sizes=[256], iterations=5))
    slow_cfgs = make_configs(tmp_path / "slow", 3, "ring", sizes=[256], iterations=5,
                             per_host={"w2": {"straggler": {"start_s": 0, "slowdown": 1.0,
                                                            "delay_ms": delay_ms}}})
    slow = run_hosts(tmp_path / "slow", slow_cfgs)
    assert_all_ok(base)
    assert_all_ok(slow)
    assert all(r["compute_ms"] == delay_ms for r in allreduce_records(slow)["w2"])
    for host in ("w1", "w3"):
        p50_base = base[host][2][-1]["per_size"]["256"]["p50_s"]
        p50_slow = slow[host][2][-1]["per_size"]["256"]["p50_s"]
        assert p50_slow - p50_base >= delay_ms / 2 / 1e3, (host, p50_base, p50_slow)


def test_peer_that_never_starts_fails_clearly(tmp_path):
    cfgs = make_configs(tmp_path, 2, "ring", connect_timeout_s=2, timeout_s=5)
    t = time.monotonic()
    results = run_hosts(tmp_path, cfgs, hosts=["w1"], deadline_s=15)
    rc, err, records = results["w1"]
    assert rc == 3, err
    assert time.monotonic() - t < 10
    assert "w2 (rank 1)" in err and "did it start?" in err
    assert records[-1]["type"] == "summary" and records[-1]["ok"] is False and "w2" in records[-1]["error"]


def test_missing_parameter_server_fails_clearly(tmp_path):
    cfgs = make_configs(tmp_path, 1, "ps", connect_timeout_s=2, timeout_s=5)
    rc, err, _ = run_hosts(tmp_path, cfgs, hosts=["w1"], deadline_s=15)["w1"]
    assert rc == 3 and "could not connect to parameter server ps" in err, err


def test_hung_peer_times_out(tmp_path):
    # w2 "computes" for 2.5 s; the others give up after timeout_s = 1 s of silence.
    cfgs = make_configs(tmp_path, 2, "ring", timeout_s=1, iterations=1, warmup=0, sizes=[16],
                        per_host={"w2": {"straggler": {"start_s": 0, "slowdown": 1.0, "delay_ms": 2500}}})
    results = run_hosts(tmp_path, cfgs, deadline_s=20)
    rc, err, _ = results["w1"]
    assert rc == 3 and "no progress for 1 s" in err and "w2" in err, err
    assert results["w2"][0] == 3   # finds w1 gone once it wakes up


def test_config_mismatch_between_hosts(tmp_path):
    cfgs = make_configs(tmp_path, 2, "ring", per_host={"w2": {"seed": 124}})
    results = run_hosts(tmp_path, cfgs)
    for host in ("w1", "w2"):
        assert results[host][0] == 3
    assert any("config mismatch" in err and "seed" in err for _, err, _ in results.values())


def test_bad_config_exits_2(tmp_path):
    cfgs = make_configs(tmp_path, 1, "ring", per_host={"w1": {"sizes": [], "bogus": 1}})
    rc, err, _ = run_hosts(tmp_path, cfgs)["w1"]
    assert rc == 2 and "sizes" in err and "bogus: unknown key" in err, err
