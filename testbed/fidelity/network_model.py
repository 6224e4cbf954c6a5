"""Hardware time of one collective on the modeled network (alpha-beta per packet).

`collective_time(op, algo, values, value_bytes, world, profile)` is what one
allreduce of `values` values per worker takes on the hardware of `profile`
(testbed/fidelity/profiles/*.yaml), from the first worker's send to the last
worker's receive of the result, all workers starting together.

Notation (all from the profile, SI units):
  B        link_rate (bit/s)
  s(f)     on-wire time of a frame of f bytes (without FCS) =
           (max(f + fcs_bytes, min_frame_bytes) + preamble_ifg_bytes) * 8 / B
  prop     cable_length * propagation_delay
  L0       one-hop fixed latency = host_stack_latency + 2 * nic_latency + 2 * prop
           + switch_pipeline_latency  (NIC tx, cable, pipeline, cable, NIC rx)
  N        world (workers), gamma = reduce_rate (B/s)

switch (in-network aggregation, our wire format from testbed.wire): a packet
  is Ethernet+IPv4+UDP (42 B) + INA header (16 B) + up to MAX_VALUES_PER_PACKET
  int32 values, so frame f_i = VALUES_OFFSET + 4 * count_i and P = packet_count.
  Every worker streams its P packets back to back; the switch aggregates packet
  i once all N copies are in (they arrive together: workers are symmetric) and
  sends the result down each port. The first result reaches a worker after
  L0 + 2 s(f_1) (serialization up, then down); later packets follow at the
  packet interval g = max(s(f_full), rtt / W), where W = ina_window_packets and
  rtt = L0 + 2 s(f_full) (a window smaller than the bandwidth-delay product
  throttles the stream). Hence
      T_switch = L0 + (P - 1) g + 2 s(f_P) + (levels - 1) * 2 (s(f_1) + prop + pipeline)
  independent of N while N <= switch_ports (levels = 1). Above that the workers
  hang off a tree of switch_ports-port switches; each extra level adds one more
  pass up and down. Large n: T -> P s(f_full) = n_wire / B, n_wire the wire bytes
  of one worker's stream (`wire_bytes`).

ring (reduce-scatter + all-gather, 2(N-1) steps): each step every rank sends one
  chunk of c = ceil(values / N) * value_bytes bytes to its neighbour (all links in
  parallel, no contention), as UDP/IP datagrams of at most p2p_mtu_bytes:
      step(m) = L0 + sum_i s(f_i) + s(f_last)     (message m in frames f_i)
      T_ring = 2 (N - 1) step(c) + (N - 1) c / gamma
  The reduction of each received chunk (reduce-scatter half only) is not
  overlapped. Large n: T -> 2 (N - 1)/N n_wire / B.

tree (binomial-tree reduce to rank 0, then binomial-tree broadcast of its sum;
  hosts/collectives/tree.py): L = ceil(log2 N) rounds each way, every round one
  whole message of n = values * value_bytes bytes between a parent and a child
  (a parent's children come one round after another, so no link carries two at
  once); the reduce adds each received message before the next round, and in
  the broadcast a parent's sends to its children follow each other on its
  uplink, S_n = sum_i s(f_i) apart. T_tree is the schedule's critical path (the
  arrivals below, all zero); for N a power of two
      T_tree = 2 L step(n) + L n / gamma
  (reduce: L rounds of step(n) + n / gamma into rank 0; broadcast: the chain
  0 -> N/2 -> 3N/4 -> ... -> N - 1, each rank's first send), less for other N
  (N = 3: 2 step(n) + 2 n / gamma + S_n). Busiest link: rank 0's, L messages in,
  then L out, 2 L S_n. Large n: T -> 2 L n_wire / B, log2 N / (1 - 1/N) times
  the ring's: the tree is latency-optimal (2 L steps against the ring's
  2 (N - 1)), not bandwidth-optimal.

gloo (torch.distributed's CPU allreduce, gloo::allreduce over its TCP transport;
  what DDP runs without a hook): a ring too, with two differences that matter
  for DDP's buckets (read from gloo/allreduce.cc and gloo/transport/tcp/pair.cc):
  - segments: the buffer of n bytes is cut into K = roundUp(max(ceil(n/g),
    2N), N) segments of g = min(ceil(n / 2N), 1 MiB) bytes (two per rank below
    2N MiB); each phase (reduce-scatter, then all-gather) sends (N - 1) K / N
    of them (K - 2 at two per rank, the source's loop bound; above 2N MiB, which
    DDP buckets of the shipped examples never reach, this count is the ring's,
    not checked against gloo), two in flight (send i waits for receive i - 2),
    so R = ceil((N - 1) K / 2N) rounds per phase, each moving two segments
    over every link;
  - rendezvous: a send goes out only once the receiver has posted the matching
    receive and said so (NOTIFY_RECV_READY, a 48-byte preamble); ranks post a
    round's receives and sends together, so every round waits for that notice
    first. Each message carries the same 48-byte preamble.
      D = step(48 + g), S = sum_i s(f_i) of that message, Nt = step(48)
      round = D + max(Nt, S)      (the notice, or the other segment on the link)
      T_gloo = 2 R round + S + (N - 1) c / gamma
  Small buckets (latency-bound): about 2 L0 per round against the ring's L0 per
  step, hence gloo ~1.5-1.8x the ring there. Large n: -> 2 (N-1)/N n_wire / B.

ps (one parameter server with one NIC, N workers, dedicated server host): all
  workers push n = values * value_bytes at once; the server's port serializes
  the N * P frames back to back; the server sums as data arrives, which adds
  time only where gamma is slower than the link; then it sends N results out of
  the same port:
      S = sum_i s(f_i) of one message
      T_ps = 2 L0 + s(f_1) + 2 N S + s(f_last) + max(0, N n / gamma - N S) + f_last_payload / gamma
  Large n: T -> 2 N n_wire / B.

allgather (op "allgather": every rank contributes a block of `values` values,
  b = values * value_bytes bytes, and ends with all N blocks; no reduction):
  ring: N - 1 steps, each rank passing one rank's block to its neighbour:
      T_ag_ring = (N - 1) step(b),        busiest link (N - 1) S_b
  ps: the server gathers the N blocks on its port (N S_b), then sends every
      worker all N blocks as one message of N b bytes (N S_Nb out of its port):
      T_ag_ps = 2 L0 + s(f_1 of b) + N S_b + N S_Nb + s(f_last of N b)
      busiest link (the server's, both directions) N S_b + N S_Nb
  where S_m = sum_i s(f_i) of a message of m bytes. switch: not modeled (the
  INA wire format sums). Large n: ring -> (N-1) n_wire / B, ps -> N (N+1) n_wire / B.

none / world 1: zero (nothing crosses the network).

Ranks that join at different times (`finish_after_arrivals`): the formulas above
assume every rank starts together. A rank that arrives early gets some of the
work done before the last one joins, so measuring from the last arrival and
comparing with T undercounts what remains (a ring of 4 measured 0.83x its
model for that reason alone). Given each rank's arrival a_r (hardware seconds):
  ring: rank r sends its step-k chunk once it has the step k-1 chunk (and, in
      the reduce-scatter half, summed it): send_r(0) = a_r,
      recv_r(k) = max(send_{r-1}(k) + step(c), a_r),
      send_r(k+1) = recv_r(k) + [k < N-1] c / gamma;
      rank r is done at recv_r(last step). All a_r equal: T_ring.
  ps: pushes reach the server's port in order of arrival and queue there:
      free = max(free, a_i + s(f_1) + L0) + S,  X = free after the last push;
      every rank is done at X + reduce_tail + N S + s(f_last) + L0 (the replies
      leave interleaved). All a_r equal: T_ps.
  tree: a child sends its partial once it has joined and added its own
      children's; its parent takes it once it has arrived (and the parent has
      joined and taken its earlier children), then adds it:
      ready_p = max(ready_p, ready_c + step(n)) + n / gamma, children in the
      reduce's order; the broadcast leaves rank 0 at ready_0 and each parent
      sends to its children one after another on its uplink (the j-th, counted
      from 0 in the broadcast's order, j S_n after the first):
      done_c = max(done_p + j S_n + step(n), ready_c). All a_r equal: T_tree.
  switch, allgather ps, scale rounds: max_r a_r + T (a late worker's packets
      hold every slot, so nothing useful happens before it joins).

message (point to point, `message_cost`): one host sends m payload bytes to
  another through one switch (a parameter server's push or reply, an embedding
  lookup): the sender's port serializes the frames back to back, the switch
  stores and forwards each, so the last byte is in after
      T_msg = L0 + sum_i s(f_i) + s(f_last)           (the ring's step(m))
  and the busiest link (either end) is busy sum_i s(f_i). Contention at a busy
  receiver (N workers pushing to one master) is the projector's business: it
  queues messages on each host's link.
  Through k switches (a tree: leaf, spine, leaf is k = 3) the message crosses
  k + 1 links and k - 1 inter-switch cables. An extra switch adds no host stack
  and no NICs, only its cable and pipeline, `transit_latency_s` = prop +
  switch_pipeline_latency, and one more store-and-forward serialization of a
  frame (all links run at B, so the frames stream through; a link after the
  first delays the message by its largest frame, s(f_first)):
      T_msg(k) = L0 + (k - 1) transit + sum_i s(f_i) + s(f_last) + (k - 1) s(f_first)
  k = 1 is T_msg above, term for term. This is what the soft switch's delay line
  plays (testbed/switch/soft/dilation.py): the first switch takes the sender's
  uplink, every switch forwarding to a switch charges transit + the next link's
  serialization, the last one L0 + the receiver's downlink. (For a one-frame
  message both give L0 + (k - 1) transit + (k + 1) s(f). With a last frame
  shorter than the others the delay line's store and forward gives one
  s(f_first) - s(f_last) more than the model, on a star as on a tree.)

Paths through several switches (`switches` = k, from the point's topology:
testbed.net.topology.TopologyPlan.path_switches; 1, a star, unless given):
  ring, gloo: every step's message crosses k switches (k: the ring's slowest
      neighbour pair): step(m) -> message_cost(m, switches=k).
  ps: the pushes and the replies each cross k switches (k: a worker's path to the
      server): T_ps and T_ag_ps + 2 (k - 1) (transit + s(f_first)), f_first the
      pushed and the replied message's first (largest) frame; the server's port
      stays the bottleneck, the extra cables carry at most its load.
  tree: every message crosses k switches (k: the slowest parent-child pair).
  switch: the aggregation tree has at least (k + 1) / 2 levels (k: the longest
      path between two members, 3 on a two-leaf tree: leaf, spine, leaf), each
      extra level charged as above.
  k = 1 takes exactly the formulas above.
Without `switches`, ring and PS use one switch hop whatever N (ring neighbours
share a leaf; PS is bandwidth-bound). `collective_cost` also returns `link_busy_s`, the time the
busiest link is serializing, which the projector uses to share links between
collectives that overlap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.fidelity.constants import HardwareProfile
from testbed.wire import (ETH_HLEN, IPV4_HLEN, MAX_VALUES_PER_PACKET, UDP_HLEN,
                          VALUES_OFFSET)

ALGOS = ("switch", "ring", "ps", "tree", "gloo", "none")
OPS = ("allreduce", "allgather")
ALLGATHER_ALGOS = ("ring", "ps", "none")
INA_VALUE_BYTES = 4                      # the INA wire format carries int32
P2P_HEADER_BYTES = ETH_HLEN + IPV4_HLEN + UDP_HLEN   # 42: ring/PS datagrams
# gloo (module docstring): its TCP transport's per-message preamble (six size_t:
# nbytes, opcode, slot, offset, length, roffset; gloo/transport/tcp/pair.h), and
# gloo::allreduce's largest segment (AllreduceOptions::kMaxSegmentSize).
GLOO_PREAMBLE_BYTES = 48
GLOO_MAX_SEGMENT_BYTES = 1 << 20


@dataclass(frozen=True)
class CollectiveCost:
    total_s: float          # first send to last result received
    link_busy_s: float      # serialization time on the busiest link (<= total_s)


# -- frames -------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    """A message as frames: `n_full` frames of `full` bytes, then one of `last` (no FCS)."""
    full: int
    n_full: int
    last: int

    @property
    def packets(self) -> int:
        return self.n_full + 1

    @property
    def first(self) -> int:
        return self.full if self.n_full else self.last

    def wire_bytes(self, profile: HardwareProfile) -> float:
        return self.n_full * on_wire(self.full, profile) + on_wire(self.last, profile)

    def serialization_s(self, profile: HardwareProfile) -> float:
        return self.wire_bytes(profile) * 8 / profile["link_rate"]


def packet_count(values: int) -> int:
    """INA packets of one worker's stream; a 0-value op still sends one header packet."""
    _check_count("values", values)
    return max(1, math.ceil(values / MAX_VALUES_PER_PACKET))


