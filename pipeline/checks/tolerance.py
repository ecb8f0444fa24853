"""The tolerance policy: how far an output may be from its oracle, derived, never tuned.

Notation: K = (c_in / groups) x kernel area (products summed per output), t = max|w| * max|x| (largest
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

w8if32 against the exact conv of its dequantized weights.  The reference is float64, exact
(no rounding of its own), so the f32 term has n = 1: one implementation's accumulation and
its one final rounding.

f32 models a compiler converts to bf16 (torq-compile --torq-convert-dtypes
--torq-convert-io-dtype: bf16 inputs, weights and outputs).  Two checks, both must pass:
  - tight, against the exact conv of the operands as the module holds them, rounded once to
    bf16: the input rounded to bf16 (nearest even), and where the profile says the compiler
    converts the weights too (converts_weights: torq-compile --torq-convert-dtypes) the
    weights and bias rounded to bf16 (w8if32: the dequantized weights, as f32, then
    rounded); the bf16 policy above applies (u_bf16 = 2**-8 below).
    This keeps the teeth: one flipped weight still shows at K = 512 x 9 x 9.
  - against the flavor's own oracle (TFLite, onnxruntime, the float64 conv of w8if32's
    dequantized weights), with the conversion as the error model: each product w x becomes
    w x (1 + a)(1 + b), |a|, |b| <= u_bf16, independent rounding errors of variance at most
    u_bf16**2 / 3, so the K products' error has a standard deviation of at most
        sigma_conv = u_bf16 * t * sqrt(2 K / 3)
    (each input element meets one weight per output: the K errors are independent), plus
    u_bf16 * b for the bias, one bf16 step of the output and the f32 term (n = 2 against an
    f32 oracle, n = 1 against w8if32's exact conv):
        tol = ulp_bf16(|e|) + LAMBDA * sigma_conv + u_bf16 * b + f32 term.
    Too loose to see one flipped weight at large K: the tight check is there for that.

A target that adds the bias in a separate bf16 step rounds the bias-free sum S to bf16 before
adding the bias: y = bf16(bf16(S) + b), so its bf16 checks allow half a bf16 step of S on top:
+ ulp_bf16(|S|) / 2.  Where S and b nearly cancel, that step is far larger than one step of the
output.  torq-compile 2.3.0 does so in one case only (profile bf16_bias_add =
"padded-space-to-depth"; read in its source and checked element by element on its simulator):
an f32 model it converts to bf16 (--torq-convert-dtypes), whose conv is a Conv2D with one group
and no dilation outside the hardware's native range (a kernel side above 7, a stride above 2,
or unequal strides), which torq rewrites as a stride-1 conv over a space-to-depth input; and
only where that rewrite pads the input: on an axis of stride s > 1, input X (with padding) and
kernel k, when X mod s != 0 and (k mod s == 0 or X mod s < k mod s).  The padded conv's output
is then cropped between the conv (run with a zero bias) and a separate bf16 add of the bias.
Everywhere else the bias is fused into the f32 accumulation: native bf16 models, Conv1D (an
ONNX conv_1d; a TFLite Conv1D is a Conv2D of height 1), stride-2 convs with kernels up to 7,
unpadded rewrites.

w8i8 on a target whose requantization rounds once (profile int8_rounding = "single-round").
TFLite's reference kernels requantize acc * M / 2**S (M a 31-bit multiplier) in two
roundings, half away from zero each: first to 2**-31 of the product, then the shift. An
implementation that rounds once (torq-compile's rescale: round to nearest, ties toward
+infinity, the 31-bit M kept while all channels share one shift, truncated to the smallest
shift where they differ) differs from it by exactly one LSB, and only where the real value
r = acc M / 2**S lies within 2**(30 - S) output LSBs below a .5 tie in magnitude.  Both
roundings are computed exactly, in integers, from each output's int32 accumulator, then the
output zero point added and the result clamped to [-128, 127], as both implementations do.
The check is bit-exact everywhere: where the two models agree, the TFLite reference kernels'
value; where they differ, the single-round value (not either neighbour).  A model that
requantizes twice (the converter puts a Conv1D's bias with one output channel in a separate
int8 ADD) has no single-round model here: it is checked bit-exactly against TFLite's output.  The report counts
the elements and cases where the single-round value was the one required.
"""
from __future__ import annotations

import numpy as np

U_F32 = 2.0 ** -24
BF16_MANTISSA_BITS = 7
U_BF16 = 2.0 ** -(BF16_MANTISSA_BITS + 1)  # unit roundoff of bf16, round to nearest
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


