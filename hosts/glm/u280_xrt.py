"""Drive a real Alveo U280 through XRT (pyxrt), or record what it would do.

Our emulated P4SGD worker keeps networking on the host: per micro-batch the
host asks the FPGA for partial dot products, allreduces them through the
switch, hands the sums back, and at the end of a mini-batch asks for the
update. (The paper's FPGAs talk to the switch directly; this host-in-the-loop
split is our design, so real boards can join the emulated network.)

Kernel interface this adapter expects (our definition, not P4SGD's):

    extern "C" void p4sgd_glm(                 // kernel name: "p4sgd_glm"
        const float *samples,   // arg 0  HBM: n_total x f_slice, row-major float32
        const float *labels,    // arg 1  HBM: n_total labels, float32 (+-1 or real)
        float       *model,     // arg 2  HBM: f_slice model slice (kept on chip by the kernel)
        const int   *idx,       // arg 3  HBM: max_micro_batch sample indices of this micro-batch
        float       *partial,   // arg 4  HBM: max_micro_batch; FORWARD writes q, BACKWARD reads s
        float       *grad,      // arg 5  HBM: f_slice gradient accumulator
        unsigned n_rows,        // arg 6  samples in this micro-batch (<= max_micro_batch)
        unsigned f_slice,       // arg 7  features in this worker's slice
        unsigned mode,          // arg 8  0 FORWARD, 1 BACKWARD, 2 UPDATE
        unsigned loss_kind,     // arg 9  0 linreg, 1 logreg, 2 svm
        float lr,               // arg 10 UPDATE: learning rate
        float inv_batch,        // arg 11 UPDATE: 1 / mini-batch size
        float l2);              // arg 12 UPDATE: L2 regularisation
    FORWARD : partial[i] = samples[idx[i], :] . model                  (i < n_rows)
    BACKWARD: g_i = dloss(partial[i], labels[idx[i]]); grad += g_i * samples[idx[i], :]
    UPDATE  : model -= lr * (grad * inv_batch + l2 * model); grad = 0

Every call is appended to `calls` as a dict (a real run's log and a dry run's
plan alike). With dry_run nothing touches hardware and the kernel semantics
are computed in numpy float32, so training runs end to end through the
adapter. Without dry_run pyxrt must import: a missing pyxrt is an error
(XrtUnavailable), never a silent dry run. A real run times each kernel
execution (run + wait) and records it as `kernel_s` on the call.

How a P4SGD worker uses it: hosts/p4sgd.py (workload field `xrt`), with
hosts/glm/training.py's pipelined schedule calling forward/backward/update.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from hosts.common.device import DeviceStats

from .models import GLM, get_model

FORWARD, BACKWARD, UPDATE = 0, 1, 2
LOSS_KIND = {"linreg": 0, "logreg": 1, "svm": 2}
ARG_INDEX = {"samples": 0, "labels": 1, "model": 2, "idx": 3, "partial": 4, "grad": 5}


KERNEL_NAME = "p4sgd_glm"
# An xclbin (AXLF container) starts with this magic (xclbin.h: m_magic "xclbin2").
XCLBIN_MAGIC = b"xclbin2\0"


class XrtUnavailable(ValueError):
    """Real hardware asked for, but XRT's Python binding (pyxrt) is not importable."""


def pyxrt_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("pyxrt") is not None


def _import_pyxrt():
    try:
        import pyxrt  # type: ignore
        return pyxrt
    except ImportError as e:
        raise XrtUnavailable(
            f"pyxrt (XRT's Python binding) cannot be imported ({e}); on the U280 host run "
            f"`source /opt/xilinx/xrt/setup.sh` first, or set xrt.dry_run: true") from None


def check_xclbin(path: str | Path) -> str | None:
    """Why `path` is not a usable xclbin file, or None if it looks like one."""
    p = Path(path).expanduser()
    if not p.is_file():
        return f"no such file: {p}"
    with p.open("rb") as f:
        head = f.read(len(XCLBIN_MAGIC))
    if head != XCLBIN_MAGIC:
        return f"{p} is not an xclbin (it does not start with the {XCLBIN_MAGIC[:7].decode()} magic)"
    return None


