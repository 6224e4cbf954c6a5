"""`testbed pcap`'s protocol decoder on frames the real switch pipeline produced."""
from __future__ import annotations

import numpy as np
from scapy.utils import wrpcap
from scapy.layers.l2 import Ether

from ina_harness import contribution, job_config, pipeline_config
from testbed import wire
from testbed.pcap_ina import analyze
from testbed.switch.ina.pipeline import InaPipeline


def test_decoder_counts_chunks_retransmissions_and_latency(tmp_path):
    job = job_config(1, 2)
    pipe = InaPipeline(pipeline_config(job))
    vals = np.arange(4, dtype=np.int32)
    w0 = contribution(job, 0, slot=0, seq=0, values=vals)
    w0_retx = contribution(job, 0, slot=0, seq=0, values=vals, flags=wire.FLAG_RETX)
    w1 = contribution(job, 1, slot=0, seq=0, values=vals)
    t, inputs, outputs = 100.0, [], []
    for i, (frame, port) in enumerate([(w0, 1), (w0_retx, 1), (w1, 2)]):  # w0 resends before w1 arrives
        inputs.append((t + i * 0.001, frame))
        for _, out in pipe.process_batch([frame], [port], t + i * 0.001):
            outputs.append((t + i * 0.001 + 0.0005, out))
    assert len(outputs) == 2, "the last contribution multicasts one result per worker"
    paths = []
    for name, frames in (("s1-eth1_in.pcap", inputs), ("s1-eth1_out.pcap", outputs)):
        pkts = []
        for ts, f in frames:
            p = Ether(f)
            p.time = ts
            pkts.append(p)
        wrpcap(str(tmp_path / name), pkts)
        paths.append(tmp_path / name)
    a = analyze(paths).to_dict()
    assert a["contributions"] == 3 and a["results"] == 2
    assert a["chunks"] == 1 and a["completed_chunks"] == 1
    assert a["retransmissions"] == 1 and a["duplicates"] == 0
    lat = a["completion_latency_s"]
    assert lat and abs(lat["p50"] - 0.0025) < 1e-5     # first contribution -> first result
    assert a["per_worker"]["job1/worker0"]["contributions"] == 2
    assert a["per_worker"]["job1/worker0"]["retransmissions"] == 1
    text = analyze(paths).format(show_packets=5)
    assert "RETX" in text and "RESULT" in text


def test_contributions_refused_by_the_port_binding_are_shown(tmp_path):
    """A point folder as a run leaves it: worker 1 (port 2) also sends as worker 0.
    `testbed pcap` names those frames as refused by the port binding (from the
    job plan and the ingress pcap they are in), keeps them out of the
    aggregation statistics, and shows the switch's Ingress.bad_port counter."""
    import json

    from click.testing import CliRunner

    from testbed.cli import main
    from testbed.switch.control_plane import JOBS_FILE

    job = job_config(1, 2)
    pipe = InaPipeline(pipeline_config(job))
    vals = np.arange(4, dtype=np.int32)
    forged = contribution(job, 0, slot=0, seq=0, values=vals * 100)
    arrivals = [(1, contribution(job, 0, slot=0, seq=0, values=vals)), (2, forged),
                (2, contribution(job, 1, slot=0, seq=0, values=vals)), (2, forged)]
    pcaps = {1: [], 2: []}
    for i, (port, frame) in enumerate(arrivals):
        pkt = Ether(frame)
        pkt.time = 100.0 + i * 0.001
        pcaps[port].append(pkt)
        pipe.process_batch([frame], [port], 0.0)
    run = tmp_path / "run"
    pdir, ldir = run / "pcaps" / "p0", run / "logs" / "p0"
    pdir.mkdir(parents=True)
    ldir.mkdir(parents=True)
    for port, pkts in pcaps.items():
        wrpcap(str(pdir / f"s1-eth{port}_in.pcap"), pkts)
    (ldir / JOBS_FILE).write_text(json.dumps({"switch": "s1", "jobs": [job]}))
    counters = {"Ingress.bad_port": {str(k): {"packets": v, "bytes": 0}
                                     for k, v in pipe.counters()["Ingress.bad_port"]["by_index"].items()}}
    (run / "metrics.jsonl").write_text(json.dumps({"type": "switch_counters", "label": "p0",
                                                   "switch": "s1", "counters": counters}) + "\n")

    a = analyze(sorted(pdir.glob("*.pcap"))).to_dict()
    assert a["refused_by_port_binding"] == [{"job": 1, "worker": 0, "port": 2, "bound_port": 1, "packets": 2}]
    assert a["per_worker"]["job1/worker0"]["contributions"] == 1       # only the real one
    assert a["duplicates"] == 0 and a["chunks"] == 1
    assert a["switch_refusals"] == {"s1": {"Ingress.bad_port": {"1": 2}}}
    out = CliRunner().invoke(main, ["pcap", str(pdir), "--packets", "4"])
    assert out.exit_code == 0, out.output
    assert "refused by the port binding" in out.output
    assert "job1/worker0 arriving on port 2 (bound to port 1): 2" in out.output
    assert "s1 job 1: Ingress.bad_port 2 (worker id not bound to the ingress port" in out.output
    assert out.output.count(" refused ") >= 2                          # the packet list marks them


