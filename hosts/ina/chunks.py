"""A tensor as INA packets: runs of chunks (`Seg`), their packets built at once,
and the per-chunk fixed-point header exponents.

A tensor's chunks are one or more runs of consecutive seqs (a run never
crosses the seq wrap). A run's packets are built with numpy into one buffer
of PKT_DTYPE rows (header + 64 big-endian lanes, PKT_SIZE apart) and sent as
slices of it; a one-chunk run (P4SGD micro-batches) is one struct.pack.
testbed/wire.py is the wire contract; these are its numpy views.
"""
from __future__ import annotations

import struct
from types import ModuleType

import numpy as np

from hosts.ina import fixed_point as fp
from hosts.ina.handles import InaHandle
from testbed import wire

LANES = wire.MAX_VALUES_PER_PACKET
_H = wire.HEADER_STRUCT
_I32 = struct.Struct(">i")

# One chunk's packet (header + 64 lanes) as numpy sees it: a tensor's packets are
# built at once in one contiguous array of these, and sent as slices of it.
PKT_DTYPE = np.dtype([("h", wire.HEADER_DTYPE), ("v", ">i4", (LANES,))])
PKT_SIZE = PKT_DTYPE.itemsize                       # 272
# A full chunk's Ethernet frame (less FCS): what the dilated links serialize.
FRAME_BYTES = wire.ETH_HLEN + wire.IPV4_HLEN + wire.UDP_HLEN + wire.INA_HLEN + 4 * LANES
assert PKT_SIZE == wire.INA_HLEN + 4 * LANES
# A received datagram in a fixed-size receive slot (longer ones are truncated;
# the header's count must still fit the datagram's length).
RX_STRIDE = 320
RX_DTYPE = np.dtype({"names": ["h", "v"], "formats": [wire.HEADER_DTYPE, (">i4", (LANES,))],
                     "offsets": [0, wire.INA_HLEN], "itemsize": RX_STRIDE})


class Seg:
    """A run of consecutive chunks of one handle: seqs seq0 .. seq0+n-1 (never
    across the 2^32 wrap), so chunk i sits in slot (slot0 + i) % window and the
    next chunk of its slot within the run is i + window. `buf` holds the n
    packets at PKT_SIZE strides (None until built: agreed scale not known yet)."""

    __slots__ = ("handle", "seq0", "slot0", "n", "c0", "op", "is_exp", "patience_s", "buf",
                 "addr", "last", "pkt", "tag")

    def __init__(self, handle: InaHandle, seq0: int, slot0: int, n: int, c0: int, op: int,
                 is_exp: bool, patience_s: float | None):
        self.handle, self.seq0, self.slot0, self.n, self.c0 = handle, seq0, slot0, n, c0
        self.op, self.is_exp, self.patience_s = op, is_exp, patience_s
        self.buf: np.ndarray | None = None     # n > 1: the packets, PKT_SIZE apart
        self.pkt: bytes | None = None          # n == 1: the packet
        self.addr = 0
        self.tag = 0                           # the window's number for this run
        # value count of the handle's last chunk (the others carry LANES)
        self.last = 1 if is_exp else handle.n - LANES * (handle.nchunks - 1)

    def count(self, ci: int) -> int:
        if self.is_exp:
            return 1
        return self.last if self.c0 + ci == self.handle.nchunks - 1 else LANES

    def counts(self, ci: np.ndarray) -> np.ndarray:
        if self.is_exp:
            return np.ones(len(ci), np.int64)
        return np.where(ci == self.handle.nchunks - 1 - self.c0, self.last, LANES)

    @property
    def ready(self) -> bool:
        return self.pkt is not None or self.buf is not None

    def packet(self, ci: int) -> bytes:
        if self.pkt is not None:
            return self.pkt
        off = ci * PKT_SIZE
        return self.buf[off:off + wire.INA_HLEN + 4 * self.count(ci)].tobytes()


