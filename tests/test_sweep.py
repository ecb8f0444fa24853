import json

import pytest

from pipeline.errors import ConfigError
from pipeline.sweep import DEFAULT_CATEGORIES, Category, SweepSpec, load_spec

# The first geometry of each default category: the same cases as the suite this replaced.
FIRST = {
    "sqsq": "w51_h44_f512_k4_c256_s4x4_pvalid",
    "nsqsq": "w31_h24_f32_k1_c2_khw1x8_s3x3_pvalid",
    "nsqns": "w26_h52_f4_k4_c256_khw4x5_s8x9_pvalid",
    "c1ds1": "w68_h1_f64_k9_c4_r1_pvalid",
    "c1ds9": "w27_h1_f2_k4_c16_r1_s1x3_pvalid",
}


def test_default_categories_first_geometries():
    assert {c.name: c.sample(1)[0].id for c in DEFAULT_CATEGORIES} == FIRST


def test_default_sweep_is_250_distinct_geometries():
    sampled = SweepSpec().sample(50)
    assert len(sampled) == 250
    assert len({g for _, g in sampled}) == 250
    assert [name for name, _ in sampled[::50]] == list(FIRST)


@pytest.mark.parametrize("n", [0, 1, 3, 7])
def test_n_controls_the_count(n):
    assert len(SweepSpec().sample(n)) == 5 * n


def test_raising_n_only_appends():
    for category in DEFAULT_CATEGORIES:
        assert category.sample(12)[:5] == category.sample(5)
    small, large = SweepSpec().sample(2), SweepSpec().sample(4)
    assert set(small) <= set(large)


def test_every_default_geometry_is_valid_and_in_range():
    for category in DEFAULT_CATEGORIES:
        for g in category.sample(50):
            g.validate()
            assert g.padding == "valid"
            assert all(16 <= s <= (128 if g.rank == 1 else 64) for s in g.spatial)
            assert g.c_in in category.powers_of_two() and g.c_out in category.powers_of_two()
            if category.name == "c1ds1":
                assert g.stride == (1,)


def test_duplicate_geometries_collapse_to_one_case():
    twin = Category("twin", 11, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5))
    spec = SweepSpec((DEFAULT_CATEGORIES[0], twin))
    sampled = spec.sample(3)
    assert len(sampled) == 3 and {name for name, _ in sampled} == {"sqsq"}


@pytest.mark.parametrize("change, field", [
    (dict(kernel=(5, 1)), "kernel"),
    (dict(stride=(0, 3)), "stride"),
    (dict(spatial=(16,)), "spatial"),
    (dict(channels=(3, 3)), "channels"),
    (dict(padding="full"), "padding"),
])
def test_bad_category_names_the_field(change, field):
    base = dict(name="bad", seed=1, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5))
    with pytest.raises(ConfigError) as err:
        Category(**{**base, **change}).validate()
    assert err.value.field.endswith(f".{field}")


def test_load_spec_categories_and_geometries(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({
        "categories": [{"name": "tiny", "seed": 3, "rank": 1, "spatial": [16, 20], "kernel": [1, 3],
                        "stride": [1, 2], "channels": [1, 4]}],
        "geometries": [{"category": "fixed", "rank": 2, "spatial": [8, 8], "kernel": [3, 3],
                        "stride": [1, 1], "c_in": 2, "c_out": 2}],
    }))
    spec = load_spec(path)
    sampled = spec.sample(2)
    assert [name for name, _ in sampled] == ["tiny", "tiny", "fixed"]


@pytest.mark.parametrize("content, field", [
    ('{"categories": [{"name": "x", "seed": 1, "rank": 2, "spatial": [64, 16], "kernel": [1, 3], "stride": [1, 1]}]}',
     "categories[0] (x).spatial"),
    ('{"categories": [{"name": "x", "seed": 1, "rank": 2, "spatial": [16, 64], "kernel": [1, 3]}]}',
     "categories[0].stride"),
    ('{"geometries": [{"rank": 2, "spatial": [8, 8], "kernel": [9, 3], "stride": [1, 1], "c_in": 1, "c_out": 1}]}',
     "geometries[0].kernel"),
    ('{"layers": []}', "CONV_SWEEP_SPEC"),
    ("not json", "CONV_SWEEP_SPEC"),
])
def test_load_spec_errors_name_the_field(tmp_path, content, field):
    path = tmp_path / "spec.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert field in err.value.field
