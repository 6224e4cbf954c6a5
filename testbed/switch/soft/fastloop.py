"""The soft switch's compiled packet path (io_impl "ring_fastpath").

`RingLoop` wraps `_pktio.Engine`: one C call per loop iteration reads every
receive ring in place, runs the program on each frame (the compiled INA
datapath through its `ring_program` capsule, or the forward program's L2
table in C) and sends what leaves with one sendmmsg per port. No Python object
is made per frame. One unbound AF_PACKET socket sends for every port (each
message names its interface): one sendmmsg per pass, not one per port.

Pcaps: the engine formats the records of what each port receives and sends
(stamped with the batch time the loop passes in) and `run` hands them to the
port's PcapWriters at once, so a file gets each batch's records in the order
the batches ran, whichever path ran them.

Loss: a port direction whose only impairment is loss is applied here too, with
uniforms its PortImpairment draws in blocks (`set_impairments`; _pktio.c `Loss`):
one per frame in the order the Python path draws them, so the same seed drops the
same frames on either path. Before the Python path decides, the unused rest of
each block goes back to its stream (`release_loss`).

It runs a batch only when nothing Python-side has to see the frames: no
impairments other than loss, no dilation, nothing in the delay queues, and a
program that offers a ring entry (`ring_program(pipeline)`; the INA program
declines while its drop simulators are armed). Otherwise the switch loop runs
that batch on the Python path (the reference); the stats count batches and
frames per path, so a run says which path did the work.

Frame order: the compiled path sends in arrival order per output port; the
Python path's pipelines list INA results, then L2 hits, then flood copies of
one batch (the same frames; order differs only across those kinds).
"""
from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any

from testbed.switch.pipeline import ForwardingPipeline
from testbed.switch.soft import dataplane
from testbed.switch.soft.impairments import PortImpairment

# Uniforms drawn per refill of a lossy port direction's block (at least twice a
# pass's worst case): one numpy call per block, not per pass.
LOSS_BLOCK = 16384


@dataclass
class RingProgram:
    """What Engine.run needs from a pipeline for one batch."""
    forwarder: ForwardingPipeline       # its L2 table handles what the program does not
    program: Any = None                 # e.g. the INA Datapath; None: L2 only
    api: Any = None                     # its RING_PROGRAM_CAPSULE
    args: Any = None                    # passed to the program per frame
    lock: threading.Lock | None = None  # the pipeline's table lock, held for the batch


def _ring_entry(pipeline) -> Any:
    """What ring_program builds from: the forward pipeline itself, the program's
    tuple of RingProgram fields, or None (the Python path)."""
    if type(pipeline) is ForwardingPipeline:
        return pipeline
    hook = getattr(pipeline, "ring_program", None)
    return hook() if hook is not None else None


def ring_program(pipeline) -> RingProgram | None:
    """The pipeline's ring entry for this batch, or None (the Python path).
    Only the exact forward program is mirrored (a subclass may change it);
    another program offers `ring_program()` -> None or the RingProgram fields
    as a tuple (so that programs need not import the switch)."""
    entry = _ring_entry(pipeline)
    return None if entry is None else _program(entry)


def _program(entry: Any) -> RingProgram:
    """The RingProgram of a ring entry (_ring_entry's: the forward pipeline or a tuple)."""
    return RingProgram(*entry) if type(entry) is tuple else RingProgram(entry)


def _l2_table(fwd: ForwardingPipeline) -> bytes:
    """The forward table as Engine.set_l2 reads it: (u64 MAC, i64 port) sorted."""
    rows = sorted((int.from_bytes(mac, "big"), port) for mac, port in fwd.forward.items()
                  if len(mac) == 6)
    return b"".join(struct.pack("=Qq", m, p) for m, p in rows)