def _write_point_pcaps(pdir, records, snaplen):
    """records: (port, direction, ts, frame) -> <pdir>/s1-eth<port>_<direction>.pcap,
    written by the switch's own PcapWriter at `snaplen`."""
    from testbed.switch.soft.pcap import PcapWriter

    pdir.mkdir(parents=True)
    writers = {}
    for port, direction, ts, frame in records:
        key = f"s1-eth{port}_{direction}.pcap"
        if key not in writers:
            writers[key] = PcapWriter(pdir / key, snaplen)
        writers[key].write(frame, ts)
    for w in writers.values():
        w.close()
    return sorted(pdir.glob("*.pcap"))


def test_truncated_captures_decode_as_whole_ones_and_say_so(tmp_path):
    """The same frames captured whole and cut to 64 bytes (switch.capture_bytes):
    identical chunk and worker statistics and trace summaries (bytes at their wire
    length); records keep the original length; the summaries say they were cut."""
    from click.testing import CliRunner
    from scapy.utils import RawPcapReader

    from testbed.cli import main
    from testbed.pcap import summarize

    job = job_config(1, 3, slot_count=8)
    pipe = InaPipeline(pipeline_config(job))
    vals = np.arange(16, dtype=np.int32)
    sends = [(w, seq, 0) for seq in range(8) for w in range(3)]
    sends.insert(4, (1, 0, wire.FLAG_RETX))         # w1 resends chunk 0
    sends.insert(9, (2, 2, 0))                      # w2 sends chunk 2 twice: a duplicate
    records, t = [], 200.0
    for w, seq, flags in sends:
        frame = contribution(job, w, slot=seq, seq=seq, values=vals + w, flags=flags, window=8)
        t += 0.001
        records.append((w + 1, "in", t, frame))
        for port, out in pipe.process_batch([frame], [w + 1], t):
            records.append((port, "out", t + 0.0002, out))
    snap = 64
    assert all(len(f) > snap for *_, f in records)                    # every frame gets cut
    whole = _write_point_pcaps(tmp_path / "whole", records, 262144)
    cut = _write_point_pcaps(tmp_path / "cut", records, snap)

    by_file = {}
    for p in cut:
        with RawPcapReader(str(p)) as r:
            assert r.snaplen == snap
            by_file[p.name] = [(len(data), meta.caplen, meta.wirelen) for data, meta in r]
    port1_in = [len(f) for port, d, _, f in records if (port, d) == (1, "in")]
    assert by_file["s1-eth1_in.pcap"] == [(snap, snap, n) for n in port1_in]

    a_whole, a_cut = analyze(whole).to_dict(), analyze(cut).to_dict()
    assert a_whole["chunks"] == a_whole["completed_chunks"] == 8
    assert (a_whole["retransmissions"], a_whole["duplicates"]) == (1, 1)
    # w1's results: its 8 chunks' multicast copies and the unicast answer to its resend.
    assert a_whole["per_worker"]["job1/worker1"] == {"contributions": 9, "retransmissions": 1, "results": 9}
    assert a_whole["results"] == 8 * 3 + 2     # per worker and chunk, and to each late copy
    assert a_whole.pop("truncated_packets") == 0
    assert a_cut.pop("truncated_packets") == a_cut["packets"] == len(records)
    assert a_cut == a_whole

    for pw, pc in zip(whole, cut):
        s_whole, s_cut = summarize(pw).to_dict(), summarize(pc).to_dict()
        assert (s_whole.pop("truncated_frames"), s_whole.pop("snaplen")) == (0, None)
        assert (s_cut.pop("truncated_frames"), s_cut.pop("snaplen")) == (s_cut["packets"], snap)
        s_whole.pop("path"), s_cut.pop("path")
        assert s_cut == s_whole, pc.name

    out_cut = CliRunner().invoke(main, ["pcap", str(tmp_path / "cut")])
    assert out_cut.exit_code == 0, out_cut.output
    assert out_cut.output.count(f"truncated: frames captured to {snap} bytes (snaplen)") == len(cut)
    assert f"truncated: {len(records)} packets captured without all their values" in out_cut.output
    out_whole = CliRunner().invoke(main, ["pcap", str(tmp_path / "whole")])
    assert out_whole.exit_code == 0 and "truncated:" not in out_whole.output
    # The aggregation lines are the same but for the truncation note.
    ina = lambda text: [ln for ln in text[text.index("in-network aggregation:"):].splitlines()  # noqa: E731
                        if not ln.startswith("  truncated:")]
    assert ina(out_cut.output) == ina(out_whole.output)


