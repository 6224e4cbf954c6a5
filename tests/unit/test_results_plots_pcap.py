"""Results folder I/O, figure drawing and the trace summary, on synthetic data."""
from __future__ import annotations

import json

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed import results as res
from testbed.pcap import PcapError, format_summary, summarize
from testbed.plots import PlotError, draw_figures


def _fake_run(tmp_path):
    run_dir = res.new_run_dir("fake", tmp_path)
    manifest = {"status": "ok", "net": "local", "scenario": {
        "name": "fake", "workload": {"kind": "allreduce"}, "topology": {"workers": 4, "kind": "star"}, "switch": {"backend": "soft"},
        "figures": ["goodput_vs_size", "latency_cdf"]}, "machine": {"cpus": 2}, "git": {"commit": "abc"}}
    res.write_json(run_dir / "manifest.json", manifest)
    for idx, alg in enumerate(["ring", "ps"]):
        res.append_jsonl(run_dir / "points.jsonl", {"index": idx, "label": f"{idx}-{alg}", "status": "ok",
                                                    "impairments": []})
        for size in (256, 65536):
            for it in range(5):
                res.append_jsonl(run_dir / "metrics.jsonl", {
                    "point": idx, "case": "baseline", "type": "allreduce", "algorithm": alg, "size": size,
                    "bytes": size * 4, "iter": it, "warmup": False, "latency_s": 1e-3 * (1 + it) * (size / 256) ** 0.5,
                    "ok": True})
    return run_dir


def test_new_run_dir_never_reuses_a_folder(tmp_path):
    a = res.new_run_dir("s", tmp_path)
    b = res.new_run_dir("s", tmp_path)
    assert a != b and (a / "logs").is_dir() and (b / "pcaps").is_dir()


def test_torn_last_line_is_tolerated_but_torn_middle_is_not(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    assert [r["a"] for r in res.read_jsonl(p)] == [1, 2]
    p.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match=":2:"):
        res.read_jsonl(p)


def test_load_run_accepts_scenario_folder_and_rejects_other(tmp_path):
    run_dir = _fake_run(tmp_path)
    assert res.load_run(run_dir.parent).path == run_dir
    with pytest.raises(res.NotARunError, match="no manifest.json"):
        res.load_run(tmp_path)


def test_figures_are_drawn_as_png_and_pdf(tmp_path):
    run = res.load_run(_fake_run(tmp_path))
    paths = draw_figures(run)
    names = sorted(p.name for p in paths)
    assert names == ["goodput_vs_size.pdf", "goodput_vs_size.png", "latency_cdf.pdf", "latency_cdf.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_unknown_figure_is_a_clear_error(tmp_path):
    run = res.load_run(_fake_run(tmp_path))
    with pytest.raises(PlotError, match="unknown figure"):
        draw_figures(run, ["nope"])


def test_a_figure_of_another_workload_is_refused_not_drawn_empty(tmp_path):
    run = res.load_run(_fake_run(tmp_path))
    assert run.manifest["scenario"]["workload"]["kind"] == "allreduce"
    with pytest.raises(PlotError, match=r"p4sgd_scaling.*draw from p4sgd runs.*ran workload 'allreduce'"):
        draw_figures(run, ["p4sgd_scaling"])


def test_a_run_with_no_completed_point_is_refused_not_drawn_empty(tmp_path):
    run_dir = _fake_run(tmp_path)
    points = res.read_jsonl(run_dir / "points.jsonl")
    (run_dir / "points.jsonl").write_text("".join(
        json.dumps(dict(p, status="failed", error="boom")) + "\n" for p in points))
    with pytest.raises(PlotError, match=r"no point completed \(2 point\(s\)"):
        draw_figures(res.load_run(run_dir))
    assert not list((run_dir / "figures").glob("*.png"))


def test_a_figure_with_a_panel_the_run_cannot_feed_is_refused_and_the_others_drawn(tmp_path, monkeypatch):
    from testbed import plots
    from testbed.plots import style as st

    def half_empty(run, out_dir):
        fig, (a, b) = st.plt.subplots(1, 2)
        a.plot([1, 2], [3, 4])
        a.set_title("fed")
        b.axhline(1.0)                      # a reference line is not data
        b.text(0.5, 0.5, "no pairs in this run", transform=b.transAxes)
        b.set_title("starved")
        return st.save(fig, run, out_dir, "half_empty")

    monkeypatch.setitem(plots._FIGURES, "half_empty", half_empty)
    run_dir = _fake_run(tmp_path)
    with pytest.raises(PlotError) as e:
        draw_figures(res.load_run(run_dir), ["half_empty", "goodput_vs_size"])
    msg = str(e.value)
    assert "half_empty" in msg and "'starved' (no pairs in this run)" in msg and "'fed'" not in msg, msg
    assert msg.endswith("(drawn: goodput_vs_size)"), msg
    assert not (run_dir / "figures" / "half_empty.png").exists()
    assert (run_dir / "figures" / "goodput_vs_size.png").stat().st_size > 1000


def test_pcap_summary_counts_flows_hosts_and_retransmissions(tmp_path):
    a, b = "10.0.0.1", "10.0.0.2"
    pkts = [
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=1, flags="PA") / (b"x" * 100),
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=101, flags="PA") / (b"y" * 100),
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=101, flags="PA") / (b"y" * 100),  # retx
        Ether() / IP(src=b, dst=a) / TCP(sport=47000, dport=1000, ack=201, flags="A"),
        Ether() / IP(src=b, dst=a) / UDP(sport=5, dport=6) / b"hello",
    ]
    path = tmp_path / "t.pcap"
    wrpcap(str(path), pkts)
    s = summarize(path).to_dict()
    assert s["packets"] == 5
    assert s["retransmissions"] == 1
    assert s["hosts"][a]["tx_packets"] == 3 and s["hosts"][b]["tx_packets"] == 2
    assert len(s["flows"]) == 3