def ina_stream(values: int) -> Stream:
    """One worker's INA packets: full ones carry MAX_VALUES_PER_PACKET int32 values."""
    p = packet_count(values)
    last = values - (p - 1) * MAX_VALUES_PER_PACKET
    return Stream(VALUES_OFFSET + 4 * MAX_VALUES_PER_PACKET, p - 1, VALUES_OFFSET + 4 * last)


def p2p_stream(payload_bytes: int, profile: HardwareProfile) -> Stream:
    """One UDP/IP message of `payload_bytes` cut at the profile's MTU (ring, PS)."""
    _check_count("payload_bytes", payload_bytes)
    per = int(profile["p2p_mtu_bytes"]) - IPV4_HLEN - UDP_HLEN
    if per <= 0:
        raise ValueError(f"p2p_mtu_bytes {profile['p2p_mtu_bytes']:g} leaves no room for a payload")
    p = max(1, math.ceil(payload_bytes / per))
    last = payload_bytes - (p - 1) * per
    return Stream(P2P_HEADER_BYTES + per, p - 1, P2P_HEADER_BYTES + last)


def on_wire(frame: int, profile: HardwareProfile) -> float:
    """Bytes a frame occupies on the wire: FCS, minimum frame, preamble and gap included."""
    return max(frame + profile["fcs_bytes"], profile["min_frame_bytes"]) + profile["preamble_ifg_bytes"]


