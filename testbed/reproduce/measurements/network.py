"""Published network measurements against the 100 GbE fidelity profiles.

Models checked (testbed/fidelity/profiles/<name>.yaml, through
testbed/fidelity/network_model.py):
  tofino1-100g   Tofino 1 switch, 100 GbE, RDMA/FPGA-class NICs (no host stack)
  tor-100g-host  100 GbE ToR switch, host software stack (DPDK/RDMA class)

Every prediction is computed from the profile at its nominal constants by the
model the projector uses (`message_time`, `message_cost`); nothing here was
used to set a constant (the profiles cite data sheets and the IEEE framing).

Paths: a measurement through one switch is compared with `message_time`
(L0 + serialization, one switch). A measurement over a direct cable (no
switch) is compared with the same model less one switch, by the model's own
rule for a path's switches (network_model docstring, "message": each switch
beyond the first adds transit_latency_s + one serialization of the first
frame), applied from one switch down to none. The increment a switch adds is
compared the same way.

What is and is not covered (say so when reading the table):
  * one-way and round-trip small-message latency (host stack + 2 NIC + cables
    + switch pipeline, plus serialization), the increment of one switch, and
    streaming goodput (framing overhead at the link rate) are checked;
  * the in-switch allreduce (algo=switch) of large tensors and the ring/PS
    collectives are NOT checked here against a published allreduce number:
    no SwitchML/ATP figure could be read in the stored material (their
    repositories publish none), and the one NCCL output found on 100 Gb/s
    InfiniBand is bound by its GPUs' PCIe/shared-memory path, not the network.
    A ring step is message_time(chunk), and a single-packet in-switch
    allreduce is L0 + 2 s(f): the latency and bandwidth terms the rows check.
Link rates of the measurement set-ups are given where the source states them;
where it does not, only rows whose value hardly depends on the link rate
(small messages) are used.
"""
from __future__ import annotations

from functools import lru_cache

from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import message_cost, message_time
from testbed.reproduce.measurements import Measurement


@lru_cache(maxsize=None)
def _profile(name: str):
    return load_profile(name)


def one_way_us(name: str, payload_bytes: int) -> float:
    """One-way latency of one message through one switch (µs)."""
    return message_time(payload_bytes, _profile(name)) * 1e6


def switch_increment_us(name: str, payload_bytes: int) -> float:
    """What one more switch on the path adds to a message (µs), by the model's rule."""
    p = _profile(name)
    return (message_time(payload_bytes, p, switches=2) - message_time(payload_bytes, p)) * 1e6


def direct_one_way_us(name: str, payload_bytes: int) -> float:
    """One-way latency over a direct cable: the one-switch time less one switch (µs)."""
    return one_way_us(name, payload_bytes) - switch_increment_us(name, payload_bytes)


def round_trip_us(name: str, request_bytes: int, reply_bytes: int, direct: bool = False) -> float:
    """A request and its reply, each one message through one switch (or a direct cable), µs."""
    one = direct_one_way_us if direct else one_way_us
    return one(name, request_bytes) + one(name, reply_bytes)


def streaming_gbps(name: str, payload_bytes: int) -> float:
    """Goodput of back-to-back messages of `payload_bytes` (payload bits over the
    time the sender's link is busy with each message), Gbit/s."""
    return payload_bytes * 8 / message_cost(payload_bytes, _profile(name)).link_busy_s / 1e9


_MARK1 = ("github.com/morrismeyer/warpforge, holmes-lab/mark1/mellanox-perf/CONNECTX5.md, 'ConnectX-5 "
          "Performance Baseline - Mark 1 Lab' (perftest 39.0, 2026-01-22): two ConnectX-5 EN 100GbE "
          "(MCX515A-CCAT, RoCE) on one direct QSFP28 cable; "
          "ib_send_lat --size=8 --iters=10000, t_typical")
_TULIPS = ("IBM/tulips, docs/topics/Test-and-Performance.md, 'Measured round-trip latencies': ConnectX5-VPI "
           "cards, cross-connected or through a Mellanox SX6030 switch; frame size and link rate not stated "
           "(small frames assumed: the model's minimum frame)")
_SEND_BW = ("NVIDIA/Mellanox community forum post on ib_send_bw message sizes "
            "(mellanox37.rssing.com/chan-11689808/article3279.html): ConnectX-4 VPI "
            "MCX456A-ECAT, 100GbE through a Mellanox SN2700 switch, ~97 Gbit/s at 65536-B messages")
_OSU = ("github.com/dexhunter/allreduce-experiments (2021), data/ompi-results/latency/100g-latency.txt: "
        "OSU MPI Latency Test v5.7 (osu_latency, Open MPI 4.0.1), two hosts on the repository's 100 Gb/s "
        "InfiniBand network ('# 100GbIB', mlx5, scripts/nccltest.sh); one-way latency = half the ping-pong")
_RAMCLOUD = ("RAMCloud wiki, 'clusterperf November 24, 2018' (ramcloud.atlassian.net/wiki/x/AYA1Mw): "
             "kernel-bypass RPC round trip, median; cluster NICs and link rate as on that page "
             "(not re-read here)")

