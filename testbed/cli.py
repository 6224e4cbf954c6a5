"""The `testbed` command line: list, run, show, plot, pcap, reproduce, doctor, clean."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from testbed.results import DEFAULT_RESULTS_ROOT, PROJECT_ROOT

SCENARIOS_DIR = PROJECT_ROOT / "scenarios"


def _fail(msg: str, code: int = 2) -> None:
    click.secho(f"error: {msg}", fg="red", err=True)
    sys.exit(code)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415
    from testbed.manifest import git_state  # noqa: PLC0415

    try:
        v = version("innet-testbed")
    except PackageNotFoundError:
        v = "unknown"
    g = git_state()
    commit = (g.get("commit") or "")[:12]
    return f"{v}" + (f" (git {commit}{', uncommitted changes' if g.get('dirty') else ''})" if commit else "")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"testbed {_version()}")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the testbed's version and git commit, then exit.")
def main() -> None:
    """Emulated testbed for in-network ML training.

    Run a scenario on an emulated network (Mininet + soft P4 switch, or local
    loopback processes), then inspect its results, figures and packet traces.

    \b
    Quick start:
      testbed run scenarios/quickstart.yaml
      testbed show results/quickstart          # newest run of that scenario
      testbed plot results/quickstart
      testbed reproduce --list                 # papers and their headlines
      testbed reproduce p4sgd --quick          # does the paper's headline hold?
    """


@main.command("list")
@click.argument("folder", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--runs/--no-runs", default=True,
              help="Also list recent runs (under results/ and every --out folder used).")
def list_cmd(folder: Path | None, runs: bool) -> None:
    """List the scenarios shipped in scenarios/ and recent runs (or the runs in FOLDER, a results root)."""
    import yaml

    click.secho("Scenarios:", bold=True)
    for path in sorted(SCENARIOS_DIR.rglob("*.yaml")):
        try:
            desc = (yaml.safe_load(path.read_text()) or {}).get("description", "")
        except yaml.YAMLError:
            desc = "(not valid YAML)"
        first = str(desc).strip().splitlines()[0] if desc else ""
        click.echo(f"  {str(path.relative_to(PROJECT_ROOT)):<40} {first}")
    if runs:
        from testbed.results import list_runs
        found = list_runs(folder)[-15:]
        click.secho("\nRecent runs:", bold=True)
        if not found:
            click.echo("  (none yet: try `testbed run scenarios/quickstart.yaml`)")
        for m in found:
            try:
                status = json.loads(m.read_text()).get("status", "?")
            except (OSError, json.JSONDecodeError):
                status = "unreadable"
            click.echo(f"  {str(m.parent.relative_to(PROJECT_ROOT) if m.is_relative_to(PROJECT_ROOT) else m.parent):<50} {status}")
        if found and folder is None:
            click.echo("  (runs written with --out are listed once seen; `testbed list FOLDER` lists a results root)")


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario field, e.g. --set topology.workers=8 --set links.loss_pct=1.")
@click.option("--net", "net_mode", type=click.Choice(["mininet", "local", "ssh", "cluster"]), default=None,
              help="mininet: namespaces, veths and the soft switch (needs root or user namespaces); "
                   "local: processes on loopback, no privileges; ssh: real servers of net.inventory; "
                   "cluster: Mininet cluster mode over net.cluster.servers. Default: the scenario's "
                   "net.mode (mininet).")
@click.option("--quick", is_flag=True, help="Run the scenario's reduced sweep (smoke test).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"Results root (default {DEFAULT_RESULTS_ROOT.relative_to(PROJECT_ROOT)}/).")
@click.option("--plot/--no-plot", default=True, show_default=True, help="Draw the scenario's figures at the end.")
@click.option("--max-points", type=click.IntRange(min=1), default=None, metavar="N",
              help="Allow sweeps of up to N points (default: the scenario's sweep.max_points, 10000); "
                   "same as --set sweep.max_points=N.")
@click.option("--dry-run", is_flag=True,
              help="Print what every point would do (commands per node, configs, P4Runtime and register "
                   "writes) without starting anything or writing a results folder.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as JSON.")
@click.option("--summary", "summary_only", is_flag=True,
              help="With --dry-run: one line per point (commands, configs, P4Runtime requests counted).")
def run(scenario: str, overrides: tuple[str, ...], net_mode: str | None, quick: bool, out_dir: Path | None,
        plot: bool, max_points: int | None, dry_run: bool, as_json: bool, summary_only: bool) -> None:
    """Run SCENARIO (a YAML file) and write a results folder.

    Each sweep point gets a fresh network; a failed point is recorded with its
    error and the sweep goes on. Ctrl-C stops cleanly: the network is torn down
    and completed points stay on disk.
    """
    from testbed.results import ResultsDirError, check_writable
    from testbed.scenario import ScenarioError, expand_points, load_scenario

    path = _scenario_path(scenario)
    if max_points is not None:
        overrides = (*overrides, f"sweep.max_points={max_points}")
    try:
        scn = load_scenario(path, list(overrides))
        points = expand_points(scn, quick=quick)
    except ScenarioError as e:
        _fail(f"invalid scenario:\n{e}")
    net_mode = net_mode or scn.net.mode
    set_paths = {p for p, _ in scn._cli_overrides}
    if scn.workload.kind == "torch" and "workload.script" in set_paths and "workload.args" not in set_paths \
            and scn.workload.args:
        click.secho(f"note: your script gets the scenario's workload.args {scn.workload.args}; "
                    f"--set 'workload.args=[...]' gives it its own (or [] for none)", fg="yellow", err=True)
    for key, value in points.ran()["pinned"].items():
        click.secho(f"note: --set {key}={value} pins a swept key: the sweep runs that value only "
                    f"({len(points)} point(s); the manifest's sweep_ran says what ran)", fg="yellow", err=True)
    if (as_json or summary_only) and not dry_run:
        _fail("--json and --summary describe a dry run: add --dry-run")
    if dry_run:
        _dry_run(scn, points, net_mode, as_json, summary_only)
        return
    if net_mode in ("ssh", "cluster"):
        _check_net_settings(scn, net_mode)
    try:
        check_writable(scn.name, out_dir)  # before anything starts, not after the first point
    except ResultsDirError as e:
        _fail(str(e))

    # Not for cluster: its servers and their SSH tunnels are reached through the
    # runner's own network namespace (docs/real-rack.md, section 4).
    if net_mode == "mininet":
        from testbed.net.isolation import enter_private_netns, isolation_available
        ok, reason = isolation_available()
        if not ok:
            _fail(f"--net mininet needs root or unprivileged user namespaces: {reason}. "
                  f"Run as root, or use --net local (no impairments).")
        # Before any thread exists: the whole run, and all it creates, lives in
        # its own network namespace and vanishes with it.
        enter_private_netns()

    from tqdm import tqdm
    from testbed import runner

    bar = tqdm(total=len(points), unit="point", desc=scn.name, dynamic_ncols=True)

    def on_start(run_dir: Path, pts: list) -> None:
        tqdm.write(f"run folder: {run_dir}  ({len(pts)} points, net={net_mode}{', quick' if quick else ''})")

    def on_point(o: runner.PointOutcome, total: int) -> None:  # noqa: ARG001
        bar.update(1)
        if o.status != "ok":
            color = "yellow" if o.status == "skipped" else "red"
            tqdm.write(click.style(f"  point {o.label}: {o.status.upper()}: {o.error}", fg=color))

    try:
        outcome = runner.run_points(scn, points, net_mode=net_mode, quick=quick, out_dir=out_dir,
                                    cli={"scenario": str(path), "overrides": list(overrides),
                                         "net": net_mode, "quick": quick},
                                    on_point=on_point, on_start=on_start)
    finally:
        bar.close()
    _print_summary(outcome.run_dir)
    if outcome.interrupted:
        click.secho(f"interrupted: network torn down; {sum(o.status == 'ok' for o in outcome.outcomes)} "
                    f"completed point(s) kept in {outcome.run_dir}", fg="yellow", err=True)
        sys.exit(130)
    if plot and scn.figures and any(o.status == "ok" for o in outcome.outcomes):
        _plot(outcome.run_dir, None)
    click.echo(f"\nresults: {outcome.run_dir}")
    if outcome.failed:
        click.secho(f"{len(outcome.failed)} point(s) did not complete; see points.jsonl and logs/", fg="red", err=True)
        sys.exit(1)


def _scenario_path(scenario: str) -> Path:
    """A scenario file as given (relative to the current folder), else under scenarios/."""
    path = Path(scenario)
    if path.is_dir():
        _fail(f"{scenario}: is a folder; give a scenario file (.yaml)")
    if not path.exists():
        cand = SCENARIOS_DIR / scenario
        if not cand.is_file():
            _fail(f"{scenario}: no such scenario file; `testbed list` shows the shipped ones")
        path = cand
    return path


def _check_net_settings(scn, net_mode: str) -> None:
    """--net ssh / cluster: their settings, checked before anything starts."""
    from testbed.net.base import NetworkError

    try:
        if net_mode == "ssh":
            from testbed.results import resolve_project_path
            from testbed.net.inventory import load_inventory
            if not scn.net.inventory:
                _fail("--net ssh needs net.inventory (e.g. --set net.inventory=rack/inventory.yaml); "
                      "see docs/real-rack.md")
            load_inventory(resolve_project_path(scn.net.inventory)).check_scenario(scn)
        elif scn.net.cluster is None:
            _fail("--net cluster needs net.cluster.servers in the scenario; see docs/real-rack.md")
    except NetworkError as e:
        _fail(str(e))


def _dry_run(scn, points, net_mode: str, as_json: bool, summary_only: bool = False) -> None:
    """Every point's plan, from the same code a run executes (testbed.runner.plan_points)."""
    from testbed import runner
    from testbed.net.base import NetworkError

    if net_mode in ("ssh", "cluster"):
        _check_net_settings(scn, net_mode)
    try:
        plan = runner.plan_points(scn, points, net_mode=net_mode)
    except NetworkError as e:
        _fail(str(e))
    if as_json:
        click.echo(json.dumps({"scenario": scn.name, "net": net_mode, "switch_backend": scn.switch.backend,
                               "points": plan.to_dict()}, indent=1))
        return
    click.echo(f"dry run of {scn.name}: {len(points)} point(s), net {net_mode}, switch {scn.switch.backend}; "
               f"nothing is started and no results folder is written\n")
    click.echo(plan.summary() if summary_only else plan.format())


