"""What the network applied is read back before it is recorded as applied:
htb rates from `tc class show`, the nftables loss rule from `nft -j list`."""
from __future__ import annotations

import json

import pytest

from testbed.net import impairments as imp

pytestmark = pytest.mark.unit

TC_100 = "class htb 5:1 root prio 0 rate 100Mbit ceil 100Mbit burst 15337b cburst 1600b \n"


@pytest.mark.parametrize("line, bps", [
    (TC_100, 100e6),
    ("class htb 5:1 root prio 0 rate 33333Kbit ceil 33333Kbit burst 15Kb cburst 1599b", 33_333e3),
    ("class htb 5:1 root prio 0 rate 12344bit ceil 12344bit burst 15Kb cburst 1599b", 12_344),
    ("class htb 5:1 root prio 0 rate 1Gbit ceil 1Gbit burst 15125b cburst 1375b", 1e9),
])
def test_htb_rate_is_parsed_from_tc_output(line, bps):
    assert imp.htb_rate_bps(line) == bps


def test_htb_rate_check():
    assert imp.check_htb_rate(TC_100, 100) is None
    # tc keeps bytes/s: 0.012345 Mbit/s reads back as 12344 bit/s, still a match.
    assert imp.check_htb_rate("class htb 5:1 root prio 0 rate 12344bit ceil 12344bit", 0.012345) is None
    assert "expected 50" in imp.check_htb_rate(TC_100, 50)
    # The class is missing when tc refused it (Mininet only logs that).
    assert "no htb class 5:1" in imp.check_htb_rate("", 1e-9)
    assert "no htb class 5:1" in imp.check_htb_rate("class htb 5:2 root prio 0 rate 100Mbit", 100)


def _nft_json(mod: int, threshold: int) -> str:
    return json.dumps({"nftables": [
        {"metainfo": {"version": "1.0.6"}},
        {"table": {"family": "inet", "name": imp.NFT_TABLE}},
        {"rule": {"comment": "seen", "expr": [{"counter": {"packets": 0, "bytes": 0}}]}},
        {"rule": {"comment": "loss", "expr": [
            {"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": mod, "offset": 0}},
                       "right": threshold}},
            {"counter": {"packets": 0, "bytes": 0}}, {"drop": None}]}}]})


def test_nft_loss_rule_read_back():
    assert imp.nft_loss_rule(_nft_json(imp.NFT_SCALE, 10_000)) == (imp.NFT_SCALE, 10_000)
    assert imp.check_nft_loss(_nft_json(imp.NFT_SCALE, 10_000), 1.0) is None
    assert "expected mod 1000000 < 50000" in imp.check_nft_loss(_nft_json(imp.NFT_SCALE, 10_000), 5.0)
    assert "no loss rule" in imp.check_nft_loss(json.dumps({"nftables": []}), 1.0)
    assert "cannot read the ruleset back" in imp.check_nft_loss("not json", 1.0)
