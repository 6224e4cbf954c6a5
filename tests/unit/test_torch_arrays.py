"""Tensors into the INA transport (in-process switch, loss and duplication):
same bits as the numpy input, results come back as tensors of the input's
shape; and the modules the switch and GLM workers import never load torch."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from hosts.common.arrays import as_array
from hosts.ina import fixed_point as fp
from hosts.ina.transport import InaClient, InProcessSwitch, drive
from testbed.switch.ina import InaPipeline

import ina_harness as H

pytestmark = pytest.mark.unit


class VClock:
    t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, to: float) -> None:
        self.t = max(self.t, to)


def lossy_net(n: int, seed: int):
    job = H.job_config(1, n, slot_count=16)
    pipe = InaPipeline(H.pipeline_config(job), vectorized=True, scalar_below=1)
    rng = np.random.default_rng(seed)

    def impair(direction, wid, frame):          # 10 % loss, 5 % duplicates (one held back)
        u = rng.random()
        return [] if u < 0.10 else ([0, 2] if u < 0.15 else [0])
    clock = VClock()
    net = InProcessSwitch(pipe, switch_mac=H.SWITCH_MAC, switch_ip=H.SWITCH_IP, impair=impair, clock=clock)
    clients = [InaClient(net.endpoint(w["worker_id"], mac=w["mac"], ip=w["ip"], switch_port=w["port"]),
                         1, w["worker_id"], n, window=16, clock=clock, timeout_s=0.01, max_retries=10_000)
               for w in job["workers"]]
    return clients, clock


def reduce_all(clients, clock, vecs):
    hs = [c.submit(v) for c, v in zip(clients, vecs)]
    drive(clients, hs, advance=clock.advance)
    return [c.wait(h) for c, h in zip(clients, hs)]


def test_ina_client_tensor_results_equal_numpy_bits_under_loss():
    n = 3
    xs = [np.random.default_rng(r).standard_normal((40, 50)).astype(np.float32) for r in range(n)]
    clients, clock = lossy_net(n, 1)
    ys_np = reduce_all(clients, clock, xs)
    ys_t = reduce_all(clients, clock, [torch.from_numpy(x).requires_grad_() for x in xs])
    exact = fp.quantized_sum([x.reshape(-1) for x in xs]).reshape(40, 50)
    for a, b in zip(ys_np, ys_t):
        assert isinstance(b, torch.Tensor) and tuple(b.shape) == (40, 50)
        assert b.numpy().tobytes() == a.tobytes() == exact.tobytes()
    assert sum(c.stats.retransmissions for c in clients) > 0      # the loss was real


def test_integer_tensors_stay_integers():
    clients, clock = lossy_net(2, 2)
    ys = reduce_all(clients, clock, [torch.arange(100, dtype=torch.int32) * (r + 1) for r in range(2)])
    assert all(y.dtype == torch.int32 and torch.equal(y, torch.arange(100, dtype=torch.int32) * 3) for y in ys)


def test_as_array_is_a_view_and_rejects_non_cpu():
    t = torch.zeros(5)
    a, back = as_array(t)
    a[0] = 7.0                                   # a view: no copy was made
    assert t[0].item() == 7.0
    y = back(np.ones(5, np.float32))
    assert isinstance(y, torch.Tensor) and y.shape == (5,)
    assert as_array(np.ones(2))[1](np.ones(2)).__class__ is np.ndarray
    with pytest.raises(TypeError, match="CPU tensors; got one on meta"):
        as_array(torch.zeros(2, device="meta"))


def test_switch_and_glm_side_modules_do_not_import_torch():
    code = ("import sys, hosts.collectives.ring, hosts.collectives.ps, hosts.collectives.switch, "
            "hosts.ina.transport, hosts.glm.devices, hosts.allreduce, hosts.p4sgd, testbed.switch.soft; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
