"""Tofino backend, as the commands it runs: compile p4/tofino/ina_tna.p4 with
bf-p4c (P4Runtime P4Info out), install it where bf_switchd finds programs,
start `$SDE/run_switchd.sh -p ina_tna`, bring the front-panel ports of a ports
file up through bfshell (ucli `pm`: port-add, an-set, port-enb), and the
P4Runtime device config SwitchController pushes.

    tb = TofinoBackend("ports.yaml", run_dir / "tofino")
    plan = tb.run(dry_run=True)     # all of the above as data (no SDE needed)
    tb.describe()                   # ... printed

Ports file (YAML): front-panel port -> speed, fec, autoneg and the testbed
port number (what scenarios and the controller call the port); dev_port, the
ASIC's port number the P4 program sees, if known (`pm show`, column D_P):
    ports:
      1/0: {speed: 100G, fec: rs, autoneg: default, port: 1, dev_port: 132}
      2/0: {speed: 25G, fec: none, autoneg: disable, port: 2}

Device config: p4runtime-shell's Tofino config builder lives in its repository
(config_builders/tofino.py) but is not in the PyPI package 0.0.6, so
pack_tofino_config() writes the same layout: program name, tofino.bin and
context.json, each as a little-endian int32 length followed by the bytes (the
format Stratum's Tofino target reads). The P4Runtime server on the switch is
Stratum or a bf_switchd built with P4Runtime support; give its address.
"""
from __future__ import annotations

import os
import shlex
import struct
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

P4_DIR = Path(__file__).resolve().parents[2] / "p4"
SPEEDS = ("1G", "10G", "25G", "40G", "50G", "100G", "200G", "400G")
FECS = ("NONE", "FC", "RS")
AUTONEG = {"default": 0, "enable": 1, "disable": 2}   # ucli pm an-set codes


class TofinoError(ValueError):
    """Bad ports file or missing SDE; the message says what to fix."""


@dataclass(frozen=True)
class TofinoPort:
    front_panel: str      # "1/0": cage/lane
    speed: str
    fec: str
    autoneg: str
    port: int             # the testbed's port number
    dev_port: int | None = None


def load_ports_file(path: str | Path) -> list[TofinoPort]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise TofinoError(f"{path}: cannot read ports file: {e}") from None
    return parse_ports(doc, str(path))


def parse_ports(doc, source: str = "ports") -> list[TofinoPort]:
    if isinstance(doc, dict) and set(doc) == {"ports"}:
        doc = doc["ports"]
    if not isinstance(doc, dict) or not doc:
        raise TofinoError(f"{source}: expected a mapping of front-panel ports, e.g. "
                          "{'1/0': {speed: 100G, fec: rs, autoneg: default, port: 1}}")
    errs, ports = [], []
    for fp, spec in doc.items():
        fp = str(fp)
        where = f"{source}: {fp}"
        cage, _, lane = fp.partition("/")
        if not (cage.isdigit() and lane.isdigit()):
            errs.append(f"{where}: front-panel port must be CAGE/LANE, e.g. 1/0")
            continue
        if not isinstance(spec, dict):
            errs.append(f"{where}: expected {{speed, fec, autoneg, port}}")
            continue
        unknown = set(spec) - {"speed", "fec", "autoneg", "port", "dev_port"}
        if unknown:
            errs.append(f"{where}: unknown keys {sorted(unknown)}")
        speed = str(spec.get("speed", "")).upper()
        if speed not in SPEEDS:
            errs.append(f"{where}.speed: {spec.get('speed')!r} not one of {', '.join(SPEEDS)}")
        fec = str(spec.get("fec", "none")).upper()
        if fec not in FECS:
            errs.append(f"{where}.fec: {spec.get('fec')!r} not one of none, fc, rs")
        an = spec.get("autoneg", "default")
        an = {True: "enable", False: "disable"}.get(an, str(an).lower()) if isinstance(an, bool) \
            else str(an).lower()
        if an not in AUTONEG:
            errs.append(f"{where}.autoneg: {spec.get('autoneg')!r} not one of default, enable, disable")
        port, dev = spec.get("port"), spec.get("dev_port")
        if not isinstance(port, int) or isinstance(port, bool) or port < 1:
            errs.append(f"{where}.port: the testbed port number (an integer >= 1) is required")
        if dev is not None and (not isinstance(dev, int) or isinstance(dev, bool) or not 0 <= dev < 512):
            errs.append(f"{where}.dev_port: must be an integer in 0..511")
        ports.append(TofinoPort(fp, speed, fec, an, port if isinstance(port, int) else -1, dev))
    nos = [p.port for p in ports]
    dup = sorted({n for n in nos if nos.count(n) > 1})
    if dup:
        errs.append(f"{source}: testbed port numbers {dup} used twice")
    if errs:
        raise TofinoError("\n".join(errs))
    return sorted(ports, key=lambda p: p.port)


