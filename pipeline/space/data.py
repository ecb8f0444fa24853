"""Seeded weights and inputs: the same case gives the same numbers on every run and machine.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from pipeline.core.errors import ConfigError
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry

BIAS_RANGE = 0.5  # bias ~ U(-0.5, 0.5): the same size as a typical output, so a lost bias shows


def conv_weights(geometry: Geometry, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Kernel (c_out, c_in / groups, *kernel) ~ U(+-1/sqrt(reduction)) and a nonzero bias (c_out,).
    Output channel o belongs to group o // (c_out / groups), as in torch and ONNX."""
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(geometry.reduction)
    shape = (geometry.c_out, geometry.c_in // geometry.groups, *geometry.kernel)
    kernel = rng.uniform(-bound, bound, shape).astype(np.float32)
    bias = rng.uniform(-BIAS_RANGE, BIAS_RANGE, geometry.c_out).astype(np.float32)
    return kernel, bias


def _crop(array: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The leading corner of `array` of that shape (a case keeping a larger case's data)."""
    if len(shape) != array.ndim or any(n > m for n, m in zip(shape, array.shape)):
        raise ConfigError("data_from", list(array.shape), f"cannot be cropped to the {what} shape {list(shape)}")
    return np.ascontiguousarray(array[tuple(slice(0, n) for n in shape)])


def _original(case: Case) -> Case:
    return replace(case, geometry=case.data_from, data_from=None)


def case_weights(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The case's kernel and bias: its own seeded ones, or those of the geometry it keeps the
    data of, cropped (output channels, input channels per group, kernel taps: the leading ones)."""
    g = case.geometry
    if case.data_from is None:
        return conv_weights(g, case.weight_seed)
    kernel, bias = conv_weights(case.data_from, case.weight_seed)
    return (_crop(kernel, (g.c_out, g.c_in // g.groups, *g.kernel), "kernel"),
            _crop(bias, (g.c_out,), "bias"))


def input_shape(case: Case) -> tuple[int, ...]:
    """In the model's own layout: NHWC/NWC for TFLite, NCHW/NCW for ONNX."""
    g = case.geometry
    if case.backend == "tflite":
        return (g.batch, *g.spatial, g.c_in)
    return (g.batch, g.c_in, *g.spatial)


def float_samples(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """f32 samples ~ U(-1, 1)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def make_input(case: Case) -> np.ndarray:
    """The case's input: U(-1, 1) floats, bf16-rounded for bf16, the full int8 range for w8i8
    (a case keeping another's data: that input, cropped)."""
    if case.data_from is not None:
        return _crop(make_input(_original(case)), input_shape(case), "input")
    shape = input_shape(case)
    if case.flavor == "w8i8":
        return np.random.default_rng(case.seed).integers(-128, 128, shape, dtype=np.int8)
    x = float_samples(shape, case.seed)
    if case.flavor == "bf16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16)
    return x


def calibration_samples(case: Case, count: int = 8) -> list[np.ndarray]:
    """Representative dataset for full-int8 calibration: same distribution as the f32 inputs."""
    if case.data_from is not None:
        return [_crop(s, input_shape(case), "input") for s in calibration_samples(_original(case), count)]
    shape = input_shape(case)
    return [float_samples(shape, case.weight_seed + 1 + i) for i in range(count)]
