"""The scenario schema: pydantic models for everything a scenario file can say.

Models are strict (no "4" -> 4 or true -> 1 coercion: a wrong type in a file is a
mistake worth reporting), forbid unknown keys (a typo is an error, not a silent
default) and are frozen (a resolved scenario is a value; sweeps derive new
scenarios from raw dicts instead of mutating one).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from testbed import wire
from testbed.results import PROJECT_ROOT
from testbed.switch.soft.pcap import MAX_SNAPLEN
from testbed.workloads import seal_registry

# allow_inf_nan=False: `.inf` / `.nan` are valid YAML floats but no valid delay,
# rate or percentage; refused here rather than by tc or the switch mid-run.
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

# Mininet addresses workers as 10.0.0.<i> and the PS as 10.0.0.200.
MAX_WORKERS = 199

# Dict fields whose keys are dotted paths into the scenario (`links.loss_pct`):
# overrides must treat the rest of a path as one key there, not as nesting.
DOTTED_KEYS = {"dotted_keys": True}


def bounds_why(reason: str) -> dict[str, str]:
    """json_schema_extra of a field whose bounds need a reason: the loader's
    out-of-bounds error says it (validate._bounds_why)."""
    return {"bounds_why": reason}


# --- figures ----------------------------------------------------------------
# Figure names a scenario may list. The plotting package registers its names;
# the two allreduce figures are known up front so loading a scenario does not
# need to import matplotlib.
BUILTIN_FIGURES = frozenset({"goodput_vs_size", "latency_cdf", "latency_vs_loss"})
known_figures: set[str] = set(BUILTIN_FIGURES)


def register_figure_names(*names: str) -> None:
    known_figures.update(names)


# --- topology ---------------------------------------------------------------
class Topology(BaseModel):
    """Which hosts and switches exist and how they connect."""

    model_config = STRICT

    kind: Literal["star", "tree"] = Field(
        "star", description="star: all hosts on one switch s1; tree: leaf switches under one spine.")
    workers: int = Field(
        4, ge=1, le=MAX_WORKERS, description="Number of worker hosts, named w1..wN.")
    leaves: int = Field(
        2, ge=1, description="Number of leaf switches (tree only; at most `workers`). Ignored for star.")


# --- links ------------------------------------------------------------------
# htb needs a rate of at least 1 byte/s (tc refuses less, and Mininet then runs
# the link unshaped); below 10 kbit/s one 1500-byte frame takes over a second,
# so nothing a scenario measures could run. Documented in docs/scenarios.md.
MIN_BANDWIDTH_MBPS = 0.01
Bandwidth = Optional[Annotated[float, Field(ge=MIN_BANDWIDTH_MBPS)]]
Percent = Annotated[float, Field(ge=0, le=100)]
NonNegative = Annotated[float, Field(ge=0)]

_LINK_DOCS = {
    "bandwidth_mbps": f"Rate limit per direction in Mbit/s (htb on both ends), at least "
                      f"{MIN_BANDWIDTH_MBPS}; null = unlimited.",
    "delay_ms": "One-way delay added per direction, in milliseconds.",
    "jitter_ms": "Random variation of the delay (+/-), in milliseconds.",
    "loss_pct": "Share of packets dropped per direction, in percent.",
    "duplicate_pct": "Share of packets delivered twice, in percent.",
    "reorder_pct": "Share of packets delivered out of order, in percent.",
}


class LinkParams(BaseModel):
    """Impairments of a link, applied per direction like netem."""

    model_config = STRICT

    bandwidth_mbps: Bandwidth = Field(None, description=_LINK_DOCS["bandwidth_mbps"])
    delay_ms: NonNegative = Field(0.0, description=_LINK_DOCS["delay_ms"])
    jitter_ms: NonNegative = Field(0.0, description=_LINK_DOCS["jitter_ms"])
    loss_pct: Percent = Field(0.0, description=_LINK_DOCS["loss_pct"])
    duplicate_pct: Percent = Field(0.0, description=_LINK_DOCS["duplicate_pct"])
    reorder_pct: Percent = Field(0.0, description=_LINK_DOCS["reorder_pct"])


class LinkOverride(BaseModel):
    """Per-host link values; a field left out inherits the value from `links`.

    Only the fields written in the file count (pydantic's fields-set), so an
    explicit `bandwidth_mbps: null` means "unlimited for this host".
    """

    model_config = STRICT

    bandwidth_mbps: Bandwidth = Field(None, description=_LINK_DOCS["bandwidth_mbps"])
    delay_ms: Optional[NonNegative] = Field(None, description=_LINK_DOCS["delay_ms"])
    jitter_ms: Optional[NonNegative] = Field(None, description=_LINK_DOCS["jitter_ms"])
    loss_pct: Optional[Percent] = Field(None, description=_LINK_DOCS["loss_pct"])
    duplicate_pct: Optional[Percent] = Field(None, description=_LINK_DOCS["duplicate_pct"])
    reorder_pct: Optional[Percent] = Field(None, description=_LINK_DOCS["reorder_pct"])

    @model_serializer(mode="wrap")
    def _only_fields_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Dump only what was written, so a dump (e.g. the manifest) loads back
        # with the same meaning: a None written here overrides, a missing one inherits.
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


class Links(LinkParams):
    """Every host's link to its switch, with optional per-host overrides."""

    mechanism: Literal["auto", "switch", "nftables", "netem"] = Field(
        "auto", description="How impairments are applied: auto picks the best available; "
                            "switch: in the soft switch; nftables: loss on host links, both ways, any switch backend; "
                            "netem: kernel qdisc.")
    shaper: Literal["auto", "htb"] = Field(
        "auto", description="How bandwidth_mbps is enforced. auto: on the soft switch, a host's "
                            "uplink is shaped by the switch at its port's receive ring and its downlink "
                            "by htb on the switch port; otherwise htb at the sending end of each direction. "
                            "htb: htb at both ends (costly for small frames on this VM: see README, "
                            "Limits).")
    hosts: dict[str, LinkOverride] = Field(
        default_factory=dict, description="Per-host overrides, e.g. `{w2: {loss_pct: 5}}`.")

    def for_host(self, host: str) -> LinkParams:
        """The effective link values of `host` (shared values + its overrides)."""
        base = {name: getattr(self, name) for name in LinkParams.model_fields}
        override = self.hosts.get(host)
        if override is not None:
            base.update(override.model_dump())
        return LinkParams(**base)


# --- switch -----------------------------------------------------------------
# The shortest capture whose aggregation frames still decode: Ethernet, IPv4, UDP
# and the INA header, where the values begin (`testbed pcap`, testbed.pcap_ina).
MIN_CAPTURE_BYTES = wire.VALUES_OFFSET


class Switch(BaseModel):
    """The switch implementation and the program it runs."""

    model_config = STRICT

    backend: Literal["soft", "bmv2", "tofino"] = Field(
        "soft", description="soft: the testbed's software switch; bmv2: simple_switch_grpc; "
                            "tofino: a real Tofino via its SDE.")
    program: str = Field(
        "ina", min_length=1, description="P4 program under p4/ (the soft switch mirrors it).")
    capture: bool = Field(
        True, description="Write a pcap per switch interface into the run folder.")
    capture_bytes: Optional[int] = Field(
        None, ge=MIN_CAPTURE_BYTES, le=MAX_SNAPLEN,
        json_schema_extra=bounds_why(f"a capture keeps at least the headers `testbed pcap` decodes, Ethernet + "
                                     f"IPv4 + UDP + aggregation header = {MIN_CAPTURE_BYTES} bytes "
                                     f"(testbed/wire.py), at most {MAX_SNAPLEN}, the largest pcap snaplen; "
                                     "null keeps whole frames"),
        description="Bytes kept of each captured frame (the pcaps' snaplen, tcpdump's `-s`); "
                    "null: whole frames. Longer frames are cut, and their records keep the "
                    "length on the wire, so `testbed pcap` still counts every byte and decodes "
                    "every aggregation header; only payloads are lost. At least "
                    f"{MIN_CAPTURE_BYTES}: Ethernet + IPv4 + UDP + the aggregation header "
                    "(testbed/wire.py); needs `capture: true`.")
    capture_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts that also capture at their own interface (`<host>-eth0.pcap` beside the switch "
                    "ports' pcaps, tcpdump in the host's namespace, cut at `capture_bytes`): what a host "
                    "sent and received, before the switch and its impairments. Mininet networks only; "
                    "needs `capture: true`.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific settings, passed through unchanged.")


# --- network mode -----------------------------------------------------------
class Cluster(BaseModel):
    """Mininet's own cluster mode (mininet.examples.cluster.MininetCluster): the
    emulated hosts spread over several servers joined over SSH (docs/real-rack.md)."""

    model_config = STRICT

    servers: list[str] = Field(
        min_length=1, description="Servers (host names or addresses Mininet reaches over SSH as root, "
                                  "without a password); the first runs the runner and the switch.")
    placement: dict[str, str] = Field(
        default_factory=dict, description="Host -> server; hosts not named here go round-robin over "
                                          "`servers` (Mininet's RoundRobinPlacer).")
    link: Literal["gre", "ssh"] = Field(
        "gre", description="How a link between servers is carried: gre (RemoteGRELink, kernel GRE "
                           "tunnel) or ssh (RemoteSSHLink, an `ssh -w` tap tunnel).")
    user: Optional[str] = Field(None, description="SSH user on the servers (default: Mininet's, the "
                                                  "sudo user or root).")


class Net(BaseModel):
    """Where the hosts run. `testbed run --net` overrides `mode`."""

    model_config = STRICT

    mode: Literal["mininet", "local", "ssh", "cluster"] = Field(
        "mininet", description="mininet: one machine's namespaces; local: loopback processes; ssh: real "
                               "servers named in `inventory`; cluster: Mininet cluster mode over `cluster.servers`.")
    inventory: Optional[str] = Field(
        None, description="net ssh: inventory YAML (servers, users, keys, which host each plays, the switch "
                          "node); relative to the project root or absolute. See docs/real-rack.md.")
    cluster: Optional[Cluster] = Field(None, description="net cluster: the servers and placement.")


# --- stragglers -------------------------------------------------------------
class Straggler(BaseModel):
    """A host that runs slower than the others."""

    model_config = STRICT

    host: str = Field(description="Host name, e.g. `w2` (a worker or a workload host such as `ps`).")
    start_s: NonNegative = Field(
        0.0, description="Seconds after the workload starts when the slowdown begins.")
    slowdown: float = Field(
        1.0, ge=1.0, description="Factor on the host's modeled compute time (1 = normal speed).")
    delay_ms: NonNegative = Field(
        0.0, description="Extra stall per iteration, in milliseconds.")


# --- sweep ------------------------------------------------------------------
class Case(BaseModel):
    """A named variant of the scenario, crossed with the grid."""

    model_config = STRICT

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$",
        description="Case name, used in point labels and results (letters, digits, `_`, `-`).")
    set: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra=DOTTED_KEYS,
        description="Values to set for this case, by dotted path: `{links.loss_pct: 1}`.")


