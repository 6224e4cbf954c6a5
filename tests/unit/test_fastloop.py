"""The compiled ring loop's Python side (testbed/switch/soft/fastloop.py) and the
checks of _pktio.Engine that need no interface: which pipelines get the
compiled path, when they decline, and bad input named before anything runs.
(The frames themselves: tests/mininet/test_ring_fastpath.py.)"""
from __future__ import annotations

import struct

import pytest

from testbed.switch.ina import CompiledInaPipeline, InaPipeline
from testbed.switch.pipeline import ForwardingPipeline
from testbed.switch.soft import dataplane, fastloop

import ina_harness as H

pytestmark = pytest.mark.unit

needs_pktio = pytest.mark.skipif(not dataplane.ring_available(), reason="_pktio not built (make setup)")


class Wrapped(ForwardingPipeline):
    def process_batch(self, frames, in_ports, now):      # a program that changes forwarding
        return []


def test_which_pipelines_take_the_compiled_path():
    fwd = ForwardingPipeline({b"\x02" * 6: 1}, [1, 2])
    prog = fastloop.ring_program(fwd)
    assert prog.forwarder is fwd and prog.program is None
    assert fastloop.ring_program(Wrapped()) is None          # only the exact forward program
    cfg = H.pipeline_config(H.job_config(1, 2))
    assert fastloop.ring_program(InaPipeline(cfg)) is None   # the reference stays Python
    fast = CompiledInaPipeline(cfg)
    prog = fastloop.ring_program(fast)
    assert prog.program is fast._datapath and prog.forwarder is fast.forward.forwarder
    assert prog.lock is fast._lock
    # Armed drop simulators draw numpy randoms per batch: those batches go to Python.
    armed = CompiledInaPipeline({**cfg, "drop_probabilities": {1: 0.5}})
    assert fastloop.ring_program(armed) is None
    armed = CompiledInaPipeline({**cfg, "egress_drop_probabilities": {2: 0.1}})
    assert fastloop.ring_program(armed) is None


def test_the_l2_table_follows_every_change():
    fwd = ForwardingPipeline({}, [1, 2, 3])
    v = fwd.version
    fwd.add_entry("02:00:00:00:00:02", 2)
    fwd.add_entry("02:00:00:00:00:01", 1)
    assert fwd.version > v
    table = fastloop._l2_table(fwd)
    assert [struct.unpack_from("=Qq", table, i) for i in (0, 16)] == [(0x020000000001, 1),
                                                                      (0x020000000002, 2)]
    v = fwd.version
    fwd.delete_entry("02:00:00:00:00:01")
    assert fwd.version > v and len(fastloop._l2_table(fwd)) == 16
    v = fwd.version
    fwd.set_ports([1, 2])
    assert fwd.version > v


@needs_pktio
def test_engine_refuses_bad_input_with_its_reason():
    E = dataplane._pktio.Engine
    with pytest.raises(TypeError, match=r"\(port_no, RxRing, ifindex\)"):
        E([(1, object(), 3)], -1)
    e = E([], -1)
    with pytest.raises(ValueError, match="sorted by MAC"):
        e.set_l2(struct.pack("=QqQq", 5, 1, 4, 2), True, [1, 2])
    with pytest.raises(ValueError, match=r"\(u64, i64\) pairs"):
        e.set_l2(b"x" * 17, True, [])
    e.set_l2(struct.pack("=Qq", 5, 1), True, [1, 2])
    assert e.run(64, None, None, None) == 0                  # no rings: nothing read
    with pytest.raises(KeyError, match="no port 7"):
        e.set_down(7)
    ports, fwd, bad = e.take_counters()
    assert ports == {} and fwd == (0,) * 6 and bad == 0


@needs_pktio
def test_engine_refuses_what_is_not_a_ring_program():
    e = dataplane._pktio.Engine([], -1)
    with pytest.raises(ValueError):            # not a ring_program capsule
        e.run(1, object(), object(), ())


@needs_pktio
def test_engine_pcap_settings_refuse_bad_input():
    e = dataplane._pktio.Engine([], -1)
    with pytest.raises(KeyError, match="no port 7"):
        e.set_pcap({7: (100, 100)})
    with pytest.raises(TypeError, match=r"\{port_no: \(snaplen_in, snaplen_out\)\}"):
        e.set_pcap([(7, 100)])
    e.set_pcap(None)
    assert e.take_pcap() == []
    assert e.run(64, None, None, None, 1.5) == 0


def test_ring_loop_wants_pcaps_of_both_directions_per_port(tmp_path):
    from testbed.switch.soft.pcap import PcapWriter
    with PcapWriter(tmp_path / "x.pcap") as w:
        with pytest.raises(ValueError, match=r"pcap_in and pcap_out must cover the same ports"):
            fastloop.RingLoop({1: object()}, {1: w}, {})   # refused before any socket opens


