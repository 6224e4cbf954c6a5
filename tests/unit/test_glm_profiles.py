"""Dataset profiles (hosts/glm/profiles.py): shape, density, balance, determinism,
the LIBSVM round trip, and the errors of a bad `source: profile` spec."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from hosts.glm import profiles
from hosts.glm.datasets import load_dataset
from hosts.glm.training import evaluate, reference_sgd

# A small cap keeps every profile (up to url's 3.2M features) well under a second.
SAMPLES = 512
# Tolerances: row lengths are Binomial (tfidf: the mean of 512 has a standard deviation
# under 1 %) or the floor/ceiling of the mean (onehot), so the mean nonzeros per row is
# within 3 % of the profile's. The positive share is a 512-sample estimate: +-0.05.
NNZ_REL_TOL = 0.03
SHARE_TOL = 0.05


def same_matrix(a, b) -> bool:
    """Equal shape, pattern and values (CSR compared by parts: a 1M-wide toarray is GBs)."""
    if sp.issparse(a) != sp.issparse(b) or a.shape != b.shape:
        return False
    if not sp.issparse(a):
        return bool(np.array_equal(a, b))
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("indptr", "indices", "data"))


def spec(name: str, **kw) -> dict:
    return {"source": "profile", "name": name, "samples": SAMPLES, **kw}


@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_shape_density_and_balance(name):
    prof = profiles.PROFILES[name]
    ds = load_dataset(spec(name))
    assert ds.n_samples == SAMPLES and ds.n_features == prof.features.value
    assert ds.is_sparse != prof.dense
    per_row = ds.nnz / ds.n_samples
    assert per_row == pytest.approx(prof.nnz_per_row.value, rel=NNZ_REL_TOL)
    assert ds.density == pytest.approx(prof.density, rel=NNZ_REL_TOL)
    assert set(np.unique(ds.y)) <= {-1.0, 1.0}
    assert np.mean(ds.y > 0) == pytest.approx(prof.positive_share(), abs=SHARE_TOL)
    norms = np.sqrt(np.asarray(ds.X.multiply(ds.X).sum(axis=1)).ravel()) if ds.is_sparse \
        else np.linalg.norm(ds.X, axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-12)
    if prof.values.value != "dense":
        assert ds.X.data.min() > 0            # tfidf and one-hot values are non-negative
    assert ds.meta["source"] == "profile" and ds.meta["profile"] == name


def test_skewed_balance_is_hit_after_label_noise():
    """kdd2010-raw's stored 86.1 % positives survive the 1 % label flips (aimed before them)."""
    ds = load_dataset(spec("kdd2010-raw", samples=4096))
    assert np.mean(ds.y > 0) == pytest.approx(0.861, abs=0.02)
    assert ds.meta["mu"] > 0                  # the hidden model leans positive to get there


def test_defaults_and_caps():
    ds = load_dataset({"source": "profile", "name": "rcv1"})
    assert ds.X.shape == (profiles.DEFAULT_SAMPLES, 47236)
    narrow = load_dataset(spec("rcv1", features=1000))
    assert narrow.n_features == 1000
    # a feature cap keeps the nonzeros per row (the per-sample work), so density rises
    assert narrow.nnz / narrow.n_samples == pytest.approx(0.0016 * 47236, rel=NNZ_REL_TOL)
    assert profiles.shape(spec("gisette", samples=6000)) == (6000, 5000)
    assert profiles.shape({"source": "profile", "name": "gisette"}) == (profiles.DEFAULT_SAMPLES, 5000)


@pytest.mark.parametrize("name", ["rcv1", "criteo", "epsilon"])
def test_deterministic_per_seed(name):
    a, b = load_dataset(spec(name, seed=3)), load_dataset(spec(name, seed=3))
    c = load_dataset(spec(name, seed=4))
    assert same_matrix(a.X, b.X) and np.array_equal(a.y, b.y)
    assert not same_matrix(a.X, c.X) and not np.array_equal(a.y, c.y)


