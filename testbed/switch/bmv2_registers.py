"""Register reads and writes on a BMv2 switch over its Thrift runtime.

Why not P4Runtime: BMv2's P4Runtime server (PI) answers every register read or
write with UNIMPLEMENTED ("Register writes are not supported yet"), and the
controller needs them for the drop simulator's probability, slot resets and
reads. BMv2's own Thrift runtime has them.

Why simple_switch_CLI, not Thrift bindings in this process: the CLI is BMv2's
supported client, installed and versioned with the switch, and it runs on the
system Python that has Debian's python3-thrift. Importing the generated
bindings here would mean exposing system packages (thrift, the bindings under
the tools' prefix) to the venv. One CLI process per batch of commands, fed on
stdin; its answers are parsed per command, so a refused write is named.

    regs = ThriftRegisters("s1", "127.0.0.1:9090", bmv2.tools())
    regs.write([("DropSimulator.drop_probability", 1, 1 << 31)])
    regs.read("DropSimulator.drop_probability", 1)    # {1: 2147483648}
"""
from __future__ import annotations

import re
import subprocess
from typing import Iterable

from testbed.switch.bmv2_tools import Bmv2Tools
from testbed.switch.controller import ControllerError

PROMPT = "RuntimeCmd: "      # the CLI prints it before reading each command
LOG_MAX_COMMANDS = 16        # commands shown per logged batch
_CELL = re.compile(r"^(?P<name>\S+)\[(?P<index>\d+)\]=\s*(?P<value>-?\d+)$")
_ALL = re.compile(r"^(?P<name>\S+)=\s*(?P<values>.*)$")


class RegisterError(ControllerError):
    """The CLI did not run, or refused a command; the message names which and why."""


def parse_replies(stdout: str, n_commands: int) -> list[str]:
    """The CLI's answer to each of n_commands (stripped; "" for none). Its stdout is
    a banner, then per command the prompt and the answer, then the prompt read
    at end of input: fewer prompts mean the CLI stopped before the end."""
    chunks = stdout.split(PROMPT)
    if len(chunks) < n_commands + 2:
        raise RegisterError(f"simple_switch_CLI answered {max(len(chunks) - 2, 0)} of "
                            f"{n_commands} commands; its output ends: "
                            f"{stdout.strip().splitlines()[-3:] if stdout.strip() else '(nothing)'}")
    return [c.strip() for c in chunks[1:n_commands + 1]]


class ThriftRegisters:
    """The registers of one BMv2 switch, through simple_switch_CLI on its Thrift port."""

    def __init__(self, switch: str, thrift_addr: str, tools: Bmv2Tools, request_log=None,
                 timeout: float = 300.0):
        host, _, port = thrift_addr.rpartition(":")
        self.switch = switch
        self.argv = tools.cli_argv(int(port), host or "127.0.0.1")
        self.env = tools.env()
        self.log = request_log          # p4runtime_log.RequestLog, or None
        self.timeout = timeout

    def run(self, commands: list[str], what: str) -> list[str]:
        """Each command's answer; raises RegisterError if the CLI fails to answer them all."""
        token = self.log.request(f"Thrift {what}", note=f"{len(commands)} commands") \
            if self.log else None
        shown = [f"> {c}" for c in commands[:LOG_MAX_COMMANDS]]
        if len(commands) > LOG_MAX_COMMANDS:
            shown.append(f"... {len(commands) - LOG_MAX_COMMANDS} more")
        try:
            res = subprocess.run(self.argv, input="\n".join(commands) + "\n", text=True,
                                 capture_output=True, timeout=self.timeout, env=self.env)
            if res.returncode != 0:
                last = (res.stdout + res.stderr).strip().splitlines()[-3:]
                raise RegisterError(f"{self.switch}: simple_switch_CLI exited {res.returncode} "
                                    f"({' '.join(self.argv)}): {' | '.join(last)}")
            replies = parse_replies(res.stdout, len(commands))
        except subprocess.TimeoutExpired:
            err = RegisterError(f"{self.switch}: simple_switch_CLI did not finish {len(commands)} "
                                f"commands in {self.timeout:.0f}s ({' '.join(self.argv)})")
            self._log_reply(token, what, str(err), shown)
            raise err from None
        except (OSError, RegisterError) as e:
            self._log_reply(token, what, str(e), shown)
            raise RegisterError(str(e)) from None
        self._log_reply(token, what, "OK", shown + [f"< {r}" for r in replies[:LOG_MAX_COMMANDS] if r])
        return replies

    def _log_reply(self, token, what: str, status: str, notes: list[str]) -> None:
        if self.log and token:
            self.log.response(f"Thrift {what}", token, status=status, notes=notes)

    def write(self, cells: Iterable[tuple[str, int, int]], what: str = "register_write") -> None:
        """register_write per (name, index, value); a write answers nothing when it works."""
        commands = [f"register_write {name} {int(i)} {int(v)}" for name, i, v in cells]
        if not commands:
            return
        replies = self.run(commands, what)
        bad = [(c, r) for c, r in zip(commands, replies) if r]
        if bad:
            raise RegisterError(f"{self.switch}: {len(bad)} of {len(commands)} register writes "
                                "refused: " + "; ".join(f"{c!r}: {r}" for c, r in bad[:5]))

    def read_cells(self, cells: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Several cells in one CLI run: {(name, index): value}."""
        cells = [(n, int(i)) for n, i in cells]
        replies = self.run([f"register_read {n} {i}" for n, i in cells], "register_read cells")
        out = {}
        for (n, i), reply in zip(cells, replies):
            m = _CELL.match(reply.splitlines()[-1] if reply else "")
            if not (m and m["name"] == n and int(m["index"]) == i):
                raise RegisterError(f"{self.switch}: 'register_read {n} {i}': unexpected answer {reply!r}")
            out[(n, i)] = int(m["value"])
        return out

    def read(self, name: str, index: int | None = None) -> dict[int, int]:
        """{index: value} of one cell, or of every cell when index is None."""
        cmd = f"register_read {name}" + ("" if index is None else f" {int(index)}")
        (reply,) = self.run([cmd], f"register_read {name}")
        last = reply.splitlines()[-1] if reply else ""
        if index is not None:
            m = _CELL.match(last)
            if m and m["name"] == name and int(m["index"]) == int(index):
                return {int(index): int(m["value"])}
        else:
            m = _ALL.match(last)
            if m and m["name"] == name:
                values = [v.strip() for v in m["values"].split(",") if v.strip()]
                return {i: int(v) for i, v in enumerate(values)}
        raise RegisterError(f"{self.switch}: {cmd!r}: unexpected answer {reply!r}")


__all__ = ["ThriftRegisters", "RegisterError", "parse_replies"]
