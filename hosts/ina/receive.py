"""The INA client's result intake: read results (one burst per system call
where the io has `recv_block`), check them against the window, and apply them:
RTT samples, the result values into the handle, the slot's next chunk out.

A mixin of InaClient (hosts/ina/transport.py), apart because it is the
per-packet hot path: small bursts go one packet at a time (struct), bursts of
_VEC_MIN or more are parsed and applied with numpy at once.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.ina.chunks import _I32, LANES, RX_DTYPE, RX_STRIDE, Seg
from hosts.ina.handles import InaError
from hosts.ina.hostloop import OTHER
from testbed import wire

_H = wire.HEADER_STRUCT
DRAIN = 256          # packets handled per receive burst before timers are checked
_VEC_MIN = 6          # results in one burst from which the vectorized path is used


def _records(bufs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Datagrams -> (RX_DTYPE records, lengths), as recv_block hands them."""
    n = len(bufs)
    rec = np.zeros(n, RX_DTYPE)
    raw = rec.view(np.uint8).reshape(n, RX_STRIDE)
    for i, b in enumerate(bufs):
        m = min(len(b), RX_STRIDE)
        raw[i, :m] = np.frombuffer(b, np.uint8, m)
    return rec, np.fromiter(map(len, bufs), np.int64, n)


