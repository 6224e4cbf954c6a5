"""Which mechanism applies each link impairment, and what to tell the switch,
nftables or netem. Planning is pure (unit-tested); the network applies the
plan (with the nft/tc commands built here, run inside the hosts).

Semantics: every link value applies per direction, like netem. Directions map
to mechanisms as follows.

- ``switch`` (the soft switch; what ``auto`` means with the soft backend):
  host->switch at the switch port's *ingress*, switch->host at its *egress*,
  switch<->switch at each sender's egress. Everything (loss, delay, jitter,
  duplication, reordering) is seeded and counted by the switch.
- ``nftables``: loss only, on host links, in the hosts' namespaces, counted by
  nft (``numgen random``). Switch->host: dropped at the receiving host's ingress
  (prerouting). Host->switch: at the sending host's interface, in the netdev
  *egress* hook (Linux >= 5.16), where the frame is stolen (``fwd to "lo"``,
  which discards a frame not addressed to the host) rather than dropped: a drop
  there returns NET_XMIT_DROP, which TCP takes as local congestion and resends
  at once, while a lost frame must look sent, as on a wire. That interface
  gets ``gso_max_segs 1`` so every frame the hook sees is one on the wire (TCP
  otherwise hands it 64 KB GSO packets). Any switch backend, any traffic.
  Switch<->switch links are not covered (the switches read frames before
  netfilter): reported with ``applied: false`` and the reason, never as applied.
- ``netem``: only if the kernel has sch_netem (it does not here); a netem qdisc
  on each sender's egress interface, under htb when the link is shaped.
- ``drop_simulator`` (what ``auto`` means for loss alone on a BMv2 running a
  program with p4/ina.p4's two drop simulators, star topology): host->switch
  loss is ``DropSimulator.drop_probability[port]`` (contributions arriving),
  switch->host loss ``EgressDropSimulator.drop_probability[port]`` (results
  leaving), set by the control plane. It drops in-network aggregation traffic
  only (every row says so), so ``auto`` takes it only for a point that has
  such traffic; loss on any other point goes through ``nftables``.

Bandwidth (``links.shaper``): htb at the sending end of each direction
(Mininet's TCLink, burst 15 kB, cburst one packet), except that with ``auto`` on
the soft switch a host's uplink (host->switch) is shaped by the switch itself at
the port's receive ring (the frame is handed to the pipeline once the link
would have delivered it; testbed/switch/soft/_pktio.c RxRing.shape). On this VM
htb's per-packet timers at the host cost more than the link time for small
frames (a 1 MiB in-switch allreduce: ~220 ms at 100 Mbit/s, where the link
allows 105 ms); the switch releases the due frames of every port in one wakeup.

A request no mechanism can apply raises ``ImpairmentError`` naming what cannot
be applied and what to use instead.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from testbed.net.topology import TopologyPlan

IMPAIR_KEYS = ("loss_pct", "delay_ms", "jitter_ms", "duplicate_pct", "reorder_pct")
MECHANISMS = ("auto", "switch", "nftables", "netem")    # what a scenario may ask for
SHAPERS = ("auto", "htb")                              # links.shaper
SWITCH_SHAPER_NOTE = ("shaped by the soft switch at its port's receive ring: each frame is handed to "
                      "the pipeline once the link would have delivered it whole (up to one 1600-byte "
                      "frame time early, as htb's default cburst)")
DROP_SIMULATOR = "drop_simulator"                      # chosen by auto only
DROP_SIMULATOR_NOTE = ("the P4 program's drop simulator drops in-network aggregation traffic only "
                       "(contributions into the switch, results out of it); other traffic on this "
                       "link is not impaired")
HTB_MAX_MBPS = 1000  # Mininet's TCIntf ignores larger rates (with only a log line)
NFT_TABLE = "innet_emu"
NFT_EGRESS_TABLE = "innet_emu_egress"   # netdev family: one per host interface
NFT_SCALE = 1_000_000  # numgen modulus: loss resolution of 0.0001 %


class ImpairmentError(ValueError):
    """An impairment was requested that no available mechanism can apply."""


@dataclass(frozen=True)
class LinkValues:
    bandwidth_mbps: float | None = None
    loss_pct: float = 0.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0

    def impair(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in IMPAIR_KEYS}

    def nonzero(self) -> dict[str, float]:
        return {k: v for k, v in self.impair().items() if v > 0}


ZERO_IMPAIR = {k: 0.0 for k in IMPAIR_KEYS}


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def resolve_links(links: Any, hosts: list[str]) -> tuple[LinkValues, dict[str, LinkValues], str]:
    """(shared values, per-host effective values, mechanism) from a scenario
    ``Links`` model or a plain dict of the same shape (None = no impairments)."""
    fields_ = ("bandwidth_mbps", *IMPAIR_KEYS)
    base = {k: _get(links, k) for k in fields_}
    base = {k: (v if v is not None or k == "bandwidth_mbps" else 0.0) for k, v in base.items()}
    mechanism = _get(links, "mechanism", "auto") or "auto"
    if mechanism not in MECHANISMS:
        raise ImpairmentError(f"links.mechanism: unknown mechanism {mechanism!r}; use one of {MECHANISMS}")
    overrides = _get(links, "hosts", {}) or {}
    unknown = sorted(set(overrides) - set(hosts))
    if unknown:
        raise ImpairmentError(f"links.hosts: unknown host(s) {unknown}; hosts are {hosts}")
    per_host: dict[str, LinkValues] = {}
    for h in hosts:
        vals = dict(base)
        ov = overrides.get(h)
        if ov is not None:
            # Only the keys the user wrote count: an explicit bandwidth null means unlimited.
            written = ov.model_dump(exclude_unset=True) if hasattr(ov, "model_dump") else dict(ov)
            for k, v in written.items():
                if k not in fields_:
                    raise ImpairmentError(f"links.hosts.{h}.{k}: unknown key; allowed: {list(fields_)}")
                vals[k] = v if (v is not None or k == "bandwidth_mbps") else base[k]
        per_host[h] = LinkValues(**vals)
    return LinkValues(**base), per_host, mechanism


@dataclass(frozen=True)
class Capabilities:
    """What this machine and switch can do."""
    switch_impairs: bool        # the switch backend applies impairments (soft switch)
    netem: bool                 # kernel has sch_netem
    nftables: bool = True       # `nft` is installed
    backend: str = "soft"       # for messages
    # the switch program has DropSimulator + EgressDropSimulator (BMv2) and the
    # point has in-network aggregation traffic for them to drop
    drop_simulator: bool = False
    # the soft switch reads its ports through receive rings, which can shape the
    # links into it (links.shaper auto)
    switch_shapes: bool = False


@dataclass(frozen=True)
class Direction:
    link: str
    src: str
    dst: str
    src_port: int      # switch port on the sending side (0 for a host)
    dst_port: int
    values: LinkValues
    host_link: bool

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"


def directions(plan: TopologyPlan, per_host: dict[str, LinkValues], base: LinkValues) -> list[Direction]:
    out = []
    for ln in plan.links:
        host_link = plan.is_host(ln.node1)
        vals = per_host.get(ln.node1, base) if host_link else base
        out.append(Direction(ln.name, ln.node1, ln.node2, ln.port1, ln.port2, vals, host_link))
        out.append(Direction(ln.name, ln.node2, ln.node1, ln.port2, ln.port1, vals, host_link))
    return out


@dataclass
class ImpairmentPlan:
    mechanism: str                                        # resolved: switch | nftables | netem | none
    switch_ports: dict[str, dict[int, dict[str, dict[str, float]]]] = field(default_factory=dict)
    nft_loss: dict[str, float] = field(default_factory=dict)       # host -> loss_pct on its ingress
    # host -> {"intf", "loss_pct"}: loss on its egress (host->switch), nft netdev egress
    nft_egress: dict[str, dict[str, Any]] = field(default_factory=dict)
    netem: list[dict[str, Any]] = field(default_factory=list)      # {node, intf, impair, shaped}
    # switch -> [{port, direction: ingress|egress, p}] for the control plane's set_drop_probability
    drop_simulator: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # switch -> {port: Mbit/s}: host uplinks the soft switch shapes at its ingress (no htb
    # at the host end); the other directions are shaped by htb at their sender
    switch_shaping: dict[str, dict[int, float]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)       # the report, one per value


def choose_mechanism(requested: str, caps: Capabilities, params: frozenset[str] = frozenset(),
                     host_links_only: bool = True) -> str:
    """The mechanism for a request (`params`: the impairments asked for;
    host_links_only: none is on a switch<->switch link), before checking what
    it can do."""
    if requested == "auto":
        loss_only = bool(params) and params <= {"loss_pct"}
        if caps.switch_impairs:
            return "switch"
        if caps.drop_simulator and loss_only:
            return DROP_SIMULATOR
        if caps.netem:
            return "netem"
        if caps.nftables and loss_only and host_links_only:
            return "nftables"
        return "none"
    return requested


def _refuse(what: str, why: str, instead: str) -> ImpairmentError:
    return ImpairmentError(f"cannot apply {what}: {why}; {instead}")


def plan_impairments(plan: TopologyPlan, links: Any, caps: Capabilities) -> ImpairmentPlan:
    """Decide, per link direction and parameter, who applies it. Raises
    ``ImpairmentError`` for anything requested that nothing can apply."""
    hosts = [h.name for h in plan.hosts]
    base, per_host, requested = resolve_links(links, hosts)
    dirs = directions(plan, per_host, base)
    for d in dirs:
        bw = d.values.bandwidth_mbps
        if bw is not None and bw > HTB_MAX_MBPS:
            raise _refuse(f"bandwidth_mbps={bw:g} on {d.link}", f"htb via Mininet supports at most "
                          f"{HTB_MAX_MBPS} Mbit/s", "set bandwidth_mbps <= 1000, or null for unlimited")
    wanted = [(d, k, v) for d in dirs for k, v in d.values.nonzero().items()]
    mech = choose_mechanism(requested, caps, frozenset(k for _, k, _ in wanted),
                            host_links_only=all(d.host_link for d, _, _ in wanted))
    out = ImpairmentPlan(mechanism=mech if wanted else "none")
    shaper = _get(links, "shaper", "auto") or "auto"
    if shaper not in SHAPERS:
        raise ImpairmentError(f"links.shaper: unknown shaper {shaper!r}; use one of {SHAPERS}")
    out.rows.extend(_bandwidth_rows(out, plan, dirs, at_switch=shaper == "auto" and caps.switch_shapes))
    if not wanted:
        return out
    first = f"{wanted[0][1]}={wanted[0][2]:g} on {wanted[0][0].link}"
    if mech == "none":
        raise _refuse(first, f"the {caps.backend} switch does not impair links and this kernel has no "
                      f"sch_netem", "use switch.backend soft (impairments in the soft switch), or "
                      "loss alone on host links (links.mechanism nftables)")
    if mech == DROP_SIMULATOR and len(plan.switches) > 1:
        raise _refuse(first, f"the {caps.backend} switch drops only through its program's drop "
                      f"simulator, which is placed for one aggregating switch (star topology)",
                      "use topology.kind star, or switch.backend soft")
    if mech == "switch" and not caps.switch_impairs:
        raise _refuse(first, f"links.mechanism switch needs the soft switch, but the backend is "
                      f"{caps.backend}", "use switch.backend soft, or links.mechanism netem/nftables")
    if mech == "netem":
        if not caps.netem:
            raise _refuse(first, "links.mechanism netem, but this kernel has no sch_netem",
                          "use links.mechanism switch (soft backend) or nftables (loss only)")
        for d, k, v in wanted:
            if k == "reorder_pct" and d.values.delay_ms <= 0:
                raise _refuse(f"reorder_pct={v:g} on {d.link}", "netem only reorders delayed packets",
                              "set delay_ms > 0, or use links.mechanism switch")
    if mech == "nftables":
        if not caps.nftables:
            raise _refuse(first, "links.mechanism nftables, but `nft` is not installed",
                          "apt-get install nftables (or `make setup`)")
        for d, k, v in wanted:
            if k != "loss_pct":
                raise _refuse(f"{k}={v:g} on {d.link}", "nftables can only drop packets (loss_pct)",
                              "use links.mechanism switch (soft backend) for delay, jitter, "
                              "duplication and reordering")
    for d, k, v in wanted:
        out.rows.append(_apply_row(out, plan, d, k, v, mech))
    return out


def _row(d: Direction, param: str, value: float, mechanism: str, applied: bool, where: str,
         note: str | None = None) -> dict[str, Any]:
    row = {"link": d.link, "direction": d.name, "parameter": param, "value": value,
           "mechanism": mechanism, "applied": applied, "where": where,
           "observed": None, "observed_rate": None}
    if note:
        row["note"] = note
    return row


def _bandwidth_rows(out: ImpairmentPlan, plan: TopologyPlan, dirs: list[Direction],
                    at_switch: bool) -> list[dict[str, Any]]:
    """One row per shaped direction; at_switch: host uplinks go to the soft switch's
    ingress (out.switch_shaping), everything else to htb at the sender."""
    rows = []
    for d in dirs:
        bw = d.values.bandwidth_mbps
        if bw is None:
            continue
        if at_switch and d.host_link and plan.is_host(d.src):
            out.switch_shaping.setdefault(d.dst, {})[d.dst_port] = float(bw)
            rows.append(_row(d, "bandwidth_mbps", bw, "switch", True,
                             f"{d.dst} port {d.dst_port} ingress (receive ring)", note=SWITCH_SHAPER_NOTE))
        else:
            rows.append(_row(d, "bandwidth_mbps", bw, "htb", True, f"{d.src}-eth{d.src_port} egress"))
    return rows


def host_egress_untouched(impairments: ImpairmentPlan, host: str, htb_at_host: bool) -> bool:
    """Nothing at the host's own interface acts on what it sends: no htb, no nftables
    egress rule, no netem. Only then may its INA worker send UDP GSO messages: those
    are cut into frames after the interface's qdisc and netdev egress hook, which would
    shape a whole message as one packet, or drop it as one."""
    return (not htb_at_host and host not in impairments.nft_egress
            and not any(n.get("node") == host for n in impairments.netem))


def shaped_by_switch(impairments: ImpairmentPlan, switch: str, port: int) -> bool:
    """The link into switch:port is shaped by the soft switch (so its far end, a
    host's interface, carries no htb)."""
    return port in impairments.switch_shaping.get(switch, {})


def _apply_row(out: ImpairmentPlan, plan: TopologyPlan, d: Direction, k: str, v: float,
               mech: str) -> dict[str, Any]:
    if mech == DROP_SIMULATOR:
        # Host->switch: contributions arriving; switch->host: results leaving (star: host links only).
        if plan.is_host(d.src):
            sw, port, direction, ctl = d.dst, d.dst_port, "ingress", "DropSimulator"
        else:
            sw, port, direction, ctl = d.src, d.src_port, "egress", "EgressDropSimulator"
        out.drop_simulator.setdefault(sw, []).append({"port": port, "direction": direction,
                                                      "p": v / 100.0})
        return _row(d, k, v, DROP_SIMULATOR, True, f"{sw} port {port} {direction} {ctl}",
                    note=DROP_SIMULATOR_NOTE)
    if mech == "switch":
        # Host->switch at the switch's ingress port; otherwise at the sender's egress.
        if d.host_link and plan.is_host(d.src):
            sw, port, stage = d.dst, d.dst_port, "ingress"
        else:
            sw, port, stage = d.src, d.src_port, "egress"
        port_cfg = out.switch_ports.setdefault(sw, {}).setdefault(
            port, {"ingress": dict(ZERO_IMPAIR), "egress": dict(ZERO_IMPAIR)})
        port_cfg[stage][k] = v
        return _row(d, k, v, "switch", True, f"{sw} port {port} {stage}")
    if mech == "nftables":
        if d.host_link and plan.is_host(d.dst):
            out.nft_loss[d.dst] = v
            return _row(d, k, v, "nftables", True, f"{d.dst} ingress (nft prerouting)")
        if d.host_link and plan.is_host(d.src):
            intf = f"{d.src}-eth{d.src_port}"
            out.nft_egress[d.src] = {"intf": intf, "loss_pct": v}
            return _row(d, k, v, "nftables", True, f"{intf} egress (nft netdev egress)")
        return _row(d, k, v, "none", False, "-",
                    note="nftables drops on host links only (the switches read frames before "
                         "netfilter), so this switch-to-switch direction is not impaired; use "
                         "links.mechanism switch (soft backend) to impair it")
    # netem: on the sender's egress interface, under htb if the link is shaped.
    intf = f"{d.src}-eth{d.src_port}"
    entry = next((e for e in out.netem if e["intf"] == intf), None)
    if entry is None:
        entry = {"node": d.src, "intf": intf, "impair": dict(ZERO_IMPAIR),
                 "shaped": d.values.bandwidth_mbps is not None}
        out.netem.append(entry)
    entry["impair"][k] = v
    return _row(d, k, v, "netem", True, f"{intf} egress")


# --- nftables ---------------------------------------------------------------
def nft_ruleset(loss_pct: float) -> str:
    """An nft script: count everything arriving at the host, drop loss_pct %."""
    threshold = round(loss_pct / 100.0 * NFT_SCALE)
    return (
        f"table inet {NFT_TABLE} {{\n"
        f"  chain ingress {{\n"
        # Before conntrack (-200): a dropped packet leaves no trace in the host.
        f"    type filter hook prerouting priority -300; policy accept;\n"
        f'    counter comment "seen"\n'
        f'    numgen random mod {NFT_SCALE} < {threshold} counter drop comment "loss"\n'
        f"  }}\n"
        f"}}\n")


def nft_egress_ruleset(intf: str, loss_pct: float) -> str:
    """An nft script: count every frame leaving `intf`, steal loss_pct % of them
    (why steal, not drop: the module's docstring)."""
    threshold = round(loss_pct / 100.0 * NFT_SCALE)
    return (
        f"table netdev {NFT_EGRESS_TABLE} {{\n"
        f"  chain egress {{\n"
        f'    type filter hook egress device "{intf}" priority 0; policy accept;\n'
        f'    counter comment "seen"\n'
        f'    numgen random mod {NFT_SCALE} < {threshold} counter fwd to "lo" comment "loss"\n'
        f"  }}\n"
        f"}}\n")


def nft_loss_rule(nft_json: str) -> tuple[int, int] | None:
    """(numgen modulus, drop threshold) of the installed loss rule, read back
    from ``nft -j list table ...``; None if there is no such rule."""
    for item in json.loads(nft_json).get("nftables", []):
        rule = item.get("rule")
        if not rule or rule.get("comment") != "loss":
            continue
        for e in rule.get("expr", []):
            match = e.get("match") if isinstance(e, dict) else None
            numgen = (match or {}).get("left", {}).get("numgen") if isinstance(match, dict) else None
            if numgen and match.get("op") == "<":
                return int(numgen["mod"]), int(match["right"])
    return None


def check_nft_loss(nft_json: str, loss_pct: float) -> str | None:
    """Why the installed loss rule does not drop loss_pct %, or None if it does."""
    want = (NFT_SCALE, round(loss_pct / 100.0 * NFT_SCALE))
    try:
        got = nft_loss_rule(nft_json)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return f"cannot read the ruleset back ({type(e).__name__}: {e})"
    if got is None:
        return "no loss rule in the installed ruleset"
    if got != want:
        return f"the installed rule drops numgen mod {got[0]} < {got[1]}, expected mod {want[0]} < {want[1]}"
    return None


def parse_nft_counters(nft_json: str) -> dict[str, int]:
    """``nft -j list table ...`` -> {"seen": packets, "dropped": packets}."""
    out = {"seen": 0, "dropped": 0}
    for item in json.loads(nft_json).get("nftables", []):
        rule = item.get("rule")
        if not rule:
            continue
        packets = next((e["counter"]["packets"] for e in rule.get("expr", [])
                        if isinstance(e, dict) and "counter" in e), 0)
        if rule.get("comment") == "seen":
            out["seen"] = packets
        elif rule.get("comment") == "loss":
            out["dropped"] = packets
    return out


# --- htb (bandwidth) ---------------------------------------------------------
HTB_CLASS = "5:1"  # the class Mininet's TCIntf puts the rate on (qdisc 5:0, default 1)
_TC_RATE = re.compile(r"\brate (\d+(?:\.\d+)?)([KMGT]?)bit\b")
_UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def htb_rate_bps(tc_class_show: str, classid: str = HTB_CLASS) -> float | None:
    """The rate (bit/s) of htb class `classid` in ``tc class show dev X`` output."""
    for line in tc_class_show.splitlines():
        if line.startswith(f"class htb {classid} "):
            m = _TC_RATE.search(line)
            if m:
                return float(m.group(1)) * _UNIT[m.group(2)]
    return None


def check_htb_rate(tc_class_show: str, mbps: float) -> str | None:
    """Why the interface is not shaped to `mbps`, or None if it is. tc keeps the
    rate in bytes/s and prints it rounded, so allow 1 % or one byte/s."""
    got = htb_rate_bps(tc_class_show)
    if got is None:
        return f"no htb class {HTB_CLASS} with a rate (tc says: {tc_class_show.strip() or 'nothing'})"
    want = mbps * 1e6
    if abs(got - want) > max(0.01 * want, 8.0):
        return f"htb class {HTB_CLASS} has rate {got / 1e6:g} Mbit/s, expected {mbps:g}"
    return None


# --- netem ------------------------------------------------------------------
def netem_command(intf: str, impair: dict[str, float], shaped: bool) -> list[str]:
    """tc argv adding netem on intf (under Mininet's htb class 5:1 when shaped)."""
    parent = ["parent", "5:1"] if shaped else ["root"]
    args = ["tc", "qdisc", "add", "dev", intf, *parent, "handle", "10:", "netem"]
    if impair["delay_ms"] > 0 or impair["jitter_ms"] > 0:
        args += ["delay", f"{impair['delay_ms']}ms"]
        if impair["jitter_ms"] > 0:
            args += [f"{impair['jitter_ms']}ms"]
    if impair["loss_pct"] > 0:
        args += ["loss", f"{impair['loss_pct']}%"]
    if impair["duplicate_pct"] > 0:
        args += ["duplicate", f"{impair['duplicate_pct']}%"]
    if impair["reorder_pct"] > 0:
        args += ["reorder", f"{impair['reorder_pct']}%"]
    return args


@functools.lru_cache(maxsize=1)
def netem_available() -> bool:
    """Try a netem qdisc on lo of a throwaway namespace (touches nothing else)."""
    from testbed.net.isolation import run_in_throwaway_netns  # noqa: PLC0415
    res = run_in_throwaway_netns("ip link set lo up && tc qdisc add dev lo root netem delay 1ms")
    return res.returncode == 0


def nft_available() -> bool:
    return shutil.which("nft") is not None


# --- after the run: observed counters ---------------------------------------
def fill_observed(rows: list[dict[str, Any]], switch_stats: dict[str, Any],
                  nft_counters: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Add what the mechanisms counted to each applied row (copies the rows)."""
    out = []
    for r in rows:
        r = dict(r)
        if r["applied"] and r["mechanism"] == "nftables":
            src, dst = r["direction"].split("->")
            c = nft_counters.get(f"{src} egress") if "egress" in r["where"] else nft_counters.get(dst)
            if c:
                r["observed"] = c
                r["observed_rate"] = (c["dropped"] / c["seen"]) if c["seen"] else None
        elif r["applied"] and r["mechanism"] == "switch" and r["parameter"] == "bandwidth_mbps":
            _check_switch_shaper(r, switch_stats)
        elif r["applied"] and r["mechanism"] == "switch":
            sw, _, port, stage = r["where"].split()
            c = switch_port_counters(switch_stats.get(sw), int(port), stage)
            if c:
                r["observed"] = c
                r["observed_rate"] = _rate(r["parameter"], c)
        out.append(r)
    return out


def _check_switch_shaper(row: dict[str, Any], switch_stats: dict[str, Any]) -> None:
    """A switch-shaped uplink (row, updated): what the switch's stats say its port's
    shaper ran at; a switch that reports no shaper at the planned rate did not
    apply it (applied false, with the reason)."""
    sw, _, port = row["where"].split()[:3]
    stats = switch_stats.get(sw)
    if stats is None:
        return                   # no stats (the switch died): nothing to compare
    shaper = ((stats.get("ports") or {}).get(port) or {}).get("ingress_shaper")
    want = float(row["value"]) * 1e6
    if not shaper or abs(shaper.get("rate_bps", 0) - want) > 1e-6 * want:
        row["applied"] = False
        row["note"] = f"the switch reported shaper {shaper!r} on port {port}, not {row['value']:g} Mbit/s"
        return
    row["observed"] = shaper


def unconfigured_switch_drops(switch_stats: dict[str, Any]) -> list[str]:
    """Frames a soft switch lost that no impairment asked for: its receive ring was
    full (the kernel dropped them: rx_kernel_drops; with the switch shaping a host's
    uplink the ring is that link's queue) or its send buffer stayed full
    (tx_dropped). A modeled link has no such loss, so each is a warning of its own."""
    out = []
    for sw, st in sorted((switch_stats or {}).items()):
        for port, p in sorted(((st or {}).get("ports") or {}).items(), key=lambda kv: int(kv[0])):
            ring, send = int(p.get("rx_kernel_drops") or 0), int(p.get("tx_dropped") or 0)
            if ring or send:
                out.append(f"switch {sw} port {port} lost frames no impairment asked for: "
                           f"{ring} on receive (its ring was full), {send} on send (its buffer stayed full)")
    return out


_RATE_COUNTER = {"loss_pct": "dropped", "duplicate_pct": "duplicated", "reorder_pct": "reordered",
                 "delay_ms": "delayed", "jitter_ms": "delayed"}


def fill_drop_simulator_observed(rows: list[dict[str, Any]],
                                 counters: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Add the drop simulators' counts (the run's switch counters, as
    ControlPlane.read_counters gives them) to the rows they applied (copies).
    Only drops are counted per port, so there is no observed rate."""
    out = []
    for r in rows:
        r = dict(r)
        if r["applied"] and r["mechanism"] == DROP_SIMULATOR:
            sw, _, port, _, ctl = r["where"].split()
            cell = (counters.get(sw) or {}).get(f"{ctl}.dropped", {}).get(port) or {}
            r["observed"] = {"dropped": int(cell.get("packets", 0)), "counter": f"{ctl}.dropped[{port}]"}
        out.append(r)
    return out


def _rate(param: str, counters: dict[str, Any]) -> float | None:
    seen = counters.get("seen")
    n = counters.get(_RATE_COUNTER.get(param, ""))
    if not seen or n is None:
        return None
    return n / seen


def switch_port_counters(stats: Any, port: int, stage: str) -> dict[str, Any] | None:
    """The impairment counters of one port stage in a soft switch's stats
    (``ports["<no>"]["impairments"][stage]``)."""
    try:
        c = stats["ports"][str(port)]["impairments"][stage]
    except (KeyError, TypeError):
        return None
    return c if isinstance(c, dict) else None
