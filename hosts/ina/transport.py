"""The in-network aggregation (INA) transport: `InaClient` and its I/O.

    client = InaClient(io, job_id=1, worker_id=rank, n_workers=N)
    y = client.allreduce(x)                 # float32 SUM (fixed point inside)
    h = client.submit(small_vec); ...; y = client.wait(h)   # async, many small vectors

Protocol (testbed/wire.py is the contract). Chunk `seq` of a job (one counter
per job, shared by every tensor, identical on all workers) goes to slot
seq % window with slot_ver (seq // window) % 2. Every slot holds a FIFO of
chunks; only the head is on the wire, so a worker sends chunk seq only after
it holds the result of seq - window: the SwitchML rule that makes the shadow
copy safe (see research/seeds.md §6). Exactly once, whatever the network does:
- a lost contribution or result: the slot's timer fires and the *identical*
  packet is resent with the RETX flag; the switch either counts it (its bitmap
  says it is new) or, if the slot is complete, answers it by unicast;
- duplicated/reordered/stale results: a result is accepted only when it
  carries the seq of the head of its slot; anything else is counted in
  `duplicates_ignored` and dropped;
- the switch drops stale contributions itself (seq older than the slot's).
A chunk's first timeout is timeout_s, or lower once the client has measured
the round trip (adaptive_rto: srtt + 4 rttvar, at least min_timeout_s); each
resend multiplies it by backoff, capped at max_timeout_s (default
16 x timeout_s). After max_retries resends the client fails with
`InaTimeoutError` (job, slot, seq, what the switch seems to be missing) and
stays failed: its seq stream can no longer match the other workers'.
An expired timer resends only if the chunk looks lost: no result at all
arrived for its timeout, or a chunk sent after it was already answered (RACK);
otherwise results are still flowing and it is queued behind them at a slow
switch, so the timer is re-armed without a resend (no retransmission storms).
On a dilated network (`expect_delay`) no chunk's timer starts below 1.5 x the
dilated time its own answer may take: its round trip plus this worker's chunks
already on the wire ahead of it. Per chunk, not per operation: a lost chunk of
a long tensor is resent after about its own round trip, not the tensor's.
Chunks on the wire are capped by a congestion window (hosts/ina/cwnd.py), at
most `window`: a switch slower than the links (BMv2) loses the excess of a
burst, so the window halves after a round that lost more than 1/8 of it; slots
whose next chunk waits for room are released oldest first after each receive.

Bulk path. A tensor's chunks are one run (`_Seg`) of consecutive seqs: all
packets are built at once with numpy (PKT_DTYPE rows in one buffer), slot
state lives in per-slot numpy arrays, bursts of results are parsed and
applied vectorized, and the next chunks of the answered slots go out as one
sendmmsg when the io has `send_many`/`recv_block` (UdpIo on Linux). One-chunk
vectors (P4SGD micro-batches) take a scalar path (struct, one sendto).

Values. float input + op "sum": fixed point with a shared scale (see
hosts/ina/fixed_point.py): by default one MAX round per tensor agrees on the
max exponent, then its SUM chunks use that scale; with `scale_exp=k` (client
default or per submit) there is no extra round and overflow is detected via
the MAX-ed header exponent (FixedPointOverflow on every worker, or counted
with on_overflow="saturate"). Integer input (any op): int32/uint32 carried
unscaled, result in the input's 32-bit type (uint32 stays uint32: OR bitmaps).
A CPU torch.Tensor goes in as its numpy view (hosts/common/arrays.py, no copy)
and its result comes back as a tensor of the same shape, same bits.

Workers must submit the same sequence of (size, op, scale mode): that is what
keeps their seq counters aligned. `window` must be the same on all workers and
at most the job's slot_count in the switch. The client is not thread-safe.

I/O: anything with `send(payload: bytes)` (INA header + values, i.e. a UDP
payload), `recv(timeout_s) -> bytes | None` (a result's UDP payload; timeout 0
= do not block) and `close()`; optionally `slot_state(job, slot, ver)` for
diagnostics. `UdpIo` is a real socket; `InProcessSwitch(...).endpoint(...)`
runs a switch pipeline in-process (tests, simulations).
"""
from __future__ import annotations

import itertools
import logging
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from hosts.common.arrays import as_array
from hosts.ina import _mmsg
from hosts.ina import fixed_point as fp
from hosts.ina.cwnd import CongestionWindow
from testbed import wire

if TYPE_CHECKING:
    from hosts.common.network_dilation import DilationSettings

log = logging.getLogger("ina")

OPS = {"sum": wire.OP_SUM, "or": wire.OP_OR, "max": wire.OP_MAX}
LANES = wire.MAX_VALUES_PER_PACKET
_H = wire.HEADER_STRUCT
_I32 = struct.Struct(">i")
_DEFAULT = object()
_DRAIN = 256          # packets handled per receive burst before timers are checked


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
    packets_sent: int = 0        # first sends + retransmissions
    chunks_sent: int = 0
    retransmissions: int = 0
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
        self.segs: list[_Seg] = []
        self.submitted_at = self.completed_at = 0.0
        self.back = None                          # result -> the input's kind (torch tensor)

    def __repr__(self) -> str:
        return f"<InaHandle {self.id} {self.kind} {self.shape} {'done' if self.done else 'pending'}>"


# One chunk's packet (header + 64 lanes) as numpy sees it: a tensor's packets are
# built at once in one contiguous array of these, and sent as slices of it.
PKT_DTYPE = np.dtype([("h", wire.HEADER_DTYPE), ("v", ">i4", (LANES,))])
PKT_SIZE = PKT_DTYPE.itemsize                       # 272
# A full chunk's Ethernet frame (less FCS): what the dilated links serialize.
FRAME_BYTES = wire.ETH_HLEN + wire.IPV4_HLEN + wire.UDP_HLEN + wire.INA_HLEN + 4 * LANES
assert PKT_SIZE == wire.INA_HLEN + 4 * LANES
# A received datagram in a fixed-size receive slot (longer ones are truncated;
# the header's count must still fit the datagram's length).
RX_STRIDE = 320
RX_DTYPE = np.dtype({"names": ["h", "v"], "formats": [wire.HEADER_DTYPE, (">i4", (LANES,))],
                     "offsets": [0, wire.INA_HLEN], "itemsize": RX_STRIDE})
_VEC_MIN = 6          # results in one burst from which the vectorized path is used
_INF = float("inf")
_SEQ_SPACE = 1 << 32


