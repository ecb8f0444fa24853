"""The tolerance policy: how far an output may be from its oracle, derived, never tuned.

Notation: K = c_in x kernel area (products summed per output), t = max|w| * max|x| (largest
product), b = max|bias|, u = unit roundoff (f32: 2**-24, bf16: 2**-8), e = expected value.

f32 accumulation (f32, w8if32, ONNX f32).  Each of the K additions of an f32 dot product
rounds with a relative error of at most u, independently (the probabilistic model of
Higham & Mary).  The partial sums of K zero-mean terms grow like a random walk,
|s_k| <= sqrt(k) t + b, so one implementation's error has a standard deviation of at most
    sigma = u * sqrt(K^2 t^2 / 2 + K b^2) / sqrt(3)
whatever its summation order, blocking or FMA use.  Comparing two f32 implementations
(IREE and an f32 oracle), the errors add in quadrature, and each rounds its final output
once more (u |e|):
    tol = LAMBDA * sqrt(n) * sigma + n * u * |e|,   n = implementations compared, LAMBDA = 6.
t bounds the rms product from above (by 3x for uniform data), so real errors sit far below
this; and it grows like K u t, not like the worst case K u sum|w x| ~ K^2 u t, so one weight
with its sign flipped (an error of 2 |w| |x|, about t) stays visible at K = 512 x 9 x 9.

bf16 (ONNX bf16).  The oracle is exact arithmetic on the bf16 operands, rounded once to
bf16.  IREE accumulates in f32 and rounds once; the two roundings can land on adjacent bf16
values, so:  tol = ulp_bf16(|e|) + (f32 accumulation term above, n = 1).
The smallest error this can detect is one bf16 step (2**-7 relative) plus that term.

w8i8.  Against the TFLite reference kernels IREE is expected to be bit-exact: tol = 0 LSB.

w8if32 against the TFLite interpreter.  TFLite quantizes the activations on the fly to int8
with a step s_x <= max|x| / 127 (symmetric; an asymmetric step (max - min) / 255 is
smaller), so each input carries an error of at most s_x / 2, and output channel o is off by
at most  (s_x / 2) * sum |W_o|  (a rigorous bound), plus the f32 term (n = 2).
"""
from __future__ import annotations

import numpy as np

U_F32 = 2.0 ** -24
BF16_MANTISSA_BITS = 7
LAMBDA = 6.0  # Gaussian tail: P(|err| > 6 sigma) ~ 2e-9 per element, before t's own margin


def f32_accumulation(k: int, t: float, b: float, implementations: int = 2) -> float:
    """LAMBDA standard deviations of the f32 rounding error of n K-term dot products."""
    sigma = U_F32 * np.sqrt(k * k * t * t / 2.0 + k * b * b) / np.sqrt(3.0)
    return float(LAMBDA * np.sqrt(implementations) * sigma)


def f32_terms(k: int, t: float, b: float, implementations: int = 2) -> tuple[float, float]:
    """The f32 tolerance as atol + rtol |e| (the form iree-run-module's checks take)."""
    return f32_accumulation(k, t, b, implementations), implementations * U_F32


def f32_tolerance(expected: np.ndarray, k: int, t: float, b: float, implementations: int = 2) -> np.ndarray:
    """Per-element tolerance of an f32 conv against another f32 (or exact, n = 1) computation."""
    atol, rtol = f32_terms(k, t, b, implementations)
    return atol + rtol * np.abs(np.asarray(expected, dtype=np.float64))


def bf16_ulp(values: np.ndarray) -> np.ndarray:
    """Spacing of bf16 numbers at |values| (normal range)."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    tiny = 2.0 ** -126
    exponent = np.floor(np.log2(np.maximum(v, tiny)))
    return 2.0 ** (exponent - BF16_MANTISSA_BITS)


def bf16_tolerance(expected: np.ndarray, k: int, t: float, b: float) -> np.ndarray:
    return bf16_ulp(expected) + f32_accumulation(k, t, b, implementations=1)


def bf16_terms(k: int, t: float, b: float) -> tuple[float, float]:
    """bf16_tolerance as atol + rtol |e|: ulp_bf16(|e|) <= 2**-7 |e|, so at most twice as loose."""
    return f32_accumulation(k, t, b, implementations=1), 2.0 ** -BF16_MANTISSA_BITS


def hybrid_tolerance(expected: np.ndarray, kernel: np.ndarray, max_x: float, k: int, t: float, b: float,
                     channel_axis: int) -> np.ndarray:
    """w8if32 against TFLite's hybrid kernel, which quantizes activations on the fly."""
    step = max_x / 127.0
    per_channel = step / 2.0 * np.abs(kernel).reshape(kernel.shape[0], -1).sum(axis=1)
    shape = [1] * np.ndim(expected)
    shape[channel_axis] = -1
    return per_channel.reshape(shape) + f32_tolerance(expected, k, t, b, implementations=2)
