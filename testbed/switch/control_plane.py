"""The run's control plane: one P4Runtime controller per switch, driven by the
runner. It pushes the program, installs the L2 forwarding the network planned,
the flood group and the aggregation jobs the workload asks for, arms the
program's drop simulators where the impairment plan put link loss on them
(BMv2: impairments.py's drop_simulator mechanism), and at the end reads the
program's counters into the run's metrics. Every request is logged
per switch in logs/<point>/<switch>-p4runtime-requests.txt; the jobs installed
(each worker's id and switch port) are written to logs/<point>/JOBS_FILE, so
`testbed pcap` can tell which contributions the port binding refused.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.results import PROJECT_ROOT
from testbed.switch.jobs import AGGREGATION_SWITCH, JobRequest, plan_jobs

P4_DIR = PROJECT_ROOT / "p4"
JOBS_FILE = "ina-jobs.json"


def p4info_path(program: str) -> Path:
    path = P4_DIR / f"{program}.p4info.txtpb"
    if not path.exists():
        raise FileNotFoundError(f"switch.program {program!r}: no P4Info at {path}; "
                                f"programs available: {sorted(p.name.split('.')[0] for p in P4_DIR.glob('*.p4info.txtpb'))}")
    return path


def pipeline_config(switch_info: dict[str, Any], program: str) -> tuple[str, bytes]:
    """(P4Info path, device config) for SetForwardingPipelineConfig. BMv2 gets the
    JSON p4c compiled for this point and p4c's P4Info (switch_info["pipeline_config"]);
    the soft switch gets the checked-in P4Info and the program's name."""
    compiled = switch_info.get("pipeline_config")
    if compiled:
        return str(compiled["p4info"]), Path(compiled["device_config"]).read_bytes()
    return str(p4info_path(program)), program.encode()


def register_backends(switch_info: dict[str, Any]) -> dict[str, Any]:
    """{switch: make(request_log) -> register backend} for switches whose P4Runtime
    server has no register RPCs: BMv2 (switch_info["bmv2"], from
    bmv2.control_info), whose registers go through its Thrift port. Others: {}."""
    bmv2_info = switch_info.get("bmv2")
    if not bmv2_info:
        return {}
    from testbed.switch import bmv2  # noqa: PLC0415
    from testbed.switch.bmv2_registers import ThriftRegisters  # noqa: PLC0415
    tools = bmv2.tools(bmv2_info.get("prefix"))
    return {sw: (lambda log, sw=sw, addr=addr: ThriftRegisters(sw, addr, tools, log))
            for sw, addr in bmv2_info["thrift"].items()}


@dataclass
class ControlPlane:
    controllers: dict[str, Any] = field(default_factory=dict)
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, net: Any, program: str, logs_dir: Path, job_requests: list[JobRequest],
              controller_cls: Any = None) -> "ControlPlane":
        """controller_cls: SwitchController (default), or a dry run's
        testbed.switch.recording.RecordingController bound to its recorder."""
        from testbed.switch.controller import SwitchController  # noqa: PLC0415 - grpc import is slow
        from testbed.switch.p4runtime_server import device_id_for  # noqa: PLC0415

        controller_cls = controller_cls or SwitchController
        info = net.switch_info
        p4info, device_config = pipeline_config(info, program)
        registers = register_backends(info)
        cp = cls()
        try:
            for sw, addr in sorted(info["p4runtime"].items()):
                c = controller_cls(sw, addr, info.get("device_ids", {}).get(sw, device_id_for(sw)),
                                   p4info, device_config,
                                     logs_dir / f"{sw}-p4runtime-requests.txt")
                if sw in registers:
                    c.use_registers(registers[sw](c.log))
                cp.controllers[sw] = c.connect()
                c.install_flood_group(info["ports"][sw])
                c.install_forwarding(info["forwarding"][sw])
            if job_requests:
                cp.jobs = plan_jobs(info["plan"], job_requests)
                (logs_dir / JOBS_FILE).write_text(json.dumps(
                    {"switch": AGGREGATION_SWITCH, "jobs": cp.jobs}, indent=1))
                for job in cp.jobs:
                    cp.controllers[AGGREGATION_SWITCH].install_job(job)
            plan = getattr(getattr(net, "impairments", None), "drop_simulator", None) or {}
            for sw, cells in sorted(plan.items()):
                for cell in cells:
                    cp.controllers[sw].set_drop_probability(cell["port"], cell["p"], cell["direction"])
        except BaseException:
            cp.close()
            raise
        return cp

    def read_counters(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for sw, c in self.controllers.items():
            counters = c.read_counters()
            out[sw] = {name: {str(i): {"packets": p, "bytes": b} for i, (p, b) in by_index.items()}
                       for name, by_index in counters.items()}
        return out

    def close(self) -> None:
        for c in self.controllers.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing must not mask the real error
                pass
        self.controllers.clear()
