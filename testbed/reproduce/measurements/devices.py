"""Published compute-device measurements against the device models.

Models checked (keys as in `Headline.profiles`):
  device:u280      hosts/glm/devices.py U280Device (memory-bound GLM engine:
                   HBM peak x hbm_efficiency, + a fixed pipeline latency)
  device:glm-gpu   hosts/glm/devices.py GpuDevice (V100: HBM peak x
                   hbm_efficiency, + launch_s per kernel)
  device:dnn-v100  hosts/dnn/device.py DnnDevice("v100", precision)
  device:dnn-a100  hosts/dnn/device.py DnnDevice("a100", precision)

Every prediction is computed by the model at its default constants (only the
precision is set to the one the measurement used); none of these numbers set a
constant of the model (U280Device cites Shuhai's 425 GB/s in its docstring but
charges 460 GB/s x 0.5; the DNN peaks are data-sheet figures).

The U280's Vitis BLAS GEMV rows compare times: the model's forward phase over
the benchmark's float64 matrix (value_bytes 8: the workload's element size, not
a model constant) against the published kernel execution time; the GEMV engine
streams its matrix from 16 of the 32 pseudo-channels, the kind of engine the
model's 50 % efficiency describes. The 8192 x 8192 row is bandwidth-bound, the
512 x 256 row (1 MiB) weighs the fixed costs.

The memory-bound models predict a streaming bandwidth: the bytes a large
micro-batch step moves over the time the model charges for it (launches and
pipeline latency included, negligible at that size). A STREAM-like benchmark
measures the ceiling a well-written kernel reaches; the models' efficiency
factors are meant for a GLM engine below that ceiling, so a prediction under
the measurement is what the model claims, and the error says by how much.

The DNN rows profile the real network (ResNet-50 v1.5, ResNeXt-101 32x4d,
built here layer for layer as in NVIDIA DeepLearningExamples, since torchvision
is not a dependency) with hosts.dnn.device.profile, then take
batch / hw_time(batch) at the batch size the published run used.
"""
from __future__ import annotations

from functools import lru_cache

from hosts.dnn.device import DnnDevice, ModelProfile, profile
from hosts.glm.devices import GpuDevice, U280Device
from testbed.reproduce.measurements import Measurement

# -- memory-bound GLM devices --------------------------------------------------
_STREAM_N, _STREAM_F = 4096, 65536          # one dense float32 micro-batch slice: 1 GiB


def _streaming_Bps(dev) -> float:
    """Bytes a large dense step moves / the time the model charges for it."""
    n, f, vb = _STREAM_N, _STREAM_F, dev.value_bytes
    data = dev.slice_bytes(n, f, None, dev.value_bytes, dev.index_bytes)
    if isinstance(dev, GpuDevice):      # its byte count (hosts/glm/devices.py docstring)
        moved = 2 * data + 4 * f * vb + n * vb
    else:                               # U280: the slice once per phase
        moved = 2 * data
    return moved / dev.step_time(n, f, None, phase="step")


def u280_streaming_GBps() -> float:
    return _streaming_Bps(U280Device(sleep=False)) / 1e9


def glm_gpu_streaming_GBps() -> float:
    return _streaming_Bps(GpuDevice(sleep=False)) / 1e9


def u280_gemv_ms(m: int, n: int) -> float:
    """What the U280 model charges one forward phase over a dense float64 m x n
    slice (q = A x: the slice streamed once from HBM, + half the pipeline latency), ms."""
    return U280Device(value_bytes=8, sleep=False).step_time(m, n, None, phase="forward") * 1e3


def glm_gpu_kernel_us() -> float:
    """What the model charges one kernel that moves (almost) nothing: a 1x1 forward
    phase over its kernel count (µs)."""
    dev = GpuDevice(sleep=False)
    return dev.step_time(1, 1, None, phase="forward") / dev.kernels_forward * 1e6


