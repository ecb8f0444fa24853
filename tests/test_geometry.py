import pytest

from pipeline.core.errors import ConfigError
from pipeline.space.geometry import Geometry


def test_id_conv2d_square_kernel_and_stride():
    g = Geometry(2, (44, 51), (4, 4), (4, 4), 256, 512)
    assert g.id == "w51_h44_f512_k4_c256_s4x4_pvalid"


def test_id_conv1d_is_h1_with_kernel_in_both_axes():
    g = Geometry(1, (27,), (4,), (3,), 16, 2)
    assert g.id == "w27_h1_f2_k4_c16_r1_s1x3_pvalid"


def test_id_non_square_kernel_unit_stride_same_padding():
    g = Geometry(2, (20, 30), (3, 5), (1, 1), 8, 4, "same")
    assert g.id == "w30_h20_f4_k3_c8_khw3x5"


def test_same_padding_holds_at_any_stride_and_is_tf_same():
    g = Geometry(2, (20, 30), (4, 3), (3, 2), 8, 4, "same", dilation=(1, 2))
    assert g.padding == "same"
    # H: out 7, total (7 - 1) 3 + 4 - 20 = 2; W: out 15, total 14 * 2 + 5 - 30 = 3 (odd: the extra one after)
    assert g.pads == ((1, 1), (1, 2))
    assert g.out_spatial == (7, 15)


def test_ids_name_only_what_departs_from_the_default():
    base = dict(rank=2, spatial=(20, 30), kernel=(3, 3), stride=(1, 1), c_in=8, c_out=16)
    assert Geometry(**base, dilation=(1, 1), groups=1, batch=1).id == "w30_h20_f16_k3_c8_pvalid"
    assert Geometry(**base, dilation=(2, 3)).id == "w30_h20_f16_k3_c8_pvalid_d2x3"
    assert Geometry(**base, groups=4).id == "w30_h20_f16_k3_c8_pvalid_g4"
    assert Geometry(**base, groups=8).id == "w30_h20_f16_k3_c8_pvalid_dw2"
    assert Geometry(**base, batch=3).id == "w30_h20_f16_k3_c8_pvalid_b3"
    assert Geometry(1, (40,), (3,), (2,), 4, 4, "same", (3,), 2, 2).id == "w40_h1_f4_k3_c4_r1_s1x2_d1x3_g2_b2"


def test_reduction_counts_the_channels_of_one_group():
    assert Geometry(2, (20, 30), (3, 5), (1, 1), 12, 8, groups=4).reduction == 3 * 15
    assert Geometry(1, (20,), (3,), (1,), 16, 32, groups=16).reduction == 3


def test_reduction_and_output_size():
    g = Geometry(2, (16, 16), (9, 9), (1, 2), 512, 8)
    assert g.reduction == 512 * 81
    assert g.out_spatial == (8, 4)
    assert Geometry(2, (17, 12), (3, 4), (1, 1), 1, 1, "same").out_spatial == (17, 12)


@pytest.mark.parametrize("kwargs, field", [
    (dict(spatial=(0, 8)), "geometry.spatial"),
    (dict(kernel=(3,)), "geometry.kernel"),
    (dict(kernel=(9, 3)), "geometry.kernel"),  # 9 > H = 8 with valid padding
    (dict(stride=(1, -1)), "geometry.stride"),
    (dict(c_in=0), "geometry.c_in"),
    (dict(c_out=2.5), "geometry.c_out"),
    (dict(padding="reflect"), "geometry.padding"),
    (dict(rank=3), "geometry.rank"),
    (dict(dilation=(1, 0)), "geometry.dilation"),
    (dict(dilation=(4, 1)), "geometry.dilation"),  # window 9 > H = 8 with valid padding
    (dict(groups=3), "geometry.groups"),  # does not divide 4
    (dict(groups=0), "geometry.groups"),
    (dict(batch=0), "geometry.batch"),
])
def test_validate_names_the_bad_field(kwargs, field):
    base = dict(rank=2, spatial=(8, 8), kernel=(3, 3), stride=(1, 1), c_in=4, c_out=4)
    with pytest.raises(ConfigError) as err:
        Geometry(**{**base, **kwargs}).validate()
    assert err.value.field == field
    assert field in str(err.value)


