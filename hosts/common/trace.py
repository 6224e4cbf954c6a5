"""What a host did, as a dependency graph: the trace the fidelity machinery reads.

Every host program that does timed work records one trace file per host
(`<host>.trace.jsonl` in the point's work folder). testbed.fidelity reads them:
the monitor compares each communication operation's measured time with the
modeled hardware time, and the projector replays the graph on a discrete-event
engine with the hardware models. The shape follows MLCommons Chakra execution
traces (compute nodes, collective nodes, data/control dependencies), in our own
JSON lines so no extra package is needed.

File layout (JSON lines):
  line 1   {"type": "trace_header", "schema": 1, "host", "rank", "world",
            "tdf": time dilation of compute, "device": device description,
            "workload": kind, "scaling": {...how compute/comm change with the
            worker count, read by the workload's projector hook...}, **meta}
  then     one node per line, in program order:
           {"id": int, "kind": "compute" | "comm", "deps": [ids], "t0", "t1",
            ...kind fields}
    compute: "hw_s"   modeled duration on the target device (undilated)
             "real_s" CPU/numpy time the emulation spent on it
             "work"   optional dict the workload's projector rescales from
    comm:    "op" (allreduce, ...), "algo" (switch | ring | ps | ...),
             "group" (collective group name), "seq" (k-th op of the group on
             this rank: the same seq on every rank is the same collective),
             "values", "value_bytes", "bytes" (payload per rank)
    point-to-point messages (parameter servers, masters, lookups) are comm
             nodes too: op "send" on the sender's trace and op "recv" on the
             receiver's, algo "p2p", group "p2p:<tag>:<src>><dst>" (one group per
             directed pair and tag), the same seq on both sides (the k-th
             message of that pair and tag), "peer" (the other host). The send
             node is the message leaving (t0 = first byte handed to the
             network); the recv node is the receiver waiting for it (t0 = when
             it began to wait, t1 = when the whole message was in). Record
             them with `send()` and `recv()`.

Times t0/t1 are time.perf_counter() seconds (CLOCK_MONOTONIC: one clock for
every process of the machine), so ranks' traces line up.

Dependencies are the program's own: a host thread is sequential, so every
compute node depends on the previous compute node (the device runs one thing at
a time) and on the communication operations the program waited for since then
(`waited`); a communication node depends on the compute node that produced its
data (the latest one). Only communication is asynchronous. A program whose
communication calls block one after another (`TraceRecorder(blocking_comm=True)`:
the torch workload, whose DDP hook reduces a step's gradient buckets in order,
as DDP does on one process group) also makes each communication node depend on
the last operation it waited for since the latest compute node: the ops then
run in a row, as they did, and not all at once. Records stay in
memory and are written at close(): no file I/O on the timed path.
"""
from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

SCHEMA = 1


