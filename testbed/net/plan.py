"""The dry run's recorder: what a run would do, written down instead of done.

`testbed run --dry-run` runs the real code of a point (network planning, the
control plane's P4Runtime messages, the workload's host programs and configs)
with a `PlanRecorder` where the executor would be: a network with a recorder
records the commands it would run on each node instead of running them, its
`popen` returns a `RecordedProcess` (already exited, code 0), and the control
plane's controller records its requests instead of sending them. Nothing is
started and nothing is written outside the dry run's own temporary folder.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The dry run's placeholder for the run folder in everything it prints.
RUN_PLACEHOLDER = "<run>"


@dataclass
class PointPlan:
    label: str
    commands: list[dict[str, Any]] = field(default_factory=list)   # {node, argv, env, what}
    configs: dict[str, str] = field(default_factory=dict)          # path -> content
    p4runtime: list[dict[str, Any]] = field(default_factory=list)  # {switch, rpc, message}
    registers: list[dict[str, Any]] = field(default_factory=list)  # {switch, via, what}
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None


class PlanRecorder:
    """Collects, per sweep point, what the run would do."""

    def __init__(self, run_dir: str | Path | None = None):
        # Paths under run_dir (the dry run's temporary folder) print as <run>/...
        self.run_dir = str(run_dir) if run_dir is not None else None
        self.points: list[PointPlan] = []

    @property
    def current(self) -> PointPlan:
        if not self.points:
            self.begin_point("(setup)")
        return self.points[-1]

    def begin_point(self, label: str) -> PointPlan:
        self.points.append(PointPlan(label))
        return self.points[-1]

    # --- what the executors report ---------------------------------------------------
    def command(self, node: str, argv: list[str], what: str, env: dict[str, str] | None = None,
                where: str | None = None) -> None:
        """argv run on node (`where`: the machine it runs on, for real hosts)."""
        self.current.commands.append({"node": node, "argv": [str(a) for a in argv], "what": what,
                                      "env": dict(env or {}), "where": where})

    def script(self, node: str, script: str, what: str, where: str | None = None) -> None:
        self.command(node, ["sh", "-c", script], what, where=where)

    def config(self, path: str | Path, content: str) -> None:
        self.current.configs[str(path)] = content

    def p4runtime(self, switch: str, rpc: str, message: str) -> None:
        """rpc: one line (for a Write, the update in one line); message: the protobuf text."""
        self.current.p4runtime.append({"switch": switch, "rpc": rpc, "message": message})

    def register_write(self, switch: str, via: str, what: str) -> None:
        self.current.registers.append({"switch": switch, "via": via, "what": what})

    def note(self, text: str) -> None:
        self.current.notes.append(text)

    def skip(self, reason: str) -> None:
        self.current.skipped = reason

    # --- output ------------------------------------------------------------------------
    def _short(self, text: str) -> str:
        return text.replace(self.run_dir, RUN_PLACEHOLDER) if self.run_dir else text

    def to_dict(self) -> list[dict[str, Any]]:
        out = []
        for p in self.points:
            out.append({
                "label": p.label, "skipped": p.skipped, "notes": [self._short(n) for n in p.notes],
                "commands": [{**c, "argv": [self._short(a) for a in c["argv"]], "what": self._short(c["what"]),
                              "env": {k: self._short(v) for k, v in c["env"].items()}}
                             for c in p.commands],
                "configs": {self._short(k): self._short(v) for k, v in p.configs.items()},
                "p4runtime": [{**w, "message": self._short(w["message"])} for w in p.p4runtime],
                "registers": p.registers,
            })
        return out

    def summary(self) -> str:
        """One line per point: what it starts where, its configs and control-plane
        requests, counted (`testbed run --dry-run --summary`)."""
        lines = []
        for p in self.to_dict():
            if p["skipped"]:
                lines.append(f"{p['label']}: SKIPPED: {p['skipped']}")
                continue
            nodes = sorted({c["node"] for c in p["commands"]})
            rpcs: dict[str, int] = {}
            for w in p["p4runtime"]:
                rpc = w["rpc"].split()[0]
                rpcs[rpc] = rpcs.get(rpc, 0) + 1
            lines.append(f"{p['label']}: {len(p['commands'])} command(s) on {len(nodes)} node(s) "
                         f"({', '.join(nodes)}); {len(p['configs'])} config(s); P4Runtime "
                         + (", ".join(f"{n} {k}" for k, n in sorted(rpcs.items())) or "none")
                         + (f"; {len(p['registers'])} register write(s)" if p["registers"] else "")
                         + (f"; {len(p['notes'])} note(s)" if p["notes"] else ""))
        return "\n".join(lines)

    def format(self, max_message_lines: int = 40) -> str:
        lines: list[str] = []
        for p in self.to_dict():
            lines.append(f"=== point {p['label']}" + (f": SKIPPED: {p['skipped']}" if p["skipped"] else ""))
            for n in p["notes"]:
                lines.append(f"  note: {n}")
            by_node: dict[str, list[dict]] = {}
            for c in p["commands"]:
                by_node.setdefault(c["node"], []).append(c)
            for node, cmds in by_node.items():
                lines.append(f"  [{node}]")
                for c in cmds:
                    where = f" (on {c['where']})" if c.get("where") else ""
                    lines.append(f"    # {c['what']}{where}")
                    if c["env"]:
                        lines.append("    env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(c["env"].items())))
                    if c["argv"][:2] == ["sh", "-c"] and len(c["argv"]) == 3:
                        lines += ["    " + ln for ln in c["argv"][2].splitlines()]
                    else:
                        lines.append("    " + shlex.join(c["argv"]))
            for path, content in p["configs"].items():
                lines.append(f"  config {path}:")
                body = content.splitlines()
                lines += ["    " + ln for ln in body[:max_message_lines]]
                if len(body) > max_message_lines:
                    lines.append(f"    ... ({len(body) - max_message_lines} more lines)")
            for w in p["p4runtime"]:
                lines.append(f"  P4Runtime {w['switch']}: {w['rpc']}")
                if not w["rpc"].startswith("Write "):   # a Write's rpc line says it all
                    lines += ["    " + ln for ln in w["message"].splitlines()[:max_message_lines]]
            for r in p["registers"]:
                lines.append(f"  register {r['switch']} via {r['via']}: {r['what']}")
        return "\n".join(lines) + "\n"


class RecordedProcess:
    """What popen returns in a dry run: a process that was never started and
    counts as exited with code 0 (so the runner's waiting and stopping pass)."""

    pid = None
    returncode = 0

    def __init__(self, host: str, argv: list[str]):
        self.host, self.args = host, list(argv)

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:  # noqa: ARG002
        return 0

    def terminate(self) -> None:
        pass

    def kill(self) -> None:
        pass

    send_signal = lambda self, sig: None  # noqa: E731
