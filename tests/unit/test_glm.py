"""Unit tests for the P4SGD numerical core (hosts/glm). Pure numpy, no sockets."""
from __future__ import annotations

import gzip
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from hosts.ina import fixed_point as fp
from hosts.glm.data import (Dataset, LibsvmFormatError, load_libsvm, make_dense, make_sparse, save_libsvm,
                            train_test_split)
from hosts.glm.datasets import load_dataset
from hosts.glm.devices import CpuDevice, GpuDevice, U280Device, make_device
from hosts.glm.models import MODELS, get_model
from hosts.glm.partition import (assemble_model, column_nnz, partition_features,
                                 slice_dataset)
from hosts.glm.training import (LocalAllreduceGroup, data_parallel_sgd, epoch_order, evaluate,
                                model_parallel_sgd, pipelined_epoch, reference_sgd,
                                simulate_data_parallel, simulate_model_parallel)
from hosts.glm.u280_xrt import U280XrtAdapter

pytestmark = pytest.mark.unit


def _ds(kind: str, model: str, n=192, d=48, seed=3) -> Dataset:
    if kind == "dense":
        return make_dense(n, d, model=model, noise=0.05, seed=seed)
    return make_sparse(n, d, density=0.2, model=model, noise=0.05, seed=seed, skew=0.8)


