"""Published V100 measurements against LHC's codec time model
(`device:lhc-codec-v100`, hosts/lhc/timing.py LhcDevice: each step's HBM bytes at
900 GB/s x GPU_EFFICIENCY, plus GPU_LAUNCH_S per kernel), used by
`testbed reproduce lhc`. None comes from Li et al. (LHC, arXiv 2402.07529) or its
public demo, and none set a constant of the model (its constants are the V100 data
sheet's 900 GB/s and two assumptions shared with hosts/glm/devices.py).

No published timing of a GPU count sketch, peeling decoder or hashed scatter on a
V100 could be read in the stored material (searched: GPU CountSketch, sketched SGD,
Dr. Top-k / radix top-k on V100, torch.topk on V100, GPU hash-table insert and
scatter-add/atomicAdd throughput on V100): the rows below check the model's two
terms, streaming bandwidth and per-kernel launch cost, on the codec's own steps, not
the codec's irregular accesses (which the model charges at streaming bandwidth).

  * support step (1 kernel: read the dense float32 gradient, 4n B, write its bitmap,
    n/8 B) at n = 2^28 (a 1-GiB read, as the benchmark's arrays): the model's bytes /
    time, against a read-only streaming kernel (`sum = A[i]`, 1 load stream) and
    against a microbenchmarked global-memory bandwidth (Jia et al., quoted);
  * top-k sum step with no pairs (1 kernel writing the dense 4n-byte output) at
    n = 2^28: against a store-only streaming kernel (`A[i] = c`);
  * a kernel that moves nothing (the support step at n = 0: one launch): against the
    host-to-device launch round trip of one small kernel.
"""
from __future__ import annotations

from testbed.reproduce.measurements import Measurement

KEY = "device:lhc-codec-v100"
N_STREAM = 2 ** 28            # float32 values: 1 GiB, gpu-stream's array size (128 Mi doubles)

GPU_BENCHES = ("github.com/te42kyfo/gpu-benches, gpu-stream/v100.txt (commit a7dc559, 2023-01-24): "
               "'{col}' column at blockSize 1024 (100 % occupancy); arrays of 128 Mi doubles (gpu-stream/main.cu); "
               "the file names no V100 variant (the README's other V100 examples are a Tesla V100-PCIe-16GB)")


def _device():
    from hosts.lhc.timing import LhcDevice  # noqa: PLC0415
    return LhcDevice("gpu", sleep=False)


def support_stream_GBps(n: int = N_STREAM) -> float:
    """Bytes the support step moves / the time the model charges for it, GB/s."""
    from hosts.lhc.timing import step_bytes  # noqa: PLC0415
    work = {"n": n}
    return step_bytes("support", work)[0] / _device().hw_time("support", work) / 1e9


def dense_write_GBps(n: int = N_STREAM) -> float:
    """The top-k sum step with no (index, value) pairs: its dense output write, GB/s."""
    from hosts.lhc.timing import step_bytes  # noqa: PLC0415
    work = {"n": n, "k": 0, "world": 1}
    return step_bytes("topk_sum", work)[0] / _device().hw_time("topk_sum", work) / 1e9


def empty_kernel_us() -> float:
    """What the model charges one kernel that moves nothing (the support step at n = 0), us."""
    return _device().hw_time("support", {"n": 0}) * 1e6


MEASUREMENTS: list[Measurement] = [
    Measurement(
        id="lhc-codec:support-vs-read-stream", model=KEY,
        quantity="streaming bandwidth of a read-only kernel (sum = A[i], 1 load stream)",
        setting="V100, 1-GiB array, full occupancy; model: the support step's bytes (4n + n/8) / its time, "
                "n = 2^28",
        published=866.0, unit="GB/s", source=GPU_BENCHES.format(col="read"),
        predict=support_stream_GBps),
    Measurement(
        id="lhc-codec:support-vs-global-mem-bw", model=KEY,
        quantity="V100 global-memory bandwidth (microbenchmark, streaming loads)",
        setting="Tesla V100; model: the support step's bytes (4n + n/8) / its time, n = 2^28",
        published=750.0, unit="GB/s",
        source="Jia, Maggioni, Staiger, Scarpazza, 'Dissecting the NVIDIA Volta GPU Architecture via "
               "Microbenchmarking', arXiv:1804.06826 (2018), measured global-memory bandwidth (secondary: value "
               "as quoted from it in a public GPU model's hardware parameters, the report itself not re-read "
               "here; the same number checks device:glm-gpu)",
        predict=support_stream_GBps),
    Measurement(
        id="lhc-codec:dense-write-vs-init-stream", model=KEY,
        quantity="streaming bandwidth of a store-only kernel (A[i] = c, 1 store stream)",
        setting="V100, 1-GiB array, full occupancy; model: the top-k sum step's dense 4n-byte output write "
                "(no pairs) / its time, n = 2^28",
        published=895.0, unit="GB/s", source=GPU_BENCHES.format(col="init"),
        predict=dense_write_GBps),
    Measurement(
        id="lhc-codec:launch", model=KEY,
        quantity="host-to-device launch round trip of one small (element-wise) kernel",
        setting="Tesla V100, PyTorch element-wise kernel, before its first instruction runs; "
                "model: one kernel moving nothing (GPU_LAUNCH_S)",
        published=20.0, unit="us",
        source="secondary: groundy.com, 'Every CUDA Kernel Pays a Launch Tax' ('roughly 20 microseconds "
               "on a Tesla V100'), citing NVIDIA's Nsight Systems user guide (primary not re-read here; "
               "the same number checks device:glm-gpu's launch_s)",
        predict=empty_kernel_us),
]