def start_gate_line(gate: dict[str, Any]) -> str:
    """How the point's programs began (testbed.runner._open_start_gate's report)."""
    line = f"start: {gate['opened']}, {gate['saved_s']:.1f}s before the latest start"
    if gate.get("not_ready"):
        line += f" (not ready then: {', '.join(gate['not_ready'])})"
    return line


def _print_summary(run_dir: Path) -> None:
    from testbed.results import load_run, summary_legend

    r = load_run(run_dir)
    rows = []
    import csv
    csv_path = run_dir / "summary.csv"
    if csv_path.exists():
        with csv_path.open() as f:
            rows = list(csv.DictReader(f))
    if not rows:
        click.echo("(no points completed)")
        return
    cols = [c for c in rows[0] if c not in ("point",)]
    widths = {c: max(len(c), *(len(str(row.get(c, ""))) for row in rows)) for c in cols}
    click.echo("\n" + "  ".join(c.ljust(widths[c]) for c in cols))
    for row in rows:
        line = "  ".join(str(row.get(c, "")).ljust(widths[c]) for c in cols)
        click.secho(line, fg=None if row.get("status") == "ok" else "red")
    for line in summary_legend(cols):       # what hw_ / projected_hw_ / emu_ say
        click.echo(line)
    for w in r.manifest.get("warnings", []):
        click.secho(f"WARNING: {w}", fg="yellow", err=True)


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest and points as JSON.")
def show(run_dir: Path, as_json: bool) -> None:
    """Show a run: status, points, impairments applied, summary table.

    RUN_DIR is a run folder, or a scenario's results folder (its newest run).
    """
    from testbed.fidelity.records import headroom_line
    from testbed.pcap_ina import refusal_lines
    from testbed.results import NotARunError, load_run

    try:
        r = load_run(run_dir)
    except NotARunError as e:
        _fail(str(e))
    switch_counters: dict[str, dict] = {}
    calibrations: dict[str, list[dict]] = {}
    for rec in r.metrics_of("calibration"):
        calibrations.setdefault(rec.get("label"), []).append(rec)
    for rec in r.metrics_of("switch_counters"):
        switch_counters.setdefault(rec.get("label"), {})[rec.get("switch")] = rec.get("counters") or {}
    if as_json:
        click.echo(json.dumps({"manifest": r.manifest, "points": r.points}, indent=2))
        return
    m = r.manifest
    click.secho(f"{r.path}", bold=True)
    click.echo(f"scenario {m['scenario']['name']}: status {m.get('status')}, net {m.get('net')}, "
               f"switch {m.get('switch_backend')}, started {m.get('started_at')}, finished {m.get('finished_at')}")
    click.echo(f"git {m.get('git', {}).get('commit')}{' (dirty)' if m.get('git', {}).get('dirty') else ''}")
    click.echo(f"points: {len(r.points)} run of {len(m.get('points', []))} planned")
    for p in r.points:
        imp = [f"{i.get('direction') or i.get('link', '?')} {i.get('parameter')}={i.get('value')} "
               f"via {i.get('mechanism')}" + ("" if i.get("applied") else " NOT APPLIED")
               for i in p.get("impairments") or []]
        line = f"  {p['label']:<40} {p['status']:<8} {p.get('wall_s', 0):>7.1f}s"
        if imp:
            line += "  impairments: " + ", ".join(sorted(set(imp)))
        fid = p.get("fidelity") or {}
        if fid:
            # net/tdf: the network's measured slowdown over the dilation; a point with
            # no network operation (one worker) has none to compare.
            ratio = fid.get("ratio_p50")
            line += (f"  {'valid' if fid.get('valid') else 'INVALID'} (tdf {fid.get('tdf', 0):.4g}, "
                     + (f"net/tdf p50 {ratio:.2f})" if ratio is not None else "no network op timed)"))
        bad = p["status"] != "ok" or fid.get("valid") is False
        click.secho(line, fg="red" if bad else None)
        if p.get("error"):
            click.echo(f"      {p['error'].splitlines()[0]}")
        head = headroom_line(calibrations.get(p["label"], []))
        if head:
            click.echo(f"      {head}")
        if p.get("phases_s"):
            click.echo("      wall time: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}s"
                                                      for k, v in p["phases_s"].items()))
        if p.get("start_gate"):
            click.echo("      " + start_gate_line(p["start_gate"]))
        for reason in (fid.get("reasons") or []) if fid.get("valid") is False else []:
            click.echo(f"      invalid: {reason}")
        for line in refusal_lines(switch_counters.get(p["label"], {}), "      switch refused: "):
            click.secho(line, fg="yellow")
    _print_summary(r.path)


