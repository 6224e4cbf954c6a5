"""An EASGD-family worker: trains LeNet on its shard of the digits and talks to
the master (asynchronous variants) or to the other workers through the
scenario's allreduce (synchronous variants).

    python -m hosts.easgd.worker --config w1.config.json

Per local step t (rules from hosts/easgd/rules.py, weights as one flat vector):
  easgd, async_easgd, hogwild_easgd  W <- W - eta g(W); every tau steps send W,
                                     receive e = alpha (W - C), W <- W - e
                                     (exchange_order zhang: on an exchange step send the
                                     pre-step W, W <- W - e - eta g(W), g at the pre-step W)
  async_measgd    Nesterov local step (v, W) instead; same exchange
  async_sgd, async_msgd, hogwild_sgd send g(W) every step, receive the centre, W <- C
  sync_easgd      every tau steps: S = allreduce(W) (pre-step), then
                  W <- W - eta g - alpha (W - C), C <- C + alpha (S - P C) (C kept on
                  every worker, the same bits everywhere); other steps local SGD
  sync_sgd        S = allreduce(g) every step, W <- W - eta S / P
The sync variants' allreduce is one packed message (pack true) or one per
parameter tensor (pack false).

The forward/backward of each step is charged to the modeled accelerator and
every exchange is traced (hosts/easgd/timing.py). Rank 0 of a synchronous
variant saves its centre (sync_easgd) or weights (sync_sgd) over time, as the
master does for the asynchronous ones.
"""
from __future__ import annotations

import hashlib
import logging
import sys
import time

import numpy as np
import torch

from hosts.collectives import check_hello, make_hello
from hosts.common import program
from hosts.common.calibration import CalibrationRefused
from hosts.common.tcp import (KIND_BARRIER, NetError, RecvOp, connect_with_retry, exchange, recv_array,
                              recv_json, send_array, send_json)
from hosts.easgd import rules, timing
from hosts.easgd.config import (ConfigError, load, local_momentum, parse_worker, parse_worker_timing,
                                server_of, server_port, serving)
from hosts.easgd.master import Snapshots
from hosts.easgd.model import Task

log = logging.getLogger("easgd.worker")


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


class MasterLink:
    """This worker's TCP connection to its master server."""

    def __init__(self, rt, master, port: int, servers: int, ident: dict, base: bool = False):
        """base: the master's base port whatever the variant (Hogwild calibrates there)."""
        cfg = rt.cfg
        s = server_of(cfg.rank, servers)
        hogwild = serving_mode(ident) == "hogwild" and not base
        p = server_port(port, s) if hogwild else port
        self.peer = timing.master_host(servers if hogwild else 1, s if hogwild else 0)
        self.conn = connect_with_retry(master.ip, p, peer=f"master {master.name}",
                                       connect_timeout_s=cfg.connect_timeout_s,
                                       io_timeout_s=cfg.timeout_s, src_ip=cfg.my_ip)
        hello = make_hello(cfg.host, cfg.rank, ident)
        send_json(self.conn, hello)
        check_hello(recv_json(self.conn, timeout_s=cfg.connect_timeout_s + 5), mine=hello,
                    peer=f"master {master.name}")
        self.count = 0

    def send(self, payload: torch.Tensor) -> None:
        send_array(self.conn, payload.numpy())

    def recv(self, n: int) -> torch.Tensor:
        out = recv_array(self.conn, np.empty(n, np.float32))
        self.count += 1
        return torch.from_numpy(out)

    # calibration (hosts/easgd/timing.py calibrate_master; the master's side: master.calibrate)
    def wait_turn(self) -> None:
        exchange([], [RecvOp(self.conn, KIND_BARRIER)], self.conn.timeout_s)

    def agree(self, vec: np.ndarray) -> np.ndarray:
        send_array(self.conn, vec.astype(np.float64))
        return recv_array(self.conn, np.empty(vec.size, np.float64)).astype(np.float64)

    def tell_tdf(self, tdf: float) -> None:
        send_array(self.conn, np.asarray([tdf], np.float64))

    def close(self) -> None:
        try:
            send_array(self.conn, np.zeros(0, np.float32))    # end of stream
        finally:
            self.conn.close()


def serving_mode(ident: dict) -> str | None:
    return serving(ident["variant"])