def test_from_dict_rejects_unknown_and_missing_fields():
    good = dict(rank=1, spatial=[20], kernel=[3], stride=[1], c_in=2, c_out=2)
    assert Geometry.from_dict(good).id == "w20_h1_f2_k3_c2_r1_pvalid"
    with pytest.raises(ConfigError, match="geometry.dilation"):
        Geometry.from_dict({**good, "dilation": 2})
    with pytest.raises(ConfigError, match="geometry.depthwise"):
        Geometry.from_dict({**good, "depthwise": True})
    wide = {**good, "dilation": [2], "groups": 2, "batch": 3, "padding": "same"}
    assert Geometry.from_dict(wide).id == "w20_h1_f2_k3_c2_r1_d1x2_dw1_b3"
    assert Geometry.from_dict(Geometry.from_dict(wide).to_dict()) == Geometry.from_dict(wide)
    with pytest.raises(ConfigError, match="geometry.c_out"):
        Geometry.from_dict({k: v for k, v in good.items() if k != "c_out"})


def test_a_fused_activation_is_named_in_the_id_and_the_spec_only_when_present():
    plain = Geometry(2, (8, 8), (3, 3), (1, 1), 4, 4)
    relu6 = Geometry(2, (8, 8), (3, 3), (1, 1), 4, 4, activation="relu6")
    assert relu6.id == plain.id + "_arelu6" and "activation" not in plain.to_dict()
    assert relu6.to_dict()["activation"] == "relu6"
    assert Geometry.from_dict(relu6.to_dict()) == relu6 and Geometry.from_dict(plain.to_dict()) == plain
    with pytest.raises(ConfigError) as err:
        Geometry.from_dict({**plain.to_dict(), "activation": "gelu"})
    assert err.value.field == "geometry.activation" and "relu6" in str(err.value)


def test_explicit_pads_are_the_geometry_s_own_and_only_onnx_builds_them():
    """torch's (1, 1) at stride 2 on an even input, where TF SAME pads (0, 1): a geometry of its
    own, named by its pads; TFLite refuses it (its conv op pads VALID or SAME only)."""
    from pipeline.space.refusal import refusal

    g = Geometry(2, (56, 56), (3, 3), (2, 2), 8, 8, "explicit", explicit_pads=((1, 1), (1, 1))).validate()
    same = Geometry(2, (56, 56), (3, 3), (2, 2), 8, 8, "same")
    assert same.pads == ((0, 1), (0, 1)) and g.pads == ((1, 1), (1, 1)) and g.out_spatial == same.out_spatial == (28, 28)
    assert g.id == "w56_h56_f8_k3_c8_s2x2_pad1-1x1-1" and Geometry.from_dict(g.to_dict()) == g
    assert g.to_dict()["pads"] == [[1, 1], [1, 1]]
    assert refusal(g, "tflite") and "PAD op" in refusal(g, "tflite") and refusal(g, "onnx") is None
    for bad, field in ((dict(padding="explicit"), "geometry.pads"), (dict(explicit_pads=((1, 1), (1, 1))), "geometry.pads"),
                       (dict(padding="explicit", explicit_pads=((1, 1),)), "geometry.pads"),
                       (dict(padding="explicit", explicit_pads=((-1, 1), (1, 1))), "geometry.pads")):
        with pytest.raises(ConfigError) as err:
            Geometry(**{**dict(rank=2, spatial=(8, 8), kernel=(3, 3), stride=(1, 1), c_in=4, c_out=4), **bad}).validate()
        assert err.value.field == field
