"""The in-switch collective waits for a slow peer up to its own timeout
(hosts/collectives/switch.py `submit`): silence can be a straggler whose
compute is paced at a large TDF, not a dead switch. On BMv2 (TDF 32000) LHC's
3x straggler was silent for 30 s and its peers gave up after 14 s of probes."""
from __future__ import annotations

import numpy as np
import pytest

from hosts.collectives.switch import SwitchAllreduce
from hosts.ina.transport import InaTimeoutError

from ina_clients import make_net, run_all

pytestmark = pytest.mark.unit


def _late_peer(submit_early, late_by_s: float):
    """Worker 0 submits at t=0 (through `submit_early`), worker 1 at `late_by_s`
    (virtual seconds); returns worker 0's result once both are done."""
    net, (a, b), clock, _ = make_net(2, 8, timeout_s=0.05, max_retries=3)
    ha = submit_early(a, np.arange(64, dtype=np.float32))
    while clock.t < late_by_s:           # only worker 0 runs: it probes, backs off
        a.poll()
        if net.pending:
            net.flush(64)
        d = a.next_deadline()
        clock.advance(min(d if d is not None else late_by_s, late_by_s))
    hb = b.submit(np.ones(64, np.float32), patience_s=60.0)
    run_all(net, [a, b], clock, [ha, hb])
    return ha.result


def test_the_collective_waits_for_a_straggler_up_to_its_timeout():
    coll = lambda client: SwitchAllreduce(client, 2, timeout_s=60.0)   # noqa: E731
    got = _late_peer(lambda c, x: coll(c).client.submit(x), late_by_s=30.0)
    np.testing.assert_allclose(got, np.arange(64) + 1.0)


def test_without_patience_the_client_gives_up_after_max_retries():
    with pytest.raises(InaTimeoutError, match="retransmissions"):
        _late_peer(lambda c, x: c.submit(x), late_by_s=30.0)
