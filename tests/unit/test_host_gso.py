"""Which INA workers may send UDP GSO messages (MininetNetwork._host_gso,
impairments.host_egress_untouched): only those whose own interface carries no
htb, nftables egress rule or netem, since the kernel cuts a GSO message into
frames after those, which would shape or drop the whole message as one packet."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.net import factory
from testbed.net import impairments as imp
from testbed.scenario import load_scenario

pytestmark = pytest.mark.unit

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"


def host_gso(tmp_path, monkeypatch, *overrides: str) -> dict[str, bool]:
    monkeypatch.setattr(imp, "netem_available", lambda: False)   # this kernel: no sch_netem
    monkeypatch.setattr(imp, "nft_available", lambda: True)
    net = factory.build_network("mininet", load_scenario(QUICKSTART, list(overrides)),
                                logs_dir=tmp_path / "logs", pcaps_dir=tmp_path / "pcaps", seed=1)
    gso = net._host_gso()
    assert net.switch_info["workers"] == {h: {"gso": v} for h, v in gso.items()}
    return gso


@pytest.mark.parametrize("overrides,allowed", [
    ((), True),                                            # the switch shapes the uplinks and drops
    (("links.bandwidth_mbps=null",), True),                # unlimited links
    (("links.shaper=htb",), False),                        # htb at each host's interface
    (("links.mechanism=nftables", "links.loss_pct=1"), False),   # nftables egress loss at the host
], ids=["switch-shapes", "unlimited", "htb", "nftables-loss"])
def test_gso_only_where_nothing_at_the_host_acts_on_what_it_sends(tmp_path, monkeypatch, overrides, allowed):
    gso = host_gso(tmp_path, monkeypatch, *overrides)
    assert gso == {h: allowed for h in ("w1", "w2", "w3", "w4")}


def test_netem_at_a_host_rules_gso_out():
    plan = imp.ImpairmentPlan(mechanism="netem", netem=[{"node": "w2", "intf": "w2-eth0", "impair": {}}])
    assert not imp.host_egress_untouched(plan, "w2", htb_at_host=False)
    assert imp.host_egress_untouched(plan, "w1", htb_at_host=False)
    assert not imp.host_egress_untouched(plan, "w1", htb_at_host=True)
