"""The projection of a ShadowSync point to the modeled hardware (docs/shadowsync.md):
the fidelity monitor's verdict on the point's own traces, then those traces
synthesized to every trainer count of `project_trainers` (16-64 in the paper's
regime) with a fixed or growing set of parameter servers, each trainer's Hogwild
workers and shadow on one host (its NIC, cores and memory), and the servers'
service time from the measured per-request costs (PsCosts).

The workload module (testbed/workloads/shadowsync.py) runs the point; this one
only reads what it recorded, and imports nothing of it (a workload is typed
`ShadowSyncWorkload` by name only): the dependency points one way, workload ->
projection.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple


def fidelity_records(scenario: Any, work_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The fidelity monitor's verdict and the projections (testbed.fidelity.records).

    Traced: every trainer's Hogwild worker 0, the servers (role server) and, S-*, the
    shadows (role shadow, their allreduces in group "trainers"). Throughput on the
    modeled hardware is read from the workers' finish in the projection, not its
    makespan (the shadows replay the syncs they made in the emulation and may end
    later or earlier than the workers without changing the workers' time):
    projected_hw_examples_per_s = trainers x hogwild_workers x iterations x batch /
    the last worker's finish. Then the same traces synthesized to every count of
    `project_trainers` (synthesize_trainers)."""
    from testbed.fidelity.records import fidelity_and_projection  # noqa: PLC0415

    wl: ShadowSyncWorkload = scenario.workload
    n = summary["trainers"]
    summary["valid"] = summary["device_valid"]
    reason = f"{summary['device_violations']} step(s) where the CPU was slower than the dilated device model"
    from testbed.fidelity.monitor import load_traces  # noqa: PLC0415
    try:
        source: Any = shadows_on_trainer_nics(load_traces(work_dir))
    except ValueError:          # no traces: fidelity_and_projection says so in the summary
        source = work_dir
    pf = fidelity_and_projection(source, wl.hardware, summary["tdf"], "shadowsync", wl.iterations, summary,
                                 max_nodes=None, device_reason=reason,
                                 extra={"label": summary["label"], "trainers": n})
    out = pf.records
    if pf.projected is None:
        return out
    rate = projected_rate(pf.projected, n, wl)
    summary["projected_hw_examples_per_s"] = rate
    summary["projected_hw_iter_ms"] = n * wl.hogwild_workers * wl.batch_size / rate * 1e3
    if summary.get("hw_examples_per_s"):
        summary["emulated_over_projected"] = rate / summary["hw_examples_per_s"]
    pf.projection["hw_examples_per_s"] = rate
    summary["projected"] = {}
    # the point's own count too, with the same measured PS costs, so that the scaling
    # line compares like with like (projected_hw_examples_per_s keeps the recorded PS
    # times, ~0 once dilated, to compare with the emulation)
    counts = sorted(set(wl.project_trainers) | {n}) if wl.project_trainers else []
    host = trainer_host(wl)
    for m in counts:
        servers = projected_server_counts(pf.traces, m, wl.project_servers_per_trainer)
        try:
            proj = project_trainers(pf.traces, m, pf.profile, wl.project_servers_per_trainer,
                                    measured_ps_costs(wl), hogwild=wl.hogwild_workers, host=host)
        except (ValueError, RuntimeError) as e:      # named in the record, never hidden
            out.append({"type": "shadowsync_projection", "label": summary["label"], "trainers": m,
                        "from_trainers": n, "servers": servers, "error": f"{type(e).__name__}: {e}"})
            continue
        r = projected_rate(proj, m, wl)
        summary["projected"][str(m)] = r
        summary.setdefault("projected_servers", {})[str(m)] = servers
        out.append({"type": "shadowsync_projection", "label": summary["label"], "trainers": m, "from_trainers": n,
                    "servers": servers, "hw_examples_per_s": r, "hw_run_s": proj.makespan_s,
                    "profile": pf.profile.label(), "trainer_cores": host.cores, "sync_update_s": host.update_s})
    return out


def projected_rate(proj: Any, trainers: int, wl: ShadowSyncWorkload) -> float:
    """Examples/s on the modeled hardware: every Hogwild worker of every trainer runs
    its iterations; worker ranks are 0..trainers-1 (one traced worker per trainer,
    its Hogwild siblings run alongside on their own device streams [A])."""
    span = max(proj.finish_s[r] for r in range(trainers)) * proj.extrapolation
    return trainers * wl.hogwild_workers * wl.iterations * wl.batch_size / span


