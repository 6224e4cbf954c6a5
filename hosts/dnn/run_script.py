"""Run a user's PyTorch training script on an emulated host (workload `kind: torch`).

    python -m hosts.dnn.run_script --config cfg.json

Role "worker" (w1..wN): sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT (rank 0's emulated address), GLOO_SOCKET_IFNAME (the host's
emulated interface), TESTBED_TORCH_CONFIG, TESTBED_BATCH_SIZE and TESTBED_SEED, opens the workload's collective
(the start barrier), makes every DistributedDataParallel model use the testbed
hook (hosts.dnn.ddp_hook; for "gloo" the hook calls gloo), then runs the script as
`__main__` with `args` as its argv, in this process. The script's
`hosts.dnn.report` calls write per-iteration records to cfg.out; a summary
(totals, device validity, transport counters) follows when it ends.

Role "ps" (collective ps only): the parameter server, serving allreduces of
whatever size the workers send until they all send the end-of-stream.

Exit codes: 0 ok, 1 the script raised, 2 bad config or output path, 3 network
failure or timeout, 4 calibration refused a TDF at which the run would crawl
(hosts.common.calibration.CalibrationRefused).
"""
from __future__ import annotations

import logging
import os
import runpy
import sys
import time
import traceback

from hosts.common import gc_pauses, program, start_gate
from hosts.common.calibration import CalibrationRefused
from hosts.common.tcp import NetError

EXIT_OK, EXIT_SCRIPT = 0, 1
EXIT_CONFIG, EXIT_NET = program.EXIT_CONFIG, program.EXIT_NET

log = logging.getLogger("torch")


def run_ps(cfg) -> int:
    from hosts.collectives import make_hello  # noqa: PLC0415
    from hosts.collectives.ps import ParameterServer  # noqa: PLC0415
    from hosts.common.results import JsonlWriter  # noqa: PLC0415

    writer = JsonlWriter(cfg.out)
    served, error, ps = 0, None, None
    try:
        ps = ParameterServer.accept(peers=cfg.peers, my_ip=cfg.ps.ip, port_base=cfg.port,
                                    hello=make_hello(cfg.host, -1, cfg.run_identity()),
                                    connect_timeout_s=cfg.connect_timeout_s, timeout_s=cfg.timeout_s)
        log.info("all %d workers connected", cfg.world)
        begun = start_gate.begin(cfg.start_at, cfg.host)
        t0 = begun if begun is not None else time.time()
        while True:
            s = cfg.straggler
            delay = s.delay_ms / 1e3 if s is not None and time.time() - t0 >= s.start_s else 0.0
            if ps.reduce_next(delay) == 0:
                break
            served += 1
        log.info("done: served %d allreduces", served)
        return EXIT_OK
    except NetError as e:
        error = str(e)
        log.error("%s", e)
        return EXIT_NET
    finally:
        if ps is not None:
            ps.close()
        writer.write({"type": "summary", "host": cfg.host, "role": "ps", "collective": "ps",
                      "world": cfg.world, "ok": error is None, "error": error, "allreduces_served": served,
                      "bytes_received": ps.bytes_received if ps else 0,
                      "bytes_sent": ps.bytes_sent if ps else 0})
        writer.close()


def run_worker(cfg, config_path: str) -> int:
    os.environ.update({
        "RANK": str(cfg.rank), "WORLD_SIZE": str(cfg.world), "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": cfg.master_addr, "MASTER_PORT": str(cfg.master_port),
        "TESTBED_TORCH_CONFIG": os.path.abspath(config_path),
        "TESTBED_BATCH_SIZE": str(cfg.batch_size), "TESTBED_SEED": str(cfg.seed),
    })
    if cfg.gloo_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = cfg.gloo_ifname
    from hosts.dnn import runtime  # noqa: PLC0415 - imports torch (seconds)
    import torch  # noqa: PLC0415
    # N emulated hosts share the machine's cores: one intra-op thread each (a
    # script may raise it), else every worker oversubscribes every core.
    torch.set_num_threads(1)
    rt = runtime.Runtime.open(config_path)
    ok, error, code = False, None, EXIT_SCRIPT
    try:
        log.info("rank %d/%d, collective %s, script %s %s", cfg.rank, cfg.world, cfg.collective,
                 cfg.script, " ".join(cfg.args))
        if cfg.collective != "gloo":
            rt.collective                      # connect now: the start barrier
        from hosts.dnn import ddp_hook  # noqa: PLC0415
        # Every DDP model's buckets go through testbed_hook, gloo included (there
        # the hook calls gloo's allreduce, as DDP's default hook does), so every
        # collective's communication is timed and traced the same way.
        ddp_hook.patch_ddp(hook=cfg.ddp_hook)
        gc_pauses.setup_done()                 # torch imported, collective open
        rt.start_wall = start_gate.begin(cfg.start_at, cfg.host)
        if cfg.collective != "gloo":
            rt.collective.barrier()
        rt.dilation.dilate_fixed()             # time_scale N: the network runs N x slower too
        rt.t0, rt.t0_wall = time.perf_counter(), time.time()    # until the first compute()
        sys.argv = [cfg.script, *cfg.args]
        try:
            runpy.run_path(cfg.script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise RuntimeError(f"the script exited with {e.code!r}") from None
        ok, code = True, EXIT_OK
    except NetError as e:
        error, code = str(e), EXIT_NET
        log.error("%s", e)
    except CalibrationRefused as e:          # raised through the script (report.iteration, DDP's hook)
        error, code = f"{type(e).__name__}: {e}", program.EXIT_REFUSED
        log.error("%s", error)
    except Exception as e:  # noqa: BLE001 - the user's script: report it whole
        error = f"{type(e).__name__}: {e}"
        log.error("the script failed:\n%s", traceback.format_exc())
    finally:
        try:
            rt.close(ok, error)
        except NetError as e:
            log.error("closing the collective: %s", e)
            if code == EXIT_OK:
                code = EXIT_NET
        from hosts.dnn import collective  # noqa: PLC0415
        # No barrier: a peer may have failed; the pause before exit still applies.
        collective.end_process_group(barrier=False)
    return code


def main(argv: list[str] | None = None) -> int:
    global log
    from hosts.dnn.config import TorchWorkerConfig  # noqa: PLC0415
    import argparse  # noqa: PLC0415
    parser = argparse.ArgumentParser(prog="python -m hosts.dnn.run_script", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    try:
        cfg = TorchWorkerConfig.from_json(args.config)
    except program.ConfigError as e:
        log.error("bad config: %s", e)
        return EXIT_CONFIG
    if not os.path.isfile(cfg.script):
        log.error("bad config: script %s: no such file", cfg.script)
        return EXIT_CONFIG
    log = logging.getLogger(f"torch[{cfg.host}]")
    gc_pauses.profile_from_env("torch", cfg.host)
    return run_ps(cfg) if cfg.role == "ps" else run_worker(cfg, args.config)


if __name__ == "__main__":
    sys.exit(main())