# A grid key with no values would make a sweep of zero points: refused.
GridValues = Annotated[list[Any], Field(min_length=1)]
# Sweeps are counted before they are expanded; more points than this is
# almost certainly a mistake (1000 x 1000 values), so it needs saying so.
DEFAULT_MAX_POINTS = 10_000


class QuickSweep(BaseModel):
    """Changes for `--quick` runs (smoke tests, CI)."""

    model_config = STRICT

    set: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra=DOTTED_KEYS,
        description="Values set on every point in quick mode, by dotted path.")
    grid: Optional[dict[str, GridValues]] = Field(
        None, json_schema_extra=DOTTED_KEYS,
        description="Replaces `sweep.grid` in quick mode; null keeps the full grid.")
    cases: Optional[Annotated[list[str], Field(min_length=1)]] = Field(
        None, description="Names of the cases to keep in quick mode (at least one); null keeps all.")
    repeats: Optional[Annotated[int, Field(ge=1)]] = Field(
        None, description="Replaces `sweep.repeats` in quick mode; null keeps it.")


class Sweep(BaseModel):
    """Which variants of the scenario to run: cases x grid x repeats."""

    model_config = STRICT

    grid: dict[str, GridValues] = Field(
        default_factory=dict, json_schema_extra=DOTTED_KEYS,
        description="Dotted path -> values; every combination is run (keys vary in file order).")
    cases: list[Case] = Field(
        default_factory=list, description="Named variants, each crossed with the grid; none = one case `base`.")
    repeats: int = Field(
        1, ge=1, description="Runs of every case/grid combination, each with its own seed.")
    seed: int = Field(
        1, description="Root of the per-point seeds (derived from it, the case, grid values and repeat).")
    quick: QuickSweep = Field(
        default_factory=QuickSweep, description="Smaller sweep for `--quick` runs.")
    max_points: int = Field(
        DEFAULT_MAX_POINTS, ge=1,
        description="Most points a sweep (or its quick variant) may have; counted before expanding. "
                    "Raise it here or with `testbed run --max-points N`.")