def server_plan(traces: list, trainers: int, per_trainer: float | None) -> list[tuple[list[str], dict[str, float]]]:
    """How the servers change at `trainers` trainers (project_servers_per_trainer): per
    kind whose count changes, (the recorded servers, {projected server: its share}).
    Embedding PSs: ceil(trainers x per_trainer), at least the recorded count, at most one
    per table, the tables re-spread table-wise (config.tables_of), a server's share its
    tables / all tables; sync PSs (EASGD): as many, the dense vector split evenly [A]."""
    from hosts.shadowsync.config import tables_of  # noqa: PLC0415
    if per_trainer is None:
        return []
    heads = [h for h, _ in traces if h.get("role") == "server"]
    emb = sorted((str(h["host"]) for h in heads if h.get("server") == "embedding_ps"), key=lambda n: int(n[3:]))
    sync = [str(h["host"]) for h in heads if h.get("server") == "sync_ps"]
    want, tables = math.ceil(trainers * per_trainer - 1e-9), 26
    plan = []
    e = min(tables, max(len(emb), want))
    if emb and e != len(emb):
        plan.append((emb, {f"emb{i + 1}": len(tables_of(i, e, tables)) / tables for i in range(e)}))
    n = max(len(sync), want)
    if sync and n != len(sync):
        plan.append((sync, {("syncps" if i == 0 else f"syncps{i + 1}"): 1.0 / n for i in range(n)}))
    return plan


def projected_server_counts(traces: list, trainers: int, per_trainer: float | None) -> dict[str, int]:
    """{"embedding_ps": E, "sync_ps": S} at `trainers` trainers (server_plan; recorded when unchanged)."""
    heads = [h for h, _ in traces if h.get("role") == "server"]
    out = {k: sum(1 for h in heads if h.get("server") == k) for k in ("embedding_ps", "sync_ps")}
    for old, shares in server_plan(traces, trainers, per_trainer):
        out["embedding_ps" if old[0].startswith("emb") else "sync_ps"] = len(shares)
    return {k: v for k, v in out.items() if v}


def synthesize_trainers(traces: list, trainers: int, per_trainer: float | None = None, hogwild: int = 1) -> list:
    """The job at `trainers` trainers: trainer rank 0's worker trace replicated
    (server_model.synthesize_workers: p2p groups renamed per replica), and, S-*,
    its shadow's trace replicated beside each replica as "projected<r>-shadow"
    (ranks trainers..2 x trainers - 1; its sync allreduces keep their group, so all
    shadows meet in them; its messages to the sync PS are renamed to its own name)
    on its trainer's NIC (header `nic: projected<r>`: fabric.py queues its traffic on
    the trainer's links).
    per_trainer (project_servers_per_trainer): the template's messages to the servers
    are first re-spread over the projected servers (server_plan,
    server_model.respread_messages).
    hogwild: Hogwild workers per trainer. Only worker 0 is traced; its siblings' LOOKUPs
    and PUSHes cross the same NIC at the same time, so each of the template's messages
    to and from an embedding PS carries `hogwild` workers' values [A: H concurrent
    requests sharing a link finish about when one H-times-larger message would; the
    paper module's job() merges them so too]. Charge such a message as H requests
    (PsCosts.apply's merged).
    Servers are not in the result: project them with server_model.service_models
    (and respread_service_models)."""
    from hosts.common.trace import p2p_group, parse_p2p_group  # noqa: PLC0415
    from testbed.fidelity.server_model import respread_messages, synthesize_workers  # noqa: PLC0415

    role = lambda t: t[0].get("role", "worker")  # noqa: E731
    workers = sorted((t for t in traces if role(t) == "worker"), key=lambda t: int(t[0]["rank"]))
    shadows = sorted((t for t in traces if role(t) == "shadow"), key=lambda t: int(t[0]["rank"]))
    servers = [t for t in traces if role(t) == "server"]
    plan = server_plan(traces, trainers, per_trainer)
    added = [name for _, shares in plan for name in shares]

    def respread(t: tuple) -> tuple:
        h, nodes = t
        for old, shares in plan:
            nodes = respread_messages(nodes, old, shares)
        return h, nodes
    if plan:
        workers = [respread(t) if int(t[0]["rank"]) == int(workers[0][0]["rank"]) else t for t in workers]
        shadows = [respread(shadows[0])] if shadows else []
    if hogwild > 1:
        emb = {str(h["host"]) for h, _ in servers if h.get("server") == "embedding_ps"}
        emb |= {name for old, shares in plan if old[0].startswith("emb") for name in shares}
        h0, nodes0 = workers[0]
        workers = [(h0, merge_sibling_traffic(nodes0, emb, hogwild))] + workers[1:]
    world = trainers * (2 if shadows else 1)
    out = [({**h, "world": world}, nodes)
           for h, nodes in synthesize_workers(workers + servers, trainers, more_servers=added)]
    if shadows:
        sh, nodes = shadows[0]
        tmpl = ({**sh, "role": "worker", "rank": 0}, nodes)
        for h, ns in synthesize_workers([tmpl] + servers, trainers, more_servers=added):
            me = f"{h['host']}-shadow"

            def rename(g: str, me=me, was=h["host"]) -> str:
                tag, src, dst = parse_p2p_group(g)
                return p2p_group(tag, me if src == was else src, me if dst == was else dst)
            ns = [{**n, "group": rename(n["group"])} if n["kind"] == "comm" and n["algo"] == "p2p" else n
                  for n in ns]
            # the shadow is a process on its trainer's host: its messages and allreduces
            # use the trainer's NIC (fabric.py), queueing with the lookups and pushes
            out.append(({**h, "host": me, "nic": h["host"], "role": "shadow", "rank": trainers + int(h["rank"]),
                         "world": world}, ns))
    return out


