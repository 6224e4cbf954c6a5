"""The NE the ShadowSync workload's model reaches on its synthetic data when trained to
convergence, and how many iterations that takes, measured in this process
(data/shadowsync_ne_<date>.json; data/README.md names the machine, the date and the
command). papers/shadowsync.py holds every emulated NE against it before an NE
comparison may decide anything.

What is trained: the quality scenario's model and data exactly (scenarios/shadowsync/
quality.yaml resolved: hosts/dnn/dlrm.py's DenseTower at its `model`, 26 tables
initialised as the embedding PSs start them, hosts/shadowsync/data.py's SyntheticClicks
with the point's seed as training and truth seed), with no emulation, no network and no
sync: ONE dense replica and the tables in this process, plain SGD at the workload's
`lr_dense` and `lr_embed` (the PS's `index_add_` rule) and `batch_size`. One iteration
is one step of each of the job's `trainers x hogwild_workers` worker streams in turn
(the streams the emulated workers read), i.e. the serial equivalent of that job with
perfect synchronization: per worker iteration it makes as many SGD steps on as many
examples as the job does, none of them stale. The emulated job (stale replicas,
Hogwild races, syncs that average rather than share every step) cannot be expected to
converge in fewer worker iterations, so the iterations measured here are a lower bound
for it; each emulated point is checked against the achievable NE itself.

  achievable NE (per seed)  the median eval NE over the last quarter of `ITERATIONS`
                            (evaluated every `EVAL_EVERY` iterations on the point's own
                            eval set, `eval_examples` examples); `plateau_change` is the
                            relative change of that median from the third quarter's, so
                            a curve still falling shows (`converged` when below
                            MARGIN / 4);
  snapshot noise            the relative standard deviation of the eval NE over the last
                            quarter: one evaluation of a trained model moves this much
                            with the SGD noise of its last steps (an emulated point's eval
                            NE is one such snapshot);
  iterations to the margin  the first evaluated iteration from which the curve's running
                            median over SMOOTH evaluations stays within MARGIN (relative)
                            of the achievable NE (the median, so that one noisy snapshot
                            neither ends nor restarts it);
  Bayes floor               the eval NE of the planted click model's own probabilities
                            (SyntheticClicks.eval_probability): no model does better.

MARGIN is 2 % relative [A: twice the snapshot noise measured here (0.7-1.0 % over the
five seeds), so that one evaluation of a trained model passes the check; an NE within 2 %
of what the model class reaches is taken as trained. The S-vs-FR comparison's own margin,
0.1 %, is decided on the paired interval, not here].

Run it (writes the JSON the loader reads; ~3 min CPU per seed, 2 shared cores):
    nice -n 19 .venv/bin/python -m testbed.reproduce.measurements.shadowsync_ne --out \\
        testbed/reproduce/measurements/data/shadowsync_ne_<date>.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from testbed.reproduce.measurements import Measurement, read_measurement_file

DATA_DIR = Path(__file__).with_name("data")
SCHEMA = "shadowsync_ne/1"
SCENARIO = "scenarios/shadowsync/quality.yaml"
SEEDS = (1, 2, 3, 4, 5)        # the reproduction's quality seeds: workload.seed 1 + repeat 0..4
ITERATIONS = 20000             # worker iterations per seed (x trainers x hogwild SGD steps)
EVAL_EVERY = 200
MARGIN = 0.02                  # relative; module docstring
SMOOTH = 5                     # evaluations in the running median (1,000 iterations at EVAL_EVERY)

# Nothing here checks a hardware model (the package's MEASUREMENTS are validations);
# papers/shadowsync.py reads the achievable NE through `achievable`.
MEASUREMENTS: list[Measurement] = []


class NeMeasurementError(ValueError):
    """The measurement file is missing or malformed, or lacks the seed asked for."""


@dataclass(frozen=True)
class Achievable:
    """One seed's measured achievable NE and the iterations to within `margin` of it."""
    seed: int
    ne: float
    iterations_to_margin: int | None     # None: never within the margin for good in the run
    margin: float
    bayes_ne: float
    converged: bool
    plateau_change: float
    source: str


def data_files() -> list[Path]:
    return sorted(DATA_DIR.glob("shadowsync_ne_*.json"))


@lru_cache(maxsize=None)
def load(path: Path | None = None) -> dict[str, Any]:
    """The newest data file (or `path`), checked."""
    if path is None:
        files = data_files()
        if not files:
            raise NeMeasurementError(f"no shadowsync_ne_*.json in {DATA_DIR}: run python -m "
                                     "testbed.reproduce.measurements.shadowsync_ne --out ...")
        path = files[-1]
    path = Path(path)
    data = read_measurement_file(path, NeMeasurementError)
    if data.get("schema") != SCHEMA or not isinstance(data.get("seeds"), dict) or "margin" not in data:
        raise NeMeasurementError(f"{path}: not a {SCHEMA} run (seeds, margin)")
    if data.get("smoke"):
        raise NeMeasurementError(f"{path}: a --smoke run (a test of the measurement), not a measurement")
    data["_path"] = str(path)
    return data


