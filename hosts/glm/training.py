"""Mini-batch SGD for GLMs: reference, P4SGD model-parallel, data-parallel baseline.

Sample order. Every variant visits samples in the same order: epoch e uses the
permutation np.random.default_rng([seed, e]).permutation(n) ("shuffle") or
0..n-1 ("sequential"), cut into consecutive mini-batches of `batch` (the last
one may be smaller). So reference and distributed runs produce the same
iterates up to float rounding (~1e-16 relative per step).

Model parallel (P4SGD), per worker m holding columns P_m, per mini-batch:
    for each micro-batch c:      q_c = X[c, P_m] @ x[P_m]             (forward)
                                 s_c = allreduce_sum(q_c)             (network)
                                 grad += X[c, P_m]^T g(s_c, y[c])     (backward)
    x[P_m] -= lr * (grad / |batch| + l2 * x[P_m])                    (update)
x is fixed within a mini-batch, so forwards of later micro-batches may run
while earlier ones are in the network: with pipeline depth k up to k
micro-batches are outstanding. Backward runs in micro-batch order, so the
result is bit-identical to depth 1.

Communication is written as a generator protocol: the worker yields
("submit", vec, tag) and receives a handle, then ("wait", handle) and receives
the sum. One driver maps this onto a real AsyncAllreduce (network); another
runs M workers in lock-step in one process (simulate_*), with no threads.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import scipy.sparse as sp

from .data import Dataset
from .models import GLM, get_model
from .partition import assemble_model, partition_features, slice_dataset

Vector = np.ndarray
Order = str | Callable[[int], np.ndarray]


# ============================================================ allreduce interfaces
class AsyncAllreduce(Protocol):
    """Non-blocking SUM allreduce across the workers of one job.

    submit(vec) starts the reduction of this worker's contribution and returns
    a handle; wait(handle) blocks until the elementwise sum over all workers is
    known and returns it. All workers submit the same sequence of vector
    lengths in the same order (the k-th submit of every worker is one slot)."""

    def submit(self, vec: Vector) -> Any: ...

    def wait(self, handle: Any) -> Vector: ...


class BlockingAsAsync:
    """Wrap a blocking allreduce(vec) -> vec as an AsyncAllreduce (no overlap)."""

    def __init__(self, allreduce: Callable[[Vector], Vector]):
        self._allreduce = allreduce

    def submit(self, vec: Vector) -> Any:
        return [self._allreduce(vec)]

    def wait(self, handle: Any) -> Vector:
        return handle[0]


def exact_sum(vectors: Sequence[Vector]) -> Vector:
    """Sum in rank order (fixed order => deterministic float results)."""
    out = np.array(vectors[0], dtype=np.float64, copy=True)
    for v in vectors[1:]:
        out += v
    return out


class LocalAllreduceGroup:
    """Thread-safe in-process allreduce for M workers (tests, local runs).

    group.endpoint(rank) is an AsyncAllreduce and also callable as a blocking
    allreduce. `reduce(vectors)` defaults to exact_sum (e.g. pass
    hosts.ina.fixed_point.quantized_sum to mimic the switch)."""

    def __init__(self, n_workers: int, reduce: Callable[[Sequence[Vector]], Vector] | None = None,
                 timeout_s: float = 60.0):
        self.n = n_workers
        self._reduce = reduce or exact_sum
        self._timeout = timeout_s
        self._cv = threading.Condition()
        self._contrib: dict[int, list] = {}
        self._results: dict[int, Vector] = {}
        self._taken: dict[int, int] = {}

    def endpoint(self, rank: int) -> "_LocalEndpoint":
        if not 0 <= rank < self.n:
            raise ValueError(f"rank {rank} outside 0..{self.n - 1}")
        return _LocalEndpoint(self, rank)

    def _put(self, seq: int, rank: int, vec: Vector) -> None:
        with self._cv:
            slot = self._contrib.setdefault(seq, [None] * self.n)
            if slot[rank] is not None:
                raise RuntimeError(f"rank {rank} submitted slot {seq} twice")
            slot[rank] = np.array(vec, copy=True)
            if all(v is not None for v in slot):
                self._results[seq] = self._reduce(slot)
                del self._contrib[seq]
                self._cv.notify_all()

    def _get(self, seq: int) -> Vector:
        with self._cv:
            if not self._cv.wait_for(lambda: seq in self._results, timeout=self._timeout):
                raise TimeoutError(f"allreduce slot {seq} incomplete after {self._timeout}s "
                                   "(a worker stopped or submitted a different sequence)")
            out = np.array(self._results[seq], copy=True)
            self._taken[seq] = self._taken.get(seq, 0) + 1
            if self._taken[seq] == self.n:  # everyone has it: free the slot
                del self._results[seq], self._taken[seq]
            return out


class _LocalEndpoint:
    def __init__(self, group: LocalAllreduceGroup, rank: int):
        self.group, self.rank, self._next = group, rank, 0

    def submit(self, vec: Vector) -> int:
        seq, self._next = self._next, self._next + 1
        self.group._put(seq, self.rank, vec)
        return seq

    def wait(self, handle: int) -> Vector:
        return self.group._get(handle)

    def __call__(self, vec: Vector) -> Vector:
        return self.wait(self.submit(vec))


# ============================================================ drivers
def _drive(gen: Iterator, aar: AsyncAllreduce):
    """Run one worker generator against an AsyncAllreduce; return its value."""
    reply = None
    try:
        while True:
            op = gen.send(reply)
            reply = aar.submit(op[1]) if op[0] == "submit" else aar.wait(op[1])
    except StopIteration as stop:
        return stop.value


def _run_lockstep(gens: list[Iterator], reduce: Callable[[list, str], Vector]) -> list:
    """Run M worker generators cooperatively; slot k = every worker's k-th submit.

    A worker advances until it waits for a slot some other worker has not yet
    submitted; then the next worker runs. Deterministic and single-threaded."""
    M = len(gens)
    ops: list = [None] * M
    done, outputs = [False] * M, [None] * M
    next_seq = [0] * M
    contrib: dict[int, list] = {}
    results: dict[int, list] = {}  # seq -> [sum, times taken]

    def advance(r, reply):
        try:
            ops[r] = gens[r].send(reply)
        except StopIteration as stop:
            done[r], outputs[r] = True, stop.value

    for r in range(M):
        advance(r, None)
    while not all(done):
        progressed = False
        for r in range(M):
            while not done[r]:
                op = ops[r]
                if op[0] == "submit":
                    seq = next_seq[r]
                    next_seq[r] += 1
                    contrib.setdefault(seq, [[None] * M, op[2]])[0][r] = op[1]
                    reply = seq
                else:
                    seq = op[1]
                    if seq not in results:
                        vecs, tag = contrib.get(seq, ([None], None))
                        if any(v is None for v in vecs) or len(vecs) != M:
                            break  # others have not submitted this slot yet
                        results[seq] = [reduce(vecs, tag), 0]
                        del contrib[seq]
                    entry = results[seq]
                    reply = np.array(entry[0], copy=True)
                    entry[1] += 1
                    if entry[1] == M:
                        del results[seq]
                advance(r, reply)
                progressed = True
        if not progressed:
            raise RuntimeError("lock-step simulation deadlocked: workers disagree on the "
                               "allreduce sequence")
    return outputs


# ============================================================ shared helpers
def epoch_order(n: int, seed: int, epoch: int, order: Order = "shuffle") -> np.ndarray:
    """Sample visiting order of one epoch (identical on every worker)."""
    if callable(order):
        return np.asarray(order(epoch))
    if order == "shuffle":
        return np.random.default_rng([seed, epoch]).permutation(n)
    if order == "sequential":
        return np.arange(n)
    raise ValueError(f"order must be 'shuffle', 'sequential' or a callable, got {order!r}")


def minibatches(sample_order: np.ndarray, batch: int) -> list[np.ndarray]:
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return [sample_order[i:i + batch] for i in range(0, len(sample_order), batch)]


def _rows_nnz(X, rows: np.ndarray) -> int | None:
    """nnz of the selected rows (None for dense: the device counts all entries)."""
    if sp.issparse(X):
        return int(np.sum(X.indptr[rows + 1] - X.indptr[rows]))
    return None


def _accumulate(grad: Vector, Xc, g: Vector) -> None:
    """grad += Xc^T g, O(nnz) for CSR (no dense temporary of the slice width)."""
    if sp.issparse(Xc):
        np.add.at(grad, Xc.indices, Xc.data * np.repeat(g, np.diff(Xc.indptr)))
    else:
        grad += Xc.T @ g


def _gather_forward(X_part, rows, x):
    Xc = X_part[rows]
    return Xc, Xc @ x


def _on_device(device, fn, n, f, nnz, phase):
    return fn() if device is None else device.run(fn, n, f, nnz, phase=phase)[0]


def _history_entry(epoch, step, seen, model: GLM, s, y, sq_norm) -> dict:
    return {"epoch": epoch, "step": step, "samples_seen": seen,
            "loss": model.loss(s, y), "objective": model.loss(s, y) + model.regularizer(sq_norm),
            "accuracy": model.accuracy(s, y)}


def evaluate(data: Dataset, x: Vector, model: str | GLM) -> dict:
    """Loss, regularised objective and accuracy (None for linreg) of a full model."""
    model = get_model(model)
    s = data.X @ x
    out = {"samples": data.n_samples, "loss": model.loss(s, data.y),
           "objective": model.objective(s, data.y, x), "accuracy": model.accuracy(s, data.y)}
    if not model.classification:
        out["rmse"] = float(np.sqrt(np.mean((s - data.y) ** 2)))
    return out


# ============================================================ reference
def reference_sgd(ds: Dataset, model: str | GLM, lr: float, batch: int, epochs: int,
                  seed: int, order: Order = "shuffle", x0: Vector | None = None,
                  eval_every: int = 1) -> tuple[Vector, list[dict]]:
    """Single-process mini-batch SGD; the ground truth for the distributed variants."""
    model = get_model(model)
    X, y = ds.X, ds.y
    x = np.zeros(ds.n_features) if x0 is None else np.array(x0, dtype=np.float64)
    history = [_history_entry(0, 0, 0, model, X @ x, y, x @ x)] if eval_every else []
    step = 0
    for epoch in range(epochs):
        for idx in minibatches(epoch_order(ds.n_samples, seed, epoch, order), batch):
            Xb = X[idx]
            grad = np.zeros_like(x)
            _accumulate(grad, Xb, model.derivative(Xb @ x, y[idx]))
            x -= lr * (grad / len(idx) + model.reg_gradient(x))
            step += 1
        if eval_every and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs):
            history.append(_history_entry(epoch + 1, step, (epoch + 1) * ds.n_samples,
                                          model, X @ x, y, x @ x))
    return x, history


# ============================================================ model parallel (P4SGD)
def _mp_minibatch(X_part, y, x, model: GLM, lr, idx, micro_batch, depth, device, kernel=None):
    """Generator: one pipelined mini-batch; updates x in place.

    kernel: a U280 kernel adapter (hosts.glm.u280_xrt) that holds the samples,
    the model slice and the gradient on the card: forward, backward and update
    run there (x is then left alone; read the model back from the kernel)."""
    if micro_batch < 1 or depth < 1:
        raise ValueError("micro_batch and pipeline depth must be >= 1")
    f = X_part.shape[1]
    grad = np.zeros_like(x) if kernel is None else None
    inflight: deque = deque()

    def backward():
        c, Xc, handle = inflight.popleft()
        s = yield ("wait", handle)
        if kernel is not None:
            _on_device(device, lambda: kernel.backward(c, s), len(c), f, None, "backward")
            return
        g = model.derivative(s, y[c])
        _on_device(device, lambda: _accumulate(grad, Xc, g), len(c), f, _rows_nnz(X_part, c),
                   "backward")

    for start in range(0, len(idx), micro_batch):
        c = idx[start:start + micro_batch]
        # The gather of the micro-batch's rows is part of the forward pass (the
        # device model charges streaming them from HBM), so it runs on the device.
        if kernel is None:
            Xc, q = _on_device(device, lambda: _gather_forward(X_part, c, x), len(c), f,
                               _rows_nnz(X_part, c), "forward")
        else:
            Xc, q = None, _on_device(device, lambda: kernel.forward(c), len(c), f, None, "forward")
        handle = yield ("submit", np.asarray(q, dtype=np.float64), "forward")
        inflight.append((c, Xc, handle))
        if len(inflight) >= depth:  # k micro-batches outstanding: retire the oldest
            yield from backward()
    while inflight:  # drain: the update needs every micro-batch's gradient
        yield from backward()
    if kernel is not None:   # not charged, as the device model does not (model on chip)
        kernel.update(lr, len(idx), model.l2)
    else:
        x -= lr * (grad / len(idx) + model.reg_gradient(x))


def _mp_eval(X_part, y, x, model: GLM, epoch, step, seen):
    """Generator: full-data loss of the distributed model (N + 1 scalars reduced)."""
    h_s = yield ("submit", X_part @ x, "eval")
    h_n = yield ("submit", np.array([x @ x]), "eval")
    s = yield ("wait", h_s)
    sq = yield ("wait", h_n)
    return _history_entry(epoch, step, seen, model, s, y, float(sq[0]))


def _mp_worker(X_part, y, model, lr, batch, micro_batch, epochs, seed, order, x0, depth,
               eval_every, device, on_step, rank):
    n = X_part.shape[0]
    x = np.zeros(X_part.shape[1]) if x0 is None else np.array(x0, dtype=np.float64)
    history = [(yield from _mp_eval(X_part, y, x, model, 0, 0, 0))] if eval_every else []
    step = 0
    for epoch in range(epochs):
        for idx in minibatches(epoch_order(n, seed, epoch, order), batch):
            yield from _mp_minibatch(X_part, y, x, model, lr, idx, micro_batch, depth, device)
            step += 1
            if on_step is not None:
                on_step({"rank": rank, "epoch": epoch, "step": step, "batch": len(idx)})
        if eval_every and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs):
            history.append((yield from _mp_eval(X_part, y, x, model, epoch + 1, step,
                                                (epoch + 1) * n)))
    return x, history


def _as_async(allreduce, async_allreduce) -> AsyncAllreduce:
    if async_allreduce is not None:
        return async_allreduce
    if allreduce is None:
        raise ValueError("give allreduce (blocking callable) or async_allreduce")
    return BlockingAsAsync(allreduce)


def model_parallel_sgd(X_part, y: Vector, model: str | GLM, lr: float, batch: int,
                       micro_batch: int, epochs: int, seed: int,
                       allreduce: Callable[[Vector], Vector] | None = None, rank: int = 0, *,
                       async_allreduce: AsyncAllreduce | None = None, pipeline_depth: int = 1,
                       order: Order = "shuffle", x0: Vector | None = None,
                       eval_every: int = 1, device=None,
                       on_step: Callable[[dict], None] | None = None) -> tuple[Vector, list[dict]]:
    """One P4SGD worker: trains its model slice x[P_m] given X_part = X[:, P_m].

    Communication per micro-batch: one allreduce of len(micro-batch) scalars
    (plus N+1 scalars per evaluation if eval_every > 0). With async_allreduce
    and pipeline_depth k > 1, up to k micro-batches are in flight.
    device: optional devices.* object; forward/backward run through device.run
    so that their duration follows the device model.
    Returns (x_part, history); history is identical on every worker."""
    gen = _mp_worker(X_part, np.asarray(y, dtype=np.float64), get_model(model), lr, batch,
                     micro_batch, epochs, seed, order, x0, pipeline_depth, eval_every, device,
                     on_step, rank)
    return _drive(gen, _as_async(allreduce, async_allreduce))


def pipelined_epoch(X_part, y: Vector, x_part: Vector, model: str | GLM, lr: float, batch: int,
                    micro_batch: int, sample_order: np.ndarray, aar: AsyncAllreduce,
                    depth: int = 1, device=None, kernel=None) -> Vector:
    """One epoch of forward-communication-backward pipelining over sample_order.

    Updates x_part in place (and returns it); with `kernel` (see _mp_minibatch)
    the model is updated on the card instead. depth=1 is the unpipelined
    schedule: submit, wait, backward, next micro-batch."""
    model = get_model(model)

    def epoch_gen():
        for idx in minibatches(np.asarray(sample_order), batch):
            yield from _mp_minibatch(X_part, y, x_part, model, lr, idx, micro_batch, depth, device,
                                     kernel)

    _drive(epoch_gen(), aar)
    return x_part


def distributed_evaluate(X_part, y: Vector, x_part: Vector, model: str | GLM,
                         allreduce: Callable[[Vector], Vector]) -> dict:
    """Full-data loss/objective/accuracy from a worker's slice (2 allreduces)."""
    gen = _mp_eval(X_part, np.asarray(y, dtype=np.float64), x_part, get_model(model), 0, 0, 0)
    entry = _drive(gen, BlockingAsAsync(allreduce))
    return {k: entry[k] for k in ("loss", "objective", "accuracy")}


