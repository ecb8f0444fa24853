"""The tolerance policy: how far an output may be from its oracle, derived, never tuned.

Notation: K = (c_in / groups) x kernel area (products summed per output), t = max|w| * max|x| (largest
product), b = max|bias|, r = max|w| * sqrt(mean(x**2)) (the rms bound of a product: r <= t),
mu = the products' drift: max over output channels of |mean(w_o)| * |mean(x)|, u = unit
roundoff (f32: 2**-24, bf16: 2**-8), S = the exact (float64) sum an output should be,
e = expected value.  r and mu are taken from the operands as the module holds them.

f32 accumulation (f32, w8if32, ONNX f32).  Each of the K additions of an f32 dot product
rounds with a relative error of at most u, independently (the probabilistic model of
Higham & Mary), so one implementation's error has a variance of at most u**2 / 3 times the
sum of the squared partial sums.  The model of the data: the entries of x are exchangeable
(drawn alike, whatever their distribution: second moment q = E[x**2], mean m), and so are the
K weights of each output channel (mean m_w).  Then, in any summation order the implementation
picks (it cannot pick by value), a partial sum of k products, started from the bias, has
    E[(b + s_k)**2] <= k max|w|**2 q + (|b| + k mu)**2 = k r**2 + (|b| + k mu)**2,
mu = |m_w| |m| (the variance of the k products is at most k max|w|**2 (q - m**2); the mean of
their sum is k m_w m for weights in a random order, and the square of that mean is what
remains of k max|w|**2 m**2 + k**2 m_w**2 m**2).  Summed over k = 1..K this is
K**2 r**2 / 2 + D, with the drift term
    D = sum_k (|b| + k mu)**2 = K b**2 + |b| mu K (K + 1) + mu**2 K (K + 1) (2K + 1) / 6,
so one implementation's error has a standard deviation of at most
    sigma = u * sqrt(K**2 r**2 / 2 + D) / sqrt(3).
q and mu are the sample moments of the data the case runs on.  r <= t always; for zero-mean
uniform data r = t / sqrt(3) and the sample means are small, so the bound is tighter than the
zero-mean bound with t, K**2 t**2 / 2 + K b**2 (measured on the default sweep:
docs/measurements.md).  Data whose products share
a sign (x >= 0 and w >= 0) make the partial sums grow like k mu, and D grows like K**3 mu**2:
the drift term keeps the bound sound for them.  Comparing two f32 implementations (IREE and an
f32 oracle), the errors add in quadrature, and each rounds its final output once more (u |e|):
    tol = LAMBDA * sqrt(n) * sigma + n * u * |e|,   n = implementations compared, LAMBDA = 6.
It grows like K u r, not like the worst case K u sum|w x| ~ K**2 u t, so one weight with its
sign flipped (an error of 2 |w| |x|, about t) stays visible at K = 512 x 9 x 9.

bf16 (ONNX bf16).  The oracle is S, the exact sum of the products of the bf16 operands.  IREE
accumulates in f32 (an error of at most A, the f32 term above with n = 1) and rounds once to
bf16 (at most half a bf16 step of the value it rounds, whose magnitude is at most |S| + A):
    tol = ulp_bf16(|S| + A) / 2 + A.
ulp_bf16(|S| + A), not ulp_bf16(|S|): where the accumulated value lies in the binade above S's,
its step is the larger one.  An output exactly half a step from S (a tie) has error/tolerance
1.000 and passes; one more step fails.

w8i8.  Against the TFLite reference kernels IREE is expected to be bit-exact: tol = 0 LSB.
Every accumulator must fit int32: a geometry whose worst case K * 255 * 127 (|x - zp| <= 255,
|w| <= 127) exceeds 2**31 - 1 is refused for w8i8 (pipeline/space/refusal.py).

w8if32 against the TFLite interpreter.  TFLite quantizes the activations on the fly to int8
with a step s_x <= max|x| / 127 (symmetric; an asymmetric step (max - min) / 255 is
smaller), so each input carries an error of at most s_x / 2, and output channel o is off by
at most  (s_x / 2) * sum |W_o|  (a rigorous bound), plus the f32 term (n = 2).

w8if32 against the exact conv of its dequantized weights.  The reference is float64, exact
(no rounding of its own), so the f32 term has n = 1: one implementation's accumulation and
its one final rounding.

f32 models a compiler converts to bf16 (torq-compile --torq-convert-dtypes
--torq-convert-io-dtype: bf16 inputs, weights and outputs).  Two checks, both must pass:
  - tight, against S, the exact conv of the operands as the module holds them: the input
    rounded to bf16 (nearest even), and where the profile says the compiler converts the
    weights too (converts_weights: torq-compile --torq-convert-dtypes) the weights and bias
    rounded to bf16 (w8if32: the dequantized weights, as f32, then rounded); the bf16 policy
    above applies.  This keeps the teeth: one flipped weight still shows at K = 512 x 9 x 9.
  - against the flavor's own oracle e (TFLite, onnxruntime, the float64 conv of w8if32's
    dequantized weights), with the conversion as the error model: each product w x becomes
    w x (1 + a)(1 + b), |a|, |b| <= u_bf16, independent rounding errors of variance at most
    u_bf16**2 / 3, so the K products' error has a standard deviation of at most
        sigma_conv = u_bf16 * t * sqrt(2 K / 3)
    (each input element meets one weight per output: the K errors are independent), plus
    u_bf16 * b for the bias and the f32 term (n = 2 against an f32 oracle, n = 1 against
    w8if32's exact conv): the value the module rounds to bf16 is within
        C = LAMBDA * sigma_conv + u_bf16 * b + f32 term
    of e, and the one rounding adds half a step:  tol = ulp_bf16(|e| + C) / 2 + C.
    Too loose to see one flipped weight at large K: the tight check is there for that.

A target that adds the bias in a separate bf16 step rounds the accumulated bias-free sum to
bf16 before adding the bias: y = bf16(bf16(S0') + b), |S0' - S0| <= A.  The first rounding
is within ulp_bf16(|S0| + A) / 2 of S0', so the value the second rounding sees is within
A + ulp_bf16(|S0| + A) / 2 of S, and its bf16 checks take that sum for A above.  Where S0 and
b nearly cancel, that step is far larger than one step of the output.  torq-compile 2.3.0
does so in one case only (profile bf16_bias_add =
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
roundings: first the rounding doubling high multiply to 2**-31 of the product, ties toward
+infinity (gemmlowp's nudge of 2**30, or 1 - 2**30 for a negative product, then a division
truncating toward zero), then the rounding right shift, ties away from zero.  An
implementation that rounds once (torq-compile's rescale: round to nearest, ties toward
+infinity, the 31-bit M kept while all channels share one shift, truncated to the smallest
shift where they differ) differs from it by at most one LSB, near .5 ties: for a channel at
the smallest shift, only where the real value r = acc M / 2**S lies within 2**(30 - S) output
LSBs below a tie in magnitude; for a channel whose multiplier was truncated, within that
truncation's error of a tie, which can be wider (up to |acc| 2**-S_min LSBs).  Both
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


def drift_term(k: int, b: float, mu: float) -> float:
    """D = sum over k = 1..K of (|b| + k mu)**2: the bias and the products' common mean in the
    partial sums (K b**2 for zero-mean data)."""
    k, b, mu = float(k), abs(float(b)), abs(float(mu))
    return k * b * b + b * mu * k * (k + 1) + mu * mu * k * (k + 1) * (2 * k + 1) / 6.0


def f32_accumulation(k: int, t: float, b: float, implementations: int = 2, mu: float = 0.0) -> float:
    """LAMBDA standard deviations of the f32 rounding error of n K-term dot products; `t` bounds
    a product's rms (r, or the larger max|w| max|x|)."""
    sigma = U_F32 * np.sqrt(k * k * t * t / 2.0 + drift_term(k, b, mu)) / np.sqrt(3.0)
    return float(LAMBDA * np.sqrt(implementations) * sigma)


