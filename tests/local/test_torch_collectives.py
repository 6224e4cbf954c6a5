"""torch.Tensor inputs through every host collective on loopback: ring, tree and PS
over TCP, in-switch through the soft switch process (with 5 % loss). One
thread per worker; each allreduces the same values as a numpy array and as a
tensor, and the two results must be the same bits (and a tensor of the
input's shape)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from hosts.collectives import make_hello
from hosts.collectives.ps import ParameterServer, PSWorker
from hosts.collectives.ring import RingAllreduce
from hosts.collectives.switch import SwitchAllreduce
from hosts.common.config import HostAddr, InaSettings
from hosts.ina import fixed_point as fp
from testbed.switch.soft.process import SoftSwitchProcess
from testbed.switch.soft.udp_io import free_loopback_ports, loopback_ip, loopback_switch_config, port_endpoint

pytestmark = pytest.mark.local

N = 3
PS = HostAddr("ps", "127.0.1.200")
RUN = {"test": "torch-collectives"}
PEERS = tuple(HostAddr(f"w{r + 1}", loopback_ip(r)) for r in range(N))


def inputs(rank: int) -> list[np.ndarray]:
    rng = np.random.default_rng([7, rank])
    return [rng.standard_normal(1000, dtype=np.float32) * 3.0,
            rng.standard_normal((17, 33), dtype=np.float32)]   # 2-D: shape comes back


def in_threads(fn, n: int = N) -> dict[int, object]:
    out: dict[int, object] = {}

    def run(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test below
            out[r] = e
    ts = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(90)
    for r in range(n):
        assert r in out, f"rank {r} hung"
        if isinstance(out[r], BaseException):
            raise out[r]
    return out


def numpy_then_tensor(coll) -> list[tuple[np.ndarray, torch.Tensor]]:
    rank = getattr(coll, "rank", None)
    pairs = []
    for x in inputs(rank):
        y_np = coll.allreduce(x)
        t = torch.from_numpy(x.copy()).requires_grad_()      # like a parameter: needs detach
        y_t = coll.allreduce(t)
        pairs.append((x, y_np, y_t))
    return pairs


def check(results: dict, expect=None) -> None:
    for r, pairs in results.items():
        for x, y_np, y_t in pairs:
            assert isinstance(y_t, torch.Tensor) and y_t.dtype == torch.float32
            assert tuple(y_t.shape) == x.shape
            assert y_t.numpy().tobytes() == y_np.tobytes(), f"rank {r}: tensor result differs"
    first = results[0]
    for r in results:                      # every rank ends with the same bits
        for (_, a, _), (_, b, _) in zip(first, results[r]):
            assert a.tobytes() == b.tobytes()
    if expect is not None:
        for (x, y_np, _), e in zip(first, expect):
            assert y_np.tobytes() == e.tobytes()


def free_tcp_base() -> int:
    from testbed.loopback_ports import free_port_base
    return free_port_base(len(PEERS) + 1, [PS.ip] + [p.ip for p in PEERS])


def test_ring_takes_tensors_bit_identical_to_numpy():
    base = free_tcp_base()

    def worker(r):
        c = RingAllreduce.connect(rank=r, peers=PEERS, port_base=base, hello=make_hello(f"w{r+1}", r, RUN),
                                  connect_timeout_s=20, timeout_s=20)
        try:
            c.rank = r
            return numpy_then_tensor(c)
        finally:
            c.close()
    check(in_threads(worker))


def test_tree_takes_tensors_bit_identical_to_numpy_and_sums_in_tree_order():
    """Five ranks (rank 0's children 1, 2, 4; rank 2's child 3): every rank ends with
    rank 0's bits, which are x0 + (x1) + (x2 + x3) + (x4) in that order; a barrier
    and a per-tensor allreduce (workload.pack false) give the packed bits."""
    from hosts.collectives.tree import TreeAllreduce
    n = 5
    peers = tuple(HostAddr(f"w{r + 1}", loopback_ip(r)) for r in range(n))
    from testbed.loopback_ports import free_port_base
    base = free_port_base(n + 1, [p.ip for p in peers])

    def worker(r):
        c = TreeAllreduce.connect(rank=r, peers=peers, port_base=base, hello=make_hello(f"w{r+1}", r, RUN),
                                  connect_timeout_s=20, timeout_s=20)
        try:
            pairs = numpy_then_tensor(c)
            c.barrier()
            flat = inputs(r)[0]
            pieces = np.concatenate([c.allreduce(flat[a:b]) for a, b in ((0, 10), (10, 11), (11, flat.size))])
            return pairs, pieces
        finally:
            c.close()
    res = in_threads(worker, n)
    expect = []
    for i in range(2):
        x = [inputs(r)[i].reshape(-1) for r in range(n)]
        expect.append(x[0] + x[1] + (x[2] + x[3]) + x[4])
    check({r: pairs for r, (pairs, _) in res.items()}, expect)
    for r, (pairs, pieces) in res.items():
        assert pieces.tobytes() == pairs[0][1].tobytes(), f"rank {r}: per-tensor bits differ from the packed"


def test_tree_refuses_a_peer_with_another_config():
    from hosts.collectives.tree import TreeAllreduce
    from hosts.common.tcp import ProtocolError
    base = free_tcp_base()

    def worker(r):
        run = RUN if r != 1 else {"test": "another run"}
        try:
            c = TreeAllreduce.connect(rank=r, peers=PEERS, port_base=base, hello=make_hello(f"w{r+1}", r, run),
                                      connect_timeout_s=5, timeout_s=5)
        except Exception as e:  # noqa: BLE001 - what each rank saw (in_threads re-raises a returned one)
            return [e]
        c.close()
        return []
    res = in_threads(worker)
    assert isinstance(res[0][0], ProtocolError), res
    assert "config mismatch with tree child w2 (rank 1)" in str(res[0][0])
    assert res[1], "the refused child went on"     # its parent closed the connection


def test_ps_takes_tensors_bit_identical_to_numpy():
    base = free_tcp_base()
    served = {}

    def server():
        ps = ParameterServer.accept(peers=PEERS, my_ip=PS.ip, port_base=base,
                                    hello=make_hello("ps", -1, RUN), connect_timeout_s=20, timeout_s=20)
        try:
            for x in inputs(0):              # numpy, then tensor, per input
                ps.reduce_once(x.size)
                ps.reduce_once(x.size)
            served["ok"] = True
        finally:
            ps.close()
    t = threading.Thread(target=server)
    t.start()

    def worker(r):
        c = PSWorker.connect(ps=PS, my_ip=PEERS[r].ip, port_base=base, hello=make_hello(f"w{r+1}", r, RUN),
                             connect_timeout_s=20, timeout_s=20)
        try:
            c.rank = r
            return numpy_then_tensor(c)
        finally:
            c.close()
    res = in_threads(worker)
    t.join(30)
    assert served.get("ok")
    # The PS sums in rank order in float32: the exact expected bits.
    expect = []
    for i in range(2):
        acc = inputs(0)[i].reshape(-1).copy()
        for r in range(1, N):
            acc += inputs(r)[i].reshape(-1)
        expect.append(acc)
    check(res, expect)


def test_switch_takes_tensors_bit_exact_under_loss(tmp_path):
    base, wport = free_loopback_ports(N)
    cfg = loopback_switch_config(N, base, wport, slot_count=32,
                                 drop_probabilities={str(r + 1): 0.05 for r in range(N)})
    sw = SoftSwitchProcess(cfg, tmp_path).start()
    try:
        def worker(r):
            host, port = port_endpoint(f"127.0.0.1:{base}", r + 1)
            ina = InaSettings(switch_ip=host, switch_port=port, worker_port=wport, window=32,
                              retx_timeout_s=0.05)
            c = SwitchAllreduce.connect(rank=r, world=N, my_ip=PEERS[r].ip, ina=ina, run=RUN,
                                        connect_timeout_s=20, timeout_s=30)
            try:
                c.rank = r
                return numpy_then_tensor(c)
            finally:
                c.close()
        res = in_threads(worker)
    finally:
        sw.stop()
    import json
    stats = json.loads((tmp_path / "s1.stats.json").read_text())
    assert stats["pipeline"]["counters"]["DropSimulator.dropped"]["total"] > 0   # loss happened
    expect = [fp.quantized_sum([inputs(r)[i].reshape(-1) for r in range(N)]) for i in range(2)]
    check(res, expect)


def test_script_collective_off_the_testbed_uses_torch_distributed(monkeypatch, tmp_path):
    """hosts.dnn.collective in a script run on its own (docs/pytorch.md step 1):
    without a process group it says what to do; with one (a 1-rank gloo group, file
    rendezvous) it is torch.distributed's allreduce, so the script trains the same."""
    import torch.distributed as dist

    from hosts.dnn import collective, runtime
    from hosts.dnn.runtime import ENV_CONFIG, NotOnTestbed

    monkeypatch.delenv(ENV_CONFIG, raising=False)
    monkeypatch.setattr(runtime, "_current", None)
    assert not dist.is_initialized()
    with pytest.raises(NotOnTestbed, match="init_process_group"):
        collective.allreduce(torch.ones(3))
    # A file rendezvous: a free TCP port found, closed and bound again by the group's
    # store could be taken in between (EADDRINUSE in one CI run).
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        assert torch.equal(collective.allreduce(t), t) and collective.allreduce(t) is not t
        assert collective.world_size() == 1 and collective.rank() == 0
        u = t.clone()
        assert collective.allreduce_(u) is u and torch.equal(u, t)      # the average over 1 worker
    finally:
        dist.destroy_process_group()