def achievable(seed: int, path: Path | None = None) -> Achievable:
    """The achievable NE of workload seed `seed` (the quality scenario's model and data)."""
    data = load(path)
    row = data["seeds"].get(str(seed))
    if row is None:
        raise NeMeasurementError(f"{Path(data['_path']).name}: seed {seed} not measured "
                                 f"(have {sorted(map(int, data['seeds']))})")
    return Achievable(seed, row["achievable_ne"], row["iterations_to_margin"], data["margin"], row["bayes_ne"],
                      row["converged"], row["plateau_change"],
                      f"{Path(data['_path']).name} ({data['date']}, {data['machine']}; `{data['command']}`)")


def iterations_needed(path: Path | None = None) -> int | None:
    """The most iterations any measured seed needed to come within the margin (None if one never did)."""
    rows = load(path)["seeds"].values()
    its = [r["iterations_to_margin"] for r in rows]
    return None if any(i is None for i in its) else max(its)


# ---- the measurement -------------------------------------------------------------------

def workload_settings(overrides: list[str] | None = None):
    """(the quality scenario's resolved workload, its trainer count): the model, rates, batch."""
    from testbed import results as res  # noqa: PLC0415
    from testbed.scenario import load_scenario  # noqa: PLC0415
    scn = load_scenario(res.PROJECT_ROOT / SCENARIO, list(overrides or []))
    return scn.workload, scn.topology.workers


def first_within(curve: list[tuple[int, float]], target: float) -> int | None:
    """The first iteration of `curve` [(iteration, NE)] from which every later NE is <= target."""
    first = None
    for it, ne in curve:
        if ne <= target:
            if first is None:
                first = it
        else:
            first = None
    return first


def running_median(curve: list[tuple[int, float]], width: int = SMOOTH) -> list[tuple[int, float]]:
    """Each evaluation replaced by the median of the `width` around it (fewer at the ends)."""
    half = width // 2
    nes = [ne for _, ne in curve]
    return [(it, statistics.median(nes[max(0, i - half):i + half + 1])) for i, (it, _) in enumerate(curve)]


