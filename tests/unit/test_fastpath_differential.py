"""The compiled INA pipeline (fastpath.py + _fastpath.c) against the numpy
reference (pipeline.py): fed the same frame sequences, they must emit the same
frames (bytes, ports, order) and end with the same registers and counters.

Two generators:
- `test_hostile_traffic`: batches of frames a switch can meet, most of them
  wrong in one way (unknown job, worker outside the job, worker on the wrong
  port, bad slot, truncated, bad version / op / count / slot version, results,
  non-INA traffic, duplicates), with the drop simulator sometimes armed and
  control-plane changes between batches (job removed and re-added elsewhere,
  port rebinding, switch address, register writes);
- `test_protocol_schedules`: the property tests' workers and adversarial
  network (tests/unit/ina_harness.py: loss, duplication, reordering, late
  copies, timeouts and resends in both directions), every switch batch given
  to both implementations.

Examples per test: FASTPATH_EXAMPLES (default 150 / 100 for CI); a long local
run: FASTPATH_EXAMPLES=50000 pytest tests/unit/test_fastpath_differential.py.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed import wire
from testbed.switch.ina import CompiledInaPipeline, InaPipeline
from testbed.switch.ina.worker_port import SET_WORKER_PORT

import ina_harness as H

pytestmark = pytest.mark.unit

EXAMPLES = int(os.environ.get("FASTPATH_EXAMPLES", "0")) or None
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                database=None)

JOB = H.job_config(1, 3, slot_count=4)                                # ports 1-3
OTHER = H.job_config(2, 2, slot_base=4, slot_count=2, first_port=4)   # ports 4-5
PORTS = (1, 2, 3, 4, 5, 6)      # 6: a port with no worker (pipeline_config's extra port)


def reference(mode: str):
    if mode == "scalar":
        return lambda cfg: InaPipeline(cfg, vectorized=False)
    return lambda cfg: InaPipeline(cfg, vectorized=True, scalar_below=1)


def assert_same_state(ref: InaPipeline, fast: CompiledInaPipeline) -> None:
    assert fast.registers.keys() == ref.registers.keys()
    for name, reg in ref.registers.items():
        assert np.array_equal(reg.array, fast.registers[name].array), name
    assert fast.counters() == ref.counters()


# -- hostile traffic ------------------------------------------------------------------
def _patch(frame: bytes, offset: int, value: int) -> bytes:
    b = bytearray(frame)
    b[offset] = value & 0xFF
    return bytes(b)


def _values(rng: random.Random, cnt: int) -> list[int]:
    kind = rng.choice(["small", "extreme", "random"])
    if kind == "small":
        return [rng.randint(-3, 3) for _ in range(cnt)]
    if kind == "extreme":
        return [rng.choice([-2**31, 2**31 - 1, -1, 0, 1]) for _ in range(cnt)]
    return [rng.randint(-2**31, 2**31 - 1) for _ in range(cnt)]


KINDS = ["ina"] * 10 + ["other_job", "unknown_job", "bad_worker", "wrong_port", "bad_slot",
                        "junk", "bad_version", "bad_count", "short_values", "bad_op",
                        "bad_slot_ver", "result", "non_ip", "non_udp", "ip_options",
                        "not_ina_port", "padded", "dup"]


def make_frame(kind: str, seed: int, frames: list, ports: list) -> None:
    """Append one frame of `kind` to frames/ports; every other choice comes from
    `seed` (two draws per frame keep hypothesis cheap enough for 100k sequences)."""
    rng = random.Random(seed)
    if kind == "dup" and frames:
        i = rng.randrange(len(frames))
        frames.append(frames[i])
        ports.append(ports[i])
        return
    job = OTHER if kind == "other_job" else JOB
    wid = rng.randrange(len(job["workers"]))
    port = H.port_of(job, wid)
    cnt = rng.choice([2, 2, 2, 1, 0, 3, 64])
    kw = dict(slot=rng.randrange(job["slot_count"]), seq=rng.choice([0, 1, 2, 3, 5, 2**31, 2**32 - 1]),
              slot_ver=rng.randint(0, 1), values=_values(rng, cnt), op=rng.choice([0, 0, 0, 1, 2]),
              exponent=rng.randint(-128, 127),
              flags=rng.choice([0, 0, wire.FLAG_RETX, 0x80 | wire.FLAG_RETX]),
              sport=rng.choice([40000, 40001]),
              dport=wire.INA_PORT_BASE + rng.choice([0, 0, 1, 15]))
    if kind == "bad_slot":
        kw["slot"] = job["slot_count"] + rng.randint(0, 3)
    if kind == "result":
        kw["flags"] |= wire.FLAG_RESULT
    if kind == "not_ina_port":
        kw["dport"] = rng.choice([80, wire.INA_PORT_BASE + 16, wire.INA_PORT_BASE - 1])
    if kind == "bad_count":
        kw["count"] = rng.randint(65, 255)
    if kind == "short_values":
        kw["count"] = cnt + rng.randint(1, 4)          # says more values than it carries
    if kind == "bad_worker":
        f = _patch(H.contribution(job, 0, **kw), wire.INA_OFFSET + 7, rng.choice([3, 5, 31, 32, 200, 255]))
    elif kind == "unknown_job":
        f = _patch(H.contribution(job, wid, **kw), wire.INA_OFFSET + 3, rng.choice([0, 3, 7, 255]))
    else:
        f = H.contribution(job, wid, **kw)
    if kind == "wrong_port":
        port = rng.choice([p for p in PORTS if p != port])
    elif kind == "junk":
        f = f[:rng.randrange(len(f))]
    elif kind == "bad_version":
        f = _patch(f, wire.INA_OFFSET, rng.choice([0, 2, 255]))
    elif kind == "bad_op":
        f = _patch(f, wire.INA_OFFSET + 1, rng.randint(3, 255))
    elif kind == "bad_slot_ver":
        f = _patch(f, wire.INA_OFFSET + 6, rng.randint(2, 255))
    elif kind == "non_ip":
        f = _patch(f, 13, 0x06)                       # ARP
    elif kind == "non_udp":
        f = _patch(f, 23, 6)                          # TCP
    elif kind == "ip_options":
        f = _patch(f, 14, 0x46)
    elif kind == "padded":
        f = f + bytes(rng.randint(1, 40))             # Ethernet padding after the values
    frames.append(f)
    ports.append(port)


def to_batch(recipe: list[tuple[str, int]]) -> tuple[list[bytes], list[int]]:
    frames: list[bytes] = []
    ports: list[int] = []
    for kind, seed in recipe:
        make_frame(kind, seed, frames, ports)
    return frames, ports


batch = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2**32 - 1)),
                 min_size=1, max_size=40).map(to_batch)


def _readd_other(p: InaPipeline, port_shift: int, udp_port: int) -> None:
    p.remove_job(2)
    workers = [{**w, "port": w["port"] + port_shift - 3, "udp_port": udp_port}
               for w in OTHER["workers"]]      # ports 1+shift.., elsewhere on the switch
    p.add_job({**OTHER, "workers": workers})


CONTROL_OPS = {
    "none": lambda p: None,
    "switch_address": lambda p: p.tables["Egress.switch_address"].set_default(
        "Egress.set_switch_address", {"mac": "02:00:00:00:00:aa", "ip": "10.9.9.9"}),
    "rebind_w0": lambda p: p.worker_ports.table.modify(
        {"job_id": 1, "worker_id": 0}, SET_WORKER_PORT, {"port": 6}),
    "readd_other": lambda p: _readd_other(p, 4, wire.INA_PORT_BASE + 3),
    "shrink_job": lambda p: p.jobs.table.modify({"job_id": 1}, "Ingress.set_job", {
        "num_workers": 2, "mcast_grp": 0x101, "worker_mask": 0b111, "slot_base": 0, "slot_count": 3}),
    "write_registers": lambda p: (p.registers["Aggregator.worker_count"].write(0, 2),
                                  p.registers["Aggregator.slot_seq"].write(1, 2**32 - 1),
                                  p.registers["Aggregator.agg_values"].write(5, 2**31)),
    "reset_counters": lambda p: p.counters_by_name["Ingress.bad_port"].reset(),
}


def _apply_op(op: str, *pipes) -> None:
    errors = []
    for p in pipes:
        try:
            CONTROL_OPS[op](p)
            errors.append(None)
        except (KeyError, ValueError) as e:
            errors.append(type(e))
    assert len(set(errors)) == 1, (op, errors)


@settings(max_examples=EXAMPLES or 150, **SETTINGS)
@given(batches=st.lists(st.tuples(batch, st.sampled_from(sorted(CONTROL_OPS))), min_size=1,
                        max_size=5),
       mode=st.sampled_from(["scalar", "vectorized"]),
       drops=st.one_of(st.just({}), st.dictionaries(st.sampled_from(PORTS), st.sampled_from(
           [0.0, 0.3, 1.0]), max_size=3)),
       egress_drops=st.one_of(st.just({}), st.dictionaries(st.sampled_from(PORTS), st.sampled_from(
           [0.0, 0.3, 1.0]), max_size=3)),
       seed=st.integers(0, 2**16))
def test_hostile_traffic(batches, mode, drops, egress_drops, seed):
    cfg = H.pipeline_config(JOB, OTHER, num_slots=8, seed=seed, drop_probabilities=drops,
                            egress_drop_probabilities=egress_drops)
    ref, fast = reference(mode)(cfg), CompiledInaPipeline(cfg)
    for (frames, ports), op in batches:
        want = ref.process_batch(frames, ports, 0.0)
        got = fast.process_batch(frames, ports, 0.0)
        assert got == want
        _apply_op(op, ref, fast)
    assert_same_state(ref, fast)


# -- the property tests' loss / duplication / reordering schedules -----------------------
class Twin:
    """Both implementations behind one process_batch; the fabric sees the reference's
    frames after every batch was checked equal."""

    def __init__(self, cfg: dict, ref_factory):
        self.ref, self.fast = ref_factory(cfg), CompiledInaPipeline(cfg)
        self.counters_by_name = self.ref.counters_by_name

    def process_batch(self, frames, ports, now):
        want = self.ref.process_batch(frames, ports, now)
        assert self.fast.process_batch(frames, ports, now) == want
        return want


steps = st.lists(st.builds(H.Step, st.sampled_from(H.STEP_KINDS),
                           st.integers(0, 10_000), st.integers(1, 12)), max_size=250)


@settings(max_examples=EXAMPLES or 100, **SETTINGS)
@given(n_workers=st.integers(1, 4), chunks=st.integers(1, 9), k=st.sampled_from([0, 1, 3, 64]),
       window=st.integers(1, 3), op=st.sampled_from([wire.OP_SUM, wire.OP_OR, wire.OP_MAX]),
       mode=st.sampled_from(["scalar", "vectorized"]), seed=st.integers(0, 2**16),
       drop=st.sampled_from([0.0, 0.0, 0.2]), egress_drop=st.sampled_from([0.0, 0.0, 0.2]),
       schedule=steps)
def test_protocol_schedules(n_workers, chunks, k, window, op, mode, seed, drop, egress_drop,
                            schedule):
    def factory(cfg):   # loss in both directions: contributions from w1's port, results to w2's
        return Twin({**cfg, "seed": seed, "drop_probabilities": {1: drop},
                     "egress_drop_probabilities": {2: egress_drop}}, reference(mode))
    fab = H.make_job_run(factory, n_workers=n_workers, chunks=chunks, k=k, window=window,
                         op=op, seed=seed)
    fab.run(schedule)
    assert fab.drain(), "workers did not finish: the protocol deadlocked"
    H.check_exactly_once(fab)
    assert_same_state(fab.pipeline.ref, fab.pipeline.fast)


def test_the_generators_reach_every_verdict_and_refusal():
    """The differential tests compare something: a fixed sequence from the same
    building blocks drives every counter of the compiled path above zero."""
    cfg = H.pipeline_config(JOB, OTHER, num_slots=8)
    ref, fast = InaPipeline(cfg, vectorized=False), CompiledInaPipeline(cfg)
    c = lambda w, **kw: H.contribution(JOB, w, slot=0, seq=1, values=[1, 2], **kw)  # noqa: E731
    frames = [c(0), c(0), c(1), c(2),                      # absorb, duplicate, absorb, multicast
              c(1, flags=wire.FLAG_RETX),                  # lost result: unicast
              _patch(c(0), wire.INA_OFFSET + 3, 9),        # unknown job
              _patch(c(0), wire.INA_OFFSET + 7, 40),       # worker outside the job
              c(1), H.contribution(JOB, 0, slot=4, seq=1),  # wrong port, bad slot
              c(0)[:50], c(0, flags=wire.FLAG_RESULT)]     # truncated, a result passing by
    ports = [1, 1, 2, 3, 2, 1, 1, 3, 1, 1, 1]
    assert fast.process_batch(frames, ports) == ref.process_batch(frames, ports)
    counters = fast.counters()
    for name in ("Ingress.ina_packets", "Ingress.ina_results", "Ingress.ina_retransmits",
                 "Ingress.ina_duplicates_dropped", "Ingress.bad_job", "Ingress.bad_worker",
                 "Ingress.bad_port", "Ingress.bad_slot", "Ingress.malformed"):
        assert counters[name]["total"] > 0, name
    assert_same_state(ref, fast)
