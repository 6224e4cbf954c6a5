"""testbed.net.captures: a tcpdump pcap is judged whole by its interface's counters
and by tcpdump's exit statistics. (With real tcpdump and a frame burst just
before the stop: tests/mininet/test_network.py.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed.net import captures
from testbed.net.captures import Captures, _Capture, _count_new_records, _lost_frames, _tcpdump_statistics

pytestmark = pytest.mark.unit


def _frames(n: int) -> list:
    return [Ether() / IP(dst="10.0.0.2") / UDP(dport=7002) / (b"x" * i) for i in range(n)]


def _capture(pcap: Path, log: Path) -> _Capture:
    return _Capture("w1", "w1-eth0", pcap, log, proc=None)  # type: ignore[arg-type]


def test_records_are_counted_as_they_are_written_never_a_half_written_one(tmp_path):
    whole = tmp_path / "whole.pcap"
    wrpcap(str(whole), _frames(5))
    data = whole.read_bytes()
    pcap = tmp_path / "w1-eth0.pcap"
    c = _capture(pcap, tmp_path / "log")
    pcap.write_bytes(data[:10])                 # not even the file header yet
    _count_new_records(c)
    assert c.frames == 0
    cut = len(data) - 20                        # the last record half written
    pcap.write_bytes(data[:cut])
    _count_new_records(c)
    assert c.frames == 4
    pcap.write_bytes(data)
    _count_new_records(c)
    assert c.frames == 5 and c.offset == len(data)


@pytest.mark.parametrize("log, problem", [
    ("3660 packets captured\n3660 packets received by filter\n0 packets dropped by kernel\n", None),
    ("1571 packets captured\n1829 packets received by filter\n0 packets dropped by kernel\n",
     "tcpdump wrote 1571 of the 1829 frames its filter received"),
    ("10 packets captured\n12 packets received by filter\n2 packets dropped by kernel\n",
     "tcpdump wrote 10 of the 12 frames its filter received; the kernel dropped 2 frames before "
     "tcpdump read them"),
    ("tcpdump: listening on w1-eth0, link-type EN10MB (Ethernet)\n",
     "tcpdump printed no statistics (it was killed, or never ran: see its log)"),
])
def test_tcpdump_statistics_say_what_was_lost(tmp_path, log, problem):
    path = tmp_path / "tcpdump-w1-eth0.log"
    path.write_text(log)
    assert _lost_frames(_tcpdump_statistics(path)) == problem


def _fake_tcpdump(pcap: Path, frames: int, log: Path, delay_s: float, late: int = 0) -> subprocess.Popen:
    """Writes the pcap's header at once, its frames after delay_s (a block libpcap
    hands over late), then its statistics on SIGTERM, as tcpdump does; `late`
    frames reached its filter after those and are lost at SIGTERM."""
    whole = pcap.with_suffix(".whole")
    wrpcap(str(whole), _frames(frames))
    code = (f"import signal, sys, time\n"
            f"data = open({str(whole)!r}, 'rb').read()\n"
            f"out = open({str(pcap)!r}, 'wb'); out.write(data[:24]); out.flush()\n"
            f"def stop(*_):\n"
            f"    open({str(log)!r}, 'w').write('{{0}} packets captured\\n{frames + late} packets received by filter\\n"
            f"0 packets dropped by kernel\\n'.format(written)); sys.exit(0)\n"
            f"written = 0\n"
            f"signal.signal(signal.SIGTERM, stop)\n"
            f"time.sleep({delay_s}); out.write(data[24:]); out.flush(); written = {frames}\n"
            f"time.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.parametrize("delay_s, whole", [(1.2, True), (30.0, False)])
def test_the_stop_waits_for_the_frames_the_interface_counted(tmp_path, monkeypatch, delay_s, whole):
    monkeypatch.setattr(captures, "DRAIN_LIMIT_S", 3.0)
    counter = {"n": 1000}

    def spawn(node, argv, log):
        pcap = Path(argv[argv.index("-w") + 1])
        return _fake_tcpdump(pcap, 40, log, delay_s)

    def read_frames(node, intf):
        return counter["n"]

    caps = Captures(tmp_path, tmp_path, None, spawn, read_frames, lambda pid, role: None)
    caps.start("w1", ["w1-eth0"])
    counter["n"] += 40                           # the interface sent and received 40 frames
    caps.stop()
    assert all(p.poll() is not None for p in caps.processes)
    if whole:
        assert caps.problems == []
    else:
        assert caps.problems == ["capture w1-eth0: tcpdump wrote 0 of the 40 frames its filter received "
                                 "(see tcpdump-w1-eth0.log)"]


@pytest.mark.parametrize("dropped", [0, 1])
def test_frames_after_the_window_are_a_note_when_the_pcap_holds_all_counted_before(tmp_path, monkeypatch,
                                                                                     dropped):
    """A frame that reaches the interface after the drain's last look (a kernel's ARP
    probe once the programs stopped) and is lost at SIGTERM is noted, not a problem:
    the pcap holds every frame counted until then. Kernel drops stay a problem."""
    monkeypatch.setattr(captures, "DRAIN_LIMIT_S", 3.0)
    counter = {"n": 1000}

    def spawn(node, argv, log):
        pcap = Path(argv[argv.index("-w") + 1])
        return _fake_tcpdump(pcap, 40, log, 0.3, late=1)

    caps = Captures(tmp_path, tmp_path, None, spawn, lambda node, intf: counter["n"], lambda pid, role: None)
    caps.start("w1", ["w1-eth0"])
    counter["n"] += 40
    if dropped:
        # the kernel dropped a frame: which frames the pcap lacks is unknown
        original = captures._tcpdump_statistics
        monkeypatch.setattr(captures, "_tcpdump_statistics",
                            lambda log: {**original(log), "dropped by kernel": 1})
    caps.stop()
    log = tmp_path / "tcpdump-w1-eth0.log"
    if dropped:
        assert caps.notes == []
        assert caps.problems == ["capture w1-eth0: tcpdump wrote 40 of the 41 frames its filter received; "
                                 "the kernel dropped 1 frames before tcpdump read them (see tcpdump-w1-eth0.log)"]
    else:
        assert caps.problems == []
        assert caps.notes == ["capture w1-eth0: 1 frame(s) reached the interface after the capture window closed "
                              "(the pcap holds all 40 it counted by then) and are not in the pcap"]
        assert log.read_text().splitlines()[-1] == f"testbed: {caps.notes[0]}"
