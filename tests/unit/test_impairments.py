"""Soft switch pure logic: impairments, delay queue, forwarding pipeline, pcap
writer, config validation. No sockets."""
from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.switch.pipeline import (PIPELINES, ForwardingPipeline, make_pipeline,
                                     register_pipeline)
from testbed.switch.soft.config import DEFAULT_BATCH, KNOWN_KEYS, ConfigError, SwitchConfig
from testbed.switch.soft.impairments import DelayQueue, Impair, PortImpairment
from testbed.switch.soft.pcap import MAX_SNAPLEN, PcapWriter

pytestmark = pytest.mark.unit

N = 20_000
SIGMAS = 4.5


def frames(n: int) -> list[bytes]:
    return [i.to_bytes(4, "big") * 16 for i in range(n)]


def seqs(out) -> list[int]:
    return [int.from_bytes(f[:4], "big") for _, f in out]


def imp(seed: int = 1, **kw) -> PortImpairment:
    return PortImpairment(rng=np.random.default_rng(seed), **kw)


def run_batches(p: PortImpairment, n: int, batch: int = 64, now: float = 100.0):
    fr = frames(n)
    out = []
    for i in range(0, n, batch):
        out.extend(p.apply(fr[i:i + batch], now))
    return out


def within(observed: float, p: float, n: int) -> bool:
    return abs(observed - p) < SIGMAS * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("pct", [1, 5, 10])
def test_loss_rate(pct):
    p = imp(loss_pct=pct)
    out = run_batches(p, N)
    lost = N - len(out)
    assert within(lost / N, pct / 100, N), (lost, N)
    assert p.counters()["dropped"] == lost and p.counters()["seen"] == N
    s = seqs(out)
    assert s == sorted(s)  # loss alone never reorders


@pytest.mark.parametrize("pct", [1, 5, 10])
def test_duplicate_rate(pct):
    p = imp(duplicate_pct=pct)
    out = run_batches(p, N)
    dups = len(out) - N
    assert within(dups / N, pct / 100, N), (dups, N)
    assert p.counters()["duplicated"] == dups
    s = seqs(out)
    assert s == sorted(s) and len(set(s)) == N  # the copy follows its original


def test_loss_and_duplicate_combine():
    p = imp(loss_pct=10, duplicate_pct=10)
    out = run_batches(p, N)
    c = p.counters()
    assert len(out) == N - c["dropped"] + c["duplicated"]
    assert within(c["duplicated"] / (N - c["dropped"]), 0.10, N - c["dropped"])


def test_delay_is_added():
    p = imp(delay_ms=5)
    out = p.apply(frames(100), now=10.0)
    assert all(d == pytest.approx(10.005) for d, _ in out)
    assert p.counters()["delayed"] == 100


def test_jitter_bounds_uniform_and_clipped():
    p = imp(delay_ms=2, jitter_ms=1)
    out = run_batches(p, N, now=0.0)
    d = np.array([t for t, _ in out]) * 1000
    assert d.min() >= 1.0 - 1e-9 and d.max() <= 3.0 + 1e-9
    assert abs(d.mean() - 2.0) < 0.02
    # Uniform in [-1, 1]: std = 1/sqrt(3).
    assert abs(d.std() - 1 / math.sqrt(3)) < 0.02
    # jitter > delay: clipped at now, never in the past.
    q = imp(delay_ms=1, jitter_ms=3)
    d2 = np.array([t for t, _ in run_batches(q, N, now=5.0)])
    assert d2.min() >= 5.0 and (d2 == 5.0).mean() > 0.2


def order_after_queue(out) -> list[int]:
    q = DelayQueue()
    q.push_many(out)
    return [int.from_bytes(f[:4], "big") for f in q.pop_due(float("inf"))]


