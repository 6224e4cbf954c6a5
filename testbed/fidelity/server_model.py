"""Projecting a job with servers (parameter servers, masters) at another worker count.

A server's recorded trace is its answer to the recorded workers; at 2x the
workers it would have served 2x the messages, so it cannot be replayed. Instead
(`project_world`):

Workers: the template worker's trace is replicated to `world` ranks,
  `projected0..projected<world-1>`. Its point-to-point groups are renamed per
  replica: a server keeps its name; a worker peer at recorded worker index j is,
  for replica r of template index t, `projected<(j - t + r) mod world>` (so a
  ring neighbour stays a neighbour). Collective groups keep their names.

Servers: each server trace (header role "server") becomes a service model:
  * service time per request tag: the server's modeled compute (hw_s) after a
    recv of that tag, up to the next recv, summed over the trace and divided by
    the number of recvs of that tag (the mean). Not the median of each recv's
    own compute: a server that aggregates (recv from every worker, then one sum,
    then the replies) records all its work after the last recv of a round, and
    the median would call that work free. Compute before the first recv
    (setup) is not charged.
  * reply: the recorded server's sends are paired with the earliest unanswered
    recv from the same peer; a tag whose recvs were all answered gets a reply of
    the recorded reply tag (sized as the worker's recv node of that (group,
    seq), else as recorded); a tag never answered gets none; answering only some
    is refused (the model cannot tell which). A server whose clients send both
    requests that are answered and messages that never are (an embedding PS:
    lookups and fire-and-forget pushes on one connection) names the latter in its
    header (`unanswered_tags`); they are left out of the pairing, else a reply
    would be paired with an older push of the same peer.
  * order: every message the server receives is served first come first served
    (by arrival), or, when the server's header says `serve_order:
    "round_robin"`, in worker rank order (the server waits for worker 0's next
    message, then worker 1's, ..., as a loop over sockets does).
  Serving a message occupies the server for its tag's service time, then the
  reply is sent (fabric.py: it queues on the server's uplink, so replies to N
  workers serialize there).
  * replies: by default each message is answered once it is served. A server
    whose header says `reply_after: "all"` aggregates: the k-th message of a
    tag from every worker that sends that tag is one round, and the round's
    replies (one per sender, in worker rank order) leave only once the last of
    them is served (PHub's tall aggregation answers a chunk when all N copies
    are in; a plain PS answers a tensor when every worker pushed it).
  Server compute the model does not attribute (setup), messages a server sends
  unasked and server-to-server messages are not projected.

  * cores: a server whose header says `cores: K` (K > 1) runs K cores in
    parallel (PHub: each core owns a fixed share of the chunks; chunk id mod K
    there), and every node of its trace carries `core` (0..K-1). Each request tag
    is served by one core, the core of its recv nodes (a tag seen on two cores
    is refused); a core is its own queue (first come first served, or round
    robin over its own senders), with its own service time per tag; replies are
    paired with requests of the same core, and the aggregation barrier
    (`reply_after: "all"`) holds per tag, so per core. Without `cores` the
    server is one core.

More servers than recorded (`respread_messages`, `respread_service_models`): a
workload whose servers hold shards (an embedding PS's tables, a slice of a dense
vector) can project them re-spread over more servers: each run of a worker's
messages to every old shard becomes one message per new server sized by its
share, and each new server serves like the old ones, its service time scaled by
its share (the old servers held equal shares [A]).

At the recorded worker count, the service model replays a first come first
served server within the spread of its recorded compute (tested).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import simpy

from hosts.common.trace import p2p_group, parse_p2p_group
from testbed.fidelity.fabric import Fabric, Message
from testbed.fidelity.projector_checks import P2P, Trace, is_server

SERVE_ORDERS = ("fcfs", "round_robin")
REPLY_AFTER = ("each", "all")


@dataclass(frozen=True)
class Reply:
    tag: str
    values: int
    value_bytes: int


@dataclass
class ServiceModel:
    host: str
    rank: int
    order: str
    service_s: dict[str, float]                         # request tag -> seconds per message
    replies: dict[str, Reply] = field(default_factory=dict)   # request tag -> its reply
    reply_after: str = "each"                          # "all": reply once every worker's k-th is in
    cores: int = 1                                     # cores serving in parallel, one queue each
    core_of: dict[str, int] = field(default_factory=dict)    # request tag -> its core (cores > 1)

    def lane(self, tag: str) -> int:
        """The core that serves `tag` (0 on a one-core server)."""
        return self.core_of.get(tag, 0)


def node_core(header: dict[str, Any], node: dict[str, Any]) -> int:
    """The core a node of a multi-core trace ran on (module docstring: cores);
    0 on a one-core trace. ValueError names the node without a valid one."""
    cores = int(header.get("cores", 1))
    if cores <= 1:
        return 0
    c = node.get("core")
    if not (isinstance(c, int) and 0 <= c < cores):
        raise ValueError(f"trace of {header.get('host')}: node {node.get('id')} has core {c!r}; "
                         f"a trace of cores: {cores} needs core 0..{cores - 1} on every node")
    return c


def service_model(header: dict[str, Any], nodes: list[dict[str, Any]], rank: int) -> ServiceModel:
    """The service model of one recorded server trace (module docstring)."""
    host = str(header["host"])
    order = header.get("serve_order", "fcfs")
    if order not in SERVE_ORDERS:
        raise ValueError(f"trace of {host}: serve_order {order!r} (known: {', '.join(SERVE_ORDERS)})")
    reply_after = header.get("reply_after", "each")
    if reply_after not in REPLY_AFTER:
        raise ValueError(f"trace of {host}: reply_after {reply_after!r} (known: {', '.join(REPLY_AFTER)})")
    cores = int(header.get("cores", 1))
    if cores < 1:
        raise ValueError(f"trace of {host}: cores {cores} (a server has at least one)")
    busy: dict[str, float] = defaultdict(float)
    count: Counter = Counter()
    # (peer, core) -> request tags, oldest first: a core answers its own requests
    unanswered: dict[tuple[str, int], list[str]] = defaultdict(list)
    never = set(header.get("unanswered_tags", ()))             # tags the server never answers
    answers: dict[str, Counter] = defaultdict(Counter)        # request tag -> Counter(Reply)
    current: dict[int, str] = {}                               # core -> tag it is serving
    core_of: dict[str, int] = {}
    for n in nodes:
        core = node_core(header, n)
        if n["kind"] == "compute":
            if core in current:
                busy[current[core]] += float(n["hw_s"])
        elif n["algo"] == P2P:
            tag, src, dst = parse_p2p_group(n["group"])
            if n["op"] == "recv":
                if core_of.setdefault(tag, core) != core:
                    raise ValueError(f"trace of {host}: {tag!r} messages received on cores {core_of[tag]} "
                                     f"and {core} (the model serves a tag on one core)")
                current[core] = tag
                count[tag] += 1
                if tag not in never:
                    unanswered[(src, core)].append(tag)
            elif unanswered[(dst, core)]:
                answers[unanswered[(dst, core)].pop(0)][Reply(tag, int(n["values"]), int(n["value_bytes"]))] += 1
    replies = {}
    for tag, got in answers.items():
        n_answered = sum(got.values())
        if n_answered != count[tag]:
            raise ValueError(f"trace of {host}: answered {n_answered} of {count[tag]} {tag!r} messages; "
                             f"the service model needs a reply to every message of a tag or to none")
        replies[tag] = got.most_common(1)[0][0]
    if not count:
        raise ValueError(f"trace of {host}: a server that received no message (nothing to model)")
    return ServiceModel(host, rank, order, {t: busy[t] / count[t] for t in count}, replies, reply_after,
                        cores, core_of if cores > 1 else {})


def synthesize_workers(traces: Sequence[Trace], world: int, template_rank: int = 0,
                       more_servers: Iterable[str] = ()) -> list[Trace]:
    """`world` workers, each the template worker's nodes with its p2p groups renamed
    (module docstring); compute nodes are shared, read-only. more_servers: server
    names with no trace that keep their name too (servers added by respread_messages)."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    workers = sorted((t for t in traces if not is_server(t[0])), key=lambda t: int(t[0]["rank"]))
    servers = {str(h["host"]) for h, _ in traces if is_server(h)} | set(more_servers)
    index = {str(h["host"]): i for i, (h, _) in enumerate(workers)}
    template = next((t for t in workers if int(t[0]["rank"]) == template_rank), None)
    if template is None:
        raise ValueError(f"no worker trace of rank {template_rank} to use as template "
                         f"(worker ranks: {sorted(int(h['rank']) for h, _ in workers)})")
    header, nodes = template
    t = index[str(header["host"])]
    recorded = int(header.get("recorded_world", len(workers) if servers else header["world"]))
    p2p = [i for i, n in enumerate(nodes) if n["kind"] == "comm" and n["algo"] == P2P]
    out = []
    for r in range(world):
        def name(h: str) -> str:
            if h in servers:
                return h
            if h not in index:
                raise ValueError(f"trace of {header['host']}: peer {h} has no trace")
            return f"projected{(index[h] - t + r) % world}"
        mine = list(nodes) if p2p else nodes
        for i in p2p:
            tag, src, dst = parse_p2p_group(nodes[i]["group"])
            mine[i] = {**nodes[i], "group": p2p_group(tag, name(src), name(dst)),
                       "peer": name(str(nodes[i]["peer"]))}
        out.append(({**header, "rank": r, "host": f"projected{r}", "world": world,
                     "recorded_world": recorded}, mine))
    return out


