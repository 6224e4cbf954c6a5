"""Image classification data for the EASGD hosts: scikit-learn's bundled digits
(default, no download), or MNIST / CIFAR-10 files a user already has.

    {"source": "digits"}
    {"source": "mnist", "path": DIR}     # train-images-idx3-ubyte, train-labels-idx1-ubyte,
                                         # t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (.gz too)
    {"source": "cifar10", "path": DIR}   # data_batch_1..5.bin, test_batch.bin (the binary version)

Every loader returns (train, test) hosts.dnn.lenet.Dataset with x: N,C,H,W
float32 in [0, 1] and y: int64. MNIST and CIFAR come with their own test
split; the digits are split by a seeded permutation (hosts.dnn.lenet.digits).
`limit` keeps the first n training samples (quick runs on big files).
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hosts.dnn.lenet import Dataset, digits

SOURCES = ("digits", "mnist", "cifar10")
MNIST_FILES = {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
               "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}
CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST = "test_batch.bin"
CIFAR_RECORD = 1 + 3 * 32 * 32


class DatasetError(ValueError):
    pass


def _find(folder: Path, name: str) -> Path:
    for cand in (folder / name, folder / (name + ".gz")):
        if cand.is_file():
            return cand
    raise DatasetError(f"{folder}: no {name} (or {name}.gz)")


def _read(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def read_idx(path: Path) -> np.ndarray:
    """An MNIST idx file: magic 0x0801 (labels) or 0x0803 (images), big-endian sizes."""
    raw = _read(path)
    if len(raw) < 8 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DatasetError(f"{path}: not an unsigned-byte idx file (first bytes {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DatasetError(f"{path}: header says {dims} ({int(np.prod(dims))} bytes), file has {data.size}")
    return data.reshape(dims)


def mnist(folder: Path) -> tuple[Dataset, Dataset]:
    parts = {k: read_idx(_find(folder, v)) for k, v in MNIST_FILES.items()}

    def ds(x: np.ndarray, y: np.ndarray) -> Dataset:
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DatasetError(f"{folder}: images {x.shape} and labels {y.shape} do not match")
        return Dataset(torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1),
                       torch.from_numpy(y.astype(np.int64)))
    return ds(parts["train_x"], parts["train_y"]), ds(parts["test_x"], parts["test_y"])


def read_cifar(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(_read(path), dtype=np.uint8)
    if raw.size == 0 or raw.size % CIFAR_RECORD:
        raise DatasetError(f"{path}: {raw.size} bytes is not a whole number of {CIFAR_RECORD}-byte "
                           f"CIFAR-10 records (label + 3x32x32)")
    rec = raw.reshape(-1, CIFAR_RECORD)
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)


def cifar10(folder: Path) -> tuple[Dataset, Dataset]:
    train = [read_cifar(_find(folder, n)) for n in CIFAR_TRAIN if (folder / n).is_file()
             or (folder / (n + ".gz")).is_file()]
    if not train:
        raise DatasetError(f"{folder}: no data_batch_<i>.bin files")
    tx = np.concatenate([x for x, _ in train])
    ty = np.concatenate([y for _, y in train])
    ex, ey = read_cifar(_find(folder, CIFAR_TEST))

    def ds(x, y):
        return Dataset(torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y))
    return ds(tx, ty), ds(ex, ey)


def load(spec: dict[str, Any], seed: int) -> tuple[Dataset, Dataset]:
    source = spec.get("source", "digits")
    if source == "digits":
        train, test = digits(seed)
    elif source in ("mnist", "cifar10"):
        folder = Path(spec.get("path") or "")
        if not folder.is_dir():
            raise DatasetError(f"dataset.path {str(folder)!r}: not a folder")
        train, test = (mnist if source == "mnist" else cifar10)(folder)
    else:
        raise DatasetError(f"dataset.source {source!r}: use one of {', '.join(SOURCES)}")
    limit = spec.get("limit")
    if limit:
        train = Dataset(train.x[:limit], train.y[:limit])
    return train, test


def check(spec: dict[str, Any]) -> None:
    """Fail before anything starts: unknown keys, a missing folder or file (loads it)."""
    bad = sorted(set(spec) - {"source", "path", "limit"})
    if bad:
        raise DatasetError(f"dataset: unknown key(s) {bad}; allowed: source, path, limit")
    if spec.get("source", "digits") != "digits":
        load(spec, 0)