@pytest.mark.parametrize("delay_ms", [0, 5])
def test_reorder_rate_and_effect(delay_ms):
    p = imp(reorder_pct=10, delay_ms=delay_ms)
    # One frame per batch, 0.1 ms apart: later frames can overtake held/delayed ones.
    fr = frames(N)
    out = []
    for i, f in enumerate(fr):
        out.extend(p.apply([f], now=i * 1e-4))
    c = p.counters()
    assert within(c["reordered"] / N, 0.10, N)
    order = order_after_queue(out)
    assert sorted(order) == list(range(N))
    # Frames that end up before a smaller sequence number: about one per reorder event.
    inversions = sum(1 for a, b in zip(order, order[1:]) if a > b)
    assert inversions > 0.5 * c["reordered"]
    if delay_ms == 0:
        held = [d - i * 1e-4 for i, (d, _) in enumerate(out)]
        assert sum(h == pytest.approx(1e-3) for h in held) == c["reordered"]  # default hold 1 ms


def test_reorder_hold_configurable():
    p = imp(reorder_pct=100, reorder_hold_ms=3)
    out = p.apply(frames(10), now=1.0)
    assert all(d == pytest.approx(1.003) for d, _ in out)


def test_no_impairment_passthrough_and_split():
    p = imp()
    fr = frames(10)
    assert not p.active
    now_f, later = p.split(fr, 1.0)
    assert now_f is fr and later == []
    q = imp(delay_ms=1)
    now_f, later = q.split(fr, 1.0)
    assert now_f == [] and len(later) == 10


def test_deterministic_with_seed():
    kw = dict(loss_pct=5, duplicate_pct=5, delay_ms=1, jitter_ms=1, reorder_pct=5)
    a = run_batches(imp(7, **kw), 5000)
    b = run_batches(imp(7, **kw), 5000)
    c = run_batches(imp(8, **kw), 5000)
    assert a == b
    assert a != c


def test_blocks_reserved_for_the_compiled_path_keep_the_loss_stream():
    """The compiled path takes uniforms in blocks (reserve) and gives the unused rest
    back; whatever the mix of paths and batch sizes, frame k meets the k-th uniform,
    so the same seed drops the same frames as the Python path alone."""
    rng = np.random.default_rng(7)
    ref, mixed = imp(seed=3, loss_pct=30), imp(seed=3, loss_pct=30)
    want: list[bool] = []
    got: list[bool] = []
    for _ in range(300):
        n = int(rng.integers(0, 40))
        idx, _ = ref.decide(n, 0.0)
        want += [i in set(idx.tolist()) for i in range(n)]
        if rng.random() < 0.5:
            idx, _ = mixed.decide(n, 0.0)          # the Python path
            got += [i in set(idx.tolist()) for i in range(n)]
        else:                                      # the compiled path: a block, partly used
            block = mixed.reserve(n + int(rng.integers(0, 50)))
            used = block[:n]
            got += (used >= 0.3).tolist()
            mixed.count_compiled(n, int((used < 0.3).sum()))
            mixed.give_back(block[n:])
    assert got == want and len(want) > 3000
    assert (mixed.seen, mixed.dropped) == (ref.seen, ref.dropped)
    assert imp(loss_pct=1).loss_only and not imp(loss_pct=1, duplicate_pct=1).loss_only
    assert not imp(loss_pct=1, delay_ms=1).loss_only and not imp().loss_only
    with pytest.raises(ValueError, match="loss-only"):
        imp(loss_pct=1, jitter_ms=1).reserve(4)


def test_delay_queue_order_and_fifo():
    q = DelayQueue()
    q.push_many([(2.0, "c"), (1.0, "a"), (1.0, "b"), (3.0, "d")])
    q.push(1.0, "b2")
    assert q.next_due() == 1.0
    assert q.pop_due(0.5) == []
    assert q.pop_due(1.0) == ["a", "b", "b2"]
    assert q.pop_due(2.5) == ["c"]
    assert len(q) == 1 and q.drain() == ["d"] and len(q) == 0


