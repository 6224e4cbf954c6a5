"""The in-network aggregation (INA) transport: `InaClient`.

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
Timers (hosts/ina/timers.py): a chunk's first timeout is timeout_s, lower once
round trips are measured, times backoff per resend; after max_retries resends
the client fails with `InaTimeoutError` (job, slot, seq, what the switch seems
to be missing) and stays failed: its seq stream can no longer match the other
workers'. An expired timer resends only if the chunk looks lost (RACK); when
no result at all came back (a stall, mostly, on a loaded machine) only probes
go out, not the window; due timers are judged only after the socket has been
read (a descheduled worker finds its answers there). On a dilated network
(`expect_delay`) no chunk's timer starts below its own dilated answer time.
With `congestion_window` (the network sets it for BMv2) chunks on the wire are
capped by a congestion window (hosts/ina/cwnd.py), at most `window`: a switch
slower than the links loses the excess of a burst, so the window halves after a
round that lost more than 1/8 of it; slots whose next chunk waits for room are
held and released oldest first after each receive. Off (the default) the whole
window goes: on the soft switch at 100 Mbit/s the adaptive window cost 2.8x at
1 MiB (results completing out of order across workers look like losses).

Bulk path. A tensor's chunks are one run (`Seg`, hosts/ina/chunks.py) of
consecutive seqs: all packets are built at once with numpy (PKT_DTYPE rows in
one buffer), slot state lives in per-slot numpy arrays (hosts/ina/window.py,
hosts/ina/timers.py), bursts of results are parsed and
applied vectorized, and the next chunks of the answered slots go out as one
sendmmsg when the io has `send_many`/`recv_block` (UdpIo on Linux). One-chunk
vectors (P4SGD micro-batches) take a scalar path (struct, one sendto).
Where `make setup` built hosts/ina/_hostpath.c, quantizing, packet building and
burst result handling run compiled (hosts/ina/hostpath.py; `impl`, stats.impl),
the numpy code above being their reference; so does the steady state of the
newest bulk run (`_hot`): its results taken in, their slots' next chunks armed
and sent, and on a UdpIo the recvmmsg/sendmmsg and the wait itself, by one C
call per loop pass (hosts/ina/hostloop.py) that hands anything else (another
run's results, a run's last window, a due timer) back to the Python code here.

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
diagnostics. `UdpIo` (hosts/ina/udp_io.py) is a real socket;
`InProcessSwitch(...).endpoint(...)` (hosts/ina/in_process.py)
runs a switch pipeline in-process (tests, simulations).
"""
from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from hosts.common.arrays import as_array
from hosts.ina import fixed_point as fp
from hosts.ina import hostpath
from hosts.ina import receive
from hosts.ina.chunks import (FRAME_BYTES, LANES, PKT_DTYPE, PKT_SIZE, RX_DTYPE, RX_STRIDE, Seg,
                              as_int32_bits, build_packets, chunk_exponents, exponent_packet,
                              result_values)
from hosts.ina.cwnd import CongestionWindow
from hosts.ina.hostloop import HostLoop
from hosts.ina.handles import OPS, InaError, InaHandle, InaIo, InaStats, InaTimeoutError
from hosts.ina.in_process import Impair, InProcessIo, InProcessSwitch, drive
from hosts.ina.timers import RetransmitTimers, timeout_error
from hosts.ina.udp_io import UdpIo
from hosts.ina.window import SlotWindow
from testbed import wire

if TYPE_CHECKING:
    from hosts.common.network_dilation import DilationSettings

log = logging.getLogger("ina")

_DEFAULT = object()
_INF = float("inf")


