"""bench/ndr.py: the no-drop-rate bisection, against stand-in devices."""
import pytest

from bench import ndr


def device(capacity_pps: float, sender_max_pps: float = float("inf")):
    """A device that forwards up to capacity_pps and drops the rest; the
    sender offers at most sender_max_pps. Records the rates asked."""
    asked: list[int] = []

    def trial(rate: int) -> dict:
        asked.append(rate)
        sent = min(rate, sender_max_pps)
        delivered = min(sent, capacity_pps)
        return {"sent": int(sent * 2), "sent_pps": sent, "delivered_pps": delivered,
                "loss_pct": 100.0 * (1 - delivered / sent)}
    return trial, asked


def test_finds_the_capacity_of_a_device_that_drops_above_it_within_the_resolution():
    trial, asked = device(capacity_pps=300_000)
    res = ndr.search(trial, 560_000, steps=6)
    assert res["limited_by"] == "device"
    assert len(res["trials"]) == 7 and asked[0] == 560_000
    assert 300_000 - res["resolution_pps"] <= res["ndr_pps"] <= 300_000
    assert res["resolution_pps"] == pytest.approx(560_000 / 64, abs=1)
    assert all(ndr.passed(t) == (t["rate_asked_pps"] <= 300_000) for t in res["trials"])


def test_a_pass_at_the_top_of_the_range_ends_the_search():
    trial, asked = device(capacity_pps=1e9)
    res = ndr.search(trial, 500_000)
    assert (res["limited_by"], res["ndr_pps"], asked) == ("range", 500_000, [500_000])


def test_a_sender_that_cannot_offer_the_rate_ends_the_search_as_sender_bound():
    trial, asked = device(capacity_pps=1e9, sender_max_pps=400_000)
    res = ndr.search(trial, 500_000)
    assert res["limited_by"] == "sender" and res["ndr_pps"] == 400_000 and len(asked) == 1


def test_loss_just_over_the_bound_fails_a_trial_and_just_under_passes():
    def trial(rate: int, loss: float) -> dict:
        return {"sent": 1000, "sent_pps": rate, "delivered_pps": rate * (1 - loss / 100), "loss_pct": loss}
    under = ndr.search(lambda r: trial(r, ndr.LOSS_OK_PCT), 100_000, steps=3)
    over = ndr.search(lambda r: trial(r, ndr.LOSS_OK_PCT * 1.01), 100_000, steps=3)
    assert under["limited_by"] == "range"
    assert over["ndr_pps"] == 0.0 and over["limited_by"] == "device" and len(over["trials"]) == 4


def test_a_trial_that_sent_nothing_fails():
    res = ndr.search(lambda r: {"sent": 0, "sent_pps": 0.0, "delivered_pps": 0.0, "loss_pct": 0.0},
                     1000, steps=2)
    assert res["ndr_pps"] == 0.0 and len(res["trials"]) == 3


@pytest.mark.parametrize("hi,steps", [(0, 6), (-1, 6), (1000, -1)])
def test_bad_search_bounds_are_refused(hi, steps):
    with pytest.raises(ValueError):
        ndr.search(lambda r: {}, hi, steps)


def test_the_cost_per_frame_is_read_at_the_no_drop_rate_and_compared_with_the_bridge(monkeypatch):
    """bench.switch_forwarding.no_drop_rates: each kind's machine CPU per frame is
    taken from its fastest passing trial (a lossy trial's frames that were dropped
    cost CPU too and would inflate it), and the bridge's cost over the switch's
    is the ratio the costs alone allow."""
    import argparse

    from bench import switch_forwarding as sf

    capacity = {"bridge": 600_000, "soft_fast": 450_000}
    cost_us = {"bridge": 3.0, "soft_fast": 4.0}

    def measure(net, kind, rate, duration, size, work, rep=0):
        delivered = min(rate, capacity[kind])
        lossy = delivered < rate           # a lossy trial: what dropped frames cost counted too
        return {"sent": rate * 2, "sent_pps": rate, "delivered_pps": delivered,
                "loss_pct": 100.0 * (1 - delivered / rate),
                "machine_cpu_us_per_delivered": cost_us[kind] * (1.5 if lossy else 1.0),
                "switch_cpu_us_per_pkt": None if kind == "bridge" else 1.0,
                "switch_user_us_per_pkt": None if kind == "bridge" else 0.2}

    monkeypatch.setattr(sf, "measure", measure)
    a = argparse.Namespace(ndr="bridge,soft_fast", ndr_max=620_000, repeats=2, ndr_duration=1.0,
                           size=172, ndr_steps=6)
    out = sf.no_drop_rates(None, a, [], None)
    assert out["kinds"]["soft_fast"]["machine_cpu_us_per_frame"] == pytest.approx(4.0)
    assert out["kinds"]["bridge"]["machine_cpu_us_per_frame"] == pytest.approx(3.0)
    assert out["cpu_cost_ratio_soft_fast_over_bridge"] == pytest.approx(0.75)
    assert out["kinds"]["soft_fast"]["switch_user_us_per_frame"] == pytest.approx(0.2)
    assert out["ratio_soft_fast_over_bridge"] == pytest.approx(
        out["kinds"]["soft_fast"]["ndr_pps"] / out["kinds"]["bridge"]["ndr_pps"])
