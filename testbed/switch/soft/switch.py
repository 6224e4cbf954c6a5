"""The soft switch: ports + pipeline + impairments + pcaps, and the event loop.

One loop iteration:
  epoll (not while a ring holds a due frame; right after a batch, a bounded busy
  poll of the receive rings first, no system call; a ring shaping its link
  (config ingress_mbps) holds a frame until the link would have delivered it,
  its socket edge-triggered, the timerfd waking the loop then)
  -> per ready port (every ring port: a
  look at the ring is a memory read): recv up to `batch` frames -> pcap in -> ingress
  impairments -> one pipeline.process_batch for all ports -> group by output
  port -> egress impairments -> (delay queues) -> sendmmsg per port -> pcap out.

Everything per batch; per frame the loop only does list appends. With io_impl
ring_fastpath (the default when built), an iteration with no impairments but
loss, no dilation and no queued frames instead makes one call into the compiled loop
(fastloop.py): rings -> program -> sendmmsg, no Python per frame (it formats
the pcap records too, handed to the same PcapWriters);
the stats' packet_path counts batches and frames per path. A control
plane thread (P4Runtime server) programs the switch through `pipeline` and
`tables()`; swapping `switch.pipeline` takes effect at the next batch.
"""
from __future__ import annotations

import ctypes
import logging
import os
import resource
import select
import signal
import socket
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from hosts.common.json_files import write_json_atomic
from testbed.libc import libc as c_library
from testbed.switch.pipeline import Pipeline, make_pipeline
from testbed.switch.soft.config import ConfigError, SwitchConfig
from testbed.switch.soft import dataplane
from testbed.switch.soft.config import IO_IMPLS
from testbed.switch.soft.dataplane import PortDown, PortIO, open_port, resolve_io_impl, rx_ring_bytes
from testbed.switch.soft.fastloop import RingLoop
from testbed.switch.soft.dilation import POLL_S as DILATION_POLL_S
from testbed.switch.soft.dilation import UDP_MODE_HEADER_BYTES, DilationControl
from testbed.switch.soft.impairments import DelayQueue, PortImpairment
from testbed.switch.soft.pcap import PcapWriter

log = logging.getLogger("softswitch")

DIRECTIONS = ("ingress", "egress")
# A shaped ingress link may deliver a frame this many bytes' time early, as htb's
# default cburst (1600 b here, `tc class show`) lets one packet through: one
# wakeup of the loop then releases a few small frames instead of one.
SHAPER_SLACK_BYTES = 1600


