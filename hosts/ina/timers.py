"""Retransmission timers of the INA client: one per window slot, the RTT
estimate that sets them, and the rule that decides whether an expired timer
resends.

- First timeout of a chunk: timeout_s, or lower once round trips are measured
  (adaptive: srtt + 4 rttvar, Jacobson/Karels, at least min_timeout_s); each
  resend multiplies it by backoff, capped at max_timeout_s.
- Karn's rule: RTT samples come only from chunks answered without a resend
  (a resent chunk's answer may belong to either copy).
- Resend rule (RACK, RFC 8985): an expired chunk is resent if a chunk put on
  the wire after it was answered (send order, not send time: a window goes out
  in one burst at one clock reading, and its lost chunks must still be found
  while the rest of it is answered), or, probing, if no result at all arrived
  for its timeout. Such a chunk's timer expires 1.25 round trips after it was
  sent (`rack_timers`, after each received burst), not at its full timeout. Otherwise results are still flowing and it is queued behind
  them at a slow switch: re-armed, no resend (no retransmission storms).
- Dilated network (`expect_delay`): no chunk's first timer starts below 1.5 x
  the dilated time its own answer may take (`chunk_floor_s`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from hosts.ina.chunks import FRAME_BYTES
from hosts.ina.handles import InaTimeoutError
from testbed import wire

if TYPE_CHECKING:
    from hosts.common.network_dilation import DilationSettings

_INF = float("inf")


class RetransmitTimers:
    """Per-slot timer state of the chunk at the head of each slot, as arrays."""

    def __init__(self, window: int, *, timeout_s: float, backoff: float,
                 max_timeout_s: float | None, adaptive_rto: bool, min_timeout_s: float):
        W = window
        self.window = window
        self.timeout_s, self.backoff = timeout_s, backoff
        self.max_timeout_s = max_timeout_s if max_timeout_s is not None else 16 * timeout_s
        # The RTT estimate can only *lower* the first timeout below timeout_s:
        # quicker loss recovery.
        self.adaptive_rto, self.min_timeout_s = adaptive_rto, min(min_timeout_s, timeout_s)
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.rto_cache = timeout_s
        # Dilated network (expect_delay): a chunk sent with k chunks of this worker on
        # the wire ahead of it gets a first timer of at least base + k x frame seconds.
        self.floor_base_s = self.floor_frame_s = 0.0
        self.first = np.zeros(W, np.float64)      # head's first send
        self.order = np.zeros(W, np.float64)      # head's latest (re)transmission, in send order
        self.sends = 0.0                          # transmissions so far (the next order number)
        self.rack = -_INF                         # latest send order of a chunk answered
                                                  # without a resend (RACK)
        self.dl = np.full(W, _INF)                # head's retransmission deadline
        self.rto = np.zeros(W, np.float64)
        self.retries = np.zeros(W, np.int64)
        self.next_dl = _INF                       # <= min(dl): checked before scanning
        self.last_rx: float | None = None         # when the latest accepted result arrived
        self.hp: Any = None                       # compiled loops (hosts/ina/hostpath.py) or None
        self.silent = 0                           # resends after "nothing arrived"
        self.probes = 1                           # resends allowed per silent expiry
        self.probe_at = -_INF                     # no silent resend before this
        # told how many chunks were answered without a resend (the congestion window's input)
        self.on_clean_answers: Callable[[int], None] = lambda n: None

    # -- dilated network ---------------------------------------------------------
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
        self.floor_base_s = max(self.floor_base_s, 1.5 * base_s)
        self.floor_frame_s = max(self.floor_frame_s, 1.5 * frame_s)
        worst = self.chunk_floor_s(self.window - 1)
        # The adaptive RTO may follow measured round trips up to twice the worst
        # legitimate answer; backoff may grow 16x beyond that.
        self.timeout_s = max(self.timeout_s, 2.0 * worst / 1.5)
        self.max_timeout_s = max(self.max_timeout_s, 16 * self.timeout_s)

    def chunk_floor_s(self, ahead: "int | np.ndarray") -> "float | np.ndarray":
        return self.floor_base_s + self.floor_frame_s * ahead

    def first_rto(self, hseq: np.ndarray, k: int = 1) -> "float | np.ndarray":
        """First timers of k chunks put on the wire now, in order (hseq: the
        window's on-the-wire seqs, -1 where a slot is idle, before these k)."""
        rto = self.rto_cache
        if not self.floor_frame_s:
            return rto
        ahead = int(np.count_nonzero(hseq >= 0))
        if k == 1:
            return max(rto, self.chunk_floor_s(ahead))
        return np.maximum(rto, self.chunk_floor_s(ahead + np.arange(k)))

    # -- arming ------------------------------------------------------------------
    def arm_one(self, s: int, now: float, rto: float) -> None:
        self.first[s] = now
        self.order[s] = self.sends
        self.sends += 1
        self.rto[s] = rto
        self.dl[s] = d = now + rto
        self.retries[s] = 0
        if d < self.next_dl:
            self.next_dl = d

    def arm_many(self, ss: np.ndarray, now: float, rto: "float | np.ndarray") -> None:
        """arm_one for the slots ss, put on the wire in that order."""
        self.first[ss] = now
        self.order[ss] = self.sends + np.arange(len(ss), dtype=np.float64)
        self.sends += len(ss)
        self.rto[ss] = rto
        self.dl[ss] = now + rto
        self.retries[ss] = 0
        d = now + float(np.min(rto))
        if d < self.next_dl:
            self.next_dl = d

    # -- answers: RTT (Karn) and RACK ---------------------------------------------
    def answered_one(self, s: int, now: float) -> float:
        """Slot s's head was answered at `now`: disarm; learn from it if it was
        never resent. Returns its round trip (first send -> answer)."""
        self.dl[s] = _INF
        first = self.first.item(s)
        rtt = now - first
        if self.retries.item(s) == 0:
            self.update_rtt(rtt)
            if self.probes != 1 or self.probe_at != -_INF:
                self.answered_clean()
            order = self.order.item(s)
            if order > self.rack:
                self.rack = order
        else:
            self.answered_resent()
        return rtt

    def answered_many(self, ss: np.ndarray, now: float) -> np.ndarray:
        """answered_one for the heads of slots ss (distinct), in order."""
        rtt = now - self.first[ss]
        order = self.order[ss]
        fresh = self.retries[ss] == 0
        if fresh.all():
            self.update_rtts(rtt)
            sent = float(order.max())
            self.answered_clean()
        elif fresh.any():
            self.update_rtts(rtt[fresh])
            sent = float(order[fresh].max())
            self.answered_clean()
        else:
            sent = self.rack
            self.answered_resent(len(ss))
        if sent > self.rack:
            self.rack = sent
        self.dl[ss] = _INF
        return rtt

    def rack_timers(self) -> None:
        """RACK's reordering timer (RFC 8985, 6.2): a chunk sent before the latest one
        answered, and never resent, is lost once 1.25 round trips have passed since it
        was sent (the switch and the links keep each worker's order), not only at its
        retransmission timeout (at least min_timeout_s): its timer is brought forward
        to then. Once per received burst; the compiled loop does the same (Loop)."""
        if self.srtt is None:
            return
        m = (self.order < self.rack) & (self.retries == 0) & (self.dl < _INF)
        if not m.any():
            return
        dl = np.minimum(self.dl[m], self.first[m] + 1.25 * self.srtt)
        self.dl[m] = dl
        d = float(dl.min())
        if d < self.next_dl:
            self.next_dl = d

    def update_rtt(self, rtt: float) -> None:
        self.on_clean_answers(1)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar += 0.25 * (abs(self.srtt - rtt) - self.rttvar)
            self.srtt += 0.125 * (rtt - self.srtt)
        if self.adaptive_rto:
            self.rto_cache = min(self.timeout_s,
                                 max(self.min_timeout_s, self.srtt + 4 * self.rttvar))

    def update_rtts(self, rtts: "np.ndarray | list[float]") -> None:
        """update_rtt for each sample of a burst, in order."""
        if self.srtt is None:
            self.update_rtt(float(rtts[0]))
            rtts = rtts[1:]
        self.on_clean_answers(len(rtts))
        srtt, var = self.srtt, self.rttvar
        if self.hp is not None and len(rtts) > 4:
            srtt, var = self.hp.rtt_fold(srtt, var, np.ascontiguousarray(rtts, np.float64))
        else:
            for r in (rtts.tolist() if isinstance(rtts, np.ndarray) else rtts):
                var += 0.25 * (abs(srtt - r) - var)
                srtt += 0.125 * (r - srtt)
        self.srtt, self.rttvar = srtt, var
        if self.adaptive_rto:
            self.rto_cache = min(self.timeout_s, max(self.min_timeout_s, srtt + 4 * var))

    # -- expiry --------------------------------------------------------------------
    def expired(self, now: float, seq_age: np.ndarray | None = None,
                limit: int | None = None) -> list[int]:
        """Slots whose timer expired and whose chunk looks lost, to resend now;
        expired chunks that do not look lost are re-armed here. seq_age[s]: how
        old slot s's chunk is in sequence order (smaller: older), which decides
        the silent probe (below); without it, the first send time does.
        limit: at most this many, oldest first; the rest wait a base timeout,
        no retry counted (the congestion window's cap, hosts/ina/cwnd.py).

        Silence (no result at all for a chunk's timeout) is mostly a stall on a
        loaded machine, a peer worker or the switch descheduled, not the loss of
        a whole window: resending every expired chunk then costs the switch a
        window of packets per worker for nothing. So in silence only `probes`
        chunks go out, oldest first (the others wait for the first one's
        backed-off timer, no retry counted: a dead switch is still given up on
        after max_retries of its resends); each answer to a resent chunk doubles
        the budget (a real burst loss is recovered in about log2(window)
        rounds), a clean answer resets it to 1."""
        dl = self.dl
        out = []
        silent = []
        last_rx, rack, order = self.last_rx, self.rack, self.order
        for s in np.flatnonzero(dl <= now).tolist():
            # Lost if a chunk put on the wire after it was answered (RACK: the switch
            # and the links keep each worker's order, so it cannot merely be queued).
            # Else, if nothing arrived for its timeout (a stall, a lost tail): probe.
            # Else results are still flowing and it is queued behind them (a slow
            # switch): re-arm, no resend, no retry counted.
            rto = float(self.rto[s])
            if rack > order.item(s):
                out.append(s)
            elif last_rx is None or now - last_rx >= rto:
                silent.append(s)
            else:
                dl[s] = now + max(self.rto_cache, rto / 2)
        # oldest first: in sequence order, or by first send time without seq_age
        oldest = ((lambda s: (seq_age.item(s), s)) if seq_age is not None
                  else (lambda s: (self.first.item(s), s)))
        if silent and now < self.probe_at:           # this silence already got its probes
            for s in silent:
                dl[s] = self.probe_at
        elif silent:
            # the oldest chunks probe (always the same first one while the silence
            # lasts: its retries count towards max_retries, as TCP's RTO resends the
            # first unacked segment); the rest wait for the probe's backed-off timer.
            # Oldest in sequence order: the peers' held chunks wait for the oldest
            # ones (hosts/ina/cwnd.py); a whole window sent at one instant has equal
            # send times, and probing a newer chunk then deadlocked the job.
            silent.sort(key=oldest)
            self.probe_at = now + min(float(self.rto[silent[0]]) * self.backoff,
                                      self.max_timeout_s)
            for s in silent[self.probes:]:
                dl[s] = self.probe_at
            self.silent += min(len(silent), self.probes)
            out = sorted(out + silent[:self.probes])
        if limit is not None and len(out) > limit:
            order = sorted(out, key=oldest)
            for s in order[limit:]:
                dl[s] = now + self.rto_cache
            out = sorted(order[:limit])
        return out

    def answered_resent(self, k: int = 1) -> None:
        """k answers to resent chunks arrived: the network delivers, widen the
        silence budget."""
        self.probes = min(self.window, self.probes << k if k < 16 else self.window)
        self.probe_at = -_INF

    def answered_clean(self) -> None:
        self.probes = 1
        self.probe_at = -_INF

    def resent(self, s: int, now: float) -> None:
        """Slot s's head is resent now: count the retry, back off."""
        self.retries[s] += 1
        self.rto[s] = rto = min(float(self.rto[s]) * self.backoff, self.max_timeout_s)
        self.dl[s] = now + rto
        self.order[s] = self.sends
        self.sends += 1

    def refresh_next(self) -> float:
        self.next_dl = d = float(self.dl.min())
        return d


def timeout_error(*, job_id: int, worker_id: int, n_workers: int, window: int, slot: int,
                  seq: int, retries: int, elapsed: float, now: float, last_rx: float | None,
                  io: Any, timers: RetransmitTimers) -> InaTimeoutError:
    """The error a chunk given up on raises: what the switch seems to be missing
    (asked through io.slot_state where the io can), and what to check."""
    n = n_workers
    ver = (seq // window) % 2
    missing: int | None = None
    present: list[int] | None = None
    state = None
    probe = getattr(io, "slot_state", None)
    if callable(probe):
        try:
            state = probe(job_id, slot, ver)
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
                 "reachable?)" if last_rx is None
                 else f"the last result arrived {now - last_rx:.3f} s ago")
        what = (f"the switch answers any retransmission once a slot is complete, so it seems "
                f"to miss 1..{n - 1} other workers' contributions, or never got ours; {since}")
    return InaTimeoutError(
        f"INA job {job_id} worker {worker_id}: no result for seq {seq} (slot "
        f"{slot}, slot_ver {ver}) after {retries} retransmissions over "
        f"{elapsed:.3f} s (timeout {timers.timeout_s} s, backoff x{timers.backoff}, "
        f"cap {timers.max_timeout_s} s); "
        f"{what}. Check that every worker runs, submits the same vectors, uses window "
        f"{window} <= the job's slot_count, and that the switch is up.",
        job_id=job_id, slot=slot, slot_ver=ver, seq=seq, retries=retries,
        elapsed_s=elapsed, missing=missing, present_workers=present)