def serialization_s(frame: int, profile: HardwareProfile) -> float:
    return on_wire(frame, profile) * 8 / profile["link_rate"]


def wire_bytes(values: int, profile: HardwareProfile) -> float:
    """On-wire bytes of one worker's INA stream in one direction."""
    return ina_stream(values).wire_bytes(profile)


def p2p_wire_bytes(payload_bytes: int, profile: HardwareProfile) -> float:
    """On-wire bytes of one ring/PS message."""
    return p2p_stream(payload_bytes, profile).wire_bytes(profile)


# -- latencies ----------------------------------------------------------------
def propagation_s(profile: HardwareProfile) -> float:
    return profile["cable_length"] * profile["propagation_delay"]


def hop_latency_s(profile: HardwareProfile) -> float:
    """L0: host stack + NIC tx + cable + switch pipeline + cable + NIC rx."""
    return (profile["host_stack_latency"] + 2 * profile["nic_latency"] + 2 * propagation_s(profile)
            + profile["switch_pipeline_latency"])


def transit_latency_s(profile: HardwareProfile) -> float:
    """What one more switch on a path adds besides a serialization: its cable in and
    its pipeline (no host stack, no NICs: those are in L0 once per message)."""
    return propagation_s(profile) + profile["switch_pipeline_latency"]


