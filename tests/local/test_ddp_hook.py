"""The DDP communication hook on loopback: an unmodified 2-process DDP script
(tests/local/ddp_user_script.py) run by hosts.dnn.run_script with its gradient
buckets going through the ring, a parameter server or the in-switch path (soft switch process),
against the same script on plain DDP over gloo.

Ring with 2 workers sums a + b in float32 (commutative) and DDP divides by 2
(exact): the weights must be bit-identical to gloo's. The switch carries fixed
point with an agreed scale: within a small tolerance of gloo. Two ring runs
must give the same bits (run-to-run determinism)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from testbed.switch.soft.process import SoftSwitchProcess
from testbed.switch.soft.udp_io import free_loopback_ports, loopback_ip, loopback_switch_config, port_endpoint

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "local" / "ddp_user_script.py"
N, STEPS = 2, 6


def free_port_base() -> int:
    from testbed.loopback_ports import free_port_base as free_below_ephemeral  # noqa: PLC0415
    return free_below_ephemeral(61, [loopback_ip(r) for r in range(N)] + ["127.0.0.1", "127.0.1.200"])


def wait_all(procs, logs, expect_rc: int = 0) -> None:
    try:
        for p, log in zip(procs, logs):
            rc = p.wait(timeout=180)
            assert rc == expect_rc, f"exit {rc}:\n{Path(log).read_text()[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


PS_IP = "127.0.1.200"


def run_testbed(tmp: Path, collective: str, ina_base: tuple[int, int] | None = None, *,
                worker: dict | None = None, expect_rc: int = 0) -> dict[str, torch.Tensor] | None:
    """worker: keys of the workers' configs to override; expect_rc: every host's exit code
    (not 0: no weights to compare, None returned)."""
    tmp.mkdir(parents=True, exist_ok=True)
    base = free_port_base()
    peers = [{"name": f"w{r + 1}", "ip": loopback_ip(r)} for r in range(N)]
    ps = {"name": "ps", "ip": PS_IP} if collective == "ps" else None
    procs, logs = [], []
    hosts = (["ps"] if ps else []) + list(range(N))
    for r in hosts:
        if r == "ps":
            cfg = {"host": "ps", "role": "ps", "rank": -1, "world": N, "collective": "ps", "peers": peers,
                   "ps": ps, "port": base, "master_addr": "127.0.0.1", "master_port": base + 60,
                   "gloo_ifname": None, "script": str(SCRIPT), "args": [], "batch_size": 16, "seed": 1,
                   "device": {"type": "cpu"}, "straggler": None, "start_at": None,
                   "connect_timeout_s": 60, "timeout_s": 60, "out": str(tmp / "ps.jsonl"),
                   "trace": None, "ina": None}
            (tmp / "ps.json").write_text(json.dumps(cfg))
            logs.append(tmp / "ps.log")
            with open(logs[-1], "w") as err:
                procs.append(subprocess.Popen([sys.executable, "-m", "hosts.dnn.run_script", "--config",
                                               str(tmp / "ps.json")], cwd=ROOT, stderr=err,
                                              stdout=subprocess.DEVNULL))
            continue
        ina = None
        if collective == "switch":
            sw_base, wport = ina_base
            host, port = port_endpoint(f"127.0.0.1:{sw_base}", r + 1)
            ina = {"switch_ip": host, "switch_port": port, "worker_port": wport, "job_id": 1,
                   "window": 32, "retx_timeout_s": 0.05}
        cfg = {"host": f"w{r + 1}", "role": "worker", "rank": r, "world": N, "collective": collective,
               "peers": peers, "ps": ps, "port": base, "master_addr": "127.0.0.1",
               "master_port": base + 60, "gloo_ifname": "lo", "script": str(SCRIPT),
               "args": [str(tmp / f"w{r + 1}.pt"), str(STEPS)], "batch_size": 16, "seed": 1,
               "device": {"type": "cpu"}, "straggler": None, "start_at": None,
               "connect_timeout_s": 60, "timeout_s": 60, "out": str(tmp / f"w{r + 1}.jsonl"),
               "trace": str(tmp / f"w{r + 1}.trace.jsonl"), "ina": ina, **(worker or {})}
        (tmp / f"w{r + 1}.json").write_text(json.dumps(cfg))
        logs.append(tmp / f"w{r + 1}.log")
        with open(logs[-1], "w") as err:
            procs.append(subprocess.Popen([sys.executable, "-m", "hosts.dnn.run_script", "--config",
                                           str(tmp / f"w{r + 1}.json")], cwd=ROOT, stderr=err,
                                          stdout=subprocess.DEVNULL))
    wait_all(procs, logs, expect_rc)
    if expect_rc != 0:
        return None
    w = [torch.load(tmp / f"w{r + 1}.pt") for r in range(N)]
    for k in w[0]:                        # DDP keeps the replicas identical
        assert torch.equal(w[0][k], w[1][k]), k
    return w[0]


def run_plain_gloo(tmp: Path) -> dict[str, torch.Tensor]:
    tmp.mkdir(parents=True, exist_ok=True)
    base = free_port_base()
    procs, logs = [], []
    for r in range(N):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(N), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(base + 60), GLOO_SOCKET_IFNAME="lo")
        env.pop("TESTBED_TORCH_CONFIG", None)
        logs.append(tmp / f"g{r}.log")
        with open(logs[-1], "w") as err:
            procs.append(subprocess.Popen([sys.executable, str(SCRIPT), str(tmp / f"g{r}.pt"), str(STEPS)],
                                          cwd=ROOT, env=env, stderr=err, stdout=subprocess.DEVNULL))
    wait_all(procs, logs)
    return torch.load(tmp / "g0.pt")


@pytest.fixture(scope="module")
def gloo_weights(tmp_path_factory):
    return run_plain_gloo(tmp_path_factory.mktemp("gloo"))


def test_ddp_over_ring_equals_gloo_bit_for_bit_and_run_to_run(tmp_path, gloo_weights):
    a = run_testbed(tmp_path / "a", "ring")
    b = run_testbed(tmp_path / "b", "ring")
    for k in gloo_weights:
        assert a[k].numpy().tobytes() == b[k].numpy().tobytes(), f"{k}: ring runs differ"
        assert a[k].numpy().tobytes() == gloo_weights[k].numpy().tobytes(), f"{k}: ring != gloo"
    # The hook really carried the buckets: several allreduces per step, traced.
    recs = [json.loads(x) for x in (tmp_path / "a" / "w1.jsonl").read_text().splitlines()]
    summary = recs[-1]
    assert summary["type"] == "summary" and summary["ok"], summary
    assert summary["ops"] >= STEPS, summary             # at least one bucket per step
    nodes = [json.loads(x) for x in (tmp_path / "a" / "w1.trace.jsonl").read_text().splitlines()[1:]]
    comm = [n for n in nodes if n["kind"] == "comm"]
    assert len(comm) == summary["ops"] and all(n["algo"] == "ring" for n in comm)


def test_ddp_over_a_parameter_server_equals_gloo(tmp_path, gloo_weights):
    w = run_testbed(tmp_path, "ps")
    for k in gloo_weights:
        assert w[k].numpy().tobytes() == gloo_weights[k].numpy().tobytes(), f"{k}: ps != gloo"
    ps = [json.loads(x) for x in (tmp_path / "ps.jsonl").read_text().splitlines()][-1]
    assert ps["ok"] and ps["allreduces_served"] >= STEPS, ps      # ended by the end-of-stream


def test_ddp_over_switch_close_to_gloo(tmp_path, gloo_weights):
    sw_base, wport = free_loopback_ports(N)
    sw = SoftSwitchProcess(loopback_switch_config(N, sw_base, wport, slot_count=32), tmp_path).start()
    try:
        w = run_testbed(tmp_path / "s", "switch", (sw_base, wport))
    finally:
        sw.stop()
    for k in gloo_weights:
        # fixed point per bucket with the agreed scale: relative error ~2^-29 per step
        assert torch.allclose(w[k], gloo_weights[k], rtol=1e-5, atol=1e-6), \
            (k, float((w[k] - gloo_weights[k]).abs().max()))
    changed = any(not torch.equal(w[k], gloo_weights[k]) for k in w)
    print("switch weights bit-identical to gloo:", not changed)


def test_a_calibration_that_would_crawl_is_refused_on_every_worker(tmp_path):
    """time_scale auto on the unmodified script calibrates by a probe of its buckets, inside
    DDP's hook on the first backward; a TDF at which one iteration would outrun the wall
    time the point allows it (here 1 ns: any) is refused there on every worker, which
    exits EXIT_REFUSED with the refusal in its summary (what the point's record shows)."""
    from hosts.common.program import EXIT_REFUSED
    run_testbed(tmp_path, "ring", worker={"device": {"type": "v100", "time_scale": 500.0},
                                          "calibration": {"rounds": 2, "iteration_wall_s": 1e-9},
                                          "hw_table": {"values": [0, 1e7], "hw_s": [1e-5, 1e-5]}},
                expect_rc=EXIT_REFUSED)
    for h in ("w1", "w2"):
        summary = [json.loads(x) for x in (tmp_path / f"{h}.jsonl").read_text().splitlines()][-1]
        assert summary["type"] == "summary" and not summary["ok"], summary
        assert summary["error"].startswith("CalibrationRefused: calibration round 0 chose TDF"), summary
        assert "beyond the 1e-09 s the point's deadline allows a step" in summary["error"], summary
        assert "CalibrationRefused: calibration round 0" in (tmp_path / f"{h}.log").read_text()
