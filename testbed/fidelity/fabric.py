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

Links: every NIC has one uplink and one downlink resource. A NIC is a host's,
named by the host unless `nics` maps an endpoint to another's (a process that
shares its host's NIC, e.g. ShadowSync's shadow, traced under a name of its own).
A message between two endpoints on one NIC (a worker and the parameter server on
its own host, PHub's sharded_ps) crosses no link: it is delivered at once, as the
emulation's loopback delivers it in microseconds [A: its memory copy is not
modeled].

Messages (send/recv, `network_model.message_cost`): a transfer takes the
sender's uplink and holds it for `link_busy_s` (its bytes leaving), whatever the
receiver's downlink is doing: the switch buffers what the downlink cannot take
yet (cut-through, an unbounded buffer [A]). The receiver's downlink serializes
the message for `link_busy_s` from when the uplink started it or, when busy,
from when it is free; the message arrives `total_s - link_busy_s` after both
are done (`message_cost` through the switches its path crosses: `switches`, from
the traces' `path_switches`, 1 where absent; collectives likewise,
`paths.collective_switches` of their members' hosts). So a message alone takes
exactly `message_time`; N workers pushing to one server at once queue on the
server's downlink (the k-th is in after k x link_busy_s + the latency), as on
real hardware; and a sender whose receiver is busy is not blocked from sending
to anyone else (holding the uplink until the receiver's downlink frees would
let one slow receiver stall every other message of its senders). The send's
event fires when its bytes are out of the uplink, the recv's when the message
is in.

Collectives share the NICs with messages: a collective holds the uplink and
downlink of every member's NIC for its `link_busy_s` (taken in one global order,
so two collectives never wait on each other in a cycle; messages never hold one
link while waiting for another), so a shadow's allreduce and its trainer's
lookups queue on the same links. Holding every member's links for the busiest
link's time over-charges members whose links are less busy (a PS-based
collective's workers) [A].
`contention=False` gives every collective and message its time in isolation.
"""
from __future__ import annotations

from typing import Any, Callable

import simpy

from testbed.fidelity.constants import HardwareProfile
from testbed.fidelity.network_model import CollectiveCost, collective_cost, finish_after_arrivals, message_cost
from testbed.fidelity.paths import Table, collective_switches, same_host


class Message:
    """One (group, seq) of a p2p group: created by whichever side reaches it first."""
    __slots__ = ("src", "dst", "sent", "delivered")

    def __init__(self, env: simpy.Environment, src: str, dst: str):
        self.src, self.dst = src, dst
        self.sent, self.delivered = env.event(), env.event()


class Fabric:
    def __init__(self, env: simpy.Environment, profile: HardwareProfile, contention: bool = True,
                 switches: Table | None = None, hosts: dict[int, str] | None = None,
                 nics: dict[str, str] | None = None):
        self.env, self.profile, self.contention = env, profile, contention
        # (src, dst) -> switches on the path (paths.path_switches); absent pairs: 1
        self.switches = dict(switches or {})
        self.hosts = dict(hosts or {})       # rank -> host: a collective's paths
        self.nics = dict(nics or {})         # endpoint -> the host whose NIC it uses (absent: its own)
        self._costs: dict[tuple, CollectiveCost] = {}
        self._path_switches: dict[tuple, int] = {}     # (algo, ranks) -> switches: one pass per group
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
        if not self.switches:           # no path table: every path one switch (paths.py)
            return 1
        key = (algo, tuple(ranks))
        k = self._path_switches.get(key)
        if k is None:
            k = self._path_switches[key] = collective_switches(algo, [self.hosts.get(r, "") for r in ranks],
                                                               self.switches)
        return k

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
        last joins), later by however long its members' links were held by
        other traffic (messages, other collectives)."""
        ranks = sorted(arrivals)               # ring order = rank order, as the monitor takes it
        k = self.collective_switches(node["algo"], ranks)
        c = self.collective_cost(node, len(members), k)
        last = self.env.now
        finish = finish_after_arrivals(node["op"], node["algo"], int(node["values"]),
                                       int(node["value_bytes"]), [arrivals[r] for r in ranks],
                                       self.profile, bool(node.get("scale_round")), k)
        remaining = {r: max(0.0, f - last) for r, f in zip(ranks, finish)}
        if self.contention and c.link_busy_s > 0:
            # every member NIC's uplink and downlink, in one global order (no wait cycles)
            nics = sorted({self.nic(self.hosts.get(r, f"rank{r}")) for r in members})
            links = [self._link(d, n) for n in nics for d in (self._up, self._down)]
            held = []
            try:
                for link in links:
                    req = link.request()
                    held.append((link, req))
                    yield req
                self.env.process(self._finish(done, remaining))
                yield self.env.timeout(c.link_busy_s)
            finally:
                for link, req in held:
                    link.release(req)
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
        if same_host(msg.src, msg.dst, self.nics):        # one host: no link, no switch
            yield self.env.timeout(0)
            msg.sent.succeed()
            msg.delivered.succeed()
            if self.on_delivered is not None:
                self.on_delivered(msg, node)
            return
        c = self.message_cost(int(node["values"]) * int(node["value_bytes"]),
                              self.switches.get((msg.src, msg.dst), 1))
        if self.contention and c.link_busy_s > 0:
            up = self._link(self._up, self.nic(msg.src))
            with up.request() as a:
                yield a
                # the downlink takes the bytes as they come, or from the switch's buffer
                # once it is free; the uplink is not held for it (module docstring)
                into = self.env.process(self._downlink(self.nic(msg.dst), c.link_busy_s))
                yield self.env.timeout(c.link_busy_s)
            msg.sent.succeed()
            yield into
        else:
            yield self.env.timeout(c.link_busy_s)
            msg.sent.succeed()
        yield self.env.timeout(c.total_s - c.link_busy_s)
        msg.delivered.succeed()
        if self.on_delivered is not None:
            self.on_delivered(msg, node)

    def _downlink(self, nic: str, busy_s: float):
        with self._link(self._down, nic).request() as b:
            yield b
            yield self.env.timeout(busy_s)

    def nic(self, endpoint: str) -> str:
        """The host whose NIC `endpoint`'s messages use (module docstring)."""
        return self.nics.get(endpoint, endpoint)

    def _link(self, links: dict[str, simpy.Resource], host: str) -> simpy.Resource:
        r = links.get(host)
        if r is None:
            r = links[host] = simpy.Resource(self.env, capacity=1)
        return r
