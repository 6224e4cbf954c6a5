"""A JSON file written whole or not at all, for files another process polls
(the switch's ready and stats files, the dilation control and its answer, the
start gate's go): a reader sees the old file or the new one, never half of it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | Path, obj: Any, *, indent: int | None = None,
                      sort_keys: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Per-process temporary name: two writers of one file never share a half-written one.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=indent, sort_keys=sort_keys))
    os.replace(tmp, path)