def _plot(run_dir: Path, names: list[str] | None) -> None:
    from testbed.plots import PlotError, draw_figures
    from testbed.results import NotARunError, load_run

    try:
        paths = draw_figures(load_run(run_dir), names)
    except (PlotError, NotARunError) as e:
        _fail(str(e))
    click.echo("figures:")
    for p in paths:
        click.echo(f"  {p}")


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--figure", "names", multiple=True, help="Draw only this figure (repeatable).")
def plot(run_dir: Path, names: tuple[str, ...]) -> None:
    """Draw the paper-style figures of a run into RUN_DIR/figures (PNG and PDF)."""
    _plot(run_dir, list(names) or None)


@main.command()
@click.argument("pcap_files", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--packets", "show_packets", type=int, default=0, metavar="N",
              help="Also list the first N aggregation packets decoded.")
def pcap(pcap_files: tuple[str, ...], as_json: bool, show_packets: int) -> None:
    """Summarize packet traces: hosts, flows, packets, bytes, retransmissions;
    and decode the in-network aggregation protocol per packet, chunk and worker.

    \b
    PCAP_FILES: one or more pcaps, or a folder of them (e.g. a point's
    results/<scenario>/<run>/pcaps/<point>/). Aggregation packets from several
    files are merged by time: give a switch's *_in.pcap (contributions) and
    *_out.pcap (results) together to see completion latency. Frames captured
    cut short (switch.capture_bytes) count at their length on the wire and
    decode from their headers; the summary says they were cut.
    """
    from testbed import pcap_ina
    from testbed.pcap import PcapError, format_summary, summarize

    files: list[Path] = []
    for f in pcap_files:
        p = Path(f)
        files.extend(sorted(p.glob("*.pcap")) if p.is_dir() else [p])
    if not files:
        _fail(f"no .pcap files in {', '.join(pcap_files)}")
    groups = pcap_ina.by_capture_point(files)
    try:
        summaries = [summarize(f) for f in files]
        decoded = {where: pcap_ina.analyze(fs) for where, fs in groups.items()}
    except PcapError as e:
        _fail(str(e))
    where_text = {"switch": "at the switch ports", "other": "at the hosts' interfaces (switch.capture_hosts)"}
    if as_json:
        out = {"files": [s.to_dict() for s in summaries]}
        for where, ina in decoded.items():
            out["ina" if where == "switch" or len(decoded) == 1 else "ina_at_hosts"] = ina.to_dict()
        click.echo(json.dumps(out, indent=2))
        return
    for s in summaries:
        click.echo(format_summary(s))
        click.echo("")
    if not any(ina.packets for ina in decoded.values()):
        click.echo("no in-network aggregation packets in these traces")
    for where, ina in decoded.items():
        if ina.packets:
            if len(decoded) > 1:
                click.echo(f"--- captured {where_text[where]} ---")
            click.echo(ina.format(show_packets))