def dilation_hardware(profile: HardwareProfile) -> dict[str, float]:
    """What the soft switch's delay line needs to play this profile's hop
    (hosts.common.network_dilation.DilationSettings, less version/tdf/compensation)."""
    return {"latency_s": hop_latency_s(profile), "transit_latency_s": transit_latency_s(profile),
            "link_rate_bps": float(profile["link_rate"]),
            "fcs_bytes": float(profile["fcs_bytes"]), "preamble_ifg_bytes": float(profile["preamble_ifg_bytes"]),
            "min_frame_bytes": float(profile["min_frame_bytes"])}


def _check_switches(switches: int) -> None:
    if isinstance(switches, bool) or not isinstance(switches, int) or switches < 1:
        raise ValueError(f"switches must be an integer >= 1, got {switches!r}")


def _extra_switches_s(switches: int, first_frame: int, profile: HardwareProfile) -> float:
    """What k - 1 more switches add to one message (module docstring: message)."""
    return (switches - 1) * (transit_latency_s(profile) + serialization_s(first_frame, profile))


def switch_levels(world: int, profile: HardwareProfile) -> int:
    """Levels of a tree of switch_ports-port switches that holds `world` workers."""
    ports = int(profile["switch_ports"])
    if ports < 2:
        raise ValueError(f"switch_ports must be >= 2, got {ports}")
    levels, reach = 1, ports
    while reach < world:
        levels += 1
        reach *= ports
    return levels


