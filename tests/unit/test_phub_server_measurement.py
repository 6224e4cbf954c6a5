"""The PHub server benchmark (testbed/reproduce/measurements/phub_server.py) runs both
servers' own loops over socket pairs and yields positive fitted costs; the file it
writes is what the loader accepts (a --smoke run is refused as data); the PHub
projection's assumed server constants' ranges reach the measured values."""
from __future__ import annotations

import json

import pytest

from testbed.reproduce.measurements import phub_server as m

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("phub_server") / "smoke.json"
    assert m.main(["--smoke", "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_the_smoke_benchmark_fits_positive_costs_per_server(smoke):
    _, data = smoke
    assert data["schema"] == m.SCHEMA and data["smoke"] is True
    assert "phub_server --smoke" in data["command"] and "Python" in data["machine"] and data["date"]
    for srv in m.SERVERS:
        fit = data["fits"][srv]
        # a smoke run on a shared, loaded machine: the fit exists and is non-negative; how
        # well it fits is the real run's to report (its file keeps the largest miss)
        assert fit["message_us"] >= 0 and fit["value_ns"] >= 0, (srv, fit)
        assert fit["message_us"] + fit["value_ns"] > 0 and fit["max_rel_residual"] >= 0, (srv, fit)
    servers = {r["server"] for r in data["rows"]}
    assert servers == set(m.SERVERS)
    assert all(r["median_us"] > 0 and len(r["per_round_us"]) == data["grid"]["repeats"] for r in data["rows"])
    rel = data["relative"]
    assert rel["per_message"] > 0 and len(rel["points"]) == len(m.SMOKE["key_bytes"]) * len(m.SMOKE["workers"])


def test_a_smoke_run_is_not_accepted_as_the_measurement(smoke):
    path, _ = smoke
    with pytest.raises(m.ServerCostError, match="smoke"):
        m.server_costs(path)


def test_the_phub_core_counts_every_message_it_served():
    # 2 workers, a key of 3 chunks (the last one short): every chunk completes each round
    assert 0 < m.run_phub(values=2 * 8192 + 100, workers=2, chunk_bytes=32768, rounds=3) < 1.0
    assert 0 < m.run_wide(values=1000, workers=3, rounds=3) < 1.0


def test_the_fit_recovers_known_costs():
    rows = []
    for v in (1024, 65536, 1 << 20):
        for n in (2, 4, 8):
            for chunks in (1, 8):
                rows.append({"server": "phub", "values": v, "workers": n, "chunks": chunks, "key_bytes": 4 * v,
                             "chunk_bytes": 4 * v // chunks,
                             "median_us": (n * (30e-6 + chunks * 5e-6 + v * 2e-9) + v * 3e-9) * 1e6})
            rows.append({"server": "wide_ps", "values": v, "workers": n, "chunks": 1, "key_bytes": 4 * v,
                         "chunk_bytes": None, "median_us": n * (20e-6 + v * 1e-9) * 1e6})
    p, w = m.fit(rows, "phub"), m.fit(rows, "wide_ps")
    assert p["message_us"] == pytest.approx(30, rel=1e-6) and p["chunk_us"] == pytest.approx(5, rel=1e-6)
    assert p["value_ns"] == pytest.approx(2, rel=1e-6) and p["optimizer_value_ns"] == pytest.approx(3, rel=1e-6)
    assert w["message_us"] == pytest.approx(20, rel=1e-6) and w["value_ns"] == pytest.approx(1, rel=1e-6)
    assert p["max_rel_residual"] < 1e-9


def test_the_projections_server_constants_reach_the_measured_values():
    from testbed.reproduce.papers import phub
    if not m.data_files():
        pytest.skip("no phub_server_*.json measured yet (the projection's notes say so)")
    got = phub.measured_values()
    assert set(got) == {"phub_message_us", "baseline_message_us", "reduce_gbs", "baseline_copies"}
    consts = {c.name: c for c in phub.SPEED_CONSTANTS}
    for name, v in got.items():
        c = consts[name]
        if name == "baseline_copies" and v < 0:       # the model cannot go below no copy
            assert c.lo == 0.0
            continue
        assert c.lo <= round(v, 2) <= c.hi, (name, v, c)
        assert phub.MEASURED.source in c.source
    note = phub.PAPER.notes[-1]
    assert "measured on this machine" in note and "not PHub" not in note and "C++" in note
    assert f"{phub.MEASURED.relative['per_message']:.2f}x per message" in note
