"""LHC's gradient densities measured from training (testbed/reproduce/measurements/lhc_density.py):
the smoke run's numbers are shares with union >= per-worker, and hosts/lhc/profiles.py carries
the measurement file's numbers (they cannot drift apart)."""
from __future__ import annotations

import json

import pytest

from hosts.lhc.profiles import PROFILES
from testbed.reproduce.measurements import lhc_density

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("lhcd") / "smoke.json"
    assert lhc_density.main(["--smoke", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_smoke_run_gives_shares_with_union_at_least_per_worker(smoke):
    assert smoke["smoke"] is True and set(smoke["models"]) == set(lhc_density.CONFIGS)
    assert "python -m testbed.reproduce.measurements.lhc_density" in smoke["command"] and smoke["machine"]
    for model, m in smoke["models"].items():
        for layer, d in m["summary"].items():
            pw = d["per_worker"]["mean"]
            assert 0.0 < pw <= 1.0, (model, layer)
            unions = [d["union"][str(n)]["mean"] for n in lhc_density.WORKERS]
            assert all(pw - 1e-12 <= u <= 1.0 for u in unions), (model, layer, pw, unions)
            assert unions == sorted(unions), (model, layer, unions)      # more workers, no smaller union
            if "rows_touched" in d:
                assert d["row_fill_min"] > 0.99, (model, layer)           # a touched row is a run of nonzeros
    for t in smoke["touch_sweep"].values():
        for by in t["by_s"].values():
            assert 0 < by["per_worker"]["mean"] <= by["union"]["8"]["mean"] <= 1


def test_a_smoke_file_is_refused_as_the_measurement(smoke, tmp_path):
    p = tmp_path / "smoke.json"
    p.write_text(json.dumps(smoke))
    with pytest.raises(lhc_density.DensityDataError, match="not a full"):
        lhc_density.load(p)
    with pytest.raises(lhc_density.DensityDataError, match="no such"):
        lhc_density.load(tmp_path / "missing.json")


def test_embedding_density_follows_the_vocabulary_and_the_batch():
    """Uniform ids: a batch of k draws over V rows touches 1 - (1 - 1/V)^k of them."""
    sweep = lhc_density.touch_sweep(draws=1, workers=(2,), scale=1 / 16)
    lstm = sweep["lstm"]
    k, v = lstm["zipf_ids"], lstm["vocab"]
    assert lstm["by_s"]["0.0"]["per_worker"]["mean"] == pytest.approx(1 - (1 - 1 / v) ** k, rel=0.1)
    # a steeper Zipf law concentrates the batch on fewer rows
    shares = [lstm["by_s"][str(s)]["per_worker"]["mean"] for s in lhc_density.ZIPF_SWEEP]
    assert shares == sorted(shares, reverse=True)


def test_profiles_carry_the_measured_densities_and_unions():
    for name, prof in PROFILES.items():
        for layer in prof.layers:
            d = lhc_density.layer_summary(name, layer.name)
            assert layer.density == pytest.approx(d["per_worker"]["mean"], rel=5e-4), (name, layer.name)
            for n in lhc_density.WORKERS:
                assert layer.union_at(n) == pytest.approx(d["union"][str(n)]["mean"], rel=5e-4, abs=1e-4), \
                    (name, layer.name, n)
        assert "lhc_density_2026-11-27.json" in prof.source


def test_profile_unions_only_at_measured_worker_counts():
    user = next(x for x in PROFILES["ncf"].layers if x.name == "user_gmf")
    assert user.union_at(1) == user.density
    with pytest.raises(ValueError, match="not 16"):
        user.union_at(16)


def test_the_file_names_its_provenance():
    data = lhc_density.load()
    assert data["date"] == "2026-11-27" and "lhc_density" in data["command"] and "torch" in data["machine"]
    assert "lhc_density_2026-11-27.json" in lhc_density.source()
    for m in data["models"].values():
        assert len(m["steps"]) == m["config"]["steps"] == lhc_density.STEPS