# -- DNN devices: ResNet-50 v1.5 and ResNeXt-101 32x4d ---------------------------
def _resnet(layers: list[int], groups: int = 1, width_per_group: int = 64):
    """torchvision-style bottleneck ResNet/ResNeXt (v1.5: stride on the 3x3 conv)."""
    from torch import nn  # noqa: PLC0415

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, planes: int, stride: int):
            super().__init__()
            width = int(planes * (width_per_group / 64.0)) * groups
            out = planes * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != out:
                self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(out))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                                      nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(3, stride=2, padding=1))
            blocks, cin = [], 64
            for i, n in enumerate(layers):
                planes = 64 * 2 ** i
                for j in range(n):
                    blocks.append(Bottleneck(cin, planes, 2 if (i > 0 and j == 0) else 1))
                    cin = planes * 4
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, 1000)

        def forward(self, x):
            return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))

    return Net()


@lru_cache(maxsize=None)
def model_profile(arch: str) -> ModelProfile:
    """Forward cost per 224x224 image of `arch`, counted by hosts.dnn.device.profile."""
    import torch  # noqa: PLC0415
    nets = {"resnet50": lambda: _resnet([3, 4, 6, 3]),
            "resnext101-32x4d": lambda: _resnet([3, 4, 23, 3], groups=32, width_per_group=4)}
    net = nets[arch]().eval()
    return profile(net, torch.zeros(1, 3, 224, 224))


def images_per_s(accelerator: str, precision: str, arch: str, batch: int) -> float:
    dev = DnnDevice(accelerator, precision, sleep=False)
    dev.model = model_profile(arch)
    return batch / dev.hw_time(batch)


_DLE = "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/{arch}/README.md, {table}, 1 GPU row"
_DLE_BATCH = ("batch sizes from PyTorch/Classification/ConvNets/configs.yml "
              "(and the README's batch-size table)")


def _dnn(key: str, acc: str, prec: str, label: str, arch: str, batch: int, published: float,
         table: str) -> Measurement:
    return Measurement(
        id=f"{key}:{arch}-{label.lower()}", model=key,
        quantity=f"{arch} training throughput, 1 GPU, {label}",
        setting=f"{arch} 224x224, batch {batch}, {label} (model precision {prec}); {_DLE_BATCH}",
        published=published, unit="img/s",
        source=_DLE.format(arch="resnet50v1.5" if arch == "resnet50" else arch, table=table),
        predict=lambda: images_per_s(acc, prec, arch, batch))


_V100_RN = "'Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)' (pytorch-21.03 container)"
_A100_RN = "'Training performance: NVIDIA DGX A100 (8x A100 80GB)' (pytorch-21.03 container)"
_V100_RX = "'Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)' (pytorch-20.06 container)"
_A100_RX = "'Training performance: NVIDIA DGX A100 (8x A100 40GB)' (pytorch-20.06 container)"