MEASUREMENTS: list[Measurement] = [
    # -- tofino1-100g: RDMA-class NICs, no host software on the data path ------
    Measurement(
        id="tofino1-100g:rdma-send-lat-8B-direct", model="tofino1-100g",
        quantity="one-way latency of an 8-B RDMA send, direct cable",
        setting="ib_send_lat, RoCE, 8 B, 100GbE, no switch; model: message_time(8 B) less one switch",
        published=0.92, unit="us", source=_MARK1,
        predict=lambda: direct_one_way_us("tofino1-100g", 8)),
    Measurement(
        id="tofino1-100g:raw-rtt-direct", model="tofino1-100g",
        quantity="round trip of a small raw Ethernet frame, direct cable",
        setting="tulips 'Raw', cross-connected; model: 2 x message_time(min frame) less one switch each way",
        published=1.632, unit="us", source=_TULIPS,
        predict=lambda: round_trip_us("tofino1-100g", 0, 0, direct=True)),
    Measurement(
        id="tofino1-100g:raw-rtt-switched", model="tofino1-100g",
        quantity="round trip of a small raw Ethernet frame through one switch",
        setting="tulips 'Raw', through one switch; model: 2 x message_time(min frame)",
        published=2.170, unit="us", source=_TULIPS,
        predict=lambda: round_trip_us("tofino1-100g", 0, 0)),
    Measurement(
        id="tofino1-100g:rdma-bw-64KB", model="tofino1-100g",
        quantity="streaming goodput of 64-KiB messages",
        setting="ib_send_bw, 65536-B messages, 100GbE via one switch; model: payload / link-busy time",
        published=97.0, unit="Gbit/s", source=_SEND_BW,
        predict=lambda: streaming_gbps("tofino1-100g", 65536)),
    # -- tor-100g-host: host software stack on the data path -------------------
    Measurement(
        id="tor-100g-host:mpi-lat-8B", model="tor-100g-host",
        quantity="one-way latency of an 8-B MPI message",
        setting="osu_latency, 8 B; model: message_time(8 B) through one switch",
        published=1.74, unit="us", source=_OSU,
        predict=lambda: one_way_us("tor-100g-host", 8)),
    Measurement(
        id="tor-100g-host:mpi-lat-1MiB", model="tor-100g-host",
        quantity="one-way time of a 1-MiB MPI message",
        setting="osu_latency, 1048576 B; model: message_time(1 MiB) through one switch",
        published=100.51, unit="us", source=_OSU,
        predict=lambda: one_way_us("tor-100g-host", 1 << 20)),
    Measurement(
        id="tor-100g-host:mpi-lat-4MiB", model="tor-100g-host",
        quantity="one-way time of a 4-MiB MPI message",
        setting="osu_latency, 4194304 B; model: message_time(4 MiB) through one switch",
        published=361.86, unit="us", source=_OSU,
        predict=lambda: one_way_us("tor-100g-host", 4 << 20)),
    Measurement(
        id="tor-100g-host:rpc-rtt-100B", model="tor-100g-host",
        quantity="round trip: 30-B request, 100-B reply (host stack both ends)",
        setting="RAMCloud clusterperf echo100, median; model: message_time(30) + message_time(100)",
        published=3.9, unit="us", source=_RAMCLOUD,
        predict=lambda: round_trip_us("tor-100g-host", 30, 100)),
    Measurement(
        id="tor-100g-host:rpc-rtt-1KB", model="tor-100g-host",
        quantity="round trip: 30-B request, 1-KB reply (host stack both ends)",
        setting="RAMCloud clusterperf echo1K, median; model: message_time(30) + message_time(1000)",
        published=5.1, unit="us", source=_RAMCLOUD,
        predict=lambda: round_trip_us("tor-100g-host", 30, 1000)),
    Measurement(
        id="tor-100g-host:tcp-rtt-switched", model="tor-100g-host",
        quantity="round trip of a small TCP/IP segment (user-space stack) through one switch",
        setting="tulips 'TCP/IP', through one switch; model: 2 x message_time(min frame)",
        published=2.314, unit="us", source=_TULIPS,
        predict=lambda: round_trip_us("tor-100g-host", 0, 0)),
    Measurement(
        id="tor-100g-host:switch-increment", model="tor-100g-host",
        quantity="one-way latency one ToR switch adds to a small frame",
        setting="tulips 'Raw', (switched - cross-connected round trip) / 2 = (2170 - 1632) / 2 ns; "
                "model: message_time(min frame, 2 switches) - message_time(min frame, 1 switch)",
        published=0.269, unit="us", source=_TULIPS,
        predict=lambda: switch_increment_us("tor-100g-host", 0)),
    Measurement(
        id="tor-100g-host:bw-64KB", model="tor-100g-host",
        quantity="streaming goodput of 64-KiB messages",
        setting="ib_send_bw, 65536-B messages, 100GbE via one switch; model: payload / link-busy time",
        published=97.0, unit="Gbit/s", source=_SEND_BW,
        predict=lambda: streaming_gbps("tor-100g-host", 65536)),
]
