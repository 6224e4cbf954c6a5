"""Dataset profiles: the shapes of public GLM datasets, generated as seeded synthetic tasks.

A profile records one public LIBSVM dataset's rows, features, nonzeros per row,
value kind and label balance; every number carries its source and whether it
was read in stored public material (verified) or is an assumption [A]. The
data itself is not shipped (it is GBs and needs a download), so
`make_profile` generates a GLM task of the same shape from a seed: the labels
come from a hidden linear model x* (sign, flipped with probability `noise`, or
x*.a + noise for linreg), so SGD converges on it as on a linearly separable set.

Which datasets P4SGD (Huang et al., TPDS 2023, arXiv 2305.05885) evaluates on
is NOT in the stored material (only its abstract is): the names below come
from research/seeds.md 1.2 ([I]: "rcv1, avazu, url, kdd-type") or are
standard LIBSVM GLM benchmarks added as further shapes (`named_by` says which).

What the generator keeps: features (the full width unless capped), nonzeros
per row (capped at the width), value kind (non-negative TF-IDF-like, one-hot,
or signed dense), the positive share of the labels where a source gives it.
What it does not: the real data's column-popularity skew, correlations,
label-feature structure and statistical difficulty. Rows are capped
(DEFAULT_SAMPLES) for emulation; every row has unit L2 norm (as rcv1's
cosine-normalised vectors; [A] for the others) so one learning rate suits all.

The table and the spec check import no numpy/scipy work (the workload's
validator uses them); the generator imports hosts.glm.data lazily.

CLI: python -m hosts.glm.profiles --list
     python -m hosts.glm.profiles --name rcv1 --samples 2000 --out rcv1.libsvm
"""
from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import dataclass
from typing import Any

DEFAULT_SAMPLES = 2048   # [A] row cap for emulation: small enough for CI, a few epochs in seconds
VALUE_KINDS = ("tfidf", "onehot", "dense")

# Sources (the stored public material each number was read in)
_SEEDS = "research/seeds.md 1.2 (P4SGD datasets '[I, not verified]: rcv1, avazu, url, kdd-type')"
_NOT_NAMED_BY_PAPER = "not named by any stored P4SGD material: a standard LIBSVM GLM benchmark, added as a further shape"
_LIBSVM_TABLE = ("LIBSVM binary datasets page (csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html) as "
                 "copied in github xliuqq/blog_md docs/machine_learning/data_set/libsvm.md")
_NNI_TABLE = ("LIBSVM sets' #Train/#Feature in github microsoft/nni docs/en_US/FeatureEngineering "
              "(benchmark table)")
_SKLEARN_RCV1 = ("scikit-learn docs, RCV1 dataset (scikit-learn.org/0.17/datasets/rcv1.html): 47,236 features, "
                 "'0.16% of non zero values', 'cosine-normalized, log TF-IDF vectors' (RCV1-v2, 804,414 docs)")
_TICK_KDD = ("github X-DataInitiative/tick-datasets binary/kdd2010/README.md (kddb-raw-libsvm train): "
             "19,264,097 x 1,163,024, sparsity 0.000797 %, 86.1 % positive samples")
_UCI_GISETTE = ("UCI Gisette page (archive-beta.ics.uci.edu/dataset/170): training 3000 positive + 3000 "
                "negative, 5000 features (2500 real, 2500 probes)")
_CATBOOST_EPS = ("catboost docs, datasets.epsilon (catboost.ai/docs/concepts/python-reference_datasets_epsilon): "
                 "400000 training objects, 2000 numerical feature columns")
_CODES_KZHAN = "github codes-kzhan/data README.md (CriteoKaggle: 39 feature groups)"


@dataclass(frozen=True)
class Fact:
    """One number (or kind) of a profile, where it comes from, whether it was read there."""

    value: Any
    source: str
    verified: bool

    @property
    def mark(self) -> str:
        return "verified" if self.verified else "assumed [A]"


@dataclass(frozen=True)
class DatasetProfile:
    name: str              # the profile's name (the LIBSVM file's, lower case)
    description: str
    named_by: Fact         # why this dataset is here (its link to P4SGD, if any)
    rows: Fact             # training rows of the public set
    features: Fact
    nnz_per_row: Fact      # mean nonzeros per row; == features for a dense set
    values: Fact           # tfidf (non-negative), onehot (equal values), dense (signed)
    positive_fraction: Fact  # share of +1 labels (None: not known, 0.5 assumed)

    @property
    def dense(self) -> bool:
        return self.values.value == "dense"

    @property
    def density(self) -> float:
        return min(1.0, float(self.nnz_per_row.value) / int(self.features.value))

    def positive_share(self) -> float:
        p = self.positive_fraction.value
        return 0.5 if p is None else float(p)

    def facts(self) -> dict[str, Fact]:
        return {k: getattr(self, k) for k in ("named_by", "rows", "features", "nnz_per_row", "values",
                                               "positive_fraction")}


