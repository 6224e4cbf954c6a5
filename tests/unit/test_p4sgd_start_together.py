"""Every P4SGD rank starts its training clock together after the network is dilated.

Rank 0 alone asks the soft switch for the dilated network (the control file) and
waits for its acknowledgement (the switch polls the file every ~20 ms); the other
ranks must not start their clocks before that, or the point's train_s (the
maximum over workers) counts rank 0's wait (issue 27 part 6: rank 0 started
33-65 ms after the others and most multi-worker points came out invalid).

In-process: workers in threads over an exact allreduce, a barrier shared by the
threads, and a fake switch that acknowledges each request after ACK_DELAY_S."""
from __future__ import annotations

import json
import threading
import time

import pytest

from hosts import p4sgd as prog
from hosts.common.network_dilation import ack_path
from hosts.common.results import JsonlWriter
from hosts.glm.training import LocalAllreduceGroup
from testbed import results as res
from testbed.fidelity.constants import load_profile
from testbed.fidelity.network_model import dilation_hardware

ACK_DELAY_S = 0.12            # the switch's poll, exaggerated so a late rank 0 cannot hide in jitter
TINY = {"source": "synthetic", "kind": "dense", "samples": 96, "features": 40, "seed": 3, "model": "logreg"}


def slow_switch(control, stop: threading.Event, seen: list) -> None:
    """Acknowledge every new dilation request ACK_DELAY_S after it was written."""
    while not stop.is_set():
        try:
            got = json.loads(control.read_text())
        except (FileNotFoundError, ValueError):
            got = None
        if got and (not seen or seen[-1]["version"] != got["version"]):
            seen.append(got)
            time.sleep(ACK_DELAY_S)
            ack_path(control).write_text(json.dumps({"applied": True, "version": got["version"]}))
        time.sleep(0.002)


def _cfg(tmp_path, rank, world, control, calibrated):
    peers = [{"name": f"w{r + 1}", "ip": f"127.0.1.{r + 1}"} for r in range(world)]
    return {"host": f"w{rank + 1}", "role": "worker", "rank": rank, "world": world,
            "mode": "model_parallel", "glm": "logreg", "l2": 0.0, "lr": 1.0, "batch": 16,
            "micro_batch": 4, "epochs": 1, "pipeline_depth": 2, "seed": 5, "dataset": TINY,
            "balance": "auto", "collective": "ring", "peers": peers, "ps": None, "port": 47400,
            "fixed_point_exp": 16, "device": {"type": "u280", "time_scale": 20.0}, "snapshot_every": 3,
            "straggler": None, "start_at": None, "connect_timeout_s": 5, "timeout_s": 20, "trace": None,
            # hw_op_s 1 ms: the in-process allreduce reads as ~1x, TDF stays small
            "calibration": ({"hw_op_s": 1e-3, "rounds": 2, "batches": 2, "run_wall_s": 1e6}
                            if calibrated else None),
            "network_dilation": {"control": [str(control)], "headroom": 1.0, "hw_op_s": 1e-3,
                                 "hardware": dilation_hardware(load_profile("tofino1-100g"))},
            "out": str(tmp_path / f"w{rank + 1}.jsonl")}


def _run(tmp_path, world, calibrated):
    control = tmp_path / "dilation.json"
    group = LocalAllreduceGroup(world, timeout_s=30)
    barrier = threading.Barrier(world, timeout=30)
    stop, seen, errors = threading.Event(), [], []
    sw = threading.Thread(target=slow_switch, args=(control, stop, seen))
    sw.start()

    def one(rank):
        try:
            cfg = prog.P4sgdConfig.from_json(_cfg(tmp_path, rank, world, control, calibrated))
            w = JsonlWriter(cfg.out)
            ep = group.endpoint(rank)
            comm = prog.Comm(ep, barrier=barrier.wait, close=lambda: None, latency=lambda h, s: None,
                             blocking=False)
            try:
                assert prog.Worker(cfg, w).run(comm) == 0
            finally:
                w.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    try:
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
    finally:
        stop.set()
        sw.join()
    assert not errors, errors
    assert seen, "no rank asked the switch for the dilated network"
    return [res.read_jsonl(tmp_path / f"w{r + 1}.jsonl") for r in range(world)]


@pytest.mark.parametrize("calibrated", [True, False], ids=["time_scale_auto", "time_scale_fixed"])
def test_every_rank_starts_training_together_after_the_switch_acknowledged(tmp_path, calibrated):
    world = 3
    out = _run(tmp_path, world, calibrated)
    starts = [next(r["wall_start"] for r in recs if r["type"] == "start") for recs in out]
    spread = max(starts) - min(starts)
    # Before the fix rank 0 started >= ACK_DELAY_S after the others.
    assert spread < ACK_DELAY_S / 3, f"training clocks started {spread * 1e3:.0f} ms apart: {starts}"
    train = [next(r["train_s"] for r in recs if r["type"] == "summary") for recs in out]
    assert max(train) - min(train) < ACK_DELAY_S / 3, train


def test_the_start_op_is_in_the_schedule_the_parameter_server_serves(tmp_path):
    """The PS serves exactly the workers' allreduces: the start op is listed after
    calibration's ops, before training's, and only where the network is dilated."""
    control = tmp_path / "dilation.json"
    cal = prog.P4sgdConfig.from_json(_cfg(tmp_path, 0, 2, control, calibrated=True))
    with_start = prog.allreduce_schedule(cal, n_samples=32, n_features=40)
    plain = prog.allreduce_schedule(cal.__class__.from_json(
        dict(_cfg(tmp_path, 0, 2, control, calibrated=True), network_dilation=None)), 32, 40)
    assert len(with_start) == len(plain) + 1
    k = len(plain) - 8                      # 2 mini-batches of 16 = 8 micro-batches of 4 to train
    assert with_start[k] == (1, False) and with_start[:k] == plain[:k] and with_start[k + 1:] == plain[k:]
