"""The GPU constants this project measured on one NVIDIA H100 (data/gpu_h100_2026-11-26.json,
written by bench/gpu_constants.py; data/README.md names the device, the date and the
command): a loader that checks the file is the full run and gives each number with
its provenance.

The rows that check a model against these numbers live with the model's family
(`lhc.py`: device:lhc-codec-v100; `devices.py`: device:glm-gpu, device:dnn-h100);
the envelopes that cite them read them here (papers/lhc.py, papers/p4sgd.py).

These are an H100's numbers, not a V100's. What carries over, and how, is said where
each is used: a launch cost is host- and driver-bound and is compared as measured; a
V100 bandwidth model is carried to the H100 by putting the H100's data-sheet HBM peak
(3.35 TB/s, hosts.dnn.device.HBM_BPS["h100"]) in place of the V100's 900 GB/s and
keeping the model's efficiency; a property of the codec's plan (peeling rounds, the
share of the union alive per round) does not depend on the device at all; an H100's
forward+backward time is a lower bound for a V100's at the same precision, not a
V100 value.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from testbed.reproduce.measurements import Measurement, read_measurement_file

DATA = Path(__file__).with_name("data") / "gpu_h100_2026-11-26.json"
SCHEMA = "bench.gpu_constants/1"
PARTS = ("env", "launch", "stream", "lhc_codec", "glm", "fwd_bwd")
HOST = "in a Firecracker VM (data/README.md)"     # the JSON names the host only as 'vm'
CODEC_STEPS = ("support", "plan", "encode", "encode_incl_plan", "decode")

# The package collects every module's MEASUREMENTS; the rows citing this file are in
# lhc.py and devices.py, beside the other rows of the same models.
MEASUREMENTS: list[Measurement] = []


class H100DataError(ValueError):
    """The measurement file is missing, a smoke run, cut short, or lacks a number asked for."""


def h100_hbm_peak_Bps() -> float:
    """The H100 SXM's data-sheet HBM3 peak, as the project's DNN model holds it [D]."""
    from hosts.dnn.device import HBM_BPS  # noqa: PLC0415
    return HBM_BPS["h100"]


@lru_cache(maxsize=None)
def load(path: Path = DATA) -> dict[str, Any]:
    """The measurement file, checked: the schema bench/gpu_constants.py writes, a full
    (not --smoke) run on CUDA, every part done without an error."""
    path = Path(path)
    data = read_measurement_file(path, H100DataError)
    if data.get("schema") != SCHEMA:
        raise H100DataError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    if data.get("smoke") is not False:
        raise H100DataError(f"{path}: a --smoke run (its numbers mean nothing)")
    if data.get("env", {}).get("device") != "cuda":
        raise H100DataError(f"{path}: not a CUDA run (device {data.get('env', {}).get('device')!r})")
    missing = [p for p in PARTS if p not in data.get("parts_done", []) or p not in data]
    if missing:
        raise H100DataError(f"{path}: parts not done: {', '.join(missing)}")
    failed = [p for p in PARTS if isinstance(data[p], dict) and "error" in data[p]]
    if failed:
        raise H100DataError(f"{path}: parts that raised: {', '.join(failed)}")
    return data


def _get(data: dict[str, Any], *keys: str) -> Any:
    node: Any = data
    for i, k in enumerate(keys):
        if not isinstance(node, dict) or k not in node:
            raise H100DataError(f"{DATA.name}: no {'.'.join(keys[:i + 1])}")
        node = node[k]
    return node


# -- provenance -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Provenance:
    device: str
    date: str
    command: str
    file: str

    def __str__(self) -> str:
        return f"measured by this project on {self.device}, {self.date} (`{self.command}`; {self.file})"

    @property
    def short(self) -> str:
        """For a constant's text, where the full form would repeat itself."""
        return f"this project's H100 measurement, {self.date}, {self.file}"


def _repo_relative(path: Path) -> str:
    root = Path(__file__).resolve().parents[3]
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def provenance(path: Path = DATA) -> Provenance:
    data = load(path)
    env = data["env"]
    device = (f"one {_get(data, 'env', 'device_name')} ({_get(data, 'env', 'sm_count')} SMs, "
              f"torch {env.get('torch')}, CUDA {env.get('cuda')}) {HOST}")
    argv = _get(data, "env", "argv")
    command = "python3 -m bench.gpu_constants " + " ".join(argv[1:])
    return Provenance(device, str(_get(data, "env", "date_utc"))[:10], command, _repo_relative(Path(path)))


def source(what: str, path: Path = DATA) -> str:
    """A Measurement's source: the provenance, then which number of the file."""
    return f"{provenance(path)}: {what}"


# -- launch costs and streaming bandwidth ---------------------------------------------------
@dataclass(frozen=True)
class Launch:
    roundtrip_us: float          # one tiny kernel + torch.cuda.synchronize(), median
    sync_only_us: float          # the synchronize alone (in the VM), median
    async_per_kernel_us: float   # 10,000 back-to-back launches, one sync, per kernel
    graph_per_kernel_us: float   # the same kernels replayed as one CUDA graph, per kernel


def launch(path: Path = DATA) -> Launch:
    d = load(path)
    return Launch(float(_get(d, "launch", "roundtrip", "median_us")),
                  float(_get(d, "launch", "sync_only", "median_us")),
                  float(_get(d, "launch", "async_batch", "per_kernel_us")),
                  float(_get(d, "launch", "graph", "per_kernel_us")))