# --- the scenario -----------------------------------------------------------
def _workload_union() -> Any:
    models = tuple(seal_registry().values())
    return Annotated[Union[models], Field(discriminator="kind")]  # type: ignore[valid-type]


WorkloadSpec = _workload_union()
SKIP_SEMANTIC = "skip_semantic_checks"


class Scenario(BaseModel):
    """One experiment: network, switch, workload, impairments, sweep and figures."""

    model_config = STRICT

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
        description="Scenario name; names the results folder (lowercase letters, digits, `_`, `-`).")
    description: str = Field("", description="Free text shown in the manifest and reports.")
    topology: Topology = Field(default_factory=Topology, description="Hosts and switches.")
    links: Links = Field(default_factory=Links, description="Link bandwidth and impairments.")
    switch: Switch = Field(default_factory=Switch, description="Switch backend and program.")
    net: Net = Field(default_factory=Net, description="Where hosts run (one machine, real servers, a cluster).")
    workload: WorkloadSpec = Field(description="What the hosts run; `kind` selects the workload.")
    stragglers: list[Straggler] = Field(default_factory=list, description="Slow hosts.")
    sweep: Sweep = Field(default_factory=Sweep, description="Cases, grid and repeats to run.")
    figures: list[str] = Field(default_factory=list, description=(
        "Figures `testbed plot` draws for a run; it refuses (exit 2, saying why) a figure of another "
        "workload, a run with no completed point, and a figure with a panel the run has no data for, "
        "and still draws the others."))

    # The raw mapping this scenario was validated from (after overrides), so
    # sweeps can derive point scenarios by editing the input, not the model.
    _raw: Optional[dict[str, Any]] = PrivateAttr(default=None)
    # `--set` overrides (path, value): they win over sweep cases and quick
    # settings too, and pin a swept grid key to the one value given.
    _cli_overrides: list = PrivateAttr(default_factory=list)
    # Sweep variants (False: full, True: quick) whose every combination the
    # loader has validated, so expand_points need not do it again.
    _checked_sweeps: set = PrivateAttr(default_factory=set)

    def __eq__(self, other: object) -> bool:
        # Same fields, same scenario, whether loaded from a file or built in Python
        # (pydantic's default would also compare the kept raw input).
        if not isinstance(other, Scenario):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def hosts(self) -> list[str]:
        """All host names: workers w1..wN, then the workload's own hosts (e.g. `ps`)."""
        workers = [f"w{i}" for i in range(1, self.topology.workers + 1)]
        return workers + list(self.workload.extra_hosts())

    @model_validator(mode="after")
    def _semantic(self, info: ValidationInfo) -> "Scenario":
        # The loader runs these checks itself to report them with file lines.
        if not (info.context or {}).get(SKIP_SEMANTIC):
            problems = semantic_problems(self)
            if problems:
                raise ValueError("; ".join(f"{format_loc(loc)}: {msg}" for loc, msg in problems))
        return self


