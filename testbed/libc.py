"""The C library, for the few calls Python's os module lacks (recvmmsg, sendmmsg,
timerfd).

Loaded by its soname rather than through ctypes.util.find_library, which runs
`ldconfig -p` in a subprocess: importing the switch or a host transport must start
no process (a dry run promises that, and its test watches for any child)."""
from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)