@needs_pktio
def test_engine_loss_settings_refuse_bad_input():
    """set_loss names what is wrong; a block too short for a whole pass is refused
    before any frame is read (a pass never runs out of uniforms halfway)."""
    import socket

    import numpy as np

    p = dataplane._pktio
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)      # bound to nothing: receives nothing
    try:
        ring = p.RxRing(s.fileno(), 2048, 64)
        e = p.Engine([(1, ring, 1)], -1)
        with pytest.raises(KeyError, match="no port 7"):
            e.set_loss(7, False, 0.1, np.zeros(8))
        with pytest.raises(ValueError, match="within"):
            e.set_loss(1, False, 1.5, np.zeros(8))
        with pytest.raises(ValueError, match="needs uniforms"):
            e.set_loss(1, True, 0.1, None)
        with pytest.raises(TypeError, match="float64"):
            e.set_loss(1, False, 0.1, np.zeros(8, np.float32))
        e.set_loss(1, False, 0.1, np.zeros(8))
        with pytest.raises(ValueError, match="too few uniforms"):
            e.run(64, None, None, None)
        assert e.run(8, None, None, None) == 0 and e.loss_used(1, False) == 0
        e.set_loss(1, True, 0.1, np.zeros(8))
        with pytest.raises(ValueError, match="port 1's loss block"):
            e.run(16, None, None, None)               # egress needs ports x max
        e.set_loss(1, False, 0.0, None)
        e.set_loss(1, True, 0.0, None)
        assert e.run(64, None, None, None) == 0 and e.take_loss_counters() == {}
        ring.close()
    finally:
        s.close()


def test_ring_loop_keeps_every_pass_supplied_and_the_streams_in_order():
    """The loop refills a lossy port direction's block only when a pass could run it
    short (it asks the engine only then); whatever each pass takes, the uniforms the
    frames meet are the stream's next ones, and the unused rest goes back in order."""
    import numpy as np

    from testbed.switch.soft.impairments import PortImpairment

    class FakeEngine:                    # _pktio.Engine's loss interface
        def __init__(self):
            self.blocks, self.asked = {}, 0

        def set_loss(self, no, out, p, block):
            self.blocks[(no, out)] = [block, 0] if block is not None else None

        def loss_used(self, no, out):
            self.asked += 1
            return self.blocks[(no, out)][1]

        def take_loss_counters(self):
            return {}

        def take(self, key, k):          # a pass: k frames meet k uniforms
            b = self.blocks[key]
            assert len(b[0]) - b[1] >= k, "a pass ran out of uniforms"
            out = b[0][b[1]:b[1] + k]
            b[1] += k
            return out

    loop = object.__new__(fastloop.RingLoop)
    loop.ports, loop.engine = {1: None, 2: None}, FakeEngine()
    loop._loss_want, loop._loss, loop._loss_passes, loop._loss_max = {}, {}, 0, -1
    imps = {(1, False): PortImpairment(loss_pct=10, rng=np.random.default_rng(5)),
            (2, True): PortImpairment(loss_pct=10, rng=np.random.default_rng(6))}
    assert loop.set_impairments({1: imps[(1, False)]}, {2: imps[(2, True)]})
    rng = np.random.default_rng(0)
    met = {k: [] for k in imps}
    for _ in range(600):
        loop._ensure_loss(64)
        for key in imps:
            need = 64 * 2 if key[1] else 64
            k = need if rng.random() < 0.8 else int(rng.integers(0, need))      # mostly the worst case
            met[key].append(loop.engine.take(key, k))
    assert loop.engine.asked < 100               # not every pass
    loop.release_loss()
    for key, seed in (((1, False), 5), ((2, True), 6)):
        seen = np.concatenate(met[key])
        ref = np.random.default_rng(seed).random(len(seen) + 10)
        assert np.array_equal(seen, ref[:len(seen)])
        assert np.array_equal(imps[key]._uniforms(10), ref[len(seen):])     # the rest, in order


def test_the_loop_reuses_a_ring_program_until_the_pipeline_offers_another():
    loop = object.__new__(fastloop.RingLoop)
    loop._program = None
    fwd = ForwardingPipeline({b"\x02" * 6: 1}, [1, 2])
    a = loop.program_for(fwd)
    assert a is loop.program_for(fwd) and a.forwarder is fwd
    cfg = H.pipeline_config(H.job_config(1, 2))
    fast = CompiledInaPipeline(cfg)
    b = loop.program_for(fast)
    assert b is not a and b is loop.program_for(fast) and b.program is fast._datapath
    fast.drop_simulator.set_probability(1, 0.5)           # armed: the Python path
    assert loop.program_for(fast) is None
    fast.drop_simulator.set_probability(1, 0.0)
    assert loop.program_for(fast) is b                     # the same entry again
    assert loop.program_for(InaPipeline(cfg)) is None


def test_receive_rings_shaped_as_their_links_queue_unshaped_deeper_within_a_budget():
    from testbed.switch.soft.dataplane import (RING_BUDGET_BYTES, RING_BYTES, UNSHAPED_RING_MAX_BYTES,
                                               rx_ring_bytes as ring_bytes)
    assert ring_bytes(True, 2) == ring_bytes(True, 200) == RING_BYTES
    assert ring_bytes(False, 4) == UNSHAPED_RING_MAX_BYTES > RING_BYTES
    assert ring_bytes(False, 16) == RING_BUDGET_BYTES // 16
    assert ring_bytes(False, 199) == RING_BYTES          # never below a shaped port's
    assert all(n * ring_bytes(False, n) <= max(RING_BUDGET_BYTES, n * RING_BYTES) for n in range(1, 300))