def f32_terms(k: int, t: float, b: float, implementations: int = 2, mu: float = 0.0) -> tuple[float, float]:
    """The f32 tolerance as atol + rtol |e| (the form iree-run-module's checks take)."""
    return f32_accumulation(k, t, b, implementations, mu), implementations * U_F32


def f32_tolerance(expected: np.ndarray, k: int, t: float, b: float, implementations: int = 2,
                  mu: float = 0.0) -> np.ndarray:
    """Per-element tolerance of an f32 conv against another f32 (or exact, n = 1) computation."""
    atol, rtol = f32_terms(k, t, b, implementations, mu)
    return atol + rtol * np.abs(np.asarray(expected, dtype=np.float64))


def bf16_ulp(values: np.ndarray) -> np.ndarray:
    """Spacing of bf16 numbers at |values| (normal range; below it, the smallest normal's, which
    is wider than the subnormals' spacing)."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    tiny = 2.0 ** -126
    exponent = np.floor(np.log2(np.maximum(v, tiny)))
    return 2.0 ** (exponent - BF16_MANTISSA_BITS)


def rounded_once(unrounded: np.ndarray, within) -> np.ndarray:
    """The tolerance of a value that lies within `within` of `unrounded` and is then rounded once
    to bf16 (nearest): `within` plus half a bf16 step at |unrounded| + within (the step of the
    binade the value may have reached)."""
    within = np.asarray(within, dtype=np.float64)
    return bf16_ulp(np.abs(np.asarray(unrounded, dtype=np.float64)) + within) / 2.0 + within


def bf16_tolerance(unrounded: np.ndarray, k: int, t: float, b: float, mu: float = 0.0, bias_step=0.0) -> np.ndarray:
    """bf16 output of an f32 accumulation against the exact sum S of its bf16 operands (`unrounded`):
    ulp_bf16(|S| + A) / 2 + A, A the f32 term (n = 1) plus, for a separate bias add, `bias_step`."""
    return rounded_once(unrounded, f32_accumulation(k, t, b, implementations=1, mu=mu) + np.asarray(bias_step))


def bf16_terms(k: int, t: float, b: float, mu: float = 0.0) -> tuple[float, float]:
    """An atol + rtol |e| bound against the bf16-rounded reference e = bf16(S) (what a run tool
    compares with): |y - e| <= |y - S| + ulp_bf16(|S|) / 2 <= ulp_bf16(|S| + A) + A
    <= 2**-7 (|S| + A) + A, and |S| <= |e| (1 + 2**-8).  Looser than the sweep's check against
    S by up to a bf16 step."""
    a = f32_accumulation(k, t, b, implementations=1, mu=mu)
    step = 2.0 ** -BF16_MANTISSA_BITS
    return a * (1.0 + step), step * (1.0 + U_BF16)


def activation_quantization(expected: np.ndarray, kernel: np.ndarray, max_x: float, channel_axis: int) -> np.ndarray:
    """What TFLite's hybrid kernel's on-the-fly quantization of the activations may add, per
    output channel: (s_x / 2) sum |W_o|, s_x = max|x| / 127, shaped to broadcast against `expected`."""
    step = max_x / 127.0
    per_channel = step / 2.0 * np.abs(kernel).reshape(kernel.shape[0], -1).sum(axis=1)
    shape = [1] * np.ndim(expected)
    shape[channel_axis] = -1
    return per_channel.reshape(shape)


def hybrid_tolerance(expected: np.ndarray, kernel: np.ndarray, max_x: float, k: int, t: float, b: float,
                     channel_axis: int, mu: float = 0.0, implementations: int = 2) -> np.ndarray:
    """w8if32 against TFLite's hybrid kernel (n = 2; the hybrid kernel against the exact conv: n = 1)."""
    return (activation_quantization(expected, kernel, max_x, channel_axis)
            + f32_tolerance(expected, k, t, b, implementations=implementations, mu=mu))


