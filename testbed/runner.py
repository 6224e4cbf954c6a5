"""Runs a scenario: sweep points one after another, each on a fresh network.

For each point: build the network (Mininet or local), start the switches, start
the workload's host programs, wait for them, collect their measurements, tear
everything down (always, also on failure or Ctrl-C), and append the point's
outcome to the results folder before the next point starts.
"""
from __future__ import annotations

import shutil
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hosts.common import start_gate
from hosts.common.program import EXIT_REFUSED
from testbed import results as res
from testbed.manifest import base_manifest
from testbed.net.cpu_isolation import CpuIsolation
from testbed.outcomes import PointFailed, SkipPoint  # re-exported: testbed.runner.SkipPoint still works
from testbed.scenario import Point, Scenario, expand_points, load_scenario
from testbed.scenario.sweep import Points
from testbed.workloads.base import HostProgram, PointContext, WorkloadRuntime, get_runtime, host_env

# Time between starting the host programs and the moment they all begin work:
# Python start-up of N processes on 2 shared cores takes about a second. Where
# the runner opens a start gate (hosts.common.start_gate: local and Mininet runs)
# this is the latest start: the gate opens once every program is ready.
START_SLACK_S = 2.0
# Between the gate's `go` and the common start: every waiting program (polling
# every 2 ms, N of them on 2 cores) reads the time before it comes.
GO_LEAD_S = 0.05
GATE_POLL_S = 0.005
# In a point's folder: what its programs share while they run (PointContext.scratch_dir).
SCRATCH_DIR = "scratch"
# How often the switches are checked while host programs run: a dead switch
# ends the point within about this long, instead of after a host's timeout.
SWITCH_POLL_S = 0.25


@dataclass
class PointOutcome:
    index: int
    label: str
    status: str                       # ok | failed | skipped
    wall_s: float
    error: str | None = None
    summary: list[dict[str, Any]] = field(default_factory=list)


class PhaseClock:
    """Wall time of a point's phases, in order (seconds each): where a point's
    wall time goes besides its host programs' dilated run (`testbed show`)."""

    def __init__(self) -> None:
        self._t = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, phase: str, *, only_if_new: bool = False) -> None:
        if only_if_new and phase in self.laps:
            return
        now = time.monotonic()
        self.laps[phase] = round(self.laps.get(phase, 0.0) + now - self._t, 3)
        self._t = now


@dataclass
class RunOutcome:
    run_dir: Path
    outcomes: list[PointOutcome]
    interrupted: bool = False

    @property
    def failed(self) -> list[PointOutcome]:
        return [o for o in self.outcomes if o.status != "ok"]


def _signal_as_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def run_scenario(
    scenario_path: str | Path,
    overrides: tuple[str, ...] = (),
    net_mode: str = "mininet",
    quick: bool = False,
    out_dir: Path | None = None,
    on_point: Callable[[PointOutcome, int], None] | None = None,
    on_start: Callable[[Path, list[Point]], None] | None = None,
) -> RunOutcome:
    scenario = load_scenario(scenario_path, list(overrides))
    points = expand_points(scenario, quick=quick)
    return run_points(scenario, points, net_mode=net_mode, quick=quick, out_dir=out_dir,
                      cli={"scenario": str(scenario_path), "overrides": list(overrides),
                           "net": net_mode, "quick": quick},
                      on_point=on_point, on_start=on_start)