class U280XrtAdapter:
    def __init__(self, xclbin: str | None, device_index: int = 0, kernel_name: str = KERNEL_NAME,
                 dry_run: bool = False, record_only: bool = False):
        """record_only (implies dry_run): record the calls, keep no data and compute
        nothing (a plan of the call sequence, e.g. for `testbed run --dry-run`)."""
        self.xclbin, self.device_index, self.kernel_name = xclbin, device_index, kernel_name
        self.record_only = record_only
        self.dry_run = bool(dry_run or record_only)
        self._xrt = None if self.dry_run else _import_pyxrt()
        self.calls: list[dict[str, Any]] = []
        self.kernel_s = 0.0                    # real run: summed kernel execution time
        self._bos: dict[str, Any] = {}        # real pyxrt.bo objects
        self._mem: dict[str, np.ndarray] = {}  # dry run: device memory contents
        self._dev = self._kernel = None
        self._model: GLM | None = None
        self.f_slice = self.max_micro_batch = 0

    # ------------------------------------------------------------ recording layer
    def _call(self, op: str, **details) -> None:
        self.calls.append({"op": op, **details})

    def _open(self) -> None:
        self._call("device", index=self.device_index)
        self._call("load_xclbin", path=self.xclbin or "<none given: dry run>")
        self._call("kernel", name=self.kernel_name, access="shared")
        if not self.dry_run:
            x = self._xrt
            self._dev = x.device(self.device_index)
            uuid = self._dev.load_xclbin(x.xclbin(self.xclbin))
            self._kernel = x.kernel(self._dev, uuid, self.kernel_name, x.kernel.shared)

    def _alloc(self, name: str, nbytes: int) -> None:
        arg = ARG_INDEX[name]
        self._call("bo_alloc", bo=name, bytes=nbytes, group_id_of_arg=arg)
        if self.record_only:
            return
        if self.dry_run:
            self._mem[name] = np.zeros(nbytes, dtype=np.uint8)
        else:
            x = self._xrt
            self._bos[name] = x.bo(self._dev, nbytes, x.bo.normal, self._kernel.group_id(arg))

    def _write(self, name: str, arr: np.ndarray) -> None:
        nbytes = int(np.asarray(arr).nbytes)
        self._call("bo_write", bo=name, bytes=nbytes, offset=0)
        self._call("bo_sync", bo=name, direction="to_device", bytes=nbytes)
        if self.record_only:
            return
        raw = np.ascontiguousarray(arr).view(np.uint8).ravel()
        if self.dry_run:
            self._mem[name][:raw.size] = raw
        else:
            bo = self._bos[name]
            bo.write(raw, 0)
            bo.sync(self._xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, raw.size, 0)

    def _read(self, name: str, dtype, count: int) -> np.ndarray:
        nbytes = np.dtype(dtype).itemsize * count
        self._call("bo_sync", bo=name, direction="from_device", bytes=nbytes)
        self._call("bo_read", bo=name, bytes=nbytes)
        if self.record_only:
            return np.zeros(count, dtype=dtype)
        if self.dry_run:
            return self._mem[name][:nbytes].view(dtype).copy()
        bo = self._bos[name]
        bo.sync(self._xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE, nbytes, 0)
        return np.frombuffer(bo.map(), dtype=dtype, count=count).copy()

    def _run(self, mode: int, n_rows: int = 0, lr: float = 0.0, inv_batch: float = 0.0,
             l2: float = 0.0) -> None:
        scalars = {"n_rows": n_rows, "f_slice": self.f_slice, "mode": mode,
                   "loss_kind": LOSS_KIND[self._model.name], "lr": lr,
                   "inv_batch": inv_batch, "l2": l2}
        self._call("run", kernel=self.kernel_name, buffers=list(ARG_INDEX), **scalars)
        if self.record_only:
            self._call("wait")
        elif self.dry_run:
            self._emulate(**scalars)
            self._call("wait")
        else:
            args = [self._bos[n] for n in ARG_INDEX] + [
                np.uint32(n_rows), np.uint32(self.f_slice), np.uint32(mode),
                np.uint32(scalars["loss_kind"]), np.float32(lr), np.float32(inv_batch),
                np.float32(l2)]
            t = time.perf_counter()
            self._kernel(*args).wait()
            dt = time.perf_counter() - t       # the kernel's own time, as the host sees it
            self.kernel_s += dt
            self._call("wait", kernel_s=dt)

    def _view(self, name: str, dtype) -> np.ndarray:
        return self._mem[name].view(dtype)

    def _emulate(self, n_rows, f_slice, mode, loss_kind, lr, inv_batch, l2) -> None:
        """Kernel semantics in float32 (dry run only)."""
        X = self._view("samples", np.float32).reshape(-1, f_slice)
        model, grad = self._view("model", np.float32), self._view("grad", np.float32)
        idx = self._view("idx", np.int32)[:n_rows]
        partial = self._view("partial", np.float32)
        if mode == FORWARD:
            partial[:n_rows] = X[idx] @ model
        elif mode == BACKWARD:
            labels = self._view("labels", np.float32)[idx]
            g = self._model.derivative(partial[:n_rows], labels).astype(np.float32)
            grad += X[idx].T @ g
        else:
            model -= np.float32(lr) * (grad * np.float32(inv_batch) + np.float32(l2) * model)
            grad[:] = 0

    # ------------------------------------------------------------ public API
    def load(self, X_part: np.ndarray, y: np.ndarray, x0: np.ndarray | None,
             max_micro_batch: int, model: str | GLM) -> None:
        """Open the device, allocate the HBM buffers and upload data and model."""
        if hasattr(X_part, "tocsr"):
            raise ValueError("the U280 kernel takes dense samples (n x f_slice float32); "
                             "this dataset is sparse")
        X_part = np.asarray(X_part, dtype=np.float32)
        if X_part.ndim != 2:
            raise ValueError("the U280 kernel takes a dense 2-D feature slice")
        self._model = get_model(model)
        n, self.f_slice = X_part.shape
        self.max_micro_batch = int(max_micro_batch)
        x0 = np.zeros(self.f_slice, np.float32) if x0 is None else np.asarray(x0, np.float32)
        self._open()
        sizes = {"samples": X_part.nbytes, "labels": 4 * n, "model": 4 * self.f_slice,
                 "idx": 4 * self.max_micro_batch, "partial": 4 * self.max_micro_batch,
                 "grad": 4 * self.f_slice}
        for name, nbytes in sizes.items():
            self._alloc(name, nbytes)
        self._write("samples", X_part)
        self._write("labels", np.asarray(y, dtype=np.float32))
        self._write("model", x0)
        self._write("grad", np.zeros(self.f_slice, np.float32))

    def _check_rows(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int32)
        if not 0 < idx.size <= self.max_micro_batch:
            raise ValueError(f"micro-batch of {idx.size} rows; kernel takes 1..{self.max_micro_batch}")
        return idx

    def forward(self, idx) -> np.ndarray:
        """Partial dot products q of this worker's slice for samples idx."""
        idx = self._check_rows(idx)
        self._write("idx", idx)
        self._run(FORWARD, n_rows=idx.size)
        return self._read("partial", np.float32, idx.size)

    def backward(self, idx, s) -> None:
        """Accumulate the gradient on the device from the allreduced sums s."""
        idx = self._check_rows(idx)
        self._write("idx", idx)
        self._write("partial", np.asarray(s, dtype=np.float32))
        self._run(BACKWARD, n_rows=idx.size)

    def update(self, lr: float, batch_size: int, l2: float = 0.0) -> None:
        self._run(UPDATE, lr=lr, inv_batch=1.0 / batch_size, l2=l2)

    def read_model(self) -> np.ndarray:
        return self._read("model", np.float32, self.f_slice)

    def reset_model(self, x0: np.ndarray | None = None) -> None:
        """Start training again (after calibration): model x0 (zeros), gradient zero."""
        self._write("model", np.zeros(self.f_slice, np.float32) if x0 is None
                    else np.asarray(x0, np.float32))
        self._write("grad", np.zeros(self.f_slice, np.float32))

    def header(self) -> dict[str, Any]:
        return {"adapter": "U280XrtAdapter", "dry_run": self.dry_run, "xclbin": self.xclbin,
                "device_index": self.device_index, "kernel": self.kernel_name,
                "calls": len(self.calls), "kernel_s_total": None if self.dry_run else self.kernel_s}

    def write_calls(self, path: str | Path) -> None:
        """The recorded calls as JSON lines: a header line, then one line per call."""
        with Path(path).open("w") as f:
            f.write(json.dumps({"type": "xrt_header", **self.header()}) + "\n")
            for c in self.calls:
                f.write(json.dumps(c) + "\n")

    def describe(self, file=None) -> str:
        """Human-readable list of the recorded XRT calls (also printed)."""
        text = self.text()
        print(text, file=file)
        return text

    def text(self) -> str:
        """Human-readable list of the recorded XRT calls."""
        head = (f"U280XrtAdapter({'dry run' if self.dry_run else 'pyxrt'}, "
                f"xclbin={self.xclbin}, kernel={self.kernel_name}): {len(self.calls)} calls")
        lines = [head] + [
            f"{i:4d} {c['op']:<12s} " + ", ".join(f"{k}={v}" for k, v in c.items() if k != "op")
            for i, c in enumerate(self.calls)]
        return "\n".join(lines)