class _Seg:
    """A run of consecutive chunks of one handle: seqs seq0 .. seq0+n-1 (never
    across the 2^32 wrap), so chunk i sits in slot (slot0 + i) % window and the
    next chunk of its slot within the run is i + window. `buf` holds the n
    packets at PKT_SIZE strides (None until built: agreed scale not known yet)."""

    __slots__ = ("handle", "seq0", "slot0", "n", "c0", "op", "is_exp", "patience_s", "buf",
                 "addr", "last", "pkt")

    def __init__(self, handle: InaHandle, seq0: int, slot0: int, n: int, c0: int, op: int,
                 is_exp: bool, patience_s: float | None):
        self.handle, self.seq0, self.slot0, self.n, self.c0 = handle, seq0, slot0, n, c0
        self.op, self.is_exp, self.patience_s = op, is_exp, patience_s
        self.buf: np.ndarray | None = None     # n > 1: the packets, PKT_SIZE apart
        self.pkt: bytes | None = None          # n == 1: the packet
        self.addr = 0
        # value count of the handle's last chunk (the others carry LANES)
        self.last = 1 if is_exp else handle.n - LANES * (handle.nchunks - 1)

    def count(self, ci: int) -> int:
        if self.is_exp:
            return 1
        return self.last if self.c0 + ci == self.handle.nchunks - 1 else LANES

    def counts(self, ci: np.ndarray) -> np.ndarray:
        if self.is_exp:
            return np.ones(len(ci), np.int64)
        return np.where(ci == self.handle.nchunks - 1 - self.c0, self.last, LANES)

    @property
    def ready(self) -> bool:
        return self.pkt is not None or self.buf is not None

    def packet(self, ci: int) -> bytes:
        if self.pkt is not None:
            return self.pkt
        off = ci * PKT_SIZE
        return self.buf[off:off + wire.INA_HLEN + 4 * self.count(ci)].tobytes()


