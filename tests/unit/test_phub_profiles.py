"""The model profiles' parameter totals against the published ones (hosts/phub/profiles.py)."""
import pytest

from hosts.phub.profiles import PROFILES, get_profile


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_parameter_total_matches_the_published_one(name):
    p = get_profile(name)
    assert round(p.params / 1e6, 1) == round(p.published_params / 1e6, 1)


def test_known_layer_sizes_and_flops():
    r = get_profile("resnet50")
    assert r.params == 25_557_032               # the ImageNet ResNet-50 with batch norm's gamma/beta
    assert r.layers[0].params == 3 * 64 * 49 + 128
    assert r.layers[-1].params == 2048 * 1000 + 1000
    assert 8.0e9 < r.flops < 8.4e9              # ~4.1 GMACs per 224x224 image
    a = get_profile("alexnet")
    assert [x.name for x in a.layers][-3:] == ["fc6", "fc7", "fc8"]
    assert a.layers[-3].params == 9216 * 4096 + 4096
    assert len(get_profile("inception_v3").layers) == 95


def test_unknown_profile_is_named():
    with pytest.raises(ValueError, match="unknown model profile 'vgg'"):
        get_profile("vgg")
