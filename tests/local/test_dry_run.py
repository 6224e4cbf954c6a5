"""`testbed run --dry-run`: the plan comes from the code a run executes, and
nothing starts: no process, no network namespace, nothing under results/."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.results import PROJECT_ROOT
from testbed.scenario import load_scenario

pytestmark = pytest.mark.local

TESTBED = [sys.executable, "-m", "testbed"]
QUICKSTART = PROJECT_ROOT / "scenarios" / "quickstart.yaml"

# Runs the CLI with an audit hook that logs every way Python starts a process.
# Polling /proc for children misses one that lives a few milliseconds (a library's
# `ldconfig -p` did, now and then in CI); the hook sees each one, every time.
SPAWN_WATCH = """
import os, runpy, sys
SPAWNS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "pty.spawn"}
def hook(event, args):
    if event in SPAWNS:
        with open(os.environ["DRY_RUN_SPAWN_LOG"], "a") as f:
            f.write(f"{event} {args!r}\\n")
sys.addaudithook(hook)
sys.argv[0] = "testbed"
runpy.run_module("testbed", run_name="__main__", alter_sys=True)
"""


def _children(pid: int) -> set[tuple[int, str]]:
    out = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                    # the child's command line too, so that a failure names what ran
                    argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").strip()
                    out.add((int(entry.name), argv.decode(errors="replace") or stat[:stat.rindex(")") + 1]))
            except (OSError, ValueError):
                pass
    return out


def _netns() -> set[str]:
    try:
        return set(os.listdir("/run/netns"))
    except OSError:
        return set()


def _dry_run(args: list[str], tmp_path: Path) -> dict:
    """Run the CLI's dry run; check it started nothing and wrote nothing; the plan as JSON."""
    results = PROJECT_ROOT / "results"
    before_results = sorted(p for p in results.rglob("*")) if results.exists() else []
    before_ns = _netns()
    spawn_log = tmp_path / "spawns.txt"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "DRY_RUN_SPAWN_LOG": str(spawn_log)}
    # Anything the dry run started would be its child: the audit hook logs each start,
    # and its children are watched too (a process started outside Python's own calls).
    out_path, err_path = tmp_path / "plan.json", tmp_path / "stderr.txt"
    with open(out_path, "w") as out_f, open(err_path, "w") as err_f:
        proc = subprocess.Popen([sys.executable, "-c", SPAWN_WATCH, "run", *args, "--dry-run", "--json"],
                                cwd=tmp_path, env=env, stdout=out_f, stderr=err_f)
        seen: set[tuple[int, str]] = set()
        while proc.poll() is None:
            seen |= _children(proc.pid)
            time.sleep(0.05)
    out, err = out_path.read_text(), err_path.read_text()
    assert proc.returncode == 0, err
    spawns = spawn_log.read_text() if spawn_log.exists() else ""
    assert not spawns, f"the dry run started processes:\n{spawns}"
    assert not seen, f"the dry run started processes: {seen}"
    assert _netns() == before_ns
    after_results = sorted(p for p in results.rglob("*")) if results.exists() else []
    assert after_results == before_results, "the dry run wrote under results/"
    return json.loads(out)


def _commands(point: dict, node: str) -> list[str]:
    return [" ".join(c["argv"]) for c in point["commands"] if c["node"] == node]


def test_quickstart_dry_run_lists_host_programs_switch_and_table_entries(tmp_path):
    plan = _dry_run([str(QUICKSTART), "--quick"], tmp_path)
    assert plan["net"] == "mininet" and len(plan["points"]) == 9
    switch_point = next(p for p in plan["points"] if "algorithm=switch" in p["label"])
    for h in ("w1", "w2", "w3", "w4"):
        cmds = _commands(switch_point, h)
        assert any("-m hosts.allreduce --config <run>/points/" in c for c in cmds), cmds
    assert any("-m testbed.switch.soft --config" in c for c in _commands(switch_point, "s1"))
    writes = [w["rpc"] for w in switch_point["p4runtime"]]
    assert writes[1].startswith("SetForwardingPipelineConfig")
    assert "Write INSERT Forward.l2_forward(dst_addr=1) -> Forward.set_egress(port=1)" in writes
    assert any(w.startswith("Write INSERT Ingress.job_table(job_id=1) -> Ingress.set_job(num_workers=4")
               for w in writes)
    assert sum(w.startswith("Write INSERT Ingress.worker_port(") for w in writes) == 4
    cfg = next(v for k, v in switch_point["configs"].items() if k.endswith("w1.config.json"))
    assert json.loads(cfg)["algorithm"] == "switch"
    # A ps point runs the parameter server on its own host; a ring point installs no job.
    ps_point = next(p for p in plan["points"] if "algorithm=ps" in p["label"])
    assert any("hosts.allreduce" in c for c in _commands(ps_point, "ps"))
    ring_point = next(p for p in plan["points"] if "algorithm=ring" in p["label"])
    assert not any("job_table" in w["rpc"] for w in ring_point["p4runtime"])
    # The loss case's impairment is in the soft switch's config.
    loss = next(p for p in plan["points"] if p["label"].startswith("006-loss"))
    s1 = json.loads(next(v for k, v in loss["configs"].items() if k.endswith("s1.config.json")))
    assert s1["impairments"]["1"]["ingress"]["loss_pct"] == 1
    # switch.capture_bytes reaches the soft switch as its pcaps' snaplen.
    assert s1["pcap_snaplen"] == load_scenario(QUICKSTART).switch.capture_bytes
    assert s1["pcap_dir"]


