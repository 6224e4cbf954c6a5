"""Published compute-device measurements against the device models.

Models checked (keys as in `Headline.profiles`):
  device:u280      hosts/glm/devices.py U280Device (memory-bound GLM engine:
                   HBM peak x hbm_efficiency, + a fixed pipeline latency)
  device:glm-gpu   hosts/glm/devices.py GpuDevice (V100: HBM peak x
                   hbm_efficiency, + launch_s per kernel)
  device:dnn-v100  hosts/dnn/device.py DnnDevice("v100", precision)
  device:dnn-a100  hosts/dnn/device.py DnnDevice("a100", precision)
  device:dnn-h100  hosts/dnn/device.py DnnDevice("h100", precision)

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

The project's own H100 measurement (gpu_h100.py, data/gpu_h100_2026-11-26.json)
adds rows of three kinds:
  * device:glm-gpu carried to the H100: GpuDevice at its defaults with the H100's
    data-sheet HBM peak (3.35 TB/s) in place of the V100's 900 GB/s, against a dense
    float32 logistic-regression step written in torch (the P4SGD GPU counterpart's
    step: X @ w, sigmoid, residual, X^T @ r, update) over P4SGD's feature widths and
    batches, one synchronize per step; and its per-kernel launch cost as measured
    (host- and driver-bound: compared as is) and its bandwidth against a device copy;
  * device:dnn-h100: DnnDevice("h100", "fp32" | "bf16") against forward+backward of
    the same networks (ResNet-50 v1.5 as torchvision builds it; NCF NeuMF and
    Zaremba's large LSTM at the sizes papers/lhc.py profiles), fp32 with TF32 off
    (the CUDA cores' fp32 the model's 66.9 TFLOP/s is) and bf16 autocast; time of one
    mini-batch, as the model's hw_time(batch, "step").
"""
from __future__ import annotations

from functools import lru_cache

from hosts.dnn.device import DnnDevice, ModelProfile, profile
from hosts.glm.devices import GpuDevice, U280Device
from testbed.reproduce.measurements import Measurement, gpu_h100

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


def glm_gpu_streaming_GBps(hbm_peak_Bps: float | None = None) -> float:
    """hbm_peak_Bps: the model carried to another GPU's data-sheet peak."""
    kw = {} if hbm_peak_Bps is None else {"hbm_peak_Bps": hbm_peak_Bps}
    return _streaming_Bps(GpuDevice(sleep=False, **kw)) / 1e9


def glm_h100_launch_us(features: int, batch: int, kernels: int) -> float:
    """The per-kernel cost at which GpuDevice with `kernels` kernels per step (its
    efficiency, the H100's data-sheet peak) takes the step measured on the H100 at
    (features, batch): the measurement in the model's terms, us."""
    case = next((c for c in gpu_h100.glm_cases() if (c.features, c.batch) == (features, batch)), None)
    if case is None:
        raise ValueError(f"no H100 GLM step measured at {features} features, batch {batch}")
    dev = GpuDevice(sleep=False, launch_s=0.0, hbm_peak_Bps=gpu_h100.h100_hbm_peak_Bps())
    bytes_s = dev.step_time(batch, features, None, phase="step")
    if case.sync_step_ms * 1e-3 <= bytes_s:
        raise ValueError(f"the measured step ({case.sync_step_ms:.3g} ms) is within the model's bytes alone")
    return (case.sync_step_ms * 1e-3 - bytes_s) / kernels * 1e6


def glm_gpu_h100_step_ms(features: int, batch: int) -> float:
    """What GpuDevice charges one dense step (forward + backward) of `batch` samples over
    `features` float32 features, carried to the H100's data-sheet HBM peak, ms."""
    dev = GpuDevice(sleep=False, hbm_peak_Bps=gpu_h100.h100_hbm_peak_Bps())
    return dev.step_time(batch, features, None, phase="step") * 1e3


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


def _lhc_profile(model: str) -> ModelProfile:
    """NCF NeuMF (MovieLens-20M sizes) and Zaremba's large LSTM as papers/lhc.py profiles them."""
    from testbed.reproduce.papers.lhc import _dnn_profile  # noqa: PLC0415
    return _dnn_profile(model)[0]


def minibatch_ms(accelerator: str, precision: str, net: str, batch: int) -> float:
    """The model's time of one forward + backward of `batch` samples, ms."""
    dev = DnnDevice(accelerator, precision, sleep=False)
    dev.model = _lhc_profile(net) if net in ("ncf", "lstm") else model_profile(net)
    return dev.hw_time(batch, "step") * 1e3


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


# -- the project's H100 measurement (gpu_h100.py) ---------------------------------------------
_GLM_CARRY = ("model: GpuDevice at its defaults (4 kernels x 5 us, efficiency 0.7) with the H100's data-sheet HBM peak "
              "3.35 TB/s in place of the V100's 900 GB/s")


