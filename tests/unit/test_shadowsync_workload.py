"""The shadowsync workload's schema, host configs and accounting (no processes)."""
from __future__ import annotations

import pytest

from hosts.shadowsync.config import Settings
from testbed.scenario import load_scenario_text
from testbed.scenario.loader import ScenarioError
from testbed.workloads import shadowsync as ss

pytestmark = pytest.mark.unit

BASE = """
name: t
topology: {kind: star, workers: 2}
workload:
  kind: shadowsync
  algorithm: %s
"""


def test_hosts_per_algorithm():
    easgd = load_scenario_text(BASE % "easgd" + "  embedding_servers: 2\n", "t.yaml")
    assert easgd.hosts() == ["w1", "w2", "emb1", "emb2", "syncps"]
    ma = load_scenario_text(BASE % "ma", "t.yaml")
    assert ma.hosts() == ["w1", "w2", "emb1"]
    assert ss.label_of("easgd", "shadow") == "S-EASGD" and ss.label_of("bmuf", "foreground") == "FR-BMUF"


def test_settings_are_what_the_hosts_parse_and_shards_cover_every_table():
    wl = load_scenario_text(BASE % "bmuf" + "  embedding_servers: 3\n", "t.yaml").workload
    s = Settings.parse(ss.settings_of(wl, 2), "t")
    shards = [s.tables_of(e) for e in range(3)]
    assert sorted(t for sh in shards for t in sh) == list(range(26))
    assert shards[0][:3] == [0, 3, 6]


def test_dense_values_counts_the_tower():
    from hosts.shadowsync.replica import build_tower  # noqa: PLC0415
    wl = load_scenario_text(BASE % "ma", "t.yaml").workload
    s = Settings.parse(ss.settings_of(wl, 2), "t")
    assert ss.dense_values(wl) == sum(p.numel() for p in build_tower(s).parameters())


def test_sync_floor_from_the_network_model():
    easgd = load_scenario_text(BASE % "easgd", "t.yaml").workload
    ma = load_scenario_text(BASE % "ma", "t.yaml").workload
    assert ss.sync_hw_s(easgd, 2) > 0 and ss.sync_hw_s(ma, 2) > 0
    assert ss.sync_hw_s(ma, 1) == 0.0           # one trainer: no allreduce traffic
    assert ss.sync_hw_s(load_scenario_text(BASE % "none", "t.yaml").workload, 2) == 0.0


def test_bad_tsv_refused_before_the_run_with_file_and_line(tmp_path):
    good = "\t".join(["1"] + ["3"] * 13 + ["ab"] * 26)
    p = tmp_path / "clicks.tsv"
    p.write_text(good + "\n" + good + "\n" + "\t".join(["1"] + ["3"] * 13 + ["ab"] * 25) + "\n")
    text = BASE % "ma" + f"  dataset: {{source: criteo_tsv, path: {p}}}\n"
    with pytest.raises(ScenarioError, match=r"clicks.tsv:3: expected 40 tab-separated fields"):
        load_scenario_text(text, "t.yaml")


def test_push_accounting_finds_a_lost_update():
    trainers = [{"host": "w1", "pushes": 10, "rows_pushed": 100}, {"host": "w2", "pushes": 10, "rows_pushed": 100}]
    servers = [{"role": "embedding_ps", "client": "w1", "pushes": 10, "rows_applied": 100},
               {"role": "embedding_ps", "client": "w2", "pushes": 9, "rows_applied": 90}]
    acc = ss.push_accounting(trainers, servers, 1)
    assert not acc["pushes_match"] and acc["pushes_sent"] == 20 and acc["pushes_applied"] == 19
    servers[1].update(pushes=10, rows_applied=100)
    assert ss.push_accounting(trainers, servers, 1)["pushes_match"]