def exponent_packet(seg: Seg, job_id: int, worker_id: int, window: int, e: int) -> bytes:
    """The one-value MAX packet by which workers agree on a tensor's scale."""
    return _H.pack(wire.INA_VERSION, wire.OP_MAX, 0, job_id, seg.slot0,
                   (seg.seq0 // window) & 1, worker_id, seg.seq0, 1, e, 0) + _I32.pack(e)


def build_packets(seg: Seg, ints: np.ndarray, exps: np.ndarray | int, job_id: int,
                  worker_id: int, window: int, hp: ModuleType | None = None) -> None:
    """All packets of a run at once: headers and big-endian values (hp: the
    compiled loops of hosts/ina/hostpath.py, else numpy)."""
    h, W = seg.handle, window
    lo, hi = seg.c0 * LANES, min(h.n, (seg.c0 + seg.n) * LANES)
    if seg.n == 1:                       # latency path: one struct.pack, no numpy arrays
        e = exps if isinstance(exps, int) else int(exps[seg.c0])
        seg.pkt = _H.pack(wire.INA_VERSION, seg.op, 0, job_id, seg.slot0,
                          (seg.seq0 // W) & 1, worker_id, seg.seq0, hi - lo, e, 0) \
            + ints[lo:hi].astype(">i4").tobytes()
        return
    if hp is not None:
        buf = np.empty(seg.n * PKT_SIZE, np.uint8)
        last = seg.last if seg.c0 + seg.n == h.nchunks else LANES
        if isinstance(exps, int):
            hp.build_run(buf, ints, lo, hi, seg.seq0, seg.n, W, job_id, worker_id, seg.op, last,
                         None, exps)
        else:
            e = np.ascontiguousarray(exps[seg.c0:seg.c0 + seg.n], np.int64)
            hp.build_run(buf, ints, lo, hi, seg.seq0, seg.n, W, job_id, worker_id, seg.op, last,
                         e, 0)
        seg.buf = buf
        seg.addr = buf.ctypes.data
        return
    p = np.zeros(seg.n, PKT_DTYPE)
    hd = p["h"]
    seqs = np.arange(seg.seq0, seg.seq0 + seg.n, dtype=np.int64)
    hd["version"] = wire.INA_VERSION
    hd["op"] = seg.op
    hd["job_id"] = job_id
    hd["slot"] = seqs % W
    hd["slot_ver"] = (seqs // W) & 1
    hd["worker_id"] = worker_id
    hd["seq"] = seqs
    hd["count"] = LANES
    if seg.c0 + seg.n == h.nchunks:
        hd["count"][-1] = seg.last
    hd["exponent"] = exps if isinstance(exps, int) else exps[seg.c0:seg.c0 + seg.n]
    v = p["v"]                       # (n, LANES), strided: fill row-wise
    full, rem = divmod(hi - lo, LANES)
    v[:full] = ints[lo:lo + full * LANES].reshape(full, LANES)
    if rem:
        v[full, :rem] = ints[lo + full * LANES:hi]
    seg.buf = p.view(np.uint8)
    seg.addr = seg.buf.ctypes.data


def chunk_exponents(flat: np.ndarray, k: int, nchunks: int, n_workers: int) -> np.ndarray:
    """Header exponent per chunk at a fixed scale: the chunk's own exponent,
    capped at the largest that fits, or one above it if this worker clipped a
    value of the chunk, so the MAX-ed result exponent flags it to everyone."""
    pad = nchunks * LANES - flat.size
    lim_e = fp.max_exponent_for_scale(k, n_workers)
    if nchunks == 1:                     # latency path: scalar arithmetic
        m = float(np.abs(flat).max())
        e = int(np.frexp(m)[1]) if m > 0 else fp.EXP_ZERO
        # rint(m * 2^k) > L  <=>  m * 2^k > L + 1/2 (L is a power of two)
        clipped = bool(np.ldexp(m, k) > fp.contribution_limit(n_workers) + 0.5)
        e = lim_e + 1 if clipped else min(e, lim_e)
        return np.array([min(max(e, fp.EXP_WIRE_MIN), fp.EXP_WIRE_MAX)], np.int64)
    x = np.pad(flat.astype(np.float64), (0, pad)).reshape(nchunks, LANES)
    mags = np.abs(x).max(1)
    e = np.where(mags > 0, np.frexp(mags)[1], fp.EXP_ZERO)
    clipped = np.abs(np.rint(np.ldexp(mags, k))) > fp.contribution_limit(n_workers)
    e = np.minimum(e, lim_e)
    e[clipped] = lim_e + 1
    return np.clip(e, fp.EXP_WIRE_MIN, fp.EXP_WIRE_MAX).astype(np.int64)


def result_values(h: InaHandle, hp: ModuleType | None = None) -> np.ndarray:
    """A completed handle's int32 sums as its input's kind and shape: float32
    (fixed point back at the handle's scale), uint32 bits, or int32."""
    ints = h.ints[:h.n] if h.n != h.ints.size else h.ints
    if h.kind == "float":
        if hp is None:
            return fp.from_fixed(ints, h.scale_exp, np.float32).reshape(h.shape)
        out = np.empty(ints.size, np.float32)
        hp.from_fixed(ints, int(h.scale_exp), out)
        return out.reshape(h.shape)
    if h.kind == "uint":
        return ints.view(np.uint32).reshape(h.shape)
    return ints.reshape(h.shape)


def as_int32_bits(flat: np.ndarray, kind: str) -> np.ndarray:
    """Integers as the int32 bit patterns the switch combines (uint32 for 'uint')."""
    if flat.dtype == np.bool_:
        flat = flat.astype(np.int32)
    lo, hi = (0, 2**32 - 1) if kind == "uint" else (-(2**31), 2**31 - 1)
    if flat.size and (int(flat.min()) < lo or int(flat.max()) > hi):
        raise OverflowError(f"{flat.dtype} values outside {lo}..{hi} do not fit one 32-bit lane")
    if kind == "uint":
        return flat.astype(np.uint32).view(np.int32)
    return flat.astype(np.int32)