def respread_messages(nodes: Sequence[dict[str, Any]], old: Sequence[str], shares: dict[str, float]
                      ) -> list[dict[str, Any]]:
    """A worker's program with the messages it exchanges with the sharded servers `old`
    re-spread over the servers of `shares` (name -> share of the data, summing to 1):
    projecting with more (or fewer) parameter servers than were recorded.

    A run of consecutive p2p nodes whose peer is in `old` (a lookup fanned out to every
    shard, a push to every shard) must hold the same pattern of (op, tag) per server and
    reach every server of `old`; it is replaced by that pattern once per new server, each
    message sized share x the run's total for its (op, tag) (at least 1 value). Node ids,
    dependencies (a node that depended on a replaced one depends on all its copies) and
    the seqs of the renamed groups are renumbered; everything else is unchanged. ValueError
    names a run that cannot be re-spread."""
    old_set, out, ids = set(old), [], {}
    seqs: Counter = Counter()

    def add(node: dict[str, Any], was: list[int]) -> None:
        deps = sorted({d for x in node["deps"] for d in ids[x]})
        n = {**node, "id": len(out), "deps": deps}
        if n["kind"] == "comm" and n["algo"] == P2P:
            tag, src, dst = parse_p2p_group(n["group"])
            if src in shares or dst in shares:         # a group this function (re)names
                n["seq"] = seqs[n["group"]]
                seqs[n["group"]] += 1
        for i in was:
            ids.setdefault(i, []).append(n["id"])
        out.append(n)

    def peer(n: dict[str, Any]) -> str | None:
        return str(n["peer"]) if n["kind"] == "comm" and n["algo"] == P2P else None

    i = 0
    while i < len(nodes):
        if peer(nodes[i]) not in old_set:
            add(nodes[i], [nodes[i]["id"]])
            i += 1
            continue
        j = i
        while j < len(nodes) and peer(nodes[j]) in old_set:
            j += 1
        run = nodes[i:j]
        by_server: dict[str, list[dict]] = defaultdict(list)
        for n in run:
            by_server[peer(n)].append(n)
        pattern = [(n["op"], parse_p2p_group(n["group"])[0]) for n in by_server[peer(run[0])]]
        if set(by_server) != old_set or any([(n["op"], parse_p2p_group(n["group"])[0]) for n in ns] != pattern
                                            for ns in by_server.values()):
            raise ValueError(f"nodes {i}..{j - 1}: messages to {sorted(by_server)} (of servers {sorted(old_set)}) "
                             f"are not one pattern per server; cannot re-spread them")
        total: Counter = Counter()
        for n in run:
            total[(n["op"], parse_p2p_group(n["group"])[0])] += int(n["values"])
        _, src0, dst0 = parse_p2p_group(run[0]["group"])
        me = src0 if run[0]["op"] == "send" else dst0
        for s, share in shares.items():
            for k, (op, tag) in enumerate(pattern):
                tmpl = by_server[peer(run[0])][k]
                was = [ns[k]["id"] for ns in by_server.values()]
                src, dst = (me, s) if op == "send" else (s, me)
                add({**tmpl, "group": p2p_group(tag, src, dst), "peer": s,
                     "values": max(1, int(round(total[(op, tag)] * share)))}, was)
        i = j
    return out


