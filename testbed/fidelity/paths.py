"""How many switches a message crosses: the point's path table.

On a star every message crosses one switch; on a tree (testbed/net/topology.py)
two between a leaf and the spine, three leaf to leaf. The runner writes the
point's table beside the traces (`paths.json`: {"switches": {src: {dst: k}}},
from TopologyPlan.path_switches); `monitor.load_traces` puts each host's row in
its trace header (`path_switches`), so that the monitor and the projector,
which take (header, nodes) pairs, find it there. A pair not in the table (no
paths.json: runs from before it, `--net local`; renamed replicas of a projected
world) counts 1, as every run did before.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

PATHS_FILE = "paths.json"          # switches per (src, dst) host pair, beside the traces
PATHS_HEADER_KEY = "path_switches"
# A "ps" collective's server: the host named ps (the addressing contract,
# docs/architecture.md: ps = 10.0.0.200).
PS_SERVER_HOST = "ps"

Trace = tuple[dict[str, Any], list[dict[str, Any]]]
Table = dict[tuple[str, str], int]


def write_path_table(path: str | Path, switches: dict[str, dict[str, int]]) -> None:
    """The point's `paths.json` (module docstring) from src -> dst -> switches."""
    Path(path).write_text(json.dumps({"switches": switches}, indent=1, sort_keys=True) + "\n")


def read_path_table(path: str | Path) -> dict[str, dict[str, int]]:
    """src -> dst -> switches from a `paths.json`; {} when there is none (every pair 1)."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    table = doc.get("switches") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected {{\"switches\": {{src: {{dst: count}}}}}}")
    for src, row in table.items():
        if not isinstance(row, dict):
            raise ValueError(f"{path}: switches.{src}: expected {{dst: count}}, got {row!r}")
        for dst, k in row.items():
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ValueError(f"{path}: switches.{src}.{dst}: {k!r} is not an integer >= 1")
    return table


def path_switches(traces: Sequence[Trace]) -> Table:
    """(src, dst) -> switches, from the headers' `path_switches` rows (absent pairs: 1)."""
    return {(str(h.get("host")), dst): int(k) for h, _ in traces
            for dst, k in (h.get(PATHS_HEADER_KEY) or {}).items()}


def collective_switches(algo: str, hosts: Sequence[str], table: Table) -> int:
    """The `switches` a collective among `hosts` (rank order) is costed with
    (network_model's module docstring): ring and gloo, the ring's slowest
    neighbour pair (rank r receives from r - 1); tree, the slowest parent-child
    pair of the binomial tree, either way; ps, a member's path to and from the
    server host; switch, the longest path between two members."""
    if not table or len(hosts) < 2:
        return 1
    if algo in ("ring", "gloo"):
        pairs = [(hosts[r - 1], hosts[r]) for r in range(len(hosts))]
    elif algo == "tree":
        from hosts.collectives.tree import tree_parent  # noqa: PLC0415
        up = [(hosts[r], hosts[tree_parent(r)]) for r in range(1, len(hosts))]
        pairs = up + [(b, a) for a, b in up]
    elif algo == "ps":
        pairs = [(h, PS_SERVER_HOST) for h in hosts] + [(PS_SERVER_HOST, h) for h in hosts]
    elif algo == "switch":
        pairs = [(a, b) for a in hosts for b in hosts if a != b]
    else:
        return 1
    return max(table.get(pair, 1) for pair in pairs)


def nic_table(traces: Sequence[Trace]) -> dict[str, str]:
    """endpoint -> the host whose NIC it uses, from the headers' `nic` (a process traced
    under a name of its own on another's host: ShadowSync's shadow, a colocated
    parameter server such as PHub's sharded_ps); an endpoint not in it is its own host."""
    return {str(h["host"]): str(h["nic"]) for h, _ in traces if h.get("nic") and h.get("host")}


def same_host(src: str, dst: str, nics: dict[str, str]) -> bool:
    """Whether a message from `src` to `dst` stays on one host (the same NIC at both
    ends): it crosses no link and no switch, in the emulation (loopback) as on the
    hardware."""
    return nics.get(src, src) == nics.get(dst, dst)
