"""The config of one `kind: torch` worker (JSON written by testbed/workloads/torch.py),
strict like every host config: every key required, unknown keys rejected,
all problems reported at once (hosts/common/config.py Checker)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hosts.common.config import (Checker, ConfigError, HostAddr, InaSettings, Straggler,
                                 load_json_object)
from hosts.common.network_dilation import parse_network_dilation

COLLECTIVES = ("ring", "ps", "switch", "tree", "gloo")


@dataclass(frozen=True)
class TorchWorkerConfig:
    host: str
    role: str                    # "worker" | "ps"
    rank: int                    # worker rank (-1 for the ps)
    world: int
    collective: str              # ring | ps | switch | tree | gloo (gloo: DDP's own allreduce)
    peers: tuple[HostAddr, ...]  # workers in rank order
    ps: HostAddr | None
    port: int                    # TCP port base of ring/tree/ps (hosts/common/config.py scheme)
    master_addr: str             # rendezvous of torch.distributed (rank 0's address)
    master_port: int
    gloo_ifname: str | None      # GLOO_SOCKET_IFNAME: the host's emulated interface
    script: str
    args: tuple[str, ...]
    batch_size: int
    seed: int
    device: dict                 # hosts.dnn.device.make_device spec
    straggler: Straggler | None
    start_at: float | None
    connect_timeout_s: float
    timeout_s: float
    out: str                     # JSON lines: iteration records + summary
    trace: str | None            # <host>.trace.jsonl (hosts/common/trace.py)
    ina: InaSettings | None = None
    # time_scale auto: {"rounds": K, "iteration_wall_s": the wall time the point allows an
    # iteration (a TDF that would make one longer is refused)} (hosts/dnn/timing.py); None: a fixed TDF
    calibration: dict | None = None
    # hardware seconds of one allreduce by size: {"values": [...], "hw_s": [...]}
    # (testbed.fidelity.network_model, evaluated by the workload; hosts cannot import it)
    hw_table: dict | None = None
    # the soft switch's delay line (hosts.common.network_dilation), or None
    network_dilation: dict | None = None
    # False: DDP keeps its own allreduce over gloo (the hook-overhead baseline)
    ddp_hook: bool = True

    KEYS = frozenset({"host", "role", "rank", "world", "collective", "peers", "ps", "port",
                      "master_addr", "master_port", "gloo_ifname", "script", "args", "batch_size",
                      "seed", "device", "straggler", "start_at", "connect_timeout_s", "timeout_s",
                      "out", "trace", "ina", "calibration", "hw_table", "network_dilation",
                      "ddp_hook"})

    @classmethod
    def from_json(cls, source: str | Path | dict) -> "TorchWorkerConfig":
        data, where = load_json_object(source)
        c = Checker(data, where)
        for key in ("peers", "ps", "gloo_ifname", "args", "device", "trace"):
            if key not in c.data:
                c.error(key, "missing (every key is required; use null where allowed)")
        host = c.str("host")
        role = c.str("role", ("worker", "ps"))
        rank = c.int("rank", lo=-1)
        world = c.int("world", lo=1)
        collective = c.str("collective", COLLECTIVES)
        raw_peers = c.data.get("peers")
        peers: list[HostAddr] = []
        if not isinstance(raw_peers, list) or not raw_peers:
            c.error("peers", f"must be a non-empty list of {{name, ip}}, got {raw_peers!r}")
        else:
            for i, p in enumerate(raw_peers):
                h = c.host(p, f"peers[{i}]")
                if h is not None:
                    peers.append(h)
        ps = c.host(c.data.get("ps"), "ps") if c.data.get("ps") is not None else None
        port = c.int("port", lo=1)
        master_addr = c.str("master_addr")
        master_port = c.int("master_port", lo=1)
        gloo_ifname = c.data.get("gloo_ifname")
        if gloo_ifname is not None and not isinstance(gloo_ifname, str):
            c.error("gloo_ifname", f"must be a string or null, got {gloo_ifname!r}")
        script = c.str("script")
        args = c.data.get("args")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            c.error("args", f"must be a list of strings, got {args!r}")
            args = []
        batch_size = c.int("batch_size", lo=1)
        seed = c.int("seed", lo=0)
        device = c.data.get("device")
        if not isinstance(device, dict):
            c.error("device", f"must be an object like {{\"type\": \"v100\"}}, got {device!r}")
            device = {}
        straggler = c.straggler("straggler")
        start_at = c.number("start_at", nullable=True)
        connect_timeout_s = c.number("connect_timeout_s", positive=True)
        timeout_s = c.number("timeout_s", positive=True)
        out = c.str("out")
        trace = c.data.get("trace")
        if trace is not None and not isinstance(trace, str):
            c.error("trace", f"must be a path or null, got {trace!r}")
        if collective == "ps" and ps is None and "ps" in c.data:
            c.error("ps", 'collective "ps" needs the parameter server\'s {"name", "ip"}')
        if role == "worker" and rank is not None and world is not None and peers:
            if not 0 <= rank < world or len(peers) != world:
                c.error("rank", f"must be in 0..{world - 1} with {world} peers, got rank {rank}, "
                                f"{len(peers)} peers")
        ina = InaSettings.parse(c, collective)
        if c.data.get("ina") is not None and collective != "switch":
            c.error("ina", f'only used by collective "switch", not {collective!r}')
        calibration = c.data.get("calibration")
        if calibration is not None and (not isinstance(calibration, dict)
                                        or set(calibration) != {"rounds", "iteration_wall_s"}
                                        or not isinstance(calibration["rounds"], int) or calibration["rounds"] < 1
                                        or not isinstance(calibration["iteration_wall_s"], (int, float))
                                        or calibration["iteration_wall_s"] <= 0):
            c.error("calibration", f"must be null or {{rounds >= 1, iteration_wall_s > 0}}, got {calibration!r}")
        hw_table = c.data.get("hw_table")
        if hw_table is not None:
            try:
                from hosts.common.hw_table import HwTable  # noqa: PLC0415
                HwTable(hw_table)
            except (TypeError, ValueError, KeyError) as e:
                c.error("hw_table", str(e))
        if calibration is not None and hw_table is None:
            c.error("hw_table", "calibration (time_scale auto) needs the hardware time table")
        nd = parse_network_dilation(c)
        ddp_hook = c.data.get("ddp_hook", True)
        if not isinstance(ddp_hook, bool) or (not ddp_hook and collective != "gloo"):
            c.error("ddp_hook", f"must be true, or false with collective gloo, got {ddp_hook!r}")
        c.finish(set(cls.KEYS))
        return cls(host=host, role=role, rank=rank, world=world, collective=collective,
                   peers=tuple(peers), ps=ps, port=port, master_addr=master_addr,
                   master_port=master_port, gloo_ifname=gloo_ifname, script=script,
                   args=tuple(args), batch_size=batch_size, seed=seed, device=device,
                   straggler=straggler, start_at=start_at, connect_timeout_s=connect_timeout_s,
                   timeout_s=timeout_s, out=out, trace=trace, ina=ina, calibration=calibration,
                   hw_table=hw_table, network_dilation=nd, ddp_hook=ddp_hook is not False)

    @property
    def my_ip(self) -> str:
        return self.ps.ip if self.role == "ps" else self.peers[self.rank].ip

    def run_identity(self) -> dict[str, Any]:
        """What every participant must agree on (checked at the collective's handshake)."""
        ident = {"world": self.world, "collective": self.collective, "seed": self.seed,
                 "port": self.port, "script": Path(self.script).name,
                 "batch_size": self.batch_size}
        if self.ina is not None:
            ident["ina"] = {"job_id": self.ina.job_id, "window": self.ina.window,
                            "scale_exp": self.ina.scale_exp}
        return ident


__all__ = ["TorchWorkerConfig", "ConfigError", "COLLECTIVES"]
