"""A scenario's dataset spec -> a Dataset: the one dispatcher over the sources
(hosts.glm.data: synthetic, libsvm, builtin; hosts.glm.profiles: public datasets'
shapes, generated). It sits above both: profiles builds on data's primitives.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .data import BUILTIN, Dataset, load_libsvm, make_dense, make_sparse
from .models import MODELS
from .profiles import SPEC_KEYS as PROFILE_SPEC_KEYS
from .profiles import make_profile


_SPEC_KEYS = {
    "synthetic": {"source", "kind", "samples", "features", "density", "model", "noise",
                  "seed", "skew", "name"},
    "libsvm": {"source", "path", "n_features", "task", "model", "positive_label", "name"},
    "builtin": {"source", "name", "bias"},
    "profile": PROFILE_SPEC_KEYS,
}


def load_dataset(spec: dict[str, Any]) -> Dataset:
    """Build a Dataset from a scenario spec (see module docstring for the keys).

    {"source": "synthetic", "kind": "dense"|"sparse", "samples", "features",
     "density", "model", "noise", "seed", "skew"}
    {"source": "libsvm", "path", "n_features": None, "task" | "model", "positive_label"}
    {"source": "builtin", "name": "breast_cancer", "bias": False}
    {"source": "profile", "name": "rcv1", "samples", "features", "seed", "noise", "model"}
        (a public dataset's shape, generated: hosts.glm.profiles)
    """
    source = spec.get("source")
    if source not in _SPEC_KEYS:
        raise ValueError(f"dataset source must be one of {sorted(_SPEC_KEYS)}, got {source!r}")
    unknown = set(spec) - _SPEC_KEYS[source]
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} for {source} dataset; "
                         f"allowed: {sorted(_SPEC_KEYS[source])}")
    if source == "synthetic":
        kind = spec.get("kind", "dense")
        common = dict(samples=int(spec.get("samples", 4096)),
                      features=int(spec.get("features", 1024)),
                      model=spec.get("model", "logreg"),
                      noise=float(spec.get("noise", 0.01)), seed=int(spec.get("seed", 0)))
        if kind == "dense":
            ds = make_dense(**common)
        elif kind == "sparse":
            ds = make_sparse(density=float(spec.get("density", 0.01)),
                             skew=float(spec.get("skew", 0.0)), **common)
        else:
            raise ValueError(f"synthetic kind must be 'dense' or 'sparse', got {kind!r}")
        if spec.get("name"):
            ds.name = spec["name"]
        return ds
    if source == "profile":
        return make_profile(spec)
    if source == "libsvm":
        if "path" not in spec:
            raise ValueError("libsvm dataset spec needs 'path'")
        task = spec.get("task")
        if task is None and spec.get("model") in MODELS:
            task = "regression" if spec["model"] == "linreg" else "classification"
        return load_libsvm(spec["path"], spec.get("n_features"), task or "auto",
                           spec.get("positive_label"), spec.get("name"))
    name = spec.get("name")
    if name not in BUILTIN:
        raise ValueError(f"unknown builtin dataset {name!r}; available: {sorted(BUILTIN)}")
    return BUILTIN[name](**({"bias": bool(spec["bias"])} if "bias" in spec else {}))


# --- one dataset made for all of a point's programs -------------------------------
# Each P4SGD program builds the point's dataset from its spec; N programs on 2
# shared cores each making a 512 x 65,536 one (1.3-2.9 s apiece) or importing
# scikit-learn for `digits` held an 8-worker point's start for 7 s. The runner's
# side makes it once into a file the programs read (the spec is in the file, and
# a file made from another spec is refused): the same arrays, bit for bit.
def save_dataset_file(ds: Dataset, spec: dict[str, Any], path: str | Path) -> None:
    arrays: dict[str, np.ndarray] = {"y": ds.y}
    if sp.issparse(ds.X):
        arrays |= {"X_data": ds.X.data, "X_indices": ds.X.indices, "X_indptr": ds.X.indptr,
                   "X_shape": np.asarray(ds.X.shape)}
    else:
        arrays["X"] = ds.X
    meta_arrays = {k: v for k, v in ds.meta.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in ds.meta.items() if k not in meta_arrays}
    arrays |= {f"meta.{k}": v for k, v in meta_arrays.items()}
    head = {"spec": _spec_key(spec), "name": ds.name, "meta": meta}
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:                     # np.savez would add ".npz" to a name
        np.savez(f, head=np.asarray(json.dumps(head)), **arrays)
    os.replace(tmp, path)                          # a reader sees the whole file or none


def load_dataset_file(path: str | Path, spec: dict[str, Any]) -> Dataset:
    """The dataset save_dataset_file wrote for `spec` (ValueError for another spec's)."""
    with np.load(path, allow_pickle=False) as z:
        head = json.loads(str(z["head"]))
        if head["spec"] != _spec_key(spec):
            raise ValueError(f"{path} holds the dataset of {head['spec']}, not of {_spec_key(spec)}")
        if "X" in z:
            X: Any = z["X"]
        else:
            X = sp.csr_matrix((z["X_data"], z["X_indices"], z["X_indptr"]), shape=tuple(z["X_shape"]))
        meta = {**head["meta"], **{k[len("meta."):]: z[k] for k in z.files if k.startswith("meta.")}}
        return Dataset(X, z["y"], head["name"], meta)


def _spec_key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True)