def test_pcap_summary_of_a_truncated_capture_counts_wire_lengths(tmp_path):
    """Frames cut at a snaplen: bytes, TCP segment lengths and UDP lengths come
    from each record's original length, so the summary matches the whole capture;
    it says the frames were cut. Cut here: a resend of 50 of 100 bytes (no
    retransmission), two datagrams alike in their first bytes (none either)."""
    from testbed.switch.soft.pcap import PcapWriter

    a, b = "10.0.0.1", "10.0.0.2"
    pkts = [
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=1, flags="PA") / (b"x" * 100),
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=101, flags="PA") / (b"y" * 100),
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=101, flags="PA") / (b"y" * 50),
        Ether() / IP(src=a, dst=b) / TCP(sport=1000, dport=47000, seq=1, flags="PA") / (b"x" * 100),  # retx
        Ether() / IP(src=b, dst=a) / TCP(sport=47000, dport=1000, ack=201, flags="A"),
        Ether() / IP(src=b, dst=a) / UDP(sport=5, dport=6) / (b"h" * 40),
        Ether() / IP(src=b, dst=a) / UDP(sport=5, dport=6) / (b"h" * 41),
    ]
    summaries = {}
    for snaplen in (262144, 60):
        path = tmp_path / f"s{snaplen}.pcap"
        with PcapWriter(path, snaplen) as w:
            for i, p in enumerate(pkts):
                w.write(bytes(p), 1700000000 + i * 0.01)
        summaries[snaplen] = summarize(path)
    whole, cut = summaries[262144], summaries[60]
    assert (whole.truncated, whole.snaplen) == (0, None)
    assert (cut.truncated, cut.snaplen) == (6, 60)      # all but the bare ACK (54 bytes)
    assert whole.to_dict()["retransmissions"] == 1
    assert whole.bytes == sum(len(p) for p in pkts)
    for key in ("packets", "bytes", "protocols", "hosts", "flows", "retransmissions"):
        assert cut.to_dict()[key] == whole.to_dict()[key], key
    text = format_summary(cut)
    assert "truncated: frames captured to 60 bytes (snaplen), 6 of 7 cut" in text
    assert "truncated:" not in format_summary(whole)


def test_pcap_bad_input_errors(tmp_path):
    with pytest.raises(PcapError, match="no such file"):
        summarize(tmp_path / "missing.pcap")
    bad = tmp_path / "bad.pcap"
    bad.write_text("not a pcap")
    with pytest.raises(PcapError, match="not a pcap"):
        summarize(bad)
