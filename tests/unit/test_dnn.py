"""The deep-learning layer's pure parts: FLOPs counted from the model, the
device model's formula and its checks, seeded data and shards, the MovieLens
loader, the torch worker config, and the torch workload's params and collect."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from hosts.common.device import PacedDevice
from hosts.dnn import data, lenet, lstm, ncf
from hosts.dnn.config import ConfigError, TorchWorkerConfig
from hosts.dnn.device import PEAK_FLOPS, DnnDevice, make_device, profile

pytestmark = pytest.mark.unit


# -- FLOPs and the device model ----------------------------------------------------
def test_profile_counts_conv_linear_by_hand():
    p = profile(lenet.LeNet(c1=16, c2=32, hidden=64), torch.zeros(5, 1, 8, 8))
    by = {x.name: x.flops_per_sample for x in p.layers}
    assert by["features.0"] == 2 * 1 * 9 * 16 * 8 * 8            # conv1 on 8x8
    assert by["features.3"] == 2 * 16 * 9 * 32 * 4 * 4           # conv2 after pooling
    assert by["classifier.1"] == 2 * 128 * 64
    assert by["classifier.3"] == 2 * 64 * 10
    assert [x.kind for x in p.layers] == ["Conv2d", "Conv2d", "Linear", "Linear"]   # ReLU/pool not counted


def test_profile_counts_lstm_per_token_and_embedding_bytes():
    m = lstm.LSTMLM(vocab=50, emb=8, hidden=16, layers=2)
    p = profile(m, torch.zeros(3, 7, dtype=torch.long))
    by = {x.kind: x for x in p.layers}
    per_token = 2 * 4 * 16 * (8 + 16) + 2 * 4 * 16 * (16 + 16)
    assert by["LSTM"].flops_per_sample == per_token * 7
    assert by["Embedding"].bytes_per_sample == 7 * 8 * 4 and by["Embedding"].flops_per_sample == 0
    assert by["Linear"].flops_per_sample == 2 * 16 * 50 * 7


def test_device_time_is_the_documented_formula():
    d = DnnDevice("a100", "tf32", efficiency=0.5, launch_s=1e-5, time_scale=10)
    m = nn.Sequential(nn.Linear(100, 200), nn.ReLU(), nn.Linear(200, 10))
    d.profile(m, torch.zeros(2, 100))
    f = 2 * 100 * 200 + 2 * 200 * 10
    rate = PEAK_FLOPS["a100"]["tf32"] * 0.5
    fwd = 64 * f / rate + 2 * 1e-5
    bwd = 2 * 64 * f / rate + 4 * 1e-5
    assert d.hw_time(64, "forward") == pytest.approx(fwd)
    assert d.hw_time(64) == pytest.approx(fwd + bwd)
    assert d.step_time(64) == pytest.approx(10 * (fwd + bwd))
    assert d.hw_time(128) > d.hw_time(64)


@pytest.mark.parametrize("spec, msg", [
    ({"type": "tpu"}, "unknown accelerator 'tpu'"),
    ({"type": "v100", "precision": "tf32"}, "v100 has no 'tf32'"),
    ({"type": "v100", "efficiency": 1.5}, "efficiency must be in"),
    ({"type": "a100", "speed": 2}, "unknown option"),
    ({"type": "cpu", "time_scale": 3}, "takes no options"),
])
def test_device_spec_errors(spec, msg):
    with pytest.raises(ValueError, match=msg):
        make_device(spec)


def test_step_times_need_a_profile():
    with pytest.raises(RuntimeError, match="profile"):
        DnnDevice().hw_time(8)


def test_paced_device_accumulates_debt_and_counts_violations():
    d = PacedDevice(time_scale=1.0, sleep=False)
    d.charge(0.010, 0.004)
    d.charge(0.010, 0.020)                # the CPU was slower than the model
    v = d.validity()
    assert v["steps"] == 2 and v["violations"] == 1 and not v["valid"]
    assert v["worst_ratio"] == pytest.approx(2.0)
    assert d.debt_s == 0.0                # sleep=False: the caller paces
    with pytest.raises(ValueError):
        PacedDevice(time_scale=0)


# -- data ----------------------------------------------------------------------------
def test_shards_are_disjoint_equal_and_batches_seeded():
    idx = torch.arange(103)
    shards = [data.shard(idx, r, 4) for r in range(4)]
    assert {len(s) for s in shards} == {25}
    assert len(set(torch.cat(shards).tolist())) == 100
    a = [b.tolist() for b in data.batches(shards[0], 8, seed=3, epoch=1)]
    assert a == [b.tolist() for b in data.batches(shards[0], 8, seed=3, epoch=1)]
    assert a != [b.tolist() for b in data.batches(shards[0], 8, seed=3, epoch=2)]
    assert all(len(b) == 8 for b in a) and len(a) == 3


def test_examples_data_are_seeded():
    tr1, _ = lenet.digits(5)
    tr2, _ = lenet.digits(5)
    assert torch.equal(tr1.x, tr2.x) and tr1.x.shape[1:] == (1, 8, 8) and float(tr1.x.max()) <= 1.0
    s = ncf.synthetic(2)
    assert torch.equal(s.labels, ncf.synthetic(2).labels)
    assert float(s.labels.mean()) == pytest.approx(1 / 3)             # 2 negatives per positive
    pos = set(zip(s.users[s.labels == 1].tolist(), s.items[s.labels == 1].tolist()))
    neg = set(zip(s.users[s.labels == 0].tolist(), s.items[s.labels == 0].tolist()))
    assert not pos & neg
    t = lstm.synthetic_text(4, vocab=20, length=2000, branching=2)
    assert torch.equal(t, lstm.synthetic_text(4, vocab=20, length=2000, branching=2))
    succ = {}
    for a, b in zip(t[:-1].tolist(), t[1:].tolist()):
        succ.setdefault(a, set()).add(b)
    assert max(len(v) for v in succ.values()) <= 2                    # the structure to learn


def test_movielens_loader_both_formats_and_errors(tmp_path):
    ml1m = tmp_path / "ratings.dat"
    ml1m.write_text("1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n"
                    "2::914::3::978301968\n")
    d = ncf.load_movielens(ml1m, negatives=1)
    assert (d.n_users, d.n_items, len(d)) == (2, 3, 4 + 4)
    assert d.users[:4].tolist() == [0, 0, 1, 1] and d.items[:4].tolist() == [0, 1, 0, 2]
    full = tmp_path / "full.dat"
    full.write_text("1::1::5::0\n1::2::5::0\n")
    with pytest.raises(ValueError, match="almost every item"):      # no item left to be a negative
        ncf.load_movielens(full)
    u100k = tmp_path / "u.data"
    u100k.write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n")
    d = ncf.load_movielens(u100k, negatives=1)
    assert (d.n_users, d.n_items) == (3, 3) and int(d.labels.sum()) == 3
    bad = tmp_path / "bad.dat"
    bad.write_text("1::2::3::4\nnonsense\n")
    with pytest.raises(ValueError, match=r"bad.dat:2: expected"):
        ncf.load_movielens(bad)


# -- the worker config ----------------------------------------------------------------
def worker_cfg(**over):
    cfg = {"host": "w1", "role": "worker", "rank": 0, "world": 2, "collective": "ring",
           "peers": [{"name": "w1", "ip": "10.0.0.1"}, {"name": "w2", "ip": "10.0.0.2"}],
           "ps": None, "port": 47800, "master_addr": "10.0.0.1", "master_port": 47860,
           "gloo_ifname": "w1-eth0", "script": "x.py", "args": [], "batch_size": 32, "seed": 1,
           "device": {"type": "cpu"}, "straggler": None, "start_at": None, "connect_timeout_s": 30,
           "timeout_s": 60, "out": "w1.jsonl", "trace": None, "ina": None}
    cfg.update(over)
    return cfg


def test_worker_config_parses_and_reports_every_error():
    c = TorchWorkerConfig.from_json(worker_cfg())
    assert c.my_ip == "10.0.0.1" and c.run_identity()["collective"] == "ring"
    bad = worker_cfg(collective="nccl", batch_size=0, args="--x", extra=1)
    del bad["device"]
    with pytest.raises(ConfigError) as e:
        TorchWorkerConfig.from_json(bad)
    msg = str(e.value)
    for part in ("collective: must be one of", "batch_size: must be >= 1", "args: must be a list",
                 "device: missing", "extra: unknown key"):
        assert part in msg, (part, msg)


# -- the workload ----------------------------------------------------------------------
def load(text: str):
    from testbed.scenario import load_scenario_text
    return load_scenario_text(text, "test.yaml")


SCN = """
name: t
topology: {kind: star, workers: 2}
workload:
  kind: torch
  script: scenarios/torch/train.py
  collective: %s
  device: %s