class InaClient:
    def __init__(self, io: InaIo, job_id: int, worker_id: int, n_workers: int, *,
                 window: int = 64, timeout_s: float = 0.05, backoff: float = 2.0,
                 max_timeout_s: float | None = None, max_retries: int = 20,
                 scale_exp: int | None = None, on_overflow: str = "raise",
                 adaptive_rto: bool = True, min_timeout_s: float = 0.01,
                 first_seq: int = 0, clock: Callable[[], float] = time.monotonic):
        if not 0 <= job_id <= 255:
            raise ValueError(f"job_id {job_id} not in 0..255 (one header byte)")
        if not 0 <= worker_id < wire.MAX_WORKERS:
            raise ValueError(f"worker_id {worker_id} not in 0..{wire.MAX_WORKERS - 1}")
        if not 1 <= n_workers <= wire.MAX_WORKERS:
            raise ValueError(f"n_workers {n_workers} not in 1..{wire.MAX_WORKERS}")
        if not 1 <= window <= 0xFFFF:
            raise ValueError(f"window {window} not in 1..65535")
        if not timeout_s > 0 or backoff < 1 or max_retries < 0:
            raise ValueError("need timeout_s > 0, backoff >= 1, max_retries >= 0")
        if on_overflow not in ("raise", "saturate"):
            raise ValueError(f"on_overflow must be 'raise' or 'saturate', got {on_overflow!r}")
        self.io = io
        self.job_id, self.worker_id, self.n_workers = job_id, worker_id, n_workers
        self.window = window
        self.timeout_s, self.backoff, self.max_retries = timeout_s, backoff, max_retries
        self.max_timeout_s = max_timeout_s if max_timeout_s is not None else 16 * timeout_s
        self.scale_exp, self.on_overflow = scale_exp, on_overflow
        # RTT estimate (Jacobson/Karels, Karn: only chunks answered without a resend)
        # can only *lower* the first timeout below timeout_s: quicker loss recovery.
        self.adaptive_rto, self.min_timeout_s = adaptive_rto, min(min_timeout_s, timeout_s)
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rto_cache = timeout_s
        # Dilated network (expect_delay): a chunk sent with k chunks of this worker on
        # the wire ahead of it gets a first timer of at least base + k x frame seconds.
        self._floor_base_s = self._floor_frame_s = 0.0
        self.stats = InaStats()
        self._clock = clock
        # Seqs wrap at a multiple of 2 x window (not at 2^32 unless the window divides
        # 2^31): a slot's consecutive chunks must alternate slot_ver ((seq // W) & 1)
        # across the wrap too, or a chunk would overwrite its predecessor's result in
        # the switch while a worker that lost that result still needs it (found by the
        # property test at window 5). The switch's serial seq arithmetic is unaffected:
        # the skipped seqs are fewer than 2 x window.
        self.seq_space = (_SEQ_SPACE // (2 * window)) * (2 * window)
        self._next_seq = (first_seq & 0xFFFFFFFF) % self.seq_space
        # Per slot: a FIFO of runs of chunks (_Seg); the head run's current chunk
        # is `_hci[slot]`; it is on the wire iff `_hseq[slot]` >= 0 (its seq).
        W = window
        self._slots: list[deque[_Seg]] = [deque() for _ in range(W)]
        self._hci = np.zeros(W, np.int64)
        self._hseq = np.full(W, -1, np.int64)
        self._first = np.zeros(W, np.float64)      # head's first send
        self._txt = np.zeros(W, np.float64)        # head's latest (re)transmission
        self._rack = -_INF                         # latest send time of a chunk answered
                                                   # without a resend (RACK)
        self._dl = np.full(W, _INF)                # head's retransmission deadline
        self._rto = np.zeros(W, np.float64)
        self._retries = np.zeros(W, np.int64)
        self._next_dl = _INF                       # <= min(_dl): checked before scanning
        self._hids = itertools.count()
        self._fatal: BaseException | None = None
        self._last_rx: float | None = None
        self._warned_saturation = False
        self._rx_block = getattr(io, "recv_block", None)   # (timeout) -> (records, lens)
        self._tx_many = getattr(io, "send_many", None)     # (base_addr, offs, lens)
        self._exp_hdr: dict[int, int] = {}
        # Chunks on the wire are capped by a congestion window (hosts/ina/cwnd.py): a slot
        # whose head is ready while the window is full is `_held` until answers make room.
        self._cc = CongestionWindow(W)
        self._held = np.zeros(W, bool)

    # -- public API --------------------------------------------------------------
    def allreduce(self, values: np.ndarray, op: str = "sum", **kw: Any) -> np.ndarray:
        return self.wait(self.submit(values, op, **kw))

    def submit(self, vec: np.ndarray, op: str = "sum", *, scale_exp: Any = _DEFAULT,
               patience_s: float | None = None) -> InaHandle:
        """Queue one vector; its chunks go out as their slots free up.
        patience_s: do not give up on these chunks before this long (e.g. a
        first barrier while the other workers are still starting)."""
        self._raise_fatal()
        code = OPS.get(op)
        if code is None:
            raise ValueError(f"unknown op {op!r}; use one of {sorted(OPS)}")
        a, back = as_array(vec)      # a CPU torch tensor: its numpy view, no copy
        a = np.asarray(a)
        n = a.size
        flat = a.reshape(-1)
        if a.dtype.kind == "f":
            if code != wire.OP_SUM:
                raise TypeError(f"op {op!r} carries int32/uint32 values; got {a.dtype} "
                                f"(only 'sum' converts floats to fixed point)")
            k = self.scale_exp if scale_exp is _DEFAULT else scale_exp
            kind = "float"
        elif a.dtype.kind in "iub":
            k, kind = None, "uint" if a.dtype.kind == "u" else "int"
        else:
            raise TypeError(f"cannot aggregate values of dtype {a.dtype}")
        h = InaHandle(next(self._hids), code, a.shape, kind, k)
        h.back = back
        h.submitted_at = now = self._clock()
        if n == 0:
            h.result = np.zeros(a.shape, np.float32 if kind == "float" else
                                (np.uint32 if kind == "uint" else np.int32))
            h.done = True
            return h
        nchunks = -(-n // LANES)
        # Convert (and validate) before taking seqs: a bad input must not leave
        # this worker's seq stream with a hole the others would wait on forever.
        ints = exps = None
        if kind == "float" and k is None:
            e = fp.vector_exponent(flat)
        elif kind == "float":
            ints, nsat = fp.quantize(flat, k, self.n_workers, "saturate")
            exps = self._chunk_exponents(flat, k, nchunks)
            self.stats.saturated_values += nsat
        else:
            ints = _as_int32_bits(flat, kind)
            exps = 0
        h.n, h.nchunks = n, nchunks
        h.ints = np.zeros(nchunks * LANES, np.int32)
        h.ints2d = h.ints.reshape(nchunks, LANES)
        h.remaining = nchunks
        if ints is None:
            # Agreed scale: a MAX round for the exponent first (one extra RTT per tensor).
            h.src = np.array(flat, dtype=np.float64)
            (xs,) = self._new_segs(h, 1, wire.OP_MAX, True, patience_s)
            xs.pkt = _H.pack(wire.INA_VERSION, wire.OP_MAX, 0, self.job_id, xs.slot0,
                             (xs.seq0 // self.window) & 1, self.worker_id, xs.seq0, 1, e, 0) \
                + _I32.pack(e)
            self.stats.scale_rounds += 1
        data = self._new_segs(h, nchunks, code, False, patience_s)
        if ints is not None:
            for s in data:
                self._build(s, ints, exps)
        for s in h.segs:
            if s.ready:
                self._start_seg(s, now)
        return h

    def wait(self, handle: InaHandle, timeout: float | None = None) -> np.ndarray:
        """Block until `handle` completes; its result (or its error, raised)."""
        clock = self._clock
        end = None if timeout is None else clock() + timeout
        while not handle.done:
            self._raise_fatal()
            now = clock()
            if now >= self._next_dl:
                self._fire_timers(now)
                if handle.done:
                    break
            wait_s = min(max(0.0, self._next_dl - now), 0.1)
            if end is not None:
                if now >= end:
                    raise TimeoutError(f"INA job {self.job_id}: handle {handle.id} not complete "
                                       f"after {timeout} s (wait timeout; the transport is still retrying)")
                wait_s = min(wait_s, end - now)
            self._receive(wait_s)
        self._raise_fatal()
        if handle.error is not None:
            raise handle.error
        return handle.result if handle.back is None else handle.back(handle.result)

    def poll(self) -> int:
        """Non-blocking progress: handle received packets and expired timers.
        Returns the number of events (packets handled + resends)."""
        self._raise_fatal()
        n = self._receive(0.0)
        return n + self._fire_timers(self._clock())

    def next_deadline(self) -> float | None:
        """When the earliest retransmission timer fires (None: nothing in flight)."""
        d = float(self._dl.min())
        self._next_dl = d
        return None if d == _INF else d

    @property
    def rto_s(self) -> float:
        """First retransmission timeout of a chunk sent now."""
        return self._rto_cache

    def expect_delay(self, network: "DilationSettings") -> None:
        """The network is slowed on purpose (time dilation, `network`: its TDF and the
        hardware link it plays; hosts.common.network_dilation): keep every chunk's
        first timer above the dilated time in which its answer can legitimately come
        back, or the client resends what is merely delayed (and on a dilated link each
        spurious copy takes the link time of a real frame). That time is per chunk:
        the delay line serializes this worker's frames one after another on its
        uplink, so a chunk sent with k of its chunks still on the wire is fully in
        after (k + 1) frame times; the switch answers L0 later; the answer takes one
        frame time on the downlink, where answers arrive no faster than the uplinks
        send. Floor = 1.5 x TDF x (L0 + (k + 2) s), k <= window - 1 (`chunk_floor_s`).
        Monotone: a lower TDF never lowers the floor (a run only raises its TDF)."""
        tdf = float(network.tdf)
        if tdf <= 0:
            return
        frame_s = tdf * network.serialization_s(FRAME_BYTES)
        base_s = tdf * network.latency_s + 2 * frame_s
        self._floor_base_s = max(self._floor_base_s, 1.5 * base_s)
        self._floor_frame_s = max(self._floor_frame_s, 1.5 * frame_s)
        worst = self.chunk_floor_s(self.window - 1)
        # The adaptive RTO may follow measured round trips up to twice the worst
        # legitimate answer; backoff may grow 16x beyond that.
        self.timeout_s = max(self.timeout_s, 2.0 * worst / 1.5)
        self.max_timeout_s = max(self.max_timeout_s, 16 * self.timeout_s)

    def chunk_floor_s(self, ahead: "int | np.ndarray") -> "float | np.ndarray":
        """First-timer floor of a chunk sent with `ahead` chunks of this worker on the
        wire (0 on a network that is not dilated)."""
        return self._floor_base_s + self._floor_frame_s * ahead

    def _first_rto(self, k: int = 1) -> "float | np.ndarray":
        """First timers of k chunks put on the wire now, in order."""
        rto = self._rto_cache
        if not self._floor_frame_s:
            return rto
        ahead = int(np.count_nonzero(self._hseq >= 0))
        if k == 1:
            return max(rto, self.chunk_floor_s(ahead))
        return np.maximum(rto, self.chunk_floor_s(ahead + np.arange(k)))

    def _update_rtt(self, rtt: float) -> None:
        self._cc.on_answers(1)
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar += 0.25 * (abs(self._srtt - rtt) - self._rttvar)
            self._srtt += 0.125 * (rtt - self._srtt)
        if self.adaptive_rto:
            self._rto_cache = min(self.timeout_s,
                                  max(self.min_timeout_s, self._srtt + 4 * self._rttvar))

    def _update_rtts(self, rtts: list[float]) -> None:
        """_update_rtt for each sample of a burst, in order."""
        if self._srtt is None:
            self._update_rtt(rtts[0])
            rtts = rtts[1:]
        self._cc.on_answers(len(rtts))
        srtt, var = self._srtt, self._rttvar
        for r in rtts:
            var += 0.25 * (abs(srtt - r) - var)
            srtt += 0.125 * (r - srtt)
        self._srtt, self._rttvar = srtt, var
        if self.adaptive_rto:
            self._rto_cache = min(self.timeout_s, max(self.min_timeout_s, srtt + 4 * var))

    @property
    def in_flight(self) -> int:
        return int(np.count_nonzero(self._hseq >= 0))

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def close(self) -> None:
        self.io.close()

    # -- chunks and packets --------------------------------------------------------
    def _new_segs(self, h: InaHandle, nchunks: int, op: int, is_exp: bool,
                  patience_s: float | None) -> list[_Seg]:
        """Take the next nchunks seqs; queue their runs in their slots' FIFOs."""
        W, slots, out, c0 = self.window, self._slots, [], 0
        while c0 < nchunks:
            seq0 = self._next_seq
            n = min(nchunks - c0, self.seq_space - seq0)   # a run never wraps seq
            self._next_seq = (seq0 + n) % self.seq_space
            slot0 = seq0 % W
            seg = _Seg(h, seq0, slot0, n, c0, op, is_exp, patience_s)
            for i in range(min(n, W)):
                s = slot0 + i
                if s >= W:
                    s -= W
                q = slots[s]
                if not q:
                    self._hci[s] = i
                q.append(seg)
            h.segs.append(seg)
            out.append(seg)
            c0 += n
        return out

    def _build(self, seg: _Seg, ints: np.ndarray, exps: np.ndarray | int) -> None:
        """All packets of a run at once: headers and big-endian values."""
        h, W = seg.handle, self.window
        lo, hi = seg.c0 * LANES, min(h.n, (seg.c0 + seg.n) * LANES)
        if seg.n == 1:                       # latency path: one struct.pack, no numpy arrays
            e = exps if isinstance(exps, int) else int(exps[seg.c0])
            seg.pkt = _H.pack(wire.INA_VERSION, seg.op, 0, self.job_id, seg.slot0,
                              (seg.seq0 // W) & 1, self.worker_id, seg.seq0, hi - lo, e, 0) \
                + ints[lo:hi].astype(">i4").tobytes()
            return
        else:
            p = np.zeros(seg.n, PKT_DTYPE)
            hd = p["h"]
            seqs = np.arange(seg.seq0, seg.seq0 + seg.n, dtype=np.int64)
            hd["version"] = wire.INA_VERSION
            hd["op"] = seg.op
            hd["job_id"] = self.job_id
            hd["slot"] = seqs % W
            hd["slot_ver"] = (seqs // W) & 1
            hd["worker_id"] = self.worker_id
            hd["seq"] = seqs
            hd["count"] = LANES
            if seg.c0 + seg.n == h.nchunks:
                hd["count"][-1] = seg.last
            hd["exponent"] = exps if isinstance(exps, int) else exps[seg.c0:seg.c0 + seg.n]
            v = p["v"]                       # (n, LANES), strided: fill row-wise
            full, rem = divmod(hi - lo, LANES)
            v[:full] = ints[lo:lo + full * LANES].reshape(full, LANES)
            if rem:
                v[full, :rem] = ints[lo + full * LANES:hi]
            seg.buf = p.view(np.uint8)
            seg.addr = seg.buf.ctypes.data

    def _chunk_exponents(self, flat: np.ndarray, k: int, nchunks: int) -> np.ndarray:
        """Header exponent per chunk at a fixed scale: the chunk's own exponent,
        capped at the largest that fits, or one above it if this worker clipped a
        value of the chunk, so the MAX-ed result exponent flags it to everyone."""
        pad = nchunks * LANES - flat.size
        lim_e = fp.max_exponent_for_scale(k, self.n_workers)
        if nchunks == 1:                     # latency path: scalar arithmetic
            m = float(np.abs(flat).max())
            e = int(np.frexp(m)[1]) if m > 0 else fp.EXP_ZERO
            # rint(m * 2^k) > L  <=>  m * 2^k > L + 1/2 (L is a power of two)
            clipped = bool(np.ldexp(m, k) > fp.contribution_limit(self.n_workers) + 0.5)
            e = lim_e + 1 if clipped else min(e, lim_e)
            return np.array([min(max(e, fp.EXP_WIRE_MIN), fp.EXP_WIRE_MAX)], np.int64)
        x = np.pad(flat.astype(np.float64), (0, pad)).reshape(nchunks, LANES)
        mags = np.abs(x).max(1)
        e = np.where(mags > 0, np.frexp(mags)[1], fp.EXP_ZERO)
        clipped = np.abs(np.rint(np.ldexp(mags, k))) > fp.contribution_limit(self.n_workers)
        e = np.minimum(e, lim_e)
        e[clipped] = lim_e + 1
        return np.clip(e, fp.EXP_WIRE_MIN, fp.EXP_WIRE_MAX).astype(np.int64)

    def _on_scale(self, h: InaHandle, max_exp: int, now: float) -> None:
        """The MAX round is back: quantize with the agreed scale, release the SUM chunks."""
        k = fp.scale_from_exponent(max_exp, self.n_workers)
        h.scale_exp = k
        ints, nsat = fp.quantize(h.src, k, self.n_workers, "saturate")
        if nsat:   # impossible unless a worker's exponent was lost or wrong
            self._fatal = InaError(f"INA job {self.job_id}: agreed exponent {max_exp} is below "
                                   f"this worker's values ({nsat} would overflow): workers disagree")
            raise self._fatal
        h.src = None
        e = self._exp_hdr.get(k)
        if e is None:
            e = self._exp_hdr[k] = fp.max_exponent_for_scale(k, self.n_workers)
        for s in h.segs:
            if not s.is_exp:
                self._build(s, ints, e)
                self._start_seg(s, now)

    # -- sending ---------------------------------------------------------------------
    def _start_seg(self, seg: _Seg, now: float) -> None:
        """Send every chunk of `seg` that heads its slot and is not on the wire yet."""
        W, slots, hseq = self.window, self._slots, self._hseq
        if seg.n == 1:
            s = seg.slot0
            if slots[s][0] is seg and hseq[s] < 0:
                self._start_one(seg, s, 0, now)
            return
        ready = []
        for i in range(min(seg.n, W)):
            s = seg.slot0 + i
            if s >= W:
                s -= W
            if slots[s][0] is seg and hseq[s] < 0:
                ready.append(s)
        if ready:
            ss = np.array(ready, np.int64)
            self._start_many(seg, ss, self._hci[ss], now)

    def _start_one(self, seg: _Seg, s: int, ci: int, now: float, admitted: bool = False) -> None:
        if not admitted and self._cc.room(self.in_flight) < 1:
            self._held[s] = True
            return
        self._held[s] = False          # also when _start_seg starts a held slot first
        rto = self._first_rto()
        self._hseq[s] = seg.seq0 + ci
        self._first[s] = now
        self._txt[s] = now
        self._rto[s] = rto
        self._dl[s] = d = now + rto
        self._retries[s] = 0
        if d < self._next_dl:
            self._next_dl = d
        st = self.stats
        st.packets_sent += 1
        st.chunks_sent += 1
        off = ci * PKT_SIZE
        ln = wire.INA_HLEN + 4 * seg.count(ci)
        if seg.pkt is not None:
            self.io.send(seg.pkt)
        elif self._tx_many is not None:
            self._tx_many(seg.addr, (off,), (ln,))
        else:
            self.io.send(seg.buf[off:off + ln].tobytes())

    def _start_many(self, seg: _Seg, ss: np.ndarray, cis: np.ndarray, now: float) -> None:
        """Put chunks cis of `seg` (heads of slots ss, not on the wire) on the wire."""
        k = len(ss)
        room = self._cc.room(self.in_flight)
        if room < k:                  # the oldest go, the rest wait in _held
            order = np.argsort((seg.seq0 + cis - self._next_seq) % self.seq_space, kind="stable")
            self._held[ss[order[max(room, 0):]]] = True
            keep = np.sort(order[:max(room, 0)])
            ss, cis, k = ss[keep], cis[keep], len(keep)
            if not k:
                return
        if k == 1:
            self._start_one(seg, int(ss[0]), int(cis[0]), now, admitted=True)
            return
        self._held[ss] = False
        rto = self._first_rto(k)
        self._hseq[ss] = seg.seq0 + cis
        self._first[ss] = now
        self._txt[ss] = now
        self._rto[ss] = rto
        self._dl[ss] = now + rto
        self._retries[ss] = 0
        d = now + float(np.min(rto))
        if d < self._next_dl:
            self._next_dl = d
        st = self.stats
        st.packets_sent += k
        st.chunks_sent += k
        offs = cis * PKT_SIZE
        lens = wire.INA_HLEN + 4 * seg.counts(cis)
        if self._tx_many is not None:
            self._tx_many(seg.addr, offs, lens)
        else:
            send, buf = self.io.send, seg.buf
            for o, ln in zip(offs.tolist(), lens.tolist()):
                send(buf[o:o + ln].tobytes())

    def _advance(self, s: int, now: float) -> None:
        """Slot s's head was answered (and is off the wire): move to its next chunk."""
        q = self._slots[s]
        seg = q[0]
        nxt = int(self._hci[s]) + self.window
        if nxt < seg.n:
            self._hci[s] = nxt
            self._start_one(seg, s, nxt, now)
            return
        q.popleft()
        if q:
            seg = q[0]
            ci = s - seg.slot0
            if ci < 0:
                ci += self.window
            self._hci[s] = ci
            if seg.ready:
                self._start_one(seg, s, ci, now)

    # -- receive -----------------------------------------------------------------------
    def _receive(self, timeout: float) -> int:
        """Wait up to `timeout` for results, then take in up to _DRAIN of them."""
        n = 0
        rb = self._rx_block
        if rb is not None:
            while n < _DRAIN:
                rec, lens = rb(timeout if n == 0 else 0.0)
                k = len(lens)
                if not k:
                    break
                n += k
                if k < _VEC_MIN:
                    for i in range(k):
                        self._on_packet(rec[i:i + 1].tobytes()[:int(lens[i])])
                else:
                    self._on_block(rec, lens)
            if self._held.any():
                self._release(self._clock())
            return n
        recv = self.io.recv
        bufs = []
        b = recv(timeout)
        while b is not None:
            bufs.append(b)
            if len(bufs) >= _DRAIN:
                break
            b = recv(0.0)
        n = len(bufs)
        if n < _VEC_MIN:
            for b in bufs:
                self._on_packet(b)
        else:
            rec = np.zeros(n, RX_DTYPE)
            raw = rec.view(np.uint8).reshape(n, RX_STRIDE)
            for i, b in enumerate(bufs):
                m = min(len(b), RX_STRIDE)
                raw[i, :m] = np.frombuffer(b, np.uint8, m)
            self._on_block(rec, np.fromiter(map(len, bufs), np.int64, n))
        if self._held.any():
            self._release(self._clock())
        return n

    def _release(self, now: float) -> None:
        """Put held chunks on the wire, oldest first, as far as the congestion window
        allows. The oldest held chunk also goes when it is older than every chunk on
        the wire: the others may be waiting for it from this worker (no deadlock)."""
        held = np.flatnonzero(self._held)
        seqs = np.array([self._slots[s][0].seq0 + self._hci.item(s) for s in held.tolist()])
        age = (seqs - self._next_seq) % self.seq_space          # older: smaller
        order = held[np.argsort(age, kind="stable")]
        room = self._cc.room(self.in_flight)
        if room < 1:
            fly = self._hseq[self._hseq >= 0]
            if len(fly) and age.min() >= int(((fly - self._next_seq) % self.seq_space).min()):
                return
            room = 1
        for s in order[:room].tolist():
            self._held[s] = False
            self._start_one(self._slots[s][0], s, self._hci.item(s), now, admitted=True)

    def _on_packet(self, buf: bytes) -> None:
        if len(buf) < wire.INA_HLEN:
            self.stats.foreign_packets += 1
            return
        ver_, op, flags, job, slot, _sver, _wid, seq, count, exp, _ = _H.unpack_from(buf, 0)
        if ver_ != wire.INA_VERSION or not flags & wire.FLAG_RESULT or job != self.job_id \
                or slot >= self.window or count > LANES or len(buf) < wire.INA_HLEN + 4 * count:
            self.stats.foreign_packets += 1
            return
        if self._hseq.item(slot) != seq:
            self.stats.duplicates_ignored += 1
            return
        seg = self._slots[slot][0]
        ci = self._hci.item(slot)
        want = seg.count(ci)
        if op != seg.op or count != want:
            self._mismatch(seq, slot, op, count, seg.op, want)
        now = self._clock()
        self._last_rx = now
        self._hseq[slot] = -1
        self._dl[slot] = _INF
        st = self.stats
        st.results += 1
        first = self._first.item(slot)
        rtt = now - first
        st.latencies_s.append(rtt)
        if self._retries.item(slot) == 0:
            self._update_rtt(rtt)
            if first > self._rack:
                self._rack = first
        h = seg.handle
        self._advance(slot, now)
        if seg.is_exp:
            self._on_scale(h, _I32.unpack_from(buf, wire.INA_HLEN)[0], now)
            return
        g = seg.c0 + ci
        h.ints2d[g, :count] = np.frombuffer(buf, ">i4", count, wire.INA_HLEN)
        if exp > h.max_exp:
            h.max_exp = exp
        h.remaining -= 1
        if h.remaining == 0:
            self._finish(h, now)

    def _on_block(self, rec: np.ndarray, lens: np.ndarray) -> None:
        """A burst of received datagrams (RX_DTYPE records), parsed at once."""
        n = len(lens)
        hd = rec["h"][:n]
        slot = hd["slot"].astype(np.int64)
        count = hd["count"]
        ok = ((hd["version"] == wire.INA_VERSION) & ((hd["flags"] & wire.FLAG_RESULT) != 0)
              & (hd["job_id"] == self.job_id) & (slot < self.window) & (count <= LANES)
              & (lens[:n] >= wire.INA_HLEN + 4 * count.astype(np.int64)))
        st = self.stats
        idx = np.flatnonzero(ok)
        st.foreign_packets += n - len(idx)
        if not len(idx):
            return
        ss = slot[idx]
        m = self._hseq[ss] == hd["seq"][idx]
        if not m.all():
            st.duplicates_ignored += int(len(m) - np.count_nonzero(m))
            idx, ss = idx[m], ss[m]
            if not len(idx):
                return
        if len(ss) > 1:                     # two copies of one result in the burst
            _, first = np.unique(ss, return_index=True)
            if len(first) < len(ss):
                st.duplicates_ignored += len(ss) - len(first)
                first.sort()
                idx, ss = idx[first], ss[first]
        now = self._clock()
        self._last_rx = now
        slots = self._slots
        groups: dict[int, list] = {}
        for j, s in enumerate(ss.tolist()):
            seg = slots[s][0]
            g = groups.get(id(seg))
            if g is None:
                groups[id(seg)] = [seg, j]
            else:
                g.append(j)
        for seg, *js in groups.values():
            sel = np.array(js, np.int64) if len(js) < len(ss) else slice(None)
            self._accept_many(seg, ss[sel], idx[sel], rec, now)

    def _accept_many(self, seg: _Seg, ss: np.ndarray, rows: np.ndarray, rec: np.ndarray,
                     now: float) -> None:
        """Results for the heads of slots ss, all chunks of run `seg` (rows of rec)."""
        hd = rec["h"]
        cis = self._hci[ss]
        want = seg.counts(cis)
        op, count = hd["op"][rows], hd["count"][rows]
        bad = (op != seg.op) | (count != want)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._mismatch(int(hd["seq"][rows[i]]), int(ss[i]), int(op[i]), int(count[i]),
                           seg.op, int(want[i]))
        k = len(ss)
        st = self.stats
        st.results += k
        rtt = now - self._first[ss]
        st.latencies_s.extend(rtt.tolist())
        fresh = self._retries[ss] == 0
        if fresh.all():
            self._update_rtts(rtt.tolist())
            sent = float(self._first[ss].max())
        elif fresh.any():
            self._update_rtts(rtt[fresh].tolist())
            sent = float(self._first[ss[fresh]].max())
        else:
            sent = self._rack
        if sent > self._rack:
            self._rack = sent
        self._hseq[ss] = -1
        self._dl[ss] = _INF
        h = seg.handle
        if seg.is_exp:                                   # n == 1: one slot
            self._advance(int(ss[0]), now)
            self._on_scale(h, int(rec["v"][rows[0], 0]), now)
            return
        h.ints2d[seg.c0 + cis] = rec["v"][rows]
        e = int(hd["exponent"][rows].max())
        if e > h.max_exp:
            h.max_exp = e
        h.remaining -= k
        nxt = cis + self.window
        stay = nxt < seg.n
        if stay.all():
            self._hci[ss] = nxt
            self._start_many(seg, ss, nxt, now)
        else:
            if stay.any():
                s2, n2 = ss[stay], nxt[stay]
                self._hci[s2] = n2
                self._start_many(seg, s2, n2, now)
            for s in ss[~stay].tolist():
                self._advance(s, now)
        if h.remaining == 0:
            self._finish(h, now)

    def _mismatch(self, seq: int, slot: int, op: int, count: int, my_op: int, my_count: int):
        self._fatal = InaError(
            f"INA job {self.job_id}: result for seq {seq} (slot {slot}) has op {op}, count "
            f"{count} but this worker sent op {my_op}, count {my_count}: the workers do not "
            f"submit the same sequence of vectors (sizes/ops must match in order)")
        raise self._fatal

    def _finish(self, h: InaHandle, now: float) -> None:
        ints = h.ints[:h.n] if h.n != h.ints.size else h.ints
        if h.kind == "float":
            h.result = fp.from_fixed(ints, h.scale_exp, np.float32).reshape(h.shape)
            lim_e = fp.max_exponent_for_scale(h.scale_exp, self.n_workers)
            if h.fixed and h.max_exp > lim_e:
                self.stats.saturated_results += 1
                msg = (f"INA job {self.job_id}: a worker's values overflowed the fixed scale "
                       f"2^{h.scale_exp} for {self.n_workers} workers (|x| must stay below "
                       f"2^{lim_e}); the result was computed from clipped values")
                if self.on_overflow == "raise":
                    h.error = fp.FixedPointOverflow(msg + "; lower scale_exp or use the agreed scale")
                elif not self._warned_saturation:
                    self._warned_saturation = True
                    log.warning("%s (counted in stats.saturated_results; warning once)", msg)
        elif h.kind == "uint":
            h.result = ints.view(np.uint32).reshape(h.shape)
        else:
            h.result = ints.reshape(h.shape)
        h.ints = h.ints2d = None
        h.segs = []
        h.completed_at = now
        h.done = True

    # -- timers ---------------------------------------------------------------------------
    def _fire_timers(self, now: float) -> int:
        if now < self._next_dl:
            return 0
        dl = self._dl
        n = 0
        last_rx = self._last_rx
        reo = 0.25 * self._srtt if self._srtt is not None else 0.0
        for s in np.flatnonzero(dl <= now).tolist():
            # Resend only if the chunk looks lost: nothing arrived for its timeout
            # (a stall, a lost tail), or a chunk sent after it was answered (RACK).
            # Otherwise results are still flowing and it is queued behind them
            # (a slow switch): re-arm, no resend, no retry counted.
            rto = float(self._rto[s])
            if last_rx is not None and now - last_rx < rto \
                    and self._rack <= float(self._txt[s]) + reo:
                dl[s] = now + max(self._rto_cache, rto / 2)
                continue
            seg = self._slots[s][0]
            ci = int(self._hci[s])
            retries = int(self._retries[s])
            if retries >= self.max_retries and (seg.patience_s is None
                                                or now - self._first[s] >= seg.patience_s):
                self._give_up(s, now)
            self._retries[s] = retries + 1
            if retries == 0:
                self._cc.on_loss()
                self.stats.window_cuts = self._cc.cuts
            self._rto[s] = rto = min(rto * self.backoff, self.max_timeout_s)
            dl[s] = now + rto
            self._txt[s] = now
            p = bytearray(seg.packet(ci))
            p[2] |= wire.FLAG_RETX
            self.io.send(bytes(p))
            self.stats.retransmissions += 1
            self.stats.packets_sent += 1
            n += 1
        self._next_dl = float(dl.min())
        return n

    def _give_up(self, slot: int, now: float) -> None:
        self.stats.timeouts += 1
        n = self.n_workers
        seq = int(self._hseq[slot])
        ver = (seq // self.window) % 2
        retries = int(self._retries[slot])
        elapsed = now - float(self._first[slot])
        missing: int | None = None
        present: list[int] | None = None
        state = None
        probe = getattr(self.io, "slot_state", None)
        if callable(probe):
            try:
                state = probe(self.job_id, slot, ver)
            except Exception:  # noqa: BLE001 - diagnostics must not mask the timeout
                state = None
        if state is not None and state.get("seq") == seq and state.get("count", 0) > 0:
            present = [w for w in range(wire.MAX_WORKERS) if state["bitmap"] >> w & 1]
            missing = n - int(state["count"])
            what = (f"the switch has {state['count']} of {n} contributions (workers {present}): "
                    f"missing {missing}")
        elif state is not None:
            missing = n
            what = (f"the switch's slot holds seq {state.get('seq')} (count {state.get('count')}): "
                    f"no contribution to seq {seq} arrived, not even ours; missing {n}")
        else:
            since = ("no result ever arrived from the switch (is the job installed, and the switch "
                     "reachable?)" if self._last_rx is None
                     else f"the last result arrived {now - self._last_rx:.3f} s ago")
            what = (f"the switch answers any retransmission once a slot is complete, so it seems "
                    f"to miss 1..{n - 1} other workers' contributions, or never got ours; {since}")
        err = InaTimeoutError(
            f"INA job {self.job_id} worker {self.worker_id}: no result for seq {seq} (slot "
            f"{slot}, slot_ver {ver}) after {retries} retransmissions over "
            f"{elapsed:.3f} s (timeout {self.timeout_s} s, backoff x{self.backoff}, "
            f"cap {self.max_timeout_s} s); "
            f"{what}. Check that every worker runs, submits the same vectors, uses window "
            f"{self.window} <= the job's slot_count, and that the switch is up.",
            job_id=self.job_id, slot=slot, slot_ver=ver, seq=seq, retries=retries,
            elapsed_s=elapsed, missing=missing, present_workers=present)
        self._fatal = err
        raise err

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal


def _as_int32_bits(flat: np.ndarray, kind: str) -> np.ndarray:
    """Integers as the int32 bit patterns the switch combines (uint32 for 'uint')."""
    if flat.dtype == np.bool_:
        flat = flat.astype(np.int32)
    lo, hi = (0, 2**32 - 1) if kind == "uint" else (-(2**31), 2**31 - 1)
    if flat.size and (int(flat.min()) < lo or int(flat.max()) > hi):
        raise OverflowError(f"{flat.dtype} values outside {lo}..{hi} do not fit one 32-bit lane")
    if kind == "uint":
        return flat.astype(np.uint32).view(np.int32)
    return flat.astype(np.int32)


# -- real sockets --------------------------------------------------------------------------

class UdpIo:
    """A UDP socket bound to the worker's ip:port, sending to the switch.

    switch: (ip, port) the switch receives on: Mininet (10.0.0.254, INA port),
    local mode the soft switch's UDP endpoint for this worker's port. Results
    arrive from the switch at the bound address; the client checks their header.

    Besides send/recv, where libc has recvmmsg/sendmmsg (Linux), `recv_block`
    and `send_many` move bursts of datagrams in one system call each; the
    client uses them for whole windows of chunks (mmsg=False: plain calls only)."""

    def __init__(self, bind: tuple[str, int], switch: tuple[str, int], rcvbuf: int = 4 << 20,
                 *, mmsg: bool = True, batch: int = 256):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
            s.bind(bind)
        except OSError as e:
            s.close()
            raise OSError(e.errno, f"INA worker socket: cannot bind {bind[0]}:{bind[1]}: "
                                   f"{e.strerror or e}") from None
        s.setblocking(False)
        self.sock, self.bind, self.switch = s, bind, tuple(switch)
        self._send_errors = 0
        self._mm = None
        if mmsg and _mmsg.HAVE_MMSG:
            try:
                self._mm = _mmsg.MmsgUdp(s, self.switch, RX_DTYPE, batch)
            except OSError:
                self._mm = None
        if self._mm is not None:
            self.recv_block = self._recv_block
            self.send_many = self._mm.send
        self._empty = np.zeros(0, np.uint32)

    @property
    def send_errors(self) -> int:
        return self._send_errors + (self._mm.send_errors if self._mm is not None else 0)

    def send(self, payload: bytes) -> None:
        try:
            self.sock.sendto(payload, self.switch)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError, OSError):
            self._send_errors += 1     # treated as a loss: the retransmission timer covers it

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            pass
        except ConnectionRefusedError:
            return None
        if timeout <= 0:
            return None
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return None
        try:
            return self.sock.recv(4096)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError):
            return None

    def _recv_block(self, timeout: float) -> tuple[np.ndarray, np.ndarray]:
        """A burst: (RX_DTYPE records, lengths), valid until the next call."""
        mm = self._mm
        n = mm.recv()
        if n == 0:
            if timeout <= 0:
                return mm.rec, self._empty
            r, _, _ = select.select([self.sock], [], [], timeout)
            if not r:
                return mm.rec, self._empty
            n = mm.recv()
        return mm.rec, mm.lens[:n]

    def close(self) -> None:
        self.sock.close()

    def __repr__(self) -> str:
        return f"UdpIo({self.bind[0]}:{self.bind[1]} -> {self.switch[0]}:{self.switch[1]})"


# -- in-process network (tests, simulations) -------------------------------------------------

# impair(direction "up"|"down", worker_id, frame) -> list of hold counts, one per
# copy to deliver: [] drops, [0] delivers now, [0, 0] duplicates, [3] delivers
# after 3 more frames have gone up (reordering).
Impair = Callable[[str, int, bytes], list[int]]


class InProcessSwitch:
    """A switch pipeline (anything with process_batch(frames, in_ports, now), e.g.
    testbed.switch.ina.InaPipeline) with workers attached in-process: payloads
    are wrapped in the Eth/IPv4/UDP frame the real host would send, results are
    routed to the endpoint whose ip:port they are addressed to. Thread-safe.
    batch=False: each frame goes through the pipeline as it is sent; True: frames
    wait in `pending` until flush(n) hands up to n of them over as one batch
    (the pipeline's vectorized path, as a switch that reads bursts)."""

    def __init__(self, pipeline: Any, *, switch_mac: str = "02:00:00:00:00:fe",
                 switch_ip: str = "10.0.0.254", ina_port: int = wire.INA_PORT_BASE,
                 impair: Impair | None = None, clock: Callable[[], float] = time.monotonic,
                 batch: bool = False):
        self.pipeline = pipeline
        self.batch = batch
        self.pending: list[tuple[bytes, int]] = []
        self.switch_mac, self.switch_ip, self.ina_port = switch_mac, switch_ip, ina_port
        self.impair = impair
        self.clock = clock
        self._lock = threading.RLock()
        self._eps: dict[tuple[bytes, int], InProcessIo] = {}
        self._held: list[list] = []          # [remaining, kind, frame, port_or_endpoint]
        self.frames_up = self.frames_down = self.unroutable = 0

    def endpoint(self, worker_id: int, *, mac: str, ip: str, switch_port: int,
                 udp_port: int = wire.INA_PORT_BASE) -> "InProcessIo":
        ep = InProcessIo(self, worker_id, mac, ip, udp_port, switch_port)
        with self._lock:
            self._eps[(wire.ip_bytes(ip), udp_port)] = ep
        return ep

    def _copies(self, direction: str, wid: int, frame: bytes) -> list[int]:
        return [0] if self.impair is None else list(self.impair(direction, wid, frame))

    def _up(self, ep: "InProcessIo", payload: bytes) -> None:
        frame = ep.prefix(len(payload)) + payload
        with self._lock:
            self._tick_held()
            for hold in self._copies("up", ep.worker_id, frame):
                if hold > 0:
                    self._held.append([hold, "up", frame, ep.switch_port])
                else:
                    self._to_switch(frame, ep.switch_port)

    def _to_switch(self, frame: bytes, port: int) -> None:
        if self.batch:
            self.pending.append((frame, port))
            return
        self.frames_up += 1
        for _, out in self.pipeline.process_batch([frame], [port], self.clock()):
            self._down(out)

    def flush(self, n: int | None = None) -> int:
        """Batch mode: process up to n pending frames (all by default) as one batch."""
        with self._lock:
            take = self.pending[:n] if n is not None else self.pending
            self.pending = self.pending[len(take):]
            if take:
                self.frames_up += len(take)
                outs = self.pipeline.process_batch([f for f, _ in take], [p for _, p in take],
                                                   self.clock())
                for _, out in outs:
                    self._down(out)
            return len(take)

    def _down(self, frame: bytes) -> None:
        ep = self._eps.get((frame[30:34], (frame[36] << 8) | frame[37]))
        if ep is None:
            self.unroutable += 1
            return
        for hold in self._copies("down", ep.worker_id, frame):
            if hold > 0:
                self._held.append([hold, "down", frame, ep])
            else:
                self.frames_down += 1
                ep.deliver(frame[wire.INA_OFFSET:])

    def _tick_held(self) -> None:
        if not self._held:
            return
        due = [h for h in self._held if h[0] <= 1]
        self._held = [h for h in self._held if h[0] > 1]
        for h in self._held:
            h[0] -= 1
        for _, kind, frame, dest in due:
            self._release(kind, frame, dest)

    def _release(self, kind: str, frame: bytes, dest: Any) -> None:
        if kind == "up":
            self._to_switch(frame, dest)
        else:
            self.frames_down += 1
            dest.deliver(frame[wire.INA_OFFSET:])

    def release_held(self) -> int:
        """Deliver every held (reordered) frame now; returns how many."""
        with self._lock:
            held, self._held = self._held, []
            for _, kind, frame, dest in held:
                self._release(kind, frame, dest)
            return len(held)

    @property
    def held(self) -> int:
        return len(self._held)

    def slot_state(self, job_id: int, slot: int, slot_ver: int) -> dict | None:
        """The switch's (bitmap, count, seq) of a job's slot, when the pipeline
        exposes its P4 tables and registers (InaPipeline does)."""
        tables = getattr(self.pipeline, "tables", None)
        regs = getattr(self.pipeline, "registers", None)
        if not isinstance(tables, dict) or not isinstance(regs, dict):
            return None
        with self._lock:
            _, p = tables["Ingress.job_table"].lookup(job_id)
            if "slot_base" not in p:
                return None
            i = (p["slot_base"] + slot) * 2 + slot_ver
            return {"bitmap": regs["Aggregator.worker_bitmap"].read(i),
                    "count": regs["Aggregator.worker_count"].read(i),
                    "seq": regs["Aggregator.slot_seq"].read(i)}


class InProcessIo:
    """One worker's end of an InProcessSwitch (the `io` of an InaClient)."""

    def __init__(self, net: InProcessSwitch, worker_id: int, mac: str, ip: str,
                 udp_port: int, switch_port: int):
        self.net, self.worker_id = net, worker_id
        self.mac, self.ip, self.udp_port, self.switch_port = mac, ip, udp_port, switch_port
        self._q: deque[bytes] = deque()
        self._cv = threading.Condition()
        self._prefixes: dict[int, bytes] = {}
        self.sent = 0

    def prefix(self, payload_len: int) -> bytes:
        pre = self._prefixes.get(payload_len)
        if pre is None:
            pre = self._prefixes[payload_len] = wire.eth_ip_udp(
                self.mac, self.net.switch_mac, self.ip, self.net.switch_ip, self.udp_port,
                self.net.ina_port, payload_len)
        return pre

    def send(self, payload: bytes) -> None:
        self.sent += 1
        self.net._up(self, payload)

    def deliver(self, payload: bytes) -> None:
        with self._cv:
            self._q.append(payload)
            self._cv.notify()

    def recv(self, timeout: float) -> bytes | None:
        with self._cv:
            if not self._q and timeout > 0:
                self._cv.wait(timeout)
            return self._q.popleft() if self._q else None

    def slot_state(self, job_id: int, slot: int, slot_ver: int) -> dict | None:
        return self.net.slot_state(job_id, slot, slot_ver)

    def close(self) -> None:
        pass


def drive(clients: list[InaClient], handles: list[InaHandle], *,
          advance: Callable[[float], None] | None = None, max_steps: int = 1_000_000) -> None:
    """Run several clients in one thread until all `handles` are done (tests,
    simulations over an InProcessSwitch). When nobody makes progress, `advance`
    (e.g. a virtual clock's setter) jumps to the earliest retransmission timer."""
    for _ in range(max_steps):
        if all(h.done for h in handles):
            return
        progress = sum(c.poll() for c in clients)
        if progress or all(h.done for h in handles):
            continue
        deadlines = [d for d in (c.next_deadline() for c in clients) if d is not None]
        if not deadlines:
            raise InaError("no progress possible: nothing in flight but handles not done")
        if advance is None:
            time.sleep(max(0.0, min(deadlines) - time.monotonic()))
        else:
            advance(min(deadlines))
    raise InaError(f"drive: not done after {max_steps} steps")


__all__ = ["InaClient", "InaHandle", "InaStats", "InaError", "InaTimeoutError", "UdpIo",
           "InProcessSwitch", "InProcessIo", "drive", "OPS"]