@main.command()
@click.argument("paper", required=False)
@click.option("--list", "list_papers", is_flag=True, help="Name the papers and their headlines, run nothing.")
@click.option("--quick", is_flag=True, help="The reduced run: each scenario's quick sweep, the quick seeds.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Results root (default results/); the report goes to OUT/reproduce/PAPER/<timestamp>/.")
@click.option("--net", "net_mode", type=click.Choice(["mininet", "local"]), default="mininet", show_default=True,
              help="Network of the emulated runs.")
@click.option("--no-emulation", is_flag=True,
              help="Projections, envelopes and verdicts only: run no scenario (the emulated column says so).")
@click.option("--from", "from_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Rewrite the report of an earlier reproduction from its kept results (emulated.jsonl).")
def reproduce(paper: str | None, list_papers: bool, quick: bool, out_dir: Path | None, net_mode: str,
              no_emulation: bool, from_dir: Path | None) -> None:
    """Does PAPER's headline hold, and under which assumptions?

    Runs the paper's scenarios over several seeds, projects each headline at the
    paper's setting on the hardware models with its envelope over the assumed
    constants, and writes report.md / report.json / figures with a computed
    verdict per headline: reproduced, within_envelope or not_reproduced.
    """
    from testbed.reproduce.engine import PAPERS, ReproduceError, headline_table, reproduce as run_reproduction

    if list_papers or not paper:
        if not list_papers:
            _fail(f"name a paper ({', '.join(PAPERS)}) or use --list")
        for name in PAPERS:
            rows = headline_table(name)
            click.echo(f"{name}:")
            for r in rows:
                unit = "×" if r["unit"] == "x" else f" {r['unit']}"
                above = "> " if r["direction"] == "above" else ""      # a claim of direction: above this value
                click.echo(f"  {r['id']:<22} {above}{r['paper_value']:g}{unit}  {r['claim']}  [{r['source']}]")
        return
    if from_dir is not None and (quick or no_emulation):
        _fail("--from rewrites an earlier report as it ran; it takes no --quick or --no-emulation")
    if not no_emulation and from_dir is None and net_mode == "mininet":
        from testbed.net.isolation import enter_private_netns, isolation_available
        ok, reason = isolation_available()
        if not ok:
            _fail(f"--net mininet needs root or unprivileged user namespaces: {reason}. "
                  f"Use --net local, or --no-emulation for the projections alone.")
    try:
        # The engine loads every scenario of the paper before anything runs (bad input: one error).
        if not no_emulation and from_dir is None and net_mode == "mininet":
            enter_private_netns()
        rep = run_reproduction(paper, quick=quick, out=out_dir, net_mode=net_mode, emulate=not no_emulation,
                               from_dir=from_dir, progress=lambda s: click.echo(f"[reproduce] {s}"))
    except ReproduceError as e:
        _fail(str(e))
    except KeyboardInterrupt as e:
        click.secho(f"interrupted: completed points and a partial report kept in {e}", fg="yellow", err=True)
        sys.exit(130)
    click.echo("")
    for h in rep.headlines:
        d = h.to_dict()
        click.echo(f"{d['id']:<22} {click.style(d['verdict'], bold=True)}: {d['reason']}")
    click.echo(f"\nreport: {rep.report_dir / 'report.md'}  ({rep.wall_s:.0f} s)")


