"""P4SGD workers driving a U280 kernel through XRT (hosts/glm/u280_xrt.py): the
workload's `xrt` field and its up-front checks, the host config, the worker in
process (dry run against the modeled device), the real pyxrt code path against
a fake pyxrt module, and the per-worker call plans. No sockets, no hardware."""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hosts import p4sgd as prog
from hosts.common.config import ConfigError
from hosts.glm import u280_xrt
from hosts.glm.datasets import load_dataset
from hosts.glm.training import epoch_order
from hosts.glm.u280_xrt import U280XrtAdapter, XrtUnavailable
from testbed import results as res
from testbed.scenario import ScenarioError
from testbed.workloads.p4sgd import P4sgdRuntime
# A sibling test module's helpers (pytest puts tests/unit on sys.path: no __init__.py).
from test_p4sgd_workload import TINY, _cfg, _ctx, run_workers, scenario

pytestmark = pytest.mark.unit

# The kernel computes in float32 (forward, gradient, model), the modeled worker in
# float64: 2 epochs x 6 mini-batches of the tiny set move the model by ~1e-7 relative.
MODEL_TOL = 1e-5


@pytest.fixture
def xclbin(tmp_path) -> Path:
    p = tmp_path / "p4sgd.xclbin"
    p.write_bytes(u280_xrt.XCLBIN_MAGIC + b"\0" * 64)   # the AXLF magic, then anything
    return p


@pytest.fixture
def no_pyxrt(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyxrt", None)   # `import pyxrt` raises ImportError
    monkeypatch.setattr(u280_xrt, "pyxrt_available", lambda: False)


# ----------------------------------------------------------------- the workload field
def test_xrt_field_checks_xclbin_and_pyxrt_before_anything_starts(tmp_path, xclbin, no_pyxrt):
    wl = scenario(f"device: u280, xrt: {{xclbin: {xclbin}, dry_run: true}}").workload
    assert wl.xrt.dry_run and wl.calibrated and wl.dilation == 500.0   # modeled time, as without xrt
    assert wl.device_label() == "u280 (dry run: modeled time)"
    assert scenario("device: u280, xrt: {dry_run: true}").workload.xrt.xclbin is None

    with pytest.raises(ScenarioError, match=r"workload\.xrt\.xclbin.*no such file"):
        scenario(f"device: u280, xrt: {{xclbin: {tmp_path / 'missing.xclbin'}, dry_run: true}}")
    bad = tmp_path / "bad.xclbin"
    bad.write_bytes(b"not an xclbin")
    with pytest.raises(ScenarioError, match="is not an xclbin"):
        scenario(f"device: u280, xrt: {{xclbin: {bad}, dry_run: true}}")
    with pytest.raises(ScenarioError, match="pyxrt.*not importable"):
        scenario(f"device: u280, xrt: {{xclbin: {xclbin}}}")
    with pytest.raises(ScenarioError, match="xclbin: missing"):
        scenario("device: u280, xrt: {dry_run: false}")
    with pytest.raises(ScenarioError, match="needs device u280"):
        scenario(f"device: gpu, xrt: {{xclbin: {xclbin}, dry_run: true}}")
    with pytest.raises(ScenarioError, match="data_parallel cannot use it"):
        scenario(f"device: u280, mode: data_parallel, xrt: {{xclbin: {xclbin}, dry_run: true}}")
    with pytest.raises(ScenarioError, match="dense samples"):
        scenario(f"device: u280, dataset: {{source: synthetic, kind: sparse}}, "
                 f"xrt: {{xclbin: {xclbin}, dry_run: true}}")


def test_real_xrt_is_measured_not_dilated(xclbin, monkeypatch):
    monkeypatch.setattr(u280_xrt, "pyxrt_available", lambda: True)
    wl = scenario(f"device: u280, xrt: {{xclbin: {xclbin}}}").workload
    assert wl.measured and not wl.calibrated and wl.dilation == 1.0
    assert wl.device_label() == "u280 (XRT: measured kernel time)"
    with pytest.raises(ScenarioError, match="is measured"):
        scenario(f"device: u280, time_scale: 50, xrt: {{xclbin: {xclbin}}}")


def test_programs_pass_xrt_to_workers_and_write_call_plans(tmp_path, xclbin):
    scn = scenario(f"device: u280, time_scale: 100, pipeline_depth: 2, collective: ring, "
                   f"xrt: {{xclbin: {xclbin}, dry_run: true}}", workers=2)
    progs = P4sgdRuntime().programs(_ctx(scn, tmp_path))
    for p in progs:
        cfg = prog.P4sgdConfig.from_json(p.argv[-1])
        assert cfg.xrt == {"xclbin": str(xclbin), "device_index": 0, "kernel_name": "p4sgd_glm",
                           "dry_run": True}
    plan = (tmp_path / "w1.xrt_plan.txt").read_text()
    assert "features 0..20 of 40" in plan and "dry run" in plan
    assert "load_xclbin" in plan and str(xclbin) in plan and "bytes=7680" in plan  # 96 x 20 float32
    # One mini-batch of 16 at micro-batch 4: 4 forwards, 4 backwards, 1 update.
    modes = [ln.split("mode=")[1].split(",")[0] for ln in plan.splitlines()
             if re.match(r"\s*\d+ run ", ln)]
    assert modes == ["0", "0", "1", "0", "1", "0", "1", "1", "2"]    # depth 2 pipelining


# ----------------------------------------------------------------- host config
def test_host_config_checks_the_xrt_block(tmp_path, xclbin):
    dev = {"type": "u280", "time_scale": 10.0}
    ok = prog.P4sgdConfig.from_json(_cfg(tmp_path, device=dev, xrt={"xclbin": str(xclbin), "dry_run": True}))
    assert ok.xrt["kernel_name"] == "p4sgd_glm" and ok.xrt["device_index"] == 0
    assert prog.P4sgdConfig.from_json(_cfg(tmp_path)).xrt is None          # key optional
    with pytest.raises(ConfigError) as e:
        prog.P4sgdConfig.from_json(_cfg(tmp_path, device={"type": "cpu"}, mode="data_parallel",
                                        xrt={"xclbin": str(tmp_path / "nope"), "dry_run": "yes",
                                             "device_index": -1}))
    text = str(e.value)
    for part in ("xrt.xclbin: no such file", "xrt.dry_run: must be true or false",
                 "xrt.device_index: must be an integer >= 0", "needs device type u280",
                 "model-parallel"):
        assert part in text


def test_worker_without_pyxrt_is_a_config_error_not_a_dry_run(tmp_path, xclbin, no_pyxrt):
    cfg = prog.P4sgdConfig.from_json(_cfg(tmp_path, device={"type": "u280", "time_scale": 10.0},
                                          xrt={"xclbin": str(xclbin), "dry_run": False}))
    with pytest.raises(XrtUnavailable, match="pyxrt"):
        prog.Worker(cfg, res_writer(tmp_path))
    with pytest.raises(XrtUnavailable):
        U280XrtAdapter(str(xclbin))
    assert prog.main(["--config", str(_write(tmp_path, cfg_dict(tmp_path, xclbin, False)))]) == prog.EXIT_CONFIG


def res_writer(tmp_path):
    from hosts.common.results import JsonlWriter
    return JsonlWriter(tmp_path / "x.jsonl")


def cfg_dict(tmp_path, xclbin, dry_run: bool) -> dict:
    return _cfg(tmp_path, device={"type": "u280", "time_scale": 10.0},
                xrt={"xclbin": str(xclbin), "dry_run": dry_run})


def _write(tmp_path, cfg: dict) -> Path:
    import json
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(cfg))
    return p