# -- collectives --------------------------------------------------------------
def collective_cost(op: str, algo: str, values: int, value_bytes: int, world: int,
                    profile: HardwareProfile, scale_round: bool = False, switches: int = 1) -> CollectiveCost:
    """scale_round: an in-switch allreduce of floats without a fixed scale first agrees
    on one with a one-value MAX pass (hosts/ina/transport.py): one more round trip.
    switches: the switches on the op's paths (module docstring; 1 = a star)."""
    _check_switches(switches)
    if scale_round and algo == "switch" and world > 1:
        main = collective_cost(op, algo, values, value_bytes, world, profile, switches=switches)
        agree = collective_cost(op, algo, 1, value_bytes, world, profile, switches=switches)
        return CollectiveCost(main.total_s + agree.total_s, main.link_busy_s + agree.link_busy_s)
    if op not in OPS:
        raise ValueError(f"collective op {op!r} is not modeled (modeled: {', '.join(OPS)})")
    if algo not in ALGOS:
        raise ValueError(f"collective algo {algo!r} is not modeled (modeled: {', '.join(ALGOS)})")
    _check_count("values", values)
    _check_count("world", world)
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    if value_bytes <= 0:
        raise ValueError(f"value_bytes must be positive, got {value_bytes}")
    if op == "allgather" and algo not in ALLGATHER_ALGOS:
        raise ValueError(f"allgather algo {algo!r} is not modeled (modeled: {', '.join(ALLGATHER_ALGOS)})")
    if world == 1:
        return CollectiveCost(0.0, 0.0)
    if algo == "none":
        raise ValueError(f"algo 'none' means no communication, but world is {world}")
    if op == "allgather":
        return _allgather(algo, values * value_bytes, world, profile, switches)
    if algo == "switch":
        return _switch(values, value_bytes, world, profile, switches)
    if algo == "ring":
        return _ring(values, value_bytes, world, profile, switches)
    if algo == "gloo":
        return _gloo(values, value_bytes, world, profile, switches)
    if algo == "tree":
        return _tree(values, value_bytes, world, profile, switches)
    return _ps(values, value_bytes, world, profile, switches)


def collective_time(op: str, algo: str, values: int, value_bytes: int, world: int,
                    profile: HardwareProfile, scale_round: bool = False, switches: int = 1) -> float:
    """Seconds one collective takes on the profile's hardware (see the module docstring)."""
    return collective_cost(op, algo, values, value_bytes, world, profile, scale_round, switches).total_s


def message_cost(payload_bytes: int, profile: HardwareProfile, switches: int = 1) -> CollectiveCost:
    """One point-to-point message of `payload_bytes` through `switches` switches
    (module docstring: message)."""
    _check_switches(switches)
    st = p2p_stream(payload_bytes, profile)
    busy = st.serialization_s(profile)
    total = hop_latency_s(profile) + busy + serialization_s(st.last, profile)
    if switches > 1:                 # a star's sum stays as it was, bit for bit
        total += _extra_switches_s(switches, st.first, profile)
    return CollectiveCost(total, busy)


def message_time(payload_bytes: int, profile: HardwareProfile, switches: int = 1) -> float:
    """Seconds from a message's first byte sent to its last byte received, on the profile's hardware."""
    return message_cost(payload_bytes, profile, switches).total_s


