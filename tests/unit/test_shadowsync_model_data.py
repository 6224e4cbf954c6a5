"""The DLRM-style model, the synthetic click log and the Criteo-format loader."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hosts.dnn.dlrm import DLRM, tower_profile
from hosts.shadowsync import data
from hosts.shadowsync.rules import normalized_entropy

pytestmark = pytest.mark.unit
SIZES = [50] * 26


def test_dlrm_shapes_and_interaction_count():
    m = DLRM(SIZES, dim=4, bottom=(8,), top=(8,))
    b = next(data.SyntheticClicks(1, SIZES).batches(0, 5))
    assert m(b.dense, b.ids).shape == (5,)
    # 27 feature vectors -> 27*26/2 = 351 pairwise dots, + the bottom output of 4
    assert m.tower.top[0].in_features == 4 + 351
    prof = tower_profile(m.tower)
    inter = next(x for x in prof.layers if x.kind == "Interaction")
    assert inter.flops_per_sample == 2 * 27 * 27 * 4
    assert prof.flops_per_sample > inter.flops_per_sample
    # the looked-up rows: 26 x 4 float32 per sample, memory-bound
    assert prof.bytes_per_sample == 26 * 4 * 4


def test_synthetic_log_is_seeded_zipf_and_criteo_shaped():
    a = data.SyntheticClicks(3, SIZES).sample(np.random.default_rng(0), 4000)
    b = data.SyntheticClicks(3, SIZES).sample(np.random.default_rng(0), 4000)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    counts, ids, labels = a
    assert counts.shape == (4000, 13) and ids.shape == (4000, 26)
    assert ids.min() >= 0 and ids.max() < 50
    # Zipf: the most frequent row of a table is far above uniform (1/50)
    top = np.bincount(ids[:, 3], minlength=50).max() / 4000
    assert top > 0.1
    assert 0.05 < labels.mean() < 0.6


def test_planted_signal_is_learnable():
    torch.manual_seed(0)
    src = data.SyntheticClicks(1, SIZES)
    m = DLRM(SIZES, dim=8, bottom=(16,), top=(16,))
    ev = src.eval_set(2000)
    opt = torch.optim.SGD([{"params": m.tower.parameters(), "lr": 0.05},
                           {"params": m.embeddings.parameters(), "lr": 3.0}])
    it = src.batches(0, 64)
    for _ in range(600):
        b = next(it)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(m(b.dense, b.ids), b.labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        ne = normalized_entropy(torch.sigmoid(m(ev.dense, ev.ids)), ev.labels)
    assert ne < 0.95          # better than predicting the base rate (NE 1)


def tsv_line(label="1", dense=None, cats=None) -> str:
    dense = dense if dense is not None else ["1"] * 13
    cats = cats if cats is not None else ["a1b2c3d4"] * 26
    return "\t".join([label, *dense, *cats])


def test_tsv_loader_reads_criteo_lines(tmp_path):
    p = tmp_path / "day.tsv"
    lines = [tsv_line("1"), tsv_line("0", dense=[""] * 12 + ["-1"], cats=[""] * 26)] * 10
    p.write_text("\n".join(lines) + "\n")
    counts, ids, labels = data.parse_tsv(p, SIZES)
    assert labels.tolist()[:2] == [1, 0] and len(labels) == 20
    assert counts[1].tolist() == [0] * 12 + [-1]
    assert ids[0, 0] == int("a1b2c3d4", 16) % 50 and ids[1].tolist() == [0] * 26
    src = data.TsvClicks(p, SIZES)
    assert len(src.eval_set(100)) == 2
    assert data.dense_transform(counts[1:2])[0, 12].item() == 0.0


@pytest.mark.parametrize("line,msg", [
    (tsv_line()[:-9], "expected 40 tab-separated fields"),
    (tsv_line(label="2"), "label must be 0 or 1"),
    (tsv_line(dense=["x"] + ["1"] * 12), "dense feature I1 must be an integer"),
    (tsv_line(cats=["zz"] + ["0"] * 25), "categorical feature C1 must be hex"),
])
def test_tsv_bad_line_names_file_and_line(tmp_path, line, msg):
    p = tmp_path / "bad.tsv"
    p.write_text(tsv_line() + "\n" + line + "\n")
    with pytest.raises(data.DataError, match=rf"bad.tsv:2: {msg}"):
        data.parse_tsv(p, SIZES)


def test_truth_seed_fixes_the_click_model_and_eval_set_not_the_stream():
    a = data.SyntheticClicks(1, SIZES, truth_seed=7)
    b = data.SyntheticClicks(2, SIZES, truth_seed=7)
    assert np.array_equal(a.row_w[0], b.row_w[0])
    assert torch.equal(a.eval_set(50).ids, b.eval_set(50).ids)
    assert not torch.equal(next(a.batches(0, 50)).ids, next(b.batches(0, 50)).ids)


def test_the_hogwild_step_is_the_shared_torch_step_charged_to_the_device():
    """A Hogwild worker's step goes through hosts.dnn.runtime.run_step (the torch
    runtime's own): the loss and flat gradient of fwd_bwd are the tower's, the rows'
    gradient is left for the PUSH, and the device model is charged hw x time_scale."""
    from hosts.dnn.device import make_device
    from hosts.dnn.dlrm import DenseTower
    from hosts.dnn.runtime import run_step
    from hosts.shadowsync.replica import flat_grad
    from hosts.shadowsync.trainer import _device, fwd_bwd

    torch.manual_seed(0)
    tower = DenseTower(13, 26, 4, [8], [8])
    b = next(data.SyntheticClicks(1, SIZES).batches(0, 16))
    pooled = torch.randn(16, 26, 4)
    dev = _device({"type": "v100", "time_scale": 3.0}, tower, 16)
    st = run_step(dev, lambda: fwd_bwd(tower, b, pooled), 16)
    loss, g = st.result
    ref = torch.nn.functional.binary_cross_entropy_with_logits(tower(b.dense, pooled.detach()), b.labels)
    tower.zero_grad(set_to_none=True)
    ref.backward()
    assert not loss.requires_grad and float(loss) == pytest.approx(float(ref.detach())) and torch.equal(g, flat_grad(tower))
    assert pooled.grad is not None and pooled.grad.shape == (16, 26, 4)
    assert st.hw_s == st.charged_s == dev.hw_time(16) > 0
    v = dev.validity()
    assert v["steps"] == 1 and v["modeled_s_total"] == pytest.approx(3.0 * st.hw_s)
    # the measured CPU device: the step's own time is what is charged (x a straggler's slowdown)
    cpu = make_device({"type": "cpu"})
    st = run_step(cpu, lambda: fwd_bwd(tower, b, torch.randn(16, 26, 4)), 16, slowdown=2.0)
    assert st.hw_s is None and st.charged_s == pytest.approx(2.0 * st.real_s)
    assert st.t2 - st.t1 >= st.real_s          # slept the slowdown's extra
