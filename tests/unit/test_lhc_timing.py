"""LHC's calibration pieces: the hardware-time table hosts interpolate, per-op
hardware times in the shared decision, and the config block's checks."""
from __future__ import annotations


import numpy as np
import pytest

from hosts.common import calibration as cal
from hosts.common.hw_table import HwTable


def test_hw_table_follows_the_network_model_between_grid_points():
    from testbed.fidelity.constants import load_profile
    from testbed.fidelity.network_model import collective_time
    from testbed.workloads.lhc import LhcWorkload, hw_table

    wl = LhcWorkload(algorithm="lhc_switch", gradient={"kind": "synthetic", "size": 65536, "density": 0.01})
    spec = hw_table(wl, 4)
    table, prof = HwTable(spec), load_profile(wl.hardware)
    for v in (1, 100, 2056, 3001, 65536, 200000):
        exact = collective_time("allreduce", "switch", v, 4, 4, prof)
        assert table(v) == pytest.approx(exact, rel=0.02), v
    with pytest.raises(ValueError, match="covers up to"):
        table(int(spec["values"][-1]) + 1)
    # dense_switch's float sum agrees a scale first: one more (1-value) pass charged.
    dense = HwTable(hw_table(wl.model_copy(update={"algorithm": "dense_switch"}), 4))
    assert dense(65536) == pytest.approx(collective_time("allreduce", "switch", 65536, 4, 4, prof)
                                         + collective_time("allreduce", "switch", 1, 4, 4, prof), rel=0.02)


def test_decide_takes_one_hardware_time_per_op():
    world, t0s, t1s = 2, [0.0, 1.0], [0.010, 1.100]   # op 0: 10 ms, op 1: 100 ms of network
    summed = sum(cal.encode(t0s, t1s, None, r, world) for r in range(world))
    tdf, why = cal.decide(summed, 2, world, [1e-5, 1e-4], fallback=1.0)   # both 1000x their hardware
    assert why["tdf_net"] == pytest.approx(1000.0, rel=1e-6) and tdf == 1000.0
    _, scalar = cal.decide(summed, 2, world, 1e-5, fallback=1.0)        # one time for both: median
    assert scalar["tdf_net"] == pytest.approx(np.median([0.01, 0.1]) / 1e-5, rel=1e-6)


def test_worker_config_checks_the_calibration_block(tmp_path):
    from hosts.common.config import ConfigError
    from hosts.lhc.worker import LhcConfig

    base = {"host": "w1", "role": "worker", "rank": 0, "world": 1, "algorithm": "lhc_ring",
            "peers": [{"name": "w1", "ip": "127.0.0.1"}], "ps": None, "port": 47800, "ina": None,
            "gradient": {"kind": "synthetic", "size": 64, "density": 0.1}, "iterations": 1, "warmup": 0,
            "compute_ms": 0, "topk_ratio": 0.01, "sketch": {}, "device": {"type": "gpu", "time_scale": 500.0},
            "straggler": None, "start_at": None, "connect_timeout_s": 1, "timeout_s": 1, "trace": None,
            "out": str(tmp_path / "o.jsonl")}
    good = dict(base, calibration={"rounds": 2, "iterations": 1, "hw_table": {"values": [0, 10], "hw_s": [1e-6, 2e-6]},
                                   "iteration_wall_s": 30.0})
    assert LhcConfig.from_json(good).calibration["rounds"] == 2
    assert LhcConfig.from_json(base).calibration is None
    bad = dict(base, calibration={"rounds": 0, "iterations": 1, "hw_table": {"values": [0, 10], "hw_s": [1, 2]},
                                  "iteration_wall_s": 30.0})
    with pytest.raises((ConfigError, ValueError), match="calibration"):
        LhcConfig.from_json(bad)
    unsorted = dict(base, calibration={"rounds": 1, "iterations": 1, "hw_table": {"values": [10, 0], "hw_s": [1, 2]},
                                       "iteration_wall_s": 30.0})
    with pytest.raises((ConfigError, ValueError), match="hw_table"):
        LhcConfig.from_json(unsorted)
    no_budget = dict(base, calibration={k: v for k, v in good["calibration"].items() if k != "iteration_wall_s"})
    with pytest.raises((ConfigError, ValueError), match="iteration_wall_s"):
        LhcConfig.from_json(no_budget)