@main.group()
def net() -> None:
    """Keep one point's network up to poke at it (as p4run does): pingall, iperf, host shells.

    \b
      testbed net up scenarios/quickstart.yaml            # mininet> prompt; exit tears it down
      testbed net up scenarios/quickstart.yaml --no-cli   # stays up until Ctrl-C or `testbed net down`
      testbed switch tables                                # the live switch's table entries
    """


@net.command("up")
@click.argument("scenario")
@click.option("--point", "point_sel", default=None, metavar="LABEL|INDEX",
              help="Which sweep point's network (default: the first); `testbed run --dry-run --summary` lists them.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario value.")
@click.option("--quick", is_flag=True, help="Pick the point from the scenario's quick sweep.")
@click.option("--no-cli", is_flag=True, help="No mininet> prompt: keep the network up until Ctrl-C or `net down`.")
@click.option("--name", default=None, help="Name of the live network (default: the scenario's name).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Results root for its logs and captures (default results/).")
def net_up(scenario: str, point_sel: str | None, overrides: tuple[str, ...], quick: bool, no_cli: bool,
           name: str | None, out_dir: Path | None) -> None:
    """Build SCENARIO's network (one point: switches programmed, impairments applied) and keep it up."""
    from testbed import live
    from testbed.results import ResultsDirError, check_writable, new_run_dir
    from testbed.scenario import ScenarioError, expand_points, load_scenario

    path = _scenario_path(scenario)
    try:
        scn = load_scenario(path, list(overrides))
        points = expand_points(scn, quick=quick)
    except ScenarioError as e:
        _fail(f"invalid scenario:\n{e}")
    if scn.net.mode != "mininet":
        _fail(f"net up builds Mininet networks; {path} sets net.mode {scn.net.mode}")
    if point_sel is None:
        point = points[0]
    elif point_sel.isdigit() and int(point_sel) < len(points):
        point = points[int(point_sel)]
    else:
        point = next((p for p in points if p.label == point_sel), None)
        if point is None:
            _fail(f"no point {point_sel!r}; points: " + ", ".join(h["label"] for h in points.headers()))
    name = name or scn.name
    if any(n.name == name for n in live.live_networks()):
        _fail(f"a live network named {name!r} exists; `testbed net down --net {name}` or choose --name")
    try:
        check_writable(scn.name, out_dir)
    except ResultsDirError as e:
        _fail(str(e))
    from testbed.net.isolation import enter_private_netns, isolation_available
    ok, reason = isolation_available()
    if not ok:
        _fail(f"net up needs root or unprivileged user namespaces: {reason}")
    enter_private_netns()
    run_dir = new_run_dir(scn.name, out_dir)

    def ready(network) -> None:
        hosts = ", ".join(f"{h} {i.ip}" for h, i in sorted(network.hosts.items()))
        click.echo(f"live network {name!r}: point {point.label}; hosts {hosts}; switches "
                   + ", ".join(f"{sw} P4Runtime {a}" for sw, a in sorted(network.switch_info.get('p4runtime', {}).items()))
                   + f"\nlogs and captures: {run_dir}\n"
                   + ("`testbed switch tables|counters|read` reads the switches; Ctrl-C or `testbed net down` ends it"
                      if no_cli else "at the mininet> prompt: pingall, iperf w1 w2, w1 ping -c1 w2, exit (tears it down)"), err=no_cli)

    from testbed.outcomes import SkipPoint
    try:
        live.keep_up(point, run_dir, name, cli=not no_cli, on_ready=ready)
    except SkipPoint as e:
        _fail(f"point {point.label} cannot run here: {e}")
    click.echo(f"network {name!r} torn down", err=True)


