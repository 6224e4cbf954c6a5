"""time_scale auto for a ShadowSync trainer: the ONE place its processes touch
calibration (hosts.common.calibration.Calibrator decides; nothing is timed here
in a way of its own).

Every trainer's Hogwild workers (and, S-*, its shadow) run `rounds` x
`iterations` calibration iterations of their real work before the measured run,
all processes at once, so the load on the shared cores is the run's: the compute
ratio (real CPU time / modeled device time of the forward/backward steps) is
taken per worker over the round and the trainer's is the largest (its most
loaded worker). Worker 0's LOOKUPs are the network ops, each against its
hardware time (`lookup_hw_s`: the workload evaluates the network model, which
hosts cannot import: the ids' and the rows' message times). At the end of a
round worker 0 agrees with the other trainers (AGREE on embedding PS 0: a SUM of
hosts.common.calibration.encode_messages vectors, each lookup a round trip of its
own; trainers without an allreduce have no other channel),
Calibrator.after_round gives the next TDF (and, on the soft switch, dilates the
network: rank 0 asks), and every process of the trainer reads it from shared
memory.

A round whose TDF would make one iteration on the modeled hardware (`Round`'s
step_hw_s) longer than the point's deadline allows (the calibration's
`iteration_wall_s`) is refused (hosts.common.calibration.refuse_if_crawling):
worker 0 raises CalibrationRefused and `Shared.refuse` releases the trainer's
other workers from the round's barrier at once. Every trainer decides from the
same agreed numbers and constants, so all of them refuse the same round.

After the last round the trace is the measured run only: worker 0 resets its
trace and tells the servers MEASURE (they trace its messages from then on); the
shadow does the same when every trainer is measuring (MA/BMUF: a flag in its
allreduce, so all shadows switch at the same allreduce and their groups' seqs
agree; EASGD: when its own trainer is).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hosts.common import calibration as cal


class Shared:
    """The trainer's calibration state in shared memory (created before the fork)."""

    def __init__(self, ctx, cc: dict | None, workers: int, start_tdf: float):
        self.cc = cc
        self.tdf = ctx.Value("d", float(start_tdf), lock=False)
        self.ratio = ctx.Array("d", workers, lock=False)
        self.barrier = ctx.Barrier(workers) if cc else None
        self.measuring = ctx.Value("i", 0 if cc else 1, lock=False)
        self.refused = ctx.Value("i", 0, lock=False)     # worker 0's calibration was refused
        self.failed = ctx.Value("i", -1)                 # the first worker that failed, -1 none

    def fail(self, worker: int, *barriers) -> bool:
        """A worker failed: the others, waiting for it at a barrier (the calibration
        round's, or `barriers`: the foreground sync's), raise BrokenBarrierError now
        rather than after timeout_s, and read `failed` to say why. True: it was the
        first to fail (its error is the cause)."""
        with self.failed.get_lock():
            first = self.failed.value < 0
            if first:
                self.failed.value = worker
        for b in (self.barrier, *barriers):
            if b is not None:
                b.abort()
        return first

    def refuse(self) -> None:
        """Worker 0 refused the calibration: the other workers, waiting for it at the
        round's barrier, raise BrokenBarrierError now rather than after timeout_s, and
        read `refused` to say why."""
        self.refused.value = 1
        self.fail(0)

    @property
    def iterations(self) -> int:
        """Calibration iterations per worker before the measured run."""
        return self.cc["rounds"] * self.cc["iterations"] if self.cc else 0

    def round_end(self, it: int) -> bool:
        """Iteration `it` (0-based, calibration ones first) ends a calibration round."""
        return bool(self.cc) and it < self.iterations and (it + 1) % self.cc["iterations"] == 0

    def last_round(self, it: int) -> bool:
        return bool(self.cc) and it == self.iterations - 1


class Round:
    """Worker 0's side: one Calibrator for the whole calibration (module docstring)."""

    def __init__(self, shared: Shared, nd: dict | None, rank: int, trainers: int, compute_hw_s: float):
        self.shared, self.rank, self.trainers = shared, rank, trainers
        self.lookup_hw = [float(x) for x in shared.cc["lookup_hw_s"]]
        # One iteration on the modeled hardware: the step's compute (compute_hw_s: the
        # device model's, without a straggler's slowdown, so the same on every trainer)
        # and a LOOKUP of every embedding PS, one after the other.
        self.step_hw_s = compute_hw_s + sum(self.lookup_hw)
        self.c = cal.Calibrator(0.0, shared.tdf.value, nd, rank,
                                iteration_wall_s=shared.cc["iteration_wall_s"])
        self.c.start()

    def decide(self, spans: list[tuple[float, float]], agree) -> float:
        """Agree on and apply the next TDF from this round's lookups and the workers'
        compute ratios (shared.ratio); returns it (also in shared.tdf)."""
        spans = spans[:cal.MAX_OPS]
        hw = [self.lookup_hw[i % len(self.lookup_hw)] for i in range(len(spans))]
        ratio = max(self.shared.ratio) or None
        # Each trainer's lookups are its own round trips, not one collective across the
        # trainers: their k-th lookups are not aligned in time, so the collective
        # statistic (decide: last submit to completion) clipped most of them to zero and
        # kept the first lookup of a round, a stall at times (TDF 590,000 in one CI run).
        durations = [b - a for a, b in spans]
        summed = agree(cal.encode_messages(durations, ratio, self.rank, self.trainers))
        measured, why = cal.decide_messages(summed, len(spans), self.trainers, hw or 0.0,
                                            fallback=self.shared.tdf.value)
        # The delay line's compensation is per crossing; a LOOKUP crosses it twice (the
        # ids, then the rows): compensating a whole round trip per message made every
        # message 0.6x its dilated time (measured on the 2-trainer quick run).
        self.c.hw_op_s = float(np.median(hw)) / 2 if hw else 0.0
        try:
            tdf = self.c.after_round(measured, why, step_hw_s=self.step_hw_s, ops=len(spans),
                                     my_compute_ratio=ratio, op_hw_p50_s=self.c.hw_op_s or None)
        except cal.CalibrationRefused:
            self.shared.refuse()
            raise
        self.shared.tdf.value = tdf
        return tdf

    def finish(self, host: str) -> dict[str, Any]:
        self.c.finish()
        return self.c.record(host)
