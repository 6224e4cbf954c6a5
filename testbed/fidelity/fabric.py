"""The projector's network on SimPy: collectives and point-to-point messages.

Collectives (allreduce, allgather) are costed by `network_model.collective_cost`
with their own group's member count. The collectives of one member set share
one fabric resource: a collective holds it for its `link_busy_s` (the time its
busiest link is serializing), then waits the rest of its time (latency,
reduction) without it; each member has its result at its own
`finish_after_arrivals` (the same arrival-aware measure as the monitor's). One
collective whose members arrive together takes exactly `collective_time`;
two overlapping bandwidth-bound ones take about the sum of their serialization,
as on a shared link; latency-bound ones overlap almost freely.

Messages (send/recv, `network_model.message_cost`): every host has one uplink
and one downlink resource. A transfer takes the sender's uplink, then the
receiver's downlink (always in that order, so no two transfers wait on each
other in a cycle), holds both for `link_busy_s`, then releases them and
arrives `total_s - link_busy_s` later (`message_cost` through the switches its
path crosses: `switches`, from the traces' `path_switches`, 1 where absent;
collectives likewise, `paths.collective_switches` of their members' hosts). So a message alone takes exactly
`message_time`, and N workers pushing to one server at once queue on the
server's downlink (the k-th is in after k x link_busy_s + the latency), as
on real hardware. The send's event fires when its bytes are out (serialization
done), the recv's when the message is in.

Collectives and messages do not share links with each other (a job mixing
them on the same hosts at the same time is projected optimistically).
`contention=False` gives every collective and message its time in isolation.
"""
from __future__ import annotations

from typing import Any, Callable

import simpy

from testbed.fidelity.constants import HardwareProfile
from testbed.fidelity.network_model import CollectiveCost, collective_cost, finish_after_arrivals, message_cost
from testbed.fidelity.paths import Table, collective_switches


class Message:
    """One (group, seq) of a p2p group: created by whichever side reaches it first."""
    __slots__ = ("src", "dst", "sent", "delivered")

    def __init__(self, env: simpy.Environment, src: str, dst: str):
        self.src, self.dst = src, dst
        self.sent, self.delivered = env.event(), env.event()


class Fabric:
    def __init__(self, env: simpy.Environment, profile: HardwareProfile, contention: bool = True,
                 switches: Table | None = None, hosts: dict[int, str] | None = None):
        self.env, self.profile, self.contention = env, profile, contention
        # (src, dst) -> switches on the path (paths.path_switches); absent pairs: 1
        self.switches = dict(switches or {})
        self.hosts = dict(hosts or {})       # rank -> host: a collective's paths
        self._costs: dict[tuple, CollectiveCost] = {}
        self._shared: dict[frozenset, simpy.Resource] = {}
        self._up: dict[str, simpy.Resource] = {}
        self._down: dict[str, simpy.Resource] = {}
        self.on_delivered: Callable[[Message, dict[str, Any]], None] | None = None

    def collective_cost(self, node: dict[str, Any], members: int, switches: int = 1) -> CollectiveCost:
        key = (node["op"], node["algo"], int(node["values"]), int(node["value_bytes"]), members,
               bool(node.get("scale_round")), switches)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = collective_cost(*key[:5], self.profile, key[5], key[6])
        return c

    def collective_switches(self, algo: str, ranks: list[int]) -> int:
        return collective_switches(algo, [self.hosts.get(r, "") for r in ranks], self.switches)

    def message_cost(self, nbytes: int, switches: int = 1) -> CollectiveCost:
        key = ("p2p", nbytes, switches)
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = message_cost(nbytes, self.profile, switches)
        return c

    def collective(self, node: dict[str, Any], members: frozenset, arrivals: dict[int, float],
                   done: dict[int, simpy.Event]):
        """Started at the last member's arrival; member r's `done[r]` fires
        when it has its result: `finish_after_arrivals` given when each member
        arrived (in a ring the early members' first steps are done before the
        last joins), later by however long the shared link was held by
        another collective of the same members."""
        ranks = sorted(arrivals)               # ring order = rank order, as the monitor takes it
        k = self.collective_switches(node["algo"], ranks)
        c = self.collective_cost(node, len(members), k)
        last = self.env.now
        finish = finish_after_arrivals(node["op"], node["algo"], int(node["values"]),
                                       int(node["value_bytes"]), [arrivals[r] for r in ranks],
                                       self.profile, bool(node.get("scale_round")), k)
        remaining = {r: max(0.0, f - last) for r, f in zip(ranks, finish)}
        if self.contention and c.link_busy_s > 0:
            link = self._shared.setdefault(members, simpy.Resource(self.env, capacity=1))
            with link.request() as req:
                yield req
                self.env.process(self._finish(done, remaining))
                yield self.env.timeout(c.link_busy_s)
        else:
            yield from self._finish(done, remaining)

    def _finish(self, done: dict[int, simpy.Event], remaining: dict[int, float]):
        """Fire each member's event `remaining[r]` after now, earliest first."""
        start = self.env.now
        for r in sorted(remaining, key=remaining.get):
            wait = start + remaining[r] - self.env.now
            if wait > 0:
                yield self.env.timeout(wait)
            done[r].succeed()

    def transfer(self, msg: Message, node: dict[str, Any]):
        """The bytes of a send node crossing the network (module docstring)."""
        c = self.message_cost(int(node["values"]) * int(node["value_bytes"]),
                              self.switches.get((msg.src, msg.dst), 1))
        if self.contention and c.link_busy_s > 0:
            up, down = self._link(self._up, msg.src), self._link(self._down, msg.dst)
            with up.request() as a:
                yield a
                with down.request() as b:
                    yield b
                    yield self.env.timeout(c.link_busy_s)
        else:
            yield self.env.timeout(c.link_busy_s)
        msg.sent.succeed()
        yield self.env.timeout(c.total_s - c.link_busy_s)
        msg.delivered.succeed()
        if self.on_delivered is not None:
            self.on_delivered(msg, node)

    def _link(self, links: dict[str, simpy.Resource], host: str) -> simpy.Resource:
        r = links.get(host)
        if r is None:
            r = links[host] = simpy.Resource(self.env, capacity=1)
        return r