def train(rt, task: Task, s, link: MasterLink | None, snap: Snapshots | None) -> dict:
    world, rank = rt.cfg.world, rt.cfg.rank
    w = task.weights()
    c = w.clone()                         # sync_easgd's centre replica
    v = torch.zeros_like(w)               # async_measgd's velocity
    n = w.numel()
    batches = task.batches()
    var = s.variant
    sizes = None if s.pack else task.tensor_sizes()     # the sync variants' allreduce per tensor
    exchanges = 0
    for t in range(s.steps):
        idx = next(batches)
        due = (t + 1) % s.tau == 0
        if var in ("async_sgd", "async_msgd", "hogwild_sgd"):
            g, loss = timing.compute(rt, lambda: task.gradient(w, idx), s.batch_size)
            w = timing.exchange(rt, link, g, link.peer).clone()
            exchanges += 1
        elif var == "sync_sgd":
            g, loss = timing.compute(rt, lambda: task.gradient(w, idx), s.batch_size)
            w = rules.sync_sgd_step(w, timing.allreduce(rt, g, sizes), world, s.lr)
            exchanges += 1
        elif var == "sync_easgd":
            if due:
                total = timing.allreduce(rt, w, sizes)
                g, loss = timing.compute(rt, lambda: task.gradient(w, idx), s.batch_size)
                w, c = rules.sync_easgd_step(w, c, total, world, s.alpha, g, s.lr)
                exchanges += 1
            else:
                g, loss = timing.compute(rt, lambda: task.gradient(w, idx), s.batch_size)
                w = rules.sgd_step(w, g, s.lr)
        elif due and s.exchange_order == "zhang":   # exchange and gradient at the pre-exchange W
            e = timing.exchange(rt, link, w, link.peer)
            exchanges += 1
            if local_momentum(var):
                ahead = rules.nesterov_lookahead(w, v, s.momentum)
                g, loss = timing.compute(rt, lambda: task.gradient(ahead, idx), s.batch_size)
                w, v = rules.nesterov_step(w - e, v, g, s.lr, s.momentum)
            else:
                g, loss = timing.compute(rt, lambda: task.gradient(w, idx), s.batch_size)
                w = rules.sgd_step(w - e, g, s.lr)
        else:                             # easgd, async_easgd, async_measgd, hogwild_easgd
            if local_momentum(var):
                ahead = rules.nesterov_lookahead(w, v, s.momentum)
                g, loss = timing.compute(rt, lambda: task.gradient(ahead, idx), s.batch_size)
                w, v = rules.nesterov_step(w, v, g, s.lr, s.momentum)
            else:
                g, loss = timing.compute(rt, lambda: task.gradient(w, idx), s.batch_size)
                w = rules.sgd_step(w, g, s.lr)
            if due:
                e = timing.exchange(rt, link, w, link.peer)
                w = w - e
                exchanges += 1
        rt.record_iteration(loss=loss, exchanged=due or var in ("async_sgd", "async_msgd",
                                                                "hogwild_sgd", "sync_sgd"))
        if snap is not None:
            snap.maybe(c if var == "sync_easgd" else w)
    if snap is not None:
        snap.maybe(c if var == "sync_easgd" else w, force=True)
    return {"exchanges": exchanges, "w": w, "c": c, "t_end_perf": time.perf_counter()}


def main(argv: list[str] | None = None) -> int:
    import argparse  # noqa: PLC0415
    p = argparse.ArgumentParser(prog="python -m hosts.easgd.worker", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    path = p.parse_args(argv).config
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s: %(levelname)s %(message)s")
    torch.set_num_threads(1)              # 2 shared cores: one thread per emulated host
    try:
        section, s, _ = load(path, "worker")
        torch_cfg, master, port, servers, snap_path = parse_worker(section, path)
        cc, nd = parse_worker_timing(section, path)
        masters = 0 if serving(s.variant) is None else (servers if serving(s.variant) == "hogwild" else 1)
        world = torch_cfg.get("world") if isinstance(torch_cfg, dict) else None
        rt = timing.open_runtime(torch_cfg, (world or 0) + masters)
    except ConfigError as e:
        log.error("bad config: %s", e)
        return program.EXIT_CONFIG
    ident = s.identity() | {"workers": rt.cfg.world, "calibrated": cc is not None}
    link, error, out = None, None, {}
    try:
        task = Task(s.seed, s.model, rt.cfg.rank, rt.cfg.world, s.batch_size, s.dataset)
        rt.device.profile(task.model, task.sample())
        if serving(s.variant) is not None:
            if master is None:
                raise ConfigError(f"{path}: variant {s.variant} needs worker.master")
            hogwild = serving(s.variant) == "hogwild"
            if cc is None:
                timing.dilate_fixed(rt, nd)     # before the master answers anyone's hello
                link = MasterLink(rt, master, port, servers, ident)
            elif hogwild:                       # calibrate with the master's parent process first
                cal_link = MasterLink(rt, master, port, servers, ident, base=True)
                try:
                    rt.writer.write(timing.calibrate_master(rt, cal_link, task, cc, nd))
                finally:
                    cal_link.conn.close()
                link = MasterLink(rt, master, port, servers, ident)
            else:
                link = MasterLink(rt, master, port, servers, ident)
                rt.writer.write(timing.calibrate_master(rt, link, task, cc, nd))
        else:
            timing.allreduce(rt, torch.zeros(1))         # connect and line up every worker
            if cc is not None:
                rt.writer.write(timing.calibrate_sync(rt, task, cc, nd))
            else:
                timing.dilate_fixed(rt, nd)
                rt.collective.barrier()                  # no worker starts before the network is dilated
            rt.trace.reset()
            rt._reset_counters()
        snap = Snapshots(s.snapshot_every_s) if snap_path else None
        if snap is not None:
            snap.maybe(task.weights(), force=True)
        out = train(rt, task, s, link, snap)
        if snap is not None:
            snap.save(snap_path)
        from hosts.easgd.model import Evaluator  # noqa: PLC0415
        rt.writer.write({"type": "final", "host": rt.cfg.host, "rank": rt.cfg.rank, "variant": s.variant,
                         "exchanges": out["exchanges"], "w_sha256": digest(out["w"]),
                         "c_sha256": digest(out["c"]) if s.variant == "sync_easgd" else None,
                         "local_acc": Evaluator(s.seed, s.model, s.dataset)(out["w"]),
                         # training clock (perf_counter, shared by the machine's processes)
                         "t0_perf": rt.t0, "t_end_perf": out["t_end_perf"]})
        return 0
    except (NetError, OSError, ValueError) as e:
        error = f"{type(e).__name__}: {e}"
        log.error("%s", error)
        return program.EXIT_NET
    except CalibrationRefused as e:
        error = f"{type(e).__name__}: {e}"
        log.error("%s", error)
        return program.EXIT_REFUSED
    finally:
        try:
            if link is not None:
                link.close()
        except (NetError, OSError) as e:
            log.warning("closing the master link: %s", e)
        rt.close(error is None, error, variant=s.variant, exchanges=out.get("exchanges"),
                 tdf=rt.device.time_scale, calibrated=cc is not None, network_dilated=nd is not None)


if __name__ == "__main__":
    sys.exit(main())