def bfshell_script(ports: list[TofinoPort]) -> str:
    """ucli commands that add, configure and enable every port."""
    lines = ["ucli", "pm"]
    for p in ports:
        lines += [f"port-add {p.front_panel} {p.speed} {p.fec}",
                  f"an-set {p.front_panel} {AUTONEG[p.autoneg]}",
                  f"port-enb {p.front_panel}"]
    return "\n".join(lines + ["show", "exit", "exit"]) + "\n"


def pack_tofino_config(program: str, tofino_bin: bytes, context_json: bytes) -> bytes:
    """P4Runtime p4_device_config for Tofino: three length-prefixed blobs
    (little-endian int32 length, then bytes): name, tofino.bin, context.json."""
    out = b""
    for blob in (program.encode(), bytes(tofino_bin), bytes(context_json)):
        out += struct.pack("<i", len(blob)) + blob
    return out


def unpack_tofino_config(data: bytes) -> tuple[str, bytes, bytes]:
    parts, off = [], 0
    for _ in range(3):
        (n,) = struct.unpack_from("<i", data, off) if off + 4 <= len(data) else (-1,)
        if n < 0 or off + 4 + n > len(data):
            raise TofinoError("truncated or malformed Tofino device config")
        parts.append(data[off + 4:off + 4 + n])
        off += 4 + n
    if off != len(data):
        raise TofinoError(f"Tofino device config: {len(data) - off} trailing bytes")
    return parts[0].decode(), parts[1], parts[2]


@dataclass
class TofinoPlan:
    """Everything the backend does, in order, as data."""
    sde: str
    sde_install: str
    program: str
    compile: list[str]
    install: list[list[str]]
    switchd: list[str]
    bfshell: list[str]
    bfshell_script: str
    env: dict[str, str]
    p4info_path: str
    device_config_inputs: dict[str, str]
    grpc_addr: str
    device_id: int
    ports: list[dict]
    port_map: dict[int, int | None]       # testbed port -> dev_port (None: look it up)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def commands(self) -> list[list[str]]:
        return [self.compile, *self.install, self.switchd, self.bfshell]