def finish_after_arrivals(op: str, algo: str, values: int, value_bytes: int, arrivals: list[float],
                          profile: HardwareProfile, scale_round: bool = False,
                          switches: int = 1) -> list[float]:
    """Hardware time at which each rank has its result when rank i joins at
    arrivals[i] (hardware seconds, ranks in ring order; module docstring)."""
    world = len(arrivals)
    total = collective_time(op, algo, values, value_bytes, world, profile, scale_round, switches)
    if world == 1 or scale_round:
        return [max(arrivals) + total] * world
    if algo == "ring":
        size = math.ceil(values / world) * value_bytes if op == "allreduce" else values * value_bytes
        reduce_steps = world - 1 if op == "allreduce" else 0
        return _ring_chain(arrivals, message_time(size, profile, switches), size / profile["reduce_rate"],
                           reduce_steps, 2 * (world - 1) if op == "allreduce" else world - 1)
    if algo == "ps" and op == "allreduce":
        n = values * value_bytes
        st = p2p_stream(n, profile)
        big_s, l0 = st.serialization_s(profile), hop_latency_s(profile)
        if switches > 1:             # each way: the push, then the reply (module docstring)
            l0 += _extra_switches_s(switches, st.first, profile)
        tail = max(0.0, world * n / profile["reduce_rate"] - world * big_s) + (st.last - P2P_HEADER_BYTES) / profile["reduce_rate"]
        free = -math.inf
        for a in sorted(arrivals):
            free = max(free, a + serialization_s(st.first, profile) + l0) + big_s
        return [free + tail + world * big_s + serialization_s(st.last, profile) + l0] * world
    if algo == "tree" and op == "allreduce":
        n = values * value_bytes
        msg = message_cost(n, profile, switches)
        return _tree_chain(arrivals, msg.total_s, msg.link_busy_s, n / profile["reduce_rate"])
    return [max(arrivals) + total] * world


def _tree_chain(arrivals: list[float], step: float, send_s: float, reduce_s: float) -> list[float]:
    # The tree allreduce from each rank's arrival (module docstring, "Ranks that join
    # at different times"); the schedule is hosts/collectives/tree.py's.
    from hosts.collectives.tree import tree_children, tree_depth  # noqa: PLC0415
    world = len(arrivals)
    ready = list(arrivals)
    for mask in (1 << k for k in range(tree_depth(world))):     # reduce rounds, children in order
        for c in range(mask, world, 2 * mask):                   # the ranks whose lowest bit is mask
            p = c - mask
            ready[p] = max(ready[p], ready[c] + step) + reduce_s
    done = list(ready)
    for mask in reversed([1 << k for k in range(tree_depth(world))]):   # broadcast rounds
        for p in range(0, world, 2 * mask):
            c = p + mask
            if c < world:
                j = tree_children(p, world)[::-1].index(c)       # its place in p's sends
                done[c] = max(done[p] + j * send_s + step, ready[c])
    return done


def _ring_chain(arrivals: list[float], step: float, reduce_s: float, reduce_steps: int,
                steps: int) -> list[float]:
    # A chunk that comes in before its rank joined waits in the socket buffer.
    world = len(arrivals)
    send = list(arrivals)
    recv = list(arrivals)
    for k in range(steps):
        recv = [max(send[r - 1] + step, arrivals[r]) for r in range(world)]
        send = [max(recv[r] + (reduce_s if k < reduce_steps else 0.0), send[r]) for r in range(world)]
    return recv