def respread_service_models(models: Sequence[ServiceModel], old: Sequence[str], shares: dict[str, float],
                            first_rank: int) -> list[ServiceModel]:
    """Service models of the servers of `shares` replacing the models of `old` (whose
    shards they re-spread, respread_messages): each serves like the old ones (their
    order, replies and reply rule, which must agree), its service time per message the
    old servers' mean scaled by its share over an old server's (1/len(old): the old
    servers held equal shares [A]). Models of other servers keep theirs, ranks renumbered
    from first_rank: the others first, then the new ones."""
    mine = [m for m in models if m.host in set(old)]
    if len(mine) != len(old):
        raise ValueError(f"respread: servers {sorted(set(old) - {m.host for m in mine})} have no service model")
    kinds = {(m.order, m.reply_after, tuple(sorted(m.replies.items()))) for m in mine}
    if len(kinds) != 1:
        raise ValueError(f"respread: servers {list(old)} serve differently (order, replies); cannot merge them")
    tags = set().union(*(m.service_s for m in mine))
    mean = {t: sum(m.service_s.get(t, 0.0) for m in mine) / len(mine) for t in tags}
    rest = [m for m in models if m.host not in set(old)]
    out = [ServiceModel(m.host, first_rank + k, m.order, m.service_s, m.replies, m.reply_after)
           for k, m in enumerate(rest)]
    t = mine[0]
    for k, (host, share) in enumerate(shares.items()):
        out.append(ServiceModel(host, first_rank + len(rest) + k, t.order,
                                {tag: s * share * len(old) for tag, s in mean.items()}, dict(t.replies),
                                t.reply_after))
    return out


