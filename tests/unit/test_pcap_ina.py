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
