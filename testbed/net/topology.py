"""Pure planning of the emulated topology: names, addresses, ports, L2 tables.

Nothing here touches the system, so every rule can be unit-tested.

Addressing (the contract in docs/architecture.md):
- worker ``w<i>`` = 10.0.0.<i>, ``ps`` = 10.0.0.200; any other extra host takes
  10.0.0.201, .202, ... in the order given; the switch virtual IP is 10.0.0.254.
- host MAC = ``00:00:00:00:00:<last octet of its IP, hex>`` (Mininet's
  autoSetMacs convention: w1 -> 00:00:00:00:00:01, ps -> 00:00:00:00:00:c8),
  so a MAC in a pcap names its host at a glance.
- switch virtual MAC (answers for 10.0.0.254, used by in-network aggregation)
  = 02:00:00:00:00:fe (locally administered, never a host's).
- switch port MAC = ``02:00:00:00:<switch no, hex>:<port, hex>``.

Ports are explicit so the testbed, not the switch, decides the forwarding table:
- star: s1 port i = the i-th host in the host list (workers first, then extras).
- tree: spine s1, leaves s2..s(L+1). Workers are spread over the leaves in
  contiguous blocks (the first W mod L leaves get one more). A leaf's ports are
  its hosts in order (1..k) and then its uplink (k+1). The spine's port j goes
  to leaf s(j+1) (j = 1..L); extra hosts (ps, ...) hang off the spine after them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

SUBNET_PREFIX = "10.0.0."
PREFIX_LEN = 24
SWITCH_VIP = "10.0.0.254"
SWITCH_VIP_MAC = "02:00:00:00:00:fe"
EXTRA_HOST_OCTETS = {"ps": 200}
FIRST_OTHER_EXTRA_OCTET = 201
LAST_HOST_OCTET = 253  # .254 is the switch, .255 broadcast

_WORKER_RE = re.compile(r"^w([1-9][0-9]*)$")


class TopologyError(ValueError):
    """A topology the testbed cannot build (message says what and how to fix)."""


@dataclass(frozen=True)
class HostAddr:
    name: str
    ip: str
    mac: str


@dataclass(frozen=True)
class LinkPlan:
    """One cable. ``node1`` is a host for access links; ports are switch ports
    (a host's own port is always 0, i.e. ``<host>-eth0``)."""

    node1: str
    port1: int
    node2: str
    port2: int

    @property
    def name(self) -> str:
        return f"{self.node1}-{self.node2}"


@dataclass
class TopologyPlan:
    kind: str
    hosts: list[HostAddr]
    switches: list[str]
    links: list[LinkPlan]
    host_switch: dict[str, str] = field(default_factory=dict)  # host -> switch it hangs off

    def host(self, name: str) -> HostAddr:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def is_host(self, name: str) -> bool:
        return name in self.host_switch

    def switch_ports(self, switch: str) -> dict[int, str]:
        """port -> the node at the other end of the cable."""
        ports: dict[int, str] = {}
        for ln in self.links:
            if ln.node1 == switch:
                ports[ln.port1] = ln.node2
            if ln.node2 == switch:
                ports[ln.port2] = ln.node1
        return dict(sorted(ports.items()))

    def inter_switch_ports(self, switch: str) -> list[int]:
        """Ports of `switch` cabled to another switch (the soft switch's delay line
        charges a frame from or to one as a tree hop, not a host's hop)."""
        return [p for p, node in self.switch_ports(switch).items() if node in self.switches]

    def path_switches(self) -> dict[str, dict[str, int]]:
        """src host -> dst host -> switches a frame between them crosses (star: 1;
        tree: 1 within a leaf, 2 between a leaf and the spine, 3 leaf to leaf)."""
        adj: dict[str, list[str]] = {sw: [] for sw in self.switches}
        for ln in self.links:
            if ln.node1 in adj and ln.node2 in adj:
                adj[ln.node1].append(ln.node2)
                adj[ln.node2].append(ln.node1)
        hops: dict[str, dict[str, int]] = {}     # switch -> switch -> cables between them
        for sw in self.switches:
            dist, frontier = {sw: 0}, [sw]
            while frontier:                      # breadth first: the tree's only path
                nxt = []
                for node in frontier:
                    for nb in adj[node]:
                        if nb not in dist:
                            dist[nb] = dist[node] + 1
                            nxt.append(nb)
                frontier = nxt
            hops[sw] = dist
        table: dict[str, dict[str, int]] = {}
        for a, sa in self.host_switch.items():
            table[a] = {b: hops[sa][sb] + 1 for b, sb in self.host_switch.items() if b != a}
        return table


def worker_index(name: str) -> int | None:
    m = _WORKER_RE.match(name)
    return int(m.group(1)) if m else None


def host_octets(hosts: list[str]) -> dict[str, int]:
    """Last IPv4 octet of every host (see the module doc for the scheme)."""
    out: dict[str, int] = {}
    nxt = FIRST_OTHER_EXTRA_OCTET
    for h in hosts:
        if h in out:
            raise TopologyError(f"host {h!r} is listed twice")
        i = worker_index(h)
        if i is not None:
            if i >= EXTRA_HOST_OCTETS["ps"]:
                raise TopologyError(f"{h}: at most 199 workers (w<i> = 10.0.0.<i>, 10.0.0.200 is ps)")
            out[h] = i
        elif h in EXTRA_HOST_OCTETS:
            out[h] = EXTRA_HOST_OCTETS[h]
        else:
            if nxt > LAST_HOST_OCTET:
                raise TopologyError(f"{h}: no address left for extra hosts (10.0.0.201-253 used up)")
            out[h] = nxt
            nxt += 1
    return out


def mac_for_octet(octet: int) -> str:
    return f"00:00:00:00:00:{octet:02x}"


def switch_port_mac(switch: str, port: int) -> str:
    return f"02:00:00:00:{int(switch[1:]):02x}:{port:02x}"


def addresses(hosts: list[str]) -> list[HostAddr]:
    octs = host_octets(hosts)
    return [HostAddr(h, f"{SUBNET_PREFIX}{octs[h]}", mac_for_octet(octs[h])) for h in hosts]


def split_workers(workers: list[str], leaves: int) -> list[list[str]]:
    """Contiguous blocks, sizes differing by at most one (larger blocks first)."""
    base, extra = divmod(len(workers), leaves)
    blocks, i = [], 0
    for leaf in range(leaves):
        n = base + (1 if leaf < extra else 0)
        blocks.append(workers[i:i + n])
        i += n
    return blocks


def plan_topology(kind: str, hosts: list[str], leaves: int = 1) -> TopologyPlan:
    """Switches, cables and port numbers for ``hosts`` (workers w<i> + extras)."""
    addrs = addresses(hosts)
    workers = [h for h in hosts if worker_index(h) is not None]
    extras = [h for h in hosts if worker_index(h) is None]
    links: list[LinkPlan] = []
    host_switch: dict[str, str] = {}
    if kind == "star":
        switches = ["s1"]
        for port, h in enumerate(workers + extras, start=1):
            links.append(LinkPlan(h, 0, "s1", port))
            host_switch[h] = "s1"
    elif kind == "tree":
        if leaves < 1:
            raise TopologyError(f"tree: leaves must be >= 1 (got {leaves})")
        if leaves > len(workers):
            raise TopologyError(f"tree: {leaves} leaves but only {len(workers)} workers; "
                                f"set topology.leaves <= topology.workers")
        leaf_names = [f"s{j + 2}" for j in range(leaves)]
        switches = ["s1", *leaf_names]
        for leaf, block in zip(leaf_names, split_workers(workers, leaves)):
            for port, h in enumerate(block, start=1):
                links.append(LinkPlan(h, 0, leaf, port))
                host_switch[h] = leaf
        for j, leaf in enumerate(leaf_names, start=1):
            uplink = sum(1 for ln in links if ln.node2 == leaf) + 1
            links.append(LinkPlan(leaf, uplink, "s1", j))
        for port, h in enumerate(extras, start=leaves + 1):
            links.append(LinkPlan(h, 0, "s1", port))
            host_switch[h] = "s1"
    else:
        raise TopologyError(f"unknown topology kind {kind!r}; use star or tree")
    return TopologyPlan(kind, addrs, switches, links, host_switch)


def _next_hops(plan: TopologyPlan, switch: str) -> dict[str, int]:
    """For every node reachable from ``switch``: the local port leading to it.

    A breadth-first walk over the cable graph; the graph is a tree, so the
    port of the first hop is the only way there.
    """
    adj: dict[str, list[tuple[str, int]]] = {}
    for ln in plan.links:
        adj.setdefault(ln.node1, []).append((ln.node2, ln.port1))
        adj.setdefault(ln.node2, []).append((ln.node1, ln.port2))
    out: dict[str, int] = {}
    frontier = [(nb, port) for nb, port in adj.get(switch, [])]
    seen = {switch}
    while frontier:
        nxt = []
        for node, first_port in frontier:
            if node in seen:
                continue
            seen.add(node)
            out[node] = first_port
            if not plan.is_host(node):  # hosts don't forward
                nxt.extend((nb, first_port) for nb, _ in adj.get(node, []))
        frontier = nxt
    return out


def forwarding_tables(plan: TopologyPlan) -> dict[str, list[dict]]:
    """Per switch: ``[{dst_mac, port}]`` for every host, plus the switch virtual
    MAC on non-root switches pointing toward s1 (the spine), where traffic for
    10.0.0.254 is aggregated unless a leaf consumes it itself."""
    tables: dict[str, list[dict]] = {}
    for sw in plan.switches:
        hops = _next_hops(plan, sw)
        entries = [{"dst_mac": h.mac, "port": hops[h.name]} for h in plan.hosts]
        if sw != "s1" and "s1" in hops:
            entries.append({"dst_mac": SWITCH_VIP_MAC, "port": hops["s1"]})
        tables[sw] = entries
    return tables
