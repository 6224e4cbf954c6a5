"""What every host program does before its real work: parse `--config`, set up
logging to stderr, load and check the config, open the JSON-lines output.

    try:
        cfg, writer, log = program.start("allreduce", __doc__, AllreduceConfig, argv)
    except program.SetupFailed as e:
        return e.code
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from hosts.common import gc_pauses
from hosts.common.config import ConfigError
from hosts.common.results import JsonlWriter

# Exit codes shared by host programs (the runner reports them with the log tail).
# EXIT_REFUSED: the program found its run could not be valid (e.g. a calibration
# that would crawl) and stopped before spending the point's time on it.
EXIT_CONFIG, EXIT_NET, EXIT_REFUSED = 2, 3, 4


class SetupFailed(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def start(name: str, doc: str | None, config_cls: Any, argv: list[str] | None
          ) -> tuple[Any, JsonlWriter, logging.Logger]:
    parser = argparse.ArgumentParser(prog=f"python -m hosts.{name}",
                                     description=(doc or name).split("\n")[0])
    parser.add_argument("--config", required=True, help=f"JSON config (see {config_cls.__name__})")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    log = logging.getLogger(name)
    try:
        cfg = config_cls.from_json(args.config)
    except ConfigError as e:
        log.error("bad config: %s", e)
        raise SetupFailed(EXIT_CONFIG) from None
    log = logging.getLogger(f"{name}[{cfg.host}]")
    gc_pauses.profile_from_env(name, cfg.host)
    gc_pauses.setup_done()      # imports and config done: the profile's "run" is all that follows
    try:
        writer = JsonlWriter(cfg.out)
    except OSError as e:
        log.error("cannot write output %s: %s", cfg.out, e.strerror or e)
        raise SetupFailed(EXIT_CONFIG) from None
    return cfg, writer, log
