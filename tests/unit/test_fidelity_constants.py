"""Hardware profiles: every constant sourced and tagged, SI conversion, overrides, clear errors."""
from __future__ import annotations

import pytest
import yaml

from testbed.fidelity.constants import (PROFILES_DIR, REQUIRED, ProfileError, list_profiles,
                                        load_profile)


def test_both_profiles_load_with_every_required_constant():
    assert {"tofino1-100g", "tor-100g-host"} <= set(list_profiles())
    for name in ("tofino1-100g", "tor-100g-host"):
        p = load_profile(name)
        assert set(REQUIRED) <= set(p.constants)
        for c in p.constants.values():
            assert c.source and c.tag in "VDAI"
            if c.tag in "AI":
                lo, hi = c.range
                assert lo <= c.value <= hi


def test_values_are_si_and_overrides_use_the_file_unit():
    p = load_profile("tofino1-100g")
    assert p["link_rate"] == 100e9
    assert p["switch_pipeline_latency"] == pytest.approx(600e-9)
    assert p["propagation_delay"] == pytest.approx(5e-9)
    q = p.with_overrides({"switch_pipeline_latency": 1000})
    assert q["switch_pipeline_latency"] == pytest.approx(1e-6)
    assert p["switch_pipeline_latency"] == pytest.approx(600e-9)     # original untouched
    assert "switch_pipeline_latency=1000" in q.label()
    with pytest.raises(ProfileError, match="unknown constant 'bogus'"):
        p.with_overrides({"bogus": 1})
    with pytest.raises(ProfileError, match="link_rate must be positive"):
        p.with_overrides({"link_rate": 0})


def test_load_by_path_and_unknown_name():
    p = load_profile(PROFILES_DIR / "tor-100g-host.yaml")
    assert p.name == "tor-100g-host"
    with pytest.raises(ProfileError, match="no hardware profile 'nope'.*tofino1-100g"):
        load_profile("nope")


def _write(tmp_path, mutate):
    doc = yaml.safe_load((PROFILES_DIR / "tofino1-100g.yaml").read_text())
    mutate(doc["constants"])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["nic_latency"].pop("range"), r"constants\.nic_latency\.range: an \[I\] constant needs range"),
    (lambda c: c["link_rate"].update(unit="ns"), r"constants\.link_rate\.unit: 'ns' is not a bit/s unit"),
    (lambda c: c["link_rate"].update(unit="furlong"), r"constants\.link_rate\.unit: unknown unit"),
    (lambda c: c.pop("reduce_rate"), r"missing reduce_rate"),
    (lambda c: c["cable_length"].update(range=[5, 10]), r"cable_length\.range: \[5, 10\] must contain the value 3"),
    (lambda c: c["fcs_bytes"].update(tag="X"), r"fcs_bytes\.tag: must be one of"),
    (lambda c: c["fcs_bytes"].update(source=""), r"fcs_bytes\.source"),
])
def test_bad_profile_names_file_and_field(tmp_path, mutate, message):
    path = _write(tmp_path, mutate)
    with pytest.raises(ProfileError, match=message) as e:
        load_profile(path)
    assert str(path) in str(e.value)
