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

The project's own H100 measurement (gpu_h100.py, data/gpu_h100_2026-11-26.json) adds
what no publication gave: the codec's steps themselves, timed at the profiles' full
sizes in a torch port checked bit for bit against hosts/lhc/codec.py. The model is
carried to the H100 by its own formulas with the H100's data-sheet HBM peak (3.35
TB/s) in place of the V100's 900 GB/s, its efficiency (0.7) and per-kernel launch
(5 us) unchanged; launch costs are host- and driver-bound and are compared as
measured. Per case (4 workers; NCF, LSTM, VGG19 and BERT-base profiles at full size,
and the public demo's 2^27 values at 5 %):

  * support: the model's step (4n + n/8 B, 1 kernel) against the measured step;
  * encode: the model's step (4n + 24u + 12u x rounds B, 2 kernels: the plan's
    counting and peeling order, then the sketch) against the measured plan + sketch;
  * decode: the model's step (24u x rounds + 4n B, rounds + 1 kernels) against the
    measured peeling decode.

The torch port runs unfused torch ops (4 kernels per decode round where the model
charges 1; the plan reads counts back to the host every round): an upper bound on a
hand-written codec's time, so a model faster than a row is not refuted by it alone;
a model slower than a row is (the decode).
"""
from __future__ import annotations

from testbed.reproduce.measurements import Measurement, gpu_h100

KEY = "device:lhc-codec-v100"
N_STREAM = 2 ** 28            # float32 values: 1 GiB, gpu-stream's array size (128 Mi doubles)

GPU_BENCHES = ("github.com/te42kyfo/gpu-benches, gpu-stream/v100.txt (commit a7dc559, 2023-01-24): "
               "'{col}' column at blockSize 1024 (100 % occupancy); arrays of 128 Mi doubles (gpu-stream/main.cu); "
               "the file names no V100 variant (the README's other V100 examples are a Tesla V100-PCIe-16GB)")


def _device(hbm_peak_Bps: float | None = None):
    """The model at its defaults; hbm_peak_Bps: carried to another GPU's data-sheet peak."""
    from hosts.lhc.timing import LhcDevice  # noqa: PLC0415
    return LhcDevice("gpu", sleep=False, hbm_peak_Bps=hbm_peak_Bps)


def support_stream_GBps(n: int = N_STREAM, hbm_peak_Bps: float | None = None) -> float:
    """Bytes the support step moves / the time the model charges for it, GB/s."""
    from hosts.lhc.timing import step_bytes  # noqa: PLC0415
    work = {"n": n}
    return step_bytes("support", work)[0] / _device(hbm_peak_Bps).hw_time("support", work) / 1e9


def dense_write_GBps(n: int = N_STREAM, hbm_peak_Bps: float | None = None) -> float:
    """The top-k sum step with no (index, value) pairs: its dense output write, GB/s."""
    from hosts.lhc.timing import step_bytes  # noqa: PLC0415
    work = {"n": n, "k": 0, "world": 1}
    return step_bytes("topk_sum", work)[0] / _device(hbm_peak_Bps).hw_time("topk_sum", work) / 1e9


def h100_step_ms(case: str, step: str) -> float:
    """What the model charges one codec step of a measured case, carried to the H100
    (its formulas and constants, the H100's data-sheet HBM peak), ms."""
    c = gpu_h100.codec_cases()[case]
    return _device(gpu_h100.h100_hbm_peak_Bps()).hw_time(step, c.work()) * 1e3


CODEC_STEPS = ("support", "encode", "decode")     # the model's steps of one aggregation (papers/lhc.py)
_MEASURED_STEP = {"support": "support", "encode": "encode_incl_plan", "decode": "decode"}


def h100_codec_efficiency(case: str) -> float:
    """The one HBM efficiency (share of the H100's data-sheet peak) at which the model's
    codec, its bytes and its launches at the model's nominal values (GPU_LAUNCH_S; every
    peeling round a pass over the union), takes the time the torch port took for the
    same three steps of a measured case: the measurement expressed as the model's constant."""
    from hosts.lhc.timing import step_bytes  # noqa: PLC0415
    c = gpu_h100.codec_cases()[case]
    dev = _device(gpu_h100.h100_hbm_peak_Bps())
    moved = sum(step_bytes(s, c.work())[0] for s in CODEC_STEPS)
    launches_s = sum(step_bytes(s, c.work())[1] for s in CODEC_STEPS) * dev.launch_s
    measured_s = sum(c.measured_ms[_MEASURED_STEP[s]] for s in CODEC_STEPS) * 1e-3
    if measured_s <= launches_s:
        raise ValueError(f"{case}: measured {measured_s * 1e3:.3g} ms is within the model's launches alone")
    return moved / ((measured_s - launches_s) * dev.hbm_peak_Bps)


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


# -- the project's H100 measurement (gpu_h100.py) ---------------------------------------------
_CARRY = ("model: LhcDevice at its defaults (efficiency 0.7, 5-us launch) with the H100's data-sheet HBM peak "
          "3.35 TB/s in place of the V100's 900 GB/s")
_PORT = ("the project's torch port of the codec (bench/gpu_constants.py; plan, payloads and decoded sum equal "
         "to hosts/lhc/codec.py's bit for bit), unfused torch ops, CUDA events, median of 5")
