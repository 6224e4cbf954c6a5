"""`Ingress.worker_port`: (job id, worker id) -> the switch port that worker's
contributions must arrive on. Membership is bound to ports: a contribution
whose (job, worker) has no entry, or whose ingress port is not the entry's,
is dropped and counted in `Ingress.bad_port` (per job), so a host cannot
contribute under another member's worker id. The controller installs one
entry per worker from the job plan (testbed/switch/jobs.py: each worker's port).

The entries are mirrored into one numpy array indexed [job, worker] (-1: no
entry), so a batch is checked with one fancy index.
"""
from __future__ import annotations

import threading

import numpy as np

from .job_table import NUM_JOBS
from .tables import Table

NUM_WORKER_IDS = 256          # worker_id is bit<8> on the wire
SIZE = NUM_JOBS * 32          # 32 = wire.MAX_WORKERS: one entry per possible member
SET_WORKER_PORT = "Ingress.set_worker_port"
UNBOUND_WORKER = "Ingress.unbound_worker"


class WorkerPortTable:
    NAME = "Ingress.worker_port"

    def __init__(self, lock: threading.Lock):
        self.port = np.full((NUM_JOBS, NUM_WORKER_IDS), -1, dtype=np.int64)
        self.table = Table(
            self.NAME, {"job_id": 8, "worker_id": 8},
            {SET_WORKER_PORT: {"port": 9}, UNBOUND_WORKER: {}},
            (UNBOUND_WORKER, {}), size=SIZE, const_default=True,
            default_only=frozenset({UNBOUND_WORKER}),
            lock=lock, on_change=self._on_change)

    def _on_change(self, key: tuple, entry) -> None:
        if not key:           # const default: unbound_worker
            return
        job, wid = key
        self.port[job, wid] = -1 if entry is None else entry[1]["port"]

    def bound(self, job: np.ndarray, wid: np.ndarray, in_port: np.ndarray) -> np.ndarray:
        """Per packet: its (job, worker) is bound to the port it came in on."""
        return self.port[job, wid] == in_port

    def bound_one(self, job: int, wid: int, in_port: int) -> bool:
        return int(self.port[job, wid]) == in_port
