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
  comm     a collective (allreduce, allgather): arrives at it, identified by
           (group, seq), and the program goes on (communication is
           asynchronous). Its members are projector_checks.group_members'
           (the group "world": every worker rank). When the last member arrives
           it runs (fabric.py); each member's event fires when that member has
           its result given when every member arrived
           (network_model.finish_after_arrivals, as the fidelity monitor
           measures it: in a ring the early members' first steps are done
           before the last one joins; equal arrivals: collective_time for all);
           compute nodes that depend on it wait for that event, others overlap
           with it. It is costed with its own group's member count (server
           traces are not members of the workers' collectives).
  send     starts its message's transfer at once (it does not wait for the
           receiver: the bytes go into the network; fabric.py queues it on the
           sender's uplink and the receiver's downlink); its event fires when
           the bytes are out, so a sender that did not wait goes on computing.
  recv     its event is the message's arrival: a compute node that depends on
           it (the program waited for it) waits for that.
  A rank finishes when its last node and its last in-flight operation are done.
  A trace whose header says `nic: <host>` sends and receives through that host's
  NIC (fabric.py: a process sharing its host's links under a name of its own).
  A trace whose header says `cores: K` (K > 1: a server of K cores working in
  parallel, server_model.py) is K programs, one per core, each walking the nodes
  of its `core` in order (a node may depend only on nodes of its own core); the
  rank finishes with its last core.
  A compute node marked `idle` (a deliberate pause, e.g. ShadowSync's shadow
  between syncs) only waits its hw_s: it uses no device time and no core.
  A trace whose host has cores of its own (header `host_cores: C` on a trace of
  that host, `threads: T` per trace; host_cpu.py) computes on them: processes
  of one host (e.g. a trainer's Hogwild workers and its shadow) share the C
  cores, and a compute node takes longer than its hw_s while more threads are
  runnable than cores (processor sharing, host_cpu.py states the rule).
  `world` (the count compute_time sees, Projection.world) is the number of
  worker traces; server traces (header role "server") are not counted.

(A process per node, as first written, cost ~4.5 SimPy events per node and took
25 s for 256 ranks x 3000 nodes here; the walker needs ~1 event per compute node
plus a few per collective or message.)

Every rank starts at t = 0 (the recorded start offsets are not replayed: the
projection is the hardware's, not the emulator's). SimPy times are
deterministic, so a projection is exactly reproducible.

`project_world(traces, world, profile, compute_time)` synthesizes the job at
another worker count: the worker trace of rank `template_rank` is replicated to
`world` ranks (collective groups keep their (group, seq), "world" has them all;
point-to-point groups are renamed per replica), and each header gets `world`
(the projected count) and `recorded_world` (the count the trace was recorded
at). Server traces (header role "server") are not replayed but replaced by a
service model built from them: first come first served (or round robin),
each message costing the server's recorded compute for its tag, then the reply
(server_model.py states the rule). The workload's scaling rule lives in
`compute_time`, which sees both counts: e.g. `linear_compute_scaling`
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

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import simpy

from hosts.common.trace import parse_p2p_group
from testbed.fidelity.constants import HardwareProfile
from testbed.fidelity.fabric import Fabric, Message
from testbed.fidelity.host_cpu import host_cpus, host_of
from testbed.fidelity.paths import nic_table, path_switches
from testbed.fidelity.projector_checks import (P2P, Trace, check_comm, check_traces, group_members,
                                               is_server, truncate)
from testbed.fidelity.server_model import (Server, ServiceModel, expected_messages, node_core,
                                           service_models, synthesize_workers)

ComputeTime = Callable[[dict[str, Any], dict[str, Any], int], float]


def recorded_compute(header: dict[str, Any], node: dict[str, Any], world: int) -> float:
    """The modeled device time the host recorded (no rescaling)."""
    return float(node["hw_s"])


def linear_compute_scaling(header: dict[str, Any], node: dict[str, Any], world: int) -> float:
    """Compute split evenly over the workers (model-parallel by features): hw_s * recorded/world."""
    return float(node["hw_s"]) * int(header.get("recorded_world", world)) / world


@dataclass
class Projection:
    profile: str
    world: int
    makespan_s: float                      # extrapolated when truncated
    finish_s: dict[int, float]             # per rank, simulated part
    compute_s: dict[int, float]            # device busy time per rank, simulated part (as stretched
                                           # by a shared host's cores, host_cpu.py)
    comm_exposed_s: dict[int, float]       # finish - compute: time the device waited
    collectives: int
    nodes: int                             # nodes simulated (all ranks)
    nodes_total: int
    events: int                            # SimPy events processed
    truncated: bool = False
    extrapolation: float = 1.0             # makespan_s / simulated makespan
    messages: int = 0                      # point-to-point messages simulated

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
            *, max_nodes: int | None = None, contention: bool = True,
            services: Sequence[ServiceModel] = ()) -> Projection:
    """Replay `traces` on SimPy with `profile`'s network model (see the module docstring).
    services: servers played by a service model (server_model.py) instead of a trace."""
    compute_time = compute_time or recorded_compute
    prep = _prepared(traces, max_nodes, services)
    ranks, world, total, cut, simulated, members = (prep.ranks, prep.world, prep.total, prep.cut,
                                                    prep.simulated, prep.members)
    env = simpy.Environment()
    fabric = Fabric(env, profile, contention, prep.switches, prep.hosts, prep.nics)
    check_comm(traces, cut, members, [s.host for s in services], fabric.collective_cost)
    expected = prep.expected
    cpus = host_cpus(env, (h for h, _ in traces))

    arrived: dict[tuple[str, int], list] = {}   # collective (group, seq) -> [count, done event]
    messages: dict[tuple[str, int], Message] = {}
    finish = {r: 0.0 for r in [*ranks, *(s.rank for s in services)]}
    busy = dict(finish)

    def message(node: dict[str, Any]) -> Message:
        key = (node["group"], node["seq"])
        m = messages.get(key)
        if m is None:
            _, src, dst = parse_p2p_group(node["group"])
            m = messages[key] = Message(env, src, dst)
        return m

    def program(rank: int, header: dict[str, Any], nodes: list[dict[str, Any]], size: int):
        # done[i]: None once node i finished on this rank's timeline, else its event
        # (indexed by node id: `nodes` may be one core's share of a trace of `size`).
        done: list[simpy.Event | None] = [None] * size
        device_s = 0.0
        cpu, threads = cpus.get(host_of(header) or ""), float(header.get("threads", 1))
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
                if node.get("idle"):     # a pause: time passes, no device or core is used
                    yield env.timeout(d)
                elif cpu is None:
                    yield env.timeout(d)
                    device_s += d
                else:                    # on its host's shared cores (host_cpu.py)
                    t0 = env.now
                    yield from cpu.run(threads, d)
                    device_s += env.now - t0
            elif node["algo"] == P2P:
                m = message(node)
                if node["op"] == "recv":     # its event: the message is in
                    done[node["id"]] = m.delivered
                    continue
                done[node["id"]] = m.sent    # the bytes leave now: the receiver need not be there
                start = (lambda m=m, node=node: env.process(fabric.transfer(m, node)))
                if pending:      # not with hosts' traces: comm depends on the latest compute, done
                    env.process(after(pending, start))
                else:
                    start()
            else:
                key = (node["group"], node["seq"])
                state = arrived.get(key)
                if state is None:
                    state = arrived[key] = ({}, {})
                done[node["id"]] = state[1].setdefault(rank, env.event())
                if pending:
                    env.process(after(pending, lambda node=node, state=state, rank=rank:
                                      arrive(node, state, rank)))
                else:
                    arrive(node, state, rank)
        tail = [e for e in done if e is not None and not e.processed]
        if tail:                 # asynchronous ops still in flight when the program ends
            yield env.all_of(tail)
        finish[rank] = max(finish[rank], env.now)
        busy[rank] = max(busy[rank], device_s)      # cores in parallel: the busiest one

    def arrive(node: dict[str, Any], state: tuple[dict, dict], rank: int) -> None:
        arrivals, events = state       # rank -> arrival time, rank -> its done event
        arrivals[rank] = env.now
        group = members[node["group"]]
        if len(arrivals) == len(group):
            env.process(fabric.collective(node, group, arrivals, events))

    def serve(rank: int, server: Server):
        yield from server.run()
        finish[rank], busy[rank] = env.now, server.busy_s

    def after(pending: list, then: Callable[[], Any]):
        yield env.all_of(pending)
        then()

    procs = {(int(h["rank"]), core): env.process(program(int(h["rank"]), h, mine, len(nodes)))
             for (h, _), nodes in zip(traces, cut) for core, mine in split_cores(h, nodes).items()}
    servers = {}
    if services:
        recv_nodes = {(n["group"], n["seq"]): n for nodes in cut for n in nodes
                      if n["kind"] == "comm" and n["algo"] == P2P and n["op"] == "recv"}
        order = [str(h["host"]) for h, _ in sorted(traces, key=lambda t: int(t[0]["rank"]))]
        for s in services:
            servers[s.host] = Server(env, s, fabric, message, order, expected[s.host], recv_nodes)
            procs[(s.rank, 0)] = env.process(serve(s.rank, servers[s.host]))
        fabric.on_delivered = lambda m, node: (servers[m.dst].arrive(m, node) if m.dst in servers else None)

    events = 0
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        events += 1
    stuck = sorted({r for (r, _), proc in procs.items() if not proc.triggered})
    if stuck:
        raise RuntimeError(f"projection stalled: ranks {stuck[:8]} never finished "
                           f"(a collective some member never reached, or a message never sent?)")

    span = max(finish.values(), default=0.0)
    factor = total / simulated if simulated else 1.0
    return Projection(profile=profile.label(), world=world, makespan_s=span * factor,
                      finish_s=finish, compute_s=busy,
                      comm_exposed_s={r: finish[r] - busy[r] for r in finish},
                      collectives=len(arrived), nodes=simulated, nodes_total=total, events=events,
                      truncated=simulated < total, extrapolation=factor, messages=len(messages))


@dataclass(frozen=True)
class _Prepared:
    """What a projection needs of its traces whatever the profile: checked, cut,
    grouped. A sensitivity band replays one set of traces 10-30 times with other
    constants; preparing them once (with the fabric's per-group path cache) took a
    P4SGD quick point's collect from 11.9 s to 4.7 s."""
    ranks: list[int]
    world: int
    total: int
    cut: list[list[dict[str, Any]]]
    simulated: int
    members: dict[str, frozenset]
    switches: dict[tuple[str, str], int]
    hosts: dict[int, str]
    nics: dict[str, str]
    expected: dict[str, Any]


# The last few preparations and synthesized worlds, newest last, only inside
# reusing_preparations: (key, the objects the key's ids name, held so that those ids
# stay theirs, the value).
_PREPARED: list[tuple[tuple, Any, _Prepared]] = []
_SYNTHESIZED: list[tuple[tuple, Any, tuple[list[Trace], list[ServiceModel]]]] = []
_KEEP = 8
_reuse_depth = 0


def _recall(kept: list, key: tuple) -> Any:
    return next((value for k, _held, value in kept if k == key), None) if _reuse_depth else None


def _keep(kept: list, key: tuple, held: Any, value: Any) -> Any:
    if _reuse_depth:
        kept.append((key, held, value))
        del kept[:-_KEEP]
    return value


@contextmanager
def reusing_preparations():
    """Within it, projections of the same traces (the same objects, unchanged) share
    their preparation (_Prepared) and project_world its synthesized world: for loops
    that replay one point's traces with other constants (a sensitivity band, an
    envelope). The caller promises not to change the traces inside; a changed header
    or node count is still noticed (_traces_key). Outside, every projection prepares
    afresh."""
    global _reuse_depth
    _reuse_depth += 1
    try:
        yield
    finally:
        _reuse_depth -= 1
        if _reuse_depth == 0:
            _PREPARED.clear()
            _SYNTHESIZED.clear()


def _traces_key(traces: Sequence[Trace]) -> tuple:
    # The objects themselves, each node list's length and each header's content: a
    # caller that appends a trace or a node, swaps a list or edits a header (say its
    # path_switches) gets a fresh preparation.
    return tuple((id(h), repr(h), id(nodes), len(nodes)) for h, nodes in traces)


def _prepared(traces: Sequence[Trace], max_nodes: int | None, services: Sequence[ServiceModel]) -> _Prepared:
    key = (_traces_key(traces), max_nodes, id(services), len(services)) if _reuse_depth else ()
    p = _recall(_PREPARED, key)
    if p is not None:
        return p
    ranks = check_traces(traces)
    cut = truncate(traces, max_nodes) if max_nodes is not None else [nodes for _, nodes in traces]
    p = _Prepared(ranks=ranks, world=sum(1 for h, _ in traces if not is_server(h)),
                  total=sum(len(nodes) for _, nodes in traces), cut=cut,
                  simulated=sum(len(n) for n in cut), members=group_members(traces, cut),
                  switches=path_switches(traces),
                  hosts={int(h["rank"]): str(h["host"]) for h, _ in traces if h.get("host") is not None},
                  nics=nic_table(traces), expected=expected_messages(traces, cut, services))
    return _keep(_PREPARED, key, (list(traces), services), p)


def split_cores(header: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """core -> its nodes in order (module docstring); {0: nodes} for a one-core trace.
    ValueError names a node that depends on another core's node."""
    if int(header.get("cores", 1)) <= 1:
        return {0: nodes}
    out: dict[int, list[dict[str, Any]]] = {}
    core_of: dict[int, int] = {}
    for n in nodes:
        c = core_of[n["id"]] = node_core(header, n)
        other = [d for d in n["deps"] if core_of[d] != c]
        if other:
            raise ValueError(f"trace of {header.get('host')}: node {n['id']} (core {c}) depends on node "
                             f"{other[0]} of core {core_of[other[0]]}; cores are replayed in parallel")
        out.setdefault(c, []).append(n)
    return out


def synthesize_world(traces: Sequence[Trace], world: int, template_rank: int = 0) -> list[Trace]:
    """`world` workers from the template worker's trace (server_model.synthesize_workers)."""
    return synthesize_workers(traces, world, template_rank)


def project_world(traces: Sequence[Trace], world: int, profile: HardwareProfile,
                  compute_time: ComputeTime | None = None, *, template_rank: int = 0,
                  max_nodes: int | None = None, contention: bool = True,
                  replay_recorded: bool = True) -> Projection:
    """Project the traces' program at `world` workers (see the module docstring).
    At the recorded worker count every rank replays its own trace (replay_recorded):
    replicating one rank there would erase a straggler or any other difference
    between ranks. replay_recorded=False synthesizes there too (tests of the model)."""
    workers = [t for t in traces if t[0].get("role", "worker") != "server"]
    if replay_recorded and world == len(workers):
        return project(list(traces), profile, compute_time, max_nodes=max_nodes, contention=contention)
    synthesized, services = _synthesized(traces, world, template_rank)
    return project(synthesized, profile, compute_time, max_nodes=max_nodes, contention=contention,
                   services=services)


def _synthesized(traces: Sequence[Trace], world: int, template_rank: int) -> tuple[list[Trace], list[ServiceModel]]:
    """The world synthesized at `world` workers and its servers' models, the same objects
    for the same traces (so that a band's replays share one preparation, _prepared)."""
    key = (_traces_key(traces), world, template_rank) if _reuse_depth else ()
    got = _recall(_SYNTHESIZED, key)
    if got is not None:
        return got
    return _keep(_SYNTHESIZED, key, list(traces),
                 (synthesize_world(traces, world, template_rank), service_models(traces, world)))