def _tag_reduce(quantize, quantized_tag):
    def reduce(vectors, tag):
        if quantize is not None and tag == quantized_tag:
            return quantize(vectors)
        return exact_sum(vectors)
    return reduce


def simulate_model_parallel(ds: Dataset, n_workers: int, model: str | GLM, lr: float,
                            batch: int, micro_batch: int, epochs: int, seed: int, *,
                            quantize: Callable[[Sequence[Vector]], Vector] | None = None,
                            pipeline_depth: int = 1, order: Order = "shuffle",
                            balance: str = "auto", x0: Vector | None = None,
                            eval_every: int = 1) -> tuple[Vector, list[dict]]:
    """M P4SGD workers in lock-step in one process; returns the assembled model.

    The allreduce is exact (sum in rank order) or, for the per-micro-batch
    partial sums, `quantize(list_of_worker_vectors) -> sum` (e.g.
    hosts.ina.fixed_point.QuantizedSum()). Evaluation sums are always exact."""
    model = get_model(model)
    part = partition_features(ds, n_workers, balance)
    gens = []
    for m, rng in enumerate(part.ranges):
        x0_m = None if x0 is None else np.asarray(x0)[rng[0]:rng[1]]
        gens.append(_mp_worker(slice_dataset(ds, rng), ds.y, model, lr, batch, micro_batch,
                               epochs, seed, order, x0_m, pipeline_depth, eval_every, None,
                               None, m))
    outputs = _run_lockstep(gens, _tag_reduce(quantize, "forward"))
    return assemble_model([o[0] for o in outputs]), outputs[0][1]


