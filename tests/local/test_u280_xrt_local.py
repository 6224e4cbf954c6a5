"""P4SGD with the U280 kernel through XRT, dry run, end to end on loopback:
`testbed run --net local` trains the same model with `workload.xrt.dry_run: true`
as with the modeled device, and keeps each worker's recorded XRT calls; `testbed
run --dry-run` prints each worker's call plan; a real (not dry) run without pyxrt
stops before anything starts, naming the cause."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hosts.glm import u280_xrt
from testbed.results import load_run, read_jsonl

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
# float32 kernel vs the float64 modeled worker, over 2 epochs of a tiny dense set.
MODEL_TOL = 1e-5

SCENARIO = """\
name: u280-xrt
topology: {{workers: 2}}
workload:
  kind: p4sgd
  collective: ring
  device: u280
  time_scale: 20
  dataset: {{source: synthetic, kind: dense, samples: 96, features: 40, seed: 3}}
  batch: 16
  micro_batch: 4
  epochs: 2
  pipeline_depth: 2
  snapshot_every: 4
  lr: 2.0
  l2: 0.01
{xrt}
"""


def _scenario(tmp_path: Path, name: str, xrt: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(SCENARIO.format(xrt=xrt))
    return p


def _testbed(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _run(scn: Path, out: Path) -> Path:
    p = _testbed("run", str(scn), "--net", "local", "--out", str(out), cwd=ROOT)
    assert p.returncode == 0, f"testbed run failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    (manifest,) = sorted(out.glob("*/*/manifest.json"))
    return manifest.parent


@pytest.fixture
def xclbin(tmp_path) -> Path:
    p = tmp_path / "p4sgd.xclbin"
    p.write_bytes(u280_xrt.XCLBIN_MAGIC + b"\0" * 64)
    return p


def test_dry_run_xrt_trains_the_modeled_devices_model_and_keeps_its_calls(tmp_path, xclbin):
    modeled = _run(_scenario(tmp_path, "modeled", ""), tmp_path / "a")
    dry = _run(_scenario(tmp_path, "xrt", f"  xrt: {{xclbin: {xclbin}, dry_run: true}}"), tmp_path / "b")
    runs = {k: load_run(d) for k, d in (("modeled", modeled), ("xrt", dry))}
    for r in runs.values():
        assert all(p["status"] == "ok" for p in r.points), [p.get("error") for p in r.points]
    (label,) = [p["label"] for p in runs["xrt"].points]
    ref = np.load(modeled / "points" / label / "model.npy")
    got = np.load(dry / "points" / label / "model.npy")
    assert np.abs(ref).max() > 0.05                                   # it trained
    np.testing.assert_allclose(got, ref, rtol=0, atol=MODEL_TOL * np.abs(ref).max())
    print(f"max |xrt dry run - modeled| = {np.abs(got - ref).max():.3g} (max |x| {np.abs(ref).max():.3g})")

    (s_mod,), (s_xrt,) = (list(r.metrics_of("p4sgd_summary")) for r in (runs["modeled"], runs["xrt"]))
    assert s_mod["device"] == "u280" and s_xrt["device"] == "u280 (dry run: modeled time)"
    assert s_xrt["dilation"] == s_mod["dilation"] == 20.0 and s_xrt["all_correct"]
    xrt_recs = list(runs["xrt"].metrics_of("xrt"))
    assert sorted(r["host"] for r in xrt_recs) == ["w1", "w2"]
    assert not list(runs["modeled"].metrics_of("xrt"))
    point_dir = dry / "points" / label
    for h in ("w1", "w2"):
        calls = read_jsonl(point_dir / f"{h}.xrt_calls.jsonl")
        assert calls[0]["type"] == "xrt_header" and calls[0]["xclbin"] == str(xclbin)
        runs_ = [c for c in calls if c.get("op") == "run"]
        assert len(runs_) == 2 * 6 * 9                     # 2 epochs x 6 mini-batches x (4 + 4 + 1)
        assert "load_xclbin" in (point_dir / f"{h}.xrt_plan.txt").read_text()


def test_testbed_dry_run_prints_each_workers_xrt_plan(tmp_path, xclbin):
    scn = _scenario(tmp_path, "xrt", f"  xrt: {{xclbin: {xclbin}, dry_run: true}}")
    p = _testbed("run", str(scn), "--net", "local", "--dry-run", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    (point,) = json.loads(p.stdout)["points"]
    plans = {k: v for k, v in point["configs"].items() if k.endswith(".xrt_plan.txt")}
    assert sorted(Path(k).name for k in plans) == ["w1.xrt_plan.txt", "w2.xrt_plan.txt"]
    for text in plans.values():
        assert "load_xclbin" in text and "p4sgd_glm" in text and " run " in text
    w1 = next(json.loads(v) for k, v in point["configs"].items() if k.endswith("w1.config.json"))
    assert w1["xrt"]["dry_run"] is True and w1["xrt"]["xclbin"] == str(xclbin)
    assert not (tmp_path / "results").exists()


@pytest.mark.skipif(u280_xrt.pyxrt_available(), reason="pyxrt is installed here")
def test_real_run_without_pyxrt_stops_before_anything_starts(tmp_path, xclbin):
    scn = _scenario(tmp_path, "real", f"  xrt: {{xclbin: {xclbin}}}")
    p = _testbed("run", str(scn), "--net", "local", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert p.returncode != 0
    assert "pyxrt" in p.stderr and "workload.xrt" in p.stderr
    assert not (tmp_path / "out").exists()
    bad = _scenario(tmp_path, "bad", f"  xrt: {{xclbin: {tmp_path / 'nope.xclbin'}, dry_run: true}}")
    p = _testbed("run", str(bad), "--net", "local", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert p.returncode != 0 and "workload.xrt.xclbin" in p.stderr and "no such file" in p.stderr