class _Timer:
    """timerfd on CLOCK_MONOTONIC (the clock of time.monotonic()), so the loop
    wakes up for delayed frames with sub-millisecond precision; epoll's own
    timeout is rounded up to whole milliseconds."""

    class _TS(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    class _ITS(ctypes.Structure):
        _fields_ = [("interval_sec", ctypes.c_long), ("interval_nsec", ctypes.c_long),
                    ("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    def __init__(self) -> None:
        libc = c_library()
        self._create, self._settime = libc.timerfd_create, libc.timerfd_settime
        fd = self._create(1, os.O_NONBLOCK | os.O_CLOEXEC)  # CLOCK_MONOTONIC
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self.armed: float | None = None
        self._its = self._ITS()

    def arm(self, when: float) -> None:
        when = max(when, 1e-9)  # 0 would disarm the timer
        sec = int(when)
        self._its.sec, self._its.nsec = sec, int((when - sec) * 1e9)
        if self._settime(self.fd, 1, ctypes.byref(self._its), None) < 0:  # TFD_TIMER_ABSTIME
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self.armed = when

    def clear(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.armed = None

    def close(self) -> None:
        os.close(self.fd)


class SoftSwitch:
    """A running soft switch. `ports` may be injected (tests, UDP mode); else
    each configured interface is opened with open_port()."""

    def __init__(self, config: SwitchConfig, ports: dict[int, PortIO] | None = None,
                 pipeline: Pipeline | None = None):
        self.config = config
        self.name = config.name
        self.batch = config.batch
        self.started_wall = time.time()
        self.started_mono = time.monotonic()
        self._epoch = self.started_wall - self.started_mono  # pcap timestamps from monotonic
        self.pipeline: Pipeline = pipeline or make_pipeline(config.pipeline, config.raw)
        self.pipeline_name = config.pipeline if pipeline is None else type(pipeline).__name__
        self.ports: dict[int, PortIO] = {}
        if ports is None and config.raw.get("io") == "udp":
            # Rootless local mode: each port is a UDP socket carrying INA payloads.
            from testbed.switch.soft.udp_io import udp_ports  # noqa: PLC0415
            ports = udp_ports(config)
        # mmap_ring | mmsg for AF_PACKET ports (raises when mmap_ring is asked for but not built)
        io_impl = resolve_io_impl(config.io_impl) if ports is None else None
        try:
            specs = ports or config.ports
            for no, intf in specs.items():
                self.ports[no] = (intf if not isinstance(intf, str)
                                  else open_port(intf, config.batch, io_impl,
                                                 rx_ring_bytes(no in config.ingress_mbps, len(specs))))
            self._shape_ingress(config.ingress_mbps)
        except BaseException:
            self.close()
            raise
        modes = {getattr(io, "mode", None) for io in self.ports.values()}
        # What the ports really run (the stats' io_impl): None for UDP or mixed ports.
        self.io_impl = modes.pop() if len(modes) == 1 and modes <= set(IO_IMPLS) else None
        # ring_fastpath: the compiled loop (fastloop.py) reads the rings whenever it can.
        self.fastpath = io_impl == "ring_fastpath" and self.io_impl == "mmap_ring"
        if self.fastpath:
            self.io_impl = "ring_fastpath"
        self.ring_loop: RingLoop | None = None
        # Batches (loop iterations with frames) and frames per packet path.
        self.path_batches = {"compiled": 0, "python": 0}
        self.path_frames = {"compiled": 0, "python": 0}
        self.io_spin_ns = config.io_spin_us * 1000
        self.ingress: dict[int, PortImpairment] = {}
        self.egress: dict[int, PortImpairment] = {}
        for no in self.ports:
            cfg = config.impairments.get(no, {})
            for d_i, direction in enumerate(DIRECTIONS):
                # One independent, reproducible random stream per port and direction.
                rng = np.random.default_rng([config.seed, no, d_i])
                imp = PortImpairment.from_config(cfg.get(direction), rng)
                (self.ingress if direction == "ingress" else self.egress)[no] = imp
        self._active_in = {no: imp for no, imp in self.ingress.items() if imp.active}
        self._active_eg = {no: imp for no, imp in self.egress.items() if imp.active}
        # Network dilation (dilation.py): off until calibration writes the control file.
        self.dilation = DilationControl(
            Path(config.stats_path).parent,
            header_bytes=UDP_MODE_HEADER_BYTES if config.raw.get("io") == "udp" else 0,
            inter_switch_ports=config.inter_switch_ports)
        self.ingress_queue = DelayQueue()  # items: (in_port, frame) before the pipeline
        self.egress_queue = DelayQueue()   # items: (out_port, frame) before sending
        self.pcap_in: dict[int, PcapWriter] = {}
        self.pcap_out: dict[int, PcapWriter] = {}
        if config.pcap_dir is not None:
            config.pcap_dir.mkdir(parents=True, exist_ok=True)
            for no, io in self.ports.items():
                base = _pcap_name(io.name)
                # Both packet paths cut frames at the writer's snaplen (fastloop.RingLoop).
                self.pcap_in[no] = PcapWriter(config.pcap_dir / f"{base}_in.pcap", config.pcap_snaplen)
                self.pcap_out[no] = PcapWriter(config.pcap_dir / f"{base}_out.pcap", config.pcap_snaplen)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = False
        self._snapshot_requested = False
        self.snapshots = 0
        self.bad_port_drops = 0
        self.dropped_at_exit = 0
        self.iterations = 0
        self.rx_batches = 0
        self.max_rx_batch = 0
        self.spin_hits = 0   # iterations where the ring busy poll found a frame (no epoll)
        try:
            self._timer: _Timer | None = _Timer()
        except (OSError, AttributeError):
            self._timer = None
            log.warning("timerfd unavailable: delays are rounded up to whole milliseconds")

    def _shape_ingress(self, rates: dict[int, float]) -> None:
        """Links into the switch that serialize at a rate (config.ingress_mbps): the
        port's receive ring hands each frame out once the link would have delivered
        it (_pktio.c RxRing.shape), up to one MTU's time early, as htb's default
        cburst lets one packet through."""
        for no, mbps in rates.items():
            ring = getattr(self.ports.get(no), "ring", None)
            if ring is None:
                raise ConfigError(f"ingress_mbps.{no}: port {no} has no receive ring (io "
                                  f"{getattr(self.ports.get(no), 'mode', 'udp')}), so it cannot shape "
                                  f"its link; use io_impl ring_fastpath or mmap_ring")
            rate = mbps * 1e6
            ring.shape(rate, SHAPER_SLACK_BYTES * 8 / rate)

    # -- control ---------------------------------------------------------------
    def tables(self) -> dict[str, Any]:
        """The pipeline's match tables by P4 name, for a control-plane server."""
        t = getattr(self.pipeline, "tables", None)
        if isinstance(t, dict):
            return dict(t)
        if callable(t):
            return t()
        fwd = getattr(self.pipeline, "forward", None)
        return {"forward": fwd} if fwd is not None else {}

    def request_stop(self) -> None:
        """Safe from signal handlers and other threads."""
        self._stop = True
        self._wake()

    def request_snapshot(self) -> None:
        self._snapshot_requested = True
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop and write stats; SIGUSR1: write stats, keep running."""
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "_stop", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "_stop", True))
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "_snapshot_requested", True))

    # -- loop -------------------------------------------------------------------
    def run(self) -> None:
        ep = select.epoll()
        fd2port: dict[int, int] = {}
        for no, io in self.ports.items():
            fd2port[io.fileno()] = no
            # A shaped ring (config ingress_mbps) is read every iteration and checked
            # before the loop sleeps, so its socket need only wake the loop for new
            # frames (edge-triggered): one holding a frame not due yet must not keep
            # epoll awake. Other ports stay level-triggered, as before shaping existed.
            ring = getattr(io, "ring", None)
            ep.register(io.fileno(), select.EPOLLIN | (select.EPOLLET if ring is not None
                                                       and ring.shaper is not None else 0))
        wake_fd = self._wake_r.fileno()
        ep.register(wake_fd, select.EPOLLIN)
        timer_fd = -1
        if self._timer:
            timer_fd = self._timer.fd
            ep.register(timer_fd, select.EPOLLIN)
        ports, batch = self.ports, self.batch
        pcap_in, pcap_out = self.pcap_in, self.pcap_out
        act_in, act_eg = self._active_in, self._active_eg
        iq, eq = self.ingress_queue, self.egress_queue
        epoch, clock = self._epoch, time.monotonic
        timer = self._timer
        dilation = self.dilation
        # Ring ports: read every iteration (no readiness needed), and busy-polled
        # for up to io_spin_us after a batch before the loop sleeps in epoll.
        rings = {no: io for no, io in ports.items() if getattr(io, "ring", None) is not None}
        ring_objs = [io.ring for io in rings.values()]
        shaped = [r for r in ring_objs if r.shaper is not None]
        wait_any = dataplane._pktio.wait_any if rings else None
        spin_ns = self.io_spin_ns
        got_any = False
        fastpath = self.fastpath
        # The compiled path runs these impairments only if all are loss alone (fastloop.py).
        fast_impair = False
        if fastpath:
            self.ring_loop = RingLoop(rings, pcap_in, pcap_out)
            fast_impair = self.ring_loop.set_impairments(act_in, act_eg)
        path_batches, path_frames = self.path_batches, self.path_frames
        err_mask = select.EPOLLERR | select.EPOLLHUP
        try:
            while not self._stop:
                # Idle wake-ups so that a dilation request is seen within POLL_S.
                timeout = DILATION_POLL_S
                # (no comprehension on the common path: nothing queued, no shaped port)
                dues = [q.next_due() for q in (iq, eq) if q.heap] if iq.heap or eq.heap else []
                if shaped:
                    t = clock()
                    dues += [t + d for d in (r.due_in() for r in shaped) if d is not None]
                if dues:
                    nd = min(dues)
                    if timer is not None:
                        if timer.armed is None or nd < timer.armed:
                            timer.arm(nd)
                    else:
                        timeout = min(timeout, max(0.0, nd - clock()))
                # A frame waiting (and due) in a ring: no epoll (right after a batch, spin
                # for the next one first).
                if ring_objs and wait_any(ring_objs, spin_ns if got_any else 0):
                    events = ()
                    self.spin_hits += got_any
                else:
                    events = ep.poll(timeout)
                now = clock()
                self.iterations += 1
                if dilation.poll(now):
                    held = dilation.impairments_held
                    act_in = {} if held else self._active_in
                    act_eg = {} if held else self._active_eg
                    if fastpath:
                        fast_impair = self.ring_loop.set_impairments(act_in, act_eg)
                line = dilation.line

                frames: list[bytes] = []
                in_ports: list[int] = []
                if iq.heap:
                    for no, f in iq.pop_due(now):
                        frames.append(f)
                        in_ports.append(no)
                ready: list[int] = list(rings)
                for fd, ev in events:
                    no = fd2port.get(fd)
                    if no is None:
                        if fd == wake_fd:
                            self._drain_wake()
                        elif fd == timer_fd:
                            timer.clear()
                        continue
                    if no not in rings:
                        ready.append(no)
                    elif ev & err_mask:
                        # A ring makes no system call that would return the socket's error.
                        try:
                            ports[no].check_error()
                        except PortDown as e:
                            self._port_down(ep, fd2port, no, e)
                            del rings[no]
                            ring_objs = [io.ring for io in rings.values()]
                            ready.remove(no)
                            if fastpath:
                                self.ring_loop.close()
                                self.ring_loop = RingLoop(rings, pcap_in, pcap_out)
                                fast_impair = self.ring_loop.set_impairments(act_in, act_eg)
                got_any = False
                # The compiled path, when nothing Python-side must see these frames.
                prog = (self.ring_loop.program_for(self.pipeline)
                        if fastpath and fast_impair and not frames and not iq.heap and not eq.heap and line is None
                        else None)
                if prog is None and fastpath and self.ring_loop.holds_loss:
                    self.ring_loop.release_loss()     # the Python path decides from the same streams
                if prog is not None:
                    n = self.ring_loop.run(batch, prog, now + epoch)
                    if n:
                        got_any = True
                        self.rx_batches += 1
                        if n > self.max_rx_batch:
                            self.max_rx_batch = n
                        path_batches["compiled"] += 1
                        path_frames["compiled"] += n
                    ready = [no for no in ready if no not in rings]
                for no in ready:
                    io = ports[no]
                    try:
                        got = io.recv_batch(batch)
                    except PortDown as e:
                        self._port_down(ep, fd2port, no, e)
                        continue
                    if not got:
                        continue
                    got_any = True
                    self.rx_batches += 1
                    if len(got) > self.max_rx_batch:
                        self.max_rx_batch = len(got)
                    if pcap_in:
                        pcap_in[no].write_batch(got, now + epoch)
                    imp = act_in.get(no)
                    if imp is not None:
                        got, later = imp.split(got, now)
                        if later:
                            iq.push_many([(d, (no, f)) for d, f in later])
                    if line is not None and got:
                        # Dilated: held until the sender's uplink would have delivered it.
                        iq.push_many(line.uplink(no, got, now))
                        continue
                    frames.extend(got)
                    in_ports.extend([no] * len(got))

                out_by_port: defaultdict[int, list[bytes]] = defaultdict(list)
                if eq.heap:
                    for no, f in eq.pop_due(now):  # already impaired: straight out
                        out_by_port[no].append(f)
                if frames:
                    path_batches["python"] += 1
                    path_frames["python"] += len(frames)
                    new_by_port: defaultdict[int, list[bytes]] = defaultdict(list)
                    for no, f in self.pipeline.process_batch(frames, in_ports, now):
                        new_by_port[no].append(f)
                    for no, fl in new_by_port.items():
                        imp = act_eg.get(no)
                        if imp is not None:
                            fl, later = imp.split(fl, now)
                            if later:
                                eq.push_many([(d, (no, f)) for d, f in later])
                        if line is not None and fl:
                            # Dilated: every new frame leaves when the slowed hardware would.
                            eq.push_many(line.schedule(no, fl, now))
                        elif no in out_by_port:
                            out_by_port[no].extend(fl)
                        else:
                            out_by_port[no] = fl
                for no, fl in out_by_port.items():
                    io = ports.get(no)
                    if io is None:
                        self.bad_port_drops += len(fl)
                        continue
                    sent = io.send_batch(fl)
                    if pcap_out and sent:
                        pcap_out[no].write_batch(sent, now + epoch)

                if self._snapshot_requested:
                    self._snapshot_requested = False
                    self.write_stats(final=False)
        finally:
            ep.close()

    @staticmethod
    def _port_down(ep, fd2port: dict[int, int], no: int, e: PortDown) -> None:
        log.info("port %d down: %s", no, e)
        for fd, n in list(fd2port.items()):
            if n == no:
                ep.unregister(fd)
                del fd2port[fd]

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # -- stats / teardown ------------------------------------------------------------
    def stats(self, final: bool = False) -> dict:
        if self.ring_loop is not None:
            self.ring_loop.fold()     # the compiled loop's counts into ports and program
        ru = resource.getrusage(resource.RUSAGE_SELF)
        sched_run, sched_wait = _schedstat()
        ports = {}
        modes = set()
        for no, io in self.ports.items():
            s = dict(io.stats())
            modes.add(s.get("io_mode"))
            ring = getattr(io, "ring", None)
            # {rate_bps, slack_s, frames, queued} for a shaped link into this port
            s["ingress_shaper"] = ring.shaper if ring is not None else None
            s["impairments"] = {d: {"active": imp.active, "config": asdict(imp.config),
                                    **imp.counters()}
                                for d, imp in (("ingress", self.ingress[no]),
                                               ("egress", self.egress[no]))}
            ports[str(no)] = s
        return {
            "name": self.name, "pid": os.getpid(), "final": final, "snapshot": self.snapshots,
            "time": time.time(), "io_mode": "+".join(sorted(m for m in modes if m)),
            # "mmap_ring" | "mmsg": how the AF_PACKET ports run (None: UDP or injected ports)
            "io_impl": self.io_impl, "io_spin_us": self.io_spin_ns // 1000,
            "batch": self.batch,
            "ports": ports,
            "pipeline": {"name": self.pipeline_name, "counters": self.pipeline.counters()},
            # "compiled" | "reference" for the ina program (None: a pipeline with one implementation)
            "pipeline_impl": getattr(self.pipeline, "pipeline_impl", None),
            # which packet path ran (io_impl ring_fastpath: compiled when it could)
            "packet_path": {"batches": dict(self.path_batches), "frames": dict(self.path_frames)},
            "drops": {"bad_output_port": self.bad_port_drops + (
                          self.ring_loop.bad_port_drops if self.ring_loop is not None else 0),
                      "delay_queue_at_exit": self.dropped_at_exit},
            "network_dilation": self.dilation.stats(),
            "delay_queue": {"ingress_pending": len(self.ingress_queue),
                            "egress_pending": len(self.egress_queue)},
            "loop": {"iterations": self.iterations, "rx_batches": self.rx_batches,
                     "max_rx_batch": self.max_rx_batch, "spin_hits": self.spin_hits},
            "cpu_time_s": ru.ru_utime + ru.ru_stime,
            "cpu_sched_s": sched_run, "runqueue_wait_s": sched_wait,
            "ctx_switches": {"voluntary": ru.ru_nvcsw, "involuntary": ru.ru_nivcsw},
            "cpu_user_s": ru.ru_utime, "cpu_sys_s": ru.ru_stime,
            "wall_time_s": time.monotonic() - self.started_mono,
            "max_rss_kib": ru.ru_maxrss,
        }

    def write_stats(self, final: bool = False) -> dict:
        self.snapshots += 1
        for w in (*self.pcap_in.values(), *self.pcap_out.values()):
            w.flush()
        st = self.stats(final)
        if self.config.stats_path is not None:
            write_json_atomic(self.config.stats_path, st, indent=1, sort_keys=True)
        return st

    def close(self) -> dict | None:
        """Drop what is still queued, close pcaps and sockets; returns final stats."""
        st = None
        if hasattr(self, "egress_queue"):
            self.dropped_at_exit = len(self.ingress_queue.drain()) + len(self.egress_queue.drain())
            for w in (*self.pcap_in.values(), *self.pcap_out.values()):
                w.close()
            st = self.stats(final=True)
        if getattr(self, "ring_loop", None) is not None:
            self.ring_loop.close()
            self.ring_loop = None
        for io in self.ports.values():
            try:
                io.close()
            except OSError:
                pass
        if getattr(self, "_timer", None):
            self._timer.close()
            self._timer = None
        for s in (getattr(self, "_wake_r", None), getattr(self, "_wake_w", None)):
            if s is not None:
                s.close()
        return st


def _schedstat() -> tuple[float | None, float | None]:
    """(on-CPU seconds, seconds runnable but waiting for a CPU) from the
    scheduler: ns-exact, unlike tick-sampled rusage; the second one tells
    "the machine is too busy" apart from "the switch is too slow"."""
    try:
        with open("/proc/self/schedstat") as f:
            run, wait = f.read().split()[:2]
        return int(run) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return None, None


def _pcap_name(intf: str) -> str:
    """udp:127.0.0.1:9000 -> udp_127.0.0.1_9000 (a usable file name)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in intf)
