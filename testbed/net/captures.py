"""tcpdump captures at the interfaces the switch class cannot capture itself
(every switch port of a switch class without its own capture, and the hosts
named in switch.capture_hosts), and the proof that each pcap is complete.

libpcap reads Linux captures through a TPACKET_V3 ring whose blocks reach
tcpdump only when full or when the block timeout (tcpdump's 1 s) retires them,
and tcpdump exits at SIGTERM without reading the ring: a pcap that has not
grown for half a second can still lack the point's last frames (the whole last
message of an allreduce, when it was sent within that second). So stopping waits until
each pcap holds as many frames as its interface counted since the capture
began, and reads tcpdump's own statistics afterwards: a capture that still
lost frames is reported (Network.teardown_problems), never passed off as whole.

The drain ends the capture window. A frame can still reach an interface between
the drain's last look and tcpdump's exit (kernels keep talking after the programs
stop: a Linux bridge's router solicitation crossed both switch ports so in CI,
"tcpdump wrote 308 of the 309 frames", before the network quieted that device),
and tcpdump loses it at SIGTERM. When the pcap holds every frame its interface
had counted at the drain's last look and tcpdump reports no kernel drops, the
frames it lost are those later ones: a note (Captures.notes, and a line in the
capture's log), not a problem of the run.
"""
from __future__ import annotations

import re
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.net.base import stop_processes, with_parent_death_signal

LISTEN_LIMIT_S = 5.0    # tcpdump writes the pcap header once it listens
DRAIN_LIMIT_S = 10.0    # at most this long for the pcaps to catch up with the counters
POLL_S = 0.05

# node, argv, log path -> the started process (a Mininet node's popen)
Spawn = Callable[[str, list[str], Path], subprocess.Popen]
# node, interface -> frames the interface sent plus received so far (None: unreadable)
ReadFrames = Callable[[str, str], "int | None"]


def tcpdump_argv(intf: str, pcap: Path, snaplen: int | None) -> list[str]:
    cut = [] if snaplen is None else ["-s", str(snaplen)]
    return ["tcpdump", "-U", "-n", "-Z", "root", "-i", intf, *cut, "-w", str(pcap)]


@dataclass(eq=False)         # one capture is one tcpdump: compared by identity
class _Capture:
    node: str
    intf: str
    pcap: Path
    log: Path
    proc: subprocess.Popen
    counted_at_start: int | None = None
    counted: int | None = None      # frames the interface counted since, at the last look
    # Frames counted in the pcap so far, and where the next record starts.
    frames: int = 0
    offset: int = 0
    endian: str = ""


