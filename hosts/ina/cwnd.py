"""`CongestionWindow`: how many of its chunks an INA worker keeps on the wire, at
most the protocol window (the job's slots) and fewer when the switch drops bursts.

Why: a switch slower than the links loses the excess of a burst before its
pipeline. BMv2 on this machine (see docs/real-rack.md, BMv2 section) serves a few
thousand packets per second; a 16384-value allreduce puts 256 chunks x 4 workers
on the wire at once, about half never reach the P4 ingress, and every resend round
is another such burst: 1.6 s instead of tens of ms. The soft switch keeps up, so
there the window stays open.

Rounds: a round ends when as many chunks as the window held at its start were
answered or found lost (first resend). A round with no loss grows the window
(doubling below ssthresh, then +1); a round that lost more than LOSS_CUT of its
chunks, and at least MIN_LOSSES, halves it. Random link loss (the scenarios' 1 % and 5 %) stays below
LOSS_CUT, so it costs resends only, never window; a switch that drops half a burst
halves the window until bursts fit. The window never goes below MIN_CWND.
"""
from __future__ import annotations

INITIAL_CWND = 32     # first round: 4 workers x 32 chunks fit BMv2's socket buffers
MIN_CWND = 4
LOSS_CUT = 1 / 8      # lost fraction of a round above which the window halves
MIN_LOSSES = 2        # and at least this many: one random loss in a small round is no signal


class CongestionWindow:
    """adaptive=False: the whole protocol window, always (no holds, no cuts): on
    a switch that keeps up with its links (the soft switch, Tofino) adapting
    only costs, since answers completing out of order look like losses."""

    def __init__(self, window: int, initial: int = INITIAL_CWND, adaptive: bool = True):
        self.max = int(window)
        self.adaptive = adaptive
        self.cwnd = float(min(self.max, initial if adaptive else self.max))
        self.ssthresh = float(self.max)
        self.cuts = 0                     # rounds that halved the window (stats)
        self._answered = self._lost = 0
        self._round = self.cwnd

    def room(self, in_flight: int) -> int:
        """Chunks that may go on the wire now besides the `in_flight` ones."""
        return int(self.cwnd) - in_flight

    def resend_cap(self) -> int | None:
        """Most chunks one timer pass may resend; None: no cap (not adaptive).

        Why: on BMv2 under CPU load two workers fell behind, the other two had
        a whole window out; every answer to one of their resent chunks widened
        their silence budget (hosts/ina/timers.py), and each later silence resent
        the whole window at once (about 200 frames per round, every round, for
        27 s): the burst overflowed the switch's input again and lost the slow
        workers' contributions, so they never caught up and the job timed out
        (ina/loss.yaml at 0 % loss on BMv2). Resends, like new chunks, stay
        within the window; the rest wait a base timeout."""
        if not self.adaptive:
            return None
        return max(MIN_CWND, int(self.cwnd))

    def on_answers(self, n: int) -> None:
        """n chunks answered without a resend."""
        if not self.adaptive:
            return
        self._answered += n
        self._end_round()

    def on_loss(self) -> None:
        """A chunk is resent for the first time (lost, or so late it looks lost)."""
        if not self.adaptive:
            return
        self._lost += 1
        self._end_round()

    def _end_round(self) -> None:
        done = self._answered + self._lost
        if done < self._round:
            return
        if self._lost > LOSS_CUT * done and self._lost >= MIN_LOSSES:
            self.cwnd = self.ssthresh = max(float(MIN_CWND), self.cwnd / 2)
            self.cuts += 1
        elif self.cwnd < self.ssthresh:
            self.cwnd = min(self.ssthresh, self.cwnd * 2, float(self.max))
        else:
            self.cwnd = min(float(self.max), self.cwnd + 1)
        self._answered = self._lost = 0
        self._round = self.cwnd