# ----------------------------------------------------------------- the worker, in process
def test_dry_run_worker_trains_the_same_model_as_the_modeled_device(tmp_path, xclbin):
    dev = {"type": "u280", "time_scale": 20.0}
    for d in ("modeled", "xrt"):
        (tmp_path / d).mkdir()
    run_workers(tmp_path / "modeled", 3, device=dev)
    out = run_workers(tmp_path / "xrt", 3, device=dev, xrt={"xclbin": str(xclbin), "dry_run": True})
    for r in (1, 2, 3):
        ref = np.load(tmp_path / "modeled" / f"w{r}.model.npy")
        got = np.load(tmp_path / "xrt" / f"w{r}.model.npy")
        assert got.shape == ref.shape and np.abs(ref).max() > 0.05     # it trained
        np.testing.assert_allclose(got, ref, rtol=0, atol=MODEL_TOL * np.abs(ref).max())
        snaps, ref_snaps = (np.load(tmp_path / d / f"w{r}.snapshots.npy") for d in ("xrt", "modeled"))
        np.testing.assert_allclose(snaps, ref_snaps, rtol=0, atol=MODEL_TOL * np.abs(ref).max())
    start = next(r for r in out[0] if r["type"] == "start")
    assert start["device"]["time"] == "dry run: modeled time" and start["device"]["device"] == "u280"
    assert start["dilation"] == 20.0
    xrt = next(r for r in out[0] if r["type"] == "xrt")
    calls = res.read_jsonl(Path(xrt["calls_path"]))
    assert calls[0]["type"] == "xrt_header" and calls[0]["dry_run"] is True
    runs = [c for c in calls[1:] if c["op"] == "run"]
    # 2 epochs x 6 mini-batches x (4 forward + 4 backward + 1 update)
    assert [r["mode"] for r in runs].count(2) == 12 and len(runs) == 12 * 9
    assert xrt["calls"] == len(calls) - 1
    validity = next(r for r in out[0] if r["type"] == "validity")
    assert validity["steps"] == 12 * 8                                # forward + backward charged


