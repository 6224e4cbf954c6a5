"""Part env of bench/gpu_constants.py: device, SM count, torch / CUDA versions, UTC date,
host, command line.
"""
from __future__ import annotations

import datetime
import importlib
import os
import platform
import socket
import sys

import numpy as np
import torch

from bench.gpu.common import Sizes


def _version(module: str) -> str | None:
    try:
        return importlib.import_module(module).__version__
    except Exception as exc:
        return f"unavailable ({type(exc).__name__}: {exc})"


def part_env(dev: torch.device, sz: Sizes) -> dict:
    env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "hostname": socket.gethostname(), "argv": list(sys.argv), "cwd": os.getcwd(),
           "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "numpy": np.__version__, "torchvision": _version("torchvision"),
           "transformers": _version("transformers"), "device": str(dev), "smoke": sz.smoke,
           "cpu_count": os.cpu_count()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        env.update({"device_name": p.name, "sm_count": p.multi_processor_count,
                    "compute_capability": f"{p.major}.{p.minor}",
                    "total_memory_GiB": round(p.total_memory / 2 ** 30, 2),
                    "l2_cache_MiB": round(getattr(p, "L2_cache_size", 0) / 2 ** 20, 2) or None})
    else:
        env.update({"device_name": platform.processor() or platform.machine(), "sm_count": None})
    return env
