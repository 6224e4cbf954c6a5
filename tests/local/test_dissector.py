"""The Wireshark Lua dissector decodes what testbed.wire builds (runs tshark)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from testbed import wire

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "testbed" / "wireshark" / "ina.lua"
FIELDS = ["ina.version", "ina.op", "ina.flags", "ina.flags.result", "ina.flags.retx", "ina.job",
          "ina.slot", "ina.slot_ver", "ina.worker", "ina.seq", "ina.count", "ina.exponent",
          "ina.value"]

W, S = ("02:00:00:00:00:01", "10.0.0.1"), ("02:00:00:00:00:fe", "10.0.0.254")


def frames() -> list[bytes]:
    return [
        # contribution: worker -> switch, dst port in the range
        wire.build_frame(W[0], S[0], W[1], S[1], 40000, wire.INA_PORT_BASE + 2, op=wire.OP_SUM,
                         job_id=3, slot=258, slot_ver=1, worker_id=4, seq=70000,
                         values=[1, -2, 2**31 - 1], exponent=-5, flags=wire.FLAG_RETX),
        # result: switch -> worker, only the *source* port is in the range
        wire.build_frame(S[0], W[0], S[1], W[1], wire.INA_PORT_BASE, 40000, op=wire.OP_MAX,
                         job_id=3, slot=258, slot_ver=1, worker_id=4, seq=70000,
                         values=[9], exponent=7, flags=wire.FLAG_RESULT),
        # malformed: count says 5, one value present
        wire.build_frame(W[0], S[0], W[1], S[1], 40000, wire.INA_PORT_BASE, op=wire.OP_OR,
                         job_id=1, slot=0, slot_ver=0, worker_id=0, seq=1, values=[1], count=5),
        # not INA
        wire.eth_ip_udp(W[0], S[0], W[1], S[1], 1234, 5678, 4) + b"ping",
    ]


@pytest.fixture(scope="module")
def tshark():
    exe = shutil.which("tshark")
    if exe is None:
        pytest.skip("tshark not installed (apt-get install tshark) - cannot run the Lua dissector")
    return exe


def run_tshark(tshark, pcap: Path, *args: str) -> list[str]:
    cmd = [tshark, "-n", "-X", f"lua_script:{LUA}", "-r", str(pcap), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}"
    assert "Lua" not in p.stderr or "error" not in p.stderr.lower(), p.stderr
    return p.stdout.splitlines()


def test_tshark_decodes_the_ina_fields(tmp_path, tshark):
    from scapy.utils import wrpcap
    from scapy.layers.l2 import Ether

    pcap = tmp_path / "ina.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames()])
    args = ["-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"]
    for fld in FIELDS:
        args += ["-e", fld]
    rows = [dict(zip(FIELDS, line.split("|"))) for line in run_tshark(tshark, pcap, *args)]
    assert len(rows) == 4

    c = rows[0]
    assert (c["ina.version"], c["ina.op"], c["ina.job"], c["ina.slot"], c["ina.slot_ver"],
            c["ina.worker"], c["ina.seq"], c["ina.count"], c["ina.exponent"]) == \
        ("1", "0", "3", "258", "1", "4", "70000", "3", "-5")
    assert c["ina.value"] == "1,-2,2147483647"
    assert c["ina.flags.retx"] in ("1", "True") and c["ina.flags.result"] in ("0", "False")

    r = rows[1]
    assert (r["ina.op"], r["ina.seq"], r["ina.value"], r["ina.exponent"]) == ("2", "70000", "9", "7")
    assert r["ina.flags.result"] in ("1", "True")

    assert rows[2]["ina.count"] == "5" and rows[2]["ina.value"] == "1"
    assert rows[3]["ina.job"] == ""                      # plain UDP is not decoded as INA


def test_tshark_flags_malformed_packets(tmp_path, tshark):
    from scapy.utils import wrpcap
    from scapy.layers.l2 import Ether

    pcap = tmp_path / "ina.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames()])
    lines = run_tshark(tshark, pcap, "-Y", "_ws.expert.group == malformed && ina",
                       "-T", "fields", "-e", "frame.number")
    assert lines == ["3"]
    info = run_tshark(tshark, pcap, "-Y", "ina", "-T", "fields", "-e", "_ws.col.Info")
    assert info[0].startswith("INA SUM contribution RETX job=3 slot=258.1 worker=4 seq=70000 n=3")
    assert info[1].startswith("INA MAX result job=3")


def test_frames_cut_by_the_capture_read_as_cut_not_malformed(tmp_path, tshark):
    """A snaplen (switch.capture_bytes: 96, the quickstart's) keeps the headers of a
    64-value frame: the dissector decodes its header, marks it `ina.cut` with the
    values it has, and raises no malformed error; a frame whose count really exceeds
    its payload is still malformed."""
    from testbed.switch.soft.pcap import PcapWriter

    full = wire.build_frame(W[0], S[0], W[1], S[1], 40000, wire.INA_PORT_BASE, op=wire.OP_SUM, job_id=1,
                            slot=7, slot_ver=0, worker_id=2, seq=9, values=list(range(64)))
    bad = frames()[2]                                   # count 5, one value: malformed whole
    pcap = tmp_path / "cut.pcap"
    w = PcapWriter(pcap, 96)
    w.write(full, 1.0)
    w.write(bad, 2.0)
    w.close()
    cut = run_tshark(tshark, pcap, "-Y", "ina.cut", "-T", "fields", "-e", "frame.number", "-e", "ina.seq",
                     "-e", "ina.values_captured")
    assert cut == ["1\t9\t" + str((96 - wire.VALUES_OFFSET) // 4)]
    malformed = run_tshark(tshark, pcap, "-Y", "_ws.expert.group == malformed && ina", "-T", "fields",
                           "-e", "frame.number")
    assert malformed == ["2"]
    info = run_tshark(tshark, pcap, "-Y", "ina", "-T", "fields", "-e", "_ws.col.Info")
    assert info[0].endswith("n=64 [cut by capture]")