"""


def test_workload_params_and_errors():
    s = load(SCN % ("ps", "{type: a100, precision: tf32, time_scale: 10}"))
    assert s.hosts() == ["w1", "w2", "ps"]
    from testbed.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="device"):
        load(SCN % ("ring", "{type: a100, precision: fp64}"))
    with pytest.raises(ScenarioError, match="no such file"):
        load(SCN.replace("scenarios/torch/train.py", "nope.py") % ("ring", "{type: cpu}"))


def test_collect_point_summarizes_host_records(tmp_path):
    from testbed.workloads.torch import collect_point, summary_row
    s = load(SCN % ("ring", "{type: cpu}"))
    for r, h in enumerate(["w1", "w2"]):
        lines = [{"type": "iteration", "host": h, "rank": r, "iter": i, "t_s": 0.1 * (i + 1),
                  "loss": 2.0 - i, "compute_s": 0.01, "comm_s": 0.002, "comm_bytes": 400, "comm_ops": 1,
                  "hw_compute_s": 0.01} for i in range(2)]
        lines += [{"type": "final", "host": h, "rank": r, "acc": 0.5 + 0.1 * r},
                  {"type": "summary", "host": h, "rank": r, "ok": True, "error": None,
                   "validity": {"valid": True, "violations": 0}, "transport": None}]
        (tmp_path / f"{h}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = collect_point(s, tmp_path)
    summ = recs[-1]
    assert summ["type"] == "torch_summary" and summ["ok"] and summ["iterations"] == 2
    assert summ["final_loss"] == 1.0 and summ["final_acc"] == pytest.approx(0.55)
    assert summ["comm_bytes_per_worker"] == 800 and summ["iter_comm_s"] == pytest.approx(0.002)
    assert sum(r["type"] == "torch_iter" for r in recs) == 4
    row = summary_row(summ)
    assert row["emu_comm_ms"] == 2.0 and row["hw_comm_ms"] == pytest.approx(2.0 / summ["tdf"], abs=1e-4)


# -- the worker runtime: accounting, straggler, records, trace ---------------------------
def test_runtime_charges_the_straggled_model_and_writes_records_and_trace(tmp_path):
    from hosts.common.trace import read_trace
    from hosts.dnn.runtime import Runtime
    cfg = worker_cfg(device={"type": "v100", "time_scale": 2.0, "launch_s": 0.0},
                     straggler={"start_s": 0, "slowdown": 3.0, "delay_ms": 0},
                     out=str(tmp_path / "w1.jsonl"), trace=str(tmp_path / "w1.trace.jsonl"))
    rt = Runtime(TorchWorkerConfig.from_json(cfg))
    rt.device.profile(nn.Linear(1000, 1000), torch.zeros(2, 1000))
    hw = rt.device.hw_time(8)
    assert rt.compute(lambda: 42, batch_size=8) == 42
    assert rt.device.modeled_s_total == pytest.approx(hw * 2.0 * 3.0)   # dilated x slowdown
    rt.comm(lambda: None, 10)
    rec = rt.record_iteration(loss=torch.tensor(1.5), acc=None)
    assert rec["loss"] == 1.5 and "acc" not in rec and rec["comm_bytes"] == 40 and rec["comm_ops"] == 1
    assert rec["hw_compute_s"] == pytest.approx(hw * 3.0)              # undilated, slowed
    rt.comm(lambda: None, 5)                  # after the last iteration: still in the totals
    rt.close(True)
    lines = [json.loads(x) for x in (tmp_path / "w1.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["iteration", "summary"]
    assert lines[1]["ops"] == 2 and lines[1]["bytes"] == 60 and lines[1]["ok"]
    header, nodes = read_trace(tmp_path / "w1.trace.jsonl")
    assert header["tdf"] == 2.0 and header["workload"] == "torch"
    assert [n["kind"] for n in nodes] == ["compute", "comm", "comm"]
    assert nodes[0]["hw_s"] == pytest.approx(hw * 3.0) and nodes[1]["deps"] == [0] and nodes[1]["values"] == 10


def test_comm_inside_a_step_is_marked_and_not_counted_as_compute(tmp_path):
    from hosts.common.trace import read_trace
    from hosts.dnn.runtime import Runtime
    cfg = worker_cfg(out=str(tmp_path / "w1.jsonl"), trace=str(tmp_path / "w1.trace.jsonl"))
    rt = Runtime(TorchWorkerConfig.from_json(cfg))
    rt.compute(lambda: rt.comm(lambda: None, 3))          # like DDP's hook inside backward
    rt.comm(lambda: None, 4)
    rt.close(True)
    _, nodes = read_trace(tmp_path / "w1.trace.jsonl")
    assert [(n["kind"], n.get("inside_compute", False)) for n in nodes] == \
        [("comm", True), ("compute", False), ("comm", False)]
    assert nodes[1]["deps"] == [0] and nodes[2]["deps"] == [1]
    # the step's real compute excludes the time spent in the collective inside it
    assert nodes[1]["real_s"] <= (nodes[1]["t1"] - nodes[1]["t0"]) - (nodes[0]["t1"] - nodes[0]["t0"]) + 1e-9