# ----------------------------------------------------------------- the real code path, fake pyxrt
class _FakeBo:
    normal = 0

    def __init__(self, dev, nbytes, flags, group):
        self.buf = np.zeros(nbytes, np.uint8)
        self.group = group

    def write(self, raw, offset):
        self.buf[offset:offset + raw.size] = raw

    def sync(self, direction, nbytes, offset):
        pass

    def map(self):
        return memoryview(self.buf)


def fake_pyxrt(log: list):
    """Just enough of pyxrt for the adapter; the kernel runs the documented semantics
    on the buffers it is given (the dry run's numpy emulation, on the fake bos)."""
    m = types.ModuleType("pyxrt")

    class device:
        def __init__(self, index):
            log.append(("device", index))

        def load_xclbin(self, xb):
            log.append(("load_xclbin", xb.path))
            return "uuid"

    class xclbin:
        def __init__(self, path):
            self.path = path

    class kernel:
        shared = "shared"

        def __init__(self, dev, uuid, name, access):
            log.append(("kernel", name, access))

        def group_id(self, arg):
            return 100 + arg

        def __call__(self, *args):
            bos, (n_rows, f_slice, mode, loss_kind, lr, inv_batch, l2) = args[:6], args[6:]
            assert all(isinstance(a, (np.uint32, np.float32)) for a in args[6:])
            emu = U280XrtAdapter(None, dry_run=True)
            emu._mem = {n: bo.buf for n, bo in zip(u280_xrt.ARG_INDEX, bos)}
            emu._model = _fake_model[0]
            emu._emulate(int(n_rows), int(f_slice), int(mode), int(loss_kind), float(lr),
                         float(inv_batch), float(l2))
            log.append(("run", int(mode)))
            return SimpleNamespace(wait=lambda: None)

    m.device, m.xclbin, m.kernel, m.bo = device, xclbin, kernel, _FakeBo
    m.xclBOSyncDirection = SimpleNamespace(XCL_BO_SYNC_BO_TO_DEVICE=0, XCL_BO_SYNC_BO_FROM_DEVICE=1)
    return m


_fake_model: list = [None]


def test_real_path_through_pyxrt_matches_the_dry_run(monkeypatch, xclbin):
    from hosts.glm.models import get_model

    log: list = []
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt(log))
    _fake_model[0] = get_model("logreg")
    ds = load_dataset(dict(TINY, model="logreg"))
    X = np.asarray(ds.X)[:, :12]
    real, dry = U280XrtAdapter(str(xclbin), 1), U280XrtAdapter(str(xclbin), 1, dry_run=True)
    assert not real.dry_run
    for ad in (real, dry):
        ad.load(X, ds.y, None, max_micro_batch=4, model="logreg")
        for start in (0, 4, 8, 12):
            c = epoch_order(96, 0, 0)[start:start + 4]
            ad.backward(c, ad.forward(c) * 3)      # as if three workers had the same q
        ad.update(lr=0.5, batch_size=16, l2=0.01)
    np.testing.assert_array_equal(real.read_model(), dry.read_model())
    assert log[:3] == [("device", 1), ("load_xclbin", str(xclbin)), ("kernel", "p4sgd_glm", "shared")]
    assert [e[1] for e in log if e[0] == "run"] == [0, 1] * 4 + [2]
    waits = [c for c in real.calls if c["op"] == "wait"]
    assert len(waits) == 9 and all(c["kernel_s"] >= 0 for c in waits)
    assert real.header()["kernel_s_total"] == pytest.approx(sum(c["kernel_s"] for c in waits))
    assert [c["op"] for c in real.calls] == [c["op"] for c in dry.calls]   # same recorded sequence
    dev = u280_xrt.XrtKernelDevice(real)
    _, k, _ = dev.run(lambda: real.forward(np.arange(4)), 4, 12, phase="forward")
    assert k == pytest.approx(real.calls[-3]["kernel_s"]) and dev.validity()["steps"] == 1
