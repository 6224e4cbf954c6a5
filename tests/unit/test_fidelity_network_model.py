"""Network model: hand-computed small messages and the closed forms at large n."""
from __future__ import annotations

import pytest

from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import (collective_time, p2p_wire_bytes, packet_count,
                                            switch_levels, wire_bytes)
from testbed.wire import MAX_FRAME_LEN

TOFINO = load_profile("tofino1-100g")
HOST = load_profile("tor-100g-host")
B = 100e9 / 8          # bytes/s at 100 Gb/s


def test_packet_count_and_wire_bytes():
    assert [packet_count(v) for v in (0, 1, 64, 65, 1000)] == [1, 1, 1, 2, 16]
    # a full INA frame is 314 B (testbed.wire), + 4 B FCS + 20 B preamble/IFG
    assert MAX_FRAME_LEN == 314
    assert wire_bytes(64, TOFINO) == 338
    # 65 values: one full frame + one with 1 value (58 + 4 + 4 FCS = 66 B)
    assert wire_bytes(65, TOFINO) == 338 + 66 + 20
    # 0 values: header only, 58 + 4 FCS = 62 B, padded to the 64 B minimum frame
    assert wire_bytes(0, TOFINO) == 64 + 20


def test_small_switch_allreduce_by_hand():
    # NIC tx 600 ns + 3 m * 5 ns/m + pipeline 600 ns + 15 ns + NIC rx 600 ns = 1830 ns,
    # plus the 338-byte frame serialized up and down at 100 Gb/s: 2 * 27.04 ns.
    expected = 1830e-9 + 2 * 338 * 8 / 100e9
    for world in (2, 8, 32, 64):
        assert collective_time("allreduce", "switch", 64, 4, world, TOFINO) == pytest.approx(expected, rel=1e-12)
    # beyond 64 ports: one more tree level, one more pass up and down
    extra = 2 * (338 * 8 / 100e9 + 15e-9 + 600e-9)
    assert switch_levels(65, TOFINO) == 2 and switch_levels(4096, TOFINO) == 2 and switch_levels(4097, TOFINO) == 3
    assert collective_time("allreduce", "switch", 64, 4, 65, TOFINO) == pytest.approx(expected + extra, rel=1e-12)


def test_world_one_and_none_cost_nothing_and_bad_input_is_named():
    for algo in ("switch", "ring", "ps", "tree", "none"):
        assert collective_time("allreduce", algo, 4096, 4, 1, TOFINO) == 0.0
    with pytest.raises(ValueError, match="algo 'none' means no communication, but world is 4"):
        collective_time("allreduce", "none", 64, 4, 4, TOFINO)
    with pytest.raises(ValueError, match="algo 'butterfly' is not modeled"):
        collective_time("allreduce", "butterfly", 64, 4, 4, TOFINO)
    with pytest.raises(ValueError, match="op 'alltoall' is not modeled"):
        collective_time("alltoall", "ring", 64, 4, 4, TOFINO)
    with pytest.raises(ValueError, match="carries int32"):
        collective_time("allreduce", "switch", 64, 8, 4, TOFINO)


VALUES = 1 << 26        # 256 MiB of float32 per worker: latency terms < 0.5 %


@pytest.mark.parametrize("world", [2, 8, 32])
def test_switch_tends_to_n_over_b(world):
    t = collective_time("allreduce", "switch", VALUES, 4, world, TOFINO)
    assert t == pytest.approx(wire_bytes(VALUES, TOFINO) / B, rel=0.01)


@pytest.mark.parametrize("profile", [TOFINO, HOST], ids=lambda p: p.name)
@pytest.mark.parametrize("world", [2, 8, 32])
def test_ring_tends_to_2_n_minus_1_over_n(world, profile):
    n = VALUES * 4
    bandwidth = 2 * (world - 1) / world * p2p_wire_bytes(n, profile) / B
    reduction = (world - 1) / world * n / profile["reduce_rate"]
    t = collective_time("allreduce", "ring", VALUES, 4, world, profile)
    assert t == pytest.approx(bandwidth + reduction, rel=0.01)
    # without the reduction term, with the device reducing far above line rate
    fast = profile.with_overrides({"reduce_rate": 1e6})   # 1 PB/s in GB/s units
    assert collective_time("allreduce", "ring", VALUES, 4, world, fast) == pytest.approx(bandwidth, rel=0.01)


