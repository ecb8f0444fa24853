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