def _v(value: Any, source: str) -> Fact:
    return Fact(value, source, True)


def _a(value: Any, why: str) -> Fact:
    return Fact(value, why, False)


_UNKNOWN_BALANCE = "the positive share is not in the stored material: balanced (0.5) assumed"
_ONEHOT_VALUES = ("one-hot categorical fields, equal values per row [A]: the stored material gives "
                  "no value statistics")

PROFILES: dict[str, DatasetProfile] = {p.name: p for p in [
    DatasetProfile(
        "rcv1", "rcv1.binary: Reuters newswire, sparse TF-IDF text",
        named_by=_a("rcv1", _SEEDS),
        rows=_v(20242, _NNI_TABLE),
        features=_v(47236, _NNI_TABLE + "; " + _SKLEARN_RCV1),
        nnz_per_row=_a(0.0016 * 47236, "0.16 % of 47,236 (" + _SKLEARN_RCV1 + "), measured on the full "
                       "RCV1-v2 collection; that rcv1.binary's 20,242 rows share it is assumed"),
        values=_v("tfidf", _SKLEARN_RCV1),
        positive_fraction=_a(None, _UNKNOWN_BALANCE)),
    DatasetProfile(
        "avazu", "avazu (app/site): Avazu click-through logs, hashed one-hot categorical fields",
        named_by=_a("avazu", _SEEDS),
        rows=_v(40428967, _LIBSVM_TABLE + "; " + _NNI_TABLE),
        features=_v(1000000, _LIBSVM_TABLE + "; " + _NNI_TABLE),
        nnz_per_row=_a(20.0, "one nonzero per categorical field; the field count is not in the stored "
                       "material: 20 assumed, range 15-25"),
        values=_a("onehot", _ONEHOT_VALUES),
        positive_fraction=_a(None, _UNKNOWN_BALANCE + " (click data is usually skewed)")),
    DatasetProfile(
        "url", "url: suspicious-URL detection, lexical and host features (sparse)",
        named_by=_a("url", _SEEDS),
        rows=_v(2396130, _LIBSVM_TABLE),
        features=_v(3231961, _LIBSVM_TABLE),
        nnz_per_row=_a(115.0, "nonzeros per row are not in the stored material: 115 assumed, range 50-200"),
        values=_a("tfidf", "mixed binary and real lexical features; non-negative assumed"),
        positive_fraction=_a(None, _UNKNOWN_BALANCE)),
    DatasetProfile(
        "kdd2010-raw", "kdd2010 raw (bridge to algebra): student-performance logs, one-hot (KDD Cup 2010)",
        named_by=_a("kdd2010", _SEEDS + "; which KDD set ('kdd-type') is assumed: the raw bridge-to-algebra "
                    "version, the only one with a stored density"),
        rows=_v(19264097, _TICK_KDD + "; " + _LIBSVM_TABLE),
        features=_v(1163024, _TICK_KDD + "; " + _LIBSVM_TABLE),
        nnz_per_row=_v(0.00000797 * 1163024, _TICK_KDD + " (0.000797 % of 1,163,024 = 9.27 per row)"),
        values=_a("onehot", _ONEHOT_VALUES),
        positive_fraction=_v(0.861, _TICK_KDD)),
    DatasetProfile(
        "criteo", "criteo (Kaggle display-ad challenge): hashed one-hot categorical and count fields",
        named_by=_a("criteo", _NOT_NAMED_BY_PAPER),
        rows=_v(45840617, _LIBSVM_TABLE + "; " + _CODES_KZHAN),
        features=_v(1000000, _LIBSVM_TABLE),
        nnz_per_row=_a(39.0, "one nonzero per feature group, 39 groups (" + _CODES_KZHAN + "); one per "
                       "group in the LIBSVM version is assumed"),
        values=_a("onehot", _ONEHOT_VALUES),
        positive_fraction=_a(None, _UNKNOWN_BALANCE + " (" + _CODES_KZHAN + " gives '+1/-1 3.9:1' in one "
                             "version and '?' in another: not used)")),
    DatasetProfile(
        "real-sim", "real-sim: UseNet articles, real vs simulated auto/aviation (sparse TF-IDF text)",
        named_by=_a("real-sim", _NOT_NAMED_BY_PAPER),
        rows=_v(72309, _NNI_TABLE),
        features=_v(20958, _NNI_TABLE),
        nnz_per_row=_a(51.0, "nonzeros per row are not in the stored material: 51 assumed, range 30-80"),
        values=_a("tfidf", "text TF-IDF like rcv1: non-negative assumed"),
        positive_fraction=_a(None, _UNKNOWN_BALANCE)),
    DatasetProfile(
        "gisette", "gisette: handwritten 4 vs 9 with probe features (NIPS 2003 feature selection)",
        named_by=_a("gisette", _NOT_NAMED_BY_PAPER),
        rows=_v(6000, _UCI_GISETTE + "; " + _NNI_TABLE),
        features=_v(5000, _UCI_GISETTE + "; " + _NNI_TABLE),
        nnz_per_row=_a(5000.0, "treated as dense (the LIBSVM gisette_scale version is scaled to [-1, 1]); "
                       "its zero share is not in the stored material"),
        values=_a("dense", "signed, scaled features assumed"),
        positive_fraction=_v(0.5, _UCI_GISETTE)),
    DatasetProfile(
        "epsilon", "epsilon (PASCAL large-scale challenge): dense numerical features",
        named_by=_a("epsilon", _NOT_NAMED_BY_PAPER),
        rows=_v(400000, _CATBOOST_EPS + "; " + _LIBSVM_TABLE),
        features=_v(2000, _CATBOOST_EPS + "; " + _LIBSVM_TABLE),
        nnz_per_row=_v(2000.0, _CATBOOST_EPS + " (every object has all 2000 numerical columns)"),
        values=_a("dense", "signed numerical features assumed"),
        positive_fraction=_a(None, _UNKNOWN_BALANCE)),
]}

