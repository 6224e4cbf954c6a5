"""How a sweep point can end other than with results: skipped or failed.

Lowest layer on purpose: the runner raises and records these, and workload
runtimes (below the runner) raise them too, so neither imports the other.
"""
from __future__ import annotations


class SkipPoint(Exception):
    """A point that cannot be run as specified here (reason recorded, loudly)."""


class PointFailed(Exception):
    """A point that ran and failed; the message names the real cause."""