# ============================================================ data parallel baseline
def _dp_eval(X, y, x, model: GLM, rank, M, epoch, step, seen):
    rows = np.arange(rank, X.shape[0], M)
    s = X[rows] @ x
    local = np.array([np.sum(model.pointwise_loss(s, y[rows])),
                      np.sum(model.predict(s) == y[rows]) if model.classification else 0.0,
                      len(rows)])
    h = yield ("submit", local, "eval")
    tot = yield ("wait", h)
    loss = float(tot[0] / tot[2])
    return {"epoch": epoch, "step": step, "samples_seen": seen, "loss": loss,
            "objective": loss + model.regularizer(x),
            "accuracy": float(tot[1] / tot[2]) if model.classification else None}


def _dp_worker(X, y, model: GLM, lr, batch, epochs, seed, rank, M, order, x0, eval_every,
               device, on_step):
    n, D = X.shape
    x = np.zeros(D) if x0 is None else np.array(x0, dtype=np.float64)
    history = [(yield from _dp_eval(X, y, x, model, rank, M, 0, 0, 0))] if eval_every else []
    step = 0
    for epoch in range(epochs):
        for gidx in minibatches(epoch_order(n, seed, epoch, order), batch * M):
            idx = gidx[rank::M]  # DistributedSampler-style share of the global batch
            grad = np.zeros(D)
            if len(idx):
                def local_step():  # the gather of the rows is part of the device step
                    Xb = X[idx]
                    _accumulate(grad, Xb, model.derivative(Xb @ x, y[idx]))
                _on_device(device, local_step, len(idx), D, _rows_nnz(X, idx), "step")
            h = yield ("submit", grad, "gradient")
            total = yield ("wait", h)
            x -= lr * (total / len(gidx) + model.reg_gradient(x))
            step += 1
            if on_step is not None:
                on_step({"rank": rank, "epoch": epoch, "step": step, "batch": len(gidx)})
        if eval_every and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs):
            history.append((yield from _dp_eval(X, y, x, model, rank, M, epoch + 1, step,
                                                (epoch + 1) * n)))
    return x, history


