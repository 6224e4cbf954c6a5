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

Values. float input + op "sum": fixed point with a shared scale (see
hosts/ina/fixed_point.py): by default one MAX round per tensor agrees on the
max exponent, then its SUM chunks use that scale; with `scale_exp=k` (client
default or per submit) there is no extra round and overflow is detected via
the MAX-ed header exponent (FixedPointOverflow on every worker, or counted
with on_overflow="saturate"). Integer input (any op): int32/uint32 carried
unscaled, result in the input's 32-bit type (uint32 stays uint32: OR bitmaps).

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

import heapq
import itertools
import logging
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from hosts.ina import fixed_point as fp
from testbed import wire

log = logging.getLogger("ina")

OPS = {"sum": wire.OP_SUM, "or": wire.OP_OR, "max": wire.OP_MAX}
LANES = wire.MAX_VALUES_PER_PACKET
_H = wire.HEADER_STRUCT
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

    __slots__ = ("id", "op", "shape", "kind", "scale_exp", "fixed", "ints", "src", "remaining",
                 "max_exp", "done", "result", "error", "chunks", "submitted_at", "completed_at")

    def __init__(self, hid: int, op: int, shape: tuple, kind: str, scale_exp: int | None):
        self.id, self.op, self.shape, self.kind = hid, op, shape, kind
        self.scale_exp = scale_exp                # None until agreed (float, agreed mode)
        self.fixed = scale_exp is not None        # configured scale: check saturation
        self.ints: np.ndarray | None = None       # int32 results, filled per chunk
        self.src: np.ndarray | None = None        # floats waiting for the agreed scale
        self.remaining = 0
        self.max_exp = fp.EXP_WIRE_MIN
        self.done = False
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.chunks: list[_Chunk] = []
        self.submitted_at = self.completed_at = 0.0

    def __repr__(self) -> str:
        return f"<InaHandle {self.id} {self.kind} {self.shape} {'done' if self.done else 'pending'}>"


