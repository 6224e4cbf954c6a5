"""Published measurements of the KNL node device model (`device:knl`,
hosts/dnn/device.py) and the Cray Aries profile (`aries-dragonfly`), used by
`testbed reproduce easgd`. None comes from You et al. (SC17) and none set a
constant of either model.

device:knl: Keuper and Pfreundt, "Distributed Training of Deep Neural Networks:
  Theoretical and Practical Limits of Parallel Scalability" (MLHPC'16, arXiv
  1609.06870), Table I: time per training iteration on one Xeon Phi "Knights
  Landing" with MKL 2017 (AlexNet at batch 256: 0.6 s; GoogLeNet at batch 32:
  0.32 s), read at arxiv-vanity.com/papers/1609.06870. The KNL model (7250
  assumed: the table names no SKU) predicts one forward/backward of the same
  batch on the network as Caffe defines it (testbed/reproduce/papers/easgd_nets.py).
  Only two found: the model is flagged for having fewer than three.

aries-dragonfly: OSU micro-benchmarks 5.3.2 `osu_latency` (one-way time, half a
  ping-pong) between two nodes (-N 1) of LANL's Trinitite (Cray XC40, Aries), Open
  MPI with pml ob1, posted by Howard Pritchard on 2016-11-18
  (gist.github.com/hppritcha/6a3acd0c192fcfd082bd543fc98e6fe6, its first table,
  before the table headed "KNL"; node type of that table not stated). The model:
  network_model.message_time of the same payload on the profile.
"""
from __future__ import annotations

from testbed.reproduce.measurements import Measurement

KEUPER = ("Keuper & Pfreundt, MLHPC'16 (arXiv 1609.06870) Table I, 'KNL results with MKL17', "
          "time per iteration")
OSU = ("OSU 5.3.2 osu_latency, 2 nodes of LANL Trinitite (Cray XC40, Aries), Open MPI pml ob1; "
       "H. Pritchard, gist.github.com/hppritcha/6a3acd0c192fcfd082bd543fc98e6fe6 (2016-11-18), first table")


def _knl_step(net: str, batch: int) -> float:
    from hosts.dnn.device import DnnDevice  # noqa: PLC0415

    from testbed.reproduce.papers.easgd_nets import net as net_profile  # noqa: PLC0415
    dev = DnnDevice("knl")
    dev.model = net_profile(net)[0]
    return dev.hw_time(batch)


def _aries_us(payload: int) -> float:
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import message_time  # noqa: PLC0415
    return message_time(payload, load_profile("aries-dragonfly")) * 1e6


MEASUREMENTS: list[Measurement] = [
    Measurement("knl-alexnet-b256", "device:knl", "AlexNet training iteration, batch 256", "one KNL node, MKL 2017",
                0.6, "s", KEUPER, lambda: _knl_step("alexnet", 256)),
    Measurement("knl-googlenet-b32", "device:knl", "GoogLeNet training iteration, batch 32", "one KNL node, MKL 2017",
                0.32, "s", KEUPER, lambda: _knl_step("googlenet", 32)),
    Measurement("aries-osu-8B", "aries-dragonfly", "MPI one-way latency, 8 B", "two nodes, one rank each",
                1.20, "us", OSU, lambda: _aries_us(8)),
    Measurement("aries-osu-64KiB", "aries-dragonfly", "MPI one-way time, 64 KiB", "two nodes, one rank each",
                15.03, "us", OSU, lambda: _aries_us(65536)),
    Measurement("aries-osu-1MiB", "aries-dragonfly", "MPI one-way time, 1 MiB", "two nodes, one rank each",
                114.59, "us", OSU, lambda: _aries_us(1 << 20)),
    Measurement("aries-osu-4MiB", "aries-dragonfly", "MPI one-way time, 4 MiB", "two nodes, one rank each",
                435.60, "us", OSU, lambda: _aries_us(4 << 20)),
]
