"""Simulated loss in both directions of a switch port, as p4/ina.p4's two
instances of `control DropSimulator` (SwitchML's drop simulator):

- `DropSimulator` (Ingress): contributions on their way in, per ingress port.
- `EgressDropSimulator` (Egress): results made by the switch (multicast and
  unicast replies) on their way out, per egress port. Frames the switch only
  forwards are not impaired by either.

`<name>.drop_probability[port]` holds a bit<32> threshold: a packet is
dropped when a uniform 32-bit random number is below it, i.e. with probability
threshold / 2^32. `<name>.dropped[port]` counts the drops. Draws happen only
for ports with a non-zero threshold, in arrival order (results: in the order
they leave), one double each, so the batched, the one-by-one and the compiled
paths make the same decisions for the same seed. Each direction has its own
random stream, so the two never shift each other's draws.
"""
from __future__ import annotations

import numpy as np

from .externs import Counter, Register

NUM_PORTS = 512
_TWO32 = 4294967296.0


class DropSimulator:
    PROBABILITY = "DropSimulator.drop_probability"
    DROPPED = "DropSimulator.dropped"
    STREAM = 0            # which random stream of the switch's seed this direction draws from

    def __init__(self, seed: int | None = 0):
        self.threshold = np.zeros(NUM_PORTS, dtype=np.uint32)
        self.drop_probability = Register(self.PROBABILITY, self.threshold, 32)
        self.dropped = Counter(self.DROPPED, NUM_PORTS)
        entropy = seed if seed is None or not self.STREAM else [seed, self.STREAM]
        self.rng = np.random.default_rng(entropy)
        self._armed_at, self._armed = -1, False     # (register version, armed then)

    def set_probability(self, port: int, p: float) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"drop probability for port {port}: {p} not in [0, 1]")
        self.drop_probability.write(port, min(int(round(p * _TWO32)), 0xFFFFFFFF))

    def probability(self, port: int) -> float:
        return float(self.threshold[port]) / _TWO32

    def armed(self) -> bool:
        # Asked twice per switch loop pass: counted again only after a write to the
        # register (its version), the thresholds' only writer.
        v = self.drop_probability.version
        if v != self._armed_at:
            self._armed, self._armed_at = bool(np.count_nonzero(self.threshold)), v
        return self._armed

    def decide(self, ports: np.ndarray) -> np.ndarray:
        """Drop mask for packets arriving on `ports` (in arrival order)."""
        thr = self.threshold[ports]
        drop = np.zeros(len(ports), dtype=bool)
        armed = np.flatnonzero(thr)
        if len(armed):
            r = np.floor(self.rng.random(len(armed)) * _TWO32)
            drop[armed] = r < thr[armed]
            self.dropped.count_many(ports[drop])
        return drop

    def decide_one(self, port: int) -> bool:
        thr = int(self.threshold[port])
        if thr == 0:
            return False
        if int(self.rng.random() * _TWO32) < thr:
            self.dropped.count(port)
            return True
        return False


class EgressDropSimulator(DropSimulator):
    PROBABILITY = "EgressDropSimulator.drop_probability"
    DROPPED = "EgressDropSimulator.dropped"
    STREAM = 1

    def filter(self, out: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """The results of `out` ([(egress port, frame)], in leaving order) that
        survive; one draw per result on an armed port."""
        if not out or not self.armed():
            return out
        ports = np.fromiter((p for p, _ in out), np.int64, len(out))
        drop = self.decide(ports)
        return [o for o, d in zip(out, drop.tolist()) if not d]
