"""Projector: replay recorded traces on SimPy with the hardware models.

Input: the traces of one point, (header, nodes) per rank as
`hosts.common.trace.read_trace` returns (or `monitor.load_traces(folder)`).
Each rank's program is one SimPy process that walks its nodes in program order:

  compute  waits for its dependencies (`env.all_of` of the events of those not
           yet done: the previous compute and the collectives the program waited
           for), then occupies the rank's device for
           `compute_time(header, node, world)` seconds (default: node["hw_s"], the
           modeled device time, undilated). The device is the program itself: one
           compute node at a time, in program order, which is the trace format's
           own rule (every compute node depends on the previous one).
  comm     arrives at its collective, identified by (group, seq), and the program
           goes on (communication is asynchronous). A group's members are the
           ranks whose traces have a node of that group. When the last member
           arrives the collective runs for `network_model.collective_cost(...)`
           and its event fires for every member at once; compute nodes that
           depend on it wait for that event, others overlap with it.
  A rank finishes when its last node and its last in-flight collective are done.

(A process per node, as first written, cost ~4.5 SimPy events per node and took
25 s for 256 ranks x 3000 nodes here; the walker needs ~1 event per compute node
plus a few per collective.)

Link contention, the cheap way: the collectives of one member set share one
fabric resource. A collective holds it for its `link_busy_s` (the time its
busiest link is serializing) and then waits the rest of its time (latency,
reduction) without holding it. One collective alone takes exactly
`collective_time`; two overlapping bandwidth-bound collectives take about the sum
of their serialization, as on a shared link; latency-bound ones overlap almost
freely. Collectives of different member sets are assumed not to share links.
`contention=False` gives every collective its time in isolation.

Every rank starts at t = 0 (the recorded start offsets are not replayed: the
projection is the hardware's, not the emulator's). SimPy times are
deterministic, so a projection is exactly reproducible.

`project_world(traces, world, profile, compute_time)` synthesizes a trace for
another worker count: rank `template_rank`'s node list is replicated to `world`
ranks (comm nodes keep their (group, seq); every group's members become all
ranks), and each header gets `world` (the projected count) and
`recorded_world` (the count the trace was recorded at). The workload's scaling
rule lives in `compute_time`, which sees both: e.g. `linear_compute_scaling`
(hw_s * recorded_world / world) for model-parallel work split by features.

Cost: about 4 SimPy events per node; `max_nodes` bounds the work by simulating
each rank's first `max_nodes` nodes only (cut back to the last collective all
members reached) and extrapolating the makespan by rate:
makespan = simulated makespan * nodes_total / nodes_simulated, reported as
`truncated=True` with the factor. This assumes the trace is a repeating
iteration pattern (training loops are); a warm-up phase different from the rest
biases it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import simpy

from testbed.fidelity.constants import HardwareProfile
from testbed.fidelity.network_model import CollectiveCost, collective_cost

Trace = tuple[dict[str, Any], list[dict[str, Any]]]
ComputeTime = Callable[[dict[str, Any], dict[str, Any], int], float]


def recorded_compute(header: dict[str, Any], node: dict[str, Any], world: int) -> float:
    """The modeled device time the host recorded (no rescaling)."""
    return float(node["hw_s"])


def linear_compute_scaling(header: dict[str, Any], node: dict[str, Any], world: int) -> float:
    """Compute split evenly over the workers (model-parallel by features): hw_s * recorded/world."""
    return float(node["hw_s"]) * int(header.get("recorded_world", header["world"])) / world


@dataclass
class Projection:
    profile: str
    world: int
    makespan_s: float                      # extrapolated when truncated
    finish_s: dict[int, float]             # per rank, simulated part
    compute_s: dict[int, float]            # device busy time per rank, simulated part
    comm_exposed_s: dict[int, float]       # finish - compute: time the device waited
    collectives: int
    nodes: int                             # nodes simulated (all ranks)
    nodes_total: int
    events: int                            # SimPy events processed
    truncated: bool = False
    extrapolation: float = 1.0             # makespan_s / simulated makespan

    @property
    def simulated_makespan_s(self) -> float:
        return max(self.finish_s.values(), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("finish_s", "compute_s", "comm_exposed_s"):
            d[k] = {str(r): v for r, v in d[k].items()}
        d["simulated_makespan_s"] = self.simulated_makespan_s
        return d


def project(traces: Sequence[Trace], profile: HardwareProfile, compute_time: ComputeTime | None = None,
            *, max_nodes: int | None = None, contention: bool = True) -> Projection:
    """Replay `traces` on SimPy with `profile`'s network model (see the module docstring)."""
    compute_time = compute_time or recorded_compute
    ranks, world = _check_traces(traces)
    total = sum(len(nodes) for _, nodes in traces)
    cut = _truncate(traces, max_nodes) if max_nodes is not None else [nodes for _, nodes in traces]
    simulated = sum(len(n) for n in cut)
    members = _members(ranks, cut)
    _check_collectives(ranks, cut, members)

    env = simpy.Environment()
    costs: dict[tuple, CollectiveCost] = {}
    fabric: dict[frozenset, simpy.Resource] = {}
    arrived: dict[tuple[str, int], list] = {}   # (group, seq) -> [count, done event]
    finish = {r: 0.0 for r in ranks}
    busy = {r: 0.0 for r in ranks}

    def cost_of(node: dict[str, Any]) -> CollectiveCost:
        key = (node["op"], node["algo"], int(node["values"]), int(node["value_bytes"]))
        scale_round = bool(node.get("scale_round"))
        if key + (scale_round,) not in costs:
            costs[key + (scale_round,)] = collective_cost(*key, world, profile, scale_round)
        key = key + (scale_round,)
        return costs[key]

    def collective(node: dict[str, Any], group_members: frozenset, done: simpy.Event):
        c = cost_of(node)
        if contention and c.link_busy_s > 0:
            link = fabric.setdefault(group_members, simpy.Resource(env, capacity=1))
            with link.request() as req:
                yield req
                yield env.timeout(c.link_busy_s)
            yield env.timeout(c.total_s - c.link_busy_s)
        else:
            yield env.timeout(c.total_s)
        done.succeed()

    def program(rank: int, header: dict[str, Any], nodes: list[dict[str, Any]]):
        # done[i]: None once node i finished on this rank's timeline, else its event.
        done: list[simpy.Event | None] = [None] * len(nodes)
        for node in nodes:
            pending = [done[d] for d in node["deps"] if done[d] is not None and not done[d].processed]
            if node["kind"] == "compute":
                if len(pending) == 1:
                    yield pending[0]
                elif pending:
                    yield env.all_of(pending)
                d = float(compute_time(header, node, world))
                if not d >= 0:
                    raise ValueError(f"compute_time gave {d!r} for rank {rank} node {node['id']}")
                yield env.timeout(d)
                busy[rank] += d
            else:
                key = (node["group"], node["seq"])
                state = arrived.get(key)
                if state is None:
                    state = arrived[key] = [0, env.event()]
                done[node["id"]] = state[1]
                if pending:      # not with hosts' traces: comm depends on the latest compute, done
                    env.process(arrive_later(pending, node, state))
                else:
                    arrive(node, state)
        tail = [e for e in done if e is not None and not e.processed]
        if tail:                 # asynchronous ops still in flight when the program ends
            yield env.all_of(tail)
        finish[rank] = env.now

    def arrive(node: dict[str, Any], state: list) -> None:
        state[0] += 1
        group_members = members[node["group"]]
        if state[0] == len(group_members):
            env.process(collective(node, group_members, state[1]))

    def arrive_later(pending: list, node: dict[str, Any], state: list):
        yield env.all_of(pending)
        arrive(node, state)

    procs = {int(h["rank"]): env.process(program(int(h["rank"]), h, nodes))
             for (h, _), nodes in zip(traces, cut)}

    events = 0
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        events += 1
    stuck = sorted(r for r, proc in procs.items() if not proc.triggered)
    if stuck:
        raise RuntimeError(f"projection stalled: ranks {stuck[:8]} never finished "
                           f"(a collective some member never reached?)")

    span = max(finish.values(), default=0.0)
    factor = total / simulated if simulated else 1.0
    return Projection(profile=profile.label(), world=world, makespan_s=span * factor,
                      finish_s=finish, compute_s=busy,
                      comm_exposed_s={r: finish[r] - busy[r] for r in ranks},
                      collectives=len(arrived), nodes=simulated, nodes_total=total, events=events,
                      truncated=simulated < total, extrapolation=factor)