_CASE_LABEL = {"demo_2^27": "the public demo (2^27 values, 5 %, one mask for all workers)"}


def _case_setting(c: gpu_h100.CodecCase) -> str:
    label = _CASE_LABEL.get(c.name, f"the {c.name} profile at full size with the densities it assumed on "
                                    "2026-11-26, before lhc_density.py measured them (hosts/lhc/profiles.py, "
                                    "overlap 0.5)")
    return (f"H100, {label}: n = {c.n:,}, union {c.union:,} of 4 workers, {c.lanes} lanes x {c.rows:,} rows, "
            f"{c.rounds} peeling rounds; {_PORT}")


def _step_rows(c: gpu_h100.CodecCase) -> list[Measurement]:
    k, ms = c.torch_kernels, c.measured_ms
    src = gpu_h100.source(f"lhc_codec.cases.{c.name}.steps.<step>.median_ms")
    what = {
        "support": ("support step (dense gradient -> union bitmap)", ms["support"],
                    f"{k['support']} torch kernels (the model: 1); {_CARRY}: 4n + n/8 B, 1 kernel"),
        "encode": ("encode step: plan (counting, peeling order) + sketch (signed scatter-add of 3 hashes)",
                   ms["encode_incl_plan"],
                   f"plan {ms['plan']:.3g} ms ({k['plan']} kernels, {c.memcpy_memset['plan']} memcpy/memset: the "
                   f"counts read back every round) + sketch {ms['encode']:.3g} ms ({k['encode']} kernels); "
                   f"{_CARRY}: 4n + 24u + 12u x rounds B, 2 kernels"),
        "decode": ("decode step (peeling rounds, then the dense scatter)", ms["decode"],
                   f"{c.decode_kernels_per_round} kernels per round (the model: 1), each round touching only the "
                   f"positions still alive ({c.peel_pass_share:.1%} of the union per round on average; the model: "
                   f"all of it); {_CARRY}: 24u x rounds + 4n B, rounds + 1 kernels"),
    }
    return [Measurement(
        id=f"lhc-codec:h100-{c.name.split('_')[0]}-{step}", model=KEY, quantity=quantity,
        setting=f"{_case_setting(c)}; {detail}", published=published, unit="ms",
        source=src.replace("<step>", "encode_incl_plan" if step == "encode" else step),
        predict=lambda name=c.name, step=step: h100_step_ms(name, step))
        for step, (quantity, published, detail) in what.items()]


def _h100_rows() -> list[Measurement]:
    launch, stream, peak = gpu_h100.launch(), gpu_h100.stream(), gpu_h100.h100_hbm_peak_Bps()
    arr = f"{stream.values:,} float32 values (1 GiB), CUDA events, median of 10"
    rows = [
        Measurement(
            id="lhc-codec:h100-launch-roundtrip", model=KEY,
            quantity="round trip of one tiny kernel and a synchronize",
            setting=f"H100 {gpu_h100.HOST}, x.add_(1) on 1 element + torch.cuda.synchronize(), median of 5000 "
                    f"(the synchronize alone: {launch.sync_only_us:.3g} us); model: one kernel moving nothing "
                    "(GPU_LAUNCH_S: 'launch + sync'), host- and driver-bound, compared as measured",
            published=launch.roundtrip_us, unit="us", source=gpu_h100.source("launch.roundtrip.median_us"),
            predict=empty_kernel_us),
        Measurement(
            id="lhc-codec:h100-launch-back-to-back", model=KEY,
            quantity="per-kernel cost of kernels launched back to back (one synchronize at the end)",
            setting=f"H100 {gpu_h100.HOST}, 10,000 x.add_(1) launches from PyTorch, one synchronize: host-bound "
                    "dispatch, as a decode's per-round kernels run (a CUDA graph replays the same kernels at "
                    f"{launch.graph_per_kernel_us:.2g} us each); model: one kernel moving nothing",
            published=launch.async_per_kernel_us, unit="us",
            source=gpu_h100.source("launch.async_batch.per_kernel_us"), predict=empty_kernel_us),
        Measurement(
            id="lhc-codec:h100-support-vs-read-stream", model=KEY,
            quantity="streaming bandwidth of a read-only kernel (x.sum())",
            setting=f"H100, {arr}; {_CARRY}: the support step's bytes (4n + n/8) / its time, n = 2^28",
            published=stream.read_GBps, unit="GB/s", source=gpu_h100.source("stream.read_sum.median_GBps"),
            predict=lambda: support_stream_GBps(hbm_peak_Bps=peak)),
        Measurement(
            id="lhc-codec:h100-dense-write-vs-store-stream", model=KEY,
            quantity="streaming bandwidth of a store-only kernel (x.fill_(c))",
            setting=f"H100, {arr}; {_CARRY}: the top-k sum step's dense 4n-byte output write (no pairs) / its "
                    "time, n = 2^28",
            published=stream.store_GBps, unit="GB/s", source=gpu_h100.source("stream.store_fill.median_GBps"),
            predict=lambda: dense_write_GBps(hbm_peak_Bps=peak)),
    ]
    for c in gpu_h100.codec_cases().values():
        rows += _step_rows(c)
    return rows


MEASUREMENTS += _h100_rows()
