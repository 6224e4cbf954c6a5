"""A hostile host: sends INA contributions under another member's worker id.

Run inside a job member's network namespace (the test enters it with
nsenter), it waits until `--start-at` (the allreduce's start), then sends
`--count` contributions claiming `--worker` of `--job` to the switch's
virtual address, from an ordinary UDP socket (the kernel fills in this host's
own MAC and IP: only the worker id is forged). Slots and versions follow the
hosts' rule (slot = seq % window, version = (seq // window) % 2) and seqs are
spread over the range an allreduce uses, so that many are valid when they
arrive. Prints {"sent": N} as JSON on stdout.
"""
from __future__ import annotations

import argparse
import json
import socket
import time

import numpy as np

from testbed import wire
from testbed.net.topology import SWITCH_VIP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--window", type=int, required=True)
    ap.add_argument("--start-at", type=float, required=True)
    ap.add_argument("--gap-s", type=float, default=0.003)
    args = ap.parse_args()
    values = np.full(wire.MAX_VALUES_PER_PACKET, 1 << 20, dtype=np.int32)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    time.sleep(max(0.0, args.start_at - time.time()))
    sent = 0
    for k in range(args.count):
        seq = k * 7
        frame = wire.build_frame("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", SWITCH_VIP,
                                 wire.INA_PORT_BASE, wire.INA_PORT_BASE, op=wire.OP_SUM,
                                 job_id=args.job, slot=seq % args.window,
                                 slot_ver=(seq // args.window) % 2, worker_id=args.worker,
                                 seq=seq, values=values)
        sock.sendto(frame[wire.INA_OFFSET:], (SWITCH_VIP, wire.INA_PORT_BASE))
        sent += 1
        time.sleep(args.gap_s)
    print(json.dumps({"sent": sent}))


if __name__ == "__main__":
    main()
