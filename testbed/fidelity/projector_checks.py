"""The projector's input checks and truncation (testbed/fidelity/projector.py).

Everything here runs before the simulation, so a bad trace is an error naming
the host, node or group#seq, never a stalled or silently wrong replay.

Group members: a collective group's members are the ranks whose traces have a
node of it, except "world" (the trace recorder's default group), which has every
worker rank: a worker whose trace lacks a world collective is an error, not a
smaller group. A point-to-point group (`p2p:<tag>:<src>><dst>`) has one send, on
the trace of host src, and one recv, on the trace of host dst, for each seq;
where src or dst is a server replaced by a service model (server_model.py), that
side is the model's and is absent from the traces.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from hosts.common.trace import parse_p2p_group

Trace = tuple[dict[str, Any], list[dict[str, Any]]]
P2P = "p2p"
WORLD = "world"


def is_server(header: dict[str, Any]) -> bool:
    """Server hosts (parameter servers, masters) say so in their trace header."""
    return header.get("role") == "server"


def check_traces(traces: Sequence[Trace]) -> list[int]:
    """The ranks; ValueError for duplicate ranks, disagreeing worlds or malformed nodes."""
    if not traces:
        raise ValueError("project: no traces")
    ranks = [int(h["rank"]) for h, _ in traces]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"project: duplicate ranks {sorted(ranks)}")
    worlds = {int(h["world"]) for h, _ in traces}
    if len(worlds) != 1:
        raise ValueError(f"project: traces disagree on world: {sorted(worlds)}")
    seen: set[int] = set()
    for h, nodes in traces:
        if id(nodes) in seen:          # replicated worlds share one node list: check it once
            continue
        seen.add(id(nodes))
        for i, n in enumerate(nodes):
            if n.get("id") != i:
                raise ValueError(f"trace of {h.get('host')}: node at line {i + 2} has id {n.get('id')}, expected {i}")
            if any(not (isinstance(d, int) and 0 <= d < i) for d in n["deps"]):
                raise ValueError(f"trace of {h.get('host')}: node {i} depends on {n['deps']}: "
                                 f"dependencies must be earlier nodes")
            if n["kind"] not in ("compute", "comm"):
                raise ValueError(f"trace of {h.get('host')}: node {i} has unknown kind {n['kind']!r}")
    return ranks


def group_members(traces: Sequence[Trace], cut: Sequence[list[dict]]) -> dict[str, frozenset]:
    """group -> ranks that take part (module docstring)."""
    groups: dict[str, set] = {}
    for (h, _), nodes in zip(traces, cut):
        for n in _comm(nodes):
            groups.setdefault(n["group"], set()).add(int(h["rank"]))
    if WORLD in groups:
        groups[WORLD] = {int(h["rank"]) for h, _ in traces if not is_server(h)}
    return {g: frozenset(m) for g, m in groups.items()}


def check_comm(traces: Sequence[Trace], cut: Sequence[list[dict]], members: dict[str, frozenset],
               modeled: Iterable[str], cost: Callable[[dict[str, Any], int], Any]) -> None:
    """Every collective is reached by all its members with one op, algo and size, and
    the network model can cost it; every message has its send and its recv (or a
    modeled server on that side) of one size. `cost(node, members)` raises ValueError
    for what the network model does not know."""
    modeled = set(modeled)
    hosts = {str(h["host"]) for h, _ in traces}
    seen: dict[tuple[str, int], tuple] = {}
    count: dict[tuple[str, int], set] = {}
    for (h, _), nodes in zip(traces, cut):
        rank, host = int(h["rank"]), str(h["host"])
        for n in _comm(nodes):
            key = (n["group"], n["seq"])
            if n["algo"] == P2P:
                _check_side(n, host, hosts | modeled, key)
                sig = (n["op"], n["values"], n["value_bytes"])
                side = count.setdefault(key, set())
                if n["op"] in side:
                    raise ValueError(f"message {key[0]}#{key[1]}: two {n['op']} nodes (ranks disagree on seq?)")
                side.add(n["op"])
                other = seen.setdefault(key, sig)
                if other[1:] != sig[1:]:
                    raise ValueError(f"message {key[0]}#{key[1]}: {n['op']} of {sig[1]}x{sig[2]} B on {host}, "
                                     f"{other[0]} of {other[1]}x{other[2]} B on the peer")
                continue
            sig = (n["op"], n["algo"], n["values"], n["value_bytes"])
            if seen.setdefault(key, sig) != sig:
                raise ValueError(f"collective {key[0]}#{key[1]}: rank {rank} has {sig}, another rank {seen[key]}")
            count.setdefault(key, set()).add(rank)
    checked: set[tuple] = set()
    for key, got in count.items():
        group = key[0]
        if group.startswith(P2P + ":"):
            _, src, dst = parse_p2p_group(group)
            need = {"send"} if dst in modeled else {"recv"} if src in modeled else {"send", "recv"}
            if need - got:
                raise ValueError(f"message {group}#{key[1]}: no {'/'.join(sorted(need - got))} node "
                                 f"(truncated or mismatched traces)")
            continue
        missing = members[group] - got
        if missing:
            raise ValueError(f"collective {group}#{key[1]}: ranks {sorted(missing)} never reach it "
                             f"(truncated or mismatched traces)")
        sig = seen[key] + (len(members[group]),)
        if sig not in checked:
            checked.add(sig)
            try:
                cost({"op": sig[0], "algo": sig[1], "values": sig[2], "value_bytes": sig[3]}, sig[4])
            except ValueError as e:
                raise ValueError(f"collective {group}#{key[1]}: {e}") from None


def _check_side(n: dict[str, Any], host: str, known: set[str], key: tuple[str, int]) -> None:
    tag, src, dst = parse_p2p_group(n["group"])
    if n["op"] not in ("send", "recv"):
        raise ValueError(f"message {key[0]}#{key[1]}: op {n['op']!r} on {host} (p2p ops are send and recv)")
    me, peer = (src, dst) if n["op"] == "send" else (dst, src)
    if me != host:
        raise ValueError(f"message {key[0]}#{key[1]}: a {n['op']} node on the trace of {host}")
    if peer not in known:
        raise ValueError(f"message {key[0]}#{key[1]}: peer {peer} has no trace (traced hosts: "
                         f"{', '.join(sorted(known))})")


def _comm(nodes: list[dict]) -> Iterable[dict]:
    return (n for n in nodes if n["kind"] == "comm")


def truncate(traces: Sequence[Trace], max_nodes: int) -> list[list[dict]]:
    """Each rank's first max_nodes nodes, cut before any comm op not every member reached."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    heads = [nodes[:max_nodes] for _, nodes in traces]
    reached: dict[str, dict[int, int]] = {}            # group -> rank -> seqs reached
    for (h, _), nodes in zip(traces, heads):
        for n in _comm(nodes):
            g = reached.setdefault(n["group"], {})
            g[int(h["rank"])] = max(g.get(int(h["rank"]), 0), n["seq"] + 1)
    full = group_members(traces, [nodes for _, nodes in traces])
    if WORLD in full:      # a worker without world collectives: an error, not a cut at #0
        have = {int(h["rank"]) for h, nodes in traces if any(n["kind"] == "comm" and n["group"] == WORLD
                                                             for n in nodes)}
        if full[WORLD] - have:
            raise ValueError(f"collective {WORLD}#0: ranks {sorted(full[WORLD] - have)} never reach it "
                             f"(truncated or mismatched traces)")
    limit = {g: min(by_rank.values()) if len(by_rank) == len(full[g]) else 0
             for g, by_rank in reached.items()}
    out = []
    for nodes in heads:
        end = next((i for i, n in enumerate(nodes) if n["kind"] == "comm" and n["seq"] >= limit[n["group"]]),
                   len(nodes))
        out.append(nodes[:end])
    return out