Loc = tuple[Union[str, int], ...]


def format_loc(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def semantic_problems(scn: Scenario) -> list[tuple[Loc, str]]:
    """Cross-field checks a single field's type cannot express."""
    problems: list[tuple[Loc, str]] = []
    hosts = scn.hosts()
    known = ", ".join(hosts)

    topo = scn.topology
    if topo.kind == "tree" and topo.leaves > topo.workers:
        problems.append((("topology", "leaves"),
                         f"{topo.leaves} leaves for {topo.workers} workers; "
                         f"use at most as many leaves as workers"))

    for host in scn.links.hosts:
        if host not in hosts:
            problems.append((("links", "hosts", host), f"unknown host {host!r}; hosts are {known}"))

    first: dict[str, int] = {}
    for i, s in enumerate(scn.stragglers):
        if s.host not in hosts:
            problems.append((("stragglers", i, "host"), f"unknown host {s.host!r}; hosts are {known}"))
        elif s.host in first:
            problems.append((("stragglers", i, "host"), f"host {s.host!r} is already a straggler "
                             f"(stragglers.{first[s.host]}); merge the two entries"))
        first.setdefault(s.host, i)

    seen: set[str] = set()
    for i, case in enumerate(scn.sweep.cases):
        if case.name in seen:
            problems.append((("sweep", "cases", i, "name"), f"duplicate case name {case.name!r}"))
        seen.add(case.name)
    names = [c.name for c in scn.sweep.cases] or ["base"]
    for i, name in enumerate(scn.sweep.quick.cases or []):
        if name not in names:
            problems.append((("sweep", "quick", "cases", i),
                             f"no case named {name!r}; cases are {', '.join(names)}"))

    problems += switch_problems(scn.switch)
    problems += net_problems(scn, hosts)

    for i, fig in enumerate(scn.figures):
        if fig not in known_figures:
            problems.append((("figures", i),
                             f"unknown figure {fig!r}; known: {', '.join(sorted(known_figures))}"))
    return problems


# --- switch program and options --------------------------------------------
P4_DIR = PROJECT_ROOT / "p4"
# What the soft switch loads for `switch.program`. bmv2 checks its program and
# options itself when it compiles (testbed.switch.bmv2); tofino is a dry run.
PROGRAM_FILES = {"soft": "{}.p4info.txtpb"}
# Soft switch config keys the testbed fills in per point; an option would be silently overridden.
SOFT_RESERVED = {
    "name": "the switch name", "ports": "the topology", "forwarding": "the control plane",
    "impairments": "links", "seed": "sweep.seed", "pcap_dir": "switch.capture",
    "pcap_snaplen": "switch.capture_bytes",
    "stats_path": "the runner", "ready_path": "the runner", "p4runtime_addr": "the runner",
    "pipeline": "switch.program",
}
NICE_RANGE = (-20, 19)


def switch_problems(sw: Switch) -> list[tuple[Loc, str]]:
    """`switch.program` exists for the backend; `switch.options` the backend can use;
    `switch.capture_bytes` keeps the headers of what is captured."""
    problems: list[tuple[Loc, str]] = capture_problems(sw)
    pattern = PROGRAM_FILES.get(sw.backend)
    if pattern and not (P4_DIR / pattern.format(sw.program)).is_file():
        known = sorted(p.name[:-len(pattern.format(""))] for p in P4_DIR.glob(pattern.format("*")))
        problems.append((("switch", "program"), f"no program {sw.program!r} for switch.backend "
                         f"{sw.backend} (p4/{pattern.format(sw.program)} does not exist); "
                         f"programs: {', '.join(known) or 'none'}"))
    opts = sw.options
    if sw.backend == "soft":
        from testbed.switch.soft.config import (  # noqa: PLC0415 - the switch's own bounds
            IO_IMPLS, MAX_BATCH, MAX_IO_SPIN_US, PIPELINE_IMPLS)
        for key, owner in SOFT_RESERVED.items():
            if key in opts:
                problems.append((("switch", "options", key), f"set by the testbed from {owner}; "
                                 f"remove it from switch.options"))
        impl = opts.get("pipeline_impl")
        if impl is not None and impl not in PIPELINE_IMPLS:
            problems.append((("switch", "options", "pipeline_impl"),
                             f"must be one of {', '.join(PIPELINE_IMPLS)} (absent: compiled "
                             f"when `make setup` built it), got {impl!r}"))
        io_impl = opts.get("io_impl")
        if io_impl is not None and io_impl not in IO_IMPLS:
            problems.append((("switch", "options", "io_impl"),
                             f"must be one of {', '.join(IO_IMPLS)} (absent: ring_fastpath "
                             f"when `make setup` built it), got {io_impl!r}"))
        checks = {"batch": (1, MAX_BATCH), "nice": NICE_RANGE, "io_spin_us": (0, MAX_IO_SPIN_US)}
        for key, (lo, hi) in checks.items():
            if key in opts:
                v = opts[key]
                if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                    problems.append((("switch", "options", key),
                                     f"must be an integer in {lo}..{hi}, got {v!r}"))
    return problems


def capture_problems(sw: Switch) -> list[tuple[Loc, str]]:
    """`switch.capture_bytes` cuts what is captured and `switch.capture_hosts`
    adds host-side captures: both refused without a capture. (The snaplen's
    bounds are the field's own; unknown host names: net_problems.)"""
    problems: list[tuple[Loc, str]] = []
    if sw.capture_bytes is not None and not sw.capture:
        problems.append((("switch", "capture_bytes"),
                         f"{sw.capture_bytes}, but switch.capture is false (nothing is captured): remove "
                         "switch.capture_bytes (--set switch.capture_bytes=null) or set switch.capture: true"))
    if sw.capture_hosts and not sw.capture:
        problems.append((("switch", "capture_hosts"),
                         f"{sw.capture_hosts}, but switch.capture is false (nothing is captured): set "
                         "switch.capture: true or remove switch.capture_hosts"))
    return problems


def net_problems(scn: Scenario, hosts: list[str]) -> list[tuple[Loc, str]]:
    """`net`: the mode's settings are present, and a cluster places known hosts on its servers."""
    net, problems = scn.net, []
    for h in scn.switch.capture_hosts:
        if h not in hosts:
            problems.append((("switch", "capture_hosts"), f"{h!r} is not a host of this scenario "
                             f"({', '.join(hosts)})"))
    if net.mode == "ssh" and not net.inventory:
        problems.append((("net", "inventory"), "net.mode ssh needs an inventory file "
                         "(see docs/real-rack.md), e.g. --set net.inventory=rack/inventory.yaml"))
    if net.mode == "cluster" and net.cluster is None:
        problems.append((("net", "cluster"), "net.mode cluster needs `cluster: {servers: [...]}`"))
    if net.cluster is not None:
        for host, server in net.cluster.placement.items():
            if host not in hosts:
                problems.append((("net", "cluster", "placement", host),
                                 f"unknown host {host!r}; hosts are {', '.join(hosts)}"))
            if server not in net.cluster.servers:
                problems.append((("net", "cluster", "placement", host),
                                 f"server {server!r} is not in net.cluster.servers "
                                 f"({', '.join(net.cluster.servers)})"))
    return problems
