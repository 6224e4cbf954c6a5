"""`python -m testbed.switch.soft --config cfg.json`: run one soft switch.

Exit codes: 0 after SIGTERM/SIGINT (stats written), 2 for a bad config or a
port that cannot be opened, 1 for anything else. Logs go to stderr.
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import time

from testbed.switch.soft.config import ConfigError, SwitchConfig
from hosts.common.json_files import write_json_atomic
from testbed.switch.soft.switch import SoftSwitch

log = logging.getLogger("softswitch")


def _start_control_plane(switch: SoftSwitch, addr: str | None):
    """The P4Runtime server, in a thread, when the config asks for one."""
    if not addr:
        return None
    from testbed.switch.p4runtime_server import serve  # noqa: PLC0415 - grpc is slow to import
    return serve(switch, addr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.switch.soft",
                                 description="AF_PACKET soft switch (see docs/architecture.md)")
    ap.add_argument("--config", required=True, help="switch config JSON")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    try:
        cfg = SwitchConfig.load(args.config)
    except ConfigError as e:
        print(f"soft switch: bad config:\n{e}", file=sys.stderr)
        return 2
    try:
        switch = SoftSwitch(cfg)
    except (ConfigError, KeyError, ValueError) as e:
        print(f"soft switch {cfg.name}: bad config: {e}", file=sys.stderr)
        return 2
    except PermissionError as e:
        print(f"soft switch {cfg.name}: cannot open raw sockets ({e}); run as root or inside "
              f"`unshare -Urn` (needs CAP_NET_RAW)", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno in (errno.ENODEV, errno.ENXIO, errno.EADDRINUSE, errno.EADDRNOTAVAIL):
            print(f"soft switch {cfg.name}: {e.strerror or e}; check `ports`/`udp_listen` in "
                  f"{args.config}", file=sys.stderr)
            return 2
        raise
    switch.install_signal_handlers()
    cp = None
    try:
        cp = _start_control_plane(switch, cfg.p4runtime_addr)
        ports = {str(no): io.name for no, io in switch.ports.items()}
        modes = sorted({io.mode for io in switch.ports.values()})
        write_json_atomic(cfg.ready_path, {"pid": os.getpid(), "name": cfg.name, "ports": ports,
                                           "io_mode": "+".join(modes), "time": time.time()},
                          indent=1, sort_keys=True)
        log.info("%s ready: pid %d, ports %s, io %s, pipeline %s (%s), batch %d", cfg.name,
                 os.getpid(), ports, "+".join(modes), cfg.pipeline,
                 getattr(switch.pipeline, "pipeline_impl", "-"), cfg.batch)
        prof_path = os.environ.get("SOFTSWITCH_PROFILE")
        if prof_path:  # developer hook: cProfile the loop, dump pstats at exit
            import cProfile
            prof = cProfile.Profile()
            try:
                prof.runcall(switch.run)
            finally:
                prof.dump_stats(prof_path)
        else:
            switch.run()
    finally:
        if cp is not None:
            try:
                cp.stop()
            except Exception:  # noqa: BLE001 - stopping must not hide the stats
                log.exception("control plane stop failed")
        st = switch.close()
        if st is not None:
            write_json_atomic(cfg.stats_path, st, indent=1, sort_keys=True)
            tot_rx = sum(p["rx"] for p in st["ports"].values())
            tot_tx = sum(p["tx"] for p in st["ports"].values())
            log.info("%s stopped: rx %d tx %d cpu %.2fs wall %.2fs", cfg.name, tot_rx, tot_tx,
                     st["cpu_time_s"], st["wall_time_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
