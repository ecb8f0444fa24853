"""Seeded data, and a case keeping another's (`doit shrink --keep-data`): the original's own
numbers for the original geometry, the leading corner of them for a smaller one."""
from dataclasses import replace

import numpy as np
import pytest

from pipeline.core.errors import ConfigError
from pipeline.space.cases import Case
from pipeline.space.data import calibration_samples, case_weights, make_input
from pipeline.space.geometry import Geometry

BIG = Geometry(2, (9, 7), (3, 2), (1, 1), 6, 8, "valid")
SMALL = Geometry(2, (5, 4), (2, 2), (1, 1), 3, 5, "valid")


@pytest.mark.parametrize("backend, flavor", [("tflite", "w8i8"), ("tflite", "f32"), ("onnx", "bf16")])
def test_keeping_the_data_of_the_same_geometry_changes_nothing(backend, flavor):
    plain = Case(BIG, backend, flavor)
    kept = replace(plain, data_from=BIG)
    assert kept.name == f"{plain.name}_data_{BIG.id}"  # a name of its own: not the sweep's case
    assert (kept.seed, kept.weight_seed) == (plain.seed, plain.weight_seed)
    for a, b in zip(case_weights(kept), case_weights(plain)):
        assert np.array_equal(a, b)
    assert np.array_equal(make_input(kept), make_input(plain))


def test_a_smaller_geometry_crops_the_originals_weights_input_and_calibration():
    original = Case(BIG, "tflite", "w8i8")
    kept = Case(SMALL, "tflite", "w8i8", data_from=BIG)
    kernel, bias = case_weights(original)
    small_kernel, small_bias = case_weights(kept)
    assert np.array_equal(small_kernel, kernel[:5, :3, :2, :2]) and np.array_equal(small_bias, bias[:5])
    assert np.array_equal(make_input(kept), make_input(original)[:1, :5, :4, :3])  # NHWC
    onnx = Case(SMALL, "onnx", "f32", data_from=BIG)
    assert np.array_equal(make_input(onnx), make_input(Case(BIG, "onnx", "f32"))[:1, :3, :5, :4])  # NCHW
    for a, b in zip(calibration_samples(kept), calibration_samples(original)):
        assert np.array_equal(a, b[:1, :5, :4, :3])
    fresh = Case(SMALL, "tflite", "w8i8")  # without keep-data, the geometry draws its own
    assert not np.array_equal(case_weights(fresh)[0], small_kernel)


def test_a_larger_geometry_cannot_keep_a_smaller_ones_data():
    with pytest.raises(ConfigError, match="cannot be cropped to the kernel shape"):
        case_weights(Case(BIG, "onnx", "f32", data_from=SMALL))


ADVERSARIAL = Geometry(2, (9, 7), (3, 2), (1, 1), 6, 8, "valid")  # K = 36, every role of the float data


def test_adversarial_cases_are_named_apart_seeded_apart_and_deterministic():
    random, adversarial = Case(ADVERSARIAL, "onnx", "f32"), Case(ADVERSARIAL, "onnx", "f32", data="adversarial")
    assert adversarial.name == random.name + "_adv"
    assert adversarial.weight_seed != random.weight_seed and adversarial.seed != random.seed
    for a, b in zip(case_weights(adversarial), case_weights(Case(ADVERSARIAL, "onnx", "f32", data="adversarial"))):
        assert np.array_equal(a, b)
    assert np.array_equal(make_input(adversarial), make_input(replace(adversarial)))
    with pytest.raises(ConfigError, match="must be one of random, adversarial"):
        Case(ADVERSARIAL, "onnx", "f32", data="nasty")


def test_adversarial_float_data_cancels_drifts_and_dominates():
    from pipeline.space.data import ADVERSARIAL_OFFSET, DOMINANT_BIAS

    case = Case(ADVERSARIAL, "tflite", "f32", data="adversarial")
    kernel, bias = case_weights(case)
    w = kernel.reshape(8, -1).astype(np.float64)
    x = make_input(case)
    assert abs(x.mean() - ADVERSARIAL_OFFSET) < 0.01 and np.ptp(x) <= 1 / 8
    for o in range(8):
        role = o % 4
        if role == 0:  # zero-sum: the offset cancels
            assert abs(w[o].sum()) < 1e-6 and (w[o] > 0).any() and (w[o] < 0).any()
        elif role == 1:  # non-negative, and a bias that cancels the offset's sum
            assert (w[o] >= 0).all() and bias[o] == pytest.approx(-w[o].sum(), rel=1e-6)
        elif role == 2:
            assert abs(bias[o]) == DOMINANT_BIAS
    bf16 = make_input(Case(ADVERSARIAL, "onnx", "bf16", data="adversarial"))
    assert bf16.dtype.name == "bfloat16"


def test_adversarial_int8_data_sits_at_the_extremes_with_an_extreme_zero_point():
    case = Case(ADVERSARIAL, "tflite", "w8i8", data="adversarial")
    x = make_input(case)
    assert x.dtype == np.int8 and set(np.unique(x)) == {-128, 127}
    assert 0.6 < (x == 127).mean() < 0.9
    kernel, _ = case_weights(case)
    w = kernel.reshape(8, -1)
    assert (w[0] == w[0, 0]).all() and w[0, 0] > 0  # every weight at +max: the largest |acc|
    assert np.allclose(np.abs(w[1]), w[0, 0])  # +-max
    samples = calibration_samples(case)
    values = set(np.unique(np.concatenate([s.ravel() for s in samples])))
    assert values in ({0.0, 1.0}, {-1.0, 0.0})  # zero point -128 or 127



def test_structured_data_has_its_roles_and_input_kinds():
    """Plus-minus, sorted, non-negative and random output channels; the input kind by the
    geometry (weight seed mod 4); named _str, seeded apart from the random mode."""
    from pipeline.space.data import STRUCTURED_INPUTS, structured_input_kind

    g = Geometry(2, (12, 11), (3, 3), (1, 1), 8, 8)
    case = Case(g, "tflite", "f32", data="structured")
    assert case.name.endswith("_str") and case.weight_seed != Case(g, "tflite", "f32").weight_seed
    kernel, bias = case_weights(case)
    flat = kernel.reshape(8, -1).astype(np.float64)
    a = 1 / np.sqrt(72)
    assert np.allclose(flat[0, :36], a) and np.allclose(flat[0, 36:], -a)
    assert (np.diff(flat[1]) >= 0).all() and flat[1].min() < 0 < flat[1].max()
    assert (flat[2] >= 0).all() and flat[3].min() < 0 < flat[3].max()
    assert np.abs(bias).max() <= 1 / 32
    kinds = {}
    for w in range(10, 30):  # every input kind, by geometry
        c = Case(Geometry(2, (12, w), (3, 3), (1, 1), 8, 8), "tflite", "f32", data="structured")
        kinds.setdefault(structured_input_kind(c), make_input(c))
    assert set(kinds) == set(STRUCTURED_INPUTS)
    assert np.abs(kinds["offset-1"] - 1).max() <= 1 / 16 and 0 <= kinds["unit"].min() <= kinds["unit"].max() <= 1
    assert np.abs(kinds["offset-100"] - 100).max() <= 0.011
    bright = kinds["bright-patch"] > 0.5
    assert 0.05 < bright.mean() < 0.2 and (kinds["bright-patch"][~bright] <= 0.1).all()
    assert bright.any(axis=-1).sum() == bright[..., 0].sum()  # a block over every channel