class _Chunk:
    __slots__ = ("handle", "lo", "hi", "seq", "slot", "ver", "op", "is_exp", "packet",
                 "first_sent", "deadline", "rto", "retries", "acked", "patience_s")

    def __init__(self, handle, lo, hi, seq, slot, ver, op, is_exp, patience_s):
        self.handle, self.lo, self.hi = handle, lo, hi
        self.seq, self.slot, self.ver, self.op, self.is_exp = seq, slot, ver, op, is_exp
        self.packet: bytes | None = None
        self.first_sent: float | None = None
        self.deadline = self.rto = 0.0
        self.retries = 0
        self.acked = False
        self.patience_s = patience_s

    @property
    def count(self) -> int:
        return 1 if self.is_exp else self.hi - self.lo


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
        self.stats = InaStats()
        self._clock = clock
        self._next_seq = first_seq & 0xFFFFFFFF
        self._slots: list[deque[_Chunk]] = [deque() for _ in range(window)]
        self._timers: list[tuple[float, int, _Chunk]] = []
        self._tick = itertools.count()
        self._hids = itertools.count()
        self._fatal: BaseException | None = None
        self._last_rx: float | None = None
        self._warned_saturation = False

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
        a = np.asarray(vec)
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
        h.submitted_at = self._clock()
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
        h.ints = np.zeros(n, np.int32)
        h.remaining = nchunks
        if ints is None:
            # Agreed scale: a MAX round for the exponent first (one extra RTT per tensor).
            h.src = np.array(flat, dtype=np.float64)
            c = self._new_chunk(h, 0, 0, wire.OP_MAX, True, patience_s)
            c.packet = self._packet(c, e, np.array([e], ">i4").tobytes())
            self.stats.scale_rounds += 1
        chunks = [self._new_chunk(h, i * LANES, min(n, (i + 1) * LANES), code, False, patience_s)
                  for i in range(nchunks)]
        if ints is not None:
            self._fill_packets(h, chunks, ints, exps)
        for c in h.chunks:
            self._try_send(c.slot)
        return h

    def wait(self, handle: InaHandle, timeout: float | None = None) -> np.ndarray:
        """Block until `handle` completes; its result (or its error, raised)."""
        clock = self._clock
        end = None if timeout is None else clock() + timeout
        while not handle.done:
            self._raise_fatal()
            now = clock()
            self._fire_timers(now)
            if handle.done:
                break
            wait_s = min(max(0.0, self._timers[0][0] - now) if self._timers else 0.1, 0.1)
            if end is not None:
                if now >= end:
                    raise TimeoutError(f"INA job {self.job_id}: handle {handle.id} not complete "
                                       f"after {timeout} s (wait timeout; the transport is still retrying)")
                wait_s = min(wait_s, end - now)
            buf = self.io.recv(wait_s)
            for _ in range(_DRAIN):
                if buf is None:
                    break
                self._on_packet(buf)
                buf = self.io.recv(0.0)
            if buf is not None:
                self._on_packet(buf)
        self._raise_fatal()
        if handle.error is not None:
            raise handle.error
        return handle.result

    def poll(self) -> int:
        """Non-blocking progress: handle received packets and expired timers.
        Returns the number of events (packets handled + resends)."""
        self._raise_fatal()
        n = 0
        for _ in range(_DRAIN):
            buf = self.io.recv(0.0)
            if buf is None:
                break
            self._on_packet(buf)
            n += 1
        return n + self._fire_timers(self._clock())

    def next_deadline(self) -> float | None:
        """When the earliest retransmission timer fires (None: nothing in flight)."""
        t = self._timers
        while t and (t[0][2].acked or t[0][2].deadline != t[0][0]):
            heapq.heappop(t)
        return t[0][0] if t else None

    @property
    def rto_s(self) -> float:
        """First retransmission timeout of a chunk sent now."""
        if not self.adaptive_rto or self._srtt is None:
            return self.timeout_s
        return min(self.timeout_s, max(self.min_timeout_s, self._srtt + 4 * self._rttvar))

    @property
    def in_flight(self) -> int:
        return sum(1 for q in self._slots if q and q[0].first_sent is not None)

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def close(self) -> None:
        self.io.close()

    # -- chunks and packets --------------------------------------------------------
    def _new_chunk(self, h: InaHandle, lo: int, hi: int, op: int, is_exp: bool,
                   patience_s: float | None) -> _Chunk:
        seq = self._next_seq
        self._next_seq = (seq + 1) & 0xFFFFFFFF
        slot = seq % self.window
        c = _Chunk(h, lo, hi, seq, slot, (seq // self.window) % 2, op, is_exp, patience_s)
        h.chunks.append(c)
        self._slots[slot].append(c)
        return c

    def _packet(self, c: _Chunk, exponent: int, values: bytes) -> bytes:
        return _H.pack(wire.INA_VERSION, c.op, 0, self.job_id, c.slot, c.ver, self.worker_id,
                       c.seq, c.count, exponent, 0) + values

    def _fill_packets(self, h: InaHandle, chunks: list[_Chunk], ints: np.ndarray,
                      exps: np.ndarray | None) -> None:
        be = ints.astype(">i4").tobytes()
        exps_l = exps.tolist() if exps is not None else None
        for i, c in enumerate(chunks):
            e = exps_l[i] if exps_l is not None else (0 if h.scale_exp is None else
                                                      fp.max_exponent_for_scale(h.scale_exp, self.n_workers))
            c.packet = self._packet(c, e, be[4 * c.lo:4 * c.hi])

    def _chunk_exponents(self, flat: np.ndarray, k: int, nchunks: int) -> np.ndarray:
        """Header exponent per chunk at a fixed scale: the chunk's own exponent,
        capped at the largest that fits, or one above it if this worker clipped a
        value of the chunk, so the MAX-ed result exponent flags it to everyone."""
        pad = nchunks * LANES - flat.size
        lim_e = fp.max_exponent_for_scale(k, self.n_workers)
        x = np.pad(flat.astype(np.float64), (0, pad)).reshape(nchunks, LANES)
        mags = np.abs(x).max(1)
        e = np.where(mags > 0, np.frexp(mags)[1], fp.EXP_ZERO)
        clipped = (np.abs(np.rint(np.ldexp(x, k))) > fp.contribution_limit(self.n_workers)).any(1)
        e = np.minimum(e, lim_e)
        e[clipped] = lim_e + 1
        return np.clip(e, fp.EXP_WIRE_MIN, fp.EXP_WIRE_MAX).astype(np.int64)

    def _on_scale(self, h: InaHandle, max_exp: int) -> None:
        """The MAX round is back: quantize with the agreed scale, release the SUM chunks."""
        k = fp.scale_from_exponent(max_exp, self.n_workers)
        h.scale_exp = k
        ints, nsat = fp.quantize(h.src, k, self.n_workers, "saturate")
        if nsat:   # impossible unless a worker's exponent was lost or wrong
            self._fatal = InaError(f"INA job {self.job_id}: agreed exponent {max_exp} is below "
                                   f"this worker's values ({nsat} would overflow): workers disagree")
            raise self._fatal
        h.src = None
        data = h.chunks[1:]
        self._fill_packets(h, data, ints, None)
        for c in data:
            self._try_send(c.slot)

    def _try_send(self, slot: int) -> None:
        q = self._slots[slot]
        if not q:
            return
        c = q[0]
        if c.first_sent is not None or c.packet is None:
            return
        now = self._clock()
        c.first_sent = now
        c.rto = self.rto_s
        c.deadline = now + c.rto
        self.io.send(c.packet)
        self.stats.packets_sent += 1
        self.stats.chunks_sent += 1
        heapq.heappush(self._timers, (c.deadline, next(self._tick), c))

    # -- receive -----------------------------------------------------------------------
    def _on_packet(self, buf: bytes) -> None:
        if len(buf) < wire.INA_HLEN:
            self.stats.foreign_packets += 1
            return
        ver_, op, flags, job, slot, sver, _wid, seq, count, exp, _ = _H.unpack_from(buf, 0)
        if ver_ != wire.INA_VERSION or not flags & wire.FLAG_RESULT or job != self.job_id \
                or slot >= self.window or count > LANES or len(buf) < wire.INA_HLEN + 4 * count:
            self.stats.foreign_packets += 1
            return
        q = self._slots[slot]
        c = q[0] if q else None
        if c is None or c.first_sent is None or c.seq != seq:
            self.stats.duplicates_ignored += 1
            return
        if op != c.op or count != c.count:
            self._fatal = InaError(
                f"INA job {self.job_id}: result for seq {seq} (slot {slot}) has op {op}, count "
                f"{count} but this worker sent op {c.op}, count {c.count}: the workers do not "
                f"submit the same sequence of vectors (sizes/ops must match in order)")
            raise self._fatal
        now = self._clock()
        self._last_rx = now
        q.popleft()
        c.acked = True
        st = self.stats
        st.results += 1
        rtt = now - c.first_sent
        st.latencies_s.append(rtt)
        if c.retries == 0:
            if self._srtt is None:
                self._srtt, self._rttvar = rtt, rtt / 2
            else:
                self._rttvar += 0.25 * (abs(self._srtt - rtt) - self._rttvar)
                self._srtt += 0.125 * (rtt - self._srtt)
        h = c.handle
        vals = np.frombuffer(buf, ">i4", count, wire.INA_HLEN)
        if c.is_exp:
            self._on_scale(h, int(vals[0]))
        else:
            h.ints[c.lo:c.hi] = vals
            if exp > h.max_exp:
                h.max_exp = exp
            h.remaining -= 1
            if h.remaining == 0:
                self._finish(h, now)
        self._try_send(slot)

    def _finish(self, h: InaHandle, now: float) -> None:
        if h.kind == "float":
            h.result = fp.from_fixed(h.ints, h.scale_exp, np.float32).reshape(h.shape)
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
            h.result = h.ints.view(np.uint32).reshape(h.shape)
        else:
            h.result = h.ints.reshape(h.shape)
        h.ints = None
        h.chunks = []
        h.completed_at = now
        h.done = True

    # -- timers ---------------------------------------------------------------------------
    def _fire_timers(self, now: float) -> int:
        t, n = self._timers, 0
        while t and t[0][0] <= now:
            deadline, _, c = heapq.heappop(t)
            if c.acked or c.deadline != deadline:
                continue                      # stale entry: answered or re-armed
            if c.retries >= self.max_retries and (c.patience_s is None
                                                  or now - c.first_sent >= c.patience_s):
                self._give_up(c, now)
            c.retries += 1
            c.rto = min(c.rto * self.backoff, self.max_timeout_s)
            c.deadline = now + c.rto
            p = c.packet
            self.io.send(p[:2] + bytes((p[2] | wire.FLAG_RETX,)) + p[3:])
            self.stats.retransmissions += 1
            self.stats.packets_sent += 1
            heapq.heappush(t, (c.deadline, next(self._tick), c))
            n += 1
        return n

    def _give_up(self, c: _Chunk, now: float) -> None:
        self.stats.timeouts += 1
        n = self.n_workers
        missing: int | None = None
        present: list[int] | None = None
        state = None
        probe = getattr(self.io, "slot_state", None)
        if callable(probe):
            try:
                state = probe(self.job_id, c.slot, c.ver)
            except Exception:  # noqa: BLE001 - diagnostics must not mask the timeout
                state = None
        if state is not None and state.get("seq") == c.seq and state.get("count", 0) > 0:
            present = [w for w in range(wire.MAX_WORKERS) if state["bitmap"] >> w & 1]
            missing = n - int(state["count"])
            what = (f"the switch has {state['count']} of {n} contributions (workers {present}): "
                    f"missing {missing}")
        elif state is not None:
            missing = n
            what = (f"the switch's slot holds seq {state.get('seq')} (count {state.get('count')}): "
                    f"no contribution to seq {c.seq} arrived, not even ours; missing {n}")
        else:
            since = ("no result ever arrived from the switch (is the job installed, and the switch "
                     "reachable?)" if self._last_rx is None
                     else f"the last result arrived {now - self._last_rx:.3f} s ago")
            what = (f"the switch answers any retransmission once a slot is complete, so it seems "
                    f"to miss 1..{n - 1} other workers' contributions, or never got ours; {since}")
        err = InaTimeoutError(
            f"INA job {self.job_id} worker {self.worker_id}: no result for seq {c.seq} (slot "
            f"{c.slot}, slot_ver {c.ver}) after {c.retries} retransmissions over "
            f"{now - c.first_sent:.3f} s (timeout {self.timeout_s} s, backoff x{self.backoff}, "
            f"cap {self.max_timeout_s} s); "
            f"{what}. Check that every worker runs, submits the same vectors, uses window "
            f"{self.window} <= the job's slot_count, and that the switch is up.",
            job_id=self.job_id, slot=c.slot, slot_ver=c.ver, seq=c.seq, retries=c.retries,
            elapsed_s=now - c.first_sent, missing=missing, present_workers=present)
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
    arrive from the switch at the bound address; the client checks their header."""

    def __init__(self, bind: tuple[str, int], switch: tuple[str, int], rcvbuf: int = 4 << 20):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.bind(bind)
        except OSError as e:
            s.close()
            raise OSError(e.errno, f"INA worker socket: cannot bind {bind[0]}:{bind[1]}: "
                                   f"{e.strerror or e}") from None
        s.setblocking(False)
        self.sock, self.bind, self.switch = s, bind, tuple(switch)
        self.send_errors = 0

    def send(self, payload: bytes) -> None:
        try:
            self.sock.sendto(payload, self.switch)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError, OSError):
            self.send_errors += 1      # treated as a loss: the retransmission timer covers it

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
