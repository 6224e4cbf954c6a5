"""In-switch allreduce as real processes on loopback: the soft switch with UDP
ports (testbed.switch.soft.udp_io, running InaPipeline) and N=4 workers
running `python -m hosts.allreduce` with algorithm "switch".

Results must be bit-exact against a numpy fixed-point reference, also with the
switch's drop simulator losing 5% of the contributions on every port. Each
test kills only the processes it started.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hosts.common.tensors import make_tensor
from hosts.ina import fixed_point as fp
from hosts.ina.transport import InaClient, InaTimeoutError, UdpIo
from testbed.switch.soft.process import SoftSwitchProcess
from testbed.switch.soft.udp_io import free_loopback_ports, loopback_ip, loopback_switch_config, port_endpoint

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
N = 4
SIZES = [1, 300, 4096]
ITERS, WARMUP, SEED = 3, 1, 11


worker_ip = loopback_ip


def free_ports() -> tuple[int, int]:
    return free_loopback_ports(N)


def start_switch(tmp: Path, base: int, wport: int, loss: float,
                 impl: str = "compiled") -> SoftSwitchProcess:
    cfg = loopback_switch_config(N, base, wport, slot_count=32, pipeline_impl=impl,
                                 drop_probabilities={str(r + 1): loss for r in range(N)})
    return SoftSwitchProcess(cfg, tmp).start()


def stop(p: SoftSwitchProcess) -> None:
    p.stop()


def run_workers(tmp: Path, base: int, wport: int) -> dict[int, list[dict]]:
    peers = [{"name": f"w{r + 1}", "ip": worker_ip(r)} for r in range(N)]
    procs = []
    try:
        for r in range(N):
            host, ep = f"w{r + 1}", port_endpoint(f"127.0.0.1:{base}", r + 1)
            cfg = {"host": host, "role": "worker", "rank": r, "world": N, "algorithm": "switch",
                   "peers": peers, "ps": None, "port": 47000, "sizes": SIZES, "iterations": ITERS,
                   "warmup": WARMUP, "compute_ms": 0, "seed": SEED, "straggler": None,
                   "start_at": None, "connect_timeout_s": 15, "timeout_s": 20,
                   "out": str(tmp / f"{host}.jsonl"),
                   "ina": {"switch_ip": ep[0], "switch_port": ep[1], "worker_port": wport,
                           "job_id": 1, "window": 32, "retx_timeout_s": 0.05}}
            (tmp / f"{host}.json").write_text(json.dumps(cfg))
            err = open(tmp / f"{host}.log", "w")
            procs.append(subprocess.Popen([sys.executable, "-m", "hosts.allreduce", "--config",
                                           str(tmp / f"{host}.json")], cwd=ROOT,
                                          stdout=subprocess.DEVNULL, stderr=err))
            err.close()
        end = time.monotonic() + 60
        for r, p in enumerate(procs):
            try:
                rc = p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"w{r + 1} hung:\n{(tmp / f'w{r + 1}.log').read_text()[-3000:]}")
            assert rc == 0, f"w{r + 1} exited {rc}:\n{(tmp / f'w{r + 1}.log').read_text()[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {r: [json.loads(x) for x in (tmp / f"w{r + 1}.jsonl").read_text().splitlines()]
            for r in range(N)}


def reference_digest(size: int, it: int) -> str:
    """What the switch must compute: the fixed-point sum with the agreed scale."""
    y = fp.quantized_sum([make_tensor(SEED, r, size, it) for r in range(N)])
    return hashlib.blake2b(y.tobytes(), digest_size=8).hexdigest()


def check_bit_exact(records: dict[int, list[dict]]) -> list[dict]:
    summaries = []
    for r, recs in records.items():
        ar = [x for x in recs if x["type"] == "allreduce"]
        assert len(ar) == len(SIZES) * (ITERS + WARMUP)
        for x in ar:
            assert x["ok"], x
            assert x["digest"] == reference_digest(x["size"], x["iter"]), (r, x["size"], x["iter"])
        s = recs[-1]
        assert s["type"] == "summary" and s["ok"] and s["algorithm"] == "switch"
        summaries.append(s)
    return summaries


@pytest.mark.parametrize("impl", ["compiled", "reference"])     # testbed/switch/ina/fastpath.py
@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_switch_allreduce_bit_exact(tmp_path, loss, impl):
    base, wport = free_ports()
    sw = start_switch(tmp_path, base, wport, loss, impl)
    try:
        records = run_workers(tmp_path, base, wport)
    finally:
        stop(sw)
    summaries = check_bit_exact(records)
    retx = sum(s["transport"]["retransmissions"] for s in summaries)
    stats = json.loads((tmp_path / "s1.stats.json").read_text())
    assert stats["pipeline_impl"] == impl
    dropped = stats["pipeline"]["counters"]["DropSimulator.dropped"]["total"]
    if loss:
        assert dropped > 0 and retx > 0, (dropped, retx)
        assert stats["pipeline"]["counters"]["Ingress.ina_retransmits"]["total"] >= 0
    else:
        assert dropped == 0
    assert all(s["transport"]["timeouts"] == 0 for s in summaries)


def test_udp_client_times_out_clearly_without_a_switch():
    base, wport = free_ports()
    io = UdpIo((worker_ip(0), wport), ("127.0.0.1", base + 1))    # nothing listens there
    c = InaClient(io, 5, 0, 2, timeout_s=0.01, max_retries=2)
    try:
        with pytest.raises(InaTimeoutError, match=r"job 5 .*seq 0 .*no result ever arrived"):
            c.allreduce(np.ones(3, np.float32))
    finally:
        c.close()
    assert c.stats.retransmissions == 2


@pytest.mark.parametrize("mmsg", [True, False])
def test_bulk_allreduce_over_udp_sockets_with_loss(tmp_path, mmsg):
    """Long vectors through real UDP sockets (recvmmsg/sendmmsg bursts, or plain
    recv/sendto) and the soft switch dropping 5%: bit-exact on every worker."""
    base, wport = free_ports()
    sw = start_switch(tmp_path, base, wport, 0.05)
    rng = np.random.default_rng(5)
    xs = [[rng.standard_normal(20_000).astype(np.float32) * 10.0 ** r for r in range(N)]
          for _ in range(2)]
    clients = [InaClient(UdpIo((worker_ip(r), wport), ("127.0.0.1", base + r + 1), mmsg=mmsg),
                         1, r, N, window=32, timeout_s=0.05, max_retries=50) for r in range(N)]
    try:
        assert all((getattr(c.io, "recv_block", None) is not None) == mmsg for c in clients) \
            or not mmsg
        out = _allreduce_on_threads(clients, xs)
    finally:
        _close(clients, sw)
    _assert_bit_exact(out, xs)
    assert sum(c.stats.retransmissions for c in clients) > 0


def _allreduce_on_threads(clients: list, xs: list[list[np.ndarray]]) -> dict:
    """Each client allreduces its share x[rank] of every x in xs on a thread of
    its own; rank -> its results, or the exception it raised."""
    import threading
    out: dict = {}

    def work(r):
        try:
            out[r] = [clients[r].wait(clients[r].submit(x[r]), timeout=30) for x in xs]
        except BaseException as e:  # noqa: BLE001 - reported by _assert_bit_exact
            out[r] = e
    ts = [threading.Thread(target=work, args=(r,)) for r in range(len(clients))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def _close(clients: list, sw: SoftSwitchProcess) -> None:
    for c in clients:
        c.close()
    stop(sw)


def _assert_bit_exact(out: dict, xs: list[list[np.ndarray]]) -> None:
    for r in range(N):
        assert r in out and not isinstance(out[r], BaseException), out.get(r)
        for x, y in zip(xs, out[r]):
            assert y.tobytes() == fp.quantized_sum(x).tobytes()


def test_the_switch_process_runs_one_thread_whatever_blas_would_start(tmp_path, monkeypatch):
    """testbed.process_env: numpy's OpenBLAS helper threads would busy-wait on the shared cores."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    p = start_switch(tmp_path, *free_ports(), 0.0)
    try:
        assert len(list(Path(f"/proc/{p.pid}/task").iterdir())) == 1
    finally:
        stop(p)