def test_impair_validation():
    assert Impair.from_dict({"loss_pct": 1}).active
    with pytest.raises(ValueError, match="loss_pct"):
        Impair.from_dict({"loss_pct": 101})
    with pytest.raises(ValueError, match="unknown"):
        Impair.from_dict({"los_pct": 1})
    with pytest.raises(ValueError, match="delay_ms"):
        Impair.from_dict({"delay_ms": -1})


# --- forwarding pipeline -------------------------------------------------------

M1, M2, M3 = (bytes([0, 0, 0, 0, 0, i]) for i in (1, 2, 3))
BCAST = b"\xff" * 6


def eth(dst: bytes, src: bytes = M1, payload: bytes = b"x" * 50) -> bytes:
    return dst + src + b"\x08\x00" + payload


def test_forward_unicast_flood_drop():
    p = ForwardingPipeline({M1: 1, M2: 2, M3: 3}, [1, 2, 3], flood=True)
    f_uni, f_b, f_unk = eth(M2), eth(BCAST), eth(b"\x00\x00\x00\x00\x00\x09")
    out = p.process_batch([f_uni, f_b, f_unk, eth(M1)], [1, 1, 3, 1], 0.0)
    assert (2, f_uni) in out
    assert sorted(port for port, f in out if f == f_b) == [2, 3]
    assert sorted(port for port, f in out if f == f_unk) == [1, 2]
    assert not any(f == eth(M1) for _, f in out)  # hairpin dropped
    c = p.counters()
    assert c["forward"]["hits"] == 2 and c["forward"]["misses"] == 2
    assert c["drops"]["hairpin"] == 1 and c["flood"]["copies"] == 4

    nf = ForwardingPipeline({M2: 2}, [1, 2, 3], flood=False)
    out = nf.process_batch([eth(M2), eth(BCAST), eth(M3)], [1, 1, 1], 0.0)
    assert out == [(2, eth(M2))]
    assert nf.counters()["drops"]["miss_no_flood"] == 2


def test_forward_table_is_programmable():
    p = make_pipeline("forward", {"forwarding": [{"dst_mac": "00:00:00:00:00:02", "port": 2}],
                                  "ports": {"1": "a", "2": "b"}, "flood": False})
    assert p.process_batch([eth(M3)], [1], 0.0) == []
    p.add_entry("00:00:00:00:00:03", 2)
    assert p.process_batch([eth(M3)], [1], 0.0) == [(2, eth(M3))]
    p.delete_entry(M3)
    assert p.process_batch([eth(M3)], [1], 0.0) == []
    with pytest.raises(ValueError):
        p.add_entry("00:00:00:00:00:03", 7)


def test_pipeline_registry():
    class Echo:
        def process_batch(self, frames, in_ports, now):
            return list(zip(in_ports, frames))

        def counters(self):
            return {}

    register_pipeline("echo_test", lambda cfg: Echo())
    try:
        assert make_pipeline("echo_test", {}).process_batch([b"a"], [4], 0) == [(4, b"a")]
    finally:
        PIPELINES.pop("echo_test")
    with pytest.raises(KeyError, match="unknown pipeline"):
        make_pipeline("no_such_pipeline", {})


# --- pcap writer -----------------------------------------------------------------