@pytest.mark.parametrize("world", [2, 8, 32])
def test_ps_tends_to_2_n_n_over_b(world):
    t = collective_time("allreduce", "ps", VALUES, 4, world, TOFINO)
    assert t == pytest.approx(2 * world * p2p_wire_bytes(VALUES * 4, TOFINO) / B, rel=0.01)


def test_ordering_at_scale_matches_the_worked_example():
    # research/time-fidelity.md 4.1: 100 MB, N = 16 -> in-switch ~8 ms < ring ~15 ms << PS ~256 ms
    values = 25_000_000
    sw, ring, ps = (collective_time("allreduce", a, values, 4, 16, TOFINO) for a in ("switch", "ring", "ps"))
    assert sw < ring < ps
    assert 14e-3 < ring < 18e-3 and 250e-3 < ps < 280e-3


def test_small_window_throttles_the_switch_stream():
    wide = collective_time("allreduce", "switch", 64 * 1000, 4, 8, TOFINO)
    narrow = collective_time("allreduce", "switch", 64 * 1000, 4, 8, TOFINO.with_overrides({"ina_window_packets": 4}))
    # 4 packets per ~1.9 us round trip instead of one per 27 ns
    assert narrow > 5 * wide


def test_agreed_scale_adds_one_single_value_pass_in_the_switch_only():
    from testbed.fidelity.constants import load_profile
    p = load_profile("tofino1-100g")
    plain = collective_time("allreduce", "switch", 8192, 4, 4, p)
    one = collective_time("allreduce", "switch", 1, 4, 4, p)
    assert collective_time("allreduce", "switch", 8192, 4, 4, p, scale_round=True) == pytest.approx(plain + one)
    # host collectives carry floats: no scale to agree on; one worker sends nothing
    assert collective_time("allreduce", "ring", 8192, 4, 4, p, scale_round=True) == \
        collective_time("allreduce", "ring", 8192, 4, 4, p)
    assert collective_time("allreduce", "switch", 8192, 4, 1, p, scale_round=True) == 0.0


def test_allgather_by_hand():
    # tor-100g-host: L0 = 2 us stack + 2 x 600 ns NIC + 2 x 3 m x 5 ns/m + 600 ns pipeline = 3.83 us.
    # A 1000 B block is one datagram: 42 + 1000 B + 4 FCS + 20 preamble/IFG = 1066 B on the wire.
    from testbed.fidelity.network_model import collective_cost
    s_block = 1066 * 8 / 100e9
    ring = collective_cost("allgather", "ring", 250, 4, 4, HOST)
    assert ring.total_s == pytest.approx(3 * (3.83e-6 + 2 * s_block), rel=1e-12)
    assert ring.link_busy_s == pytest.approx(3 * s_block, rel=1e-12)
    # ps: the 4 blocks in, then 4 messages of 4000 B out: 1472 + 1472 + 1056 B of payload,
    # 2 x 1538 + 1122 B on the wire; the last frame (1122 B) crosses the worker's link too.
    s_all = (2 * 1538 + 1122) * 8 / 100e9
    ps = collective_cost("allgather", "ps", 250, 4, 4, HOST)
    assert ps.total_s == pytest.approx(2 * 3.83e-6 + s_block + 4 * s_block + 4 * s_all + 1122 * 8 / 100e9,
                                       rel=1e-12)
    assert ps.link_busy_s == pytest.approx(4 * s_block + 4 * s_all, rel=1e-12)
    assert collective_time("allgather", "ring", 250, 4, 1, HOST) == 0


def test_allgather_scales_as_its_closed_forms_and_refuses_the_switch():
    n = 1 << 20                                            # 4 MiB blocks
    wire = p2p_wire_bytes(4 * n, HOST) * 8 / 100e9
    for world in (4, 16):
        assert collective_time("allgather", "ring", n, 4, world, HOST) == pytest.approx((world - 1) * wire, rel=0.02)
    assert collective_time("allgather", "ps", n, 4, 8, HOST) == pytest.approx(8 * 9 * wire, rel=0.01)
    with pytest.raises(ValueError, match="allgather algo 'switch' is not modeled"):
        collective_time("allgather", "switch", 64, 4, 4, TOFINO)


