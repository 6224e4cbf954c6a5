"""Part lhc_codec of bench/gpu_constants.py: a torch port of hosts/lhc/codec.py, checked
against it and timed.

The port: support bitmap, the plan = peeling on counts, encode = signed scatter-add of 3
hashes into rows x lanes int32 counters + the dense 2-core, decode = peeling rounds + a
final all-zero check, using the numpy module's own block_hashes / sizing rules so cells
and signs are identical. First checked bit for bit against the numpy codec (plan, every
worker's payload, the decoded sum). Then per model profile of hosts/lhc/profiles.py at
FULL size, 4 workers (masks from hosts/lhc/gradients.py's ProfileSource run at
size_scale 1, overlap 0.5), and the public demo's setting (2^27 values, 5 %, one mask
for all), CUDA events, median of 5 after one warm-up, of: support, plan, encode (one
worker), decode; beside the bytes and launches hosts/lhc/timing.step_bytes charges for
the step, effective_GBps = those bytes / measured time, and the kernels the torch code
launches (torch.profiler). The model charges one kernel per peeling round; this decode
launches 4 (recorded). The hash tables (K x blocks, from codec.block_hashes) are cached
per size, outside the plan's time. Torch ops, not fused kernels: an upper bound on what
a hand-written codec needs.

Imports the numpy-only hosts.lhc modules codec, sizing, profiles, gradients and, for the
modeled bytes, timing (the GPU host has no project venv).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bench.gpu.common import (Budget, Results, Sizes, error_record, free_memory, log, peak_gib, reset_peak,
                              safe_count_kernels, summary, time_ms)
from hosts.lhc import codec, profiles, sizing

WORKERS = 4
PROFILE_OVERLAP = 0.5          # hosts/lhc/gradients.py ProfileSource default (papers/lhc.py profile_overlap)


BIT_SHIFTS = {}


def support_bitmap(g: torch.Tensor) -> torch.Tensor:
    """float gradient (length a multiple of 8) -> uint8 bitmap, bit i of byte k = g[8k + i] != 0
    (codec.pack_bits' layout, bytes instead of uint32 words)."""
    s = BIT_SHIFTS.setdefault(g.device, torch.arange(8, dtype=torch.uint8, device=g.device))
    bits = g.ne(0).view(torch.uint8).view(-1, 8)
    return (bits << s).sum(1, dtype=torch.uint8)


def unpack_bitmap(words: torch.Tensor, n: int) -> torch.Tensor:
    s = BIT_SHIFTS.setdefault(words.device, torch.arange(8, dtype=torch.uint8, device=words.device))
    return ((words[:, None] >> s) & 1).view(-1)[:n].bool()


_HASHES: dict = {}


def hash_tables(blocks: int, rows: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """codec.block_hashes (numpy) on the device, cached per size: they depend on (blocks,
    rows) only, like the shared seeds; a few K x blocks values, not part of any step's time."""
    key = (blocks, rows, str(dev))
    if key not in _HASHES:
        row, sign = codec.block_hashes(blocks, rows)
        # codec caches them read-only: copy (torch.from_numpy would share and warn)
        _HASHES[key] = (torch.tensor(row).to(dev), torch.tensor(sign, dtype=torch.int32).to(dev))
    return _HASHES[key]


@dataclass
class TorchPlan:
    """codec.Plan on the device, with the sketched positions stored in peeling order, so a
    round is a contiguous slice [bounds[r], bounds[r+1])."""
    n: int
    lanes: int
    rows: int
    union: int
    order_pos: torch.Tensor       # flat index of each sketched position, in peeling order
    cells: torch.Tensor           # (sketched, K) counter per hash
    signs: torch.Tensor           # (sketched, K) int32 +-1
    pure_cell: torch.Tensor       # the counter it is read from when it peels
    pure_sign: torch.Tensor
    core_pos: torch.Tensor        # flat index of the 2-core positions (sent dense)
    bounds: list[int] = field(default_factory=list)
    alive: list[int] = field(default_factory=list)     # positions alive when each round starts
    round_sel: list[torch.Tensor] = field(default_factory=list)   # kept only when asked (check)
    core_idx: torch.Tensor | None = None

    @property
    def counters(self) -> int:
        return self.rows * self.lanes

    @property
    def rounds(self) -> int:
        return len(self.bounds) - 1

    @property
    def core(self) -> int:
        return int(self.core_pos.numel())


def make_plan_torch(union_words: torch.Tensor, n: int, keep_rounds: bool = False) -> TorchPlan:
    """codec.make_plan (default sizing) from the OR-ed support bitmap, peeling on counts on
    the device. Rounds end with a host sync (their count depends on the data)."""
    dev = union_words.device
    pos = torch.nonzero(unpack_bitmap(union_words, n)).view(-1)
    m = int(pos.numel())
    L = sizing.lanes_for(m, n)
    R = sizing.sketch_rows(m, L)
    rowtab, signtab = hash_tables(-(-n // L), R, dev)
    b, t = pos // L, pos % L
    cells = rowtab[:, b] * L + t                       # (K, m)
    signs = signtab[:, b]
    count = torch.bincount(cells.view(-1), minlength=R * L).to(torch.int32)
    minus_one = torch.full((), -1, dtype=torch.int32, device=dev)
    alive, live_cells = torch.arange(m, device=dev), cells
    sels, js, bounds, alive_n = [], [], [0], []
    while alive.numel():
        pure = count[live_cells] == 1                  # (K, alive)
        idx = torch.nonzero(pure.any(0)).view(-1)      # host sync: the round's size
        if idx.numel() == 0:
            break
        alive_n.append(int(alive.numel()))
        sels.append(alive[idx])
        js.append(pure[:, idx].to(torch.uint8).argmax(0))   # first pure hash, as np.argmax
        gone = live_cells[:, idx].reshape(-1)
        count.index_add_(0, gone, minus_one.expand(gone.numel()))
        bounds.append(bounds[-1] + int(idx.numel()))
        keep = torch.ones(alive.numel(), dtype=torch.bool, device=dev)
        keep[idx] = False
        alive, live_cells = alive[keep], live_cells[:, keep]
    del count, live_cells
    order = torch.cat(sels) if sels else torch.empty(0, dtype=torch.int64, device=dev)
    j = torch.cat(js).long().view(-1, 1) if js else torch.empty((0, 1), dtype=torch.int64, device=dev)
    c_o = cells[:, order].t().contiguous()
    s_o = signs[:, order].t().contiguous()
    plan = TorchPlan(n, L, R, m, pos[order], c_o, s_o, c_o.gather(1, j).view(-1), s_o.gather(1, j).view(-1),
                     pos[alive], bounds, alive_n)
    if keep_rounds:
        plan.round_sel, plan.core_idx = sels, alive
    return plan


def encode_torch(q: torch.Tensor, plan: TorchPlan) -> torch.Tensor:
    """codec.encode: int32 sketch (rows x lanes) of the sketched positions ++ the core values."""
    v = q[plan.order_pos]
    acc = torch.zeros(plan.counters, dtype=torch.int32, device=q.device)
    acc.index_add_(0, plan.cells.view(-1), (plan.signs * v[:, None]).view(-1))   # int32 wraps, as the switch
    return torch.cat([acc, q[plan.core_pos]])


def peel_round(S: torch.Tensor, vals: torch.Tensor, plan: TorchPlan, a: int, b: int) -> None:
    """One decode round, 4 kernels by construction: gather the pure counters, times the
    sign (into vals), signs x values, scatter-subtract from all K counters."""
    torch.mul(S[plan.pure_cell[a:b]], plan.pure_sign[a:b], out=vals[a:b])
    S.index_add_(0, plan.cells[a:b].view(-1), (plan.signs[a:b] * vals[a:b, None]).view(-1), alpha=-1)


def decode_torch(payload: torch.Tensor, plan: TorchPlan) -> torch.Tensor:
    """codec.decode: the summed payload -> the summed int32 gradient; DecodeError unless
    every counter is zero after the last round (one host sync, at the end)."""
    if payload.numel() != plan.counters + plan.core:
        raise codec.DecodeError(f"payload has {payload.numel()} values, the plan expects "
                                f"{plan.counters + plan.core}")
    S = payload[:plan.counters].clone()
    vals = torch.empty(plan.order_pos.numel(), dtype=torch.int32, device=payload.device)
    for a, b in zip(plan.bounds[:-1], plan.bounds[1:]):
        peel_round(S, vals, plan, a, b)
    left = int(torch.count_nonzero(S))
    if left:
        raise codec.DecodeError(f"{left} sketch counter(s) nonzero after peeling")
    out = torch.zeros(plan.n, dtype=torch.int32, device=payload.device)
    out[plan.order_pos] = vals
    out[plan.core_pos] = payload[plan.counters:]
    return out


def wrap32_sum(payloads: list[np.ndarray]) -> np.ndarray:
    """The switch's int32 SUM: mod 2^32."""
    return np.sum(np.stack(payloads).astype(np.int64), axis=0).astype(np.int32)


def codec_check(dev: torch.device, n: int, density: float, seed: int = 1) -> dict:
    """The torch codec against hosts/lhc/codec.py, bit for bit: bitmaps, plan (rounds,
    core), each worker's payload, the decoded sum; and a corrupted sketch must raise."""
    rng = np.random.default_rng(seed)
    # 80 % of each worker's nonzeros on positions common to all workers, |value| just
    # under 2^28 with one sign per position: a position's sum stays < 2^30 (scale.py's
    # bound) while counters adding several common positions wrap around int32
    # (counted below as counters_wrapped_in_sum)
    sign = rng.choice([-1, 1], n)
    common = rng.choice(n, int(n * density * 0.8), replace=False)
    qs = []
    for _ in range(WORKERS):
        q = np.zeros(n, np.int32)
        idx = np.union1d(common, rng.choice(n, int(n * density * 0.2), replace=False))
        q[idx] = rng.integers(2 ** 28 - 2 ** 24, 2 ** 28, idx.size) * sign[idx]
        qs.append(q)
    union = np.logical_or.reduce([q != 0 for q in qs])
    ref_plan = codec.make_plan(union)
    ref_payloads = [codec.encode(q, ref_plan) for q in qs]
    ref_sum = codec.decode(wrap32_sum(ref_payloads), ref_plan)

    pad = (-n) % 8
    tq = [torch.from_numpy(np.concatenate([q, np.zeros(pad, np.int32)])).to(dev) for q in qs]
    bitmaps = [support_bitmap(q.float()) for q in tq]
    bitmap_ok = all(np.array_equal(bm.cpu().numpy()[:(n + 7) // 8],
                                   codec.pack_bits(q != 0).view(np.uint8)[:(n + 7) // 8])
                    for bm, q in zip(bitmaps, qs))
    words = bitmaps[0]
    for bm in bitmaps[1:]:
        words = words | bm
    plan = make_plan_torch(words, n, keep_rounds=True)
    rounds_ok = (plan.rounds == len(ref_plan.rounds)
                 and all(np.array_equal(s.cpu().numpy(), r[0]) for s, r in zip(plan.round_sel, ref_plan.rounds)))
    core_ok = np.array_equal(plan.core_idx.cpu().numpy(), ref_plan.core)
    tq = [q[:n] for q in tq]
    payloads = [encode_torch(q, plan) for q in tq]
    payload_ok = all(np.array_equal(p.cpu().numpy(), r) for p, r in zip(payloads, ref_payloads))
    summed = payloads[0]
    for p in payloads[1:]:
        summed = summed + p                  # int32 tensors: wraps mod 2^32
    decoded = decode_torch(summed, plan)
    decode_ok = np.array_equal(decoded.cpu().numpy(), ref_sum)
    exact_ok = np.array_equal(ref_sum, wrap32_sum(qs))
    corrupted = summed.clone()
    corrupted[0] += 1
    try:
        decode_torch(corrupted, plan)
        corrupt_caught = False
    except codec.DecodeError:
        corrupt_caught = True
    wrapped = int(np.count_nonzero(np.abs(np.sum(np.stack(ref_payloads).astype(np.int64), 0)) >= 2 ** 31))
    checks = {"bitmaps_equal": bitmap_ok, "rounds_equal": rounds_ok, "core_equal": core_ok,
              "payloads_equal": payload_ok, "decode_equal": decode_ok, "numpy_decode_exact": exact_ok,
              "corrupted_sketch_raises": corrupt_caught}
    return {"n_values": n, "density": density, "common_share": 0.8, "workers": WORKERS,
            "union_values": ref_plan.union,
            "rounds": len(ref_plan.rounds), "core_values": int(ref_plan.core.size),
            "counters_wrapped_in_sum": wrapped, **checks, "passed": all(checks.values())}


def profile_masks(name: str, scale: float) -> tuple[list[np.ndarray], float]:
    """Each worker's nonzero mask, hosts/lhc/gradients.py's generator at `scale` (iteration 0,
    seed 0): its per-layer mask only; values are drawn on the device."""
    from hosts.lhc.gradients import ProfileSource  # noqa: PLC0415  (numpy-only, imports profiles)
    t = time.perf_counter()
    src = ProfileSource(name, size_scale=scale, overlap=PROFILE_OVERLAP, seed=0)
    masks = [np.concatenate([src._layer_mask(r, 0, li, lo, hi, d, c)
                             for li, (lo, hi, d, c) in enumerate(src.layers)]) for r in range(WORKERS)]
    return masks, time.perf_counter() - t


def demo_masks(n: int, density: float = 0.05) -> tuple[list[np.ndarray], float]:
    """The public demo's setting (testbed/reproduce/papers/lhc.py DEMO_*): 2^27 values, 5 %
    nonzero, the same mask on every worker (its GPUs are seeded alike)."""
    t = time.perf_counter()
    m = np.random.default_rng(3).random(n) < density
    return [m] * WORKERS, time.perf_counter() - t


def _values(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """int32 fixed-point values, nonzero exactly on mask, |v| < 2^20 (4 workers never overflow)."""
    v = torch.randint(1, 2 ** 20, mask.shape, dtype=torch.int32, device=mask.device, generator=gen)
    v[torch.rand(mask.shape, device=mask.device, generator=gen) < 0.5] *= -1
    return v * mask


def _model_bytes():
    """hosts/lhc/timing.step_bytes (and its V100 constants), imported lazily: it pulls in
    hosts.common. If that does not import here, the same formulas, cited."""
    try:
        from hosts.lhc import timing  # noqa: PLC0415
        return timing.step_bytes, {"source": "hosts.lhc.timing.step_bytes",
                                   "v100_Bps": timing.V100_HBM_PEAK_BPS * timing.GPU_EFFICIENCY,
                                   "v100_launch_s": timing.GPU_LAUNCH_S}
    except Exception as exc:
        def step_bytes(step: str, work: dict) -> tuple[float, int]:
            n, u, rounds = work.get("n", 0), work.get("union", 0), work.get("rounds", 0)
            passes = work.get("passes", max(1, rounds))
            return {"support": (4 * n + n / 8, 1), "encode": (4 * n + 24 * u + 12 * u * passes, 2),
                    "decode": (24 * u * passes + 4 * n, max(1, rounds) + 1)}[step]
        return step_bytes, {"source": f"formulas of hosts/lhc/timing.py step_bytes (import failed: {exc})",
                            "v100_Bps": 900e9 * 0.7, "v100_launch_s": 5e-6}


def _step_record(ms: list[float], model_b: float, model_k: int, model: dict, formula: str,
                 kernels: dict | None, alive_b: float | None = None) -> dict:
    med = statistics.median(ms)
    rec = {**summary(ms, "ms"), "model_bytes": model_b, "model_kernels": model_k, "model_formula": formula,
           "effective_GBps": model_b / (med * 1e-3) / 1e9 if med > 0 else None,
           "model_v100_ms": (model_k * model["v100_launch_s"] + model_b / model["v100_Bps"]) * 1e3,
           "torch_kernels": kernels}
    if alive_b is not None:
        rec["model_bytes_alive_passes"] = alive_b
        rec["effective_GBps_alive_passes"] = alive_b / (med * 1e-3) / 1e9 if med > 0 else None
    return rec


def codec_case(dev: torch.device, masks_np: list[np.ndarray], reps: int) -> dict:
    """Support, plan, encode (worker 0) and decode at one gradient size, timed on the device."""
    step_bytes, model = _model_bytes()
    reset_peak(dev)
    n = masks_np[0].size
    pad = (-n) % 8
    gen = torch.Generator(device=dev).manual_seed(0)
    qs, words = [], None
    for m in masks_np:
        mask = torch.from_numpy(np.concatenate([m, np.zeros(pad, bool)])).to(dev)
        q = _values(mask, gen)
        del mask
        bm = support_bitmap(q.float())
        words = bm if words is None else words | bm
        qs.append(q)
    g0 = qs[0].float()
    rec: dict[str, Any] = {"n_values": n, "workers": WORKERS, "worker0_nonzeros": int(masks_np[0].sum())}

    sup_ms = time_ms(lambda: support_bitmap(g0), dev, reps)
    sup_k = safe_count_kernels(lambda: support_bitmap(g0), dev)
    del g0
    plan_ms = time_ms(lambda: make_plan_torch(words, n), dev, reps)
    plan_k = safe_count_kernels(lambda: make_plan_torch(words, n), dev)
    plan = make_plan_torch(words, n)
    u = plan.union
    qs = [q[:n] for q in qs]
    enc_ms = time_ms(lambda: encode_torch(qs[0], plan), dev, reps)
    enc_k = safe_count_kernels(lambda: encode_torch(qs[0], plan), dev)
    summed = encode_torch(qs[0], plan)
    truth = qs[0].clone()
    for q in qs[1:]:
        summed += encode_torch(q, plan)      # int32: wraps mod 2^32, as the switch's SUM
        truth += q
    del qs
    dec_ms = time_ms(lambda: decode_torch(summed, plan), dev, reps)
    dec_k = safe_count_kernels(lambda: decode_torch(summed, plan), dev)
    round_k = None
    if plan.rounds and dev.type == "cuda":
        S = summed[:plan.counters].clone()
        vals = torch.empty(plan.order_pos.numel(), dtype=torch.int32, device=dev)
        a, b = plan.bounds[0], plan.bounds[1]
        round_k = safe_count_kernels(lambda: peel_round(S, vals, plan, a, b), dev)
        del S, vals
    exact = bool(torch.equal(decode_torch(summed, plan), truth))

    passes = sum(plan.alive) / u if u else 0.0           # |U|-sized passes the peeling really makes
    work = {"n": n, "union": u, "rounds": plan.rounds}
    alive_work = dict(work, passes=passes)
    sb, sk = step_bytes("support", work)
    eb, ek = step_bytes("encode", work)
    db, dk = step_bytes("decode", work)
    ea, da = step_bytes("encode", alive_work)[0], step_bytes("decode", alive_work)[0]
    plan_b, plan_ba = 12 * u * max(1, plan.rounds), 12 * u * passes      # the plan term of encode's bytes
    sketch_b = eb - plan_b                                                # 4n + 24u
    rec.update({
        "union_values": u, "union_share": u / n, "lanes": plan.lanes, "rows": plan.rows,
        "counters": plan.counters, "rounds": plan.rounds, "core_values": plan.core,
        "peel_pass_share": passes / plan.rounds if plan.rounds else None,
        "peeled_per_round": [b - a for a, b in zip(plan.bounds[:-1], plan.bounds[1:])],
        "decode_exact": exact, "model_bytes_source": model["source"], "peak_mem_GiB": peak_gib(dev),
        "decode_kernels_per_round": {"by_construction": 4, "model_charges": 1, "profiled_one_round": round_k},
        "steps": {
            "support": _step_record(sup_ms, sb, sk, model, "step_bytes('support'): 4n + n/8", sup_k),
            "plan": _step_record(plan_ms, plan_b, 1, model,
                                 "plan term of step_bytes('encode'): 12 u rounds (model: 1 of encode's 2 "
                                 "kernels); measured includes unpacking the union bitmap", plan_k, plan_ba),
            "encode": _step_record(enc_ms, sketch_b, 1, model,
                                   "sketch term of step_bytes('encode'): 4n + 24u (1 of its 2 kernels)", enc_k),
            "encode_incl_plan": _step_record([p + e for p, e in zip(sorted(plan_ms), sorted(enc_ms))], eb, ek,
                                             model, "step_bytes('encode'): 4n + 24u + 12u rounds, 2 kernels; "
                                             "measured = plan + encode, rep by rep in sorted order", None, ea),
            "decode": _step_record(dec_ms, db, dk, model, "step_bytes('decode'): 24u rounds + 4n, rounds + 1 "
                                   "kernels", dec_k, da),
        }})
    del plan, summed, truth, words
    free_memory(dev)
    return rec


def part_lhc_codec(dev: torch.device, sz: Sizes, budget: Budget, res: Results) -> dict:
    out: dict[str, Any] = {
        "implementation": "torch port of hosts/lhc/codec.py in bench/gpu/lhc_codec.py (support_bitmap, "
                          "make_plan_torch, encode_torch, decode_torch); hashes from codec.block_hashes, "
                          "rows / lanes from hosts.lhc.sizing",
        "clock": f"CUDA events per call, median of {sz.codec_reps} after 1 warm-up",
        "mask_generator": "hosts.lhc.gradients.ProfileSource._layer_mask (numpy), size_scale "
                          f"{sz.profile_scale}, overlap {PROFILE_OVERLAP}, iteration 0, seed 0; values drawn "
                          "on the device (int32, |v| < 2^20)",
        "decode_kernels_note": "the model (hosts/lhc/timing.py) charges 1 kernel per peeling round; "
                               "this decode launches 4 per round (see each case's decode_kernels_per_round)",
        "cases": {}}
    res.doc["lhc_codec"] = out
    try:
        out["correctness"] = codec_check(dev, sz.check_n, sz.check_density)
    except Exception as exc:
        out["correctness"] = dict(error_record(exc), passed=False)
    log(f"lhc correctness: passed={out['correctness'].get('passed')}")
    res.save()
    names = sorted(profiles.PROFILES, key=lambda k: profiles.PROFILES[k].params)   # VGG19, the largest, last
    for name in names + ["demo_2^27"]:
        if budget.left_s() < 15:
            out["cases"][name] = {"skipped": "time budget"}
            continue
        log(f"lhc {name} ...")
        try:
            if name == "demo_2^27":
                masks, gen_s = demo_masks(sz.demo_n)
                case = {"setting": "public demo: n = 2^27 (smoke: smaller), 5 % nonzero iid, same mask on "
                                   "all workers"}
            else:
                masks, gen_s = profile_masks(name, sz.profile_scale)
                case = {"profile_params": profiles.PROFILES[name].params, "size_scale": sz.profile_scale}
            case["mask_gen_s"] = gen_s
            case.update(codec_case(dev, masks, sz.codec_reps))
            del masks
        except Exception as exc:
            case = error_record(exc)
            free_memory(dev)
        out["cases"][name] = case
        s = case.get("steps", {})
        log(f"lhc {name}: " + ", ".join(f"{k} {v['median_ms']:.3f} ms" for k, v in s.items()))
        res.save()
    return out