@net.command("down")
@click.option("--net", "name", default=None, help="The live network's name (default: the only one).")
def net_down(name: str | None) -> None:
    """Tear down a network `testbed net up --no-cli` keeps up."""
    from testbed import live
    try:
        target = live.find(name)
    except live.LiveError as e:
        _fail(str(e))
    if not live.stop(target):
        _fail(f"{target.name}: process {target.pid} did not end within 30 s; `testbed clean` removes leftovers")
    click.echo(f"network {target.name!r} torn down")


@net.command("list")
def net_list() -> None:
    """Live networks (`net up`, and points of runs in progress)."""
    from testbed import live
    nets = live.live_networks()
    if not nets:
        click.echo("no live network")
    for n in nets:
        click.echo(f"{n.name}: point {n.point} of {n.scenario}, pid {n.pid}, switches "
                   + ", ".join(f"{sw} {a}" for sw, a in sorted(n.p4runtime.items())) + f", run {n.run_dir}")


@main.group()
def switch() -> None:
    """Live switch state over P4Runtime (a `net up` network or a running point): tables, counters, registers."""


def _switch_controllers(name: str | None, sw: str | None):
    from testbed import live
    try:
        target = live.find(name)
        live.enter_netns_of(target.pid)
        logs = Path(target.run_dir) / "logs" / "live"
        logs.mkdir(parents=True, exist_ok=True)
        return live.controllers(target, sw, logs)
    except live.LiveError as e:
        _fail(str(e))
    except Exception as e:  # noqa: BLE001 - a switch that does not answer: say which and why
        _fail(f"cannot read the switch: {e}")


