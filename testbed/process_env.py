"""Environment settings every process the testbed starts on the shared cores gets."""
from __future__ import annotations

# numpy's OpenBLAS starts a helper thread per core that busy-waits (about 0.1 s
# after start and after every threaded call), stealing the shared cores from the
# other emulated hosts and the switch (measured under perf in bench.ina_transport:
# 45-100 ms of CPU per worker and the switch at start).
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread(env: dict[str, str]) -> dict[str, str]:
    """One BLAS thread, unless env already says otherwise; returns env."""
    for var in BLAS_THREAD_VARS:
        env.setdefault(var, "1")
    return env