@pytest.mark.parametrize("op,algo", [("allreduce", "ring"), ("allreduce", "ps"), ("allreduce", "switch"),
                                     ("allgather", "ring"), ("allgather", "ps")])
def test_ranks_that_arrive_together_finish_after_exactly_the_collective_time(op, algo):
    from testbed.fidelity.network_model import finish_after_arrivals
    prof = load_profile("tor-100g-host")
    for values in (1, 1000, 1 << 18):
        for world in (2, 3, 8):
            t = collective_time(op, algo, values, 4, world, prof)
            assert finish_after_arrivals(op, algo, values, 4, [5e-6] * world, prof) == \
                pytest.approx([5e-6 + t] * world, rel=1e-12)


def test_ranks_that_arrive_together_finish_the_tree_by_its_collective_time():
    """In the tree ranks get the sum at different times (rank 0's first child last
    but one...); the last one gets it exactly T_tree after the common arrival."""
    from testbed.fidelity.network_model import finish_after_arrivals
    for values in (1, 1000, 1 << 18):
        for world in (2, 3, 5, 8):
            t = collective_time("allreduce", "tree", values, 4, world, HOST)
            done = finish_after_arrivals("allreduce", "tree", values, 4, [5e-6] * world, HOST)
            assert max(done) == pytest.approx(5e-6 + t, rel=1e-12)
            assert min(done) > 5e-6


def test_a_late_rank_leaves_less_than_a_whole_ring_or_ps_and_nobody_finishes_before_joining():
    from testbed.fidelity.network_model import finish_after_arrivals
    prof = load_profile("tor-100g-host")
    values, late = 1 << 16, [0.0, 0.0, 0.0, 1e-4]
    for algo in ("ring", "ps"):
        t = collective_time("allreduce", algo, values, 4, 4, prof)
        finish = finish_after_arrivals("allreduce", algo, values, 4, late, prof)
        assert all(f >= a for f, a in zip(finish, late))
        assert min(finish) - 1e-4 < 0.9 * t      # the early ranks' work is done already
        assert min(finish) - 1e-4 > 0.1 * t      # but the late rank's part still crosses the network
    switch = finish_after_arrivals("allreduce", "switch", values, 4, late, prof)
    assert switch == pytest.approx([1e-4 + collective_time("allreduce", "switch", values, 4, 4, prof)] * 4)

def test_gloo_by_hand_two_workers_small_bucket():
    """gloo::allreduce of 1000 float32 on 2 workers: 4 segments of 500 B (two per
    rank), one round per phase; a round is the data message (48 B preamble + 500 B)
    after the receiver's 48 B ready notice, or after the other segment's frames."""
    from testbed.fidelity.network_model import gloo_segments, message_time
    assert gloo_segments(4000, 4, 2) == (1000, 4)
    l0 = 1830e-9
    s_data = (42 + 48 + 1000 + 4 + 20) * 8 / 100e9       # one frame: headers + preamble + segment
    s_note = (42 + 48 + 4 + 20) * 8 / 100e9
    data = l0 + 2 * s_data
    notice = l0 + 2 * s_note
    assert message_time(48 + 1000, TOFINO) == pytest.approx(data)
    rnd = data + max(notice, s_data)
    reduce = 2000 / TOFINO["reduce_rate"]                  # (N-1) chunks of 500 values
    assert collective_time("allreduce", "gloo", 1000, 4, 2, TOFINO) == pytest.approx(2 * rnd + s_data + reduce)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_gloo_pays_a_rendezvous_per_round_small_and_tends_to_the_ring_large(world):
    """Small DDP buckets: each round waits for a ready notice, ~1.5-2x the ring
    (measured 1.3-1.7x on the dilated network, docs/pytorch.md); large buffers
    are bandwidth-bound like the ring (within 10 %)."""
    small = collective_time("allreduce", "gloo", 4600, 4, world, TOFINO) / \
        collective_time("allreduce", "ring", 4600, 4, world, TOFINO)
    assert 1.4 < small < 2.1
    big = collective_time("allreduce", "gloo", 4 << 20, 4, world, TOFINO) / \
        collective_time("allreduce", "ring", 4 << 20, 4, world, TOFINO)
    assert 0.95 < big < 1.1