@dataclass(frozen=True)
class Stream:
    values: int                  # float32 values per array
    read_GBps: float             # x.sum(): 4N B read
    copy_GBps: float             # y.copy_(x): 8N B (read + write)
    store_GBps: float            # x.fill_(c): 4N B written


def stream(path: Path = DATA) -> Stream:
    d = load(path)
    return Stream(int(_get(d, "stream", "values")), float(_get(d, "stream", "read_sum", "median_GBps")),
                  float(_get(d, "stream", "copy", "median_GBps")),
                  float(_get(d, "stream", "store_fill", "median_GBps")))


# -- LHC's codec at full size ---------------------------------------------------------------
@dataclass(frozen=True)
class CodecCase:
    name: str                    # a hosts/lhc/profiles.py profile, or demo_2^27
    n: int                       # gradient values
    union: int                   # union support of the 4 workers
    rounds: int                  # peeling rounds of the plan (the slowest lane's)
    lanes: int
    rows: int
    core: int                    # values left in the 2-core (sent dense)
    peel_pass_share: float       # mean share of the union alive per peeling round
    decode_kernels_per_round: int
    measured_ms: dict[str, float]    # CODEC_STEPS -> median ms (encode: the sketch alone)
    torch_kernels: dict[str, int]    # step -> kernels the torch port launched (profiler)
    memcpy_memset: dict[str, int]    # step -> memcpy / memset operations (the plan's host reads)

    @property
    def alive_passes(self) -> float:
        """Union-sized passes the peeling makes when each round touches only the positions
        still alive: rounds x the mean alive share (device-independent: the plan's)."""
        return self.rounds * self.peel_pass_share

    def work(self) -> dict[str, int]:
        """The work dict hosts/lhc/timing.py's steps take, at this case's sizes."""
        return {"n": self.n, "union": self.union, "rounds": self.rounds}


def codec_cases(path: Path = DATA) -> dict[str, CodecCase]:
    d = load(path)
    if not _get(d, "lhc_codec", "correctness", "passed"):
        raise H100DataError(f"{DATA.name}: the torch codec did not match hosts/lhc/codec.py bit for bit")
    out = {}
    for name, c in _get(d, "lhc_codec", "cases").items():
        if not c.get("decode_exact"):
            raise H100DataError(f"{DATA.name}: lhc_codec.cases.{name}: the decode was not exact")
        steps = _get(c, "steps")
        kernels = {s: int(steps[s]["torch_kernels"]["kernels"]) for s in CODEC_STEPS
                   if s in steps and steps[s].get("torch_kernels")}
        copies = {s: int(steps[s]["torch_kernels"]["memcpy_memset"]) for s in CODEC_STEPS
                 if s in steps and steps[s].get("torch_kernels")}
        out[name] = CodecCase(
            name, int(c["n_values"]), int(c["union_values"]), int(c["rounds"]), int(c["lanes"]), int(c["rows"]),
            int(c["core_values"]), float(c["peel_pass_share"]),
            int(_get(c, "decode_kernels_per_round", "by_construction")),
            {s: float(_get(steps, s, "median_ms")) for s in CODEC_STEPS}, kernels, copies)
    return out


# -- P4SGD's GPU counterpart: the dense GLM step --------------------------------------------
@dataclass(frozen=True)
class GlmCase:
    features: int
    batch: int
    sync_step_ms: float          # one step between two synchronizes, median of 200
    async_step_ms: float         # 200 back-to-back steps / 200 (CUDA events)
    kernels: int                 # kernels one step launches (torch.profiler)


def glm_cases(path: Path = DATA) -> list[GlmCase]:
    return [GlmCase(int(c["features"]), int(c["batch"]), float(_get(c, "sync_step", "median_ms")),
                    float(c["async_ms_per_step"]), int(_get(c, "torch_kernels", "kernels")))
            for c in _get(load(path), "glm", "cases")]


# -- forward + backward per mini-batch --------------------------------------------------------
PRECISIONS = {"fp32": "fp32", "bf16": "bf16_autocast"}     # the device model's name -> the file's


def strict_fp32(path: Path = DATA) -> bool:
    """fp32 ran on the CUDA cores: TF32 off for cuDNN and matmuls, 'highest' precision."""
    t = _get(load(path), "fwd_bwd", "tf32")
    return (t.get("cudnn_allow_tf32") is False and t.get("cuda_matmul_allow_tf32") is False
            and t.get("float32_matmul_precision") == "highest")


def fwd_bwd_ms(model: str, batch: int, precision: str, path: Path = DATA) -> float:
    """Median ms of one forward + backward (no optimizer step) of `model` (the file's
    name: vgg19, resnet50, inception_v3, alexnet, bert_base, lstm_lm, ncf_neumf) at
    `batch`, precision fp32 (strict, TF32 off) or bf16 (autocast)."""
    if precision not in PRECISIONS:
        raise H100DataError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32" and not strict_fp32(path):
        raise H100DataError(f"{DATA.name}: fp32 ran with TF32 allowed: not the CUDA cores' fp32")
    runs = _get(load(path), "fwd_bwd", "models", model, "runs")
    hits = [r for r in runs if r["batch"] == batch and r["precision"] == PRECISIONS[precision]]
    if len(hits) != 1:
        have = ", ".join(f"b{r['batch']} {r['precision']}" for r in runs)
        raise H100DataError(f"{DATA.name}: fwd_bwd.{model}: no single run at batch {batch}, {precision} "
                            f"(have: {have})")
    return float(hits[0]["median_ms"])
