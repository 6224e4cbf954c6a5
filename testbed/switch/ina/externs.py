"""Registers and counters: the P4 externs, as numpy arrays the pipeline owns.

A `Register` is a flat view (P4 index order) over an array the pipeline also
uses in its natural shape, so the data plane works on `bitmap[slot, ver]` while
the control plane reads `registers["Aggregator.worker_bitmap"].read(slot*2+ver)`.
Values read and written through the control API are the P4 bit patterns
(unsigned ints of `bitwidth` bits), whatever numpy dtype stores them.
"""
from __future__ import annotations

import numpy as np


class Register:
    def __init__(self, name: str, array: np.ndarray, bitwidth: int):
        self.name = name
        self.bitwidth = bitwidth
        self.array = array.reshape(-1)          # a view: shares memory with the pipeline
        assert np.shares_memory(self.array, array)
        self._mask = (1 << bitwidth) - 1
        # Same-width unsigned view gives the raw bits of signed storage (int8/int32).
        self._bits = self.array.view(f"u{self.array.dtype.itemsize}")
        # Bumped by every write and reset through this object: what the control plane
        # changed, for readers that cache something derived from the cells.
        self.version = 0

    @property
    def size(self) -> int:
        return self.array.size

    def read(self, index: int) -> int:
        return int(self._bits[index]) & self._mask

    def write(self, index: int, value: int) -> None:
        self._bits[index] = int(value) & self._mask
        self.version += 1

    def read_all(self) -> list[int]:
        return [int(x) & self._mask for x in self._bits]

    def reset(self, start: int = 0, stop: int | None = None) -> None:
        self.array[start:stop] = 0
        self.version += 1


class Counter:
    """A packet counter array, like `counter(size, CounterType.packets)`."""

    def __init__(self, name: str, size: int):
        self.name = name
        self.packets = np.zeros(size, dtype=np.int64)

    @property
    def size(self) -> int:
        return self.packets.size

    def count(self, index: int, n: int = 1) -> None:
        self.packets[index] += n

    def count_many(self, indices: np.ndarray) -> None:
        """One increment per element of `indices` (vectorized)."""
        if len(indices):
            self.packets += np.bincount(indices, minlength=self.packets.size)[: self.packets.size]

    def read(self, index: int) -> int:
        return int(self.packets[index])

    def write(self, index: int, packets: int) -> None:
        self.packets[index] = packets

    def total(self) -> int:
        return int(self.packets.sum())

    def snapshot(self) -> dict:
        nz = np.flatnonzero(self.packets)
        return {"total": self.total(), "by_index": {int(i): int(self.packets[i]) for i in nz}}

    def reset(self) -> None:
        self.packets[:] = 0
