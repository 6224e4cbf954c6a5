"""The switch config chooses between the compiled INA pipeline and the reference
(`pipeline_impl`), saying which one runs. That `make setup` built it:
tests/unit/test_cext.py (every extension of scripts/build_fastpath.py).
"""
from __future__ import annotations

import json

import pytest

from testbed.scenario import ScenarioError, load_scenario_text
from testbed.switch.ina import CompiledInaPipeline, InaPipeline
from testbed.switch.pipeline import make_pipeline
from testbed.switch.soft.config import ConfigError, SwitchConfig
from testbed.switch.soft.switch import SoftSwitch

import ina_harness as H

pytestmark = pytest.mark.unit


def test_pipeline_impl_chooses_the_implementation():
    cfg = H.pipeline_config(H.job_config())
    assert type(make_pipeline("ina", cfg)) is CompiledInaPipeline          # default when built
    assert type(make_pipeline("ina", {**cfg, "pipeline_impl": "compiled"})) is CompiledInaPipeline
    assert type(make_pipeline("ina", {**cfg, "pipeline_impl": "reference"})) is InaPipeline
    assert CompiledInaPipeline.pipeline_impl == "compiled" and InaPipeline.pipeline_impl == "reference"
    with pytest.raises(ValueError, match="pipeline_impl: 'fast' is not one of compiled, reference"):
        make_pipeline("ina", {**cfg, "pipeline_impl": "fast"})


def test_bad_pipeline_impl_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="pipeline_impl: 'c' is not one of compiled, reference"):
        SwitchConfig.from_dict({"name": "s1", "ports": {"1": "a"}, "stats_path": "x",
                                "ready_path": "y", "pipeline_impl": "c"})
    text = "name: t\nswitch: {options: {pipeline_impl: fastest}}\n" \
           "workload: {kind: allreduce, algorithm: ring}\n"
    with pytest.raises(ScenarioError, match=r"switch\.options\.pipeline_impl: must be one of "
                                            r"compiled, reference"):
        load_scenario_text(text, "s.yaml")


class _NullPort:
    name, mode = "null", "null"

    def fileno(self):
        return -1

    def stats(self):
        return {"io_mode": "null"}

    def close(self):
        pass


@pytest.mark.parametrize("impl", ["compiled", "reference"])
def test_switch_stats_name_the_implementation(tmp_path, impl):
    raw = {"name": "s1", "ports": {"1": "p1", "2": "p2"}, "stats_path": str(tmp_path / "st.json"),
           "ready_path": str(tmp_path / "r"), "pipeline": "ina", "pipeline_impl": impl,
           "jobs": [H.job_config()], "switch_mac": H.SWITCH_MAC, "switch_ip": H.SWITCH_IP}
    sw = SoftSwitch(SwitchConfig.from_dict(raw), ports={1: _NullPort(), 2: _NullPort()})
    try:
        sw.write_stats()
        st = json.loads((tmp_path / "st.json").read_text())
        assert st["pipeline_impl"] == impl
    finally:
        sw.close()