class TraceRecorder:
    """Collects one host's trace; `close()` writes it."""

    def __init__(self, path: str | Path | None, *, host: str, rank: int, world: int,
                 tdf: float, device: dict[str, Any] | None = None, workload: str = "",
                 scaling: dict[str, Any] | None = None, blocking_comm: bool = False, **meta: Any):
        self.path = Path(path) if path else None
        self.blocking_comm = blocking_comm      # module docstring: comm after the op waited for
        self.header = {"type": "trace_header", "schema": SCHEMA, "host": host, "rank": rank,
                       "world": world, "tdf": float(tdf), "device": device or {},
                       "workload": workload, "scaling": scaling or {}, **meta}
        self.nodes: list[dict[str, Any]] = []
        self._last_compute: int | None = None
        self._waited: list[int] = []
        self._seq: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def set_tdf(self, tdf: float) -> None:
        """The dilation is known only after calibration; it applies to the whole trace."""
        self.header["tdf"] = float(tdf)

    def reset(self) -> None:
        """Forget every node (e.g. after a calibration phase): the trace is the run."""
        self.nodes.clear()
        self._last_compute = None
        self._waited.clear()
        self._seq.clear()

    def compute(self, t0: float, t1: float, hw_s: float, real_s: float,
                work: dict[str, Any] | None = None, idle: bool = False) -> int:
        """A step of hw_s hardware seconds. idle: time the process lets pass without
        using its device or a core (a deliberate pause): the projector waits it out."""
        deps = ([self._last_compute] if self._last_compute is not None else []) + self._waited
        node = {"id": len(self.nodes), "kind": "compute", "deps": deps, "t0": t0, "t1": t1,
                "hw_s": hw_s, "real_s": real_s}
        if work:
            node["work"] = work
        if idle:
            node["idle"] = True
        self.nodes.append(node)
        self._last_compute = node["id"]
        self._waited = []
        return node["id"]

    def comm(self, t0: float, t1: float | None, *, op: str, algo: str, values: int,
             value_bytes: int = 4, group: str = "world", **attrs: Any) -> int:
        """A collective this host took part in. t1 may be filled in later (`done`)."""
        seq = self._seq.get(group, 0)
        self._seq[group] = seq + 1
        deps = [self._last_compute] if self._last_compute is not None else []
        if self.blocking_comm and self._waited:
            deps.append(self._waited[-1])       # which depends on the one before it, and so on
        node = {"id": len(self.nodes), "kind": "comm", "deps": deps, "t0": t0, "t1": t1,
                "op": op, "algo": algo, "group": group, "seq": seq, "values": int(values),
                "value_bytes": int(value_bytes), "bytes": int(values) * int(value_bytes), **attrs}
        self.nodes.append(node)
        return node["id"]

    def send(self, t0: float, t1: float | None, *, peer: str, values: int, value_bytes: int = 4,
             tag: str = "msg", **attrs: Any) -> int:
        """A message of `values` x `value_bytes` this host sent to host `peer`."""
        return self._p2p("send", self.header["host"], peer, t0, t1, peer, values, value_bytes, tag, attrs)

    def recv(self, t0: float, t1: float | None, *, peer: str, values: int, value_bytes: int = 4,
             tag: str = "msg", **attrs: Any) -> int:
        """A message from host `peer` this host received (call `waited` if it blocked on it)."""
        return self._p2p("recv", peer, self.header["host"], t0, t1, peer, values, value_bytes, tag, attrs)

    def _p2p(self, op: str, src: str, dst: str, t0: float, t1: float | None, peer: str,
             values: int, value_bytes: int, tag: str, attrs: dict[str, Any]) -> int:
        if not src or not dst or src == dst:
            raise ValueError(f"a p2p message needs two different hosts, got {src!r} -> {dst!r}")
        return self.comm(t0, t1, op=op, algo="p2p", values=values, value_bytes=value_bytes,
                         group=p2p_group(tag, src, dst), peer=peer, **attrs)

    def done(self, node_id: int, t1: float) -> None:
        """An asynchronous operation completed at t1 (perf_counter)."""
        self.nodes[node_id]["t1"] = t1

    def waited(self, node_id: int) -> None:
        """The program blocked on this operation: the next compute depends on it."""
        self._waited.append(node_id)

    def close(self) -> None:
        if self.path is None:
            return
        with open(self.path, "w") as f:
            f.write(json.dumps(self.header) + "\n")
            for n in self.nodes:
                f.write(json.dumps(n) + "\n")


def p2p_group(tag: str, src: str, dst: str) -> str:
    """The trace group of the messages `src` sends `dst` under `tag` (module docstring)."""
    return f"p2p:{tag}:{src}>{dst}"


@lru_cache(maxsize=1 << 16)
def parse_p2p_group(group: str) -> tuple[str, str, str]:
    """(tag, src, dst) of a `p2p_group` name; ValueError for anything else. Kept per name:
    a projection reads each message's group several times (millions of calls in a
    ShadowSync envelope)."""
    head, _, pair = group.rpartition(":")
    src, sep, dst = pair.partition(">")
    if not head.startswith("p2p:") or not sep or not src or not dst:
        raise ValueError(f"{group!r} is not a p2p group (p2p:<tag>:<src>><dst>)")
    return head[len("p2p:"):], src, dst


def now() -> float:
    return time.perf_counter()


def read_trace(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, nodes) of one host's trace file; ValueError names what is wrong."""
    lines = Path(path).read_text().splitlines()
    if not lines:
        raise ValueError(f"{path}: empty trace")
    header = json.loads(lines[0])
    if header.get("type") != "trace_header" or header.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a schema-{SCHEMA} trace (first line {lines[0][:80]!r})")
    return header, [json.loads(x) for x in lines[1:] if x.strip()]