def _allreduce_through_switch(work: Path, snaplen: int | None, xs: list[list[np.ndarray]]) -> list:
    """One soft switch (UDP ports) capturing into work/pcaps at `snaplen` (the
    config key switch.capture_bytes sets); N clients allreduce xs through it.
    Returns the clients (their stats)."""
    base, wport = free_ports()
    cfg = loopback_switch_config(N, base, wport, slot_count=32, pcap_dir=str(work / "pcaps"),
                                 pcap_snaplen=snaplen)
    sw = SoftSwitchProcess(cfg, work).start()
    clients = [InaClient(UdpIo((worker_ip(r), wport), ("127.0.0.1", base + r + 1)),
                         1, r, N, window=32, timeout_s=1.0, max_retries=20) for r in range(N)]
    try:
        out = _allreduce_on_threads(clients, xs)
    finally:
        _close(clients, sw)
    _assert_bit_exact(out, xs)
    return clients


def test_switch_pcaps_cut_to_capture_bytes_decode_as_whole_ones(tmp_path):
    """switch.capture_bytes end to end on the soft switch (pcap_snaplen): a run
    capturing only the headers writes records of at most that many bytes with each
    frame's length on the wire, and `testbed pcap` finds the same chunks and
    workers in them as in a whole-frame run, and says the frames were cut."""
    from click.testing import CliRunner
    from scapy.utils import RawPcapReader

    from testbed import wire
    from testbed.cli import main
    from testbed.pcap_ina import analyze
    from testbed.scenario.models import MIN_CAPTURE_BYTES

    snap = MIN_CAPTURE_BYTES                       # the headers alone: every value is cut off
    rng = np.random.default_rng(8)
    xs = [[rng.standard_normal(3000).astype(np.float32) for _ in range(N)] for _ in range(2)]
    # Per tensor: its data chunks and the MAX round that agrees on the scale first.
    chunks = 2 * (-(-3000 // wire.MAX_VALUES_PER_PACKET) + 1)
    runs = {}
    for name, snaplen in (("whole", None), ("cut", snap)):
        (tmp_path / name).mkdir()
        clients = _allreduce_through_switch(tmp_path / name, snaplen, xs)
        pcaps = sorted((tmp_path / name / "pcaps").glob("*.pcap"))
        assert len(pcaps) == 2 * N
        runs[name] = (pcaps, analyze(pcaps).to_dict(), sum(c.stats.retransmissions for c in clients))

    records = cut_records = 0
    for p in runs["cut"][0]:
        with RawPcapReader(str(p)) as r:
            assert r.snaplen == snap, p
            for data, meta in r:
                records += 1
                cut_records += meta.wirelen > snap
                count = wire.unpack_header(data).count
                assert meta.wirelen == wire.VALUES_OFFSET + 4 * count, (p, meta)   # the length on the wire
                assert len(data) == meta.caplen == min(snap, meta.wirelen), (p, meta)
    assert records >= 2 * N * chunks                # each contribution in, each result out

    for name, (_, a, retx) in runs.items():
        assert a["chunks"] == a["completed_chunks"] == chunks, name
        assert a["contributions"] - a["retransmissions"] - a["duplicates"] == N * chunks, name
        assert all(v["contributions"] - v["retransmissions"] >= chunks for v in a["per_worker"].values())
    whole, cut = runs["whole"][1], runs["cut"][1]
    assert whole.pop("truncated_packets") == 0
    assert cut["packets"] == records and cut.pop("truncated_packets") == cut_records > records // 2
    if runs["whole"][2] == runs["cut"][2] == 0:     # no timeout on either run: the very same traffic
        for a in (whole, cut):
            # Timing, and which worker completed each chunk (a result carries its id), vary by run.
            a.pop("completion_latency_s")
            for v in a["per_worker"].values():
                v.pop("results")
        assert cut == whole

    out = CliRunner().invoke(main, ["pcap", str(tmp_path / "cut" / "pcaps")])
    assert out.exit_code == 0, out.output
    assert out.output.count(f"truncated: frames captured to {snap} bytes (snaplen)") == 2 * N
    assert f"chunks: {chunks} seen, {chunks} completed" in out.output
