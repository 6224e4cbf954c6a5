"""Published measurements of cloud-rack networks (10 and 25 GbE, kernel TCP host
stack) against the cloud profiles (testbed/fidelity/profiles/cloud-10g.yaml,
cloud-25g.yaml) through the shared network model (testbed.fidelity.network_model).

None of them set a profile constant, none comes from PHub's papers. Two kinds:
  * goodput of one long TCP stream (iperf-class) at MTU 1500 and 9000: the model's
    payload bits over a long message's time (its frames carry UDP/IP headers, 8 B
    less than TCP with timestamps: +1-2 % expected);
  * one-way latency of a small message between two hosts in one rack of a cloud
    (half a published ping round trip): the model's message_time of 64 bytes.
Where a number is recalled rather than re-read in a stored source, its `source`
says so.
"""
from __future__ import annotations

from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import message_time
from testbed.reproduce.measurements import Measurement

LONG = 64 << 20        # a long message: the link's goodput, latency negligible


def _goodput_gbps(profile: str, mtu: int | None = None) -> float:
    p = load_profile(profile)
    if mtu is not None:
        p = p.with_overrides({"p2p_mtu_bytes": mtu})
    return LONG * 8 / message_time(LONG, p) / 1e9


def _one_way_us(profile: str) -> float:
    return message_time(64, load_profile(profile)) * 1e6


_IPERF = ("iperf/iperf3 single TCP stream between tuned Linux hosts on {rate} GbE, MTU {mtu}: the figure "
          "widely reported for such links (e.g. ESnet fasterdata host-tuning pages; recalled, not re-read in "
          "a stored source [I])")
_EC2 = ("ping round trip between EC2 instances in one cluster placement group: 35 us (A. Putra, 'Reduce AWS "
        "latency by 200x', measurement summarised at recapio.com [V page excerpt]; instance link rate not "
        "stated); one way = half")

MEASUREMENTS: list[Measurement] = [
    Measurement("cloud10g-tcp-goodput-mtu1500", "cloud-10g", "TCP goodput, one stream", "10 GbE, MTU 1500",
                9.41, "Gbit/s", _IPERF.format(rate=10, mtu=1500), lambda: _goodput_gbps("cloud-10g")),
    Measurement("cloud10g-tcp-goodput-mtu9000", "cloud-10g", "TCP goodput, one stream", "10 GbE, MTU 9000",
                9.9, "Gbit/s", _IPERF.format(rate=10, mtu=9000), lambda: _goodput_gbps("cloud-10g", 9000)),
    Measurement("cloud10g-ec2-one-way", "cloud-10g", "one-way small-message latency",
                "two VMs in one cloud rack (EC2 cluster placement group)", 17.5, "us", _EC2,
                lambda: _one_way_us("cloud-10g")),
    Measurement("cloud25g-tcp-goodput-mtu1500", "cloud-25g", "TCP goodput, several streams",
                "25 GbE, MTU 1500", 23.5, "Gbit/s", _IPERF.format(rate=25, mtu=1500),
                lambda: _goodput_gbps("cloud-25g")),
    Measurement("cloud25g-tcp-goodput-mtu9000", "cloud-25g", "TCP goodput, several streams",
                "25 GbE, MTU 9000", 24.7, "Gbit/s", _IPERF.format(rate=25, mtu=9000),
                lambda: _goodput_gbps("cloud-25g", 9000)),
    Measurement("cloud25g-ec2-one-way", "cloud-25g", "one-way small-message latency",
                "two VMs in one cloud rack (EC2 cluster placement group)", 17.5, "us", _EC2,
                lambda: _one_way_us("cloud-25g")),
]