def test_results_per_worker_are_those_addressed_to_it_and_retransmissions_count_once(tmp_path):
    """A point folder as a run leaves it (per-port pcaps, the job plan with host
    names): each worker's results are the result frames in its port's _out pcap
    (addressed to its IP), workers are named as the scenario's hosts, and the
    decoder's, the flow summary's and the RETX flags' retransmission counts agree."""
    import json

    from testbed.pcap import summarize

    job = job_config(1, 3, slot_count=8)
    for i, w in enumerate(job["workers"]):
        w["host"] = f"w{i + 1}"
    pipe = InaPipeline(pipeline_config(job))
    vals = np.arange(8, dtype=np.int32)
    sends = [(w, seq, 0) for seq in range(6) for w in range(3)]
    sends += [(0, 1, wire.FLAG_RETX), (2, 4, wire.FLAG_RETX), (2, 5, wire.FLAG_RETX)]   # late resends
    records, t = [], 300.0
    for w, seq, flags in sends:
        frame = contribution(job, w, slot=seq, seq=seq, values=vals, flags=flags, window=8)
        t += 0.001
        records.append((w + 1, "in", t, frame))
        for port, out in pipe.process_batch([frame], [w + 1], t):
            records.append((port, "out", t + 0.0002, out))
    run = tmp_path / "run"
    pdir, ldir = run / "pcaps" / "p0", run / "logs" / "p0"
    ldir.mkdir(parents=True)
    paths = _write_point_pcaps(pdir, records, 262144)
    (ldir / "ina-jobs.json").write_text(json.dumps({"switch": "s1", "jobs": [job]}))

    a = analyze(paths).to_dict()
    assert sorted(a["per_worker"]) == ["job1/w1", "job1/w2", "job1/w3"]
    for port in (1, 2, 3):
        out_frames = sum(1 for p, d, *_ in records if (p, d) == (port, "out"))
        assert a["per_worker"][f"job1/w{port}"]["results"] == out_frames
    retx_flagged = sum(1 for _, d, _, f in records if d == "in" and f[wire.INA_OFFSET + wire.FLAGS_OFFSET]
                       & wire.FLAG_RETX)
    assert retx_flagged == 3
    assert a["retransmissions"] == sum(v["retransmissions"] for v in a["per_worker"].values()) == retx_flagged
    assert sum(summarize(p).to_dict()["retransmissions"] for p in paths) == retx_flagged
