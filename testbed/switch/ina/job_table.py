"""`Ingress.job_table`: job id -> (number of workers, multicast group, mask of
allowed workers, slot base, slot count). Miss -> `Ingress.unknown_job` (drop,
count `Ingress.bad_job`).

The table entries are mirrored into one numpy array per action parameter,
indexed by job id (256 jobs), so a batch is looked up with one fancy index.
"""
from __future__ import annotations

import threading

import numpy as np

from testbed import wire

from .tables import Table

NUM_JOBS = 256
FLOOD_MCAST_GRP = 1          # the Forward control's flood group; jobs may not use it

SET_JOB = "Ingress.set_job"
UNKNOWN_JOB = "Ingress.unknown_job"


class JobTable:
    NAME = "Ingress.job_table"

    def __init__(self, num_slots: int, lock: threading.Lock):
        self.num_slots = num_slots
        self.valid = np.zeros(NUM_JOBS, dtype=bool)
        self.num_workers = np.zeros(NUM_JOBS, dtype=np.int64)
        self.mcast_grp = np.zeros(NUM_JOBS, dtype=np.int64)
        self.worker_mask = np.zeros(NUM_JOBS, dtype=np.int64)
        self.slot_base = np.zeros(NUM_JOBS, dtype=np.int64)
        self.slot_count = np.zeros(NUM_JOBS, dtype=np.int64)
        self.table = Table(
            self.NAME, {"job_id": 8},
            {SET_JOB: {"num_workers": 8, "mcast_grp": 16, "worker_mask": 32,
                       "slot_base": 16, "slot_count": 16},
             UNKNOWN_JOB: {}},
            (UNKNOWN_JOB, {}), size=NUM_JOBS, const_default=True,
            default_only=frozenset({UNKNOWN_JOB}),
            lock=lock, validate=self._validate, on_change=self._on_change)

    def _validate(self, action: str, p: dict) -> None:
        if action != SET_JOB:
            return
        if not 1 <= p["num_workers"] <= wire.MAX_WORKERS:
            raise ValueError(f"{self.NAME}: num_workers {p['num_workers']} not in 1..{wire.MAX_WORKERS}")
        if bin(p["worker_mask"]).count("1") < p["num_workers"]:
            raise ValueError(f"{self.NAME}: worker_mask {p['worker_mask']:#x} allows fewer than "
                             f"num_workers={p['num_workers']} workers; the job could never complete")
        if p["slot_base"] + p["slot_count"] > self.num_slots:
            raise ValueError(f"{self.NAME}: slots {p['slot_base']}..{p['slot_base'] + p['slot_count'] - 1}"
                             f" exceed the switch's {self.num_slots} slots")
        if p["mcast_grp"] in (0, FLOOD_MCAST_GRP):
            raise ValueError(f"{self.NAME}: mcast_grp {p['mcast_grp']} is reserved "
                             f"(0 = none, {FLOOD_MCAST_GRP} = flood)")

    def _on_change(self, key: tuple, entry) -> None:
        if not key:           # const default: unknown_job
            return
        (job,) = key
        if entry is None:
            self.valid[job] = False
            return
        _, p = entry
        self.num_workers[job] = p["num_workers"]
        self.mcast_grp[job] = p["mcast_grp"]
        self.worker_mask[job] = p["worker_mask"]
        self.slot_base[job] = p["slot_base"]
        self.slot_count[job] = p["slot_count"]
        self.valid[job] = True

    def overlapping_jobs(self, job_id: int, base: int, count: int) -> list[int]:
        """Jobs (other than job_id) whose slot ranges overlap [base, base+count)."""
        v = np.flatnonzero(self.valid)
        return [int(j) for j in v if j != job_id and self.slot_base[j] < base + count
                and base < self.slot_base[j] + self.slot_count[j]]
