import json

import pytest

from pipeline.core.errors import ConfigError
from pipeline.space.geometry import Geometry
from pipeline.space.refusal import UNPADDED_EXPORT, refusal
from pipeline.space.sweep import DEFAULT_CATEGORIES, Category, SweepSpec, load_spec

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
    assert len({g for _, g, _ in sampled}) == 250
    assert [name for name, _, _ in sampled[::50]] == list(FIRST)


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
    assert len(sampled) == 3 and {name for name, _, _ in sampled} == {"sqsq"}


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
    assert [name for name, _, _ in sampled] == ["tiny", "tiny", "fixed"]


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


# sha256 of the 250 seed ids, one per line, in sweep order: the original suite's cases
SEED_IDS_SHA256 = "e3cd17efa2432f6a796e11bd28ea029424d3e34bf7c36c8cfd352032bcbd36c5"


def _ids_digest(sampled):
    import hashlib

    return hashlib.sha256("\n".join(g.id for _, g, _ in sampled).encode()).hexdigest()


def test_seed_profile_names_are_unchanged():
    from pipeline.space.sweep import PROFILES

    assert _ids_digest(SweepSpec().sample(50)) == SEED_IDS_SHA256
    assert _ids_digest(SweepSpec(PROFILES["seed"]).sample(50)) == SEED_IDS_SHA256
    # the extended profile starts with the seed's categories, drawn the same way
    assert _ids_digest(SweepSpec(PROFILES["extended"]).sample(50)[:250]) == SEED_IDS_SHA256


def test_extended_profile_is_deterministic_and_raising_n_only_appends():
    from pipeline.space.sweep import EXTENDED_CATEGORIES, PROFILES

    spec = SweepSpec(PROFILES["extended"])
    assert spec.sample(12) == SweepSpec(PROFILES["extended"]).sample(12)
    for category in EXTENDED_CATEGORIES:
        assert category.sample(12)[:5] == category.sample(5)
    assert set(spec.sample(4)) <= set(spec.sample(9))


def test_extended_categories_cover_every_new_dimension():
    from pipeline.space.sweep import EXTENDED_CATEGORIES, LANES

    drawn = {c.name: [g.validate() for g in c.sample(50)] for c in EXTENDED_CATEGORIES}
    assert all(g.padding == "same" for g in drawn["psame"]) and any(s > 1 for g in drawn["psame"] for s in g.stride)
    assert any(sum(g.pads[0]) % 2 for g in drawn["psame"])  # asymmetric padding
    assert all(g.window[i] <= g.spatial[i] for c in ("dil", "dil1d") for g in drawn[c] for i in range(g.rank))
    assert any(d > 1 for g in drawn["dil"] for d in g.dilation) and max(max(g.dilation) for g in drawn["dil"]) <= 4
    assert all(g.groups > 1 and not g.depthwise for g in drawn["grp"])
    assert all(g.depthwise and 1 <= g.depth_multiplier <= 4 for g in drawn["dw"])
    assert all(2 <= g.batch <= 4 for g in drawn["batch"])
    odd = [c for g in drawn["odd"] for c in (g.c_in, g.c_out)]
    assert sum(c & (c - 1) != 0 for c in odd) > len(odd) / 2  # mostly not powers of two
    assert any(c in {lane + d for lane in LANES for d in (-1, 1)} for c in odd)
    mixed = drawn["mix2d"] + drawn["mix1d"]
    assert {g.padding for g in mixed} == {"same", "valid"} and {g.depthwise for g in mixed} == {True, False}
    assert any(g.groups > 1 and not g.depthwise for g in mixed) and any(g.batch > 1 for g in mixed)


def test_frontend_refusals_are_named_before_any_work():
    from pipeline.space.cases import make_cases, refused
    from pipeline.space.geometry import Geometry

    strided_dilated = Geometry(2, (20, 20), (3, 3), (2, 1), 4, 4, dilation=(1, 2))
    plain = Geometry(2, (20, 20), (3, 3), (2, 1), 4, 4)
    sampled = [("x", strided_dilated), ("x", plain)]
    cases = make_cases(sampled)
    assert {c.variant for c in cases if c.geometry == strided_dilated} == {"onnx_f32", "onnx_bf16"}
    assert len([c for c in cases if c.geometry == plain]) == 5
    gone = refused(sampled)
    assert [r.variant for r in gone] == ["tflite_f32", "tflite_w8if32", "tflite_w8i8"]
    assert all("dilation_rate > 1" in r.reason and r.name.endswith("_d1x2") for r in gone)


