"""The soft switch's INA pipeline, packet level: frames in, frames out.
Every test runs on both the batched (vectorized) and one-by-one paths."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from testbed import wire
from testbed.switch.ina import CompiledInaPipeline, InaPipeline
from testbed.switch.pipeline import make_pipeline

import ina_harness as H

pytestmark = pytest.mark.unit

J1 = H.job_config(1, 2, slot_count=8)
J3 = H.job_config(3, 3, slot_base=8, slot_count=4)


@pytest.fixture(params=["vector", "scalar", "compiled"])
def mode(request):
    return request.param


def mk(mode, *jobs, **extra) -> InaPipeline:
    cfg = H.pipeline_config(*(jobs or (J1,)), **extra)
    if mode == "vector":
        return InaPipeline(cfg, scalar_below=1)
    if mode == "compiled":          # testbed/switch/ina/fastpath.py (C hot loop)
        return CompiledInaPipeline(cfg)
    return InaPipeline(cfg, vectorized=False)


def send(pipe, *items, batch=True):
    """items: (job, worker_id, frame) or (port, frame). One batch unless batch=False."""
    frames, ports = [], []
    for it in items:
        if len(it) == 3:
            job, wid, f = it
            ports.append(H.port_of(job, wid))
        else:
            ports.append(it[0])
            f = it[1]
        frames.append(f)
    if batch:
        return pipe.process_batch(frames, ports, 0.0)
    out = []
    for f, p in zip(frames, ports):
        out += pipe.process_batch([f], [p], 0.0)
    return out


def c(job, wid, **kw):
    return (job, wid, H.contribution(job, wid, **kw))


def decoded(out):
    res = []
    for port, f in out:
        p = wire.parse_frame(f)
        assert p is not None, f"not an INA frame: {f[:64].hex()}"
        res.append((port, p))
    return res


def counter(pipe, name, idx=None):
    cnt = pipe.counters_by_name[name]
    return cnt.total() if idx is None else cnt.read(idx)


def assert_valid_result_frame(f: bytes):
    assert wire.ipv4_checksum(f[14:34]) == 0
    total, = struct.unpack_from("!H", f, 16)
    ulen, csum = struct.unpack_from("!HH", f, 38)
    assert total == len(f) - 14 and ulen == len(f) - 34 and csum == 0
    assert f[22] == 64 and f[20:22] == b"\x40\x00"           # TTL, DF


# -- reduction and result delivery ---------------------------------------------------
def test_basic_reduction_two_workers(mode):
    pipe = mk(mode)
    a, b = np.arange(64), np.arange(64) * -3 + 7
    assert send(pipe, c(J1, 0, slot=2, seq=2, values=a)) == []
    out = decoded(send(pipe, c(J1, 1, slot=2, seq=2, values=b)))
    assert sorted(p for p, _ in out) == [1, 2]
    for port, p in out:
        assert np.array_equal(p.values, a + b)
        h = p.header
        assert h.flags == wire.FLAG_RESULT and (h.job_id, h.slot, h.slot_ver, h.seq, h.count) == (1, 2, 0, 2, 64)
    assert counter(pipe, "Ingress.ina_packets", 1) == 2
    assert counter(pipe, "Ingress.ina_results", 1) == 1


def test_result_addressing_per_worker(mode):
    job = H.job_config(5, 3, slot_count=4)
    job["workers"][2]["udp_port"] = 41000
    pipe = mk(mode, job)
    out = send(pipe, *[c(job, w, slot=0, seq=0, values=[w + 1], dport=wire.INA_PORT_BASE + 7)
                       for w in range(3)])
    assert len(out) == 3
    by_port = {port: f for port, f in out}
    for w in job["workers"]:
        f = by_port[w["port"]]
        p = wire.parse_frame(f)
        assert wire.mac_str(p.dst_mac) == w["mac"] and wire.ip_str(p.dst_ip) == w["ip"]
        assert wire.mac_str(p.src_mac) == H.SWITCH_MAC and wire.ip_str(p.src_ip) == H.SWITCH_IP
        assert p.sport == wire.INA_PORT_BASE + 7                 # from the port it was sent to
        assert p.dport == w.get("udp_port", wire.INA_PORT_BASE)
        assert list(p.values) == [6]
        assert_valid_result_frame(f)


def test_three_workers(mode):
    pipe = mk(mode, J3)
    assert send(pipe, c(J3, 0, slot=1, seq=1, values=[1, 2]), c(J3, 2, slot=1, seq=1, values=[10, 20])) == []
    out = decoded(send(pipe, c(J3, 1, slot=1, seq=1, values=[100, 200])))
    assert sorted(p for p, _ in out) == sorted(w["port"] for w in J3["workers"])
    assert all(list(p.values) == [111, 222] for _, p in out)
    # the job's slots are offset by slot_base=8 in the registers
    reg = pipe.registers["Aggregator.worker_count"]
    assert reg.read((8 + 1) * 2 + 0) == 3
    assert pipe.registers["Aggregator.worker_bitmap"].read((8 + 1) * 2) == 0b111


def test_retransmission_after_reduction_gets_unicast(mode):
    pipe = mk(mode)
    send(pipe, c(J1, 0, slot=3, seq=3, values=[4]), c(J1, 1, slot=3, seq=3, values=[5]))
    out = send(pipe, c(J1, 1, slot=3, seq=3, values=[5], flags=wire.FLAG_RETX, sport=40123))
    assert len(out) == 1
    port, f = out[0]
    p = wire.parse_frame(f)
    assert port == H.port_of(J1, 1)
    assert list(p.values) == [9] and p.header.flags == wire.FLAG_RESULT
    assert wire.mac_str(p.dst_mac) == J1["workers"][1]["mac"] and p.dport == 40123
    assert wire.ip_str(p.src_ip) == H.SWITCH_IP and p.sport == wire.INA_PORT_BASE
    assert_valid_result_frame(f)
    assert counter(pipe, "Ingress.ina_retransmits", 1) == 1
    assert counter(pipe, "Ingress.ina_results", 1) == 1          # not a second completion


def test_contribution_to_other_version_shadow_copy(mode):
    pipe = mk(mode)
    bm = pipe.registers["Aggregator.worker_bitmap"]
    send(pipe, c(J1, 0, slot=1, seq=1, slot_ver=0, values=[1]),
         c(J1, 1, slot=1, seq=1, slot_ver=0, values=[2]))
    assert bm.read(1 * 2 + 0) == 0b11
    # worker 0 got its result and moves on: next chunk for slot 1, other version
    assert send(pipe, c(J1, 0, slot=1, seq=9, slot_ver=1, values=[10])) == []
    assert bm.read(1 * 2 + 1) == 0b01 and bm.read(1 * 2 + 0) == 0b10   # its old bit is cleared
    # worker 1 lost its result: its retransmission to version 0 is still answered
    out = decoded(send(pipe, c(J1, 1, slot=1, seq=1, slot_ver=0, values=[2])))
    assert [(p, list(x.values)) for p, x in out] == [(2, [3])]
    # a late copy of worker 0's old packet is not counted anywhere
    assert send(pipe, c(J1, 0, slot=1, seq=1, slot_ver=0, values=[1])) == []
    assert counter(pipe, "Ingress.ina_duplicates_dropped", 1) == 1
    # worker 1 joins the new version: result 10 + 20
    out = decoded(send(pipe, c(J1, 1, slot=1, seq=9, slot_ver=1, values=[20])))
    assert sorted((p, list(x.values)) for p, x in out) == [(1, [30]), (2, [30])]
    # and version 0 can be reused by a newer chunk
    send(pipe, c(J1, 0, slot=1, seq=17, slot_ver=0, values=[100]))
    out = decoded(send(pipe, c(J1, 1, slot=1, seq=17, slot_ver=0, values=[200])))
    assert {tuple(x.values) for _, x in out} == {(300,)}


def test_duplicate_before_completion_dropped_not_double_counted(mode):
    pipe = mk(mode, J3)
    assert send(pipe, c(J3, 0, slot=0, seq=0, values=[1]), c(J3, 0, slot=0, seq=0, values=[1])) == []
    assert send(pipe, c(J3, 0, slot=0, seq=0, values=[1], flags=wire.FLAG_RETX)) == []
    assert counter(pipe, "Ingress.ina_duplicates_dropped", 3) == 2
    assert send(pipe, c(J3, 1, slot=0, seq=0, values=[10])) == []
    out = decoded(send(pipe, c(J3, 2, slot=0, seq=0, values=[100])))
    assert len(out) == 3 and all(list(p.values) == [111] for _, p in out)


def test_stale_packet_from_an_older_chunk_is_dropped(mode):
    pipe = mk(mode)
    for seq in (2, 10, 18):                  # slot 2, versions 0, 1, 0: three uses
        ver = (seq // 8) % 2
        send(pipe, c(J1, 0, slot=2, seq=seq, slot_ver=ver, values=[seq]),
             c(J1, 1, slot=2, seq=seq, slot_ver=ver, values=[1]))
    before = pipe.registers["Aggregator.agg_values"].read((2 * 2 + 0) * 64)
    # a copy of seq 2 arrives very late: version 0 now holds seq 18
    assert send(pipe, c(J1, 1, slot=2, seq=2, slot_ver=0, values=[1000])) == []
    assert pipe.registers["Aggregator.agg_values"].read((2 * 2 + 0) * 64) == before == 19
    assert counter(pipe, "Ingress.ina_duplicates_dropped", 1) == 1


def test_ops_or_and_max(mode):
    pipe = mk(mode)
    send(pipe, c(J1, 0, slot=0, seq=0, op=wire.OP_OR, values=[0b0011, 0, -2**31]))
    out = decoded(send(pipe, c(J1, 1, slot=0, seq=0, op=wire.OP_OR, values=[0b0101, 7, 1])))
    assert all(list(p.values) == [0b0111, 7, -2**31 + 1] and p.header.op == wire.OP_OR for _, p in out)
    send(pipe, c(J1, 0, slot=1, seq=1, op=wire.OP_MAX, values=[-5, 3, -2**31]))
    out = decoded(send(pipe, c(J1, 1, slot=1, seq=1, op=wire.OP_MAX, values=[-7, 2, -2**31 + 1])))
    assert all(list(p.values) == [-5, 3, -2**31 + 1] for _, p in out)   # signed compare


def test_sum_wraps_like_bit32(mode):
    pipe = mk(mode)
    send(pipe, c(J1, 0, slot=0, seq=0, values=[2**31 - 1, -2**31]))
    out = decoded(send(pipe, c(J1, 1, slot=0, seq=0, values=[1, -1])))
    assert list(out[0][1].values) == [-2**31, 2**31 - 1]


def test_exponent_is_the_max(mode):
    pipe = mk(mode, J3)
    send(pipe, c(J3, 0, slot=0, seq=0, values=[1], exponent=-4), c(J3, 1, slot=0, seq=0, values=[1], exponent=3))
    out = decoded(send(pipe, c(J3, 2, slot=0, seq=0, values=[1], exponent=-100)))
    assert {p.header.exponent for _, p in out} == {3}
    assert pipe.registers["Aggregator.result_exponent"].read(8 * 2) == 3    # J3: slot_base 8


def test_small_packets_and_zero_values(mode):
    pipe = mk(mode)
    send(pipe, c(J1, 0, slot=0, seq=0, values=[]))
    out = decoded(send(pipe, c(J1, 1, slot=0, seq=0, values=[])))
    assert len(out) == 2 and all(p.header.count == 0 for _, p in out)
    f = H.contribution(J1, 0, slot=1, seq=1, values=[7])
    padded = f + bytes(60 - len(f)) if len(f) < 60 else f + bytes(4)   # Ethernet padding
    send(pipe, (1, padded))
    out = decoded(send(pipe, c(J1, 1, slot=1, seq=1, values=[8])))
    assert all(list(p.values) == [15] for _, p in out)
    assert all(len(f) == 42 + 16 + 4 for _, f in send(pipe, c(J1, 1, slot=1, seq=1, values=[8])))


def test_first_contribution_clears_lanes_beyond_count(mode):
    pipe = mk(mode)
    send(pipe, c(J1, 0, slot=0, seq=0, values=np.full(64, 9)), c(J1, 1, slot=0, seq=0, values=np.full(64, 9)))
    send(pipe, c(J1, 0, slot=0, seq=16, values=[1, 2]))
    vals = pipe.registers["Aggregator.agg_values"]
    assert [vals.read(i) for i in range(4)] == [1, 2, 0, 0]


# -- what the switch refuses -----------------------------------------------------------
def test_unknown_job_dropped_and_counted(mode):
    pipe = mk(mode)
    other = H.job_config(9, 2)
    assert send(pipe, (1, H.contribution(other, 0, slot=0, seq=0, values=[1]))) == []
    assert counter(pipe, "Ingress.bad_job", 9) == 1 and counter(pipe, "Ingress.ina_packets") == 0


def test_worker_not_in_job_dropped_and_counted(mode):
    pipe = mk(mode)
    stranger = dict(J1, workers=J1["workers"] + [H.worker_spec(1, 5, 9), H.worker_spec(1, 40, 9)])
    assert send(pipe, c(stranger, 5, slot=0, seq=0, values=[1]), c(stranger, 40, slot=0, seq=0, values=[1])) == []
    assert counter(pipe, "Ingress.bad_worker", 1) == 2


def test_contribution_under_another_members_worker_id_dropped_and_counted(mode):
    """Membership is bound to ports: worker 1 (port 2) sending as worker 0 of its
    own job, with a valid slot and seq, is dropped and counted in Ingress.bad_port;
    the chunk's result is then made of the real members' values only."""
    pipe = mk(mode)
    forged = H.contribution(J1, 0, slot=0, seq=0, values=[1000])
    honest = [c(J1, 0, slot=0, seq=0, values=[1]), c(J1, 1, slot=0, seq=0, values=[2])]
    # forged copies before, between and after the honest ones, in one batch
    out = decoded(send(pipe, (2, forged), honest[0], (2, forged), (3, forged), honest[1], (2, forged)))
    assert counter(pipe, "Ingress.bad_port", 1) == 4 and counter(pipe, "Ingress.bad_port") == 4
    assert counter(pipe, "Ingress.ina_packets", 1) == 2
    assert sorted(p for p, _ in out) == [1, 2] and all(x.values.tolist() == [3] for _, x in out)
    assert pipe.registers["Aggregator.worker_count"].read(0) == 2


def test_worker_without_a_port_binding_is_dropped(mode):
    """A job whose table entry exists but whose workers are not bound to ports
    admits nobody: the binding is part of the job, not an optional extra."""
    pipe = mk(mode)
    pipe.tables["Ingress.worker_port"].delete({"job_id": 1, "worker_id": 1})
    assert send(pipe, c(J1, 1, slot=0, seq=0, values=[2])) == []
    assert counter(pipe, "Ingress.bad_port", 1) == 1 and counter(pipe, "Ingress.ina_packets") == 0
    pipe.tables["Ingress.worker_port"].insert({"job_id": 1, "worker_id": 1}, "Ingress.set_worker_port",
                                              {"port": H.port_of(J1, 1)})
    send(pipe, c(J1, 0, slot=0, seq=0, values=[1]))
    assert len(send(pipe, c(J1, 1, slot=0, seq=0, values=[2]))) == 2
    assert counter(pipe, "Ingress.bad_port", 1) == 1


def test_port_binding_checked_after_worker_and_before_slot(mode):
    """P4 order: bad_worker (not a member) before bad_port, bad_port before bad_slot."""
    pipe = mk(mode)
    stranger = dict(J1, workers=J1["workers"] + [H.worker_spec(1, 5, 2)])
    assert send(pipe, c(stranger, 5, slot=0, seq=0, values=[1]),          # not a member
                (2, H.contribution(J1, 0, slot=99, seq=0, values=[1]))) == []   # wrong port, bad slot
    assert counter(pipe, "Ingress.bad_worker", 1) == 1
    assert counter(pipe, "Ingress.bad_port", 1) == 1 and counter(pipe, "Ingress.bad_slot") == 0


def test_slot_out_of_the_jobs_range_dropped_and_counted(mode):
    pipe = mk(mode, J1, J3)
    assert send(pipe, c(J1, 0, slot=8, seq=8, values=[1])) == []      # J1 has 8 slots
    assert counter(pipe, "Ingress.bad_slot", 1) == 1
    assert pipe.registers["Aggregator.worker_count"].read(16) == 0     # J3's slot 0 untouched


def malformed_frames():
    good = H.contribution(J1, 0, slot=0, seq=0, values=np.arange(64))
    return {
        "count over 64": H.contribution(J1, 0, slot=0, seq=0, values=np.arange(64), count=65),
        "short payload": good[:58 + 40],
        "count beyond payload": H.contribution(J1, 0, slot=0, seq=0, values=[1, 2], count=3),
        "wrong version": H.contribution(J1, 0, slot=0, seq=0, values=[1], version=2),
        "bad op": H.contribution(J1, 0, slot=0, seq=0, values=[1], op=3),
        "bad slot_ver": H.contribution(J1, 0, slot=0, seq=0, values=[1], slot_ver=2),
        "truncated header": good[:50],
        "udp only": good[:42 - 3],
        "ip only": good[:30],
        "runt": good[:10],
        "empty": b"",
    }


def test_malformed_frames_dropped_and_counted(mode):
    pipe = mk(mode)
    bad = malformed_frames()
    assert send(pipe, *[(1, f) for f in bad.values()]) == []
    assert counter(pipe, "Ingress.malformed") == len(bad)
    assert counter(pipe, "Ingress.ina_packets") == 0
    # and nothing was aggregated: the good packets still complete normally
    send(pipe, c(J1, 0, slot=0, seq=0, values=[1]))
    assert len(send(pipe, c(J1, 1, slot=0, seq=0, values=[1]))) == 2


def test_malformed_mixed_with_good_in_one_batch(mode):
    pipe = mk(mode)
    bad = list(malformed_frames().values())
    out = send(pipe, (1, bad[0]), c(J1, 0, slot=0, seq=0, values=[1]), (2, bad[1]),
               c(J1, 1, slot=0, seq=0, values=[2]), (1, bad[5]))
    assert len(out) == 2 and counter(pipe, "Ingress.malformed") == 3


# -- batches -----------------------------------------------------------------------------
def test_in_batch_duplicates_and_collisions_match_one_by_one(mode):
    items = [c(J3, 0, slot=0, seq=0, values=[1]), c(J3, 0, slot=0, seq=0, values=[1]),   # dup
             c(J3, 1, slot=0, seq=0, values=[10]), c(J3, 2, slot=0, seq=0, values=[100]),
             c(J3, 2, slot=0, seq=0, values=[100]),                                     # retx after
             c(J3, 0, slot=1, seq=1, values=[5]), c(J3, 1, slot=1, seq=1, values=[5]),
             c(J3, 0, slot=0, seq=4, slot_ver=1, values=[7])]                          # other ver
    pipe, ref = mk(mode, J3), mk("scalar", J3)
    out = send(pipe, *items)
    assert out == send(ref, *items, batch=False)
    got = decoded(out)
    assert [list(p.values) for _, p in got] == [[111]] * 4          # 3 multicast + 1 unicast
    assert counter(pipe, "Ingress.ina_duplicates_dropped", 3) == 1
    assert counter(pipe, "Ingress.ina_retransmits", 3) == 1


def test_slot_reuse_across_1000_rounds(mode):
    job = H.job_config(2, 2, slot_count=4)
    pipe = mk(mode, job)
    rng = np.random.default_rng(1)
    window, rounds = 4, 1000
    data = rng.integers(-2**31, 2**31, size=(2, window * rounds, 8)).astype(np.int32)
    results = 0
    for r in range(rounds):
        items = []
        for s in range(window):
            seq = r * window + s
            for w in (1, 0) if r % 2 else (0, 1):
                items.append(c(job, w, slot=s, seq=seq, slot_ver=r % 2, values=data[w, seq]))
        for port, p in decoded(send(pipe, *items)):
            want = H.expected(wire.OP_SUM, data[:, p.header.seq])
            assert np.array_equal(p.values, want)
            results += 1
    assert results == 2 * window * rounds
    assert counter(pipe, "Ingress.ina_results", 2) == window * rounds


def test_two_jobs_do_not_disturb_each_other(mode):
    pipe = mk(mode, J1, J3)
    # same slot index and worker ids in both jobs, interleaved in one batch
    out = decoded(send(pipe, c(J1, 0, slot=0, seq=0, values=[1]), c(J3, 0, slot=0, seq=0, values=[10]),
                       c(J3, 1, slot=0, seq=0, values=[20]), c(J1, 1, slot=0, seq=0, values=[2]),
                       c(J3, 2, slot=0, seq=0, values=[30])))
    j1 = {p: list(x.values) for p, x in out if x.header.job_id == 1}
    j3 = {p: list(x.values) for p, x in out if x.header.job_id == 3}
    assert j1 == {1: [3], 2: [3]}
    assert j3 == {w["port"]: [60] for w in J3["workers"]}
    assert counter(pipe, "Ingress.ina_results", 1) == counter(pipe, "Ingress.ina_results", 3) == 1


def test_drop_simulator_rate(mode):
    pipe = mk(mode, drop_probabilities={1: 0.25}, seed=3)
    assert abs(pipe.drop_simulator.probability(1) - 0.25) < 1e-9
    assert pipe.registers["DropSimulator.drop_probability"].read(1) == 2**30
    frames = [H.contribution(J1, 0, slot=i % 8, seq=i % 8, values=[1]) for i in range(8000)]
    for i in range(0, len(frames), 200):
        pipe.process_batch(frames[i:i + 200], [1] * 200, 0.0)
    dropped = counter(pipe, "DropSimulator.dropped", 1)
    assert 0.23 < dropped / 8000 < 0.27
    assert dropped + counter(pipe, "Ingress.ina_packets", 1) == 8000
    # other ports are untouched
    send(pipe, c(J1, 1, slot=0, seq=0, values=[1]))
    assert counter(pipe, "DropSimulator.dropped", 2) == 0


def test_drop_simulator_same_decisions_batched_and_one_by_one():
    cfg = H.pipeline_config(J1, drop_probabilities={1: 0.5, 2: 0.1}, seed=7)
    frames = [H.contribution(J1, i % 2, slot=0, seq=i // 2, values=[1]) for i in range(400)]
    ports = [1 + i % 2 for i in range(400)]
    a, b = InaPipeline(cfg, scalar_below=1), InaPipeline(cfg, vectorized=False)
    assert a.process_batch(frames, ports, 0) == b.process_batch(frames, ports, 0)
    assert a.counters() == b.counters()


def test_egress_drop_simulator_drops_results_only(mode):
    """EgressDropSimulator (loss on the way out): a result replica to an armed
    port is dropped and counted by port; the other replicas, the unicast reply
    to another port and forwarded frames to the armed port are untouched, and
    the ingress simulator draws nothing."""
    w0, w1 = J1["workers"]
    p0, p1 = w0["port"], w1["port"]
    pipe = mk(mode, egress_drop_probabilities={p1: 1.0},
              forwarding=[{"dst_mac": w1["mac"], "port": p1}])
    assert pipe.registers["EgressDropSimulator.drop_probability"].read(p1) == 0xFFFFFFFF
    out = send(pipe, c(J1, 0, slot=0, seq=0, values=[1]), c(J1, 1, slot=0, seq=0, values=[2]))
    assert [p for p, _ in out] == [p0]                      # w1's replica is lost
    assert counter(pipe, "EgressDropSimulator.dropped", p1) == 1
    assert counter(pipe, "Ingress.ina_results", 1) == 1      # the result was made
    out = send(pipe, c(J1, 0, slot=0, seq=0, values=[1], flags=wire.FLAG_RETX))
    assert [p for p, _ in out] == [p0]                      # unicast reply to w0's port
    out = send(pipe, c(J1, 1, slot=0, seq=0, values=[2], flags=wire.FLAG_RETX))
    assert out == [] and counter(pipe, "EgressDropSimulator.dropped", p1) == 2
    udp = wire.eth_ip_udp(w0["mac"], w1["mac"], w0["ip"], w1["ip"], 5000, 5001, 4) + b"ping"
    assert send(pipe, (p0, udp)) == [(p1, udp)]             # forwarded: never impaired
    assert counter(pipe, "DropSimulator.dropped", p0) == counter(pipe, "DropSimulator.dropped", p1) == 0


def test_set_drop_probability_direction_is_checked():
    pipe = InaPipeline(H.pipeline_config(J1))
    pipe.set_drop_probability(2, 0.5, "egress")
    assert pipe.egress_drop_simulator.probability(2) == 0.5 and pipe.drop_simulator.probability(2) == 0
    with pytest.raises(ValueError, match="direction 'out'"):
        pipe.set_drop_probability(2, 0.5, "out")


# -- everything else is forwarded ------------------------------------------------------------
def test_non_ina_frames_forwarded(mode):
    pipe = mk(mode, forwarding=[{"dst_mac": J1["workers"][1]["mac"], "port": 2}])
    w0, w1 = J1["workers"]
    arp = bytes.fromhex("ffffffffffff") + wire.mac_bytes(w0["mac"]) + b"\x08\x06" + bytes(28)
    udp = wire.eth_ip_udp(w0["mac"], w1["mac"], w0["ip"], w1["ip"], 5000, 5001, 4) + b"ping"
    result = wire.build_frame(H.SWITCH_MAC, w1["mac"], H.SWITCH_IP, w1["ip"], wire.INA_PORT_BASE,
                              wire.INA_PORT_BASE, op=0, job_id=1, slot=0, slot_ver=0, worker_id=0,
                              seq=0, values=[1], flags=wire.FLAG_RESULT)
    out = send(pipe, (1, arp), (1, udp), (3, result))
    assert sorted(p for p, f in out if f == arp) == [2, 3]          # flooded, not back to 1
    assert [p for p, f in out if f == udp] == [2]
    assert [p for p, f in out if f == result] == [2]                # results pass through
    assert counter(pipe, "Ingress.ina_packets") == 0
    # Forward.l2_forward is programmable by name
    pipe.tables["Forward.l2_forward"].insert({"dst_addr": w0["mac"]}, "Forward.set_egress", {"port": 1})
    back = wire.eth_ip_udp(w1["mac"], w0["mac"], w1["ip"], w0["ip"], 1, 2, 0)
    assert send(pipe, (2, back)) == [(1, back)]


# -- control API ---------------------------------------------------------------------------
def test_tables_registers_counters_by_p4_name(mode):
    pipe = mk(mode, J1)
    jt = pipe.tables["Ingress.job_table"]
    assert [e["match"] for e in jt.entries()] == [{"job_id": 1}]
    # a job programmed through the tables alone, as a P4Runtime server would
    job = H.job_config(4, 2, slot_base=20, slot_count=2, first_port=1)
    jt.insert({"job_id": 4}, "Ingress.set_job", {"num_workers": 2, "mcast_grp": 77,
                                                  "worker_mask": 0b11, "slot_base": 20, "slot_count": 2})
    rr = pipe.tables["Egress.replica_rewrite"]
    for w in job["workers"]:
        rr.insert({"egress_rid": 0x9000 + w["worker_id"]}, "Egress.rewrite_dst",
                  {"dst_mac": w["mac"], "dst_ip": w["ip"], "dst_port": 41000})
    pipe.multicast_groups.insert(77, [(w["port"], 0x9000 + w["worker_id"]) for w in job["workers"]])
    wp = pipe.tables["Ingress.worker_port"]
    for w in job["workers"]:
        wp.insert({"job_id": 4, "worker_id": w["worker_id"]}, "Ingress.set_worker_port", {"port": w["port"]})
    pipe.tables["Egress.switch_address"].set_default("Egress.set_switch_address",
                                                     {"mac": "02:00:00:00:00:99", "ip": "10.9.9.9"})
    send(pipe, c(job, 0, slot=1, seq=1, values=[1]))
    out = decoded(send(pipe, c(job, 1, slot=1, seq=1, values=[2])))
    assert sorted((p, x.dport, wire.ip_str(x.src_ip)) for p, x in out) == [(1, 41000, "10.9.9.9"), (2, 41000, "10.9.9.9")]
    assert pipe.registers["Aggregator.worker_count"].read(21 * 2) == 2
    # modify / delete / errors
    jt.modify({"job_id": 4}, "Ingress.set_job", {"num_workers": 1, "mcast_grp": 77,
                                                  "worker_mask": 0b11, "slot_base": 20, "slot_count": 2})
    jt.delete({"job_id": 4})
    assert send(pipe, c(job, 0, slot=1, seq=1, values=[1])) == []
    assert counter(pipe, "Ingress.bad_job", 4) == 1
    with pytest.raises(ValueError):
        jt.insert({"job_id": 5}, "Ingress.unknown_job", {})                       # default-only
    with pytest.raises(ValueError):
        jt.insert({"job_id": 5}, "Ingress.set_job", {"num_workers": 2, "mcast_grp": 5, "worker_mask": 1,
                                                      "slot_base": 0, "slot_count": 1})  # mask < workers
    with pytest.raises(ValueError):
        jt.insert({"job_id": 5}, "Ingress.set_job", {"num_workers": 1, "mcast_grp": 5, "worker_mask": 1,
                                                      "slot_base": 4095, "slot_count": 2})  # past the pool
    with pytest.raises(KeyError):
        jt.insert({"job_id": 1}, "Ingress.set_job", {"num_workers": 1, "mcast_grp": 5, "worker_mask": 1,
                                                      "slot_base": 0, "slot_count": 1})  # exists
    with pytest.raises(ValueError):
        pipe.tables["Forward.l2_forward"].insert({"dst_addr": "02:00"}, "Forward.flood", {})
    with pytest.raises(ValueError, match="const"):
        jt.set_default("Ingress.set_job", {"num_workers": 1, "mcast_grp": 5, "worker_mask": 1,
                                           "slot_base": 0, "slot_count": 1})
    # counters are JSON-serializable
    json.dumps(pipe.counters())
    reg = pipe.registers["Aggregator.agg_values"]
    reg.write(5, -1)
    assert reg.read(5) == 0xFFFFFFFF and pipe.aggregator.values[0, 0, 5] == -1


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match=r"jobs\[1\].*overlap"):
        InaPipeline(H.pipeline_config(J1, H.job_config(2, 2, slot_base=4, slot_count=8, first_port=3)))
    with pytest.raises(ValueError, match=r"jobs\[0\].*distinct"):
        bad = H.job_config(1, 2)
        bad["workers"][1]["worker_id"] = 0
        InaPipeline(H.pipeline_config(bad))


def test_registered_as_pipeline_ina():
    pipe = make_pipeline("ina", H.pipeline_config(J1))
    assert isinstance(pipe, InaPipeline)
    assert pipe.process_batch([], [], 0.0) == []


def test_remove_job(mode):
    pipe = mk(mode, J1, J3)
    pipe.remove_job(3)
    assert send(pipe, c(J3, 0, slot=0, seq=0, values=[1])) == []
    assert counter(pipe, "Ingress.bad_job", 3) == 1
    assert [e["match"]["job_id"] for e in pipe.tables["Ingress.worker_port"].entries()] == [1, 1]
    pipe.add_job(J3)                                                   # and back, slots reset
    for w in range(3):
        out = send(pipe, c(J3, w, slot=0, seq=0, values=[1]))
    assert len(out) == 3


def test_a_drop_simulator_is_armed_exactly_while_a_threshold_is_set():
    """armed() is cached between register writes (the switch asks every pass): every
    way the thresholds change (set_probability, a P4Runtime register write, a reset)
    is seen at the next question."""
    from testbed.switch.ina.drop_simulator import DropSimulator, EgressDropSimulator

    for cls in (DropSimulator, EgressDropSimulator):
        d = cls(seed=1)
        assert not d.armed()
        d.set_probability(3, 0.25)
        assert d.armed() and d.probability(3) == 0.25
        d.set_probability(3, 0.0)
        assert not d.armed()
        d.drop_probability.write(7, 1 << 20)            # as the P4Runtime server writes it
        assert d.armed()
        d.drop_probability.reset()
        assert not d.armed()
