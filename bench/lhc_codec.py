"""LHC codec speed: encode + decode throughput in GB/s of dense gradient, beside a
plain numpy dense sum of the same size measured in the same run.

Per (n, density): 4 workers' float32 gradients with that share of nonzeros.
encode = support bitmap + exponent one-hot, then (given the OR-ed support)
plan + fixed-point quantization + sketch; decode = peeling of the summed
payload + dequantization. One worker's share is timed (every worker does the
same work). GB/s counts the dense gradient's 4n bytes per second, as the
paper does. The reference is `a + b` of two dense float32 n-vectors (one
worker's share of a dense sum). Best of `repeats`; one core (numpy does not
thread these). Exactness is checked on every repeat.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.lhc import rounds

WORLD = 4


def _grads(n: int, density: float, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(WORLD):
        g = np.zeros(n, np.float32)
        idx = rng.choice(n, max(1, int(n * density)), replace=False)
        g[idx] = rng.standard_normal(idx.size).astype(np.float32)
        out.append(g)
    return out


def measure(n: int, density: float, repeats: int = 3) -> dict:
    grads = _grads(n, density)
    ref, _ = rounds.exact_fixed_sum(grads)
    enc, dec, plan_info = [], [], None
    for _ in range(repeats):
        rs = [rounds.LhcRound(WORLD) for _ in grads]
        t0 = time.perf_counter()
        m0 = rs[0].support_message(grads[0])
        t_sup = time.perf_counter() - t0
        msgs = [m0] + [r.support_message(g) for r, g in zip(rs[1:], grads[1:])]
        agg = np.bitwise_or.reduce(np.stack(msgs), axis=0)
        t0 = time.perf_counter()
        p0 = rs[0].encode(agg, grads[0])
        t_enc = time.perf_counter() - t0
        total = rounds._wrapping_sum([p0] + [r.encode(agg, g) for r, g in zip(rs[1:], grads[1:])])
        t0 = time.perf_counter()
        rs[0].decode(total)
        t_dec = time.perf_counter() - t0
        if not np.array_equal(rs[0].int_sum.astype(np.int64), ref):
            raise AssertionError(f"n={n} density={density}: decoded sum is not exact")
        enc.append(t_sup + t_enc)
        dec.append(t_dec)
        plan_info = rs[0].wire()
    a, b = grads[0].copy(), np.random.default_rng(1).standard_normal(n).astype(np.float32)
    sums = []
    for _ in range(max(repeats, 5)):
        t0 = time.perf_counter()
        np.add(a, b)
        sums.append(time.perf_counter() - t0)
    dense_bytes = 4 * n
    e, d, s = min(enc), min(dec), min(sums)
    sent = 4 * (plan_info["support_values"] + plan_info["sketch_values"] + plan_info["core_values"])
    return {"n": n, "density": density, "workers": WORLD, "dense_bytes": dense_bytes,
            "encode_s": e, "decode_s": d, "encode_gbps": dense_bytes / e / 1e9,
            "decode_gbps": dense_bytes / d / 1e9, "encode_decode_gbps": dense_bytes / (e + d) / 1e9,
            "numpy_dense_add_s": s, "numpy_dense_add_gbps": dense_bytes / s / 1e9,
            "bytes_per_worker": sent, "dense_over_compressed": dense_bytes / sent,
            "exact": True, **{f"plan_{k}": v for k, v in plan_info.items()}}


def run(out_dir=None) -> dict:
    rows = [measure(n, dens) for n in (1 << 20, 1 << 22) for dens in (0.001, 0.01, 0.1)]
    return {"benchmark": "lhc_codec", "note": __doc__.split("\n")[0], "results": rows}


if __name__ == "__main__":
    for r in run()["results"]:
        print(f"n={r['n']:>8} density={r['density']:<6} enc+dec {r['encode_decode_gbps']:6.2f} GB/s "
              f"(enc {r['encode_gbps']:6.2f}, dec {r['decode_gbps']:6.2f}); numpy dense add "
              f"{r['numpy_dense_add_gbps']:6.2f} GB/s; dense/compressed {r['dense_over_compressed']:.1f}x, "
              f"core {r['plan_core_values']} of {r['plan_union']}")