_NET_OPT = click.option("--net", "name", default=None, help="The live network (default: the only one).")
_SW_OPT = click.option("--switch", "sw", default=None, help="One switch (default: every switch).")


@switch.command("tables")
@_NET_OPT
@_SW_OPT
def switch_tables(name: str | None, sw: str | None) -> None:
    """Every table's entries and the multicast groups."""
    for s, c in _switch_controllers(name, sw).items():
        try:
            for t in c.p4info.tables:
                entries = c.read_table(t.preamble.name)
                click.echo(f"{s} {t.preamble.name}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
                for e in entries:
                    click.echo(f"  {e['match']} -> {e['action']}{e['params'] or ''}")
            for g, reps in sorted(c.read_multicast_groups().items()):
                click.echo(f"{s} multicast group {g}: ports {[p for p, _ in reps]}")
        finally:
            c.close()


@switch.command("counters")
@_NET_OPT
@_SW_OPT
@click.option("--all", "show_all", is_flag=True, help="Also cells that counted nothing.")
def switch_counters(name: str | None, sw: str | None, show_all: bool) -> None:
    """Every counter's cells (packets, bytes)."""
    for s, c in _switch_controllers(name, sw).items():
        try:
            for cname, cells in c.read_counters(nonzero_only=not show_all).items():
                line = ", ".join(f"[{i}] {p} pkts {b} B" for i, (p, b) in sorted(cells.items())) or "0"
                click.echo(f"{s} {cname}: {line}")
        finally:
            c.close()


@switch.command("read")
@click.argument("register")
@click.option("--index", type=int, default=None, help="One cell (default: every cell).")
@click.option("--nonzero", is_flag=True, help="Only cells that are not zero.")
@_NET_OPT
@_SW_OPT
def switch_read(register: str, index: int | None, nonzero: bool, name: str | None, sw: str | None) -> None:
    """A register's cells (soft switch: P4Runtime; BMv2: its Thrift runtime)."""
    from testbed.switch.controller import ControllerError
    for s, c in _switch_controllers(name, sw).items():
        try:
            names = [r.preamble.name for r in c.p4info.registers]
            if register not in names:
                _fail(f"{s}: no register {register!r}; registers: {', '.join(names)}")
            cells = c.read_register(register, index)
        except ControllerError as e:
            _fail(str(e))
        finally:
            c.close()
        shown = {i: v for i, v in sorted(cells.items()) if v or not nonzero}
        click.echo(f"{s} {register}: {len(cells)} cell(s)" + (f", {len(shown)} not zero" if nonzero else ""))
        for i, v in list(shown.items())[:4096]:
            click.echo(f"  [{i}] {v}")


@main.command()
def doctor() -> None:
    """Check what the testbed needs on this machine, with a fix for each gap."""
    from testbed.doctor import format_report, run_checks

    checks = run_checks()
    click.echo(format_report(checks))
    if any(not c.ok and not getattr(c, "optional", False) for c in checks):
        sys.exit(1)


@main.command()
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
def clean(dry_run: bool) -> None:
    """Remove leftovers of crashed runs: only processes the testbed recorded starting."""
    from testbed.clean import clean as do_clean

    actions = do_clean(dry_run=dry_run)
    if not actions:
        click.echo("nothing to clean: no leftovers of crashed runs")
    for a in actions:
        click.echo(a)


if __name__ == "__main__":
    main()
