"""An in-process network for the INA client (tests, simulations): a switch
pipeline with worker endpoints attached in-process, optional impairment
(loss, duplication, reordering), and `drive` to run several clients in one
thread on a real or virtual clock."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from hosts.ina.handles import InaError, InaHandle
from testbed import wire

# impair(direction "up"|"down", worker_id, frame) -> list of hold counts, one per
# copy to deliver: [] drops, [0] delivers now, [0, 0] duplicates, [3] delivers
# after 3 more frames have gone up (reordering).
Impair = Callable[[str, int, bytes], list[int]]


class InProcessSwitch:
    """A switch pipeline (anything with process_batch(frames, in_ports, now), e.g.
    testbed.switch.ina.InaPipeline) with workers attached in-process: payloads
    are wrapped in the Eth/IPv4/UDP frame the real host would send, results are
    routed to the endpoint whose ip:port they are addressed to. Thread-safe.
    batch=False: each frame goes through the pipeline as it is sent; True: frames
    wait in `pending` until flush(n) hands up to n of them over as one batch
    (the pipeline's vectorized path, as a switch that reads bursts)."""

    def __init__(self, pipeline: Any, *, switch_mac: str = "02:00:00:00:00:fe",
                 switch_ip: str = "10.0.0.254", ina_port: int = wire.INA_PORT_BASE,
                 impair: Impair | None = None, clock: Callable[[], float] = time.monotonic,
                 batch: bool = False):
        self.pipeline = pipeline
        self.batch = batch
        self.pending: list[tuple[bytes, int]] = []
        self.switch_mac, self.switch_ip, self.ina_port = switch_mac, switch_ip, ina_port
        self.impair = impair
        self.clock = clock
        self._lock = threading.RLock()
        self._eps: dict[tuple[bytes, int], InProcessIo] = {}
        self._held: list[list] = []          # [remaining, kind, frame, port_or_endpoint]
        self.frames_up = self.frames_down = self.unroutable = 0

    def endpoint(self, worker_id: int, *, mac: str, ip: str, switch_port: int,
                 udp_port: int = wire.INA_PORT_BASE) -> "InProcessIo":
        ep = InProcessIo(self, worker_id, mac, ip, udp_port, switch_port)
        with self._lock:
            self._eps[(wire.ip_bytes(ip), udp_port)] = ep
        return ep

    def _copies(self, direction: str, wid: int, frame: bytes) -> list[int]:
        return [0] if self.impair is None else list(self.impair(direction, wid, frame))

    def _up(self, ep: "InProcessIo", payload: bytes) -> None:
        frame = ep.prefix(len(payload)) + payload
        with self._lock:
            self._tick_held()
            for hold in self._copies("up", ep.worker_id, frame):
                if hold > 0:
                    self._held.append([hold, "up", frame, ep.switch_port])
                else:
                    self._to_switch(frame, ep.switch_port)

    def _to_switch(self, frame: bytes, port: int) -> None:
        if self.batch:
            self.pending.append((frame, port))
            return
        self.frames_up += 1
        for _, out in self.pipeline.process_batch([frame], [port], self.clock()):
            self._down(out)

    def flush(self, n: int | None = None) -> int:
        """Batch mode: process up to n pending frames (all by default) as one batch."""
        with self._lock:
            take = self.pending[:n] if n is not None else self.pending
            self.pending = self.pending[len(take):]
            if take:
                self.frames_up += len(take)
                outs = self.pipeline.process_batch([f for f, _ in take], [p for _, p in take],
                                                   self.clock())
                for _, out in outs:
                    self._down(out)
            return len(take)

    def _down(self, frame: bytes) -> None:
        ep = self._eps.get((frame[30:34], (frame[36] << 8) | frame[37]))
        if ep is None:
            self.unroutable += 1
            return
        for hold in self._copies("down", ep.worker_id, frame):
            if hold > 0:
                self._held.append([hold, "down", frame, ep])
            else:
                self.frames_down += 1
                ep.deliver(frame[wire.INA_OFFSET:])

    def _tick_held(self) -> None:
        if not self._held:
            return
        due = [h for h in self._held if h[0] <= 1]
        self._held = [h for h in self._held if h[0] > 1]
        for h in self._held:
            h[0] -= 1
        for _, kind, frame, dest in due:
            self._release(kind, frame, dest)

    def _release(self, kind: str, frame: bytes, dest: Any) -> None:
        if kind == "up":
            self._to_switch(frame, dest)
        else:
            self.frames_down += 1
            dest.deliver(frame[wire.INA_OFFSET:])

    def release_held(self) -> int:
        """Deliver every held (reordered) frame now; returns how many."""
        with self._lock:
            held, self._held = self._held, []
            for _, kind, frame, dest in held:
                self._release(kind, frame, dest)
            return len(held)

    @property
    def held(self) -> int:
        return len(self._held)

    def slot_state(self, job_id: int, slot: int, slot_ver: int) -> dict | None:
        """The switch's (bitmap, count, seq) of a job's slot, when the pipeline
        exposes its P4 tables and registers (InaPipeline does)."""
        tables = getattr(self.pipeline, "tables", None)
        regs = getattr(self.pipeline, "registers", None)
        if not isinstance(tables, dict) or not isinstance(regs, dict):
            return None
        with self._lock:
            _, p = tables["Ingress.job_table"].lookup(job_id)
            if "slot_base" not in p:
                return None
            i = (p["slot_base"] + slot) * 2 + slot_ver
            return {"bitmap": regs["Aggregator.worker_bitmap"].read(i),
                    "count": regs["Aggregator.worker_count"].read(i),
                    "seq": regs["Aggregator.slot_seq"].read(i)}


class InProcessIo:
    """One worker's end of an InProcessSwitch (the `io` of an InaClient)."""

    def __init__(self, net: InProcessSwitch, worker_id: int, mac: str, ip: str,
                 udp_port: int, switch_port: int):
        self.net, self.worker_id = net, worker_id
        self.mac, self.ip, self.udp_port, self.switch_port = mac, ip, udp_port, switch_port
        self._q: deque[bytes] = deque()
        self._cv = threading.Condition()
        self._prefixes: dict[int, bytes] = {}
        self.sent = 0

    def prefix(self, payload_len: int) -> bytes:
        pre = self._prefixes.get(payload_len)
        if pre is None:
            pre = self._prefixes[payload_len] = wire.eth_ip_udp(
                self.mac, self.net.switch_mac, self.ip, self.net.switch_ip, self.udp_port,
                self.net.ina_port, payload_len)
        return pre

    def send(self, payload: bytes) -> None:
        self.sent += 1
        self.net._up(self, payload)

    def deliver(self, payload: bytes) -> None:
        with self._cv:
            self._q.append(payload)
            self._cv.notify()

    def recv(self, timeout: float) -> bytes | None:
        with self._cv:
            if not self._q and timeout > 0:
                self._cv.wait(timeout)
            return self._q.popleft() if self._q else None

    def slot_state(self, job_id: int, slot: int, slot_ver: int) -> dict | None:
        return self.net.slot_state(job_id, slot, slot_ver)

    def close(self) -> None:
        pass


def drive(clients: list, handles: list[InaHandle], *,
          advance: Callable[[float], None] | None = None, max_steps: int = 1_000_000) -> None:
    """Run several InaClients in one thread until all `handles` are done (tests,
    simulations over an InProcessSwitch). When nobody makes progress, `advance`
    (e.g. a virtual clock's setter) jumps to the earliest retransmission timer."""
    for _ in range(max_steps):
        if all(h.done for h in handles):
            return
        progress = sum(c.poll() for c in clients)
        if progress or all(h.done for h in handles):
            continue
        deadlines = [d for d in (c.next_deadline() for c in clients) if d is not None]
        if not deadlines:
            raise InaError("no progress possible: nothing in flight but handles not done")
        if advance is None:
            time.sleep(max(0.0, min(deadlines) - time.monotonic()))
        else:
            advance(min(deadlines))
    raise InaError(f"drive: not done after {max_steps} steps")

