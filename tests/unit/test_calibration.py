"""Calibration: the agreement vector survives the switch's fixed point, and the
Calibrator's decisions on a dilatable network."""
import numpy as np
import pytest

from hosts.common import calibration as cal
from hosts.ina import fixed_point as fp

pytestmark = pytest.mark.unit


def _through_the_switch(vectors, scale_exp=16):
    """What P4SGD's in-switch SUM does to the agreement vectors (fixed 2^16)."""
    n = len(vectors)
    total = sum(fp.quantize(v, scale_exp, n, "raise")[0].astype(np.int64) for v in vectors)
    return fp.from_fixed(total, scale_exp, np.float64)


def test_a_long_dilated_round_fits_the_fixed_point_and_decides_the_op_time():
    world, n_ops, hw_op = 8, 64, 2e-6
    tdf, start = 20000.0, 1000.0                     # a 40 ms dilated op, round of ~40 s wall
    vectors = []
    for rank in range(world):
        t0 = start + np.arange(n_ops) * 0.6 + rank * 1e-4   # workers submit a little apart
        t1 = start + np.arange(n_ops) * 0.6 + 7e-4 + tdf * hw_op
        vectors.append(cal.encode(list(t0), list(t1), 100.0, rank, world))
    summed = _through_the_switch(vectors)            # raises FixedPointOverflow if too big
    measured, why = cal.decide(summed, n_ops, world, hw_op, fallback=1.0)
    # network time = completion - last submit = 7e-4 - 7e-4 + tdf * hw_op
    assert why["tdf_net"] == pytest.approx(tdf, rel=0.01)
    assert why["tdf_cmp"] == pytest.approx(100.0 * cal.COMPUTE_HEADROOM, rel=0.01)


def test_calibrator_on_a_dilatable_network_sets_headroom_then_compensation():
    asked, delays = [], []
    nd = {"control": [], "hardware": {"latency_s": 1.83e-6, "link_rate_bps": 100e9},
          "headroom": 16.0, "hw_op_s": 2e-6}
    c = cal.Calibrator(2e-6, 500.0, nd, rank=1, expect_delay=delays.append)  # rank 1 writes nothing
    tdf = c.after_round(300.0, {"tdf_net": 300.0, "tdf_cmp": 400.0})
    assert tdf == 4800.0                                 # 16 x 300 > 2 x 400
    # the transport gets the dilated link (its timer floor is per chunk, from it)
    assert [(d.tdf, d.latency_s, d.link_rate_bps) for d in delays] == [(4800.0, 1.83e-6, 100e9)]
    tdf = c.after_round(5000.0, {"tdf_net": 5000.0, "tdf_cmp": 400.0})  # dilated: 4 % over
    assert tdf == 4800.0
    assert c.comp == pytest.approx((5000 - 4800) * 2e-6)
    rec = c.record("w2")
    assert rec["network_dilated"] and rec["tdf"] == 4800.0 and rec["converged"]   # within 10 %
    assert rec["rounds"][1]["net_ratio"] == pytest.approx(5000 / 4800)
    # compensation never exceeds the emulator's own time per op measured undilated in
    # round 0 (300 x 2 us): a dilated round that ran slow for another reason (TCP on a
    # dilated RTT, a loaded machine) once made ShadowSync's messages 0.6x their model
    c.after_round(1e6, {"tdf_net": 1e6, "tdf_cmp": 1.0})
    assert c.comp == pytest.approx(300 * 2e-6)
    assert c.rounds[0]["own_op_s"] == pytest.approx(300 * 2e-6)


def test_compensation_never_exceeds_most_of_the_dilated_hop_latency():
    nd = {"control": [], "hardware": {"latency_s": 1.83e-6, "link_rate_bps": 100e9},
          "headroom": 16.0, "hw_op_s": 1e-4}
    c = cal.Calibrator(1e-4, 500.0, nd, rank=1)     # a long op: its own time is not the cap
    tdf = c.after_round(300.0, {"tdf_net": 300.0, "tdf_cmp": 1.0})
    c.after_round(1e6, {"tdf_net": 1e6, "tdf_cmp": 1.0})
    assert c.comp == pytest.approx(0.9 * tdf * 1.83e-6)
    assert c.comp < 300 * 1e-4


def test_calibrator_without_a_dilatable_network_follows_the_slowdown():
    c = cal.Calibrator(2e-6, 500.0, None, rank=0)
    assert c.after_round(300.0, {"tdf_net": 300.0, "tdf_cmp": 10.0}) == 300.0
    assert c.after_round(400.0, {"tdf_net": 400.0, "tdf_cmp": 10.0}) == pytest.approx(346.0)
    assert c.record("w1")["network_dilated"] is False