SPEC_KEYS = {"source", "name", "samples", "features", "seed", "noise", "model"}


# --------------------------------------------------------------------------- spec
def _positive_int(spec: dict[str, Any], key: str) -> int | None:
    v = spec.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"dataset.{key} must be a positive integer (a cap), got {v!r}")
    return v


def check_spec(spec: dict[str, Any]) -> DatasetProfile:
    """The profile a `source: profile` spec names, or ValueError saying what is wrong."""
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"unknown dataset keys {unknown} for source profile; allowed: "
                         f"{', '.join(sorted(SPEC_KEYS))}")
    name = spec.get("name")
    if name not in PROFILES:
        raise ValueError(f"unknown dataset profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    prof = PROFILES[name]
    samples, features = _positive_int(spec, "samples"), _positive_int(spec, "features")
    if samples is not None and samples > prof.rows.value:
        raise ValueError(f"dataset.samples {samples} exceeds {name}'s {prof.rows.value:,} rows")
    if features is not None and features > prof.features.value:
        raise ValueError(f"dataset.features {features} exceeds {name}'s {prof.features.value:,} features")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"dataset.seed must be a non-negative integer, got {seed!r}")
    noise = spec.get("noise", 0.01)
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or noise < 0:
        raise ValueError(f"dataset.noise must be a number >= 0, got {noise!r}")
    model = spec.get("model")
    if model is not None and model not in ("linreg", "logreg", "svm"):
        raise ValueError(f"dataset.model must be linreg, logreg or svm, got {model!r}")
    if model not in (None, "linreg") and noise > 0.5:
        raise ValueError(f"dataset.noise is a label-flip probability for {model}: it must be <= 0.5, "
                         f"got {noise!r}")
    return prof


def shape(spec: dict[str, Any]) -> tuple[int, int]:
    """(samples, features) a valid spec generates, without generating it."""
    prof = check_spec(spec)
    return (min(spec.get("samples") or DEFAULT_SAMPLES, prof.rows.value),
            spec.get("features") or prof.features.value)