def service_models(traces: Sequence[Trace], first_rank: int) -> list[ServiceModel]:
    """One model per server trace, ranked after the workers from `first_rank`."""
    servers = sorted((t for t in traces if is_server(t[0])), key=lambda t: int(t[0]["rank"]))
    return [service_model(h, nodes, first_rank + i) for i, (h, nodes) in enumerate(servers)]


class Server:
    """A service model running in the projection: serves `expected` messages, then ends.
    Each core (lane) is its own queue and process; one-core servers have lane 0."""

    def __init__(self, env: simpy.Environment, model: ServiceModel, fabric: Fabric,
                 message: Any, workers: list[str], expected: Counter, recv_nodes: dict[tuple, dict]):
        self.env, self.model, self.fabric, self.message = env, model, fabric, message
        self.expected, self.recv_nodes = expected, recv_nodes      # (worker, lane) -> messages
        lanes = sorted({lane for _, lane in expected})
        self.order = {lane: [w for w in workers if expected[(w, lane)]] for lane in lanes}
        self.fifo = {lane: simpy.Store(env) for lane in lanes}
        self.by_peer = {(w, lane): simpy.Store(env) for lane in lanes for w in self.order[lane]}
        self.workers = workers
        self.reply_seq: Counter = Counter()
        self.lane_busy: Counter = Counter()
        # reply_after "all": per tag, the workers that send it, messages served per
        # (worker, tag), and each round's served senders waiting for the rest
        self._senders: dict[str, set[str]] | None = None     # senders_by_tag, when a round first needs it
        self.served: Counter = Counter()
        self.waiting: dict[tuple[str, int], list[str]] = defaultdict(list)

    @property
    def busy_s(self) -> float:
        """The busiest core's service time (the cores work in parallel)."""
        return max(self.lane_busy.values(), default=0.0)

    def arrive(self, msg: Message, node: dict[str, Any]) -> None:
        tag, _, _ = parse_p2p_group(node["group"])     # known: expected_messages checked it
        item = (msg.src, tag)
        lane = self.model.lane(tag)
        (self.by_peer[(msg.src, lane)] if self.model.order == "round_robin" else self.fifo[lane]).put(item)

    def run(self):
        lanes = [self.env.process(self.run_lane(lane)) for lane in self.fifo]
        if lanes:
            yield self.env.all_of(lanes)

    def run_lane(self, lane: int):
        remaining = Counter({w: n for (w, ln), n in self.expected.items() if ln == lane})
        while sum(remaining.values()):
            if self.model.order == "round_robin":
                for w in self.order[lane]:
                    if remaining[w]:
                        remaining[w] -= 1
                        yield from self.serve((yield self.by_peer[(w, lane)].get()), lane)
            else:
                item = yield self.fifo[lane].get()
                remaining[item[0]] -= 1
                yield from self.serve(item, lane)

    def serve(self, item: tuple[str, str], lane: int = 0):
        src, tag = item
        d = self.model.service_s[tag]
        yield self.env.timeout(d)
        self.lane_busy[lane] += d
        reply = self.model.replies.get(tag)
        if reply is None:
            return
        if self.model.reply_after == "each":
            self.send_reply(reply, src)
            return
        k = self.served[(src, tag)]
        self.served[(src, tag)] += 1
        round_ = self.waiting[(tag, k)]
        round_.append(src)
        if self._senders is None:       # a scan of every message: only servers that reply per round
            self._senders = senders_by_tag(self.model, self.recv_nodes)
        if len(round_) == len(self._senders[tag]):      # the last copy is in: the round's replies
            del self.waiting[(tag, k)]
            for w in sorted(round_, key=self.workers.index):
                self.send_reply(reply, w)

    def send_reply(self, reply: Reply, src: str) -> None:
        group = p2p_group(reply.tag, self.model.host, src)
        seq = self.reply_seq[group]
        self.reply_seq[group] += 1
        recv = self.recv_nodes.get((group, seq))
        node = {"group": group, "seq": seq, "values": recv["values"] if recv else reply.values,
                "value_bytes": recv["value_bytes"] if recv else reply.value_bytes}
        self.env.process(self.fabric.transfer(self.message(node), node))


