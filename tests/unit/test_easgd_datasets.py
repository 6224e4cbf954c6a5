"""MNIST (idx) and CIFAR-10 (binary) files through hosts/easgd/datasets.py, on
tiny synthetic files written here: shapes, scaling, labels, gzip, the resized
LeNet's gradient, and one-line errors for bad files and specs."""
from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from hosts.easgd import datasets
from hosts.easgd.model import Evaluator, Task, initial_weights
from testbed.scenario import ScenarioError, load_scenario_text

pytestmark = pytest.mark.unit


def idx(dims: tuple[int, ...], data: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data.tobytes()


def write_mnist(folder, n_train=64, n_test=16, gz=False):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for stem, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        for name, blob in ((f"{stem}-images-idx3-ubyte", idx((n, 28, 28), x)),
                           (f"{stem}-labels-idx1-ubyte", idx((n,), y))):
            if gz:
                (folder / (name + ".gz")).write_bytes(gzip.compress(blob))
            else:
                (folder / name).write_bytes(blob)
    return folder


def write_cifar(folder, n=20):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for name in ("data_batch_1.bin", "data_batch_2.bin", "test_batch.bin"):
        rec = np.concatenate([(np.arange(n) % 10).astype(np.uint8)[:, None],
                              rng.integers(0, 256, (n, 3072), dtype=np.uint8)], axis=1)
        (folder / name).write_bytes(rec.tobytes())
    return folder


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files_load_scaled_with_their_labels(tmp_path, gz):
    train, test = datasets.load({"source": "mnist", "path": str(write_mnist(tmp_path, gz=gz))}, 0)
    assert train.x.shape == (64, 1, 28, 28) and test.x.shape == (16, 1, 28, 28)
    assert float(train.x.max()) <= 1.0 and train.y.tolist()[:11] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
    limited, _ = datasets.load({"source": "mnist", "path": str(tmp_path), "limit": 10}, 0)
    assert len(limited) == 10


def test_cifar_batches_concatenate_and_resize_lenet(tmp_path):
    spec = {"source": "cifar10", "path": str(write_cifar(tmp_path))}
    train, test = datasets.load(spec, 0)
    assert train.x.shape == (40, 3, 32, 32) and test.x.shape == (20, 3, 32, 32)
    widths = {"c1": 4, "c2": 8, "hidden": 16}
    task = Task(1, widths, 0, 2, 8, spec)
    g, loss = task.gradient(task.weights(), next(task.batches()))
    assert g.shape == task.weights().shape and loss > 0
    assert torch.equal(task.weights(), initial_weights(1, widths, spec))    # every host: same start
    assert 0.0 <= Evaluator(1, widths, spec)(task.weights()) <= 1.0


def test_bad_files_and_specs_say_what_is_wrong(tmp_path):
    with pytest.raises(datasets.DatasetError, match="no train-images-idx3-ubyte"):
        datasets.load({"source": "mnist", "path": str(tmp_path)}, 0)
    (tmp_path / "data_batch_1.bin").write_bytes(b"x" * 100)
    (tmp_path / "test_batch.bin").write_bytes(b"x" * 3073)
    with pytest.raises(datasets.DatasetError, match="not a whole number"):
        datasets.load({"source": "cifar10", "path": str(tmp_path)}, 0)
    with pytest.raises(ScenarioError, match="not a folder"):
        load_scenario_text("name: t\nworkload: {kind: easgd, dataset: {source: mnist, path: /no/such}}\n", "t.yaml")
    with pytest.raises(ScenarioError, match="unknown key"):
        load_scenario_text("name: t\nworkload: {kind: easgd, dataset: {source: digits, pth: x}}\n", "t.yaml")