def synthesize_world(traces: Sequence[Trace], world: int, template_rank: int = 0) -> list[Trace]:
    """`world` ranks, each with the template rank's nodes (shared, read-only)."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    template = next((t for t in traces if int(t[0]["rank"]) == template_rank), None)
    if template is None:
        raise ValueError(f"no trace of rank {template_rank} to use as template "
                         f"(ranks: {sorted(int(h['rank']) for h, _ in traces)})")
    header, nodes = template
    recorded = int(header.get("recorded_world", header["world"]))
    return [({**header, "rank": r, "host": f"projected{r}", "world": world, "recorded_world": recorded},
             nodes) for r in range(world)]


def project_world(traces: Sequence[Trace], world: int, profile: HardwareProfile,
                  compute_time: ComputeTime | None = None, *, template_rank: int = 0,
                  max_nodes: int | None = None, contention: bool = True) -> Projection:
    """Project the traces' program at `world` workers (see the module docstring)."""
    return project(synthesize_world(traces, world, template_rank), profile, compute_time,
                   max_nodes=max_nodes, contention=contention)


# -- checks and truncation -------------------------------------------------------
def _check_traces(traces: Sequence[Trace]) -> tuple[list[int], int]:
    if not traces:
        raise ValueError("project: no traces")
    ranks = [int(h["rank"]) for h, _ in traces]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"project: duplicate ranks {sorted(ranks)}")
    worlds = {int(h["world"]) for h, _ in traces}
    if len(worlds) != 1:
        raise ValueError(f"project: traces disagree on world: {sorted(worlds)}")
    for (h, nodes) in traces:
        for i, n in enumerate(nodes):
            if n.get("id") != i:
                raise ValueError(f"trace of {h.get('host')}: node at line {i + 2} has id {n.get('id')}, expected {i}")
            if any(not (isinstance(d, int) and 0 <= d < i) for d in n["deps"]):
                raise ValueError(f"trace of {h.get('host')}: node {i} depends on {n['deps']}: "
                                 f"dependencies must be earlier nodes")
            if n["kind"] not in ("compute", "comm"):
                raise ValueError(f"trace of {h.get('host')}: node {i} has unknown kind {n['kind']!r}")
    return ranks, worlds.pop()


