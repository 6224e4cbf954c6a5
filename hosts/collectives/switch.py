"""In-switch allreduce (SwitchML-style): the collective for algorithm "switch".

Every worker sends its tensor to the switch in 64-value chunks through the INA
transport (hosts/ina/transport.py); the switch sums the N contributions of a
chunk and multicasts the result. Float32 goes through fixed point with a scale
agreed per tensor (one MAX round), so every worker gets the same bits.

connect() does a first round (MAX of a config hash and of its negation) that
is at once the startup barrier and the check that all workers run the same
experiment with the same INA settings; it waits up to connect_timeout_s for
slow starters. Transport failures surface as NetError, as for ring and ps.
"""
from __future__ import annotations

import hashlib
import json
import logging

import numpy as np

from hosts.common.arrays import as_array
from hosts.common.config import InaSettings
from hosts.common.tcp import NetError
from hosts.ina.transport import InaClient, InaError, UdpIo

log = logging.getLogger("allreduce.switch")


class SwitchAllreduce:
    def __init__(self, client: InaClient, world: int, timeout_s: float):
        self.client, self.world, self.timeout_s = client, world, timeout_s
        # Every op waits for silent peers up to this collective's timeout: silence
        # may be a peer still computing (a straggler; compute paced at a TDF of
        # 10^4 on a slow switch such as BMv2 is tens of seconds), not a dead switch.
        # LHC's straggler case on BMv2 (TDF 32000) was silent 30 s and its peers
        # gave up after 14 s of probes (the client's max_retries).
        client.patience_s = timeout_s

    @classmethod
    def connect(cls, *, rank: int, world: int, my_ip: str, ina: InaSettings, run: dict,
                connect_timeout_s: float, timeout_s: float) -> "SwitchAllreduce":
        try:
            io = UdpIo((my_ip, ina.worker_port), (ina.switch_ip, ina.switch_port), gso=ina.gso)
        except OSError as e:
            raise NetError(str(e)) from None
        client = InaClient(io, ina.job_id, rank, world, window=ina.window,
                           timeout_s=ina.retx_timeout_s, max_retries=ina.max_retries,
                           scale_exp=ina.scale_exp, congestion_window=ina.congestion_window,
                           impl=ina.impl)
        self = cls(client, world, timeout_s)
        try:
            self._handshake(run, connect_timeout_s)
        except BaseException:
            client.close()
            raise
        return self

    def _handshake(self, run: dict, connect_timeout_s: float) -> None:
        digest = hashlib.blake2b(json.dumps(run, sort_keys=True).encode(), digest_size=4).digest()
        h = int.from_bytes(digest, "big") & 0x7FFFFFFF
        got = self._run(lambda: self.client.wait(
            self.client.submit(np.array([h, -h], np.int32), "max", patience_s=connect_timeout_s),
            timeout=connect_timeout_s + self.timeout_s), "handshake")
        if int(got[0]) != h or -int(got[1]) != h:
            raise NetError(f"config mismatch between the workers of INA job {self.client.job_id}: "
                           f"their run settings (world, sizes, iterations, seed, ina.job_id/window/"
                           f"scale_exp) hash differently (max {int(got[0]):#x}, min {-int(got[1]):#x}, "
                           f"ours {h:#x}); give every worker the same config")

    def _run(self, fn, what: str):
        try:
            return fn()
        except (InaError, TimeoutError) as e:   # InaTimeoutError is both
            raise NetError(f"in-switch allreduce {what}: {e}") from None

    def allreduce(self, x):
        """ndarray -> flat float32 ndarray; CPU tensor -> float32 tensor of x's shape."""
        a, back = as_array(x)
        buf = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
        return back(self._run(lambda: self.client.wait(self.client.submit(buf), timeout=self.timeout_s),
                              f"of {buf.size} values"))

    def barrier(self) -> None:
        got = self._run(lambda: self.client.wait(self.client.submit(np.ones(1, np.int32)),
                                                 timeout=self.timeout_s), "barrier")
        if int(got[0]) != self.world:
            raise NetError(f"in-switch barrier counted {int(got[0])} workers, expected {self.world}: "
                           f"is the job installed with num_workers={self.world}?")

    def stats(self) -> dict:
        return self.client.stats.summary()

    def close(self) -> None:
        self.client.close()
