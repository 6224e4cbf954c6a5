"""How many sketch rows a union support needs: THE sizing rule.

Each of the `lanes` lanes of a block is an independent count sketch with R
cells (hosts/lhc/codec.py), and its positions are the union-support entries of
that lane. With k = 3 hashes into three disjoint sub-tables (R/3 cells each),
peeling a random 3-hypergraph succeeds with high probability while
edges / cells < 0.818 (the 2-core threshold of random 3-uniform hypergraphs),
i.e. cells >= 1.222 x edges; research/seeds.md §2.2 ([I]).

Lanes are loaded unevenly (a lane's load is about Poisson with mean
m = |U| / lanes), and small hypergraphs are far from the asymptotic threshold,
so the rule sizes each lane for its mean load plus z standard deviations:

    R = 3 * ceil(alpha * (m + z * sqrt(m)) / 3),   at least 3,

alpha = 1.23 and z = 2 by default; lanes from lanes_for (m >= 64 where |U|
allows). Whatever peeling cannot resolve is not estimated: the codec finds it
before any value is sent (the peeling order depends only on U and the hashes)
and carries those coordinates dense, so undersizing costs bytes, never
exactness.

The paper's design is two rounds, and the default here: the public code
(lihy0529/lossless_homomorphic_compression, benchmark.py aggregate(), read in
full) runs `dist.all_reduce(index)` on the 4-bit support counts (an OR), reads
U back (`read_index_4_bit`), encodes the count sketch over U
(`compress_float_32`, whose count_mapping needs U) and runs a second
`dist.all_reduce(count_sketch)`; peeling then decodes with U. Its sketch has
ceil(blocks / compression_ratio) rows of 1024 lanes (N/10 counters at the
demo's ratio 10), fixed from N, not from |U|; this rule sizes it from |U| so
the sum stays exact (research/seeds.md §2.2). The paper's body is not in the
stored material; the abstract does not say one round or two.

At >= 1.23 counters per union position the sketch is *larger* than U's
values listed in U's order (every worker knows U after the first round). With
`compact` the plan sends those instead (fewer bytes, no peeling, trivially
exact), still two rounds; the workload runs it as `lhc_switch_compact`
beside `lhc_switch`. The default is the sketch, as the paper's code does.
"""
from __future__ import annotations

import math

ALPHA = 1.23     # counters per nonzero at the k=3 peeling threshold [I]
Z = 2.0          # lane-load margin in standard deviations [A]
K = 3            # hash functions (the public code's k)
MAX_LANES = 1024 # the public code's block size
MIN_LANE_LOAD = 64   # [A] positions per lane below which small-hypergraph peeling degrades


def lanes_for(union_count: int, n: int, max_lanes: int = MAX_LANES,
              min_load: int = MIN_LANE_LOAD) -> int:
    """Lanes per block: the public code's 1024, fewer (a power of two) when the union
    is too small to give every lane at least `min_load` positions. The public code's
    2^27-value tensors always fill 1024 lanes; ours are smaller, and a lane of ~5
    positions in 12 cells leaves ~15 % of them in the 2-core (measured in
    tests/unit/test_lhc_codec.py), where 64+ leave ~1 %."""
    lanes = max_lanes
    while lanes > 1 and union_count < lanes * min_load:
        lanes //= 2
    return max(1, min(lanes, n))


def sketch_rows(union_count: int, lanes: int, alpha: float = ALPHA, z: float = Z) -> int:
    """Rows R (a multiple of K, >= K) of the count sketch for |U| = union_count."""
    if union_count < 0 or lanes < 1:
        raise ValueError(f"need union_count >= 0 and lanes >= 1, got {union_count}, {lanes}")
    if alpha <= 0 or z < 0:
        raise ValueError(f"need alpha > 0 and z >= 0, got {alpha}, {z}")
    m = union_count / lanes
    want = alpha * (m + z * math.sqrt(m))
    return max(K, K * math.ceil(want / K))
