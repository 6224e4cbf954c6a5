"""The wide-aggregation parameter server baseline: hosts/collectives/ps.py's
ParameterServer, serving whole tensors (one per layer, whatever size the workers
send) until every worker sends the empty end of stream. It waits for a layer's
whole tensor from every worker, sums in rank order and sends the sum back (the
workers' pull); the optimizer runs on the workers.

    python -m hosts.phub.wide_ps --config ps.config.json   (the PHub server's config keys)
"""
from __future__ import annotations

import sys
import time

from hosts.collectives import make_hello
from hosts.collectives.ps import ParameterServer
from hosts.common import program, start_gate
from hosts.common.config import HostAddr
from hosts.common.tcp import NetError
from hosts.phub.config import load_server


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, writer, log = program.start("phub.wide_ps", __doc__, _Loader, argv)
    except program.SetupFailed as e:
        return e.code
    if len(cfg.jobs) != 1:
        log.error("bad config: the wide-aggregation PS serves one job, got %d", len(cfg.jobs))
        return program.EXIT_CONFIG
    job = cfg.jobs[0]
    start_gate.begin(cfg.start_at, cfg.host)
    error, ops = None, 0
    try:
        ps = ParameterServer.accept(peers=tuple(HostAddr(n, "") for n in job.workers), my_ip=cfg.ip,
                                    port_base=cfg.port, hello=make_hello(cfg.host, -1, job.identity(1)),
                                    connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
        try:
            t0 = time.perf_counter()
            while ps.reduce_next() > 0:
                ops += 1
            wall = time.perf_counter() - t0
        finally:
            ps.close()
        writer.write({"type": "wide_ps", "ops": ops, "wall_s": wall, "bytes_in": ps.bytes_received,
                      "bytes_out": ps.bytes_sent})
        return 0
    except (NetError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        log.error("%s", error)
        return program.EXIT_NET
    finally:
        writer.write({"type": "summary", "host": cfg.host, "role": "wide_ps", "ok": error is None,
                      "error": error, "ops": ops})
        writer.close()


class _Loader:
    from_json = staticmethod(load_server)


if __name__ == "__main__":
    sys.exit(main())