# --- tree (binomial reduce + broadcast, hosts/collectives/tree.py) ----------------------------

def _tree_terms():
    """tor-100g-host, 250 float32 = one 1000 B datagram: 42 + 1000 + 4 FCS + 20 preamble/IFG
    = 1066 B on the wire; a message is L0 (3.83 us) + its frame serialized twice (sender's
    link, receiver's link); the reduction adds 1000 B at reduce_rate."""
    s = 1066 * 8 / 100e9
    return 3.83e-6 + 2 * s, s, 1000 / HOST["reduce_rate"]


def test_tree_by_hand():
    from testbed.fidelity.network_model import collective_cost
    step, s, red = _tree_terms()
    # 2 ranks: 1 -> 0, add; 0 -> 1.
    assert collective_time("allreduce", "tree", 250, 4, 2, HOST) == pytest.approx(2 * step + red, rel=1e-12)
    # 4 ranks (L = 2): 1 -> 0 and 3 -> 2 (round 1), 2 -> 0 (round 2), each added on arrival;
    # then 0 -> 2, 2 -> 3 (0 -> 1 goes out s after 0 -> 2): 2 L step + L red.
    four = collective_cost("allreduce", "tree", 250, 4, 4, HOST)
    assert four.total_s == pytest.approx(4 * step + 2 * red, rel=1e-12)
    assert four.link_busy_s == pytest.approx(4 * s, rel=1e-12)      # rank 0: 2 messages in, 2 out
    # 3 ranks (L = 2, rank 3 missing): 1 -> 0 (round 1), 2 -> 0 (it has no child: it sent at
    # once, so its message is in; 0 adds it right after 1's); 0 -> 2, then 0 -> 1 s later.
    assert collective_time("allreduce", "tree", 250, 4, 3, HOST) == pytest.approx(2 * step + 2 * red + s, rel=1e-12)
    # 8 ranks (L = 3): 2 L step + L red
    assert collective_time("allreduce", "tree", 250, 4, 8, HOST) == pytest.approx(6 * step + 3 * red, rel=1e-12)


def test_a_late_rank_off_the_critical_path_leaves_less_than_a_whole_tree():
    from testbed.fidelity.network_model import finish_after_arrivals
    step, s, red = _tree_terms()
    late = 1e-4
    done = finish_after_arrivals("allreduce", "tree", 250, 4, [0.0, late, 0.0, 0.0], HOST)
    # rank 1 sends to 0 at `late` (2 -> 0 is in long before: 3 -> 2, 2 -> 0 took 2 step + red);
    # 0 adds 1's, then 2's; then sends to 2 (which sends on to 3) and, s later, to 1
    root = late + step + 2 * red
    assert done == pytest.approx([root, root + s + step, root + step, root + 2 * step], rel=1e-12)
    # the early ranks' round is done: less than a whole tree after the last arrival
    assert max(done) - late == pytest.approx(3 * step + 2 * red, rel=1e-12)
    assert max(done) - late < collective_time("allreduce", "tree", 250, 4, 4, HOST)


@pytest.mark.parametrize("world", [4, 16, 64])
def test_tree_is_latency_optimal_and_costs_log2_n_messages_large(world):
    """Small: 2 log2 N steps against the ring's 2 (N - 1); large: 2 log2 N whole
    messages against the ring's ~2 n: the tree loses by ~log2 N."""
    import math
    small = collective_time("allreduce", "tree", 16, 4, world, HOST) / \
        collective_time("allreduce", "ring", 16, 4, world, HOST)
    assert small < 0.7
    n = 1 << 24
    wire = p2p_wire_bytes(4 * n, HOST) * 8 / 100e9
    big = collective_time("allreduce", "tree", n, 4, world, HOST)
    depth = math.ceil(math.log2(world))
    assert big == pytest.approx(2 * depth * wire + depth * 4 * n / HOST["reduce_rate"], rel=0.01)