class ResultIntake:
    def _receive(self, timeout: float, keep: bool = False) -> int:
        """Wait up to `timeout` for results, then take in up to DRAIN of them.
        keep (wait's call): the compiled loop on a socket goes on taking bursts
        in until `timeout` passes or a timer is due (hosts/ina/hostloop.py)."""
        lp = self._loop
        hot = lp is not None and self._hot is not None     # the compiled loop may take bursts
        if hot and lp.fd >= 0:
            return self._receive_loop(lp, timeout, keep)
        n = 0
        rb = self._rx_block
        if rb is not None:
            while n < DRAIN:
                rec, lens = rb(timeout if n == 0 else 0.0)
                k = len(lens)
                if not k:
                    break
                n += k
                if not (hot and self._loop_burst(lp, rec, lens, k)):
                    self._on_burst(rec, lens, k)
            if self._held.any():
                self._release(self._clock())
            return n
        recv = self.io.recv
        bufs = []
        b = recv(timeout)
        while b is not None:
            bufs.append(b)
            if len(bufs) >= DRAIN:
                break
            b = recv(0.0)
        n = len(bufs)
        recs = _records(bufs) if n >= _VEC_MIN or (hot and n) else None
        if not (hot and recs is not None and self._loop_burst(lp, *recs, n)):
            if n < _VEC_MIN:
                for b in bufs:
                    self._on_packet(b)
            else:
                self._on_block(*recs)
            self.timers.rack_timers()
        if self._held.any():
            self._release(self._clock())
        return n

    def _on_burst(self, rec: np.ndarray, lens: np.ndarray, k: int) -> None:
        """A received burst, the Python path: one datagram at a time when small."""
        if k < _VEC_MIN:
            for i in range(k):
                self._on_packet(rec[i:i + 1].tobytes()[:int(lens[i])])
        else:
            self._on_block(rec, lens)
        self.timers.rack_timers()

    # -- the compiled loop (hosts/ina/hostloop.py) ------------------------------------------
    def _loop_burst(self, lp, rec: np.ndarray, lens: np.ndarray, k: int) -> bool:
        """One burst through Loop.burst, its sends through the io; False: not the
        hot run's, left for the Python path (nothing changed)."""
        seg = self._hot
        h = seg.handle
        lp.bind(seg)
        lp.push(h)
        try:
            st, ns = lp.c.burst(rec, np.ascontiguousarray(lens, np.int64), k, _VEC_MIN, lp.clock,
                                self.stats.latencies_s)
        finally:
            lp.pull(h, self.stats)
        if st:
            return False
        if ns:
            if self._tx_many is not None:
                self._tx_many(seg.addr, lp.txo[:ns], lp.txl[:ns])
            else:
                send, buf = self.io.send, seg.buf
                for o, ln in zip(lp.txo[:ns].tolist(), lp.txl[:ns].tolist()):
                    send(buf[o:o + ln].tobytes())
        return True

    def _receive_loop(self, lp, timeout: float, keep: bool) -> int:
        """Loop.run on the socket; a burst that is not the hot run's goes through
        the Python path, then back to the caller (it may have completed a handle)."""
        h = self._hot.handle
        lp.bind(self._hot)
        lp.push(h)
        try:
            st, k, _ = lp.c.run(time.monotonic() + timeout, keep, DRAIN if not keep else 16 * DRAIN,
                                _VEC_MIN, self.stats.latencies_s, lp.coalesce, lp.gso)
        finally:
            errors = lp.pull(h, self.stats)
            if errors:
                self.io.count_send_errors(errors)
        lp.returns[st] += 1
        if st == OTHER:
            self._on_burst(lp.rec, lp.lens[:k], k)
            if self._held.any():
                self._release(self._clock())
        return k

    def _on_packet(self, buf: bytes) -> None:
        if len(buf) < wire.INA_HLEN:
            self.stats.foreign_packets += 1
            return
        ver_, op, flags, job, slot, _sver, _wid, seq, count, exp, _ = _H.unpack_from(buf, 0)
        if ver_ != wire.INA_VERSION or not flags & wire.FLAG_RESULT or job != self.job_id \
                or slot >= self.window or count > LANES or len(buf) < wire.INA_HLEN + 4 * count:
            self.stats.foreign_packets += 1
            return
        win = self.win
        if win.hseq.item(slot) != seq:
            self.stats.duplicates_ignored += 1
            return
        seg = win.slots[slot][0]
        ci = win.hci.item(slot)
        want = seg.count(ci)
        if op != seg.op or count != want:
            self._mismatch(seq, slot, op, count, seg.op, want)
        now = self._clock()
        self.timers.last_rx = now
        win.hseq[slot] = -1
        st = self.stats
        st.results += 1
        st.latencies_s.append(self.timers.answered_one(slot, now))
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
        if self._hp is not None:
            self._on_block_compiled(rec, lens)
            return
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
        m = self.win.hseq[ss] == hd["seq"][idx]
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
        self._accept_burst(ss, idx, rec)

    def _on_block_compiled(self, rec: np.ndarray, lens: np.ndarray) -> None:
        """_on_block's checks in one C loop (hosts/ina/_hostpath.c accept_block)."""
        n = len(lens)
        ss = np.empty(n, np.int64)
        idx = np.empty(n, np.int64)
        k, foreign, dups = self._hp.accept_block(rec, np.ascontiguousarray(lens, np.int64), n,
                                                 self.job_id, self.window, self.win.hseq, ss, idx)
        st = self.stats
        st.foreign_packets += foreign
        st.duplicates_ignored += dups
        if k:
            self._accept_burst(ss[:k], idx[:k], rec)

    def _accept_burst(self, ss: np.ndarray, idx: np.ndarray, rec: np.ndarray) -> None:
        """Accepted results (slot ss[j] answered by row idx[j]), grouped by run."""
        now = self._clock()
        self.timers.last_rx = now
        slots = self.win.slots
        tags = self.win.head_tag[ss]
        if tags[0] == tags[-1] and (len(tags) < 3 or (tags == tags[0]).all()):
            self._accept_many(slots[int(ss[0])][0], ss, idx, rec, now)     # one run: most bursts
            return
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

    def _accept_many(self, seg: Seg, ss: np.ndarray, rows: np.ndarray,
                     rec: np.ndarray, now: float) -> None:
        """Results for the heads of slots ss, all chunks of run `seg` (rows of rec)."""
        hd = rec["h"]
        win = self.win
        cis = win.hci[ss]
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
        st.latencies_s.extend(self.timers.answered_many(ss, now).tolist())
        win.hseq[ss] = -1
        h = seg.handle
        if seg.is_exp:                                   # n == 1: one slot
            self._advance(int(ss[0]), now)
            self._on_scale(h, int(rec["v"][rows[0], 0]), now)
            return
        if self._hp is not None:
            self._hp.scatter(rec, np.ascontiguousarray(rows, np.int64), h.ints2d, seg.c0 + cis)
        else:
            h.ints2d[seg.c0 + cis] = rec["v"][rows]
        e = int(hd["exponent"][rows].max())
        if e > h.max_exp:
            h.max_exp = e
        h.remaining -= k
        nxt = cis + self.window
        stay = nxt < seg.n
        if stay.all():
            win.hci[ss] = nxt
            self._start_many(seg, ss, nxt, now)
        else:
            if stay.any():
                s2, n2 = ss[stay], nxt[stay]
                win.hci[s2] = n2
                self._start_many(seg, s2, n2, now)
            for s in ss[~stay].tolist():
                self._advance(s, now)
        if h.remaining == 0:
            self._finish(h, now)

    def _mismatch(self, seq: int, slot: int, op: int, count: int, my_op: int,
                  my_count: int):
        self._fatal = InaError(
            f"INA job {self.job_id}: result for seq {seq} (slot {slot}) has op {op}, count "
            f"{count} but this worker sent op {my_op}, count {my_count}: the workers do not "
            f"submit the same sequence of vectors (sizes/ops must match in order)")
        raise self._fatal
