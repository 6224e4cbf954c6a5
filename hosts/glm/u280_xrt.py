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

With dry_run (or when pyxrt cannot be imported) nothing touches hardware: each
call is appended to `calls` as a dict and the kernel semantics are computed in
numpy float32, so training can run end to end through the adapter.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .models import GLM, get_model

FORWARD, BACKWARD, UPDATE = 0, 1, 2
LOSS_KIND = {"linreg": 0, "logreg": 1, "svm": 2}
ARG_INDEX = {"samples": 0, "labels": 1, "model": 2, "idx": 3, "partial": 4, "grad": 5}


def _import_pyxrt():
    try:
        import pyxrt  # type: ignore
        return pyxrt
    except ImportError:
        return None


class U280XrtAdapter:
    def __init__(self, xclbin: str, device_index: int = 0, kernel_name: str = "p4sgd_glm",
                 dry_run: bool | None = None):
        self.xclbin, self.device_index, self.kernel_name = xclbin, device_index, kernel_name
        self._xrt = None if dry_run else _import_pyxrt()
        self.dry_run = self._xrt is None
        self.calls: list[dict[str, Any]] = []
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
        self._call("load_xclbin", path=self.xclbin)
        self._call("kernel", name=self.kernel_name, access="shared")
        if not self.dry_run:
            x = self._xrt
            self._dev = x.device(self.device_index)
            uuid = self._dev.load_xclbin(x.xclbin(self.xclbin))
            self._kernel = x.kernel(self._dev, uuid, self.kernel_name, x.kernel.shared)

    def _alloc(self, name: str, nbytes: int) -> None:
        arg = ARG_INDEX[name]
        self._call("bo_alloc", bo=name, bytes=nbytes, group_id_of_arg=arg)
        if self.dry_run:
            self._mem[name] = np.zeros(nbytes, dtype=np.uint8)
        else:
            x = self._xrt
            self._bos[name] = x.bo(self._dev, nbytes, x.bo.normal, self._kernel.group_id(arg))

    def _write(self, name: str, arr: np.ndarray) -> None:
        raw = np.ascontiguousarray(arr).view(np.uint8).ravel()
        self._call("bo_write", bo=name, bytes=raw.size, offset=0)
        self._call("bo_sync", bo=name, direction="to_device", bytes=raw.size)
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
        self._call("wait")
        if self.dry_run:
            self._emulate(**scalars)
        else:
            args = [self._bos[n] for n in ARG_INDEX] + [
                np.uint32(n_rows), np.uint32(self.f_slice), np.uint32(mode),
                np.uint32(scalars["loss_kind"]), np.float32(lr), np.float32(inv_batch),
                np.float32(l2)]
            self._kernel(*args).wait()

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

    def describe(self, file=None) -> str:
        """Human-readable list of the recorded XRT calls (also printed)."""
        head = (f"U280XrtAdapter({'dry run' if self.dry_run else 'pyxrt'}, "
                f"xclbin={self.xclbin}, kernel={self.kernel_name}): {len(self.calls)} calls")
        lines = [head] + [
            f"{i:4d} {c['op']:<12s} " + ", ".join(f"{k}={v}" for k, v in c.items() if k != "op")
            for i, c in enumerate(self.calls)]
        text = "\n".join(lines)
        print(text, file=file)
        return text