def test_pcap_readable_by_scapy(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap

    pkts = [Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01") / IP(dst="10.0.0.2")
            / UDP(sport=1000 + i, dport=5001) / (b"p" * i) for i in range(20)]
    path = tmp_path / "s1-eth1_in.pcap"
    with PcapWriter(path, flush_bytes=256) as w:
        w.write_batch([bytes(p) for p in pkts[:10]], 1700000000.25)
        w.write_batch([bytes(p) for p in pkts[10:]], 1700000001.5)
    got = rdpcap(str(path))
    assert len(got) == 20
    assert [bytes(p) for p in got] == [bytes(p) for p in pkts]
    assert got[0][UDP].sport == 1000 and got[19][UDP].dport == 5001
    assert float(got[0].time) == pytest.approx(1700000000.25, abs=1e-6)
    assert float(got[15].time) == pytest.approx(1700000001.5, abs=1e-6)


# --- config ------------------------------------------------------------------

def base_cfg(**kw) -> dict:
    d = {"name": "s1", "ports": {"1": "s1-eth1", "2": "s1-eth2"}, "stats_path": "/x/s.json",
         "ready_path": "/x/r.json"}
    d.update(kw)
    return d


def test_config_valid_and_defaults():
    c = SwitchConfig.from_dict(base_cfg(impairments={"2": {"egress": {"loss_pct": 10}}}))
    assert c.ports == {1: "s1-eth1", 2: "s1-eth2"} and c.batch == DEFAULT_BATCH and c.flood
    assert c.impairments[2]["egress"].loss_pct == 10 and not c.impairments[2]["ingress"].active


@pytest.mark.parametrize("bad, field", [
    ({"ports": {}}, "ports"),
    ({"ports": {"x": "eth0"}}, "ports.x"),
    ({"forwarding": [{"dst_mac": "zz", "port": 1}]}, "forwarding[0].dst_mac"),
    ({"forwarding": [{"dst_mac": "00:00:00:00:00:01", "port": 9}]}, "forwarding[0].port"),
    ({"impairments": {"1": {"ingress": {"loss_pct": 200}}}}, "impairments.1.ingress.loss_pct"),
    ({"impairments": {"1": {"sideways": {}}}}, "impairments.1"),
    ({"batch": 0}, "batch"),
    ({"flood": "yes"}, "flood"),
])
def test_config_errors_name_the_field(bad, field):
    with pytest.raises(ConfigError) as ei:
        SwitchConfig.from_dict(base_cfg(**bad), "cfg.json")
    assert f"cfg.json: {field}" in str(ei.value)


def test_config_pcap_snaplen():
    # Absent or null: whole frames, as the writers did before the key existed.
    assert SwitchConfig.from_dict(base_cfg()).pcap_snaplen == MAX_SNAPLEN == 262144
    assert SwitchConfig.from_dict(base_cfg(pcap_snaplen=None)).pcap_snaplen == MAX_SNAPLEN
    assert SwitchConfig.from_dict(base_cfg(pcap_snaplen=96)).pcap_snaplen == 96
    assert "pcap_snaplen" in KNOWN_KEYS


@pytest.mark.parametrize("bad", [0, -1, MAX_SNAPLEN + 1, True, "96", 96.0])
def test_config_pcap_snaplen_errors_name_the_key(bad):
    with pytest.raises(ConfigError) as ei:
        SwitchConfig.from_dict(base_cfg(pcap_snaplen=bad), "cfg.json")
    assert str(ei.value) == (f"cfg.json: pcap_snaplen: must be an integer in 1..262144 (bytes kept of "
                             f"each frame) or null (whole frames), got {bad!r}")


def test_config_missing_required():
    with pytest.raises(ConfigError, match="stats_path: missing"):
        SwitchConfig.from_dict({"name": "s1", "ports": {"1": "a"}, "ready_path": "r"})


def test_bad_config_fails_start_with_actionable_error(tmp_path):
    """Exit code 2 from the process, and SwitchStartError carries command, code, log."""
    from testbed.switch.soft.process import SoftSwitchProcess, SwitchStartError

    cfg = base_cfg(stats_path=str(tmp_path / "s.json"), ready_path=str(tmp_path / "r.json"),
                   impairments={"1": {"ingress": {"loss_pct": 250}}})
    proc = SoftSwitchProcess(cfg, tmp_path, log_path=tmp_path / "logs" / "s1.log", ready_timeout=20)
    with pytest.raises(SwitchStartError) as ei:
        proc.start()
    msg = str(ei.value)
    assert "exited with code 2" in msg
    assert "-m testbed.switch.soft --config" in msg
    assert str(tmp_path / "logs" / "s1.log") in msg
    assert "impairments.1.ingress.loss_pct" in msg  # the log's last lines name the field