class RingLoop:
    """The compiled loop over a switch's ring ports (all of them AfPacketPorts
    with a receive ring)."""

    def __init__(self, ports: dict[int, Any], pcap_in: dict[int, Any] | None = None,
                 pcap_out: dict[int, Any] | None = None):
        self.ports = dict(ports)
        # PcapWriters of the ring ports (pcap.py), the one writer of each file.
        self.pcap_in = {no: w for no, w in (pcap_in or {}).items() if no in self.ports}
        self.pcap_out = {no: w for no, w in (pcap_out or {}).items() if no in self.ports}
        if set(self.pcap_in) != set(self.pcap_out):
            raise ValueError("RingLoop: pcap_in and pcap_out must cover the same ports, "
                             f"got {sorted(self.pcap_in)} and {sorted(self.pcap_out)}")
        # Protocol 0 and never bound: it receives nothing, only sends.
        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            dataplane._set_buf(self.tx, dataplane.SO_SNDBUFFORCE, socket.SO_SNDBUF,
                               (8 << 20) * max(1, len(self.ports)))  # as much as a socket per port
            self.engine = dataplane._pktio.Engine(
                [(no, io.ring, socket.if_nametoindex(io.name)) for no, io in self.ports.items()],
                self.tx.fileno())
            if self.pcap_in:
                self.engine.set_pcap({no: (w.snaplen, self.pcap_out[no].snaplen)
                                      for no, w in self.pcap_in.items()})
        except BaseException:
            self.tx.close()
            raise
        self._l2_for: tuple[int, int] | None = None    # (id(forwarder), forwarder.version)
        self._forwarder: ForwardingPipeline | None = None
        self.bad_port_drops = 0
        # (port, egress) -> its impairment: the loss this loop applies, and the blocks
        # of uniforms the engine holds now (the impairment they came from, the block).
        self._loss_want: dict[tuple[int, bool], PortImpairment] = {}
        self._loss: dict[tuple[int, bool], tuple[PortImpairment, Any]] = {}
        # Passes every held block still covers (each takes at most `need` uniforms):
        # until then a pass asks the engine nothing.
        self._loss_passes, self._loss_max = 0, -1
        self._program: tuple[Any, RingProgram] | None = None     # (entry, its RingProgram)

    def set_impairments(self, ingress: dict[int, PortImpairment],
                        egress: dict[int, PortImpairment]) -> bool:
        """The active impairments from now on. False: some are not loss alone, and
        only the Python path applies them (the loop then holds no uniforms)."""
        self._loss_passes = 0            # new port directions are installed at the next pass
        want = {(no, False): imp for no, imp in ingress.items() if no in self.ports}
        want.update({(no, True): imp for no, imp in egress.items() if no in self.ports})
        ok = all(imp.loss_only for imp in want.values())
        self._loss_want = want if ok else {}
        for key, (imp, _) in list(self._loss.items()):
            if self._loss_want.get(key) is not imp:
                self._release(key)
        return ok

    def program_for(self, pipeline) -> RingProgram | None:
        """ring_program, asked every pass: the RingProgram made for the same entry
        (the same pipeline, or the program's same tuple) last time is reused."""
        entry = _ring_entry(pipeline)
        if entry is None:
            return None
        last = self._program
        if last is None or last[0] is not entry:
            last = self._program = (entry, _program(entry))
        return last[1]

    @property
    def holds_loss(self) -> bool:
        return bool(self._loss)

    def release_loss(self) -> None:
        """Before the Python path decides: every block's unused uniforms back to
        their streams (the next frame there takes the next uniform either way)."""
        for key in list(self._loss):
            self._release(key)

    def _release(self, key: tuple[int, bool]) -> None:
        self._loss_passes = 0
        self._fold_loss()
        imp, block = self._loss.pop(key)
        used = self.engine.loss_used(*key)
        self.engine.set_loss(key[0], key[1], 0.0, None)
        imp.give_back(block[used:])

    def _ensure_loss(self, max_per_ring: int) -> None:
        """Every lossy port direction holds uniforms for a whole pass (the engine
        checks; a port sends at most one frame per frame read)."""
        if self._loss_passes > 0 and max_per_ring == self._loss_max:
            self._loss_passes -= 1
            return
        passes = None
        for key, imp in self._loss_want.items():
            need = max_per_ring * len(self.ports) if key[1] else max_per_ring
            held = self._loss.get(key)
            if held is not None:
                left = len(held[1]) - self.engine.loss_used(*key)
                if left >= need:
                    passes = min(passes, left // need) if passes is not None else left // need
                    continue
                self._release(key)
            block = imp.reserve(max(LOSS_BLOCK, 2 * need))
            self.engine.set_loss(key[0], key[1], imp.loss_probability, block)
            self._loss[key] = (imp, block)
            passes = min(passes, len(block) // need) if passes is not None else len(block) // need
        self._loss_passes, self._loss_max = (passes or 1) - 1, max_per_ring     # this pass takes one

    def _fold_loss(self) -> None:
        for no, (seen_in, dropped_in, seen_out, dropped_out) in self.engine.take_loss_counters().items():
            for egress, seen, dropped in ((False, seen_in, dropped_in), (True, seen_out, dropped_out)):
                if seen:
                    self._loss[(no, egress)][0].count_compiled(seen, dropped)

    def run(self, max_per_ring: int, prog: RingProgram, ts: float | None = None) -> int:
        """One pass over the rings; returns the frames read. ts: the batch time
        for pcap records (the switch's wall clock, as its Python path stamps)."""
        fwd = prog.forwarder
        key = (id(fwd), fwd.version)
        if key != self._l2_for:
            if self._forwarder is not None and self._forwarder is not fwd:
                self.fold()          # counters so far belong to the previous program
            self.engine.set_l2(_l2_table(fwd), fwd.flood, fwd.ports)
            self._l2_for, self._forwarder = key, fwd
        if self._loss_want:
            self._ensure_loss(max_per_ring)
        if prog.lock is not None:
            with prog.lock:
                r = self.engine.run(max_per_ring, prog.program, prog.api, prog.args, ts)
        else:
            r = self.engine.run(max_per_ring, prog.program, prog.api, prog.args, ts)
        if type(r) is tuple:
            r, gone = r
            for no, err in gone:
                io = self.ports[no]
                io.note_send_error(err)
                if io.down:
                    self.engine.set_down(no)
        if r and self.pcap_in:
            # This batch's records, before any later batch of either path writes.
            for no, rin, nin, rout, nout in self.engine.take_pcap():
                self.pcap_in[no].write_records(rin, nin)
                self.pcap_out[no].write_records(rout, nout)
        return r

    def fold(self) -> None:
        """Move the engine's counts into the objects that report them: the
        ports (rx/tx), the forward program, bad_port_drops."""
        self._fold_loss()
        per_port, f, bad = self.engine.take_counters()
        for no, (rx, rxb, tx, txb, txd) in per_port.items():
            io = self.ports[no]
            io.rx += rx
            io.rx_bytes += rxb
            io.tx += tx
            io.tx_bytes += txb
            io.tx_dropped += txd
        self.bad_port_drops += bad
        fw = self._forwarder
        if fw is not None and any(f):
            hits, misses, flooded, copies, dropped_miss, hairpin = f
            fw._hits += hits
            fw._misses += misses
            fw._flooded += flooded
            fw._flood_copies += copies
            fw._dropped_miss += dropped_miss
            fw._dropped_hairpin += hairpin

    def close(self) -> None:
        """Give the uniforms back, fold the counts, close the send socket (the
        ports stay open)."""
        self.release_loss()
        self.fold()
        self.tx.close()
