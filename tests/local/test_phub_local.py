"""PHub on loopback: the server's weights equal the plain PS's bit for bit; a dead
worker is reported and nothing is left behind; two jobs share one server."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from phub_harness import launch, records, sizes_of, wait_all  # noqa: E402

pytestmark = pytest.mark.timeout(300)

SMALL = {"kind": "profile", "name": "resnet50", "size_scale": 0.001}


def _weights(run) -> dict[str, np.ndarray]:
    return {n: np.load(str(p).replace(".jsonl", ".weights.npy")) for n, p in run["out"].items() if n != "ps"}


@pytest.mark.parametrize("optimizer", [{"kind": "sgd", "lr": 0.1, "momentum": 0.0},
                                       {"kind": "nesterov", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}])
@pytest.mark.parametrize("model", [{"kind": "cnn"}, SMALL], ids=["cnn", "resnet50-profile"])
def test_phub_weights_equal_plain_ps_bit_for_bit(tmp_path, optimizer, model):
    got = {}
    for alg in ("phub", "wide_ps"):
        (tmp_path / alg).mkdir()
        # 1000-byte chunks: no layer of either model divides into whole chunks of 250 values
        run = launch(tmp_path / alg, algorithm=alg, world=3, model=model, optimizer=optimizer,
                     iterations=3, chunk_bytes=1000, cores=2)
        codes = wait_all(run)
        assert codes == {n: 0 for n in codes}, [(p.name, p.read_text()[-800:]) for p in (tmp_path / alg).glob("*.log")]
        got[alg] = _weights(run)
    ref = got["wide_ps"]["j1w0"]
    assert all(w.tobytes() == ref.tobytes() for w in got["wide_ps"].values())
    assert all(w.tobytes() == ref.tobytes() for w in got["phub"].values())
    start = np.concatenate([p.reshape(-1) for p in _initial(model)])
    assert not np.array_equal(start, ref)                # training changed the weights
    # the in-process replay every workload point compares with (hosts/phub/reference.py)
    from hosts.phub.optimizer import OptimizerSpec
    from hosts.phub.reference import cnn_plain_ps_weights, plain_ps_weights
    spec = OptimizerSpec(**optimizer)
    replay = (np.concatenate(plain_ps_weights(sizes_of(model), 7, 3, 3, spec)) if model["kind"] == "profile"
              else cnn_plain_ps_weights(7, 3, 3, spec, batch_size=16))
    assert replay.tobytes() == ref.tobytes()


def _initial(model):
    if model["kind"] == "cnn":
        import torch
        from hosts.dnn.lenet import LeNet
        torch.manual_seed(7)
        return [p.detach().numpy() for p in LeNet().parameters()]
    from hosts.phub.profiles import get_profile
    rng = np.random.default_rng(7)
    return [(rng.standard_normal(max(1, round(x.params * 0.001))) * 0.01).astype(np.float32)
            for x in get_profile("resnet50").layers]


def test_server_reports_stages_and_numpy_reference(tmp_path):
    run = launch(tmp_path, algorithm="phub", world=2, model=SMALL, optimizer={"kind": "sgd", "lr": 0.1},
                 iterations=2, chunk_bytes=4096, cores=2, trace=True)
    assert set(wait_all(run).values()) == {0}
    cores = [r for r in records(run["out"]["ps"]) if r["type"] == "core"]
    assert [c["core"] for c in cores] == [0, 1]
    total = sum(c["agg_bytes"] for c in cores)
    # every worker's gradient of every iteration was summed exactly once
    from phub_harness import sizes_of
    assert total == 2 * 2 * 4 * sum(sizes_of(SMALL))
    assert all(c["numpy_gbps"] > 0 and c["agg_gbps"] > 0 for c in cores)
    from hosts.common.trace import read_trace
    header, nodes = read_trace(tmp_path / "ps.trace.jsonl")
    assert header["role"] == "server" and header["rank"] == 2 and header["world"] == 3
    recvs = [n for n in nodes if n.get("op") == "recv"]
    _, wnodes = read_trace(tmp_path / "j1w0.trace.jsonl")
    sends = [n for n in wnodes if n.get("op") == "send"]
    # the worker's pushes are the server's receives from it, group by group, seq by seq
    assert sorted((n["group"], n["seq"]) for n in sends) == sorted(
        (n["group"], n["seq"]) for n in recvs if n["peer"] == "j1w0")


def test_dead_worker_is_reported_and_nothing_is_left(tmp_path):
    run = launch(tmp_path, algorithm="phub", world=3, model=SMALL, optimizer={"kind": "sgd", "lr": 0.1},
                 iterations=4, chunk_bytes=2048, cores=2, exit_at={"iteration": 1, "layers": 5})
    codes = wait_all(run, timeout=120)
    assert codes["j1w2"] == 1                                   # the injected death
    assert codes["ps"] == 3 and codes["j1w0"] == 3 and codes["j1w1"] == 3
    err = next(r for r in records(run["out"]["ps"]) if r["type"] == "summary")["error"]
    # The dead worker is named; its socket shows as closed (FIN) or reset (RST: it died
    # with unread data in its receive buffer), depending on timing.
    assert "worker j1w2 (job 1, rank 2)" in err
    assert "closed the connection" in err or "Connection reset by peer" in err, err
    # What the core was doing at the death depends on timing: chunks in flight (waiting
    # for the dead rank, or for a live one that had not pushed them yet), or none.
    assert "chunk(s) in flight" in err or "no chunk in flight" in err, err
    w0 = next(r for r in records(run["out"]["j1w0"]) if r["type"] == "summary")
    assert not w0["ok"] and "PHub server ps core" in w0["error"]
    assert all(p.poll() is not None for p in run["procs"].values())
    import subprocess
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == []                                            # no core process survived


def test_two_jobs_share_one_server(tmp_path):
    run = launch(tmp_path, algorithm="phub", world=2, model=SMALL, optimizer={"kind": "sgd", "lr": 0.1},
                 iterations=2, chunk_bytes=4096, cores=2, jobs=2)
    codes = wait_all(run)
    assert set(codes.values()) == {0}
    digests = {n: next(r for r in records(p) if r["type"] == "summary")["weights_sha1"]
               for n, p in run["out"].items() if n != "ps"}
    assert len(set(digests.values())) == 1      # same seed and data: both jobs end at the same weights
    cores = [r for r in records(run["out"]["ps"]) if r["type"] == "core"]
    assert sum(c["chunks_done"] for c in cores) == 2 * 2 * len(__import__("hosts.phub.chunking", fromlist=["x"])
                                                               .ChunkPlan(_sizes(), 4096).chunks)


def _sizes():
    from phub_harness import sizes_of
    return sizes_of(SMALL)


def test_baseline_trace_chains_its_blocking_allreduces(tmp_path):
    """The baseline worker blocks on each layer's allreduce before it starts the next, and
    its trace says so: every allreduce of an iteration after the first depends on the one
    before (the projector played them all at once before, and the ring read 1.3-1.7x
    its projection); the next iteration's first compute waits for all of them."""
    from hosts.common.trace import read_trace
    run = launch(tmp_path, algorithm="wide_ps", world=2, model=SMALL, optimizer={"kind": "sgd", "lr": 0.1},
                 iterations=2, trace=True)
    assert set(wait_all(run).values()) == {0}
    _, nodes = read_trace(tmp_path / "j1w0.trace.jsonl")
    ops = [n for n in nodes if n["kind"] == "comm" and n["algo"] == "ps"]
    by_it: dict[int, list[dict]] = {}
    for n in ops:
        by_it.setdefault(n["iteration"], []).append(n)
    assert len(by_it) == 2 and all(len(v) == len(sizes_of(SMALL)) for v in by_it.values())
    for its in by_it.values():
        assert not any(o["id"] in its[0]["deps"] for o in ops)           # the first waits for compute only
        assert all(prev["id"] in n["deps"] for prev, n in zip(its, its[1:]))
    first_compute_of_2nd = next(n for n in nodes if n["kind"] == "compute" and n["id"] > by_it[0][-1]["id"])
    assert {o["id"] for o in by_it[0]} <= set(first_compute_of_2nd["deps"])