def merge_sibling_traffic(nodes: list, servers: set[str], hogwild: int) -> list:
    """`nodes` with every p2p message to or from one of `servers` carrying `hogwild`
    times its values (synthesize_trainers: the untraced Hogwild workers' bytes)."""
    from hosts.common.trace import parse_p2p_group  # noqa: PLC0415
    out = []
    for n in nodes:
        if n["kind"] == "comm" and n["algo"] == "p2p":
            _, src, dst = parse_p2p_group(n["group"])
            if src in servers or dst in servers:
                n = {**n, "values": int(n["values"]) * hogwild}
        out.append(n)
    return out


def shadows_on_trainer_nics(traces: list) -> list:
    """The recorded traces with each shadow's header naming its trainer's NIC (`nic`,
    from the header's `trainer`): the emulated shadow is a process on its trainer's
    host, traced under `<host>-shadow` so that its messages have a name of their own."""
    out = []
    for h, nodes in traces:
        if h.get("role") == "shadow":
            if not h.get("trainer"):
                raise ValueError(f"trace of {h.get('host')}: a shadow whose header names no trainer")
            h = {**h, "nic": str(h["trainer"])}
        out.append((h, nodes))
    return out


class TrainerHost(NamedTuple):
    """A trainer's host in the projections: its cores and one sync's update time."""
    cores: int
    update_s: float


def trainer_host(wl: "ShadowSyncWorkload") -> TrainerHost:
    """The workload's trainer host (trainer_cores, null: hogwild_workers; the update:
    rules.sync_bytes of the dense vector at trainer_mem_GBps)."""
    from hosts.shadowsync.rules import sync_bytes  # noqa: PLC0415
    cores = wl.trainer_cores if wl.trainer_cores is not None else wl.hogwild_workers
    if wl.algorithm == "none":
        return TrainerHost(cores, 0.0)
    return TrainerHost(cores, sync_bytes(wl.algorithm, wl.model.dense_values(), wl.nesterov) / (wl.trainer_mem_GBps * 1e9))


def on_trainer_hosts(traces: list, host: TrainerHost, hogwild: int) -> list:
    """The synthesized traces with each trainer's host cores modeled (testbed/fidelity/
    host_cpu.py): the worker trace (Hogwild worker 0 standing for its `hogwild` workers)
    is that many threads on `host.cores` cores, a shadow (on its trainer's NIC, so its
    host) one thread; every sync step (the compute node hosts' Syncer records before a
    sync, work {"step": "sync"}: the shadow's, or worker 0's in the foreground while its
    workers wait) costs `host.update_s`, the time the emulation does not charge."""
    out = []
    for h, nodes in traces:
        role = h.get("role", "worker")
        if role == "server":
            out.append((h, nodes))
            continue
        extra = {"threads": hogwild, "host_cores": host.cores} if role == "worker" else {"threads": 1}
        nodes = [{**n, "hw_s": host.update_s} if n["kind"] == "compute" and (n.get("work") or {}).get("step") == "sync"
                 else n for n in nodes]
        out.append(({**h, **extra}, nodes))
    return out


