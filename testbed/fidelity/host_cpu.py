"""A host's cores shared by the processes on it, for the projector (projector.py).

Some traced processes share one host: ShadowSync's shadow is a thread on its
trainer's host, beside the trainer's Hogwild workers. A trace header may say
how many cores its host has (`host_cores: C`) and every trace on that host how
many threads its compute nodes keep busy (`threads: T`, default 1); a trace is
on the host its `nic` names, else its own `host` (the same key fabric.py uses
for links: a process on a host uses that host's NIC and cores alike).

The model (processor sharing, one place):
  * While jobs with T_1, T_2, ... threads compute at once, every thread runs at
    min(1, C / sum T) of a core (the OS spreads runnable threads over the cores
    evenly [A]).
  * A compute node's modeled time (hw_s) is its time with its own process alone
    on the host, i.e. at min(1, C / T) per thread: the device model of a
    trainer's step is its Hogwild workers' speed without a shadow. So a node
    runs at speed share(sum T) / share(T) of its modeled rate: 1 while the host
    has a core free for every runnable thread; a trainer of W workers on C <= W
    cores slows to W / (W + 1) of its rate while its shadow computes, and the
    shadow's own update slows alike.
  * Only cores are shared: memory bandwidth is charged inside each node's time
    (e.g. the shadow's update: bytes / the bandwidth one thread streams at), and
    one job's streaming does not slow another's [A]; nor are caches, hyper-threads
    or the OS's scheduling delays modeled [A].
Hosts whose traces say no `host_cores` are not modeled: their compute nodes
take their hw_s, as before.
"""
from __future__ import annotations

from typing import Any, Iterable

import simpy


class HostCpu:
    """Processor sharing of `cores` cores among the compute jobs running on a host."""

    def __init__(self, env: simpy.Environment, cores: float):
        if not cores > 0:
            raise ValueError(f"host_cores must be > 0, got {cores!r}")
        self.env, self.cores = env, float(cores)
        self._jobs: dict[int, list] = {}       # job -> [threads, the event that wakes it]
        self._next = 0

    def share(self, threads: float) -> float:
        """The share of a core each of `threads` runnable threads gets."""
        return min(1.0, self.cores / threads)

    def run(self, threads: float, work_s: float):
        """A compute job of `threads` threads whose modeled time alone on the host is
        `work_s`: progresses at share(all threads) / share(threads), re-rated whenever
        a job starts or ends on the host (a SimPy process body: `yield from`)."""
        if not threads > 0:
            raise ValueError(f"threads must be > 0, got {threads!r}")
        if work_s <= 0:
            return
        key, self._next = self._next, self._next + 1
        self._jobs[key] = [float(threads), None]
        self._wake_others(key)
        alone, left = self.share(threads), float(work_s)
        try:
            while left > 1e-12 * work_s:
                speed = self.share(sum(t for t, _ in self._jobs.values())) / alone
                wake = self._jobs[key][1] = self.env.event()
                start = self.env.now
                done = self.env.timeout(left / speed)
                got = yield done | wake
                if done in got:
                    break
                left -= (self.env.now - start) * speed
        finally:
            del self._jobs[key]
            self._wake_others(key)

    def _wake_others(self, me: int) -> None:
        for k, (_, ev) in self._jobs.items():
            if k != me and ev is not None and not ev.triggered:
                ev.succeed()


def host_of(header: dict[str, Any]) -> str | None:
    """The host whose cores (and NIC) a trace's process uses (module docstring)."""
    h = header.get("nic") or header.get("host")
    return None if h is None else str(h)


def host_cpus(env: simpy.Environment, headers: Iterable[dict[str, Any]]) -> dict[str, HostCpu]:
    """host -> its HostCpu, for every host some trace header gives `host_cores`.
    ValueError: two traces of one host disagree on its cores."""
    cores: dict[str, float] = {}
    for h in headers:
        if h.get("host_cores") is None:
            continue
        host, c = host_of(h), float(h["host_cores"])
        if host is None:
            raise ValueError("a trace header with host_cores but no host")
        if cores.setdefault(host, c) != c:
            raise ValueError(f"host {host}: traces disagree on host_cores ({cores[host]} and {c})")
    return {host: HostCpu(env, c) for host, c in cores.items()}
