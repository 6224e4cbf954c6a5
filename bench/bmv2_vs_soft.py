"""BMv2 against the soft switch, side by side: the quickstart's topology and
traffic (4 workers, one switch, 100 Mbit/s links), baseline case, algorithms
switch and ring, run once per backend. Reported per backend:
- allreduce latency p50/p99 and correctness per algorithm and size;
- aggregation input rate: contributions the switch took in per second during
  the largest in-switch allreduce (workers x chunks / p50), and the INA client's
  resends and window cuts (hosts/ina/cwnd.py);
- forwarding rate: frames per second the switch forwarded for the ring
  (host TCP through the switch as plain L2), from the point's switch pcaps:
  frames out of the switch / the span between the first and last of them.

Needs BMv2 and p4c (testbed/switch/bmv2_tools.py finds them: PATH or
$P4TOOLS_PREFIX); without them the result says so and nothing runs. BMv2
should be the performance build (--disable-logging-macros, -O3): its
simple_switch_grpc --version is recorded, with the machine's load. A
measurement, not a test.

    python -m bench bmv2_vs_soft [--out results/bench]
    BENCH_BMV2_SET="workload.ina.window=16" python -m bench bmv2_vs_soft   # extra --set for both
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "quickstart.yaml"
BACKENDS = ("soft", "bmv2")
# baseline case only (BMv2 does not impair links), in-switch vs host ring
SETS = ["workload.iterations=10", "workload.warmup=2", "workload.sizes=[64,16384]",
        "sweep.cases=[{name: baseline}]", "sweep.grid={workload.algorithm: [switch, ring]}"]
SWITCH_MAC = "02:00:00:00:00:fe"   # the switch's own MAC: results and answers it sends


def _run(backend: str, out: Path, extra: list[str]) -> Path:
    argv = [sys.executable, "-m", "testbed", "run", str(SCENARIO), "--quick", "--no-plot", "--out", str(out),
            "--set", f"switch.backend={backend}"]
    for s in SETS + extra:
        argv += ["--set", s]
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    (out / f"{backend}-console.txt").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"{backend}: testbed run exited {res.returncode}; see {out}/{backend}-console.txt")
    runs = sorted(p for p in out.glob("*/*/") if (p / "summary.csv").exists())
    if not runs:
        raise RuntimeError(f"{backend}: no summary.csv under {out}")
    print(f"{backend}: {time.monotonic() - t0:.0f} s, {runs[-1]}", file=sys.stderr)
    return runs[-1]


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "summary.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("case", "baseline") == "baseline"]
    for r in rows:          # emu_p50_ms since the summary says which times are emulated; p50_ms before
        r.setdefault("p50_ms", r.get("emu_p50_ms"))
    return rows


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _transport(run_dir: Path) -> dict:
    """The in-switch point's client counters summed over workers, and the switch's."""
    ms = [m for m in _metrics(run_dir) if m.get("algorithm") == "switch" or
          m.get("workload.algorithm") == "switch"]
    tr = [m["transport"] for m in ms if m.get("type") == "summary" and m.get("transport")]
    out = {k: sum(t.get(k, 0) for t in tr) for k in
           ("chunks_sent", "retransmissions", "window_cuts", "duplicates_ignored", "timeouts")}
    out["chunk_latency_p50_ms"] = round(1e3 * sorted(t["chunk_latency_p50_s"] for t in tr)[len(tr) // 2], 3) \
        if tr else None
    sw = [m["counters"] for m in ms if m.get("type") == "switch_counters"]
    if sw:
        out["switch_ina_packets"] = sum(v["packets"] for v in sw[0].get("Ingress.ina_packets", {}).values())
    return out


def _forwarded_fps(run_dir: Path, label: str) -> float | None:
    """Frames the switch sent on its ports during a point / their time span, from
    the point's pcaps: the soft switch writes s1-eth<i>_out.pcap (its output);
    BMv2's are the network's tcpdumps, s1-eth<i>.pcap with both directions (w<i>
    is 00:..:0<i>, so the frames with another source MAC are the switch's output)."""
    ts: list[float] = []
    pcaps = sorted((run_dir / "pcaps" / label).glob("s1-eth*_out.pcap"))
    both = not pcaps
    if both:
        pcaps = sorted((run_dir / "pcaps" / label).glob("s1-eth*.pcap"))
    for pcap in pcaps:
        filt = []
        if both:
            filt = [f"not ether src 00:00:00:00:00:{int(pcap.stem.rsplit('eth', 1)[1]):02x}"]
        res = subprocess.run(["tcpdump", "-tt", "-nn", "-r", str(pcap), *filt],
                             capture_output=True, text=True, timeout=600)
        ts += [float(line.split(" ", 1)[0]) for line in res.stdout.splitlines() if line]
    if len(ts) < 2:
        return None
    return round(len(ts) / (max(ts) - min(ts)))


def _input_pps(size: str, p50_ms: str, workers: int = 4) -> int:
    """Contributions into the switch per second at p50: workers x chunks / p50
    (a chunk carries wire.MAX_VALUES_PER_PACKET values; the MAX round not counted)."""
    from testbed import wire  # noqa: PLC0415
    chunks = -(-int(size) // wire.MAX_VALUES_PER_PACKET)
    return round(workers * chunks / (float(p50_ms) / 1e3))


def run(out_dir: str | Path, reuse: str | Path | None = None) -> dict:
    """reuse: an earlier bmv2_vs_soft-<stamp> work folder whose runs are analysed
    again instead of running (python -c "from bench import bmv2_vs_soft as b;
    b.run('results/bench', reuse='results/bench/bmv2_vs_soft-...')")."""
    from testbed.switch.bmv2_tools import bmv2_available, find_tools

    out_dir = Path(out_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ok, why = bmv2_available()
    if not ok:
        return {"name": "bmv2_vs_soft", "skipped": why}
    tools = find_tools()
    extra = [s for s in os.environ.get("BENCH_BMV2_SET", "").split() if s]
    load0, t0 = os.getloadavg(), time.monotonic()
    work = Path(reuse) if reuse else out_dir / f"bmv2_vs_soft-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    by_backend = {}
    for backend in BACKENDS:
        (work / backend).mkdir(exist_ok=True)
        if reuse:
            run_dir = sorted(p for p in (work / backend).glob("*/*/") if (p / "summary.csv").exists())[-1]
        else:
            run_dir = _run(backend, work / backend, extra)
        by_backend[backend] = {"run": str(run_dir), "rows": _rows(run_dir)}
    stats = {}
    for backend, v in by_backend.items():
        run_dir = Path(v["run"])
        labels = {r["algorithm"]: r["label"] for r in v["rows"]}
        manifest = json.loads((run_dir / "manifest.json").read_text())
        stats[backend] = {"loadavg_at_run_start": manifest.get("machine", {}).get("loadavg"),
                          "transport_switch_point": _transport(run_dir),
                          "ring_forwarded_frames_per_s": _forwarded_fps(run_dir, labels["ring"])
                          if "ring" in labels else None}
    side = []
    key = lambda r: (r["algorithm"], int(r["size"]))  # noqa: E731
    soft = {key(r): r for r in by_backend["soft"]["rows"]}
    for r in by_backend["bmv2"]["rows"]:
        s = soft.get(key(r))
        if s is None:
            continue
        side.append({"algorithm": r["algorithm"], "size": int(r["size"]),
                     "soft_p50_ms": float(s["p50_ms"]), "bmv2_p50_ms": float(r["p50_ms"]),
                     "bmv2_over_soft": round(float(r["p50_ms"]) / float(s["p50_ms"]), 2),
                     "soft_correct": s["all_correct"], "bmv2_correct": r["all_correct"],
                     **({"soft_input_pps": _input_pps(r["size"], s["p50_ms"]),
                         "bmv2_input_pps": _input_pps(r["size"], r["p50_ms"])}
                        if r["algorithm"] == "switch" else {})})
    result = {"name": "bmv2_vs_soft", "when": stamp, "scenario": str(SCENARIO.relative_to(ROOT)),
              "sets": SETS + extra, "bmv2": tools.describe(), "side_by_side": side,
              "per_backend": stats, "cpus": os.cpu_count(), "loadavg_before": None if reuse else load0, "reanalysed": bool(reuse),
              "loadavg_after": os.getloadavg(), "wall_s": round(time.monotonic() - t0, 1),
              "runs": {b: v["run"] for b, v in by_backend.items()}}
    path = out_dir / f"bmv2_vs_soft-{stamp}.json"
    path.write_text(json.dumps(result, indent=1))
    result["json_path"] = str(path)
    return result
