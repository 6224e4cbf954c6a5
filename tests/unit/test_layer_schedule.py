"""The gradient-ready schedule: bench/gpu_layer_times.py's hooks on CPU (the GPU run's
code path), the measured file it wrote on a GPU, and the validation rows that compare
it with the PHub projection's per-layer model (testbed/reproduce/measurements/layer_schedule.py)."""
from __future__ import annotations

import json
import time

import pytest
import torch

from bench import gpu_layer_times as glt
from bench.gpu import common
from hosts.phub.profiles import get_profile
from testbed.reproduce.measurements import layer_schedule as ls

pytestmark = pytest.mark.unit


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10))


def test_hooks_see_every_parameter_layer_and_the_last_layer_is_ready_first():
    torch.manual_seed(0)
    run = glt.time_layers(_net(), lambda: ((torch.randn(2, 3, 8, 8),), torch.randint(0, 10, (2,))),
                          glt._ce, torch.device("cpu"), reps=2, warmup=1)
    names = [x["name"] for x in run["layers"]]
    assert names == ["0", "1", "4"]
    assert [x["params"] for x in run["layers"]] == [3 * 4 * 9 + 4, 8, 144 * 10 + 10]
    ready = {x["name"]: x["ready_ms"] for x in run["layers"]}
    assert ready["4"] <= ready["1"] <= ready["0"] <= run["bwd_ms"]


def test_smoke_run_writes_the_tower_with_and_without_hooks(tmp_path):
    out = tmp_path / "layers.json"
    started = time.perf_counter()
    glt.main(["--device", "cpu", "--smoke", "--out", str(out)])
    assert common.T0 >= started            # the driver restarted the clock log and elapsed_s read
    doc = json.loads(out.read_text())
    assert doc["schema"] == ls.SCHEMA and doc["smoke"] is True
    run = doc["models"]["dlrm_tower"]["runs"][0]
    assert run["no_hooks"]["bwd_ms"] > 0 and len(run["layers"]) == 7
    with pytest.raises(ls.LayerTimesDataError, match="not a full CUDA run"):
        ls.load(out)


def test_ready_share_counts_parameters_in_ready_order():
    order = [(10, 0.1), (30, 0.4), (60, 1.0)]
    assert ls.ready_share(order, 0.1) == 0.1
    assert ls.ready_share(order, 0.4) == 0.4
    assert ls.ready_share(order, 0.41) == 1.0


@pytest.mark.parametrize("model", ls.PHUB_MODELS)
def test_the_measured_networks_are_the_profiles_networks(model):
    # the GPU ran torchvision's definitions; the projection's profiles are derived from the
    # papers: the same parameter count says they are one network
    assert sum(p for p, _ in ls.measured_order(model)) == get_profile(model).params
    assert sum(p for p, _ in ls.modeled_order(model)) == get_profile(model).params


def test_rows_compare_shares_of_one_backward_pass():
    rows = [m for m in ls.MEASUREMENTS if m.model == "device:backward-schedule"]
    assert len(rows) == len(ls.PHUB_MODELS) * len(ls.SHARES)
    for m in rows:
        assert 0 < m.published <= 100 and 0 < m.predict() <= 100
    dlrm = next(m for m in ls.MEASUREMENTS if m.id.startswith("device:dnn-v100:dlrm"))
    assert dlrm.published > 0 and dlrm.predict() > 0
