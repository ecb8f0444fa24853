"""Seeded weights and inputs: the same case gives the same numbers on every run and machine.

Three data modes (CONV_SWEEP_DATA; a case's `data`):
- random: zero-mean uniform weights, bias and inputs (U(-1, 1)), the full int8 range for w8i8;
- adversarial: data chosen per flavor to provoke the bugs rounding and range live in, every
  tensor still drawn entry by entry alike (the tolerance policy's model, pipeline/checks/tolerance.py).
  Float flavors: inputs 1 + U(-1/16, 1/16) (a common offset), and output channels in four roles,
  o mod 4:
    0 cancel: zero-sum weights (pairs w, -w in a random order), so the offset cancels and S is
      a small remainder of large partial sums (bf16's half step at |S| is tiny);
    1 drift: weights >= 0 (the partial sums grow like k mu) and a bias of -sum(w_o), which the
      sum cancels;
    2 dominant bias: zero-mean weights and a bias of +-16;
    3 random: zero-mean weights, a small bias.
  w8i8: inputs at the int8 extremes only (-128 and 127, three in four at the top), calibrated on
  the same extremes, from [0, 1] (input zero point -128) or [-1, 0] (zero point 127) by the
  case's seed; output channels o mod 3: 0 every weight +max (the largest |acc|: K 127 255),
  1 weights +-max (every weight at 127 in magnitude) with a dominant bias, 2 cancel (as above).
- structured: data with the structure trained weights and real images have, which no
  exchangeability holds for (cases named _str; the checks must give no false alarm on it).
  Output channels o mod 4, a = 1 / sqrt(K), weights in the (O, I, KH, KW) storage order:
  0 plus-minus (the first half +a, the rest -a), 1 sorted U(-a, a), 2 non-negative U(0, a),
  3 random U(-a, a); each with a small bias U(-1/32, 1/32). The input, one kind per geometry
  (its weight seed mod 4): 0 1 + U(-1/16, 1/16), 1 U(0, 1), 2 a bright patch (U(0, 0.1), and
  1 + U(0, 0.1) over a block of about a tenth of the image), 3 100 + U(-0.01, 0.01).
  w8i8 takes the random mode's int8 inputs (calibrated on the kind's floats).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from pipeline.core.errors import ConfigError
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry

BIAS_RANGE = 0.5  # bias ~ U(-0.5, 0.5): the same size as a typical output, so a lost bias shows
ADVERSARIAL_OFFSET, ADVERSARIAL_SPREAD = 1.0, 1.0 / 16  # adversarial float inputs: 1 + U(-1/16, 1/16)
DOMINANT_BIAS = 16.0  # against outputs of about 1
HIGH_EXTREME = 0.75  # adversarial int8 inputs: the share at the top of the range


def _zero_sum(rng, count: int, bound: float) -> np.ndarray:
    """`count` weights summing to exactly 0: pairs w, -w (|w| ~ U(bound/2, bound)), and a 0 if
    count is odd, in a random order."""
    half = rng.uniform(bound / 2, bound, count // 2) * rng.choice((-1.0, 1.0), count // 2)
    values = np.concatenate([half, -half, np.zeros(count % 2)])
    return rng.permutation(values)


def adversarial_weights(geometry: Geometry, seed: int, flavor: str) -> tuple[np.ndarray, np.ndarray]:
    """Kernel and bias of the adversarial mode (the module docstring), per output-channel role."""
    rng = np.random.default_rng(seed)
    k = geometry.reduction
    bound = 1.0 / np.sqrt(k)
    shape = (geometry.c_out, geometry.c_in // geometry.groups, *geometry.kernel)
    kernel = np.empty((geometry.c_out, k))
    bias = np.empty(geometry.c_out)
    for o in range(geometry.c_out):
        if flavor == "w8i8":
            role = o % 3
            if role == 0:
                kernel[o] = bound
                bias[o] = 0.0
            elif role == 1:
                kernel[o] = bound * rng.choice((-1.0, 1.0), k)
                bias[o] = rng.choice((-1.0, 1.0)) * DOMINANT_BIAS * bound * np.sqrt(k)
            else:
                kernel[o] = _zero_sum(rng, k, bound)
                bias[o] = 0.0
            continue
        role = o % 4
        if role == 0:
            kernel[o] = _zero_sum(rng, k, bound)
            bias[o] = rng.uniform(-1, 1) * ADVERSARIAL_SPREAD / 2
        elif role == 1:
            kernel[o] = rng.uniform(0, bound, k)
            bias[o] = -ADVERSARIAL_OFFSET * kernel[o].astype(np.float32).astype(np.float64).sum()
        elif role == 2:
            kernel[o] = rng.uniform(-bound, bound, k)
            bias[o] = rng.choice((-1.0, 1.0)) * DOMINANT_BIAS
        else:
            kernel[o] = rng.uniform(-bound, bound, k)
            bias[o] = rng.uniform(-BIAS_RANGE, BIAS_RANGE)
    return kernel.reshape(shape).astype(np.float32), bias.astype(np.float32)


STRUCTURED_INPUTS = ("offset-1", "unit", "bright-patch", "offset-100")  # by weight seed mod 4
STRUCTURED_BIAS = 1.0 / 32


def structured_weights(geometry: Geometry, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Kernel and bias of the structured mode (the module docstring), per output-channel role."""
    rng = np.random.default_rng(seed)
    k = geometry.reduction
    bound = 1.0 / np.sqrt(k)
    kernel = np.empty((geometry.c_out, k))
    for o in range(geometry.c_out):
        role = o % 4
        if role == 0:
            kernel[o] = np.where(np.arange(k) < k // 2, bound, -bound)
        elif role == 1:
            kernel[o] = np.sort(rng.uniform(-bound, bound, k))
        else:
            kernel[o] = rng.uniform(0.0 if role == 2 else -bound, bound, k)
    bias = rng.uniform(-STRUCTURED_BIAS, STRUCTURED_BIAS, geometry.c_out)
    shape = (geometry.c_out, geometry.c_in // geometry.groups, *geometry.kernel)
    return kernel.reshape(shape).astype(np.float32), bias.astype(np.float32)


def structured_input_kind(case: Case) -> str:
    return STRUCTURED_INPUTS[case.weight_seed % len(STRUCTURED_INPUTS)]


def structured_samples(case: Case, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """A structured float input of the case's kind (the module docstring), in the model's layout."""
    rng = np.random.default_rng(seed)
    kind = structured_input_kind(case)
    if kind == "offset-1":
        return (1.0 + rng.uniform(-1 / 16, 1 / 16, shape)).astype(np.float32)
    if kind == "unit":
        return rng.uniform(0.0, 1.0, shape).astype(np.float32)
    if kind == "offset-100":
        return (100.0 + rng.uniform(-0.01, 0.01, shape)).astype(np.float32)
    x = rng.uniform(0.0, 0.1, shape)
    spatial = list(range(1, len(shape) - 1)) if case.backend == "tflite" else list(range(2, len(shape)))
    side = 0.1 ** (1.0 / len(spatial))  # a block of about a tenth of the image
    patch = [slice(None)] * len(shape)
    for axis in spatial:
        n = shape[axis]
        length = max(1, int(round(n * side)))
        start = int(rng.integers(0, n - length + 1))
        patch[axis] = slice(start, start + length)
    x[tuple(patch)] += 1.0
    return x.astype(np.float32)


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


def _weights(geometry: Geometry, case: Case) -> tuple[np.ndarray, np.ndarray]:
    if case.weights is not None:  # a model's own (pipeline/space/given.py)
        return case.weights.read()
    if case.data == "adversarial":
        return adversarial_weights(geometry, case.weight_seed, case.flavor)
    if case.data == "structured":
        return structured_weights(geometry, case.weight_seed)
    return conv_weights(geometry, case.weight_seed)


def case_weights(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The case's kernel and bias: its own seeded ones (or the model's own, where given), or those
    of the geometry it keeps the data of, cropped (output channels, input channels per group, kernel taps: the leading ones)."""
    g = case.geometry
    if case.data_from is None:
        return _weights(g, case)
    kernel, bias = _weights(case.data_from, case)
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


def adversarial_samples(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Adversarial float inputs: 1 + U(-1/16, 1/16)."""
    rng = np.random.default_rng(seed)
    return (ADVERSARIAL_OFFSET + rng.uniform(-ADVERSARIAL_SPREAD, ADVERSARIAL_SPREAD, shape)).astype(np.float32)


def _extremes(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Adversarial int8 inputs, as booleans: True at the top of the range (three in four)."""
    return np.random.default_rng(seed).random(shape) < HIGH_EXTREME


def extreme_range(case: Case) -> tuple[float, float]:
    """The real range adversarial int8 inputs are calibrated on: [0, 1] (input zero point -128)
    or [-1, 0] (zero point 127), by the case's seed."""
    return (0.0, 1.0) if case.weight_seed % 2 == 0 else (-1.0, 0.0)


def _sample(case: Case) -> np.ndarray | None:
    """The layer's input on a model's sample (pipeline/space/given.py), float32, in the case's
    layout; None where the case has none."""
    if not _sample_given(case):
        return None
    x = case.weights.read_input().astype(np.float32)
    return np.moveaxis(x, 1, -1) if case.backend == "tflite" else x


def needs_quantization(case: Case) -> bool:
    """Whether make_input needs the case's model's input quantization: a w8i8 case given a sample."""
    return case.flavor == "w8i8" and _sample_given(case)


def _sample_given(case: Case) -> bool:
    return case.weights is not None and case.weights.has_input and case.data_from is None


def quantize_int8(values: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Float values as an int8 tensor with this (scale, zero point) holds them: round half to
    even, clamped to int8."""
    return np.clip(np.rint(values / scale) + zero_point, -128, 127).astype(np.int8)


def make_input(case: Case, quantization: tuple[float, int] | None = None) -> np.ndarray:
    """The case's input: U(-1, 1) floats, bf16-rounded for bf16, the full int8 range for w8i8;
    adversarial: see the module docstring (a case keeping another's data: that input, cropped).
    A case given a model's sample input (pipeline/space/given.py) runs on that: for w8i8
    quantized with its built model's input (scale, zero point) `quantization` (the model was
    calibrated on the same sample), round half to even, clamped to int8."""
    sample = _sample(case)
    if sample is not None:
        if case.flavor == "w8i8":
            if quantization is None:
                raise ValueError(f"{case.name}: a sample input is quantized with its model's input quantization")
            return quantize_int8(sample.astype(np.float64), *quantization)
        if case.flavor == "bf16":
            import ml_dtypes

            return sample.astype(ml_dtypes.bfloat16)
        return sample
    if case.data_from is not None:
        return _crop(make_input(_original(case)), input_shape(case), "input")
    shape = input_shape(case)
    adversarial = case.data == "adversarial"
    if case.flavor == "w8i8":
        if adversarial:
            return np.where(_extremes(shape, case.seed), np.int8(127), np.int8(-128)).astype(np.int8)
        return np.random.default_rng(case.seed).integers(-128, 128, shape, dtype=np.int8)
    if case.data == "structured":
        x = structured_samples(case, shape, case.seed)
    else:
        x = adversarial_samples(shape, case.seed) if adversarial else float_samples(shape, case.seed)
    if case.flavor == "bf16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16)
    return x


def calibration_samples(case: Case, count: int = 8) -> list[np.ndarray]:
    """Representative dataset for full-int8 calibration: same distribution as the f32 inputs (a
    case given a sample input: that input alone)."""
    sample = _sample(case)
    if sample is not None:
        return [sample]
    if case.data_from is not None:
        return [_crop(s, input_shape(case), "input") for s in calibration_samples(_original(case), count)]
    shape = input_shape(case)
    if case.data == "adversarial":
        low, high = extreme_range(case)
        return [np.where(_extremes(shape, case.weight_seed + 1 + i), high, low).astype(np.float32)
                for i in range(count)]
    if case.data == "structured":
        return [structured_samples(case, shape, case.weight_seed + 1 + i) for i in range(count)]
    return [float_samples(shape, case.weight_seed + 1 + i) for i in range(count)]