def data_parallel_sgd(X, y: Vector, model: str | GLM, lr: float, batch: int, epochs: int,
                      seed: int, allreduce: Callable[[Vector], Vector], rank: int,
                      n_workers: int, *, order: Order = "shuffle", x0: Vector | None = None,
                      eval_every: int = 1, device=None,
                      on_step: Callable[[dict], None] | None = None) -> tuple[Vector, list[dict]]:
    """Data-parallel worker: full model, B_local = batch samples per step.

    The global batch of step t is the reference batch of size batch * n_workers
    (same permutation); this worker takes every n_workers-th sample of it
    starting at rank, computes the gradient sum over them, allreduces the
    D-dimensional gradient and applies the same update as every other worker.
    X is the full sample matrix; the worker only reads its rows."""
    gen = _dp_worker(X, np.asarray(y, dtype=np.float64), get_model(model), lr, batch, epochs,
                     seed, rank, n_workers, order, x0, eval_every, device, on_step)
    return _drive(gen, BlockingAsAsync(allreduce))


def simulate_data_parallel(ds: Dataset, n_workers: int, model: str | GLM, lr: float,
                           batch: int, epochs: int, seed: int, *,
                           quantize: Callable[[Sequence[Vector]], Vector] | None = None,
                           order: Order = "shuffle", x0: Vector | None = None,
                           eval_every: int = 1) -> tuple[Vector, list[dict]]:
    """M data-parallel workers in lock-step; returns rank 0's (= everyone's) model."""
    model = get_model(model)
    gens = [_dp_worker(ds.X, ds.y, model, lr, batch, epochs, seed, r, n_workers, order, x0,
                       eval_every, None, None) for r in range(n_workers)]
    outputs = _run_lockstep(gens, _tag_reduce(quantize, "gradient"))
    return outputs[0]