def test_linreg_labels_are_real_valued():
    ds = load_dataset(spec("rcv1", model="linreg", noise=0.1))
    assert len(np.unique(ds.y)) > 100
    np.testing.assert_allclose(ds.y, ds.X @ ds.meta["x_star"], atol=1.0)


def test_sgd_converges_on_a_profile():
    ds = load_dataset(spec("real-sim"))
    before = evaluate(ds, np.zeros(ds.n_features), "logreg")["loss"]
    x, _ = reference_sgd(ds, "logreg", lr=8.0, batch=16, epochs=5, seed=0)
    after = evaluate(ds, x, "logreg")
    assert after["loss"] < 0.6 * before and after["accuracy"] > 0.95


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("name,model", [("rcv1", "logreg"), ("gisette", "svm"), ("criteo", "linreg")])
def test_libsvm_round_trip(tmp_path, name, model, suffix):
    s = spec(name, samples=16, model=model)
    path = str(tmp_path / f"{name}.libsvm{suffix}")
    back_spec = profiles.write_libsvm(s, path)
    mem, back = load_dataset(s), load_dataset(back_spec)
    assert back.X.shape == mem.X.shape
    assert same_matrix(back.X, sp.csr_matrix(mem.X))     # LIBSVM is sparse; %.17g is exact
    np.testing.assert_array_equal(back.y, mem.y)


def test_cli_list_and_write(tmp_path, capsys):
    assert profiles.main(["--list"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["name"] for r in rows} == set(profiles.PROFILES)
    assert all(set(r["marks"].values()) <= {"verified", "assumed [A]"} for r in rows)
    out = tmp_path / "rs.libsvm"
    assert profiles.main(["--name", "real-sim", "--samples", "32", "--out", str(out)]) == 0
    told = json.loads(capsys.readouterr().out)
    assert told["load_with"]["n_features"] == 20958
    assert load_dataset(told["load_with"]).n_samples == 32
    assert profiles.main(["--name", "mnist", "--out", str(out)]) == 2
    assert "unknown dataset profile 'mnist'" in capsys.readouterr().err


def test_every_fact_has_a_source_and_a_mark():
    for prof in profiles.PROFILES.values():
        for key, fact in prof.facts().items():
            assert fact.source.strip(), (prof.name, key)
        # the link to P4SGD is never claimed as verified: the paper's list is not stored
        assert not prof.named_by.verified
        # dense profiles come from make_dense, whose signed rows give a balanced task only
        assert not prof.dense or prof.positive_share() == 0.5, prof.name


@pytest.mark.parametrize("bad,message", [
    ({"name": "mnist"}, "unknown dataset profile 'mnist'; known: avazu, criteo, epsilon"),
    ({"name": "rcv1", "samples": 0}, "dataset.samples must be a positive integer"),
    ({"name": "rcv1", "features": -5}, "dataset.features must be a positive integer"),
    ({"name": "rcv1", "samples": 2.5}, "dataset.samples must be a positive integer"),
    ({"name": "rcv1", "samples": True}, "dataset.samples must be a positive integer"),
    ({"name": "gisette", "samples": 6001}, "exceeds gisette's 6,000 rows"),
    ({"name": "rcv1", "features": 50000}, "exceeds rcv1's 47,236 features"),
    ({"name": "rcv1", "seed": -1}, "dataset.seed must be a non-negative integer"),
    ({"name": "rcv1", "noise": 0.6, "model": "logreg"}, "must be <= 0.5"),
    ({"name": "rcv1", "model": "ridge"}, "dataset.model must be linreg, logreg or svm"),
    ({"name": "rcv1", "density": 0.1}, "['density']"),
])
def test_bad_specs_are_refused(bad, message):
    with pytest.raises(ValueError) as err:
        load_dataset({"source": "profile", **bad})
    assert message in str(err.value)
