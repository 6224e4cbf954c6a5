"""What an unmodified DDP script's trace tells the projector, and what its summary
says when the testbed cannot count its iterations.

The DDP hook (hosts/dnn/ddp_hook.py) reduces each gradient bucket in a blocking
call: the emulation runs a step's buckets one after another, and so does the
hardware (DDP reduces its buckets in order on one process group / stream). The
trace must say so: each bucket's allreduce after the one before it (and after
the compute that produced its gradients), the next compute after all of them.
Recorded without those dependencies, the projector ran every bucket of the run
at once: a few microseconds for dozens of allreduces."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from hosts.common.trace import read_trace  # noqa: E402
from hosts.dnn import ddp_hook, report, runtime  # noqa: E402
from hosts.dnn.config import TorchWorkerConfig  # noqa: E402
from testbed.fidelity.constants import load_profile  # noqa: E402
from testbed.fidelity.network_model import collective_time  # noqa: E402
from testbed.fidelity.projector import project  # noqa: E402

pytestmark = pytest.mark.unit

WORLD, STEPS, LAYERS = 2, 3, 12


class EchoSum:
    """Rank 0's collective with a stand-in for the other rank: the sum is 2 x the input
    (a tensor for a tensor, as the testbed's collectives return)."""

    def __init__(self):
        self.sizes: list[int] = []

    def allreduce(self, x):
        a = np.asarray(x, np.float32).reshape(-1)
        self.sizes.append(a.size)
        return torch.from_numpy(a * WORLD) if isinstance(x, torch.Tensor) else a * WORLD

    def barrier(self):
        pass

    def close(self):
        pass


def worker_cfg(tmp_path, collective: str) -> TorchWorkerConfig:
    return TorchWorkerConfig.from_json({
        "host": "w1", "role": "worker", "rank": 0, "world": WORLD, "collective": collective,
        "peers": [{"name": f"w{r + 1}", "ip": f"127.0.0.{r + 1}"} for r in range(WORLD)], "ps": None,
        "port": 5000, "master_addr": "127.0.0.1", "master_port": 5060, "gloo_ifname": None,
        "script": "x.py", "args": [], "batch_size": 8, "seed": 1,
        "device": {"type": "v100", "time_scale": 100.0, "launch_s": 0.0}, "straggler": None,
        "start_at": None, "connect_timeout_s": 5, "timeout_s": 5, "out": str(tmp_path / "w1.jsonl"),
        "trace": str(tmp_path / "w1.trace.jsonl"), "ina": None, "calibration": None,
        "hw_table": {"values": [0, 1e7], "hw_s": [1e-6, 1e-6]}})


@pytest.fixture
def ddp_run(tmp_path):
    """Runs a small DDP training loop through the testbed hook on rank 0 (with
    report.compute around each step or not), returns its trace."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)

    def run(collective: str = "ring", with_compute: bool = False):
        rt = runtime.Runtime(worker_cfg(tmp_path, collective))
        runtime._current = rt
        rt._coll = EchoSum()
        try:
            torch.manual_seed(0)
            model = nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(16, 16), nn.ReLU())])
            # a bucket per layer or so: DDP's smallest cap
            ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
            ddp_hook.register(ddp)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
            if with_compute:
                report.profile(model, torch.zeros(8, 16))
            x, y = torch.randn(8, 16), torch.randn(8, 16)

            def step():
                opt.zero_grad()
                loss = F.mse_loss(ddp(x), y)
                loss.backward()
                opt.step()
                return loss.item()
            for _ in range(STEPS):
                loss = report.compute(step) if with_compute else step()
                if with_compute:
                    report.iteration(loss=loss)
            rt.close(True)
        finally:
            runtime._current = None
        return read_trace(tmp_path / "w1.trace.jsonl")

    yield run
    dist.destroy_process_group()


def both_ranks(trace):
    """Rank 1's trace: rank 0's, renamed (the ranks ran the same program)."""
    header, nodes = trace
    return [trace, (dict(header, host="w2", rank=1), [dict(n) for n in nodes])]


@pytest.mark.parametrize("collective", ["ring", "switch"])
@pytest.mark.parametrize("with_compute", [False, True], ids=["unmodified", "report_compute"])
def test_a_ddp_trace_projects_to_at_least_its_buckets_in_a_row(ddp_run, collective, with_compute):
    header, nodes = trace = ddp_run(collective, with_compute)
    prof = load_profile("tofino1-100g")
    comms = [n for n in nodes if n["kind"] == "comm"]
    computes = [n for n in nodes if n["kind"] == "compute"]
    assert len(comms) >= 3 * STEPS and len(computes) == (STEPS if with_compute else 0)
    in_a_row = sum(collective_time("allreduce", n["algo"], n["values"], n["value_bytes"], WORLD, prof,
                                   bool(n.get("scale_round"))) for n in comms)
    proj = project(both_ranks(trace), prof)
    assert proj.makespan_s >= in_a_row * (1 - 1e-9) + sum(n["hw_s"] for n in computes) * (1 - 1e-9), \
        (proj.makespan_s, in_a_row, len(comms))
    # each bucket's allreduce follows the one before it; a step's compute follows all of its buckets
    last_comm = None
    for n in nodes:
        if n["kind"] == "comm" and last_comm is not None:
            assert last_comm in n["deps"] or any(d > last_comm for d in n["deps"]), n
        if n["kind"] == "comm":
            last_comm = n["id"]
        elif last_comm is not None:
            assert last_comm in n["deps"], n


def test_a_point_whose_iterations_the_testbed_cannot_count_is_not_valid(ddp_run, tmp_path):
    """The unmodified script's point (both workers' outputs, rank 1's from rank 0's):
    no report.iteration, so 0 iterations and no time per iteration: not valid, and
    the reason says why. Its projection still serializes the buckets."""
    import json

    from testbed.scenario import load_scenario_text
    from testbed.workloads.torch import collect_point, point_summary

    header, nodes = trace = ddp_run("ring", with_compute=False)
    point = tmp_path / "point"
    point.mkdir()
    for (h, ns), host in zip(both_ranks(trace), ("w1", "w2")):
        (point / f"{host}.trace.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [h, *ns]))
        recs = [json.loads(x) for x in (tmp_path / "w1.jsonl").read_text().splitlines()]
        (point / f"{host}.jsonl").write_text("".join(json.dumps(dict(r, host=host, rank=h["rank"])) + "\n"
                                                     for r in recs))
    s = load_scenario_text("name: t\ntopology: {kind: star, workers: 2}\nworkload: {kind: torch, script: "
                           "scenarios/torch/train.py, device: {type: v100, time_scale: 100}}\n", "t.yaml")
    recs = collect_point(s, point)
    summ = recs[-1]
    assert summ["ok"] and summ["iterations"] == 0
    assert summ["valid"] is False
    assert any("no iterations counted" in r and "report.iteration" in r for r in summ["invalid_reasons"])
    (proj,) = [r for r in recs if r["type"] == "projection"]
    prof = load_profile("tofino1-100g")
    assert proj["hw_run_s"] >= sum(collective_time("allreduce", "ring", n["values"], 4, WORLD, prof)
                                   for n in nodes if n["kind"] == "comm") * (1 - 1e-9)
    # the rule on its own: counted iterations, nothing else wrong: valid
    host = {"type": "torch_host", "host": "w1", "rank": 0, "ok": True, "validity": {"valid": True}}
    it = {"type": "torch_iter", "host": "w1", "rank": 0, "iter": 0, "t_s": 1.0, "loss": 1.0}
    wl = s.workload.model_copy(update={"device": {"type": "cpu"}})
    assert point_summary(wl, ["w1"], [host, it])["valid"] is True
    none = point_summary(wl, ["w1"], [host])
    assert none["valid"] is False and "no iterations counted" in none["invalid_reasons"][0]