def project_trainers(traces: list, trainers: int, profile: Any, per_trainer: float | None = None,
                     ps_costs: "PsCosts | None" = None, hogwild: int = 1, host: TrainerHost | None = None) -> Any:
    """The projection at `trainers` trainers (synthesize_trainers; the servers as
    service models, testbed/fidelity/server_model.py, re-spread per server_plan).
    ps_costs: what a server request costs (measured_ps_costs); None keeps the recorded
    service times (the emulated PSs' hardware time, ~0: their CPU time is dilated away).
    hogwild: the Hogwild workers whose PS traffic each template message carries
    (synthesize_trainers); with ps_costs it must equal ps_costs.hogwild.
    host: the trainers' hosts (trainer_host; on_trainer_hosts): each sync's update costs
    its time on the trainer's cores; None: the recorded sync steps (0 s), no cores."""
    if ps_costs is not None and hogwild not in (1, ps_costs.hogwild):
        raise ValueError(f"project_trainers: hogwild {hogwild} but the PS costs are for {ps_costs.hogwild}")
    from testbed.fidelity.projector import project  # noqa: PLC0415
    from testbed.fidelity.server_model import respread_service_models, service_models  # noqa: PLC0415

    synth = synthesize_trainers(traces, trainers, per_trainer, hogwild)
    if host is not None:
        synth = on_trainer_hosts(synth, host, hogwild)
    models = service_models(traces, len(synth))
    for old, shares in server_plan(traces, trainers, per_trainer):
        models = respread_service_models(models, old, shares, len(synth))
    if ps_costs is not None:
        plan = server_plan(traces, trainers, per_trainer)
        gone = {h for old, _ in plan for h in old}
        ours = {str(h["host"]) for h, _ in traces if h.get("server") in PS_KINDS} - gone
        models = ps_costs.apply(models, synth, ours | {h for _, shares in plan for h in shares},
                                merged=hogwild)
    return project(synth, profile, services=models)


PS_KINDS = ("embedding_ps", "sync_ps")      # the server traces' `server`: the PSs PsCosts models


class PsCosts:
    """Server service time per request from a per-request cost (testbed/reproduce/
    measurements/shadowsync_ps.py: the project's own PS code, measured): LOOKUP and PUSH
    cost fixed + per row (rows: the request's ids; a push's values / dim), ELASTIC fixed +
    per dense value. Each traced worker request stands for `hogwild` workers' requests
    (only Hogwild worker 0 is traced): the embedding PS serves them one after another
    (the emulated PS's threads share one interpreter), so a traced request costs hogwild x
    one request. A shadow's ELASTIC is one request (one shadow per trainer)."""

    def __init__(self, lookup: Any, push: Any, elastic: Any, hogwild: int, dim: int):
        if hogwild < 1 or dim < 1:
            raise ValueError(f"PsCosts: hogwild {hogwild} and dim {dim} must be >= 1")
        self.lookup, self.push, self.elastic, self.hogwild, self.dim = lookup, push, elastic, hogwild, dim

    def request_s(self, tag: str, values: float) -> float:
        """Seconds one traced request of `tag` with `values` values costs its server."""
        if tag == "lookup":
            return self.hogwild * self.lookup.seconds(values)
        if tag == "push":
            return self.hogwild * self.push.seconds(values / self.dim)
        if tag == "elastic":
            return self.elastic.seconds(values)
        raise ValueError(f"PsCosts: no measured cost for a {tag!r} request")

    def apply(self, models: list, traces: list, hosts: set[str], merged: int = 1) -> list:
        """The service models of the ShadowSync PSs `hosts` with each tag's time from the
        mean size of the requests the worker and shadow traces send that server; other
        servers (the torch PS of `collective: ps`) keep their recorded model.
        merged: the Hogwild workers a LOOKUP/PUSH message carries (synthesize_trainers'
        hogwild; 1 or self.hogwild): such a message is `hogwild` requests of 1/merged
        of its values each. ELASTIC (one per shadow or trainer) is never merged."""
        if merged not in (1, self.hogwild):
            raise ValueError(f"PsCosts: merged {merged} must be 1 or hogwild {self.hogwild}")
        from dataclasses import replace  # noqa: PLC0415

        from hosts.common.trace import parse_p2p_group  # noqa: PLC0415
        sizes: dict[tuple[str, str], list[int]] = {}
        for _, nodes in traces:
            for n in nodes:
                if n["kind"] == "comm" and n["algo"] == "p2p" and n["op"] == "send":
                    tag, _, dst = parse_p2p_group(n["group"])
                    sizes.setdefault((dst, tag), []).append(int(n["values"]))
        out = []
        for m in models:
            if m.host not in hosts:
                out.append(m)
                continue
            got = {}
            for tag in m.service_s:
                v = sizes.get((m.host, tag))
                if not v:
                    raise ValueError(f"PsCosts: no {tag!r} request to {m.host} in the traces")
                per = 1 if tag == "elastic" else merged
                got[tag] = self.request_s(tag, sum(v) / len(v) / per)
            out.append(replace(m, service_s=got))
        return out


def measured_ps_costs(wl: "ShadowSyncWorkload") -> PsCosts:
    """The measured costs (testbed/reproduce/measurements/shadowsync_ps.py) for the
    workload's embedding dim; PsCostError (a ValueError) names a dim not measured."""
    from testbed.reproduce.measurements.shadowsync_ps import ps_cost  # noqa: PLC0415
    dim = wl.model.dim
    return PsCosts(ps_cost("lookup", dim), ps_cost("push", dim), ps_cost("elastic"), wl.hogwild_workers, dim)