# --------------------------------------------------------------------------- generator
def make_profile(spec: dict[str, Any]):
    """A seeded GLM task (hosts.glm.data.Dataset) of the profile's shape.

    Sparse profiles: per row ~nnz_per_row distinct uniform columns (tfidf:
    Binomial row lengths, |N(0,1)| values; onehot: the mean's floor or ceiling,
    equal values), rows scaled to unit L2 norm. Dense profiles: make_dense.
    Labels from x* ~ N(0, I) + mu, with mu set by bisection so that the share
    of positive scores is the profile's (non-negative values only: a signed
    set's scores are symmetric, so its share is 0.5), aimed so that the
    label-noise flips that follow leave the profile's share in expectation."""
    import numpy as np  # noqa: PLC0415
    import scipy.sparse as sp  # noqa: PLC0415

    from .data import Dataset, _check_model, _labels_from_scores, make_dense  # noqa: PLC0415

    prof = check_spec(spec)
    samples, features = shape(spec)
    model, noise, seed = spec.get("model", "logreg"), float(spec.get("noise", 0.01)), int(spec.get("seed", 0))
    _check_model(model)
    meta = {"source": "profile", "profile": prof.name, "model": model, "noise": noise, "seed": seed,
            "full_rows": prof.rows.value, "full_features": prof.features.value}
    if prof.dense:
        ds = make_dense(samples, features, model, noise, seed)
        ds.name, ds.meta = f"profile-{prof.name}", {**meta, "x_star": ds.meta["x_star"], "mu": 0.0}
        return ds
    rng = np.random.default_rng([seed, 3, zlib.crc32(prof.name.encode())])
    k = min(float(prof.nnz_per_row.value), float(features))
    if prof.values.value == "onehot":
        per_row = np.floor(k) + (rng.random(samples) < k - np.floor(k))
    else:
        per_row = rng.binomial(features, k / features, size=samples)
    per_row = np.maximum(per_row.astype(np.int64), 1)
    keys = np.empty(0, dtype=np.int64)
    need = per_row
    while need.any():   # draw columns until every row has its count of distinct ones
        rows = np.repeat(np.arange(samples, dtype=np.int64), need)
        keys = np.unique(np.concatenate([keys, rows * features + rng.integers(0, features, size=rows.size)]))
        need = per_row - np.bincount(keys // features, minlength=samples)
    rows, cols = keys // features, keys % features
    vals = np.abs(rng.standard_normal(keys.size)) if prof.values.value == "tfidf" else np.ones(keys.size)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(samples, features))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = (sp.diags(1.0 / np.maximum(norms, 1e-300)) @ X).tocsr()
    z = rng.standard_normal(features)
    # the share before the label flips that leaves the profile's share after them
    share = (prof.positive_share() - noise) / (1 - 2 * noise) if noise < 0.5 else 0.5
    mu = _offset_for_share(X @ z, np.asarray(X.sum(axis=1)).ravel(), min(1.0, max(0.0, share))) \
        if model != "linreg" else 0.0
    x_star = z + mu
    y = _labels_from_scores(X @ x_star, model, noise, rng)
    return Dataset(X, y, f"profile-{prof.name}", {**meta, "x_star": x_star, "mu": mu})


def _offset_for_share(base, row_sums, share: float) -> float:
    """mu such that mean(base + mu * row_sums >= 0) ~= share (row_sums > 0: monotone in mu)."""
    import numpy as np  # noqa: PLC0415

    def positive(mu: float) -> float:
        return float(np.mean(base + mu * row_sums >= 0))

    lo, hi = -1.0, 1.0
    while positive(lo) > share and lo > -1e6:
        lo *= 2
    while positive(hi) < share and hi < 1e6:
        hi *= 2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if positive(mid) < share else (lo, mid)
    return 0.5 * (lo + hi)


def write_libsvm(spec: dict[str, Any], path: str) -> dict[str, Any]:
    """Generate the profile and write it as LIBSVM (plain, .gz or .bz2); returns the
    `source: libsvm` spec that loads it back identically (n_features pins the width:
    the last columns may be empty in a small sample)."""
    from .data import save_libsvm  # noqa: PLC0415

    ds = make_profile(spec)
    save_libsvm(ds, path)
    return {"source": "libsvm", "path": path, "n_features": ds.n_features,
            "task": "regression" if ds.meta["model"] == "linreg" else "classification"}


# --------------------------------------------------------------------------- CLI
def table_rows() -> list[dict[str, Any]]:
    """One row per profile: the numbers and their marks (docs and --list)."""
    out = []
    for p in PROFILES.values():
        out.append({"name": p.name, "rows": p.rows.value, "features": p.features.value,
                    "nnz_per_row": round(float(p.nnz_per_row.value), 2), "density": p.density,
                    "values": p.values.value, "positive_fraction": p.positive_fraction.value,
                    "marks": {k: f.mark for k, f in p.facts().items()},
                    "sources": {k: f.source for k, f in p.facts().items()}})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hosts.glm.profiles",
                                 description="List dataset profiles, or write one's generated data as LIBSVM.")
    ap.add_argument("--list", action="store_true", help="print the profiles with sources (JSON lines)")
    ap.add_argument("--name", help=f"profile: {', '.join(sorted(PROFILES))}")
    ap.add_argument("--samples", type=int, help=f"row cap (default {DEFAULT_SAMPLES})")
    ap.add_argument("--features", type=int, help="feature cap (default: the full width)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.01)
    ap.add_argument("--model", default="logreg", help="labels for linreg | logreg | svm")
    ap.add_argument("--out", help="LIBSVM file to write (.gz/.bz2 compress)")
    args = ap.parse_args(argv)
    if args.list:
        for row in table_rows():
            print(json.dumps(row))
        return 0
    if not args.name or not args.out:
        ap.error("--name and --out are needed (or --list)")
    spec = {"source": "profile", "name": args.name, "seed": args.seed, "noise": args.noise,
            "model": args.model, **({"samples": args.samples} if args.samples is not None else {}),
            **({"features": args.features} if args.features is not None else {})}
    try:
        back = write_libsvm(spec, args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"wrote": args.out, "profile": spec, "load_with": back}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
