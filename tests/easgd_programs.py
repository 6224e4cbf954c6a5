"""The host configs an EASGD scenario's point gives its programs, built without
running anything (what the unit tests of workload settings read)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def easgd_host_configs(scenario_yaml: str, work_dir: Path) -> dict[str, dict[str, Any]]:
    """{host: its program's JSON config} for the first point of `scenario_yaml` on loopback."""
    from testbed.scenario import expand_points, load_scenario_text
    from testbed.workloads.base import PointContext
    from testbed.workloads.easgd import EasgdRuntime

    scn = load_scenario_text(scenario_yaml, "t.yaml")
    point = expand_points(scn)[0]
    hosts = {h: SimpleNamespace(name=h, ip=f"127.0.1.{i}", mac=None) for i, h in enumerate(scn.hosts(), 1)}
    ctx = PointContext(point=point, hosts=hosts, work_dir=work_dir, net_mode="local", start_at=1000.0)
    return {p.host: json.loads(Path(p.argv[-1]).read_text()) for p in EasgdRuntime().programs(ctx)}