def test_calibration_holds_the_impairments_until_it_finishes(tmp_path):
    """Rank 0 asks the switch to hold loss off for every calibration round and to
    apply it, at the final TDF, before the measured run; a fixed TDF applies it."""
    import threading

    from testbed.switch.soft.dilation import DilationControl

    ctl = DilationControl(tmp_path)
    seen, stop = [], threading.Event()

    def switch_loop():
        t = 0.0
        while not stop.is_set():
            t += 1.0
            if ctl.poll(t):
                seen.append((ctl.line.settings.tdf if ctl.line else 0.0, ctl.impairments_held))
            stop.wait(0.002)

    th = threading.Thread(target=switch_loop)
    th.start()
    nd = {"control": [str(tmp_path / "dilation.json")],
          "hardware": {"latency_s": 1.83e-6, "link_rate_bps": 100e9}, "headroom": 16.0, "hw_op_s": 2e-6}
    try:
        c = cal.Calibrator(2e-6, 500.0, nd, rank=0)
        c.start()
        c.after_round(300.0, {"tdf_net": 300.0, "tdf_cmp": 400.0})
        c.after_round(4800.0, {"tdf_net": 4800.0, "tdf_cmp": 400.0})
        c.finish()
        cal.Calibrator(0.0, 700.0, nd, rank=0).dilate(700.0)      # fixed time_scale: no calibration
    finally:
        stop.set()
        th.join()
    assert seen == [(0.0, True), (4800.0, True), (4800.0, True), (4800.0, False), (700.0, False)]


def test_no_worker_measures_before_the_switch_holds_its_impairments(tmp_path):
    """With the workers' barrier, a worker that is not rank 0 starts round 0 only once
    the switch holds loss off. PHub's pushes wait for nobody: without it a push
    lost before rank 0's request could put a TCP retransmission timeout (200 ms or
    more) into a one-op round 0."""
    import threading

    from testbed.switch.soft.dilation import DilationControl

    ctl = DilationControl(tmp_path)
    stop = threading.Event()

    def slow_switch_loop():            # a busy switch: reads its control file late
        t = 0.0
        stop.wait(0.2)
        while not stop.is_set():
            t += 1.0
            ctl.poll(t)
            stop.wait(0.002)

    nd = {"control": [str(tmp_path / "dilation.json")],
          "hardware": {"latency_s": 1.83e-6, "link_rate_bps": 100e9}, "headroom": 16.0, "hw_op_s": 2e-6}
    barrier = threading.Barrier(2, timeout=10).wait
    held_at_first_op = {}

    def worker(rank):
        c = cal.Calibrator(2e-6, 500.0, nd, rank=rank)
        c.start(lambda: barrier())
        held_at_first_op[rank] = ctl.impairments_held

    th = threading.Thread(target=slow_switch_loop)
    th.start()
    try:
        ranks = [threading.Thread(target=worker, args=(r,)) for r in (1, 0)]
        for t in ranks:
            t.start()
        for t in ranks:
            t.join(10)
    finally:
        stop.set()
        th.join()
    assert held_at_first_op == {0: True, 1: True}


def test_the_record_shows_the_ops_a_round_measured():
    """An outlier round names its op times (one stalled op reads like a slow emulator)."""
    world, hw = 2, 10e-6
    t0 = [[0.0, 1.0], [0.0, 1.0]]
    t1 = [[0.2, 1.001], [0.2, 1.001]]      # op 0 stalled 200 ms, op 1 took 1 ms
    summed = sum(cal.encode(t0[r], t1[r], None, r, world) for r in range(world))
    _, why = cal.decide(summed, 2, world, hw, fallback=1.0)
    assert why["op_net_s"]["n"] == 2
    assert why["op_net_s"]["max"] == pytest.approx(0.2, rel=1e-3)
    assert why["op_net_s"]["min"] == pytest.approx(1e-3, rel=1e-3)
    d = cal.encode_messages([0.2, 1e-3], None, 0, 1)
    _, why = cal.decide_messages(d, 2, 1, hw, fallback=1.0)
    assert why["op_net_s"]["p50"] == pytest.approx(0.1005, rel=1e-3)


# ---- headroom "auto": the TDF the validity rule needs, from round 0's slowdown distribution

def _dilated_ratios(slowdowns, tdf):
    """What the monitor reads on the delay line with no compensation (the rule's worst
    case): each op's dilated hardware time plus the emulator's own time in series."""
    return 1 + np.asarray(slowdowns) / tdf


def test_auto_headroom_is_the_agreement_bound_on_the_median_where_the_tail_is_light():
    s = np.linspace(250, 350, 40)                  # a light tail: p99 / p50 < 1.5
    tdf, why = cal.dilated_decision(float(np.median(s)), None, "auto", 1.0, cal.slowdown_summary(s))
    assert why["by"] == "agreement" and why["rule"] == "measured"
    assert tdf == pytest.approx(np.median(s) / cal.AGREEMENT_TOLERANCE, rel=0.05)   # 6.7 x: above the band's 4 x
    assert why["factor"] == pytest.approx(1 / 0.15, rel=0.05)
    assert why["slowdown"]["n"] == 40 and why["slowdown"]["max"] == 350