class InaClient(receive.ResultIntake):
    def __init__(self, io: InaIo, job_id: int, worker_id: int, n_workers: int, *,
                 window: int = 64, timeout_s: float = 0.05, backoff: float = 2.0,
                 max_timeout_s: float | None = None, max_retries: int = 20,
                 scale_exp: int | None = None, on_overflow: str = "raise",
                 adaptive_rto: bool = True, min_timeout_s: float = 0.01,
                 first_seq: int = 0, clock: Callable[[], float] = time.monotonic,
                 impl: str | None = None, congestion_window: bool = False):
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
        self.max_retries = max_retries
        self.scale_exp, self.on_overflow = scale_exp, on_overflow
        self.timers = RetransmitTimers(window, timeout_s=timeout_s, backoff=backoff,
                                       max_timeout_s=max_timeout_s, adaptive_rto=adaptive_rto,
                                       min_timeout_s=min_timeout_s)
        self.win = SlotWindow(window, first_seq)
        # the compiled packet loops (None: numpy), hosts/ina/hostpath.py
        self._hp = self.timers.hp = hostpath.choose(impl)
        self.stats = InaStats(impl="python" if self._hp is None else "compiled")
        self._clock = clock
        self._hids = itertools.count()
        self._fatal: BaseException | None = None
        self._warned_saturation = False
        self._rx_block = getattr(io, "recv_block", None)   # (timeout) -> (records, lens)
        self._tx_many = getattr(io, "send_many", None)     # (base_addr, offs, lens)
        self._exp_hdr: dict[int, int] = {}
        # Chunks on the wire are capped by a congestion window (hosts/ina/cwnd.py): a slot
        # whose head is ready while the window is full is `_held` until answers make room.
        self._cc = CongestionWindow(window, adaptive=congestion_window)
        # Default patience of submitted vectors (None: give up after max_retries);
        # a collective sets its own op timeout (hosts/collectives/switch.py).
        self.patience_s: float | None = None
        self.timers.on_clean_answers = self._cc.on_answers
        self._held = np.zeros(window, bool)
        # The steady-state loop in C (hosts/ina/hostloop.py) for the bulk run `_hot`,
        # where the packet loops are compiled and the window is not adaptive.
        self._hot: Seg | None = None
        self._loop = (HostLoop(self._hp, self) if self._hp is not None and not congestion_window
                      else None)

    # the timer settings as the client's (expect_delay may raise them)
    timeout_s = property(lambda self: self.timers.timeout_s)
    max_timeout_s = property(lambda self: self.timers.max_timeout_s)
    backoff = property(lambda self: self.timers.backoff)
    seq_space = property(lambda self: self.win.seq_space)

    # -- public API --------------------------------------------------------------
    def allreduce(self, values: np.ndarray, op: str = "sum", **kw: Any) -> np.ndarray:
        return self.wait(self.submit(values, op, **kw))

    def submit(self, vec: np.ndarray, op: str = "sum", *, scale_exp: Any = _DEFAULT,
               patience_s: float | None = None) -> InaHandle:
        """Queue one vector; its chunks go out as their slots free up.
        patience_s: do not give up on these chunks before this long (e.g. a
        first barrier while the other workers are still starting); default:
        the client's `patience_s`."""
        self._raise_fatal()
        if patience_s is None:
            patience_s = self.patience_s
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
            ints, nsat = self._quantize(flat, k)
            exps = chunk_exponents(flat, k, nchunks, self.n_workers)
            self.stats.saturated_values += nsat
        else:
            ints = as_int32_bits(flat, kind)
            exps = 0
        h.n, h.nchunks = n, nchunks
        h.ints = np.zeros(nchunks * LANES, np.int32)
        h.ints2d = h.ints.reshape(nchunks, LANES)
        h.remaining = nchunks
        if ints is None:
            # Agreed scale: a MAX round for the exponent first (one extra RTT per tensor).
            h.src = np.array(flat, dtype=np.float64)
            (xs,) = self.win.new_segs(h, 1, wire.OP_MAX, True, patience_s)
            xs.pkt = exponent_packet(xs, self.job_id, self.worker_id, self.window, e)
            self.stats.scale_rounds += 1
        data = self.win.new_segs(h, nchunks, code, False, patience_s)
        if ints is not None:
            for s in data:
                build_packets(s, ints, exps, self.job_id, self.worker_id, self.window, self._hp)
        for s in h.segs:
            if s.ready:
                self._start_seg(s, now)
        return h

    def wait(self, handle: InaHandle, timeout: float | None = None) -> np.ndarray:
        """Block until `handle` completes; its result (or its error, raised)."""
        clock, timers = self._clock, self.timers
        end = None if timeout is None else clock() + timeout
        while not handle.done:
            self._raise_fatal()
            now = clock()
            if now >= timers.next_dl:
                self._fire_timers(self._catch_up()[1])
                if handle.done:
                    break
            wait_s = min(max(0.0, timers.next_dl - now), 0.1)
            if end is not None:
                if now >= end:
                    raise TimeoutError(f"INA job {self.job_id}: handle {handle.id} not complete "
                                       f"after {timeout} s (wait timeout; the transport is still retrying)")
                wait_s = min(wait_s, end - now)
            self._receive(wait_s, True)
        self._raise_fatal()
        if handle.error is not None:
            raise handle.error
        return handle.result if handle.back is None else handle.back(handle.result)

    def poll(self) -> int:
        """Non-blocking progress: handle received packets and expired timers.
        Returns the number of events (packets handled + resends)."""
        self._raise_fatal()
        n = self._receive(0.0)
        if self._clock() >= self.timers.next_dl:
            k, now = self._catch_up()
            n += k + self._fire_timers(now)
        return n

    def next_deadline(self) -> float | None:
        """When the earliest retransmission timer fires (None: nothing in flight)."""
        d = self.timers.refresh_next()
        return None if d == _INF else d

    @property
    def rto_s(self) -> float:
        """First retransmission timeout of a chunk sent now."""
        return self.timers.rto_cache

    def expect_delay(self, network: "DilationSettings") -> None:
        """The network is slowed on purpose (time dilation): keep every chunk's first
        timer above the dilated time its answer may take (RetransmitTimers.expect_delay)."""
        self.timers.expect_delay(network)

    def chunk_floor_s(self, ahead: "int | np.ndarray") -> "float | np.ndarray":
        """First-timer floor of a chunk sent with `ahead` chunks of this worker on the
        wire (0 on a network that is not dilated)."""
        return self.timers.chunk_floor_s(ahead)

    @property
    def in_flight(self) -> int:
        return self.win.in_flight

    @property
    def next_seq(self) -> int:
        return self.win.next_seq

    def close(self) -> None:
        self.io.close()

    # -- sending ---------------------------------------------------------------------
    def _start_seg(self, seg: Seg, now: float) -> None:
        """Send every chunk of `seg` that heads its slot and is not on the wire yet."""
        if seg.n == 1:
            s = seg.slot0
            if self.win.slots[s][0] is seg and self.win.hseq[s] < 0:
                self._start_one(seg, s, 0, now)
            return
        ready = self.win.idle_heads(seg)
        if ready:
            ss = np.array(ready, np.int64)
            self._start_many(seg, ss, self.win.hci[ss], now)

    def _start_one(self, seg: Seg, s: int, ci: int, now: float, admitted: bool = False) -> None:
        # the room check counts the window (O(window)): only an adaptive window needs it
        if not admitted and self._cc.adaptive and self._cc.room(self.win.in_flight) < 1:
            self._held[s] = True
            return
        self._held[s] = False          # also when _start_seg starts a held slot first
        if seg.n > self.window:
            self._hot = seg
        hseq = self.win.hseq
        self.timers.arm_one(s, now, self.timers.first_rto(hseq))
        hseq[s] = seg.seq0 + ci
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

    def _start_many(self, seg: Seg, ss: np.ndarray, cis: np.ndarray, now: float) -> None:
        """Put chunks cis of `seg` (heads of slots ss, not on the wire) on the wire."""
        k = len(ss)
        if seg.n > self.window:
            self._hot = seg           # the bulk run the compiled loop takes results for
        room = self._cc.room(self.win.in_flight) if self._cc.adaptive else k
        if room < k:                  # the oldest go, the rest wait in _held
            order = np.argsort((seg.seq0 + cis - self.win.next_seq) % self.seq_space, kind="stable")
            self._held[ss[order[max(room, 0):]]] = True
            keep = np.sort(order[:max(room, 0)])
            ss, cis, k = ss[keep], cis[keep], len(keep)
            if not k:
                return
        if k == 1:
            self._start_one(seg, int(ss[0]), int(cis[0]), now, admitted=True)
            return
        self._held[ss] = False
        hseq = self.win.hseq
        self.timers.arm_many(ss, now, self.timers.first_rto(hseq, k))
        hseq[ss] = seg.seq0 + cis
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

    def _release(self, now: float) -> None:
        """Put held chunks on the wire, oldest first, as far as the congestion window
        allows. The oldest held chunk also goes when it is older than every chunk on
        the wire: the others may be waiting for it from this worker (no deadlock)."""
        win = self.win
        held = np.flatnonzero(self._held)
        seqs = np.array([win.slots[s][0].seq0 + win.hci.item(s) for s in held.tolist()])
        age = (seqs - win.next_seq) % self.seq_space          # older: smaller
        order = held[np.argsort(age, kind="stable")]
        room = self._cc.room(win.in_flight)
        if room < 1:
            fly = win.hseq[win.hseq >= 0]
            if len(fly) and age.min() >= int(((fly - win.next_seq) % self.seq_space).min()):
                return
            room = 1
        for s in order[:room].tolist():
            self._held[s] = False
            self._start_one(win.slots[s][0], s, win.hci.item(s), now, admitted=True)

    def _advance(self, s: int, now: float) -> None:
        """Slot s's head was answered (and is off the wire): send its next chunk."""
        nxt = self.win.next_in_slot(s)
        if nxt is not None and nxt[0].ready:
            self._start_one(nxt[0], s, nxt[1], now)

    def _quantize(self, x: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        if self._hp is None:
            return fp.quantize(x, k, self.n_workers, "saturate")
        return hostpath.quantize(self._hp, x, k, self.n_workers)

    # -- results -------------------------------------------------------------------------
    def _on_scale(self, h: InaHandle, max_exp: int, now: float) -> None:
        """The MAX round is back: quantize with the agreed scale, release the SUM chunks."""
        k = fp.scale_from_exponent(max_exp, self.n_workers)
        h.scale_exp = k
        ints, nsat = self._quantize(h.src, k)
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
                build_packets(s, ints, e, self.job_id, self.worker_id, self.window, self._hp)
                self._start_seg(s, now)

    def _finish(self, h: InaHandle, now: float) -> None:
        h.result = result_values(h, self._hp)
        if h.kind == "float":
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
        if self._hot is not None and self._hot.handle is h:
            self._hot = None
            if self._loop is not None:
                self._loop.unbind()       # lets go of the handle's rows
        h.ints = h.ints2d = None
        h.segs = []
        h.completed_at = now
        h.done = True

    # -- timers ---------------------------------------------------------------------------
    def _catch_up(self) -> tuple[int, float]:
        """Timers are due: first take in every result already in the socket; then
        (results taken, the time to judge the timers at: one read before the socket
        was found empty). A worker descheduled past its timeout (a loaded machine)
        finds the answers it waited for queued there; firing first would resend
        all of them (tests/unit/test_ina_contention.py)."""
        n = 0
        while True:
            now = self._clock()
            k = self._receive(0.0)
            n += k
            if not k or n >= 4 * receive.DRAIN:
                return n, now

    def _fire_timers(self, now: float) -> int:
        timers = self.timers
        if now < timers.next_dl:
            return 0
        n = 0
        win = self.win
        for s in timers.expired(now, (win.hseq - win.next_seq) % self.seq_space,
                                self._cc.resend_cap()):
            seg = self.win.slots[s][0]
            ci = int(self.win.hci[s])
            retries = int(timers.retries[s])
            if retries >= self.max_retries and (seg.patience_s is None
                                                or now - timers.first[s] >= seg.patience_s):
                self._give_up(s, now)
            if retries == 0:
                self._cc.on_loss()
                self.stats.window_cuts = self._cc.cuts
            timers.resent(s, now)
            p = bytearray(seg.packet(ci))
            p[2] |= wire.FLAG_RETX
            self.io.send(bytes(p))
            self.stats.retransmissions += 1
            self.stats.packets_sent += 1
            n += 1
        timers.refresh_next()
        self.stats.retx_silent = timers.silent
        return n

    def _give_up(self, slot: int, now: float) -> None:
        self.stats.timeouts += 1
        t = self.timers
        self._fatal = timeout_error(
            job_id=self.job_id, worker_id=self.worker_id, n_workers=self.n_workers,
            window=self.window, slot=slot, seq=int(self.win.hseq[slot]),
            retries=int(t.retries[slot]), elapsed=now - float(t.first[slot]), now=now,
            last_rx=t.last_rx, io=self.io, timers=t)
        raise self._fatal

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal


__all__ = ["InaClient", "InaHandle", "InaStats", "InaError", "InaTimeoutError", "UdpIo",
           "InProcessSwitch", "InProcessIo", "drive", "OPS", "LANES", "Impair", "InaIo",
           "PKT_DTYPE", "PKT_SIZE", "RX_DTYPE", "RX_STRIDE", "FRAME_BYTES"]
