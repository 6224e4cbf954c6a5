"""A P4SGD point's dataset on the runner's side: built once per spec and shared.

The runner's process needs the dataset for a point's programs (made once into
the point's scratch folder for every host program to read, hosts.p4sgd
load_point_dataset), for the U280 call plans and for the collect's loss curve.
A sweep's points mostly share one spec, and making a synthetic 512 x 65,536
dataset takes 1.5 s, so the last one built is kept (read-only) while the next
asks for the same spec; a LIBSVM file is read again each time (it may have
changed between points).
"""
from __future__ import annotations

import functools
import json
from typing import Any

from testbed.workloads.base import PointContext

SHARED_FILE = "dataset.npz"      # in the point's scratch folder


def point_dataset(spec: dict[str, Any]) -> Any:
    """The hosts.glm Dataset of `spec` (its arrays read-only unless a LIBSVM file)."""
    if spec["source"] == "libsvm":
        from hosts.glm.datasets import load_dataset  # noqa: PLC0415
        return load_dataset(spec)
    return _built(json.dumps(spec, sort_keys=True))


def shared_dataset_file(spec: dict[str, Any], ctx: PointContext) -> str | None:
    """The point's dataset made once, for every program to read, where the hosts
    share the runner's files (a dry run names the file and makes nothing); None:
    each program builds it (LIBSVM: each reads its file)."""
    if ctx.scratch_dir is None or spec["source"] == "libsvm":
        return None
    path = ctx.scratch_dir / SHARED_FILE
    if not ctx.planning and not path.exists():
        from hosts.glm.datasets import save_dataset_file  # noqa: PLC0415
        save_dataset_file(point_dataset(spec), spec, path)
    return str(path)


@functools.lru_cache(maxsize=1)
def _built(spec_json: str) -> Any:
    import scipy.sparse as sp  # noqa: PLC0415
    from hosts.glm.datasets import load_dataset  # noqa: PLC0415
    ds = load_dataset(json.loads(spec_json))
    arrays = [ds.X.data, ds.X.indices, ds.X.indptr] if sp.issparse(ds.X) else [ds.X]
    for a in [*arrays, ds.y]:
        a.flags.writeable = False
    return ds