def test_auto_headroom_follows_a_heavy_tail():
    s = np.r_[np.full(90, 100.0), np.full(10, 5000.0)]   # one op in ten stalls 50x longer
    summary = cal.slowdown_summary(s)
    tdf, why = cal.dilated_decision(100.0, None, "auto", 1.0, summary)
    assert why["by"] == "tail"
    assert tdf == pytest.approx(cal.TAIL_MARGIN * summary["p99"] / (cal.P99_INVALID - 1), rel=0.05)
    assert 1 + summary["p99"] / tdf <= cal.P99_INVALID / cal.TAIL_MARGIN + 1


def test_fixed_headroom_keeps_the_older_rule_and_compute_can_still_decide():
    assert cal.dilated_tdf(300.0, None, 16.0, 1.0) == 4800.0
    tdf, why = cal.dilated_decision(300.0, 2000.0, "auto", 1.0, cal.slowdown_summary([300.0] * 8))
    assert tdf == 4000.0 and why["by"] == "compute" and "compute" in why["why"]


@pytest.mark.parametrize("seed", range(20))
def test_the_auto_rule_keeps_any_measured_distribution_valid_without_compensation(seed):
    rng = np.random.default_rng(seed)
    s = rng.lognormal(mean=np.log(rng.uniform(10, 5000)), sigma=rng.uniform(0.05, 2.0), size=rng.integers(5, 65))
    summary = cal.slowdown_summary(s)
    tdf, _ = cal.dilated_decision(summary["p50"], None, "auto", 1.0, summary)
    r = _dilated_ratios(s, tdf)
    lo, hi = cal.VALID_BAND
    # (rounding the TDF to 2 significant digits may cost up to 5 %)
    assert np.median(r) <= hi * 1.05 and np.percentile(r, 99) <= cal.P99_INVALID
    assert np.median(r) - 1 <= cal.AGREEMENT_TOLERANCE * 1.05


def test_round_0_records_the_distribution_and_the_headroom_it_chose():
    nd = {"control": [], "hardware": {"latency_s": 1.83e-6, "link_rate_bps": 100e9},
          "headroom": "auto", "hw_op_s": 2e-6}
    world, n_ops, hw_op = 2, 12, 2e-6
    vectors = []
    for rank in range(world):
        t0 = 1.0 + np.arange(n_ops) * 0.01
        t1 = t0 + hw_op * np.r_[np.full(n_ops - 1, 300.0), 900.0]   # one slower op
        vectors.append(cal.encode(list(t0), list(t1), None, rank, world))
    measured, why = cal.decide(sum(vectors), n_ops, world, hw_op, fallback=1.0)
    assert why["slowdown"]["n"] == n_ops and why["slowdown"]["max"] == pytest.approx(900, rel=0.01)
    c = cal.Calibrator(hw_op, 1.0, nd, rank=1)
    tdf = c.after_round(measured, why)
    head = c.rounds[0]["headroom"]
    assert tdf == pytest.approx(300 / 0.15, rel=0.05) and head["by"] == "agreement"
    assert head["slowdown"]["p99"] > head["slowdown"]["p50"]
    assert c.record("w1")["headroom"] == "auto"


def test_the_monitor_reads_the_rule_calibration_aims_at():
    from testbed.fidelity import monitor
    assert monitor.DEFAULT_BAND == cal.VALID_BAND


def test_compensation_never_takes_more_than_half_the_bands_lower_margin():
    # a short op whose emulator share is large next to the dilated op (low headroom): the
    # compensation is capped at (1 - 0.8) / 2 of the dilated op, so the network can never
    # be pushed below 0.9 x TDF by it (uncapped: 0.73 x TDF was measured)
    nd = {"control": [], "hardware": {"latency_s": 1e-3, "link_rate_bps": 100e9}, "headroom": "auto",
          "hw_op_s": 2e-6}
    c = cal.Calibrator(2e-6, 1.0, nd, rank=1)
    tdf = c.after_round(300.0, {"tdf_net": 300.0, "tdf_cmp": 1.0, "slowdown": cal.slowdown_summary([300.0] * 8)})
    c.after_round(5 * tdf, {"tdf_net": 5 * tdf, "tdf_cmp": 1.0})
    assert c.comp == pytest.approx(cal.COMPENSATION_MAX_SHARE * tdf * 2e-6)
    assert c.comp < c.own_op_s


def test_show_says_which_headroom_a_point_used_and_why():
    from testbed.fidelity.records import headroom_line
    c = cal.Calibrator(2e-6, 1.0, {"control": [], "hardware": {"latency_s": 1.83e-6, "link_rate_bps": 100e9},
                                   "headroom": "auto", "hw_op_s": 2e-6}, rank=1)
    c.after_round(300.0, {"tdf_net": 300.0, "tdf_cmp": 1.0, "slowdown": cal.slowdown_summary([250.0, 300.0, 900.0])})
    line = headroom_line([c.record("w1")])
    assert line.startswith("headroom: TDF 2000 = 6.67 x the median slowdown 300, p99 ")
    assert "measured rule, set by agreement" in line
    old = {"network_dilated": True, "headroom": 16.0, "rounds": [{"tdf_net": 300.0, "tdf_out": 4800.0}]}
    assert headroom_line([old]) == "headroom: fixed 16.0 x the median slowdown 300"
    assert headroom_line([{"network_dilated": False, "rounds": [{}]}]) is None
