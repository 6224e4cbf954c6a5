"""What the INA client hands out and takes in: handles, stats, errors, the io protocol.

hosts/ina/transport.py (InaClient) documents the protocol; these are its
public value types, apart so the I/O and timer modules can name them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hosts.ina import fixed_point as fp
from testbed import wire

OPS = {"sum": wire.OP_SUM, "or": wire.OP_OR, "max": wire.OP_MAX}


class InaError(RuntimeError):
    """The transport cannot continue (protocol mismatch between workers, ...)."""


class InaTimeoutError(InaError, TimeoutError):
    """A chunk got no result after max_retries resends."""

    def __init__(self, message: str, *, job_id: int, slot: int, slot_ver: int, seq: int,
                 retries: int, elapsed_s: float, missing: int | None,
                 present_workers: list[int] | None):
        super().__init__(message)
        self.job_id, self.slot, self.slot_ver, self.seq = job_id, slot, slot_ver, seq
        self.retries, self.elapsed_s = retries, elapsed_s
        self.missing, self.present_workers = missing, present_workers


class InaIo(Protocol):
    def send(self, payload: bytes) -> None: ...
    def recv(self, timeout: float) -> bytes | None: ...
    def close(self) -> None: ...


@dataclass
class InaStats:
    impl: str = "python"          # packet loops: "compiled" (hosts/ina/_hostpath.c) or numpy
    packets_sent: int = 0        # first sends + retransmissions
    chunks_sent: int = 0
    retransmissions: int = 0
    retx_silent: int = 0         # of which: no result at all arrived for the chunk's timeout
    timeouts: int = 0            # chunks given up after max_retries
    duplicates_ignored: int = 0  # results for a seq we no longer (or never) wait for
    results: int = 0             # results accepted (one per chunk)
    foreign_packets: int = 0     # not a result of this job, or malformed
    scale_rounds: int = 0        # MAX rounds that agreed on a scale
    saturated_values: int = 0    # values this worker clipped (fixed scale)
    saturated_results: int = 0   # chunks where some worker clipped (header exponent)
    window_cuts: int = 0         # congestion window halvings (hosts/ina/cwnd.py)
    latencies_s: list[float] = field(default_factory=list)  # per chunk: first send -> result

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "latencies_s"}
        lat = np.asarray(self.latencies_s, dtype=np.float64)
        for q in (50, 90, 99):
            d[f"chunk_latency_p{q}_s"] = float(np.percentile(lat, q)) if lat.size else None
        d["chunk_latency_max_s"] = float(lat.max()) if lat.size else None
        return d


class InaHandle:
    """One submitted vector. `done`, then `result` (or `error`)."""

    __slots__ = ("id", "op", "shape", "kind", "scale_exp", "fixed", "ints", "ints2d", "src",
                 "n", "nchunks", "remaining", "max_exp", "done", "result", "error", "segs",
                 "submitted_at", "completed_at", "back")

    def __init__(self, hid: int, op: int, shape: tuple, kind: str, scale_exp: int | None):
        self.id, self.op, self.shape, self.kind = hid, op, shape, kind
        self.scale_exp = scale_exp                # None until agreed (float, agreed mode)
        self.fixed = scale_exp is not None        # configured scale: check saturation
        self.ints: np.ndarray | None = None       # int32 results (padded to whole chunks)
        self.ints2d: np.ndarray | None = None     # the same, one row per chunk
        self.src: np.ndarray | None = None        # floats waiting for the agreed scale
        self.n = self.nchunks = self.remaining = 0
        self.max_exp = fp.EXP_WIRE_MIN
        self.done = False
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.segs: list = []          # hosts.ina.chunks.Seg runs of this op
        self.submitted_at = self.completed_at = 0.0
        self.back = None                          # result -> the input's kind (torch tensor)

    def __repr__(self) -> str:
        return f"<InaHandle {self.id} {self.kind} {self.shape} {'done' if self.done else 'pending'}>"

