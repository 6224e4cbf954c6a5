"""Link impairments applied by the soft switch: loss, duplication, delay, jitter,
reordering. Pure logic (no sockets, no clock): the caller passes `now`.

The kernel here has no sch_netem, so the switch is where impairments happen.
Semantics follow netem where it is cheap to do so:
- loss: each frame is dropped with probability loss_pct/100 (decided first).
- duplication: each surviving frame is sent twice with probability
  duplicate_pct/100; the copy gets its own delay/jitter draw.
- delay + jitter: due = now + delay + U(-jitter, +jitter), clipped at `now`
  (netem's default jitter distribution is uniform as well). Jitter reorders
  frames naturally, as in netem.
- reordering: with probability reorder_pct/100 a frame "jumps the queue": it is
  sent immediately while the others wait `delay` (netem's `reorder`). With
  delay 0 there is no queue to jump, so the chosen frame is instead held back
  by `reorder_hold_ms` and later frames overtake it.

Random draws are made per batch with numpy (one call per parameter), so the
cost per frame is tiny, and the same seed with the same input gives the same
decisions.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

IMPAIR_KEYS = ("loss_pct", "delay_ms", "jitter_ms", "duplicate_pct", "reorder_pct")


@dataclass(frozen=True)
class Impair:
    """One direction of one port, as in the switch config."""
    loss_pct: float = 0.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0

    @classmethod
    def from_dict(cls, d: dict | None, where: str = "impairment") -> "Impair":
        d = dict(d or {})
        unknown = sorted(set(d) - set(IMPAIR_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {list(IMPAIR_KEYS)}")
        vals: dict[str, float] = {}
        for f in fields(cls):
            v = d.get(f.name, 0.0)
            if v is None:
                v = 0.0
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{f.name}: {v!r} is not a number") from None
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{where}.{f.name}: {v} must be a finite number >= 0")
            if f.name.endswith("_pct") and v > 100:
                raise ValueError(f"{where}.{f.name}: {v} is a percentage, must be <= 100")
            vals[f.name] = v
        return cls(**vals)

    @property
    def active(self) -> bool:
        return any(getattr(self, k) > 0 for k in IMPAIR_KEYS)


class PortImpairment:
    """Impairments of one port in one direction, with their counters."""

    def __init__(self, loss_pct: float = 0.0, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                 duplicate_pct: float = 0.0, reorder_pct: float = 0.0,
                 rng: np.random.Generator | None = None, reorder_hold_ms: float = 1.0):
        cfg = Impair.from_dict(dict(loss_pct=loss_pct, delay_ms=delay_ms, jitter_ms=jitter_ms,
                                    duplicate_pct=duplicate_pct, reorder_pct=reorder_pct))
        self.config = cfg
        self.rng = rng if rng is not None else np.random.default_rng()
        self._loss = cfg.loss_pct / 100.0
        self._dup = cfg.duplicate_pct / 100.0
        self._reorder = cfg.reorder_pct / 100.0
        self._delay = cfg.delay_ms / 1000.0
        self._jitter = cfg.jitter_ms / 1000.0
        self._hold = float(reorder_hold_ms) / 1000.0
        self.active = cfg.active
        # Only delay/jitter/reorder can push a frame into the future.
        self.timed = self._delay > 0 or self._jitter > 0 or self._reorder > 0
        # Loss alone: one uniform per frame and nothing else, which the compiled path
        # can take from blocks drawn here (reserve/give_back) without changing the stream.
        self.loss_only = self._loss > 0 and self._dup == 0 and not self.timed
        self.loss_probability = self._loss
        self._pending = np.empty(0)      # uniforms drawn but not yet used (given back)
        self.seen = self.dropped = self.duplicated = self.delayed = self.reordered = 0

    @classmethod
    def from_config(cls, impair: Impair | dict | None, rng: np.random.Generator,
                    **kw: Any) -> "PortImpairment":
        if not isinstance(impair, Impair):
            impair = Impair.from_dict(impair)
        return cls(**{k: getattr(impair, k) for k in IMPAIR_KEYS}, rng=rng, **kw)

    def decide(self, n: int, now: float) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Decisions for a batch of n frames.

        Returns (idx, due): idx = indices of the frames to emit, in order, a
        duplicate right after its original (None = all n frames, unchanged);
        due = send time per emitted frame (None = all now).
        """
        self.seen += n
        if not self.active or n == 0:
            return None, None
        rng = self.rng
        idx = None
        if self._loss > 0:
            keep = self._uniforms(n) >= self._loss
            idx = np.flatnonzero(keep)
            self.dropped += n - len(idx)
        if self._dup > 0:
            if idx is None:
                idx = np.arange(n)
            dup = rng.random(len(idx)) < self._dup
            ndup = int(dup.sum())
            if ndup:
                idx = np.repeat(idx, 1 + dup.astype(np.intp))
                self.duplicated += ndup
        if not self.timed:
            return idx, None
        m = n if idx is None else len(idx)
        due = np.full(m, now + self._delay)
        if self._jitter > 0:
            due += rng.uniform(-self._jitter, self._jitter, m)
            np.maximum(due, now, out=due)
        if self._reorder > 0:
            r = rng.random(m) < self._reorder
            nr = int(r.sum())
            if nr:
                # With a delay the chosen frames jump the queue; without one they are held back.
                due[r] = now if self._delay > 0 else now + self._hold
                self.reordered += nr
        self.delayed += int((due > now).sum())
        return idx, due

    def _uniforms(self, n: int) -> np.ndarray:
        """The stream's next n uniforms: those given back first, then fresh draws."""
        if not self._pending.size:
            return self.rng.random(n)
        take, self._pending = self._pending[:n], self._pending[n:]
        return take if take.size == n else np.concatenate([take, self.rng.random(n - take.size)])

    def reserve(self, n: int) -> np.ndarray:
        """The next n uniforms of the loss stream, for the compiled path (loss only:
        there every uniform decides one frame, in order). What it does not use comes
        back through give_back before this object decides again."""
        if not self.loss_only:
            raise ValueError("reserve: only a loss-only impairment draws one uniform per frame")
        return self._uniforms(n)

    def give_back(self, unused: np.ndarray) -> None:
        """The tail of a reserved block that no frame used: next in the stream."""
        if unused.size:
            self._pending = np.concatenate([unused, self._pending])

    def count_compiled(self, seen: int, dropped: int) -> None:
        """Frames the compiled path decided (its counters, folded in)."""
        self.seen += seen
        self.dropped += dropped

    def apply(self, frames: list[bytes], now: float) -> list[tuple[float, bytes]]:
        """Frames -> [(due_time, frame)] (dropped frames absent, duplicates present)."""
        idx, due = self.decide(len(frames), now)
        sel = frames if idx is None else [frames[i] for i in idx.tolist()]
        if due is None:
            return [(now, f) for f in sel]
        return list(zip(due.tolist(), sel))

    def split(self, frames: list[bytes], now: float) -> tuple[list[bytes], list[tuple[float, bytes]]]:
        """Hot-path form of apply(): (frames to send now, [(due, frame)] for later)."""
        idx, due = self.decide(len(frames), now)
        sel = frames if idx is None else [frames[i] for i in idx.tolist()]
        if due is None:
            return sel, []
        later = due > now
        if not later.any():
            return sel, []
        lat = later.tolist()
        now_frames = [f for f, l in zip(sel, lat) if not l]
        due_l = due.tolist()
        later_items = [(d, f) for d, f, l in zip(due_l, sel, lat) if l]
        return now_frames, later_items

    def counters(self) -> dict:
        return {"seen": self.seen, "dropped": self.dropped, "duplicated": self.duplicated,
                "delayed": self.delayed, "reordered": self.reordered}


class DelayQueue:
    """Frames waiting for their due time: a heap keyed by (due, arrival order),
    so frames with equal due times leave in the order they came in."""

    def __init__(self) -> None:
        # (due, arrival, item); read it only to ask "anything queued?" (`if q.heap`:
        # the switch loop asks several times a pass, and a method call costs more).
        self.heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, due: float, item: Any) -> None:
        heapq.heappush(self.heap, (due, next(self._seq), item))

    def push_many(self, items: list[tuple[float, Any]]) -> None:
        push, heap, seq = heapq.heappush, self.heap, self._seq
        for due, item in items:
            push(heap, (due, next(seq), item))

    def next_due(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def pop_due(self, now: float) -> list[Any]:
        """All items with due <= now, in (due, arrival) order."""
        heap = self.heap
        out = []
        pop = heapq.heappop
        while heap and heap[0][0] <= now:
            out.append(pop(heap)[2])
        return out

    def drain(self) -> list[Any]:
        """Everything still queued (shutdown)."""
        out = [pop_item[2] for pop_item in sorted(self.heap)]
        self.heap.clear()
        return out