class TofinoBackend:
    def __init__(self, ports_file: str | Path, build_dir: str | Path, sde: str | None = None,
                 sde_install: str | None = None, p4_path: str | Path | None = None,
                 program: str = "ina_tna", grpc_addr: str = "127.0.0.1:9559", device_id: int = 1,
                 env: dict[str, str] | None = None):
        env = dict(os.environ if env is None else env)
        self.ports = load_ports_file(ports_file)
        self.build_dir = Path(build_dir)
        self.sde = sde or env.get("SDE")
        self.sde_install = sde_install or env.get("SDE_INSTALL") or (
            f"{self.sde}/install" if self.sde else None)
        self.p4_path = Path(p4_path) if p4_path else P4_DIR / "tofino" / f"{program}.p4"
        self.program = program
        self.grpc_addr = grpc_addr
        self.device_id = device_id

    @property
    def out_dir(self) -> Path:
        return self.build_dir / self.program

    def plan(self) -> TofinoPlan:
        sde = self.sde or "$SDE"
        inst = self.sde_install or "$SDE_INSTALL"
        out = self.out_dir
        p4info = out / "p4info.txtpb"
        script = self.build_dir / "ports.bfshell"
        notes = []
        if not self.sde:
            notes.append("$SDE is not set: commands show it as a placeholder; set SDE and "
                         "SDE_INSTALL to your Intel/open-p4studio SDE to run them")
        if not self.p4_path.exists():
            notes.append(f"{self.p4_path} does not exist yet: the compile step needs it")
        unknown = [p.front_panel for p in self.ports if p.dev_port is None]
        if unknown:
            notes.append(f"dev_port unknown for {', '.join(unknown)}: after bring-up read it with "
                         "`pm show` (column D_P) and add it to the ports file; table entries "
                         "use dev_ports")
        notes.append(f"P4Runtime: SwitchController connects to {self.grpc_addr} (Stratum, or "
                     "bf_switchd built with P4Runtime support) and pushes the packed config")
        return TofinoPlan(
            sde=sde, sde_install=inst, program=self.program,
            compile=[f"{inst}/bin/bf-p4c", "--target", "tofino", "--arch", "tna", "--std", "p4-16",
                     "-o", str(out), "--p4runtime-files", str(p4info),
                     "--p4runtime-force-std-externs", str(self.p4_path)],
            # the layout the SDE's own p4 build installs (share/tofinopd, share/p4/targets)
            install=[["mkdir", "-p", f"{inst}/share/tofinopd/{self.program}",
                      f"{inst}/share/p4/targets/tofino"],
                     ["cp", "-r", f"{out}/.", f"{inst}/share/tofinopd/{self.program}/"],
                     ["cp", f"{out}/{self.program}.conf",
                      f"{inst}/share/p4/targets/tofino/{self.program}.conf"]],
            switchd=[f"{sde}/run_switchd.sh", "-p", self.program],
            bfshell=[f"{sde}/run_bfshell.sh", "-f", str(script)],
            bfshell_script=bfshell_script(self.ports),
            env={"SDE": sde, "SDE_INSTALL": inst},
            p4info_path=str(p4info),
            device_config_inputs={"program": self.program,
                                  "tofino_bin": str(out / "pipe" / "tofino.bin"),
                                  "context_json": str(out / "pipe" / "context.json")},
            grpc_addr=self.grpc_addr, device_id=self.device_id,
            ports=[asdict(p) for p in self.ports],
            port_map={p.port: p.dev_port for p in self.ports}, notes=notes)

    def device_config(self) -> bytes:
        """The packed config from the compiler's outputs (after compile)."""
        inputs = self.plan().device_config_inputs
        try:
            return pack_tofino_config(self.program, Path(inputs["tofino_bin"]).read_bytes(),
                                      Path(inputs["context_json"]).read_bytes())
        except OSError as e:
            raise TofinoError(f"device config: {e}; compile first (bf-p4c writes "
                              f"{inputs['tofino_bin']} and {inputs['context_json']})") from None

    def describe(self) -> str:
        p = self.plan()
        text = [f"Tofino backend: program {p.program}, P4Runtime {p.grpc_addr} (device {p.device_id})",
                f"  env: SDE={p.sde} SDE_INSTALL={p.sde_install}",
                "  1. compile:   " + shlex.join(p.compile)]
        text += ["  2. install:   " + shlex.join(c) for c in p.install]
        text += ["  3. switchd:   " + shlex.join(p.switchd) + "   (keep running)",
                 "  4. ports:     " + shlex.join(p.bfshell) + "   with:",
                 *("       " + line for line in p.bfshell_script.splitlines()),
                 f"  5. P4Runtime: SetForwardingPipelineConfig with P4Info {p.p4info_path} and "
                 "device config = pack_tofino_config(" + ", ".join(
                     f"{k}={v}" for k, v in p.device_config_inputs.items()) + ")",
                 "  ports (testbed -> front panel, dev_port): " + ", ".join(
                     f"{q['port']} -> {q['front_panel']} "
                     f"({'?' if q['dev_port'] is None else q['dev_port']})" for q in p.ports)]
        text += [f"  note: {n}" for n in p.notes]
        out = "\n".join(text)
        print(out)
        return out

    def run(self, dry_run: bool = True, ready_timeout: float = 120.0) -> TofinoPlan:
        """dry_run: return the plan. Otherwise run it: compile, install, start
        bf_switchd (returned as self.switchd_proc; stop it with stop()), wait for
        the P4Runtime port, bring the ports up."""
        plan = self.plan()
        if dry_run:
            return plan
        if not self.sde:
            raise TofinoError("set $SDE (and $SDE_INSTALL) to run the Tofino backend")
        env = {**os.environ, **plan.env}
        self.build_dir.mkdir(parents=True, exist_ok=True)
        for argv in (plan.compile, *plan.install):
            _run(argv, env, self.build_dir / "tofino-build.log")
        log = open(self.build_dir / "bf_switchd.log", "ab")
        self.switchd_proc = subprocess.Popen(plan.switchd, env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT)
        from testbed.switch.bmv2 import _listening
        deadline = time.monotonic() + ready_timeout
        while not _listening(self.grpc_addr):
            if self.switchd_proc.poll() is not None or time.monotonic() > deadline:
                raise TofinoError(f"bf_switchd not serving P4Runtime on {self.grpc_addr} "
                                  f"(exit code {self.switchd_proc.poll()}); log: {log.name}")
            time.sleep(0.5)
        Path(plan.bfshell[-1]).write_text(plan.bfshell_script)
        _run(plan.bfshell, env, self.build_dir / "bfshell.log")
        return plan

    def stop(self) -> None:
        proc = getattr(self, "switchd_proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _run(argv: list[str], env: dict, log_path: Path) -> None:
    with open(log_path, "ab") as logf:
        rc = subprocess.run(argv, env=env, stdout=logf, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise TofinoError(f"failed ({rc}): {shlex.join(argv)}; log: {log_path}")


__all__ = ["TofinoBackend", "TofinoPlan", "TofinoPort", "TofinoError", "load_ports_file",
           "parse_ports", "bfshell_script", "pack_tofino_config", "unpack_tofino_config"]