def summarize(curve: list[tuple[int, float]], margin: float = MARGIN, smooth: int = SMOOTH) -> dict[str, Any]:
    """achievable NE, plateau change, snapshot noise and iterations to the margin of one seed's curve."""
    n = len(curve)
    if n < 8:
        raise ValueError(f"a curve of {n} evaluations is too short to find a plateau (>= 8)")
    tail = [ne for _, ne in curve[(3 * n) // 4:]]
    last = statistics.median(tail)
    third = statistics.median(ne for _, ne in curve[n // 2:(3 * n) // 4])
    change = (third - last) / last
    return {"achievable_ne": last, "plateau_change": change, "converged": abs(change) < margin / 4,
            "snapshot_noise": statistics.pstdev(tail) / last,
            "iterations_to_margin": first_within(running_median(curve, smooth), last * (1 + margin))}


def train_curve(seed: int, iterations: int, eval_every: int, overrides: list[str] | None = None
                ) -> tuple[list[tuple[int, float]], float]:
    """(eval NE every `eval_every` iterations, the Bayes floor) for workload seed `seed`."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415

    from hosts.dnn.dlrm import DenseTower  # noqa: PLC0415
    from hosts.shadowsync.data import N_DENSE, SyntheticClicks  # noqa: PLC0415
    from hosts.shadowsync.replica import initial_table  # noqa: PLC0415
    from hosts.shadowsync.rules import normalized_entropy  # noqa: PLC0415

    torch.set_num_threads(1)
    wl, trainers = workload_settings(overrides)
    m = wl.model.resolved()
    if wl.dataset.get("source") != "synthetic":
        raise ValueError("the achievable NE is measured on the synthetic click model only")
    torch.manual_seed(seed)                                  # replica.build_tower's initialisation
    tower = DenseTower(N_DENSE, len(m["table_sizes"]), m["dim"], m["bottom"], m["top"])
    # The 26 tables as one tensor (row offsets per table): one gather and one index_add_ per
    # step instead of 26; the same rows and the same update as the PS's per-table index_add_.
    sizes = m["table_sizes"]
    rows_all = torch.cat([initial_table(seed, t, n, m["dim"]) for t, n in enumerate(sizes)])
    offsets = torch.tensor([sum(sizes[:t]) for t in range(len(sizes))], dtype=torch.int64)
    src = SyntheticClicks(seed, m["table_sizes"], truth_seed=seed,
                          **{k: v for k, v in wl.dataset.items() if k not in ("source", "truth_seed")})
    streams = [src.batches(s, wl.batch_size) for s in range(trainers * wl.hogwild_workers)]
    ev = src.eval_set(wl.eval_examples)
    bayes = normalized_entropy(src.eval_probability(wl.eval_examples), ev.labels)

    def pooled(ids: torch.Tensor) -> torch.Tensor:
        return rows_all[ids + offsets]                        # B x tables x dim

    def eval_ne() -> float:
        with torch.no_grad():
            return normalized_entropy(torch.sigmoid(tower(ev.dense, pooled(ev.ids))), ev.labels)

    curve = [(0, eval_ne())]
    for it in range(1, iterations + 1):
        for batches in streams:
            b = next(batches)
            rows = pooled(b.ids).requires_grad_(True)
            loss = F.binary_cross_entropy_with_logits(tower(b.dense, rows), b.labels)
            tower.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                for p in tower.parameters():                 # rules.local_sgd on each view
                    p.sub_(wl.lr_dense * p.grad)
                rows_all.index_add_(0, (b.ids + offsets).reshape(-1),      # the embedding PS's PUSH
                                    rows.grad.reshape(-1, m["dim"]), alpha=-wl.lr_embed)
        if it % eval_every == 0:
            curve.append((it, eval_ne()))
    return curve, bayes


def measure_seed(seed: int, iterations: int, eval_every: int, margin: float = MARGIN) -> dict[str, Any]:
    t0 = time.process_time()
    curve, bayes = train_curve(seed, iterations, eval_every)
    row = summarize(curve, margin)
    out = {**row, "bayes_ne": bayes, "cpu_s": time.process_time() - t0,
           "curve": [[it, round(ne, 6)] for it, ne in curve]}
    print(f"seed {seed}: achievable NE {row['achievable_ne']:.4f} (Bayes {bayes:.4f}), plateau change "
          f"{row['plateau_change']:+.4f}, within {margin:.0%} from iteration {row['iterations_to_margin']}; "
          f"{out['cpu_s']:.0f} s CPU", flush=True)
    return out


def measure(seeds: tuple[int, ...], iterations: int, eval_every: int, jobs: int = 1) -> dict[str, Any]:
    """Every seed's curve and summary; `jobs` seeds at once (forked processes, one thread each)."""
    if jobs <= 1:
        return {str(s): measure_seed(s, iterations, eval_every) for s in seeds}
    import multiprocessing as mp  # noqa: PLC0415
    with mp.get_context("fork").Pool(jobs) as pool:
        got = pool.starmap(measure_seed, [(s, iterations, eval_every) for s in seeds])
    return {str(s): g for s, g in zip(seeds, got)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.reproduce.measurements.shadowsync_ne",
                                description="measure the achievable NE of the ShadowSync quality model (module doc)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="workload seeds, comma-separated")
    p.add_argument("--iterations", type=int, default=ITERATIONS)
    p.add_argument("--eval-every", type=int, default=EVAL_EVERY)
    p.add_argument("--jobs", type=int, default=1, help="seeds measured at once (processes)")
    p.add_argument("--smoke", action="store_true", help="a few iterations: a test of the measurement")
    p.add_argument("--resummarize", type=Path, help="recompute FILE's summaries from its kept curves (no "
                   "training) with this module's rules, and write them to --out")
    a = p.parse_args(argv)
    if a.resummarize:
        return resummarize(a.resummarize, a.out, argv)
    import torch  # noqa: PLC0415
    seeds = tuple(int(s) for s in a.seeds.split(","))
    iterations, every = (40, 5) if a.smoke else (a.iterations, a.eval_every)
    t0 = time.time()
    wl, trainers = workload_settings()
    got = measure(seeds, iterations, every, a.jobs)
    its = [r["iterations_to_margin"] for r in got.values()]
    out = {"schema": SCHEMA, "date": time.strftime("%Y-%m-%d"), "smoke": a.smoke,
           "command": "python -m testbed.reproduce.measurements.shadowsync_ne " + " ".join(argv or sys.argv[1:]),
           "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores, "
                      f"Python {platform.python_version()}, torch {torch.__version__}",
           "method": f"{SCENARIO} resolved; one replica, plain SGD, serial over trainers x hogwild_workers streams "
                     "(module docstring)",
           "setting": {"trainers": trainers, "hogwild_workers": wl.hogwild_workers, "batch_size": wl.batch_size,
                       "lr_dense": wl.lr_dense, "lr_embed": wl.lr_embed, "model": wl.model.resolved() | {
                           "table_sizes": sorted(set(wl.model.resolved()["table_sizes"]))},
                       "eval_examples": wl.eval_examples},
           "iterations": iterations, "eval_every": every, "margin": MARGIN, "smooth": SMOOTH,
           "iterations_to_margin_max": None if None in its else max(its),
           "wall_s": time.time() - t0, "seeds": got}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def resummarize(src: Path, out: Path, argv: list[str] | None) -> int:
    """The summaries of `src`'s curves by this module's rules (MARGIN, SMOOTH), the curves kept."""
    data = json.loads(Path(src).read_text())
    for row in data["seeds"].values():
        row.update(summarize([(int(it), float(ne)) for it, ne in row["curve"]]))
    its = [r["iterations_to_margin"] for r in data["seeds"].values()]
    data.update(margin=MARGIN, smooth=SMOOTH, iterations_to_margin_max=None if None in its else max(its),
                summarized_by="python -m testbed.reproduce.measurements.shadowsync_ne "
                              + " ".join(argv or sys.argv[1:]))
    out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
