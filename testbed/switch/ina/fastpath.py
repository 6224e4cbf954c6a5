"""`CompiledInaPipeline`: the INA pipeline with its per-packet hot loop in C.

The numpy `InaPipeline` (pipeline.py) stays the reference; this subclass keeps
all of its tables, registers, counters, multicast groups and control API (the
same objects: the C loop borrows their numpy arrays), and replaces only
`process_batch`: parse -> `Ingress` job / worker / worker_port / slot checks ->
`Aggregator` slots -> result deparse and `Egress` replicas, one packet at a
time in arrival order, in `_fastpath.c`. Frames that are not contributions go
to the same `Forward` control as in the reference.

Two things stay in Python because the reference defines them there:
`DropSimulator` and `EgressDropSimulator` draws (numpy's random streams, so
both paths drop the same packets for one seed: contributions before the C
loop, results it made after it, in the order they leave) and `Egress` prefixes (built once per replica and cached;
the C loop memoises them in `Egress.replicas_by_key`).

The extension is built by `make setup` (scripts/build_fastpath.py), never by
tests or at import. `build(config)` picks the implementation from the switch
config's `pipeline_impl` ("compiled" | "reference"; default: compiled when built,
else the reference, logged and reported as `pipeline_impl` in the switch stats).
"""
from __future__ import annotations

import logging

from testbed import cext, wire

from . import job_table, worker_port
from .pipeline import JOB_COUNTERS, InaPipeline

log = logging.getLogger("softswitch")

IMPLS = ("compiled", "reference")

# The C file repeats wire.py's constants; a drift would be silent corruption,
# so the loader refuses it.
_fastpath, IMPORT_ERROR = cext.load("testbed.switch.ina._fastpath", {
    **{k: getattr(wire, k) for k in ("INA_OFFSET", "INA_HLEN", "VALUES_OFFSET", "UDP_OFFSET",
                                     "MAX_VALUES_PER_PACKET", "INA_PORT_BASE", "INA_PORT_MASK",
                                     "INA_VERSION", "OP_SUM", "OP_OR", "OP_MAX", "FLAG_RESULT",
                                     "FLAG_RETX", "MAX_WORKERS")},
    "NUM_JOBS": job_table.NUM_JOBS, "NUM_WORKER_IDS": worker_port.NUM_WORKER_IDS})


def available() -> bool:
    return _fastpath is not None


class CompiledInaPipeline(InaPipeline):
    pipeline_impl = "compiled"

    def __init__(self, config: dict | None = None):
        if _fastpath is None:
            raise RuntimeError(f"the compiled INA pipeline is not built ({IMPORT_ERROR}); "
                               f"run `make setup` (scripts/build_fastpath.py) or use "
                               f"pipeline_impl: reference")
        super().__init__(config, vectorized=False)
        a, j = self.aggregator, self.jobs
        counters = [getattr(self, name).packets for name in JOB_COUNTERS]
        # Order and shapes: _fastpath.c's B_* enum (it checks sizes and item widths).
        self._datapath = _fastpath.Datapath(
            [j.valid, j.num_workers, j.mcast_grp, j.worker_mask, j.slot_base, j.slot_count,
             self.worker_ports.port, a.bitmap, a.count, a.seq, a.exponent, a.values,
             *counters, self.malformed.packets], self.num_slots)

    def process_batch(self, frames: list[bytes], in_ports: list[int],
                      now: float = 0.0) -> list[tuple[int, bytes]]:
        if not frames:
            return []
        if type(frames) is not list:
            frames = list(frames)
        if type(in_ports) is not list:
            in_ports = list(in_ports)
        egress = self.egress
        with self._lock:
            drop = self._drops(frames, in_ports) if self.drop_simulator.armed() else None
            out, fwd = self._datapath.process(frames, in_ports, drop, egress.replicas,
                                              egress.replicas_by_key, egress.unicast_prefix)
            out = self.egress_drop_simulator.filter(out)      # results only, in leaving order
        if fwd:
            out.extend(self.forward.process_batch([frames[i] for i in fwd],
                                                  [in_ports[i] for i in fwd], now))
        return out

    def ring_program(self) -> tuple | None:
        """The soft switch's compiled ring loop (soft/fastloop.py) runs this
        pipeline's frames through `_fastpath.ring_program` (the same per-frame
        C function as process_batch), with the L2 table of `Forward` for the
        frames that are not contributions: (forwarder, datapath, capsule, args,
        lock). None while a drop simulator is armed: its draws are numpy's, made
        per batch in Python, so those batches take process_batch."""
        if self.drop_simulator.armed() or self.egress_drop_simulator.armed():
            return None
        entry = self.__dict__.get("_ring_entry")
        if entry is None:                # its parts are fixed once the pipeline is made
            egress = self.egress
            entry = self._ring_entry = (self.forward.forwarder, self._datapath, _fastpath.ring_program,
                                        (egress.replicas, egress.replicas_by_key, egress.unicast_prefix),
                                        self._lock)
        return entry

    def _drops(self, frames: list, in_ports: list) -> bytes:
        """One DropSimulator decision per contribution, in arrival order, as the
        reference makes them (it draws only for contributions)."""
        import numpy as np  # noqa: PLC0415 - only with the drop simulator armed

        kinds = np.frombuffer(self._datapath.classify(frames), np.uint8)
        rows = np.flatnonzero(kinds == 2)
        mask = np.zeros(len(frames), np.uint8)
        if len(rows):
            ports = np.asarray(in_ports, np.int64)[rows]
            mask[rows[self.drop_simulator.decide(ports)]] = 1
        return mask.tobytes()


def build(config: dict) -> InaPipeline:
    """The "ina" pipeline, in the implementation config["pipeline_impl"] names."""
    impl = (config or {}).get("pipeline_impl")
    if impl is None:
        if _fastpath is not None:
            return CompiledInaPipeline(config)
        log.warning("compiled INA pipeline not built (%s): using the reference; run make setup",
                    IMPORT_ERROR)
        return InaPipeline(config)
    if impl == "compiled":
        if _fastpath is None:
            raise ValueError(f"pipeline_impl: compiled, but it is not built ({IMPORT_ERROR}); "
                             f"run `make setup` or set pipeline_impl: reference")
        return CompiledInaPipeline(config)
    if impl == "reference":
        return InaPipeline(config)
    raise ValueError(f"pipeline_impl: {impl!r} is not one of {', '.join(IMPLS)}")