def _switch(values: int, value_bytes: int, world: int, p: HardwareProfile, switches: int = 1) -> CollectiveCost:
    if value_bytes != INA_VALUE_BYTES:
        raise ValueError(f"algo 'switch' carries int32 values (value_bytes 4), got value_bytes {value_bytes}")
    st = ina_stream(values)
    s_first, s_last = serialization_s(st.first, p), serialization_s(st.last, p)
    l0 = hop_latency_s(p)
    gap = 0.0
    if st.n_full:
        s_full = serialization_s(st.full, p)
        gap = max(s_full, (l0 + 2 * s_full) / p["ina_window_packets"])
    levels = max(switch_levels(world, p), (switches + 1) // 2)   # the emulated tree's, if deeper
    extra = (levels - 1) * 2 * (s_first + propagation_s(p) + p["switch_pipeline_latency"])
    total = l0 + st.n_full * gap + 2 * s_last + extra
    return CollectiveCost(total, st.serialization_s(p))


def _ring(values: int, value_bytes: int, world: int, p: HardwareProfile, switches: int = 1) -> CollectiveCost:
    chunk = math.ceil(values / world) * value_bytes
    step_cost = message_cost(chunk, p, switches)   # every rank sends one chunk to its neighbour
    step, big_s = step_cost.total_s, step_cost.link_busy_s
    total = 2 * (world - 1) * step + (world - 1) * chunk / p["reduce_rate"]
    return CollectiveCost(total, 2 * (world - 1) * big_s)


def _tree(values: int, value_bytes: int, world: int, p: HardwareProfile, switches: int = 1) -> CollectiveCost:
    from hosts.collectives.tree import tree_depth  # noqa: PLC0415 - the one place the tree's shape lives
    n = values * value_bytes
    msg = message_cost(n, p, switches)     # one whole message between a parent and a child
    total = max(_tree_chain([0.0] * world, msg.total_s, msg.link_busy_s, n / p["reduce_rate"]))
    return CollectiveCost(total, 2 * tree_depth(world) * msg.link_busy_s)


def gloo_segments(total_bytes: int, value_bytes: int, world: int) -> tuple[int, int]:
    """(segment bytes g, segment count K) of gloo::allreduce for a buffer of total_bytes."""
    def round_up(x: int, m: int) -> int:
        return -(-x // m) * m
    max_seg = value_bytes * (GLOO_MAX_SEGMENT_BYTES // value_bytes)
    g = round_up(min(-(-total_bytes // (2 * world)), max_seg), value_bytes)
    k = round_up(max(-(-total_bytes // g) if g else 0, 2 * world), world)
    return g, k


def _gloo(values: int, value_bytes: int, world: int, p: HardwareProfile, switches: int = 1) -> CollectiveCost:
    g, k = gloo_segments(values * value_bytes, value_bytes, world)
    rounds = -(-((world - 1) * k // world) // 2)   # per phase: (N-1) K / N sends, two in flight
    data = message_cost(GLOO_PREAMBLE_BYTES + g, p, switches)
    notice = message_cost(GLOO_PREAMBLE_BYTES, p, switches).total_s
    seg_s = data.link_busy_s
    rnd = data.total_s + max(notice, seg_s)
    chunk = math.ceil(values / world) * value_bytes
    total = 2 * rounds * rnd + seg_s + (world - 1) * chunk / p["reduce_rate"]
    return CollectiveCost(total, 2 * rounds * 2 * seg_s)


def _ps(values: int, value_bytes: int, world: int, p: HardwareProfile, switches: int = 1) -> CollectiveCost:
    n = values * value_bytes
    st = p2p_stream(n, p)
    big_s = st.serialization_s(p)
    gamma = p["reduce_rate"]
    reduce_tail = max(0.0, world * n / gamma - world * big_s) + (st.last - P2P_HEADER_BYTES) / gamma
    total = (2 * hop_latency_s(p) + serialization_s(st.first, p) + 2 * world * big_s
             + serialization_s(st.last, p) + reduce_tail)
    if switches > 1:                 # the push and the reply (module docstring)
        total += 2 * _extra_switches_s(switches, st.first, p)
    return CollectiveCost(total, 2 * world * big_s)


def _allgather(algo: str, block: int, world: int, p: HardwareProfile, switches: int = 1) -> CollectiveCost:
    if algo == "ring":
        step = message_cost(block, p, switches)   # every rank passes one block to its neighbour
        return CollectiveCost((world - 1) * step.total_s, (world - 1) * step.link_busy_s)
    gather, scatter = p2p_stream(block, p), p2p_stream(world * block, p)
    busy = world * gather.serialization_s(p) + world * scatter.serialization_s(p)
    total = (2 * hop_latency_s(p) + serialization_s(gather.first, p) + busy
             + serialization_s(scatter.last, p))
    if switches > 1:                 # the blocks in, the gathered message out
        total += _extra_switches_s(switches, gather.first, p) + _extra_switches_s(switches, scatter.first, p)
    return CollectiveCost(total, busy)


def _check_count(name: str, v: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