class Captures:
    """The network's tcpdump processes: start, wait until listening, drain, stop."""

    def __init__(self, pcap_dir: Path, log_dir: Path, snaplen: int | None, spawn: Spawn,
                 read_frames: ReadFrames, register: Callable[[int, str], None]) -> None:
        self.pcap_dir, self.log_dir, self.snaplen = pcap_dir, log_dir, snaplen
        self._spawn, self._read_frames, self._register = spawn, read_frames, register
        self._captures: list[_Capture] = []
        self.problems: list[str] = []
        self.notes: list[str] = []     # frames lost after the capture window closed

    @property
    def processes(self) -> list[subprocess.Popen]:
        return [c.proc for c in self._captures]

    def argv(self, intf: str) -> list[str]:
        return with_parent_death_signal(tcpdump_argv(intf, self.pcap_dir / f"{intf}.pcap", self.snaplen))

    def start(self, node: str, intfs: list[str]) -> None:
        """tcpdump on each interface of node; returns once all listen (or LISTEN_LIMIT_S)."""
        started = []
        for intf in intfs:
            log = self.log_dir / f"tcpdump-{intf}.log"
            p = self._spawn(node, self.argv(intf), log)
            self._register(p.pid, f"{node}: tcpdump {intf}")
            cap = _Capture(node, intf, self.pcap_dir / f"{intf}.pcap", log, p)
            self._captures.append(cap)
            started.append(cap)
        deadline = time.monotonic() + LISTEN_LIMIT_S
        while time.monotonic() < deadline and not all(c.pcap.exists() for c in started):
            time.sleep(0.02)
        for c in started:
            if not c.pcap.exists():
                self.problems.append(f"capture {c.intf}: tcpdump was not listening {LISTEN_LIMIT_S:g} s "
                                     f"after it started; frames before it are missing (see {c.log.name})")
            c.counted_at_start = self._read_frames(c.node, c.intf)

    def stop(self) -> None:
        """Once the hosts' programs have stopped: wait until every pcap holds the
        frames its interface counted (at most DRAIN_LIMIT_S), stop tcpdump, and
        note each capture that lost frames on the way."""
        if not self._captures:
            return
        behind = self._behind()
        deadline = time.monotonic() + DRAIN_LIMIT_S
        while behind and time.monotonic() < deadline:
            time.sleep(POLL_S)
            behind = self._behind()
        stop_processes(self.processes)
        for c in self._captures:
            drained = c not in behind
            _count_new_records(c)           # what tcpdump wrote until it exited
            # tcpdump's own statistics first; the counters where they say nothing
            stats = _tcpdump_statistics(c.log)
            if drained and _lost_only_after_window(c, stats):
                lost = stats["received by filter"] - stats["captured"]
                note = (f"capture {c.intf}: {lost} frame(s) reached the interface after the capture window "
                        f"closed (the pcap holds all {c.counted} it counted by then) and are not in the pcap")
                self.notes.append(note)
                _append_line(c.log, f"testbed: {note}")
                continue
            problem = _lost_frames(stats)
            if problem is None and not drained:
                problem = (f"{c.frames} frames in the pcap after {DRAIN_LIMIT_S:g} s, "
                           f"the interface counted {c.counted}")
            if problem:
                self.problems.append(f"capture {c.intf}: {problem} (see {c.log.name})")

    def _behind(self) -> list[_Capture]:
        """The captures whose pcap holds fewer frames than their interface counted
        since the capture began (one whose counters cannot be read is never behind:
        tcpdump's statistics judge it at the end). Each capture looked at keeps what
        its interface counted (`counted`), for the stop's report."""
        out = []
        for c in self._captures:
            now = self._read_frames(c.node, c.intf)
            if now is None or c.counted_at_start is None or c.proc.poll() is not None:
                continue
            c.counted = now - c.counted_at_start
            _count_new_records(c)
            if c.frames < c.counted:
                out.append(c)
        return out


def _count_new_records(c: _Capture) -> None:
    """Advance c.frames over the complete pcap records written since c.offset."""
    try:
        with open(c.pcap, "rb") as f:
            if not c.endian:
                head = f.read(24)
                if len(head) < 24:
                    return
                magic = head[:4]
                c.endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
                c.offset = 24
            f.seek(c.offset)
            data = f.read()
    except FileNotFoundError:
        return
    pos = 0
    while pos + 16 <= len(data):
        incl_len = struct.unpack_from(c.endian + "I", data, pos + 8)[0]
        if pos + 16 + incl_len > len(data):
            break
        pos += 16 + incl_len
        c.frames += 1
    c.offset += pos


_STAT = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)$", re.M)


def _tcpdump_statistics(log: Path) -> dict[str, int] | None:
    """tcpdump's exit statistics ({} where it printed none; None: no log at all,
    which is the start's problem, noted there)."""
    try:
        return {what: int(n) for n, what in _STAT.findall(log.read_text(errors="replace"))}
    except OSError:
        return None


def _lost_only_after_window(c: _Capture, stats: dict[str, int] | None) -> bool:
    """tcpdump lost frames, but the pcap holds every frame the interface had
    counted at the drain's last look and the kernel dropped none: tcpdump reads
    its ring in order, so the frames it never wrote are the ones after that look."""
    if not stats or c.counted is None or stats.get("dropped by kernel", 0):
        return False
    return stats.get("captured", 0) < stats.get("received by filter", 0) and c.frames >= c.counted


def _lost_frames(stats: dict[str, int] | None) -> str | None:
    """What tcpdump's exit statistics say it lost (None: nothing, or no log)."""
    if stats is None:
        return None
    if not stats:
        return "tcpdump printed no statistics (it was killed, or never ran: see its log)"
    captured, received = stats.get("captured", 0), stats.get("received by filter", 0)
    dropped = stats.get("dropped by kernel", 0)
    parts = []
    if captured < received:
        parts.append(f"tcpdump wrote {captured} of the {received} frames its filter received")
    if dropped:
        parts.append(f"the kernel dropped {dropped} frames before tcpdump read them")
    return "; ".join(parts) or None


def _append_line(log: Path, line: str) -> None:
    try:
        with open(log, "a") as f:
            f.write(line + "\n")
    except OSError:
        pass    # the note is in Captures.notes as well; a missing log is the start's problem
