"""`DropSimulator`: simulated loss of contributions on the way into the switch,
per ingress port (SwitchML's drop simulator, ingress side).

`DropSimulator.drop_probability[port]` holds a bit<32> threshold: a packet is
dropped when a uniform 32-bit random number is below it, i.e. with probability
threshold / 2^32. `DropSimulator.dropped[port]` counts the drops. Draws happen
only for ports with a non-zero threshold, in arrival order, one double each, so
the batched and the one-by-one paths make the same decisions for the same seed.
"""
from __future__ import annotations

import numpy as np

from .externs import Counter, Register

NUM_PORTS = 512
_TWO32 = 4294967296.0


class DropSimulator:
    PROBABILITY = "DropSimulator.drop_probability"
    DROPPED = "DropSimulator.dropped"

    def __init__(self, seed: int | None = 0):
        self.threshold = np.zeros(NUM_PORTS, dtype=np.uint32)
        self.drop_probability = Register(self.PROBABILITY, self.threshold, 32)
        self.dropped = Counter(self.DROPPED, NUM_PORTS)
        self.rng = np.random.default_rng(seed)

    def set_probability(self, port: int, p: float) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"drop probability for port {port}: {p} not in [0, 1]")
        self.threshold[port] = min(int(round(p * _TWO32)), 0xFFFFFFFF)

    def probability(self, port: int) -> float:
        return float(self.threshold[port]) / _TWO32

    def armed(self) -> bool:
        return bool(self.threshold.any())

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
