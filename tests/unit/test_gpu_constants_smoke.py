"""bench/gpu_constants.py's CPU smoke mode: every part (bench/gpu/) runs and lands in the
JSON, and the torch port of the LHC codec (bench/gpu/lhc_codec.py) matches
hosts/lhc/codec.py bit for bit (its own check).

The numbers of a smoke run mean nothing (tiny sizes, a CPU); what is tested is that the
GPU run's code paths work end to end before they are spent on a lent GPU.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from bench import gpu_constants as gc
from bench.gpu import common
from bench.gpu import lhc_codec as tc
from hosts.lhc import codec, profiles

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_constants") / "smoke.json"
    started = time.perf_counter()
    doc = gc.main(["--device", "cpu", "--smoke", "--out", str(out)])
    assert common.T0 >= started            # the driver restarted the clock log and elapsed_s read
    return doc, json.loads(out.read_text())


def test_every_part_ran_and_was_written(smoke):
    doc, on_disk = smoke
    assert on_disk["parts_done"] == list(gc.PARTS)
    for part in gc.PARTS:
        assert part in on_disk and "error" not in on_disk[part], (part, on_disk[part].get("error"))
    assert on_disk["smoke"] is True and on_disk["env"]["argv"]
    assert on_disk["launch"]["roundtrip"]["median_us"] > 0
    assert on_disk["stream"]["copy"]["median_GBps"] > 0
    assert len(on_disk["glm"]["cases"]) == len(common.SMOKE.glm_features) * len(common.SMOKE.glm_batches)


def test_the_torch_codec_matches_the_numpy_codec(smoke):
    _, doc = smoke
    check = doc["lhc_codec"]["correctness"]
    assert check["passed"] is True, check
    assert check["union_values"] > 0 and check["rounds"] > 0
    assert check["counters_wrapped_in_sum"] > 0          # the int32 wrap-around was exercised


def test_every_profile_is_timed_and_decodes_exactly(smoke):
    _, doc = smoke
    cases = doc["lhc_codec"]["cases"]
    assert set(cases) == set(profiles.PROFILES) | {"demo_2^27"}
    for name, case in cases.items():
        assert "error" not in case, (name, case.get("error"))
        assert case["decode_exact"] is True, name
        assert set(case["steps"]) == {"support", "plan", "encode", "encode_incl_plan", "decode"}
        for step in case["steps"].values():
            assert step["median_ms"] > 0 and step["model_bytes"] > 0
        assert case["steps"]["decode"]["model_kernels"] == max(1, case["rounds"]) + 1
        assert 0.0 < case["union_share"] <= 1.0, name    # (smoke sizes round a profile's runs: no density check)


def test_fwd_bwd_measures_what_the_venv_can_build(smoke):
    _, doc = smoke
    models = doc["fwd_bwd"]["models"]
    assert set(models) == {"vgg19", "resnet50", "inception_v3", "alexnet", "bert_base", "lstm_lm", "ncf_neumf"}
    for name in ("lstm_lm", "ncf_neumf"):              # plain torch: always measured
        runs = models[name]["runs"]
        assert [r["precision"] for r in runs] == ["fp32", "bf16_autocast"]
        assert all(r["median_ms"] > 0 for r in runs) and models[name]["params"] > 0
    for name, rec in models.items():                   # torchvision / transformers: only where installed
        assert ("No module named" in rec["error"]) if "error" in rec else rec["runs"], name


def test_a_corrupted_sketch_is_refused_not_decoded():
    rng = np.random.default_rng(0)
    n = 4096
    q = np.where(rng.random(n) < 0.1, rng.integers(1, 1000, n), 0).astype(np.int32)
    words = tc.support_bitmap(torch.from_numpy(q).float())
    plan = tc.make_plan_torch(words, n)
    payload = tc.encode_torch(torch.from_numpy(q), plan)
    assert torch.equal(tc.decode_torch(payload, plan), torch.from_numpy(q))
    payload[plan.pure_cell[-1]] += 7                     # a counter the last round reads
    with pytest.raises(codec.DecodeError):
        tc.decode_torch(payload, plan)