def _members(ranks: list[int], cut: list[list[dict]]) -> dict[str, frozenset]:
    groups: dict[str, set] = {}
    for rank, nodes in zip(ranks, cut):
        for n in nodes:
            if n["kind"] == "comm":
                groups.setdefault(n["group"], set()).add(rank)
    return {g: frozenset(m) for g, m in groups.items()}


def _check_collectives(ranks: list[int], cut: list[list[dict]], members: dict[str, frozenset]) -> None:
    """Every member has every (group, seq), with the same op, algo and size."""
    seen: dict[tuple[str, int], tuple] = {}
    count: dict[tuple[str, int], set] = {}
    for rank, nodes in zip(ranks, cut):
        for n in nodes:
            if n["kind"] != "comm":
                continue
            key = (n["group"], n["seq"])
            sig = (n["op"], n["algo"], n["values"], n["value_bytes"])
            if seen.setdefault(key, sig) != sig:
                raise ValueError(f"collective {key[0]}#{key[1]}: rank {rank} has {sig}, another rank {seen[key]}")
            count.setdefault(key, set()).add(rank)
    for key, got in count.items():
        missing = members[key[0]] - got
        if missing:
            raise ValueError(f"collective {key[0]}#{key[1]}: ranks {sorted(missing)} never reach it "
                             f"(truncated or mismatched traces)")


def _truncate(traces: Sequence[Trace], max_nodes: int) -> list[list[dict]]:
    """Each rank's first max_nodes nodes, cut before any collective not every member reached."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    heads = [nodes[:max_nodes] for _, nodes in traces]
    ranks = [int(h["rank"]) for h, _ in traces]
    reached: dict[str, dict[int, int]] = {}            # group -> rank -> seqs reached
    for rank, nodes in zip(ranks, heads):
        for n in nodes:
            if n["kind"] == "comm":
                g = reached.setdefault(n["group"], {})
                g[rank] = max(g.get(rank, 0), n["seq"] + 1)
    full = _members(ranks, [nodes for _, nodes in traces])
    limit = {g: min(by_rank.values()) if len(by_rank) == len(full[g]) else 0
             for g, by_rank in reached.items()}
    out = []
    for nodes in heads:
        end = next((i for i, n in enumerate(nodes) if n["kind"] == "comm" and n["seq"] >= limit[n["group"]]),
                   len(nodes))
        out.append(nodes[:end])
    return out
