"""numpy arrays or torch tensors into the collectives, and the result back in kind.

    a, back = as_array(x)      # x: np.ndarray or a CPU torch.Tensor
    y = back(allreduce(a))     # y: an ndarray, or a tensor of x's shape if x was one

A CPU tensor's `.numpy()` shares its memory, so a tensor costs no copy here;
the collectives then copy it once, as they do a numpy array (into the ring's
working buffer, into packets). The result (a fresh array) becomes a tensor
with `torch.from_numpy`, again without a copy.

torch is never imported here: a tensor can only exist if its caller already
imported torch, so `sys.modules` tells. Host programs that never touch torch
(the switch, the GLM workers) do not pay its seconds of import time.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np


def _same(y: np.ndarray) -> np.ndarray:
    return y


def is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def as_array(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """(numpy view of x, function turning a result array into x's kind)."""
    if not is_tensor(x):
        return x, _same
    torch = sys.modules["torch"]
    if x.device.type != "cpu":
        raise TypeError(f"the testbed's collectives take CPU tensors; got one on {x.device} "
                        f"(call .cpu() first: the emulated network carries host memory)")
    t = x.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        # numpy has no bfloat16; both travel as float32 anyway (fixed point / TCP float32).
        t = t.float()
    shape = tuple(x.shape)

    def back(y: np.ndarray) -> Any:
        return torch.from_numpy(np.asarray(y)).reshape(shape)

    return t.numpy(), back