def _glm_h100_rows() -> list[Measurement]:
    launch, stream = gpu_h100.launch(), gpu_h100.stream()
    rows = [
        Measurement(
            id="device:glm-gpu:h100-launch-roundtrip", model="device:glm-gpu",
            quantity="round trip of one tiny kernel and a synchronize",
            setting=f"H100 {gpu_h100.HOST}, x.add_(1) on 1 element + torch.cuda.synchronize(), median of 5000 "
                    f"(the synchronize alone: {launch.sync_only_us:.3g} us); model: time charged for one kernel "
                    "moving ~nothing (launch_s: 'launch + sync'), host- and driver-bound, compared as measured",
            published=launch.roundtrip_us, unit="us", source=gpu_h100.source("launch.roundtrip.median_us"),
            predict=glm_gpu_kernel_us),
        Measurement(
            id="device:glm-gpu:h100-launch-back-to-back", model="device:glm-gpu",
            quantity="per-kernel cost of kernels launched back to back (one synchronize at the end)",
            setting=f"H100 {gpu_h100.HOST}, 10,000 x.add_(1) launches from PyTorch, one synchronize (host-bound "
                    f"dispatch; a CUDA graph replays them at {launch.graph_per_kernel_us:.2g} us each); model: time "
                    "charged for one kernel moving ~nothing",
            published=launch.async_per_kernel_us, unit="us",
            source=gpu_h100.source("launch.async_batch.per_kernel_us"), predict=glm_gpu_kernel_us),
        Measurement(
            id="device:glm-gpu:h100-d2d-copy", model="device:glm-gpu",
            quantity="H100 device-to-device copy bandwidth (read + write counted)",
            setting=f"H100, y.copy_(x) of {stream.values:,} float32 values, CUDA events, median of 10; "
                    f"{_GLM_CARRY}: bytes / step time of a 1-GiB dense micro-batch",
            published=stream.copy_GBps, unit="GB/s", source=gpu_h100.source("stream.copy.median_GBps"),
            predict=lambda: glm_gpu_streaming_GBps(gpu_h100.h100_hbm_peak_Bps())),
    ]
    for c in gpu_h100.glm_cases():
        rows.append(Measurement(
            id=f"device:glm-gpu:h100-step-f{c.features}-b{c.batch}", model="device:glm-gpu",
            quantity=f"dense logistic-regression SGD step, {c.features:,} features, batch {c.batch}",
            setting=f"H100, float32, torch (z = X @ w; r = sigmoid(z) - y; g = X^T @ r; w update): {c.kernels} "
                    f"kernels (the model: 4), a synchronize before and after each step, median of 200 "
                    f"(200 steps back to back: {c.async_step_ms:.3g} ms each); {_GLM_CARRY}: step_time(batch, "
                    "features), forward + backward",
            published=c.sync_step_ms, unit="ms",
            source=gpu_h100.source(f"glm.cases[features={c.features}, batch={c.batch}].sync_step.median_ms"),
            predict=lambda f=c.features, b=c.batch: glm_gpu_h100_step_ms(f, b)))
    return rows


# (file's model name, the model's network, batch, what it is)
_H100_NETS = (("resnet50", "resnet50", 32, "ResNet-50 v1.5, 224x224"),
              ("resnet50", "resnet50", 64, "ResNet-50 v1.5, 224x224"),
              ("ncf_neumf", "ncf", 65_536, "NCF NeuMF, MovieLens-20M sizes, MLPerf dims"),
              ("lstm_lm", "lstm", 20, "Zaremba et al. 2014 large LSTM LM, 35 steps"))


def _dnn_h100_rows() -> list[Measurement]:
    rows = []
    for file_name, net, batch, label in _H100_NETS:
        for prec, how in (("fp32", "fp32 with TF32 off (CUDA cores)"), ("bf16", "bf16 autocast")):
            rows.append(Measurement(
                id=f"device:dnn-h100:{net}-b{batch}-{prec}", model="device:dnn-h100",
                quantity=f"{net} forward + backward of one mini-batch, 1 GPU, {prec}",
                setting=f"H100, {label}, batch {batch}, {how}, no optimizer step, median of 10 after 3 warm-ups "
                        f"(cudnn.benchmark on); model: DnnDevice('h100', '{prec}') hw_time(batch, 'step') of the "
                        "profiled network",
                published=gpu_h100.fwd_bwd_ms(file_name, batch, prec), unit="ms",
                source=gpu_h100.source(f"fwd_bwd.models.{file_name} batch {batch} "
                                       f"{gpu_h100.PRECISIONS[prec]} median_ms"),
                predict=lambda p=prec, n=net, b=batch: minibatch_ms("h100", p, n, b)))
    return rows


MEASUREMENTS += _glm_h100_rows() + _dnn_h100_rows()
