"""Every shipped scenario's quick run and the figures drawn from it (issue 33, part 4).

RUNS is the one table: per shipped scenario, the net its quick run uses and the
--set overrides that shrink it to fit CI. tests/local/test_shipped_figures_local.py
runs the `local` rows and tests/mininet/test_shipped_figures_mininet.py the others
(`--net local` has no switch and no link impairments: a scenario with an
in-switch collective, loss or a bandwidth limit in its quick grid runs on Mininet).

Shrinks keep what each figure reads: they cut iterations, steps, epochs, samples,
model sizes, modeled compute and repeats (a figure's band needs more than one
repeat, its lines do not), never a metric. Where a row shrinks the grid (a swept
key), its comment says what the figure still has. Rows marked `shared` use the very
run (same scenario, net and overrides) that another test already makes for its own
checks; the session fixture `quick_run` (tests/quick_runs.py) makes it once.

check_figures() is the test: every point completed; the figures the scenario lists
(what `testbed plot RUN` draws) are drawn, with data on every axes; every other
figure of the scenario's family is either refused by testbed.plots with a
PlotError or drawn with data on every axes; every figure of another family is
refused as such.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from figure_checks import close_all, draw, empty_axes
from testbed.plots import PlotError, _kind_of, known_figures
from testbed.results import load_run

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class QuickRun:
    net: str | None = None          # None: the scenario's own net.mode (mininet)
    sets: tuple[str, ...] = ()      # --set overrides
    plot: bool = False              # True: the run draws its figures itself (a sharing test checks them)
    timeout: float = 600.0


RUNS: dict[str, QuickRun] = {
    # ------------------------------------------------------------------ allreduce
    # 3 algorithms x 3 cases, 2 sizes, 5 operations each: already a smoke test (~40 s).
    "quickstart.yaml": QuickRun(),
    "ina/loss.yaml": QuickRun(),
    "ina/straggler.yaml": QuickRun(),
    "ina/two_jobs.yaml": QuickRun(),
    # ------------------------------------------------------------------ lhc
    "lhc/decode.yaml": QuickRun(net="local"),          # lhc_ring only: no switch, no impairment
    "lhc/iteration.yaml": QuickRun(),
    # shared: tests/mininet/test_lhc_mininet.py (3 workers, the quick loss grid restated)
    "lhc/loss.yaml": QuickRun(sets=("topology.workers=3", "sweep.quick.grid.links.loss_pct=[0, 5]")),
    "lhc/scaling.yaml": QuickRun(),
    # The modeled backward pass 0.05 ms instead of 0.5 (x the calibrated TDF, ~10^4, that
    # is 5 s of wall time per iteration, 15 s for the 3x straggler: 150 s a run): every
    # algorithm and case still has its per-iteration time, the straggler's 3x included.
    "lhc/straggler.yaml": QuickRun(sets=("workload.compute_ms=0.05",)),
    # shared: tests/local/test_lhc_local.py. Grid shrunk to the host algorithms (the switch
    # ones need Mininet) at 3 workers, unshaped: lhc_throughput still has 4 algorithms, each
    # with its codec-inclusive and network-only throughput and its compression ratio.
    "lhc/throughput.yaml": QuickRun(net="local", sets=(
        "topology.workers=3", "links.bandwidth_mbps=null",
        "sweep.quick.grid.workload.algorithm=[lhc_ring, topk_ring, dense_ps, dense_ring]")),
    "lhc/train.yaml": QuickRun(net="local"),           # shared: tests/local/test_lhc_train_local.py
    # ------------------------------------------------------------------ p4sgd
    # shared: tests/local/test_p4sgd_local.py (ps instead of the switch, which needs Mininet):
    # P4SGD and both data-parallel batches, each a loss curve against time.
    "p4sgd/convergence.yaml": QuickRun(net="local", sets=("workload.collective=ps", "sweep.repeats=1"),
                                       plot=True, timeout=400),
    # 128 samples: 2 iterations x 8 micro-batch allreduces per collective, a CDF of 16 latencies
    "p4sgd/latency.yaml": QuickRun(sets=(
        "workload.dataset={source: synthetic, kind: dense, samples: 128, features: 1024, seed: 3}",)),
    # shared: tests/mininet/test_p4sgd_mininet.py (3 workers, the quick loss grid restated)
    "p4sgd/loss.yaml": QuickRun(sets=("topology.workers=3", "sweep.quick.grid.links.loss_pct=[0, 5]")),
    # 128 samples (quick: 512): 2 iterations of 8 micro-batches per depth, each with its
    # hidden share, iteration time and exposed communication.
    "p4sgd/pipeline.yaml": QuickRun(sets=(
        "workload.dataset={source: synthetic, kind: dense, samples: 128, features: 4096, seed: 6}",)),
    # No quick section: 2 cases x 3 repeats of 4 epochs. One repeat, one epoch: each case
    # still has its loss curve (the target may be missed: the figure says so).
    "p4sgd/reproduce_convergence.yaml": QuickRun(sets=("sweep.repeats=1", "workload.epochs=1")),
    # shared: tests/local/test_p4sgd_local.py. Ring instead of the switch; grid shrunk to
    # 1, 2, 4 workers and the shipped width (the 8-worker and wide points cost minutes
    # locally): both systems still have throughput, speedup and the iteration breakdown
    # at three worker counts.
    "p4sgd/scaling.yaml": QuickRun(net="local", sets=(
        "workload.collective=ring", "sweep.quick.grid={topology.workers: [1, 2, 4]}",
        "sweep.quick.cases=[p4sgd, dp]"), plot=True, timeout=400),
    # 128 samples (quick: 512): both cases still have every worker's compute / wait / stall
    # split and w1's iteration times over time.
    "p4sgd/straggler.yaml": QuickRun(sets=(
        "workload.dataset={source: synthetic, kind: dense, samples: 128, features: 2048, seed: 5}",)),
    # ------------------------------------------------------------------ phub
    # chunk_size, models, reproduce, shared: no switch, no impairment. Model profiles at a
    # fifth of the quick size (size_scale 0.002): every stage is still traced and timed.
    # shared: tests/local/test_phub_arrival_local.py
    "phub/arrival.yaml": QuickRun(net="local", sets=("workload.model.size_scale=0.002",)),
    "phub/chunk_size.yaml": QuickRun(net="local", sets=("workload.model.size_scale=0.002",)),
    "phub/loss.yaml": QuickRun(),                       # shared: tests/mininet/test_phub_mininet.py
    "phub/models.yaml": QuickRun(net="local", sets=("workload.model.size_scale=0.002",)),
    "phub/racks.yaml": QuickRun(),                      # shared: tests/mininet/test_phub_mininet.py
    "phub/reproduce.yaml": QuickRun(net="local", sets=("workload.model.size_scale=0.002",)),
    "phub/shared.yaml": QuickRun(net="local", sets=("workload.model.size_scale=0.002",)),
    # shared: tests/mininet/test_phub_mininet.py. Grid shrunk to 2 workers: phub_iteration
    # still has every algorithm's emulated point and its projections to 16-64 workers.
    "phub/workers.yaml": QuickRun(sets=("sweep.quick.grid.topology.workers=[2]",
                                        "workload.model.size_scale=0.002")),
    # ------------------------------------------------------------------ shadowsync
    # 16 iterations (quick: 30): both pauses' sync gaps and throughputs remain (the DLRM tower kept).
    "shadowsync/dlrm_pause.yaml": QuickRun(net="local", sets=("workload.iterations=16",)),
    "shadowsync/loss.yaml": QuickRun(sets=("workload.iterations=24",)),   # shared: test_shadowsync_mininet.py
    # 24 iterations, a 500-example eval set, one repeat (quick: 250, 4000, 2): eval NE of
    # every S-*/FR-* pair and every throughput point remain.
    "shadowsync/quality.yaml": QuickRun(net="local", sets=(
        "workload.iterations=24", "workload.eval_examples=500", "sweep.quick.repeats=1")),
    # Grid shrunk to the scenario's own algorithm (MA; quick: EASGD and MA), both modes,
    # without and with the straggler: throughput, NE pairs and sync gaps under both cases.
    "shadowsync/straggler.yaml": QuickRun(net="local", sets=(
        "workload.iterations=16", "sweep.quick.grid={workload.algorithm: [ma], workload.mode: [shadow, foreground]}")),
    "shadowsync/sync_gap.yaml": QuickRun(net="local", sets=("workload.iterations=16",)),
    # shared: tests/local/test_shadowsync_local.py (a fixed TDF, 2 embedding PSs). Grid
    # shrunk to 2 trainers but every algorithm and both modes: throughput (with its
    # projections to 16-64 trainers), NE pairs and sync gaps all present.
    "shadowsync/throughput.yaml": QuickRun(net="local", sets=(
        "workload.iterations=20", "workload.k=5", "workload.device={type: v100, time_scale: 400}",
        "workload.embedding_servers=2",
        "sweep.quick.grid={topology.workers: [2], workload.algorithm: [easgd, ma, bmuf, none]}",
        "sweep.quick.cases=[shadow, foreground]"), plot=True),
    # ------------------------------------------------------------------ easgd
    "easgd/loss.yaml": QuickRun(sets=("workload.steps=32",)),   # shared: tests/mininet/test_easgd_mininet.py
    # A point's time is ~5 s of start-up and calibration plus its steps at the calibrated TDF:
    # fewer steps. Every point still records its accuracy curve, communication share and
    # time to target; variants lowers the target (0.85 -> 0.3) so that points reach it
    # (bars), period keeps 0.85, which its quick run reaches at no tau (lower bounds).
    "easgd/period.yaml": QuickRun(net="local", sets=("workload.steps=64",)),
    # Grid shrunk to the original (round robin, which waits for the straggler) and Async
    # EASGD (which does not), without and with the 4x straggler on w2, at 2 workers
    # (quick: 4): every figure keeps both behaviours under both cases.
    "easgd/straggler.yaml": QuickRun(net="local", sets=(
        "topology.workers=2", "workload.steps=48", "sweep.quick.grid={workload.variant: [easgd, async_easgd]}")),
    # All 9 variants, at 2 workers (quick: 4).
    "easgd/variants.yaml": QuickRun(net="local", sets=(
        "topology.workers=2", "workload.steps=48", "workload.target_acc=0.3")),
    # Grid shrunk to 1 and 2 workers (quick: 1-8): efficiency needs T(1) and one more
    # count; the projection still runs to 256 workers from the 2-worker traces.
    "easgd/weak_scaling.yaml": QuickRun(net="local", sets=(
        "workload.steps=24", "sweep.quick.grid={workload.variant: [sync_easgd, easgd], topology.workers: [1, 2]}")),
    # ------------------------------------------------------------------ torch
    # hook_overhead: 4 steps at its fixed TDF (quick: 8). lstm, ncf: one epoch capped at 8
    # steps (quick: 6-8 epochs), of which calibration takes the first 4 (time_scale auto;
    # a fixed TDF was slower: 54 s against 33 s for lenet); each collective still logs a
    # loss per step and its compute / communication split.
    "torch/hook_overhead.yaml": QuickRun(sets=(
        "workload.args=[--model, lenet, --epochs, '1', --max-steps, '4', --eval-every, '1000', "
        "--bucket-cap-mb, '0.02']",)),
    # shared: tests/mininet/test_torch_mininet.py. The in-switch collective only, at 0 and
    # 5 % loss, 12 steps, a fixed TDF: both figures get a loss curve and a compute /
    # communication split per point (lstm and ncf below run the other collectives).
    "torch/lenet.yaml": QuickRun(sets=(
        "workload.collective=switch", "workload.device={type: v100, time_scale: 12000}",
        "workload.args=[--model, lenet, --epochs, '1', --max-steps, '12']", "sweep.quick.grid.links.loss_pct=[0, 5]"),
        timeout=230),
    # Grids shrunk to two collectives each (quick: all four), so that between them lstm and
    # ncf still draw every collective: each figure still compares two.
    "torch/lstm.yaml": QuickRun(sets=("workload.args=[--model, lstm, --epochs, '1', --max-steps, '8']",
                                      "sweep.grid.workload.collective=[switch, ring]")),
    "torch/ncf.yaml": QuickRun(sets=("workload.args=[--model, ncf, --epochs, '1', --max-steps, '8']",
                                     "sweep.grid.workload.collective=[ps, gloo]")),
}


def shipped_scenarios() -> list[str]:
    return sorted(str(p.relative_to(ROOT / "scenarios")) for p in (ROOT / "scenarios").rglob("*.yaml"))


def rows(local: bool) -> list[str]:
    return [s for s, r in RUNS.items() if (r.net == "local") == local]


def make_run(quick_run, scenario: str) -> Path:
    r = RUNS[scenario]
    return quick_run(scenario, *r.sets, net=r.net, plot=r.plot, timeout=r.timeout)


def check_figures(run_dir: Path, scenario: str) -> None:
    run = load_run(run_dir)
    undone = [(p["label"], p.get("status"), p.get("error")) for p in run.points if p.get("status") != "ok"]
    assert not undone, f"{scenario}: points that did not complete (their figures cannot be checked): {undone}"
    scn = run.manifest["scenario"]
    kind, listed = scn["workload"]["kind"], list(scn.get("figures") or [])
    problems: list[str] = []

    # What `testbed plot RUN` draws: the scenario's figures, each with data on every axes.
    if listed:
        try:
            paths, figs = draw(run, None)
        except PlotError as e:
            pytest.fail(f"{scenario}: testbed.plots refused a figure the scenario lists: {e}")
        assert [p.name for p in paths] == [f"{n}.{x}" for n in listed for x in ("png", "pdf")], paths
        assert all(p.stat().st_size > 1000 for p in paths), paths
        assert len(figs) == len(listed), (listed, len(figs))
        problems += [f"{n} (listed): empty axes {empty_axes(f)}" for n, f in zip(listed, figs) if empty_axes(f)]
        close_all(figs)
    else:
        with pytest.raises(PlotError, match="lists no figures"):
            draw(run, None)

    # Every other figure: refused, or drawn with data (drawn only, no file written).
    for name, fn in sorted(known_figures().items()):
        if name in listed:
            continue
        try:
            _, figs = draw(run, [name], write=False)
        except PlotError as e:
            other_family = f"ran workload {kind!r}" in str(e)
            if other_family != (_kind_of(fn) != kind):
                problems.append(f"{name}: refused for the wrong reason: {e}")
            continue
        if _kind_of(fn) != kind:
            problems.append(f"{name}: a {_kind_of(fn)} figure was drawn from a {kind} run")
        elif empty_axes(figs[0]):
            problems.append(f"{name} (not listed): drawn with empty axes {empty_axes(figs[0])} "
                            f"instead of refused")
        close_all(figs)
    assert not problems, f"{scenario} ({run_dir}):\n  " + "\n  ".join(problems)
