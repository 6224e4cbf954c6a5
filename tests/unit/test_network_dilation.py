"""Network dilation: the soft switch's delay line and its control file."""
import json
import threading

import pytest

from hosts.common.network_dilation import DilationSettings, ack_path, request
from testbed.switch.soft.dilation import DelayLine, DilationControl

pytestmark = pytest.mark.unit

HW = dict(version=1, tdf=1000.0, latency_s=1.83e-6, link_rate_bps=100e9)


def test_one_frame_leaves_after_dilated_latency_and_two_serializations():
    line = DelayLine(DilationSettings.from_dict(HW))
    frame = b"x" * 90                       # 90 B + FCS = 94 B, + 20 B preamble/IFG = 114 B
    ser = 114 * 8 / 100e9
    [(due, (port, f))] = line.schedule(3, [frame], now=10.0)
    assert port == 3 and f is frame
    assert due == pytest.approx(10.0 + 1000 * (1.83e-6 + 2 * ser), rel=1e-12)


def test_back_to_back_frames_are_paced_at_the_dilated_link_rate():
    line = DelayLine(DilationSettings.from_dict(HW))
    frames = [b"y" * 1476] * 5              # 1500 B on the wire with FCS + preamble/IFG
    dues = [d for d, _ in line.schedule(1, frames, now=0.0)]
    gap = 1000 * 1500 * 8 / 100e9
    assert [b - a for a, b in zip(dues, dues[1:])] == pytest.approx([gap] * 4)
    # another port is independent; the same port continues after its last frame
    assert line.schedule(2, frames[:1], now=0.0)[0][0] == pytest.approx(dues[0])
    assert line.schedule(1, frames[:1], now=0.0)[0][0] == pytest.approx(dues[-1] + gap)


def test_minimum_frame_and_compensation():
    s = DilationSettings.from_dict({**HW, "compensate_s": 1e-3})
    [(due, _)] = DelayLine(s).schedule(0, [b"z" * 10], now=0.0)
    ser = 84 * 8 / 100e9                    # padded to 64 B + 20 B
    assert due == pytest.approx(1000 * (1.83e-6 + 2 * ser) - 1e-3)
    # compensation never makes a frame leave before it arrived
    s = DilationSettings.from_dict({**HW, "compensate_s": 1.0})
    [(due, _)] = DelayLine(s).schedule(0, [b"z" * 10], now=5.0)
    assert 5.0 <= due < 5.0 + 1e-5


@pytest.mark.parametrize("bad, words", [
    ({**HW, "tdf": 0.5}, "tdf must be 0 (off) or >= 1"),
    ({**HW, "latency_s": -1}, "latency_s"),
    ({**HW, "speed": 3}, "unknown keys ['speed']"),
    ({"tdf": 2}, "missing keys"),
    ({**HW, "tdf": "fast"}, "'fast' is not a number"),
])
def test_bad_settings_are_refused_with_the_field(bad, words):
    with pytest.raises(ValueError, match=None) as e:
        DilationSettings.from_dict(bad)
    assert words in str(e.value)


def test_control_file_is_applied_acknowledged_and_turned_off(tmp_path):
    ctl = DilationControl(tmp_path)
    assert not ctl.poll(0.0) and ctl.line is None          # no file: undilated
    (tmp_path / "dilation.json").write_text(json.dumps(HW))
    assert ctl.poll(1.0) and ctl.line is not None and ctl.line.settings.tdf == 1000
    assert json.loads(ack_path(tmp_path / "dilation.json").read_text()) == {"applied": True, "version": 1}
    assert not ctl.poll(2.0)                                # unchanged file: nothing to do
    (tmp_path / "dilation.json").write_text(json.dumps({**HW, "version": 2, "tdf": 0}))
    assert ctl.poll(3.0) and ctl.line is None
    assert [v["tdf"] for v in ctl.stats()["versions"]] == [1000]


def test_control_refuses_a_bad_file_and_keeps_running(tmp_path):
    ctl = DilationControl(tmp_path)
    (tmp_path / "dilation.json").write_text("{not json")
    assert not ctl.poll(0.0) and ctl.line is None
    ack = json.loads(ack_path(tmp_path / "dilation.json").read_text())
    assert ack["applied"] is False and ack["error"]


def test_request_waits_for_the_switch_and_reports_a_refusal(tmp_path):
    ctl = DilationControl(tmp_path)
    stop = threading.Event()

    def switch_loop():
        t = 0.0
        while not stop.is_set():
            t += 1.0
            ctl.poll(t)
            stop.wait(0.002)

    th = threading.Thread(target=switch_loop)
    th.start()
    try:
        request([tmp_path / "dilation.json"], HW, timeout_s=5)
        assert ctl.line is not None and ctl.line.settings.version == 1
    finally:
        stop.set()
        th.join()
    with pytest.raises(TimeoutError, match="no switch acknowledged"):
        request([tmp_path / "dilation.json"], {**HW, "version": 2}, timeout_s=0.1)
    with pytest.raises(ValueError, match="tdf"):
        request([tmp_path / "dilation.json"], {**HW, "tdf": 0.1})


def test_a_version_can_hold_the_impairments_off_and_the_next_turns_them_on(tmp_path):
    ctl = DilationControl(tmp_path)
    assert not ctl.impairments_held                          # no file: impairments as configured
    (tmp_path / "dilation.json").write_text(json.dumps({**HW, "tdf": 0, "impairments": 0}))
    assert ctl.poll(1.0) and ctl.impairments_held and ctl.line is None   # undilated, held
    (tmp_path / "dilation.json").write_text(json.dumps({**HW, "version": 2, "impairments": 0}))
    assert ctl.poll(2.0) and ctl.impairments_held and ctl.line is not None
    (tmp_path / "dilation.json").write_text(json.dumps({**HW, "version": 3}))   # default: applied
    assert ctl.poll(3.0) and not ctl.impairments_held
    st = ctl.stats()
    assert st["impairments_held_in_versions"] == [1, 2] and st["impairments_held_now"] is False