# ------------------------------------------------------------------ models
@pytest.mark.parametrize("name", sorted(MODELS))
def test_derivative_matches_finite_differences(name):
    model = get_model(name)
    rng = np.random.default_rng(0)
    s = rng.normal(0, 2, 200)
    b = rng.normal(size=200) if name == "linreg" else rng.choice([-1.0, 1.0], 200)
    if name == "svm":  # stay away from the hinge kink b*s == 1
        keep = np.abs(b * s - 1) > 1e-3
        s, b = s[keep], b[keep]
    h = 1e-6
    fd = (model.pointwise_loss(s + h, b) - model.pointwise_loss(s - h, b)) / (2 * h)
    np.testing.assert_allclose(model.derivative(s, b), fd, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_objective_gradient_with_l2_matches_finite_differences(name):
    model = get_model(name, l2=0.1)
    ds = make_dense(40, 6, model=name, seed=1)
    x = np.random.default_rng(2).normal(size=6)
    s = ds.X @ x
    if name == "svm":
        assert np.min(np.abs(ds.y * s - 1)) > 1e-4  # differentiable at this x
    grad = ds.X.T @ model.derivative(s, ds.y) / ds.n_samples + model.reg_gradient(x)
    fd = np.empty(6)
    for j in range(6):
        e = np.zeros(6)
        e[j] = 1e-6
        fd[j] = (model.objective(ds.X @ (x + e), ds.y, x + e)
                 - model.objective(ds.X @ (x - e), ds.y, x - e)) / 2e-6
    np.testing.assert_allclose(grad, fd, atol=1e-7)


def test_model_registry_and_accuracy():
    assert set(MODELS) == {"linreg", "logreg", "svm"}
    with pytest.raises(ValueError, match="unknown model"):
        get_model("mlp")
    assert get_model("logreg").accuracy(np.array([1.0, -2.0, 0.5]), np.array([1, -1, -1])) == pytest.approx(2 / 3)
    assert get_model("linreg").accuracy(np.ones(3), np.ones(3)) is None
    assert np.isfinite(get_model("logreg").loss(np.array([1e4, -1e4]), np.array([-1.0, 1.0])))


# ------------------------------------------------------------------ data
@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2"])
def test_libsvm_round_trip(tmp_path, suffix):
    X = sp.csr_matrix(np.array([[0, 1.5, 0, 0], [2.25, 0, 0, -1], [0, 0, 0, 0]]))
    ds = Dataset(X, np.array([1.0, 0.0, 1.0]))
    path = str(tmp_path / f"d.svm{suffix}")
    save_libsvm(ds, path)
    back = load_libsvm(path, n_features=6)
    assert back.X.shape == (3, 6)
    np.testing.assert_array_equal(back.X.toarray()[:, :4], X.toarray())
    np.testing.assert_array_equal(back.y, [1, -1, 1])  # {0,1} -> {-1,+1}
    reg = load_dataset({"source": "libsvm", "path": path, "model": "linreg"})
    np.testing.assert_array_equal(reg.y, [1, 0, 1])
    assert reg.n_features == 4


@pytest.mark.parametrize("bad,reason", [
    ("+1 2:abc", "not a number"),
    ("+1 0:1.0", "1-based"),
    ("+1 3:1 2:1", "not increasing"),
    ("x 1:1", "label"),
    ("+1 7", "idx:value"),
])
def test_libsvm_malformed_reports_line(tmp_path, bad, reason):
    path = tmp_path / "bad.svm"
    path.write_text("+1 1:0.5 3:1\n# comment\n-1 2:1\n" + bad + "\n+1 1:1\n")
    with pytest.raises(LibsvmFormatError, match=reason) as err:
        load_libsvm(str(path))
    assert err.value.line_no == 4 and "bad.svm:4" in str(err.value)


def test_libsvm_index_beyond_n_features(tmp_path):
    path = tmp_path / "d.svm.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("1 1:1\n-1 9:1\n")
    with pytest.raises(LibsvmFormatError) as err:
        load_libsvm(str(path), n_features=5)
    assert err.value.line_no == 2


def test_synthetic_deterministic_and_density():
    a = load_dataset({"source": "synthetic", "kind": "sparse", "samples": 300,
                      "features": 200_000, "density": 0.001, "model": "svm", "seed": 5})
    b = make_sparse(300, 200_000, density=0.001, model="svm", seed=5)
    c = make_sparse(300, 200_000, density=0.001, model="svm", seed=6)
    assert (a.X != b.X).nnz == 0 and np.array_equal(a.y, b.y)
    assert (a.X != c.X).nnz > 0
    assert a.density == pytest.approx(0.001, rel=0.03)
    mid = make_sparse(400, 1000, density=0.05, seed=1)
    assert mid.density == pytest.approx(0.05, rel=0.04)  # dedupe shortfall ~ density/2
    np.testing.assert_allclose(sp.linalg.norm(mid.X, axis=1), 1.0)
    d1, d2 = make_dense(50, 20, "linreg", seed=9), make_dense(50, 20, "linreg", seed=9)
    assert np.array_equal(d1.X, d2.X) and np.array_equal(d1.y, d2.y)
    # labels follow the ground truth up to the flip noise
    ds = make_dense(4000, 30, "logreg", noise=0.1, seed=2)
    agree = np.mean(np.sign(ds.X @ ds.meta["x_star"]) == ds.y)
    assert 0.87 < agree < 0.93


def test_builtin_breast_cancer_and_split():
    ds = load_dataset({"source": "builtin", "name": "breast_cancer"})
    assert ds.X.shape == (569, 30) and set(np.unique(ds.y)) == {-1.0, 1.0}
    np.testing.assert_allclose(ds.X.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(ds.X.std(axis=0), 1, atol=1e-12)
    tr, te = train_test_split(ds, 0.25, seed=1)
    tr2, _ = train_test_split(ds, 0.25, seed=1)
    assert tr.n_samples + te.n_samples == 569 and np.array_equal(tr.X, tr2.X)
    with pytest.raises(ValueError, match="unknown keys"):
        load_dataset({"source": "builtin", "name": "breast_cancer", "samples": 3})
    with pytest.raises(ValueError, match="builtin"):
        load_dataset({"source": "builtin", "name": "mnist"})


# ------------------------------------------------------------------ partition
def test_partition_balanced_by_nnz_and_covering():
    ds = make_sparse(500, 3000, density=0.02, seed=4, skew=1.0)
    counts = column_nnz(ds.X)
    for M in (1, 2, 3, 8, 16):
        part = partition_features(ds, M)
        bounds = [r for rng in part.ranges for r in rng]
        assert bounds[0] == 0 and bounds[-1] == 3000
        assert all(a < b for a, b in part.ranges)  # non-empty
        assert all(part.ranges[m][1] == part.ranges[m + 1][0] for m in range(M - 1))
        assert sum(part.nnz) == ds.nnz
        assert max(part.nnz) <= ds.nnz / M + counts.max()
        X_parts = [slice_dataset(ds, r) for r in part.ranges]
        assert (sp.hstack(X_parts).tocsr() != ds.X).nnz == 0
    skewed_width = partition_features(ds, 8, balance="width")
    assert partition_features(ds, 8).imbalance < skewed_width.imbalance
    dense = partition_features(make_dense(10, 10, seed=0), 3)
    assert dense.widths == [3, 3, 4]
    with pytest.raises(ValueError, match="features"):
        partition_features(make_dense(10, 4, seed=0), 5)


# ------------------------------------------------------------------ training equivalence
@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("name", ["linreg", "logreg", "svm"])
@pytest.mark.parametrize("M", [1, 2, 4, 8])
def test_model_parallel_equals_reference(kind, name, M):
    ds = _ds(kind, name)
    model = get_model(name, l2=1e-3)
    x_ref, h_ref = reference_sgd(ds, model, lr=0.5, batch=16, epochs=3, seed=11)
    x_mp, h_mp = simulate_model_parallel(ds, M, model, lr=0.5, batch=16, micro_batch=4,
                                         epochs=3, seed=11)
    np.testing.assert_allclose(x_mp, x_ref, rtol=0, atol=1e-10)
    assert [h["loss"] for h in h_mp] == pytest.approx([h["loss"] for h in h_ref], abs=1e-10)
    assert np.abs(x_ref).max() > 0.1  # it actually trained


@pytest.mark.parametrize("name", ["linreg", "logreg"])
def test_model_parallel_fixed_point_within_bound(name):
    """Quantized run vs exact run, M=8.

    Bound: rows have unit norm and lr <= 2/L (L = 1 linreg, 1/4 logreg), so each
    SGD step is non-expansive and a per-sample error |ds| <= delta perturbs an
    update by <= lr * delta. After T steps ||x_q - x||_2 <= lr * T * delta_max,
    delta_max = fixed_point.sum_error_bound of the largest micro-batch sum."""
    ds = _ds("dense", name, n=256, d=64)
    lr, batch, epochs = 0.5, 16, 3
    q = fp.QuantizedSum()
    x_exact, _ = simulate_model_parallel(ds, 8, name, lr, batch, 4, epochs, seed=2)
    x_q, _ = simulate_model_parallel(ds, 8, name, lr, batch, 4, epochs, seed=2, quantize=q)
    steps = epochs * 256 // batch
    assert q.calls == steps * (batch // 4)
    assert 0 < q.max_abs_error <= q.max_bound < 1e-5
    dev = np.linalg.norm(x_q - x_exact)
    assert 0 < dev <= lr * steps * q.max_bound


def test_model_parallel_fixed_point_svm_loss_close():
    ds = _ds("sparse", "svm", n=256, d=64)
    x_e, h_e = simulate_model_parallel(ds, 4, "svm", 0.3, 16, 4, 3, seed=2)
    x_q, h_q = simulate_model_parallel(ds, 4, "svm", 0.3, 16, 4, 3, seed=2,
                                       quantize=fp.QuantizedSum())
    assert h_q[-1]["loss"] == pytest.approx(h_e[-1]["loss"], rel=1e-3)


@pytest.mark.parametrize("depth", [2, 3, 8])
def test_pipelined_equals_unpipelined(depth):
    ds = _ds("sparse", "logreg")
    x1, h1 = simulate_model_parallel(ds, 4, "logreg", 0.5, 24, 4, 2, seed=3, pipeline_depth=1)
    xk, hk = simulate_model_parallel(ds, 4, "logreg", 0.5, 24, 4, 2, seed=3,
                                     pipeline_depth=depth)
    np.testing.assert_array_equal(x1, xk)  # bit-identical: same backward order
    assert h1 == hk


class _RecordingAsync:
    """Single-worker AsyncAllreduce that logs the schedule."""

    def __init__(self):
        self.log, self.outstanding, self.max_outstanding = [], 0, 0

    def submit(self, vec):
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        self.log.append("S")
        return np.array(vec, copy=True)

    def wait(self, handle):
        self.outstanding -= 1
        self.log.append("W")
        return handle


@pytest.mark.parametrize("depth", [1, 3])
def test_pipelined_epoch_schedule(depth):
    ds = _ds("dense", "linreg")
    order = epoch_order(ds.n_samples, 0, 0)
    aar = _RecordingAsync()
    x = pipelined_epoch(ds.X, ds.y, np.zeros(ds.n_features), "linreg", 0.5, 16, 4, order, aar,
                        depth=depth)
    assert aar.max_outstanding == depth
    assert "".join(aar.log[:8]) == ("SWSWSWSW" if depth == 1 else "SSSWSWWW")
    x_ref, _ = reference_sgd(ds, "linreg", 0.5, 16, 1, seed=0, eval_every=0)
    np.testing.assert_allclose(x, x_ref, atol=1e-12)


def _run_threads(target, n):
    out, errors = [None] * n, []

    def wrap(r):
        try:
            out[r] = target(r)
        except Exception as exc:  # surface worker failures in the test
            errors.append(exc)
    threads = [threading.Thread(target=wrap, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return out


def test_threaded_workers_with_async_allreduce_match_simulation():
    ds, M = _ds("sparse", "logreg"), 4
    part = partition_features(ds, M)
    group = LocalAllreduceGroup(M)
    steps = []

    def worker(r):
        return model_parallel_sgd(slice_dataset(ds, part[r]), ds.y, "logreg", 0.5, 16, 4, 2, 7,
                                  rank=r, async_allreduce=group.endpoint(r), pipeline_depth=3,
                                  on_step=steps.append)
    outs = _run_threads(worker, M)
    x_sim, h_sim = simulate_model_parallel(ds, M, "logreg", 0.5, 16, 4, 2, 7)
    np.testing.assert_array_equal(assemble_model([o[0] for o in outs]), x_sim)
    assert all(o[1] == h_sim for o in outs)
    assert len(steps) == M * 2 * 12


@pytest.mark.parametrize("M", [1, 2, 4])
def test_data_parallel_equals_reference_with_batch_times_m(M):
    ds = _ds("sparse", "logreg", n=250)  # 250 not divisible by B*M: ragged last batch
    x_ref, h_ref = reference_sgd(ds, get_model("logreg", l2=1e-3), 0.5, 8 * M, 3, seed=4)
    x_dp, h_dp = simulate_data_parallel(ds, M, get_model("logreg", l2=1e-3), 0.5, 8, 3, seed=4)
    np.testing.assert_allclose(x_dp, x_ref, atol=1e-10)
    assert [h["loss"] for h in h_dp] == pytest.approx([h["loss"] for h in h_ref], abs=1e-10)
    assert [h["accuracy"] for h in h_dp] == pytest.approx([h["accuracy"] for h in h_ref])


def test_threaded_data_parallel_blocking_allreduce():
    ds, M = _ds("dense", "svm"), 3
    group = LocalAllreduceGroup(M)
    outs = _run_threads(lambda r: data_parallel_sgd(ds.X, ds.y, "svm", 0.2, 8, 2, 1,
                                                    group.endpoint(r), r, M), M)
    x_ref, _ = reference_sgd(ds, "svm", 0.2, 24, 2, seed=1)
    for x, _ in outs:
        np.testing.assert_allclose(x, x_ref, atol=1e-10)


def test_breast_cancer_model_parallel_matches_sklearn():
    """Setting: l2 = 1e-2 on the mean log-loss <=> sklearn C = 1/(n*l2), no intercept
    (data standardized). P4SGD M=4, lr=0.2, B=16, micro-batch 4, 50 epochs.
    Tolerances: regularized objective within 1 %, training log-loss within 2 %."""
    from sklearn.linear_model import LogisticRegression

    ds = load_dataset({"source": "builtin", "name": "breast_cancer"})
    model = get_model("logreg", l2=1e-2)
    sk = LogisticRegression(C=1 / (ds.n_samples * model.l2), fit_intercept=False, tol=1e-10,
                            max_iter=10_000).fit(ds.X, ds.y)
    target = evaluate(ds, sk.coef_.ravel(), model)
    x, hist = simulate_model_parallel(ds, 4, model, 0.2, 16, 4, 50, seed=3, eval_every=10)
    got = evaluate(ds, x, model)
    assert got["objective"] == pytest.approx(target["objective"], rel=0.01)
    assert got["loss"] == pytest.approx(target["loss"], rel=0.02)
    assert got["accuracy"] >= target["accuracy"] - 0.01
    assert hist[-1]["objective"] == pytest.approx(got["objective"], rel=1e-12)


# ------------------------------------------------------------------ fixed point
def test_fixed_point_scale_never_overflows_worst_case():
    for M in (1, 2, 3, 8, 100):
        for m in (1e-9, 0.7, 1.0, 3.9, 1e6):
            k = fp.choose_scale([m] * M, M)
            ints = [fp.to_fixed(np.array([m, -m]), k) for _ in range(M)]
            total = np.sum(np.asarray(ints, dtype=np.int64), axis=0)
            assert np.abs(total).max() <= fp.INT32_MAX
            # and uses the range: M values >= 2^(29-h) each, i.e. a sum >= 2^28
            assert np.abs(total).max() >= 2**28 - M
    assert fp.choose_scale([0.0, 0.0], 2) == 30 - fp.EXP_ZERO - 1
    with pytest.raises(OverflowError):
        fp.to_fixed(np.array([4.0]), 30)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.integers(-20, 20), st.integers(0, 2**31 - 1))
def test_quantized_sum_error_within_bound(M, log_mag, seed):
    rng = np.random.default_rng(seed)
    vecs = [rng.normal(0, 2.0**log_mag, 12) * rng.random() for _ in range(M)]
    out = fp.quantized_sum(vecs)
    assert out.dtype == np.float32
    bound = fp.sum_error_bound([np.abs(v).max() for v in vecs], M)
    assert np.abs(out - np.sum(vecs, axis=0)).max() <= bound
    k = fp.choose_scale([np.abs(v).max() for v in vecs], M)
    one = fp.from_fixed(fp.to_fixed(vecs[0], k), k, np.float64)
    assert np.abs(one - vecs[0]).max() <= 2.0 ** -(k + 1)


# ------------------------------------------------------------------ devices
def test_u280_and_gpu_modeled_times_follow_documented_formulas():
    u = U280Device()
    assert u.effective_Bps == pytest.approx(230e9)
    t = u.step_time(8, 2048)  # dense float32: 64 KiB streamed twice + 1 us
    assert t == pytest.approx(2 * 8 * 2048 * 4 / 230e9 + 1e-6)
    assert u.step_time(8, 2048, phase="forward") == pytest.approx(t / 2)
    lat = u.latency_s
    assert u.step_time(16, 2048) - lat == pytest.approx(2 * (t - lat))
    assert u.step_time(8, 100_000, nnz=400) == pytest.approx(
        2 * (400 * 8 + 9 * 4) / 230e9 + 1e-6)
    assert U280Device(time_scale=50).step_time(8, 2048) == pytest.approx(50 * t)
    g = GpuDevice()
    assert g.step_time(1, 1) == pytest.approx(4 * 5e-6, rel=1e-3)  # launch-bound floor
    big, big2 = g.step_time(4096, 8192), g.step_time(8192, 8192)
    assert (big2 - 20e-6) == pytest.approx(2 * (big - 20e-6), rel=0.01)  # bandwidth-bound
    # micro-batch sized work: the GPU is launch-bound, the FPGA pipeline is not
    assert g.step_time(8, 2048) > 10 * u.step_time(8, 2048)
    assert make_device({"type": "u280", "time_scale": 2}).time_scale == 2
    with pytest.raises(ValueError):
        make_device({"type": "tpu"})


def test_device_detects_violation_and_sleeps_otherwise():
    work = lambda: float(np.sort(np.random.default_rng(0).random(200_000)).sum())
    fast = U280Device(time_scale=1e-3)  # modeled ~1 ns: real numpy work cannot keep up
    res, modeled, real = fast.run(work, 8, 64)
    assert res > 0 and real > modeled
    v = fast.validity()
    assert v == {**v, "valid": False, "violations": 1, "steps": 1} and v["worst_ratio"] > 1
    slow = U280Device(latency_s=5e-3, time_scale=1.0)  # modeled ~5 ms
    t0 = time.perf_counter()
    _, modeled, real = slow.run(lambda: 1 + 1, 8, 64)
    assert time.perf_counter() - t0 >= modeled and real < modeled
    assert slow.validity()["valid"] and slow.validity()["steps"] == 1
    # many short steps: sleeps are batched (debt), the total still follows the model
    paced = U280Device(latency_s=40e-6)
    t0 = time.perf_counter()
    for _ in range(25):
        paced.run(lambda: None, 1, 1)
    paced.flush()
    assert time.perf_counter() - t0 >= paced.validity()["modeled_s_total"]
    assert paced.validity()["sleep_debt_s"] <= 0
    cpu = CpuDevice()
    _, m, r = cpu.run(work)
    assert m == r and cpu.validity()["valid"]


def test_device_in_training_counts_steps_and_keeps_results():
    ds = _ds("dense", "logreg", n=64, d=16)
    dev = U280Device(time_scale=1e-3, sleep=False)
    x_dev, _ = model_parallel_sgd(ds.X, ds.y, "logreg", 0.5, 16, 4, 1, 0,
                                  allreduce=lambda v: v, device=dev)
    x_ref, _ = reference_sgd(ds, "logreg", 0.5, 16, 1, 0)
    np.testing.assert_allclose(x_dev, x_ref, atol=1e-12)
    assert dev.validity()["steps"] == 2 * 64 // 4  # one forward + one backward per micro-batch


# ------------------------------------------------------------------ U280 adapter
def test_u280_xrt_dry_run_call_sequence_and_semantics():
    ds = _ds("dense", "logreg", n=32, d=8)
    ad = U280XrtAdapter("p4sgd_u280.xclbin", dry_run=True)
    ad.load(ds.X, ds.y, None, max_micro_batch=4, model="logreg")
    ops = [c["op"] for c in ad.calls]
    assert ops[:3] == ["device", "load_xclbin", "kernel"]
    assert ops[3:9] == ["bo_alloc"] * 6
    assert [c["group_id_of_arg"] for c in ad.calls[3:9]] == list(range(6))
    n_setup = len(ad.calls)
    idx = epoch_order(32, 0, 0)[:8]
    for c in (idx[:4], idx[4:]):
        q = ad.forward(c)
        ad.backward(c, q)  # M = 1: the allreduced sum is q itself
    ad.update(lr=0.5, batch_size=8)
    x = ad.read_model()
    step_ops = [c["op"] for c in ad.calls[n_setup:]]
    assert step_ops[:7] == ["bo_write", "bo_sync", "run", "wait", "bo_sync", "bo_read", "bo_write"]
    runs = [c for c in ad.calls if c["op"] == "run"]
    assert [r["mode"] for r in runs] == [0, 1, 0, 1, 2]
    assert runs[-1]["inv_batch"] == pytest.approx(1 / 8) and runs[0]["loss_kind"] == 1
    x_ref, _ = reference_sgd(ds.subset(idx), "logreg", 0.5, 8, 1, 0, order="sequential",
                             eval_every=0)
    np.testing.assert_allclose(x, x_ref, atol=1e-6)  # kernel computes in float32
    text = ad.describe(file=open("/dev/null", "w"))
    assert "dry run" in text and "p4sgd_glm" in text and "load_xclbin" in text