def test_load_spec_accepts_the_new_fields(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({
        "categories": [{"name": "wide", "seed": 5, "rank": 2, "spatial": [16, 24], "kernel": [2, 3],
                        "stride": [1, 2], "channels": [2, 40], "padding": "any", "channel_values": "any",
                        "dilation": [1, 3], "groups": "any", "depth_multiplier": [1, 2], "batch": [1, 3]}],
        "geometries": [{"category": "fixed", "rank": 2, "spatial": [8, 8], "kernel": [3, 3], "stride": [2, 1],
                        "c_in": 6, "c_out": 12, "padding": "same", "dilation": [1, 2], "groups": 6, "batch": 2}],
    }))
    sampled = load_spec(path).sample(20)
    assert sampled[-1][1].id == "w8_h8_f12_k3_c6_s2x1_d1x2_dw2_b2"
    assert any(g.batch > 1 for _, g, _ in sampled[:20]) and any(g.groups > 1 for _, g, _ in sampled[:20])


@pytest.mark.parametrize("extra, field", [
    ({"groups": "split"}, "categories[0] (x).groups"),
    ({"dilation": [0, 2]}, "categories[0] (x).dilation"),
    ({"batch": [3, 1]}, "categories[0] (x).batch"),
    ({"channel_values": "odd"}, "categories[0] (x).channel_values"),
])
def test_load_spec_new_category_fields_are_checked(tmp_path, extra, field):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"categories": [{"name": "x", "seed": 1, "rank": 2, "spatial": [16, 20],
                                                "kernel": [1, 3], "stride": [1, 1], **extra}]}))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert field in err.value.field


@pytest.mark.parametrize("extra, field", [
    ({"groups": 3}, "geometries[0].groups"),
    ({"dilation": [5, 1]}, "geometries[0].dilation"),
    ({"batch": 0}, "geometries[0].batch"),
    ({"dilation": 2}, "geometries[0].dilation"),
])
def test_load_spec_new_geometry_fields_are_checked(tmp_path, extra, field):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"geometries": [{"rank": 2, "spatial": [8, 8], "kernel": [3, 3], "stride": [1, 1],
                                                "c_in": 4, "c_out": 4, **extra}]}))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert field in err.value.field


def test_onnx_refuses_a_window_past_the_unpadded_input():
    # SAME padding lets the window pass the input; torch exports the conv unpadded (pads set after)
    g = Geometry(1, (2,), (3,), (1,), 3, 6, "same", (2,))
    assert refusal(g, "onnx", "f32") == UNPADDED_EXPORT
    assert refusal(g, "tflite", "f32") is None  # TF pads it
    assert refusal(Geometry(1, (5,), (3,), (1,), 3, 6, "same", (2,)), "onnx", "bf16") is None


def test_include_adds_a_spec_files_geometries_to_the_profile(tmp_path):
    from pipeline.config import Config
    from helpers import clean_env

    (tmp_path / "found.json").write_text(json.dumps({"geometries": [
        {"category": "hunt_edge", "rank": 1, "spatial": [9], "kernel": [2], "stride": [3], "c_in": 3, "c_out": 2}]}))
    cfg = Config.from_env(clean_env(CONV_SWEEP_N=1, CONV_SWEEP_INCLUDE=tmp_path / "found.json",
                                    CONV_SWEEP_BUILD_DIR=tmp_path / "b"))
    assert len(cfg.sampled) == 6 and cfg.sampled[-1][0] == "hunt_edge"
    assert "conv_onnx_f32_w9_h1_f2_k2_c3_r1_s1x3_pvalid" in {c.name for c in cfg.cases()}
    (tmp_path / "bad.json").write_text(json.dumps({"geometries": [{"rank": 1, "spatial": [9]}]}))
    with pytest.raises(ConfigError) as err:
        Config.from_env(clean_env(CONV_SWEEP_INCLUDE=tmp_path / "bad.json", CONV_SWEEP_BUILD_DIR=tmp_path / "b"))
    assert "CONV_SWEEP_INCLUDE" in str(err.value) and "kernel" in str(err.value)
