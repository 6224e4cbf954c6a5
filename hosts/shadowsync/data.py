"""Click logs with the Criteo schema: 13 dense integer features, 26 categorical
features, a 0/1 click label.

  SyntheticClicks(seed, table_sizes)   a seeded generator: Zipf-distributed ids
      (row r of a table drawn with probability ~ 1/(r+1)^zipf_a, ranks shuffled
      into ids by a per-table permutation), log-normal counts for the dense
      features, and a planted signal: the click logit is a bias + a linear
      function of log1p(dense) + a hidden weight per row of the first
      `signal_tables` tables + one pairwise term; the label is Bernoulli of
      its sigmoid [A: the signal's shape is ours; it only has to be learnable].
  load_tsv(path, table_sizes)          Criteo Kaggle/Terabyte-format lines:
      label \t I1..I13 \t C1..C26, empty fields allowed (dense -> 0, category ->
      row 0), hex categories hashed into the table by value mod its size.
      A bad line is a DataError naming file:line.

Batches are (dense float32 B x 13 = log1p(max(count, 0)), ids int64 B x 26,
labels float32 B). `stream` numbers a worker (trainer x workers + worker) so
every Hogwild worker reads its own shard.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

N_DENSE, N_CAT = 13, 26
N_FIELDS = 1 + N_DENSE + N_CAT


class DataError(ValueError):
    pass


@dataclass(frozen=True)
class Batch:
    dense: torch.Tensor     # B x 13 float32 (log1p of the counts)
    ids: torch.Tensor       # B x 26 int64
    labels: torch.Tensor    # B float32

    def __len__(self) -> int:
        return len(self.labels)


def dense_transform(counts: np.ndarray) -> torch.Tensor:
    """Criteo's dense counts -> model input (the usual log1p; negatives -> 0)."""
    return torch.from_numpy(np.log1p(np.maximum(counts, 0)).astype(np.float32))


