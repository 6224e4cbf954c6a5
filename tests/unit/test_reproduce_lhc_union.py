"""testbed/reproduce/papers/lhc_union.py: the LHC projection's union supports are the
measured ones (lhc_density's file), not one overlap share: at a measured worker count
and density the measured union itself, at a touch rate's range end the touch sweep's
measured union, and the stated rules between and beyond."""
from __future__ import annotations

import pytest

from hosts.lhc.profiles import get_profile
from testbed.reproduce.measurements import lhc_density
from testbed.reproduce.papers import lhc, lhc_union

pytestmark = pytest.mark.unit


def _summary(model: str, layer: str) -> dict:
    return lhc_density.load()["models"][model]["summary"][layer]


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_projection_union_is_the_measured_union_at_each_measured_worker_count(workers):
    """Sum over layers of params x the file's mean union (within 0.1 %: the profiles'
    densities are rounded to 4 digits, NCF's item_mlp takes item_gmf's touch rate)."""
    data = lhc_density.load()["models"]
    for model in lhc.MODELS:
        prof = get_profile(model)
        want = sum(x.params * data[model]["summary"][x.name]["union"][str(workers)]["mean"] for x in prof.layers)
        n, u = lhc.model_union(model, workers, {})
        assert n == prof.params
        assert u == pytest.approx(want, rel=1e-3), (model, workers)
        assert u == pytest.approx(sum(x.params * x.union_at(workers) for x in prof.layers), rel=1e-3)


def test_no_single_overlap_share_gives_the_measured_unions():
    """What the projection did before (one profile_overlap for every layer): no share
    in 0..1 comes within 2 % of every model's measured union at 4 workers."""
    measured = {m: lhc.model_union(m, 4, {})[1] for m in lhc.MODELS}
    for o in [i / 100 for i in range(101)]:
        one = {m: sum(x.params * lhc.union_density(x.density, o, 4) for x in get_profile(m).layers)
               for m in lhc.MODELS}
        assert any(abs(one[m] / measured[m] - 1) > 0.02 for m in lhc.MODELS), o


def test_step_spread_reaches_the_largest_and_smallest_recorded_union():
    d = _summary("ncf", "user_gmf")
    dens = d["per_worker"]["mean"]
    for spread, stat in ((-1.0, "max"), (1.0, "min"), (0.0, "mean")):
        got = lhc_union.layer_union("ncf", "user_gmf", dens, 4, spread, 0.5)
        assert got == pytest.approx(d["union"]["4"][stat], rel=1e-9)
    lo = lhc.model_union("vgg19", 4, {lhc.UNION_SPREAD.name: 1.0})[1]
    hi = lhc.model_union("vgg19", 4, {lhc.UNION_SPREAD.name: -1.0})[1]
    assert lo < lhc.model_union("vgg19", 4, {})[1] < hi
    with pytest.raises(ValueError, match="spread"):
        lhc_union.layer_union("ncf", "user_gmf", dens, 4, 1.5, 0.5)


def test_a_touch_rate_at_a_sweep_point_gives_the_sweeps_measured_union():
    """NCF users at the uniform-ids end of ncf_user_touch: the union is the touch sweep's
    measured one (0.32 at 4 workers), not the nominal's overlap held (which gives 0.27)."""
    sweep = lhc_density.load()["touch_sweep"]["ncf_users"]["by_s"]["0.0"]
    dens, measured = sweep["per_worker"]["mean"], sweep["union"]["4"]["mean"]
    assert lhc.NCF_USER.hi == pytest.approx(dens)
    got = lhc_union.layer_union("ncf", "user_gmf", dens, 4, 0.0, 0.5)
    # uniform ids: the measured union (0.3156) is a hair above independent draws' (0.3153,
    # overlap 0), the model's ceiling at that density
    assert got == pytest.approx(measured, rel=2e-3)
    s12 = lhc_density.load()["touch_sweep"]["ncf_users"]["by_s"]["1.2"]
    assert lhc_union.layer_union("ncf", "user_gmf", s12["per_worker"]["mean"], 4, 0.0, 0.5) == pytest.approx(
        s12["union"]["4"]["mean"], rel=1e-9)
    held = lhc.union_density(dens, lhc_union.implied_overlap(_summary("ncf", "user_gmf")["per_worker"]["mean"],
                                                             _summary("ncf", "user_gmf")["union"]["4"]["mean"], 4), 4)
    assert held < 0.9 * measured
    # the projection follows: users at that end -> the user tables' union at the sweep's share
    n, u = lhc.model_union("ncf", 4, {lhc.NCF_USER.name: lhc.NCF_USER.hi})
    users = sum(x.params for x in get_profile("ncf").layers if x.name.startswith("user_"))
    _, u0 = lhc.model_union("ncf", 4, {})
    nominal_users = users * _summary("ncf", "user_gmf")["union"]["4"]["mean"]
    assert u - u0 == pytest.approx(users * got - nominal_users, rel=1e-3)


def test_worker_counts_between_and_beyond_the_measured_ones():
    dens = _summary("bert", "word_embedding")["per_worker"]["mean"]
    u = {w: lhc_union.layer_union("bert", "word_embedding", dens, w, 0.0, 0.5) for w in (1, 2, 3, 4, 6, 8, 16)}
    assert u[1] == dens
    assert u[2] < u[3] < u[4] < u[6] < u[8] < u[16]
    # above 8: the overlap implied at 8, held
    o8 = lhc_union.overlap_at("bert", "word_embedding", dens, 8)
    assert lhc_union.overlap_at("bert", "word_embedding", dens, 16) == o8
    assert u[16] == pytest.approx(lhc.union_density(dens, o8, 16))
    # 3 workers: the overlap halfway (in log2) between 2's and 4's... log2(3) is 0.585 of the way
    o2, o4 = (lhc_union.overlap_at("bert", "word_embedding", dens, w) for w in (2, 4))
    assert lhc_union.overlap_at("bert", "word_embedding", dens, 3) == pytest.approx(o2 + 0.58496 * (o4 - o2), rel=1e-4)


def test_profile_overlap_only_where_no_union_was_measured():
    assert lhc_union.overlap_at("lstm", "lstm", 0.1, 4) is None           # measured dense: no union
    assert lhc_union.overlap_at("bert", "encoder_and_rest", 0.1, 4) is None  # 0.99996 per worker: as dense
    assert lhc_union.layer_union("lstm", "lstm", 0.1, 4, 0.0, 0.0) != lhc_union.layer_union("lstm", "lstm", 0.1, 4,
                                                                                            0.0, 0.9)
    assert lhc_union.layer_union("lstm", "lstm", 1.0, 4, 0.0, 0.0) == 1.0
    # at the paper's setting it moves nothing, so it is not an envelope constant
    p = lhc.PROFILE_OVERLAP.name
    assert lhc.model_union("lstm", 4, {p: 0.0}) == lhc.model_union("lstm", 4, {p: 0.9})
    assert lhc.PROFILE_OVERLAP not in lhc.ITER_CONSTANTS and lhc.UNION_SPREAD in lhc.ITER_CONSTANTS
    # the density-scale regime lowers the dense layers too: there it does
    assert lhc.model_union("lstm", 4, {p: 0.0}, 0.1) != lhc.model_union("lstm", 4, {p: 0.9}, 0.1)