def bf16_conversion(k: int, t: float, b: float) -> float:
    """LAMBDA standard deviations of the error of rounding K operand pairs to bf16, plus the bias."""
    return float(LAMBDA * U_BF16 * t * np.sqrt(2.0 * k / 3.0) + U_BF16 * b)


def converted_tolerance(expected: np.ndarray, k: int, t: float, b: float, implementations: int = 2) -> np.ndarray:
    """An f32 model run in bf16 against the flavor's f32 oracle (n = 2) or the exact conv (n = 1)."""
    return bf16_ulp(expected) + bf16_conversion(k, t, b) + f32_tolerance(expected, k, t, b, implementations)


def separate_bias_term(bias_free: np.ndarray) -> np.ndarray:
    """Half a bf16 step of the bias-free sum, rounded before a separate bias add."""
    return bf16_ulp(bias_free) / 2.0


def padded_space_to_depth(geometry, backend: str) -> bool:
    """Whether torq-compile rewrites this conv as a stride-1 conv over a padded space-to-depth
    input, which adds the bias separately (see the module docstring)."""
    g = geometry
    if (g.rank == 1 and backend == "onnx") or g.groups != 1 or any(d != 1 for d in g.dhw):
        return False
    (kh, kw), (sh, sw) = g.khw if g.rank == 2 else (1, g.kernel[0]), g.shw
    if kh <= 7 and kw <= 7 and sh <= 2 and sw <= 2 and sh == sw:
        return False  # within the hardware's range: no rewrite
    pads = g.pads if g.rank == 2 else ((0, 0), *g.pads)
    for n, (before, after), k, s in zip(g.hw, pads, (kh, kw), (sh, sw)):
        x = n + before + after
        if s > 1 and x % s != 0 and (k % s == 0 or x % s < k % s):
            return True
    return False


def quantized_multipliers(multipliers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's QuantizeMultiplier: s_in s_w / s_out = M / 2**S with M a 31-bit integer."""
    mantissa, exponent = np.frexp(np.asarray(multipliers, dtype=np.float64))  # m in [0.5, 1), e
    q31 = np.round(mantissa * 2.0 ** 31).astype(np.int64)
    exponent = np.where(q31 == 1 << 31, exponent + 1, exponent)
    q31 = np.where(q31 == 1 << 31, 1 << 30, q31)
    return q31, (31 - exponent).astype(np.int64)


def _divide_toward_zero(value: np.ndarray, shift: int) -> np.ndarray:
    return np.where(value >= 0, value >> shift, -((-value) >> shift))


def tflite_requantize(acc: np.ndarray, q31: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """TFLite's reference MultiplyByQuantizedMultiplier (gemmlowp), in int64: for M = q31 / 2**S
    with S < 31 (a multiplier >= 1) the accumulator is shifted left by 31 - S first; then the
    doubling high multiply rounded half away from zero, then a rounding right shift by S - 31
    where S > 31 (half away)."""
    left = np.maximum(31 - shifts, 0)
    right = np.maximum(shifts - 31, 0)
    product = (acc << left) * q31
    high = _divide_toward_zero(product + np.where(product >= 0, 1 << 30, 1 - (1 << 30)), 31)
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def single_round_requantize(acc: np.ndarray, q31: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """One rounding, to nearest with ties toward +infinity, every channel at the smallest shift
    with its multiplier truncated to it (torq-compile's compute_scale and NTP rounding)."""
    common = int(shifts.min())
    multiplier = q31 >> (shifts - common)
    return (acc * multiplier + (np.int64(1) << (common - 1))) >> common


def requantized(acc: np.ndarray, multipliers: np.ndarray, channel_axis: int,
                zero_point: int) -> tuple[np.ndarray, np.ndarray]:
    """The int8 outputs of TFLite's double rounding and of single rounding, each plus the output
    zero point and clamped to [-128, 127], from every output's int32 accumulator (`acc`);
    `multipliers` is s_in s_w / s_out per output channel. Exact, in integers."""
    q31, shifts = quantized_multipliers(multipliers)
    shape = [1] * np.ndim(acc)
    shape[channel_axis] = -1
    q31, shifts = q31.reshape(shape), shifts.reshape(shape)
    acc = np.asarray(acc, dtype=np.int64)

    def out(values):
        return np.clip(values + zero_point, -128, 127).astype(np.int8)

    return out(tflite_requantize(acc, q31, shifts)), out(single_round_requantize(acc, q31, shifts))
