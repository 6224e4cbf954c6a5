"""The one place the EASGD hosts touch the time machinery (so it is easy to
follow when that machinery changes).

Workers: the device model, pacing, trace and per-iteration records come from
hosts/dnn/runtime.py, exactly as for a `kind: torch` worker.

  open_runtime(torch_cfg, world_traced) the worker's Runtime; its trace header says
                                  role "worker" and how many hosts are traced
  compute(rt, fn, n)              one forward/backward of n samples, charged to the device model
  exchange(rt, link, payload)     one message to the master and its reply: two p2p trace
                                  nodes (send tag "push", recv tag "reply")
  allreduce(rt, t, sizes)         the scenario's collective (ring | ps | switch | tree), timed and
                                  traced: one call on the flat vector (workload.pack true), or
                                  one per parameter tensor (sizes: their values; pack false)
  calibrate_sync / calibrate_master   time_scale auto (below)
  dilate_fixed                    a fixed TDF dilates the soft switch's network too

Master: `MasterClock` paces each centre update to its modeled hardware time x
TDF (`update_hw_s`) and records the master's trace (role "server"): per served
message a recv node, a compute node (the update) and a send node (the reply).

Calibration (time_scale auto, hosts.common.calibration.Calibrator decides):
  * sync variants: as LHC's (hosts/lhc/timing.py `calibrate`): every round runs
    `iterations` x (one local gradient, a barrier, one allreduce of the model's
    size), each allreduce measured from its submit against
    network_model.collective_time (the workload's `hw_op_s`); the workers agree
    through a SUM allreduce (`encode`/`decide`).
  * master variants: every round runs `iterations` x (one local gradient, one
    probe exchange) per worker. The master takes one worker at a time (it sends
    "go", the worker sends its probe, the master runs its update on a scratch copy,
    paced, and replies), so each round trip is the network's and the master's, not
    a queue: measured from the worker's send to its reply's arrival against
    hw_op_s = 2 x message_time(model bytes) + the master's update_hw_s. The
    workers agree through the master (it sums their vectors: `encode_messages`/
    `decide_messages`); each then tells the master the TDF it will run at.
  A TDF at which one calibration iteration on the hardware (a local gradient and
  one exchange: `iteration_hw_s`) would take longer than `iteration_wall_s`, the wall
  time the point's deadline allows an iteration, is refused at once
  (hosts.common.calibration.CalibrationRefused), by every worker alike (the same
  agreed numbers) and, told REFUSED_TDF, by the master: one stalled exchange in an
  undilated round reads as an emulator thousands of times slower.
  Round 0 runs undilated; on the soft switch rank 0 then dilates the network
  (`Calibrator.dilate`); the switch's impairments (loss) are held off while
  calibrating (`Calibrator.start`/`finish`). Calibration is not training: the probes leave the
  centre alone, the gradients are thrown away, and the trace is emptied after.

Master update time [A]: one memory-bound pass over the model on the master's
device (the workers' type): `passes` vectors of 4 bytes per value at HBM x
hbm_efficiency, plus one kernel launch; elastic reads W and C and writes C and
e (4), sgd reads g and C and writes C (3), msgd also reads and writes v (5).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from hosts.common.device import PacedDevice
from hosts.common.trace import TraceRecorder
from hosts.dnn.config import TorchWorkerConfig
from hosts.dnn.runtime import Runtime

UPDATE_PASSES = {"elastic": 4, "sgd": 3, "msgd": 5}     # [A] see the module doc
PUSH_TAG, REPLY_TAG = "push", "reply"
# The TDF a worker tells the master when it refused the round's (no TDF is below
# calibration.MIN_TDF): the master, which waits for every worker's, refuses too.
REFUSED_TDF = 0.0


def update_hw_s(device: dict[str, Any], values: int, rule: str) -> float:
    """Modeled hardware seconds of one centre update on the master (module doc)."""
    from hosts.dnn.device import DEFAULT_HBM_EFFICIENCY, DEFAULT_LAUNCH_S, HBM_BPS  # noqa: PLC0415
    kind = device.get("type", "cpu")
    if kind not in HBM_BPS:
        raise ValueError(f"the master's update needs a modeled device type, got {kind!r}")
    rate = HBM_BPS[kind] * float(device.get("hbm_efficiency", DEFAULT_HBM_EFFICIENCY))
    return float(device.get("launch_s", DEFAULT_LAUNCH_S)) + UPDATE_PASSES[rule] * 4 * values / rate


def master_host(servers: int, server: int) -> str:
    """The traced host name of master server process `server` (Hogwild has several)."""
    return "master" if servers == 1 else f"master.s{server}"


# -- workers -------------------------------------------------------------------------------
def open_runtime(torch_cfg: dict, world_traced: int) -> Runtime:
    rt = Runtime(TorchWorkerConfig.from_json(torch_cfg))
    rt.trace.header.update(world=world_traced, role="worker", workload="easgd")
    return rt


def compute(rt: Runtime, fn: Callable[[], Any], batch_size: int) -> Any:
    return rt.compute(fn, batch_size)


def exchange(rt: Runtime, link, payload, peer: str):
    """Send `payload` to the master, wait for its reply (as many values): p2p trace nodes."""
    n = payload.numel()
    t0 = time.perf_counter()
    link.send(payload)
    t1 = time.perf_counter()
    rt.trace.send(t0, t1, peer=peer, values=n, tag=PUSH_TAG)
    out = link.recv(n)
    t2 = time.perf_counter()
    node = rt.trace.recv(t1, t2, peer=peer, values=n, tag=REPLY_TAG)
    rt.trace.waited(node)
    rt.it["comm_s"] += t2 - t0
    rt.it["bytes"] += 2 * 4 * n          # the message and the reply
    rt.it["ops"] += 1
    return out


def allreduce(rt: Runtime, t, sizes: list[int] | None = None):
    """Sum of every worker's flat `t`: one collective call (the paper's one packed
    message), or with `sizes` one call per parameter tensor, in the flat vector's
    order (what a framework that reduces layer by layer sends; workload.pack false).
    Each call is its own trace node, so the monitor and the projector see every message."""
    coll = rt.collective
    if sizes is None:
        return rt.comm(lambda: coll.allreduce(t), t.numel())
    import torch  # noqa: PLC0415
    if sum(sizes) != t.numel():
        raise ValueError(f"tensor sizes {sizes} do not add up to the flat vector's {t.numel()} values")
    return torch.cat([rt.comm(lambda p=p: coll.allreduce(p), p.numel()) for p in torch.split(t, sizes)])


def _expect_delay(rt: Runtime) -> Callable[[float], None]:
    client = getattr(rt._coll, "client", None) if rt._coll is not None else None
    return client.expect_delay if client is not None else (lambda seconds: None)


def dilate_fixed(rt: Runtime, nd: dict | None) -> None:
    """A fixed TDF dilates the network too (modeled device only)."""
    from hosts.common.calibration import Calibrator  # noqa: PLC0415
    if nd is not None and rt.device.name != "cpu":
        Calibrator(0.0, rt.device.time_scale, nd, rt.cfg.rank, _expect_delay(rt)).dilate(rt.device.time_scale)


def _local_gradient(rt: Runtime, task, w, idx) -> float:
    """One gradient at the current TDF, charged to the device but not traced; its real
    seconds (the compute ratio's numerator)."""
    dev = rt.device
    t0 = time.perf_counter()
    task.gradient(w, idx)
    real = time.perf_counter() - t0
    dev.charge(dev.hw_time(task.batch_size) * dev.time_scale, real)
    dev.flush()
    return real


def worst_ratio(reals: list[float], hw_s: float) -> float | None:
    """The compute-ratio input of calibration: the round's WORST step (real / modeled),
    not the mean. Pacing is checked step by step (one step over TDF x modeled makes the
    point invalid) and on this loaded machine single steps stall for milliseconds, so
    the mean ratio let calibrated points overrun (docs/easgd.md, Time)."""
    return max(reals) / hw_s if reals and hw_s > 0 else None


def master_agreement(size: int, workers: int, ratio: float | None) -> np.ndarray:
    """The master's part of the calibration's agreement vector (size `size`, as the
    workers' `encode_messages` with world = workers + 1): no round trips of its own,
    its update's worst compute ratio at party `workers`, so a slow master update raises
    the TDF as a slow worker step does."""
    from hosts.common import calibration as cal  # noqa: PLC0415
    parties = workers + 1
    n, rem = divmod(size - 2 * parties, parties)
    if rem or n < 0 or cal.messages_agreement_size(n, parties) != size:
        raise ValueError(f"agreement vector of {size} values does not fit {workers} workers + the master")
    return cal.encode_messages([0.0] * n, ratio, workers, parties)


def _finish(rt: Runtime, c, tdf: float) -> dict:
    rt.device.time_scale = tdf
    rt.device._reset_stats()             # the run's step statistics are the run's
    rt.device.debt_s = 0.0
    rt.trace.reset()
    rt.trace.set_tdf(tdf)
    rt.trace.header["device"] = rt.device.describe()
    rt._reset_counters()
    return c.record(rt.cfg.host)


def iteration_hw_s(rt: Runtime, task, cc: dict) -> float:
    """One calibration iteration on the modeled hardware, the longest kind of iteration
    (a training step exchanges at most once): a local gradient and one exchange. A TDF
    at which it would outrun cc["iteration_wall_s"] is refused (CalibrationRefused)."""
    return rt.device.hw_time(task.batch_size) + cc["hw_op_s"]


def calibrate_sync(rt: Runtime, task, cc: dict, nd: dict | None) -> dict:
    """time_scale auto for the allreduce variants (module doc); returns the record."""
    from hosts.common import calibration as cal  # noqa: PLC0415
    coll, rank, world = rt.collective, rt.cfg.rank, rt.cfg.world
    import torch  # noqa: PLC0415
    w = task.weights()
    batches = task.batches()
    c = cal.Calibrator(cc["hw_op_s"], rt.device.time_scale, nd, rank, _expect_delay(rt),
                       iteration_wall_s=cc["iteration_wall_s"])
    c.start()                            # the switch's impairments held off while calibrating
    for _ in range(cc["rounds"]):
        spans, reals = [], []
        for _ in range(cc["iterations"]):
            reals.append(_local_gradient(rt, task, w, next(batches)))
            coll.barrier()
            t0 = time.perf_counter()
            coll.allreduce(torch.zeros_like(w))
            spans.append((t0, time.perf_counter()))
        ratio = worst_ratio(reals, rt.device.hw_time(task.batch_size))
        vec = cal.encode([a for a, _ in spans], [b for _, b in spans], ratio, rank, world)
        summed = np.asarray(coll.allreduce(torch.from_numpy(vec.astype(np.float32))), np.float64)
        measured, why = cal.decide(summed, len(spans), world, cc["hw_op_s"], fallback=rt.device.time_scale)
        tdf = c.after_round(measured, why, step_hw_s=iteration_hw_s(rt, task, cc), ops=len(spans),
                            my_compute_ratio=ratio, op_hw_p50_s=cc["hw_op_s"])
        rt.device.time_scale = tdf
    c.finish()                           # rank 0: final TDF, impairments back on
    coll.barrier()                       # nobody trains before that is applied
    return _finish(rt, c, rt.device.time_scale)


def calibrate_master(rt: Runtime, link, task, cc: dict, nd: dict | None) -> dict:
    """time_scale auto for the master variants (module doc); returns the record."""
    from hosts.common import calibration as cal  # noqa: PLC0415
    rank, world = rt.cfg.rank, rt.cfg.world
    w = task.weights()
    batches = task.batches()
    c = cal.Calibrator(cc["hw_op_s"], rt.device.time_scale, nd, rank,
                       iteration_wall_s=cc["iteration_wall_s"])
    c.start()                            # rank 0 goes first at the master: held before any probe
    for r in range(cc["rounds"]):
        durations, reals = [], []
        for _ in range(cc["iterations"]):
            reals.append(_local_gradient(rt, task, w, next(batches)))
            link.wait_turn()
            t0 = time.perf_counter()
            link.send(w)
            link.recv(w.numel())
            durations.append(time.perf_counter() - t0)
        ratio = worst_ratio(reals, rt.device.hw_time(task.batch_size))
        # world + 1 parties: the master's updates have a compute-ratio slot too (rank world)
        summed = link.agree(cal.encode_messages(durations, ratio, rank, world + 1))
        measured, why = cal.decide_messages(summed, len(durations), world + 1, cc["hw_op_s"],
                                            fallback=rt.device.time_scale)
        try:
            tdf = c.after_round(measured, why, step_hw_s=iteration_hw_s(rt, task, cc), ops=len(durations),
                                my_compute_ratio=ratio, op_hw_p50_s=cc["hw_op_s"],
                                round_trip_p50_s=float(np.median(durations)))
        except cal.CalibrationRefused:
            link.tell_tdf(REFUSED_TDF)   # every worker refuses alike (the same agreed numbers)
            raise
        rt.device.time_scale = tdf
        if r == cc["rounds"] - 1:
            # Before the last TDF reaches the master: it serves no one until rank 0's
            # arrives, so training exchanges meet the network with its impairments on.
            c.finish()
        link.tell_tdf(tdf)
    return _finish(rt, c, rt.device.time_scale)


# -- the master --------------------------------------------------------------------------------
class MasterClock:
    """One master server process's pacing and trace (module doc)."""

    def __init__(self, trace_path: str | None, *, server: int, servers: int, workers: int,
                 tdf: float, update_hw_s: float, serve_order: str, sleep: bool = True):
        self.host = master_host(servers, server)
        self.update_hw_s = update_hw_s
        self.last_real_s = 0.0               # the last update's real seconds (calibration)
        self.device = PacedDevice(tdf, sleep=sleep)
        self.trace = TraceRecorder(trace_path, host=self.host, rank=workers + server,
                                   world=workers + servers, tdf=tdf, role="server",
                                   serve_order=serve_order, workload="easgd",
                                   device={"update_hw_s": update_hw_s, "time_scale": tdf})

    def set_tdf(self, tdf: float) -> None:
        self.device = PacedDevice(tdf, sleep=self.device.sleep)
        self.trace.set_tdf(tdf)
        self.trace.header["device"]["time_scale"] = tdf
        self.trace.reset()

    def update(self, fn: Callable[[], Any], *, traced: bool = True) -> Any:
        """The centre update `fn`, paced to update_hw_s x TDF."""
        t0 = time.perf_counter()
        out = fn()
        real = self.last_real_s = time.perf_counter() - t0
        self.device.charge(self.update_hw_s * self.device.time_scale, real)
        self.device.flush()
        if traced:
            self.trace.compute(t0, time.perf_counter(), self.update_hw_s, real, {"step": "update"})
        return out

    def received(self, worker: str, t0: float, t1: float, values: int) -> None:
        self.trace.waited(self.trace.recv(t0, t1, peer=worker, values=values, tag=PUSH_TAG))

    def replied(self, worker: str, t0: float, t1: float, values: int) -> None:
        self.trace.send(t0, t1, peer=worker, values=values, tag=REPLY_TAG)

    def close(self) -> None:
        self.trace.close()