class XrtKernelDevice(DeviceStats):
    """A real U280's time: a step takes what its kernel executions took (measured
    by the adapter around run + wait); no model, no dilation, never invalid.
    Buffer transfers of the host-in-the-loop split are host time, not counted."""

    name = "u280"
    measured = True

    def __init__(self, adapter: U280XrtAdapter):
        self.adapter = adapter
        self._reset_stats()

    def step_time(self, *args, **kwargs) -> None:
        return None  # known only after the kernel ran

    def run(self, fn, n_samples: int = 0, n_features_slice: int = 0, nnz: int | None = None,
            phase: str = "step"):
        k0 = self.adapter.kernel_s
        result = fn()
        k = self.adapter.kernel_s - k0
        self._record(k, k)
        return result, k, k

    def describe(self) -> dict[str, Any]:
        return {"device": self.name, "model": "measured kernel time (XRT)", "xrt": self.adapter.header()}


def plan_calls(n_samples: int, f_slice: int, batch: int, micro_batch: int, depth: int,
               glm: str, lr: float, l2: float, xclbin: str | None, device_index: int = 0,
               kernel_name: str = KERNEL_NAME) -> U280XrtAdapter:
    """The calls one worker makes to open the device and train its first mini-batch
    (pipelined as hosts/glm/training.py does), recorded without data or hardware."""
    from collections import deque

    ad = U280XrtAdapter(xclbin, device_index, kernel_name, record_only=True)
    zeros = np.broadcast_to(np.float32(0), (n_samples, f_slice))
    ad.load(zeros, np.broadcast_to(np.float32(0), (n_samples,)), None, micro_batch, glm)
    rows = np.arange(min(batch, n_samples))
    inflight: deque = deque()
    for start in range(0, rows.size, micro_batch):
        c = rows[start:start + micro_batch]
        inflight.append((c, ad.forward(c)))
        if len(inflight) >= depth:
            ad.backward(*inflight.popleft())
    while inflight:
        ad.backward(*inflight.popleft())
    ad.update(lr, rows.size, l2)
    ad.read_model()
    return ad