MEASUREMENTS: list[Measurement] = [
    # -- U280 --------------------------------------------------------------------
    Measurement(
        id="device:u280:hbm-stream", model="device:u280",
        quantity="HBM streaming bandwidth of a kernel reading the whole HBM",
        setting="Alveo U280, all 32 pseudo-channels, sequential reads; model: bytes / step time "
                "of a 1-GiB dense micro-batch",
        published=425.0, unit="GB/s",
        source="Wang, Huang, Zhang, Alonso, 'Shuhai: Benchmarking High Bandwidth Memory on FPGAs', "
               "FCCM 2020 (abstract: 'up to 425 GB/s')",
        predict=u280_streaming_GBps),
    Measurement(
        id="device:u280:hls-vaddmul", model="device:u280",
        quantity="HBM throughput of 8 HLS compute units streaming all 32 HBM banks",
        setting="Alveo U280 (xilinx_u280_xdma_201920_1), krnl_vaddmul x 8 CUs, 16 input + 16 output buffers; "
                "model: bytes / step time of a 1-GiB dense micro-batch",
        published=421.3, unit="GB/s",
        source="Xilinx Vitis_Accel_Examples, host/hbm_bandwidth/details.md (commit 9ce7f8a1, 2019-11-07): "
               "runtime log on U280, 'THROUGHPUT = 421.3 GB/s'",
        predict=u280_streaming_GBps),
    *[Measurement(
        id=f"device:u280:vitis-blas-gemv-{m}x{n}", model="device:u280",
        quantity=f"kernel execution time of a dense float64 GEMV, {m} x {n} matrix streamed from HBM",
        setting="Alveo U280 (xilinx_u280_xdma_201920), Vitis BLAS L2 gemvStreamCh16: 16 HBM channels, "
                "4 doubles per channel per cycle, 333 MHz; model: one forward phase over the same "
                "float64 slice (value_bytes 8)",
        published=published_ms, unit="ms",
        source="Xilinx Vitis Libraries 2021.1, BLAS benchmark page (xilinx.github.io/Vitis_Libraries/blas/"
               "2021.1/benchmark.html), '1.1 gemv', table 'gemv with OpenCL in u280', 'Kernel execution time' "
               f"for M={m}, N={n}; design parameters (double, 16 channels, parEntries 4, 333 MHz) from "
               "Xilinx/Vitis_Libraries blas/L2/benchmarks/streamingKernel/gemvStreamCh16/Makefile",
        predict=lambda m=m, n=n: u280_gemv_ms(m, n))
      for m, n, published_ms in ((8192, 8192, 3.32612), (512, 256, 0.014316))],
    # -- V100 GLM (GpuDevice) -----------------------------------------------------
    Measurement(
        id="device:glm-gpu:global-mem-bw", model="device:glm-gpu",
        quantity="V100 global-memory bandwidth (microbenchmark)",
        setting="Tesla V100, streaming global loads; model: bytes / step time of a 1-GiB dense micro-batch",
        published=750.0, unit="GB/s",
        source="Jia, Maggioni, Staiger, Scarpazza, 'Dissecting the NVIDIA Volta GPU Architecture via "
               "Microbenchmarking', arXiv:1804.06826 (2018), measured global-memory bandwidth (value as quoted "
               "from it in a public GPU model's hardware parameters; the report itself not re-read here)",
        predict=glm_gpu_streaming_GBps),
    Measurement(
        id="device:glm-gpu:d2d-copy", model="device:glm-gpu",
        quantity="V100 device-to-device copy bandwidth (read + write counted)",
        setting="Tesla V100-SXM2-16GB, CUDA samples bandwidthTest, 32 MB, quick mode; "
                "model: bytes / step time of a 1-GiB dense micro-batch",
        published=739.8, unit="GB/s",
        source="github.com/router-gao/cuda-demo, cuda-samples/02-cuda-bandwidth.md (bandwidthTest output, "
               "'Device to Device Bandwidth')",
        predict=glm_gpu_streaming_GBps),
    Measurement(
        id="device:glm-gpu:launch", model="device:glm-gpu",
        quantity="host-to-device launch round trip of one small (element-wise) kernel",
        setting="Tesla V100, PyTorch element-wise kernel, before its first instruction runs; "
                "model: time charged for one kernel moving ~nothing (launch_s)",
        published=20.0, unit="us",
        source="secondary: groundy.com, 'Every CUDA Kernel Pays a Launch Tax' ('roughly 20 microseconds "
               "on a Tesla V100'), citing NVIDIA's Nsight Systems user guide (primary not re-read here)",
        predict=glm_gpu_kernel_us),
    # -- V100 DNN -------------------------------------------------------------------
    _dnn("device:dnn-v100", "v100", "fp32", "FP32", "resnet50", 112, 367.0, _V100_RN),
    _dnn("device:dnn-v100", "v100", "fp16", "AMP", "resnet50", 256, 1200.0, _V100_RN),
    _dnn("device:dnn-v100", "v100", "fp32", "FP32", "resnext101-32x4d", 64, 150.05, _V100_RX),
    _dnn("device:dnn-v100", "v100", "fp16", "AMP", "resnext101-32x4d", 128, 534.91, _V100_RX),
    # -- A100 DNN -------------------------------------------------------------------
    _dnn("device:dnn-a100", "a100", "tf32", "TF32", "resnet50", 256, 938.0, _A100_RN),
    _dnn("device:dnn-a100", "a100", "fp16", "AMP", "resnet50", 256, 2470.0, _A100_RN),
    _dnn("device:dnn-a100", "a100", "tf32", "TF32", "resnext101-32x4d", 128, 300.42, _A100_RX),
    _dnn("device:dnn-a100", "a100", "fp16", "AMP", "resnext101-32x4d", 128, 908.40, _A100_RX),
]
