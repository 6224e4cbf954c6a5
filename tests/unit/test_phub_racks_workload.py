"""The cross-rack PHub workload's host roles and input checks (testbed/workloads/phub.py)."""
from __future__ import annotations

import pytest

from testbed.scenario.loader import load_scenario_text as _load
from testbed.workloads.phub import PhubWorkload, roles

BASE = """
name: t
topology: {kind: tree, workers: 7, leaves: 2}
workload: {kind: phub, racks: 2, server_cores: 1, device: {type: v100, time_scale: 100.0}}
"""


def load_scenario_text(text: str):
    return _load(text, "t.yaml")


def test_the_first_host_of_each_leaf_serves_its_rack_and_the_rest_train_in_rank_order():
    workers, servers = roles(load_scenario_text(BASE))
    assert servers == ["w1", "w5"]                 # leaves of 4 and 3 hosts (larger first)
    assert workers == ["w2", "w3", "w4", "w6", "w7"]
    assert roles(load_scenario_text(BASE.replace("racks: 2, server_cores: 1, ", "")))[1] == ["ps"]


def test_racks_that_do_not_fit_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="needs topology kind tree with leaves 2"):
        roles(load_scenario_text(BASE.replace("kind: tree, workers: 7, leaves: 2", "kind: star, workers: 7")))
    with pytest.raises(ValueError, match=r"every rack needs its server and at least one worker; "
                                         r"topology.workers 3 gives racks of \[2, 1\] hosts"):
        roles(load_scenario_text(BASE.replace("workers: 7", "workers: 3")))
    with pytest.raises(ValueError, match="one core per rack server"):
        PhubWorkload(racks=2)                     # server_cores defaults to 2
    with pytest.raises(ValueError, match="algorithm wide_ps"):
        PhubWorkload(racks=2, server_cores=1, algorithm="wide_ps")
