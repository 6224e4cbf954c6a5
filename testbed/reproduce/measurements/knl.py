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

  Baidu DeepBench's training results on one Xeon Phi 7250F (results/train/
  DeepBench_IA_KNL7250.xlsx, sheet 'Results - FP32'; its 'Specs' sheet: MKL 2017.3,
  LIBXSMM, ICC 17.0.4): single kernels, not whole networks. Convolutions: 'Total Time'
  = forward + backward w.r.t. inputs + backward w.r.t. parameters; the model: one
  training step (3 x the forward FLOPs, 3 launches) of the same nn.Conv2d at the same
  mini-batch, profiled by hosts.dnn.device.profile. GEMM (forward only): the model's
  forward phase of an nn.Linear(K -> M) at batch N (2·M·N·K FLOPs, one launch). These
  kernels run at 60-80 % of the 7250's peak where the model charges 40 %: where the
  Caffe networks above come out slower than the model, MKL's large kernels come out
  faster (a finding about the single efficiency constant, not a tuning target).

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


DEEPBENCH = ("Baidu DeepBench (github.com/baidu-research/DeepBench, commit e0170a9), "
             "results/train/DeepBench_IA_KNL7250.xlsx, sheet 'Results - FP32', {what}")


def _knl_layer_ms(layer, sample_shape: tuple[int, ...], batch: int, phase: str = "step") -> float:
    """One `phase` of a single layer on the KNL model (hosts/dnn/device.py), ms."""
    import torch  # noqa: PLC0415
    from hosts.dnn.device import DnnDevice, profile  # noqa: PLC0415

    dev = DnnDevice("knl", sleep=False)
    dev.model = profile(layer, torch.zeros(1, *sample_shape))
    return dev.hw_time(batch, phase) * 1e3


def _knl_conv_ms(w: int, h: int, c: int, n: int, k: int, r: int, s: int, pad: int, stride: int) -> float:
    from torch import nn  # noqa: PLC0415
    conv = nn.Conv2d(c, k, (r, s), stride=stride, padding=pad, bias=False)
    return _knl_layer_ms(conv, (c, h, w), n)


def _knl_gemm_ms(m: int, n: int, k: int) -> float:
    from torch import nn  # noqa: PLC0415
    return _knl_layer_ms(nn.Linear(k, m, bias=False), (k,), n, phase="forward")


def _aries_us(payload: int) -> float:
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import message_time  # noqa: PLC0415
    return message_time(payload, load_profile("aries-dragonfly")) * 1e6


MEASUREMENTS: list[Measurement] = [
    Measurement("knl-alexnet-b256", "device:knl", "AlexNet training iteration, batch 256", "one KNL node, MKL 2017",
                0.6, "s", KEUPER, lambda: _knl_step("alexnet", 256)),
    Measurement("knl-googlenet-b32", "device:knl", "GoogLeNet training iteration, batch 32", "one KNL node, MKL 2017",
                0.32, "s", KEUPER, lambda: _knl_step("googlenet", 32)),
    Measurement("knl-deepbench-conv3x3-56x56x128-k256-n16", "device:knl",
                "3x3 convolution training time (fwd + bwd inputs + bwd weights)",
                "one Xeon Phi 7250F, MKL 2017.3; W=H=56, C=128, K=256, N=16, pad 1, stride 1",
                20.94, "ms",
                DEEPBENCH.format(what="Convolution row W=56 H=56 C=128 N=16 K=256 R=S=3, 'Total Time (msec)'"),
                lambda: _knl_conv_ms(56, 56, 128, 16, 256, 3, 3, 1, 1)),
    Measurement("knl-deepbench-conv1x1-56x56x64-k256-n16", "device:knl",
                "1x1 convolution training time (fwd + bwd inputs + bwd weights)",
                "one Xeon Phi 7250F, MKL 2017.3; W=H=56, C=64, K=256, N=16, pad 0, stride 1",
                1.46, "ms",
                DEEPBENCH.format(what="Convolution row W=56 H=56 C=64 N=16 K=256 R=S=1, 'Total Time (msec)'"),
                lambda: _knl_conv_ms(56, 56, 64, 16, 256, 1, 1, 0, 1)),
    Measurement("knl-deepbench-sgemm-5124x9124x2560", "device:knl", "SGEMM time (forward: M x K times K x N)",
                "one Xeon Phi 7250F, MKL 2017.3; M=5124, N=9124, K=2560, no transposes",
                55.5397, "ms",
                DEEPBENCH.format(what="Dense Matrix Multiplication row M=5124 N=9124 K=2560 N/N, 'Time (msec)'"),
                lambda: _knl_gemm_ms(5124, 9124, 2560)),
    Measurement("aries-osu-8B", "aries-dragonfly", "MPI one-way latency, 8 B", "two nodes, one rank each",
                1.20, "us", OSU, lambda: _aries_us(8)),
    Measurement("aries-osu-64KiB", "aries-dragonfly", "MPI one-way time, 64 KiB", "two nodes, one rank each",
                15.03, "us", OSU, lambda: _aries_us(65536)),
    Measurement("aries-osu-1MiB", "aries-dragonfly", "MPI one-way time, 1 MiB", "two nodes, one rank each",
                114.59, "us", OSU, lambda: _aries_us(1 << 20)),
    Measurement("aries-osu-4MiB", "aries-dragonfly", "MPI one-way time, 4 MiB", "two nodes, one rank each",
                435.60, "us", OSU, lambda: _aries_us(4 << 20)),
]