def run_points(scenario: Scenario, points: Points | list[Point], *, net_mode: str, quick: bool,
               out_dir: Path | None, cli: dict[str, Any],
               on_point: Callable[[PointOutcome, int], None] | None = None,
               on_start: Callable[[Path, list[Point]], None] | None = None) -> RunOutcome:
    from testbed.net import registry  # noqa: PLC0415 - keeps `testbed list` fast

    # --out names the results root (default results/); each run gets its own folder.
    run_dir = res.new_run_dir(scenario.name, out_dir)
    # Every planned point, without resolving their scenarios (points are lazy).
    headers = (list(points.headers()) if isinstance(points, Points) else
               [{"index": p.index, "label": p.label, "case": p.case, "params": p.params,
                 "repeat": p.repeat, "seed": p.seed} for p in points])
    manifest = base_manifest(scenario.model_dump(mode="json"), cli, headers)
    manifest["net"] = net_mode
    manifest["switch_backend"] = scenario.switch.backend
    if isinstance(points, Points):
        manifest["sweep_ran"] = points.ran()       # what ran, after --quick and --set
    res.write_json(run_dir / "manifest.json", manifest)
    if on_start:
        on_start(run_dir, points)

    reg = registry.RunRegistry.create(run_dir)
    old_term = signal.signal(signal.SIGTERM, _signal_as_interrupt)
    # SIGINT explicitly too: a process started in the background by a non-interactive
    # shell (`testbed run ... &`, a CI script) inherits SIGINT *ignored*, and Python
    # then keeps it ignored: the run went on to its end after a SIGINT.
    old_int = signal.signal(signal.SIGINT, _signal_as_interrupt)
    outcomes: list[PointOutcome] = []
    summary_rows: list[dict[str, Any]] = []
    interrupted = False
    try:
        for point in points:
            outcome, impairments, extra = _run_point_safely(point, run_dir, net_mode, reg)
            outcomes.append(outcome)
            res.append_jsonl(run_dir / "points.jsonl", {
                "index": point.index, "label": point.label, "case": point.case,
                "params": point.params, "repeat": point.repeat, "seed": point.seed,
                "status": outcome.status, "error": outcome.error, "wall_s": round(outcome.wall_s, 3),
                "impairments": impairments, **extra,
            })
            for row in outcome.summary:
                summary_rows.append({"point": point.index, "label": point.label, "case": point.case,
                                     "status": outcome.status, **row})
            if not outcome.summary:
                summary_rows.append({"point": point.index, "label": point.label, "case": point.case,
                                     "status": outcome.status})
            res.write_summary_csv(run_dir / "summary.csv", summary_rows)
            if on_point:
                on_point(outcome, len(points))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
        manifest["status"] = ("interrupted" if interrupted else
                              "failed" if any(o.status == "failed" for o in outcomes) else "ok")
        manifest["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest["completed_points"] = sum(o.status == "ok" for o in outcomes)
        manifest["warnings"].extend(_collect_warnings(run_dir))
        res.write_json(run_dir / "manifest.json", manifest)
        reg.close()
    return RunOutcome(run_dir, outcomes, interrupted)


def _collect_warnings(run_dir: Path) -> list[str]:
    warnings = []
    for p in res.read_jsonl(run_dir / "points.jsonl"):
        for w in p.get("warnings", []) or []:
            warnings.append(f"point {p['label']}: {w}")
    return warnings


def _run_point_safely(point: Point, run_dir: Path, net_mode: str, reg: Any
                      ) -> tuple[PointOutcome, list[dict[str, Any]], dict[str, Any]]:
    t0 = time.monotonic()
    extra: dict[str, Any] = {}
    # Filled by _run_point as soon as the network reports it, so a skipped or
    # failed point still records what was (and was not) applied, and why.
    seen: dict[str, Any] = {"impairments": []}
    try:
        summary, impairments, extra = _run_point(point, run_dir, net_mode, reg, seen)
        retuned = get_runtime(point.scenario.workload.kind).retune(point, extra.get("fidelity"))
        if retuned is not None:
            # The monitor measured the network's slowdown during the whole run; calibration
            # saw only a few warm-up batches. Run the point again once at the measured
            # dilation; the first attempt's verdict stays in the record.
            first = extra.get("fidelity")
            res.drop_point_records(run_dir / "metrics.jsonl", point.index)
            summary, impairments, extra = _run_point(retuned, run_dir, net_mode, reg, seen)
            if extra.get("fidelity") is not None:
                extra["fidelity"]["earlier_attempts"] = [first]
        return PointOutcome(point.index, point.label, "ok", time.monotonic() - t0, summary=summary), impairments, extra
    except KeyboardInterrupt:
        raise
    except SkipPoint as e:
        return (PointOutcome(point.index, point.label, "skipped", time.monotonic() - t0, error=str(e)),
                seen["impairments"], extra)
    except Exception as e:  # noqa: BLE001 - a failed point is recorded, the sweep goes on
        detail = str(e) if isinstance(e, (PointFailed,)) else f"{type(e).__name__}: {e}"
        log = run_dir / "logs" / point.label / "runner.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(traceback.format_exc())
        return (PointOutcome(point.index, point.label, "failed", time.monotonic() - t0, error=detail),
                seen["impairments"], extra)


def point_dirs(point: Point, run_dir: Path) -> tuple[Path, Path, Path]:
    """The point's logs/, pcaps/ and points/ (work) folders, created."""
    dirs = (run_dir / "logs" / point.label, run_dir / "pcaps" / point.label, run_dir / "points" / point.label)
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def plan_point_network(point: Point, run_dir: Path, net_mode: str, reg: Any, recorder: Any = None
                       ) -> tuple[Any, WorkloadRuntime, list[Any], tuple[Path, Path, Path]]:
    """The point's network, planned (not started), its workload runtime and the
    aggregation jobs it asks the switch for. SkipPoint when the point cannot run
    here (an impairment no mechanism applies, a backend this machine lacks, in-network
    aggregation without a switch). Used by every point and by `testbed net up`."""
    from testbed.net.factory import BackendUnavailable, build_network  # noqa: PLC0415
    from testbed.net.impairments import ImpairmentError  # noqa: PLC0415

    scn = point.scenario
    logs, pcaps, work = point_dirs(point, run_dir)
    runtime: WorkloadRuntime = get_runtime(scn.workload.kind)
    job_requests = runtime.ina_jobs(point)
    try:
        net = build_network(net_mode, scn, logs_dir=logs, pcaps_dir=pcaps, seed=point.seed, registry=reg,
                            recorder=recorder, ina_traffic=bool(job_requests))
    except ImpairmentError as e:
        raise SkipPoint(f"impairment cannot be applied: {e}") from None
    except BackendUnavailable as e:
        raise SkipPoint(str(e)) from None
    plan = getattr(net, "plan", None)
    if plan is not None and recorder is None:
        # How many switches each host pair's path crosses, where the monitor reads the traces.
        from testbed.fidelity.paths import PATHS_FILE, write_path_table  # noqa: PLC0415
        write_path_table(work / PATHS_FILE, plan.path_switches())
    if job_requests and "p4runtime" not in net.switch_info:
        raise SkipPoint(f"in-network aggregation needs the switch: --net {net_mode} has none "
                        f"between hosts; use --net mininet, or a host algorithm (ring/ps)")
    return net, runtime, job_requests, (logs, pcaps, work)


def start_point_network(net: Any, point: Point, logs: Path, job_requests: list[Any], recorder: Any = None) -> Any:
    """Start the planned network, then program its switches (forwarding, flood
    group, the point's jobs) over P4Runtime. Returns the ControlPlane (None
    without P4Runtime switches). The caller stops both, also on failure."""
    from testbed.net.impairments import ImpairmentError  # noqa: PLC0415

    try:
        net.start()
    except ImpairmentError as e:
        # A shaping or impairment that did not take (tc/nft refused it, or
        # the read-back differs): the network records it as not applied.
        raise SkipPoint(f"impairment cannot be applied: {e}") from None
    if "p4runtime" not in getattr(net, "switch_info", {}):
        return None
    from testbed.switch.control_plane import ControlPlane  # noqa: PLC0415
    controller_cls = None
    if recorder is not None:
        from functools import partial  # noqa: PLC0415
        from testbed.switch.recording import RecordingController  # noqa: PLC0415
        controller_cls = partial(RecordingController, recorder=recorder)
    return ControlPlane.start(net, point.scenario.switch.program, logs, job_requests, controller_cls)


def _run_point(point: Point, run_dir: Path, net_mode: str, reg: Any, seen: dict[str, Any],
               recorder: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """One point, start to end. recorder (testbed.net.plan.PlanRecorder): a dry
    run of the same steps: the network and the controller record instead of
    acting, nothing is waited for, and the point ends before collecting."""
    from testbed.net.impairments import fill_drop_simulator_observed, unconfigured_switch_drops  # noqa: PLC0415

    scn = point.scenario
    phases = PhaseClock()
    net, runtime, job_requests, (logs, pcaps, work) = plan_point_network(point, run_dir, net_mode, reg, recorder)
    procs: dict[str, Any] = {}
    warnings: list[str] = []
    cpu = None
    control = None
    counters: dict[str, Any] = {}
    announced = None
    start_report = None
    scratch = gate = None
    try:
        control = start_point_network(net, point, logs, job_requests, recorder)
        phases.lap("network_start")
        if control is not None and recorder is None:
            # `testbed switch tables|counters|read` can look at this point's switches while it runs.
            from testbed.net.live_registry import announce  # noqa: PLC0415
            announced = announce(f"{scn.name}@{run_dir.name}", run_dir, scn.name, point.label, scn.switch.program,
                                 net.switch_info)
        on_this_machine = net_mode in ("mininet", "local")   # hosts share its files and PIDs
        if on_this_machine:
            scratch = work / SCRATCH_DIR
            gate = start_gate.make_gate(scratch / "start_gate")
        ctx = PointContext(point=point, hosts=net.hosts, work_dir=work, net_mode=net_mode,
                           start_at=time.time() + START_SLACK_S,
                           switch=getattr(net, "switch_info", {}), scratch_dir=scratch,
                           planning=recorder is not None)
        programs = runtime.programs(ctx)
        env = host_env()
        if gate is not None:
            env[start_gate.GATE_ENV] = str(gate)
        if recorder is None and on_this_machine:
            cpu = CpuIsolation(f"{run_dir.name}-{point.index}")
            cpu.place_switches()
        for prog in sorted(programs, key=lambda p: p.phase):
            procs[prog.host] = (prog, net.popen(prog.host, prog.argv, logs / f"{prog.host}.log", env=env))
            if cpu is not None:
                cpu.place(prog.host, procs[prog.host][1].pid)
        if recorder is not None:
            _record_configs(recorder, work)
            return [], [], {}
        phases.lap("programs_start")
        if gate is not None:
            start_report = _open_start_gate(gate, ctx, procs)
            phases.lap("start_gate")
        _wait_programs(procs, runtime.timeout_s(ctx) + START_SLACK_S, logs, net)
        phases.lap("programs_run")
    except (SkipPoint, KeyboardInterrupt):
        raise
    except Exception as e:
        # Whatever failed (a host, the control plane), a dead switch is the cause.
        dead = net.dead_switches()
        if dead:
            raise PointFailed(_switch_died(dead[0])) from e
        raise
    finally:
        phases.lap("programs_run", only_if_new=True)
        if announced is not None:
            from testbed.net.live_registry import withdraw  # noqa: PLC0415
            withdraw(announced)
        _stop_programs(procs)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)  # the programs' shared files, not results
        cpu_report = cpu.report() if cpu is not None else None
        if control is not None:
            try:
                counters = control.read_counters() if recorder is None else {}
            except Exception as e:  # noqa: BLE001 - counters are a bonus, the teardown is not
                warnings.append(f"could not read switch counters: {e}")
            control.close()
        net.stop()
        warnings.extend(f"teardown: {problem}" for problem in net.teardown_problems())
        if cpu is not None:
            cpu.close()
        impairments = seen["impairments"] = fill_drop_simulator_observed(net.impairment_report(),
                                                                         counters)
        switch_stats = net.switch_stats()
        if switch_stats:
            res.write_json(work / "switch_stats.json", switch_stats)
            warnings.extend(unconfigured_switch_drops(switch_stats))
        phases.lap("teardown")
    records = runtime.collect(ctx)
    records += [{"type": "switch_counters", "switch": sw, "counters": c} for sw, c in counters.items()]
    tagged = [{"point": point.index, "label": point.label, "case": point.case, **point.params, **r}
              for r in records]
    for r in tagged:
        res.append_jsonl(run_dir / "metrics.jsonl", r)
        if r.get("type") == "validity" and not r.get("valid", True):
            warnings.append(f"emulation not valid on {r.get('host')}: {r.get('reason')}")
    # The fidelity monitor's verdict on the point (testbed.fidelity), if the workload ran one.
    fidelity = next((r for r in records if r.get("type") == "fidelity"), None)
    if fidelity is not None and not fidelity.get("valid", True):
        warnings.append("emulation not valid (fidelity monitor): " + "; ".join(fidelity.get("reasons") or []))
    not_applied = [i for i in impairments if not i.get("applied", True)]
    for i in not_applied:
        warnings.append(f"impairment NOT applied: {i}")
    summary = runtime.summarize(ctx, records)
    bad = [r for r in summary if r.get("all_correct") is False]
    if bad:
        raise PointFailed(f"wrong results for {len(bad)} size(s); see metrics.jsonl (ok=false)")
    if cpu_report is not None and not cpu_report["isolated"]:
        warnings.append(f"no CPU isolation: {cpu_report['reason']}")
    phases.lap("collect")
    extra = {"warnings": warnings, "switch_stats": _brief_stats(switch_stats), "cpu": cpu_report,
             "phases_s": phases.laps}
    if start_report is not None:
        extra["start_gate"] = start_report
    if fidelity is not None:
        extra["fidelity"] = {k: v for k, v in fidelity.items() if k != "type"}
    return summary, impairments, extra


def _open_start_gate(gate: Path, ctx: PointContext, procs: dict[str, tuple[HostProgram, Any]]
                     ) -> dict[str, Any]:
    """Open the point's start gate once every program has announced it is ready
    (or one has exited: _wait_programs reports it), at ctx.start_at at the
    latest: the programs begin GO_LEAD_S after. A program without a start time
    (ShadowSync's embedding servers) never announces itself, so its point keeps
    the whole slack, as one whose start-up it covers. Returns what happened, for
    points.jsonl: the slack it saved, who was not ready."""
    expected = set(procs)
    while True:
        now = time.time()
        missing = expected - start_gate.ready_hosts(gate)
        exited = any(p.poll() is not None for _, p in procs.values())
        if not missing or exited or now + GO_LEAD_S >= ctx.start_at:
            break
        time.sleep(GATE_POLL_S)
    begin = min(now + GO_LEAD_S, ctx.start_at)
    start_gate.open_gate(gate, begin)
    opened = "all ready" if not missing else "a program exited" if exited else "at the latest start"
    report: dict[str, Any] = {"opened": opened, "saved_s": round(ctx.start_at - begin, 3)}
    if missing:
        report["not_ready"] = sorted(missing)
    return report


def _record_configs(recorder: Any, work: Path) -> None:
    """The configs the workload wrote for its host programs, into the plan."""
    for path in sorted(work.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".yaml", ".txt"):
            recorder.config(path, path.read_text(errors="replace"))


def plan_points(scenario: Scenario, points: Points | list[Point], *, net_mode: str) -> Any:
    """`testbed run --dry-run`: every point's plan (testbed.net.plan.PlanRecorder),
    from the code a real run executes, with nothing started and no results
    folder: what the point writes goes to a temporary folder, deleted after."""
    import tempfile  # noqa: PLC0415

    from testbed.net.plan import PlanRecorder  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="testbed-dry-run-") as tmp:
        rec = PlanRecorder(tmp)
        for point in points:
            rec.begin_point(point.label)
            try:
                _run_point(point, Path(tmp), net_mode, None, {"impairments": []}, recorder=rec)
            except SkipPoint as e:
                rec.skip(str(e))
            except PointFailed as e:
                rec.skip(f"would fail: {e}")
    return rec