class SyntheticClicks:
    def __init__(self, seed: int, table_sizes: Sequence[int], zipf_a: float = 1.1,
                 signal_tables: int = 8, base_ctr_logit: float = -1.2, truth_seed: int | None = None):
        """`truth_seed` (default: seed) fixes the click model and the eval set; `seed`
        the training streams, so repeats can draw new examples from one truth."""
        if len(table_sizes) != N_CAT:
            raise DataError(f"the Criteo schema has {N_CAT} categorical features, got {len(table_sizes)} tables")
        self.seed, self.sizes = seed, [int(n) for n in table_sizes]
        self.truth_seed = seed if truth_seed is None else truth_seed
        rng = np.random.default_rng([self.truth_seed, 0])
        self._cdf = {}
        for n in set(self.sizes):
            p = 1.0 / np.arange(1, n + 1) ** zipf_a
            self._cdf[n] = np.cumsum(p / p.sum())
        self.perm = [rng.permutation(n) for n in self.sizes]
        self.w_dense = rng.normal(0, 0.4, N_DENSE)
        self.row_w = [rng.normal(0, 1.0, n) if t < signal_tables else np.zeros(n)
                      for t, n in enumerate(self.sizes)]
        self.pair_w = rng.normal(0, 0.7, self.sizes[0])   # pairs table 0's rows with dense feature 0
        self.dense_mu = rng.uniform(0.0, 2.5, N_DENSE)
        self.bias = base_ctr_logit

    def click_probability(self, counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The planted click model's P(click) of each example (the labels are Bernoulli
        of it; a model that predicts it scores the Bayes floor of NE)."""
        xs = np.log1p(counts) - self.dense_mu   # ~ zero mean, unit spread: a fixed transform, no batch stats
        logit = self.bias + xs @ self.w_dense + sum(self.row_w[t][ids[:, t]] for t in range(N_CAT))
        logit = logit + self.pair_w[ids[:, 0]] * xs[:, 0]
        return 1 / (1 + np.exp(-logit))

    def sample_with_probability(self, rng: np.random.Generator, n: int
                                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(counts n x 13 int64, ids n x 26 int64, labels n int64, P(click) n float64)."""
        counts = np.floor(rng.lognormal(self.dense_mu, 1.0, (n, N_DENSE))).astype(np.int64)
        ids = np.empty((n, N_CAT), np.int64)
        for t, size in enumerate(self.sizes):
            rank = np.searchsorted(self._cdf[size], rng.random(n), side="right")
            ids[:, t] = self.perm[t][np.minimum(rank, size - 1)]
        p = self.click_probability(counts, ids)
        labels = (rng.random(n) < p).astype(np.int64)
        return counts, ids, labels, p

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(counts n x 13 int64, ids n x 26 int64, labels n int64)."""
        return self.sample_with_probability(rng, n)[:3]

    def batches(self, stream: int, batch_size: int) -> Iterator[Batch]:
        """An endless seeded stream of batches for worker `stream`."""
        rng = np.random.default_rng([self.seed, 1, stream])
        while True:
            yield to_batch(*self.sample(rng, batch_size))

    def eval_set(self, n: int) -> Batch:
        return to_batch(*self.sample(np.random.default_rng([self.truth_seed, 2]), n))

    def eval_probability(self, n: int) -> torch.Tensor:
        """The planted model's P(click) of each of eval_set(n)'s examples (the same draws)."""
        return torch.from_numpy(self.sample_with_probability(np.random.default_rng([self.truth_seed, 2]), n)[3])


def to_batch(counts: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> Batch:
    return Batch(dense_transform(counts), torch.from_numpy(ids.astype(np.int64)),
                 torch.from_numpy(labels.astype(np.float32)))


# -- Criteo-format TSV ---------------------------------------------------------------
def parse_tsv(path: str | Path, table_sizes: Sequence[int], limit: int | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts, ids, labels) of a Criteo-format file; DataError names file:line."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file (a Criteo-format TSV: label, 13 dense, 26 categorical)")
    counts, ids, labels = [], [], []
    with open(p, encoding="utf-8", errors="strict") as f:
        try:
            for lineno, line in enumerate(f, 1):
                if limit is not None and len(labels) >= limit:
                    break
                line = line.rstrip("\n").rstrip("\r")
                if not line:
                    continue
                fields = line.split("\t")
                where = f"{p}:{lineno}"
                if len(fields) != N_FIELDS:
                    raise DataError(f"{where}: expected {N_FIELDS} tab-separated fields (label, "
                                    f"{N_DENSE} dense, {N_CAT} categorical), got {len(fields)}")
                if fields[0] not in ("0", "1"):
                    raise DataError(f"{where}: label must be 0 or 1, got {fields[0]!r}")
                labels.append(int(fields[0]))
                try:
                    counts.append([int(v) if v else 0 for v in fields[1:1 + N_DENSE]])
                except ValueError:
                    bad = next(i for i, v in enumerate(fields[1:1 + N_DENSE]) if v and not _is_int(v))
                    raise DataError(f"{where}: dense feature I{bad + 1} must be an integer, "
                                    f"got {fields[1 + bad]!r}") from None
                row = []
                for t, v in enumerate(fields[1 + N_DENSE:]):
                    try:
                        row.append(int(v, 16) % table_sizes[t] if v else 0)
                    except ValueError:
                        raise DataError(f"{where}: categorical feature C{t + 1} must be hex, got {v!r}") from None
                ids.append(row)
        except UnicodeDecodeError as e:
            raise DataError(f"{p}:{lineno + 1}: not UTF-8 text ({e.reason})") from None
    if not labels:
        raise DataError(f"{p}: no examples")
    return (np.asarray(counts, np.int64).reshape(-1, N_DENSE), np.asarray(ids, np.int64).reshape(-1, N_CAT),
            np.asarray(labels, np.int64))


def _is_int(v: str) -> bool:
    try:
        int(v)
        return True
    except ValueError:
        return False


class TsvClicks:
    """A Criteo-format file: every 10th example (index % 10 == 9) is the eval set;
    the rest are dealt round robin to the `streams` workers (one pass each, then
    the shard repeats)."""

    def __init__(self, path: str | Path, table_sizes: Sequence[int], limit: int | None = None):
        self.counts, self.ids, self.labels = parse_tsv(path, table_sizes, limit)
        idx = np.arange(len(self.labels))
        self.eval_idx, self.train_idx = idx[idx % 10 == 9], idx[idx % 10 != 9]
        if len(self.eval_idx) == 0 or len(self.train_idx) == 0:
            raise DataError(f"{path}: {len(self.labels)} examples are too few for a train/eval split")

    def batches(self, stream: int, batch_size: int, streams: int = 1) -> Iterator[Batch]:
        mine = self.train_idx[stream % streams::streams]
        if len(mine) == 0:
            raise DataError(f"worker stream {stream} of {streams} has no training examples")
        pos = 0
        while True:
            take = np.take(mine, np.arange(pos, pos + batch_size), mode="wrap")
            pos = (pos + batch_size) % len(mine)
            yield to_batch(self.counts[take], self.ids[take], self.labels[take])

    def eval_set(self, n: int) -> Batch:
        i = self.eval_idx[:n]
        return to_batch(self.counts[i], self.ids[i], self.labels[i])


def open_source(spec: dict, table_sizes: Sequence[int], seed: int):
    """{source: synthetic} or {source: criteo_tsv, path, limit}."""
    src = spec.get("source")
    if src == "synthetic":
        return SyntheticClicks(seed, table_sizes, **{k: v for k, v in spec.items() if k != "source"})
    if src == "criteo_tsv":
        return TsvClicks(spec["path"], table_sizes, spec.get("limit"))
    raise DataError(f"dataset.source must be synthetic or criteo_tsv, got {src!r}")


def stream_batches(source, stream: int, streams: int, batch_size: int) -> Iterator[Batch]:
    if isinstance(source, TsvClicks):
        return source.batches(stream, batch_size, streams)
    return source.batches(stream, batch_size)