def test_p4sgd_dry_run_lists_workers_and_its_job(tmp_path):
    plan = _dry_run([str(PROJECT_ROOT / "scenarios/p4sgd/straggler.yaml"), "--quick"], tmp_path)
    p = next(p for p in plan["points"] if not p["skipped"])
    workers = [n for n in ("w1", "w2", "w3", "w4") if any("-m hosts.p4sgd" in c for c in _commands(p, n))]
    assert len(workers) >= 2, p["commands"]
    if any("job_table" in w["rpc"] for w in p["p4runtime"]):
        assert sum("Ingress.worker_port(" in w["rpc"] for w in p["p4runtime"]) == len(workers)


def test_bmv2_dry_run_records_the_compile_and_simple_switch(tmp_path):
    plan = _dry_run([str(QUICKSTART), "--quick", "--set", "switch.backend=bmv2"], tmp_path)
    p = plan["points"][0]
    assert any(c.startswith("p4c-bm2-ss") or "p4c" in c.split()[0] for c in _commands(p, "runner"))
    assert any("simple_switch_grpc" in c and "--grpc-server-addr 127.0.0.1:9559" in c
               for c in _commands(p, "s1"))
    # BMv2 cannot capture: tcpdump on each switch port, cut at switch.capture_bytes.
    snap = load_scenario(QUICKSTART).switch.capture_bytes
    tcpdumps = [c for c in _commands(p, "s1") if "tcpdump" in c]
    assert len(tcpdumps) == 4 and all(f" -s {snap} -w " in c for c in tcpdumps), tcpdumps


def _tofino_inventory(tmp_path: Path) -> Path:
    (tmp_path / "ports.yaml").write_text("ports:\n" + "".join(
        f"  {i}/0: {{speed: 100G, fec: rs, port: {i}, dev_port: {128 + 4 * i}}}\n" for i in range(1, 6)))
    lines = ["hosts:"]
    for i, h in enumerate(["w1", "w2", "w3", "w4", "ps"], 1):
        lines.append(f"  {h}: {{address: 10.1.0.{10 + i}, user: lab, python: /opt/innet/.venv/bin/python, "
                     f"project_dir: /opt/innet, work_dir: /tmp/innet, data_ip: 192.168.10.{i}, "
                     f"mac: '0c:42:a1:00:00:{i:02x}', switch_port: {i}}}")
    lines += ["switch:", "  name: s1", "  backend: tofino", "  address: 10.1.0.2", "  user: lab",
              "  grpc_addr: 10.1.0.2:9559", f"  ports_file: {tmp_path / 'ports.yaml'}", "  sde: /opt/bf-sde",
              "  project_dir: /opt/innet"]
    inv = tmp_path / "inventory.yaml"
    inv.write_text("\n".join(lines) + "\n")
    return inv


def test_tofino_backend_on_ssh_hosts_dry_run(tmp_path):
    inv = _tofino_inventory(tmp_path)
    plan = _dry_run([str(PROJECT_ROOT / "scenarios/quickstart.yaml"), "--quick", "--net", "ssh",
                     "--set", f"net.inventory={inv}", "--set", "switch.backend=tofino"], tmp_path)
    p = next(p for p in plan["points"] if "algorithm=switch" in p["label"])
    s1 = [c for c in p["commands"] if c["node"] == "s1"]
    assert s1[0]["argv"][0] == "/opt/bf-sde/install/bin/bf-p4c"
    assert s1[0]["argv"][-1] == "/opt/innet/p4/tofino/ina_tna.p4"
    assert any(c["argv"] == ["/opt/bf-sde/run_switchd.sh", "-p", "ina_tna"] for c in s1)
    assert all(c["where"] == "lab@10.1.0.2:22" for c in s1)
    assert any("port-add 1/0 100G RS" in v for v in p["configs"].values())
    w1 = [c for c in p["commands"] if c["node"] == "w1"][-1]
    assert w1["where"] == "lab@10.1.0.11:22"
    assert w1["argv"][:3] == ["/opt/innet/.venv/bin/python", "-m", "hosts.allreduce"]
    assert w1["argv"][-1].startswith("/tmp/innet/")
    rpcs = [w["rpc"] for w in p["p4runtime"]]
    assert rpcs[0] == "StreamChannel arbitration -> 10.1.0.2:9559 (device 1)"
    # Entries use the ASIC's dev_ports from the ports file (w1: 1/0 -> dev_port 132).
    mac = int("0c42a1000001", 16)
    assert f"Write INSERT Forward.l2_forward(dst_addr={mac}) -> Forward.set_egress(port=132)" in rpcs


def test_bad_inventory_is_one_line_with_file_and_line(tmp_path):
    inv = _tofino_inventory(tmp_path)
    text = inv.read_text().replace("mac: '0c:42:a1:00:00:02'", "mac: 'not-a-mac'")
    inv.write_text(text)
    r = subprocess.run([*TESTBED, "run", str(PROJECT_ROOT / "scenarios/quickstart.yaml"), "--net", "ssh",
                        "--set", f"net.inventory={inv}", "--set", "switch.backend=tofino", "--dry-run"],
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {inv}:3: hosts.w2.mac: not a MAC address: 'not-a-mac'"