def senders_by_tag(model: ServiceModel, recv_nodes: dict[tuple, dict]) -> dict[str, set[str]]:
    """request tag -> the workers that send it (they are the ones receiving its
    reply: every sender of an answered tag gets one), from the workers' recv nodes."""
    out: dict[str, set[str]] = defaultdict(set)
    by_reply = defaultdict(list)
    for tag, reply in model.replies.items():
        by_reply[reply.tag].append(tag)
    for group, _ in recv_nodes:
        tag, src, dst = parse_p2p_group(group)
        if src == model.host:
            for request in by_reply.get(tag, ()):
                out[request].add(dst)
    return out


def expected_messages(workers: Sequence[Trace], cut: Sequence[list[dict]], servers: Sequence[ServiceModel]
                      ) -> dict[str, Counter]:
    """server host -> Counter((worker host, core) -> messages it sends that server's
    core), with every tag checked against the server's model; ValueError names an
    unknown tag."""
    models = {s.host: s for s in servers}
    out: dict[str, Counter] = {s.host: Counter() for s in servers}
    for (h, _), nodes in zip(workers, cut):
        for n in nodes:
            if n["kind"] == "comm" and n["algo"] == P2P and n["op"] == "send":
                tag, src, dst = parse_p2p_group(n["group"])
                if dst in models:
                    if tag not in models[dst].service_s:
                        raise ValueError(f"message {n['group']}#{n['seq']}: server {dst} never received a "
                                         f"{tag!r} message in its recorded trace (no service time)")
                    out[dst][(src, models[dst].lane(tag))] += 1
    return out