def _brief_stats(stats: dict[str, Any] | None) -> dict[str, Any]:
    if not stats:
        return {}
    keep = ("io_mode", "cpu_time_s", "wall_time_s", "runqueue_wait_s", "pipeline")  # soft switch stats keys
    return {name: {k: v for k, v in s.items() if k in keep}
            for name, s in stats.items() if isinstance(s, dict)}


def _switch_died(dead: Any) -> str:
    """`switch s1 exited with code -9; last lines of <log>: ...` (testbed.net.base.DeadSwitch)."""
    code = "an unknown code" if dead.exit_code is None else f"code {dead.exit_code}"
    if dead.log_path is None:
        return f"switch {dead.name} exited with {code} (no log)"
    return f"switch {dead.name} exited with {code}; last lines of {dead.log_path}:\n{_tail(dead.log_path)}"


def _wait_programs(procs: dict[str, tuple[HostProgram, Any]], timeout_s: float, logs: Path,
                   net: Any = None) -> None:
    """Until every non-daemon program exits 0. A host that fails, a switch
    process that dies (checked like a host) or the timeout ends the point."""
    deadline = time.monotonic() + timeout_s
    next_switch_check = 0.0
    while True:
        if net is not None and time.monotonic() >= next_switch_check:
            # First: with the switch gone, hosts fail too, blaming each other.
            dead = net.dead_switches()
            if dead:
                raise PointFailed(_switch_died(dead[0]))
            next_switch_check = time.monotonic() + SWITCH_POLL_S
        pending = []
        for host, (prog, p) in procs.items():
            rc = p.poll()
            if rc is None:
                if not prog.daemon:
                    pending.append(host)
            elif rc != 0:
                raise PointFailed(_host_failed(host, rc, logs / (host + ".log")))
        if not pending:
            return
        if time.monotonic() > deadline:
            raise PointFailed(f"timed out after {timeout_s:.0f}s waiting for {', '.join(pending)}; "
                              f"see {logs}")
        time.sleep(0.05)


def _host_failed(host: str, rc: int, log: Path) -> str:
    """Why the point failed with this host. A host that refused its run (EXIT_REFUSED, e.g.
    a calibration that would crawl) is named so, with its last error line, first: the
    record's first line is what `testbed show` prints."""
    tail = _tail(log)
    if rc == EXIT_REFUSED:
        why = next((line.split(": ERROR ", 1)[1] for line in reversed(tail.splitlines()) if ": ERROR " in line),
                   "see its log")
        return f"host {host} refused the point (exit code {rc}): {why}\nlast lines of {log}:\n{tail}"
    return f"host {host} exited with code {rc}; last lines of {log}:\n{tail}"


def _stop_programs(procs: dict[str, tuple[HostProgram, Any]]) -> None:
    """Stop what we started, by PID: SIGTERM, then SIGKILL after a grace period."""
    live = [p for _, p in procs.values() if p.poll() is None]
    for p in live:
        try:
            p.terminate()
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 3
    for p in live:
        try:
            p.wait(timeout=max(0.05, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001
            p.kill()
            p.wait(timeout=2)


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