def bf16_conversion(k: int, t: float, b: float) -> float:
    """LAMBDA standard deviations of the error of rounding K operand pairs to bf16, plus the bias."""
    return float(LAMBDA * U_BF16 * t * np.sqrt(2.0 * k / 3.0) + U_BF16 * b)


def converted_tolerance(expected: np.ndarray, k: int, t: float, b: float, implementations: int = 2,
                        mu: float = 0.0, bias_step=0.0, oracle_bound=0.0, r: float | None = None) -> np.ndarray:
    """An f32 model run in bf16 against the flavor's f32 oracle (n = 2) or the exact conv (n = 1):
    the value rounded to bf16 is within C = conversion (with t) + f32 term (with r, else t)
    (+ `oracle_bound`, the oracle's own bound, e.g. the hybrid kernel's) of e; one rounding adds
    half a step at |e| + C."""
    within = (bf16_conversion(k, t, b) + f32_tolerance(expected, k, t if r is None else r, b, implementations, mu)
              + np.asarray(bias_step) + np.asarray(oracle_bound))
    return rounded_once(expected, within)


def separate_bias_term(bias_free: np.ndarray, k: int, t: float, b: float, mu: float = 0.0) -> np.ndarray:
    """Half a bf16 step of the accumulated bias-free sum, rounded before a separate bias add:
    ulp_bf16(|S0| + A) / 2, A the f32 term (n = 1)."""
    a = f32_accumulation(k, t, b, implementations=1, mu=mu)
    return bf16_ulp(np.abs(np.asarray(bias_free, dtype=np.float64)) + a) / 2.0


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
    q31 = np.floor(mantissa * 2.0 ** 31 + 0.5).astype(np.int64)  # half away from zero (m > 0)
    exponent = np.where(q31 == 1 << 31, exponent + 1, exponent)
    q31 = np.where(q31 == 1 << 31, 1 << 30, q31)
    return q31, (31 - exponent).astype(np.int64)


def _divide_toward_zero(value: np.ndarray, shift: int) -> np.ndarray:
    return np.where(value >= 0, value >> shift, -((-value) >> shift))


def tflite_requantize(acc: np.ndarray, q31: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """TFLite's reference MultiplyByQuantizedMultiplier (gemmlowp), in int64: for M = q31 / 2**S
    with S < 31 (a multiplier >= 1) the accumulator is shifted left by 31 - S first; then the
    doubling high multiply, ties toward +infinity (the nudge, then division toward zero), then a
    rounding right shift by S - 31 where S > 31 (ties away from zero)."""
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
