"""The tolerance policy: how far an output may be from the exact conv, derived, never tuned.

Notation, per output element n (batch, output channel o, position): its K = (c_in / groups) x
kernel area products p_j = w_oj x_j over the window it reads (padding reads 0), bias b_o,
S = b_o + sum p_j the exact (float64) sum, P+ and P- the sums of its positive products and of
the magnitudes of its negative ones (P+ + P- = sum |p_j|, P+ - P- = S - b_o), and
    Q = max(P+ + max(b_o, 0), P- + max(-b_o, 0)),
a bound on every partial sum of the element's terms, in any order and any bracketing: a sum
of some of them lies between -(P- + max(-b_o, 0)) and P+ + max(b_o, 0).  Q comes from two
float64 convs of the operands as the module holds them (x with w, |x| with |w|), so it is the
element's own: its channel's weights and bias, its own window of the input.  u = 2**-24
(f32), the unit roundoff of the accumulation.

f32 accumulation (tflite f32, onnx f32, w8if32's float path; the accumulation of bf16 and of
f32 models run in bf16).  The model (Higham & Mary's, without their assumption on the data):
every rounding of a floating-point operation is r(1 + d) with |d| <= u, and each d has mean
zero given the roundings before it.  The data are anything: no distribution, no order, no sign
is assumed.  The module's result is then exactly S plus
    E = sum_i d_i T_i + sum_j e_j p_j (+ sum_j f_j p_j),
T_i the K partial sums its K additions produce (the bias's addition included; the last is the
output itself), e_j the products' roundings (none with a fused multiply-add: fewer terms only
lower the variance), f_j the roundings of dequantized weights (w8if32: q s computed in f32).
Whatever the order and bracketing, |T_i| <= Q, and sum p_j**2 <= (P+ + P-)**2 <= 4 Q**2, so
the coefficients' squares sum to at most V = (K + 4 F) Q**2, F the families of rounded factors
(1; 2 for w8if32).  To first order in u, E is a martingale with bounded increments;
Azuma-Hoeffding gives, for any data and any order,
    P(|E| > LAMBDA u sqrt(V)) <= 2 exp(-LAMBDA**2 / 2) <= 1e-9   with LAMBDA = 6.55.
Conditioning on the data is what removes the mixture: the bound uses this element's own Q,
not an expectation over data, so structured data (sorted weights, weights of one sign, a bright
patch, a large common offset) cannot push the tail past 1e-9.  Against the float64 conv
(exact) this is the whole tolerance, n = 1:  A = LAMBDA u sqrt(K + 4 F) Q.  It grows like
sqrt(K) Q: sqrt(K) times the typical error of zero-mean data in a random order, the price of
holding for any order, sorted data included.
Outside the model: rounding errors that repeat with one sign.  Identical terms added in a
row to a growing sum do that (a constant filter on an input that is constant over its window):
the error then approaches the worst case u sum |T_i| <= u K Q, sqrt(K) / LAMBDA times A.

Accumulation in bf16 (a profile's accumulation = "bf16": the running sum rounded to bf16 after
each tile of accumulation_tile terms summed in f32).  The model does not hold for those
roundings: a bf16 running sum stagnates once a tile's sum is under half its step, so the
roundings lose the same way every time (seen in simulation: pipeline/dev/falsealarm.py).
Their bound is the worst case: with n = ceil(K / tile) roundings, the i-th rounding's error at
most u_b = 2**-8 times the value it rounds, the exact partial sum T_i (|T_i| <= Q) plus the
error so far, the error e_i obeys |e_i| <= (1 + u_b) |e_(i-1)| + u_b Q, so
|e_n| <= ((1 + u_b)**n - 1) Q; the f32 tile sums' own
errors (A above) are carried through at most (1 + u_b)**n:
    A_bf16 = ((1 + u_b)**n - 1) Q + (1 + u_b)**n A.
It passes Q once n > 177: such a target's conv cannot be checked tightly at large K / tile, and
no tensor test applies (its errors may share a sign).

bf16 outputs (onnx bf16; f32 models a compiler runs in bf16).  The module accumulates within A
of S and rounds the result once to bf16, to nearest.  The values a correct rounding reaches are
exactly the bf16 numbers in  [rn_down(S - A), rn_up(S + A)],  rn_down (rn_up) rounding to
nearest with ties toward -inf (+inf): either tie rule is accepted, nothing else.  (As a
tolerance around S, on the side the output lies: up to halfway to the next bf16 number past
the interval's end, which admits the same bf16 values and gives error / tolerance < 1 a
meaning.)  Near a power of two this is tighter than a half step at |S| + A, which admits a
neighbour no rounding reaches.
A target that adds the bias in a separate bf16 step (profile bf16_bias_add =
"padded-space-to-depth", below) computes y = bf16(r + b), r a bf16 rounding of the bias-free
sum within A of S0: r in [rn_down(S0 - A), rn_up(S0 + A)], and r + b rounded to bf16 (possibly
through f32 first: the interval's ends are taken through f32 rounded outward) gives
[rn_down(rd_f32(r_lo + b)), rn_up(ru_f32(r_hi + b))].

w8if32.  Two implementations are correct, and the bound admits both, per element:
  - float activations (IREE): the f32 accumulation above with the dequantized weights rounded
    to f32 (F = 2);
  - activations quantized per batch element, as TFLite's hybrid kernel does: a step
    s_x <= max|x_n| / 127 over the batch element's input (symmetric; an asymmetric step
    (max - min) / 255 is smaller; zero, hence padding, is exact in both), so each input is off
    by at most s_x / 2 and output channel o by at most H = (s_x / 2) sum |W_o|, rigorously; the
    int8 products are summed exactly in int32, then scaled by s_x s_w (two f32 roundings) and
    the bias added (one more): R = 3 u (sum |p_j| + H + |b_o|) bounds those, to first order
    (u**2 terms are below 2**-40 relative).  That path's value is deterministic: TFLite's hybrid
    kernel computes it (the oracle, e).
  An output passes within A of S (the float path), or where it is TFLite's hybrid value: within
  2 R of e (both implementations' roundings), e itself within H + R of S; there the tolerance
  around S is |e - S| + 2 R.  Each implementation is held to its own derived error, so one
  weight off is seen on either path even where its effect is far below H.

f32 models a compiler converts to bf16 (torq-compile --torq-convert-dtypes
--torq-convert-io-dtype).  The reference is S of the operands as the module holds them: the
input rounded to bf16, and where the profile says the compiler converts the weights
(converts_weights) the weights and bias rounded to bf16 too (w8if32: its dequantized weights as
f32, then rounded).  The bf16 output check above applies.  The flavor's own oracle is no part
of the verdict (below).

The oracle as a cross-check.  Every verdict rests on the float64 conv of the model's own
weights (n = 1).  The f32 oracles (TFLite interpreter, onnxruntime, TFLite's hybrid kernel) are
checked against the same float64 conv under one implementation's bound (the hybrid kernel: the
w8if32 bound); one outside it is reported with both figures, never used for the verdict.

The tensor test (f32 outputs).  Under the model the roundings of different elements are
separate operations, so their errors E_n are independent, except where elements compute (nearly)
the same thing: identical windows repeat the same operations and errors, and windows so alike
that their terms differ by less than the partial sums' rounding step repeat the same roundings
(an input offset far above its spread, with weights of one sign: docs/measurements.md).
Elements whose sums lie within each other's bound (|S_i - S_j| <= A_i + A_j, linked in a chain)
form one group g of m_g elements taken to share one error (V_g its largest): a conservative
grouping, which only widens the bound.  Per output channel,
the summed error  Z_o = sum_n (y_n - S_n) = sum_g m_g E_g  is then a martingale too, with
increments bounded by m_g u sqrt(V_g), and
    P(|Z_o| > LAMBDA u sqrt(sum_g m_g**2 V_g)) <= 1e-9   per channel (Azuma-Hoeffding, as above).
It sees a systematic error (every element of a channel moved one way) sqrt(number of distinct
windows) times smaller than the element bound does.  w8if32: where every output is within the
float path's A (a module on the hybrid path gets none).  bf16 outputs get none: their one rounding
hides any error smaller than the distance to a rounding boundary, and which elements lie near
one is not random under the model.

w8i8.  Against the TFLite reference kernels IREE is expected to be bit-exact: tol = 0 LSB.
Every accumulator must fit int32: a geometry whose worst case K * 255 * 127 (|x - zp| <= 255,
|w| <= 127) exceeds 2**31 - 1 is refused for w8i8 (pipeline/space/refusal.py); a built model's
worst case counts its bias too, 255 sum |w_o| + |b_o| (pipeline/checks/verify.py int32_guard).

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

Fused activations (Geometry.activation: relu, relu6).  The module computes act(y), y its sum,
act a clamp to [0, inf) or [0, 6].  The clamp is monotone and |act(a) - act(b)| <= |a - b|, so
wherever |y - S| <= A, |act(y) - act(S)| <= A: every float element check above compares with
act(S) under the same A, neither wider nor tighter.  Its ends are exact in every format, so a
correct rounding commutes with it (rn(act(S)) = act(rn(S))): a bf16 output is accepted exactly
in [act(low), act(high)], the ends of the interval above clamped.  The tensor test sums only the
elements whose whole interval S +- A lies strictly inside the clamp's bounds: there a passing
output is y itself, and the martingale above holds unchanged; an element the clamp may touch
has its error truncated toward zero, which the model does not describe, so it is left out (it
still has its element check).  w8i8: TFLite clamps the requantized value to
[max(-128, zp + rn(0 / s)), min(127, zp + rn(6 / s))] (relu: no upper end; rn rounds half away
from zero, 6 / s in f32; zp and s the output's quantization), as the reference kernels do; the
integer models above clamp there too, and the double-rounding model must still reproduce the
reference kernels bit for bit.
"""
from __future__ import annotations

import numpy as np

U_F32 = 2.0 ** -24
BF16_MANTISSA_BITS = 7
U_BF16 = 2.0 ** -(BF16_MANTISSA_BITS + 1)  # unit roundoff of bf16, round to nearest
LAMBDA = 6.55  # Azuma-Hoeffding: 2 exp(-LAMBDA**2 / 2) = 9.4e-10 <= 1e-9 per element (per channel: tensor test)
FALSE_ALARM = 2.0 * np.exp(-LAMBDA ** 2 / 2.0)


def partial_sum_bound(total: np.ndarray, abs_sum: np.ndarray, bias) -> np.ndarray:
    """Q per element: a bound on every partial sum of its terms in any order, from S (`total`,
    the bias included), sum |p_j| (`abs_sum`) and the bias, broadcast alike."""
    total, abs_sum = np.asarray(total, dtype=np.float64), np.asarray(abs_sum, dtype=np.float64)
    bias = np.asarray(bias, dtype=np.float64)
    bias_free = total - bias
    positive, negative = (abs_sum + bias_free) / 2.0, (abs_sum - bias_free) / 2.0
    return np.maximum(np.maximum(positive, 0.0) + np.maximum(bias, 0.0),
                      np.maximum(negative, 0.0) + np.maximum(-bias, 0.0))


def accumulation_variance(k: int, q: np.ndarray, factors: int = 1) -> np.ndarray:
    """u**2 V = u**2 (K + 4 F) Q**2: the variance proxy of one element's f32 accumulation error."""
    return U_F32 * U_F32 * (k + 4.0 * factors) * np.square(np.asarray(q, dtype=np.float64))


def accumulation_bound(k: int, q: np.ndarray, factors: int = 1) -> np.ndarray:
    """A = LAMBDA u sqrt(K + 4 F) Q: one implementation's accumulation error, exceeded with
    probability at most 1e-9 per element, for any data and summation order."""
    return LAMBDA * np.sqrt(accumulation_variance(k, q, factors))


def bf16_accumulation_bound(k: int, q: np.ndarray, tile: int, factors: int = 1) -> np.ndarray:
    """A running sum rounded to bf16 after every `tile` terms summed in f32: the worst case of its
    ceil(K / tile) bf16 roundings plus the f32 bound carried through them."""
    growth = (1.0 + U_BF16) ** -(-k // max(int(tile), 1))
    q = np.asarray(q, dtype=np.float64)
    return (growth - 1.0) * q + growth * accumulation_bound(k, q, factors)


def activation_quantization(kernel: np.ndarray, x: np.ndarray, shape: tuple, channel_axis: int) -> np.ndarray:
    """H: what quantizing the activations per batch element (TFLite's hybrid kernel) may add to
    an output of output channel o, (s_x / 2) sum |W_o|, s_x = max|x_n| / 127, broadcast to `shape`
    (the output's; batch on axis 0)."""
    x = np.asarray(x, dtype=np.float64)
    steps = np.abs(x.reshape(x.shape[0], -1)).max(axis=1) / 127.0 if x.size else np.zeros(x.shape[0])
    per_channel = np.abs(np.asarray(kernel, dtype=np.float64)).reshape(kernel.shape[0], -1).sum(axis=1)
    channel = [1] * len(shape)
    channel[channel_axis] = -1
    batch = [1] * len(shape)
    batch[0] = -1
    return np.broadcast_to(steps.reshape(batch) / 2.0 * per_channel.reshape(channel), shape)


def hybrid_bound(abs_sum: np.ndarray, bias, quantization: np.ndarray) -> np.ndarray:
    """The hybrid path's error: H + 3 u (sum |p| + H + |b|) (int32 accumulation exact; the scale
    product, the scaling and the bias add round)."""
    return quantization + 3.0 * U_F32 * (np.asarray(abs_sum) + quantization + np.abs(np.asarray(bias)))


# --- bf16: the values a correct rounding reaches -----------------------------------------------

_BF16_MIN_EXPONENT = -126  # smallest normal exponent; below it the spacing stays 2**-133


def _binade(v: np.ndarray) -> np.ndarray:
    """floor(log2 |v|), exactly (np.log2 rounds up just below a power of two), at least the
    smallest normal exponent of bf16."""
    _, exponent = np.frexp(np.maximum(np.abs(np.asarray(v, dtype=np.float64)), 2.0 ** _BF16_MIN_EXPONENT))
    return (exponent - 1).astype(np.float64)


def bf16_ulp(values: np.ndarray) -> np.ndarray:
    """The spacing of bf16 numbers in the binade of |values| (below the normal range, the
    subnormals' spacing, the smallest normal's)."""
    return 2.0 ** (_binade(values) - BF16_MANTISSA_BITS)


def _bf16_floor(v: np.ndarray) -> np.ndarray:
    """The largest bf16 number <= v (float64 in, float64 out, exact)."""
    v = np.asarray(v, dtype=np.float64)
    step = bf16_ulp(v)
    return np.floor(v / step) * step  # a power-of-two step: exact; a negative v just above -2**e floors to it


def _bf16_ceil(v: np.ndarray) -> np.ndarray:
    return -_bf16_floor(-np.asarray(v, dtype=np.float64))


def bf16_nearest(v: np.ndarray, ties_up: bool) -> np.ndarray:
    """v rounded to the nearest bf16 number, a tie going toward +inf (`ties_up`) or -inf."""
    v = np.asarray(v, dtype=np.float64)
    low, high = _bf16_floor(v), _bf16_ceil(v)
    below, above = v - low, high - v
    take_high = (above < below) | ((above == below) & ties_up)
    return np.where(take_high, high, low)


def _f32_outward(v: np.ndarray, up: bool) -> np.ndarray:
    """v rounded to f32 toward +inf (`up`) or -inf."""
    v = np.asarray(v, dtype=np.float64)
    f = v.astype(np.float32)
    wide = f.astype(np.float64)
    if up:
        return np.where(wide < v, np.nextafter(f, np.float32(np.inf)), f).astype(np.float64)
    return np.where(wide > v, np.nextafter(f, np.float32(-np.inf)), f).astype(np.float64)


def bf16_accepted(total: np.ndarray, within: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[rn_down(S - A), rn_up(S + A)]: every bf16 value a correct rounding of a value within A of
    S reaches, under either tie rule (the ends are taken outward in float64, one ulp of 2**-52)."""
    total, within = np.asarray(total, dtype=np.float64), np.asarray(within, dtype=np.float64)
    low = np.nextafter(total - within, -np.inf)
    high = np.nextafter(total + within, np.inf)
    return bf16_nearest(low, ties_up=False), bf16_nearest(high, ties_up=True)


def bf16_accepted_separate_bias(bias_free: np.ndarray, within: np.ndarray, bias) -> tuple[np.ndarray, np.ndarray]:
    """y = bf16(r + b), r a correct bf16 rounding of a value within A of S0 (`bias_free`): the
    first rounding's interval shifted by b, each end rounded outward to f32, then to bf16."""
    first_low, first_high = bf16_accepted(bias_free, within)
    bias = np.asarray(bias, dtype=np.float64)
    return (bf16_nearest(_f32_outward(first_low + bias, up=False), ties_up=False),
            bf16_nearest(_f32_outward(first_high + bias, up=True), ties_up=True))


def interval_tolerance(reference: np.ndarray, low: np.ndarray, high: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """The tolerance around `reference` on the side `actual` lies, for a bf16 `actual`: the
    distance to halfway between the interval's end and the next bf16 number beyond it.
    |actual - S| <= it exactly when low <= actual <= high (no bf16 number lies in the half steps
    added), and error / tolerance says how near the edge a passing value is."""
    reference, actual = np.asarray(reference, dtype=np.float64), np.asarray(actual, dtype=np.float64)
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    above = _bf16_ceil(np.nextafter(high, np.inf))  # the smallest bf16 number past the interval
    below = _bf16_floor(np.nextafter(low, -np.inf))
    return np.where(actual >= reference, (high + above) / 2.0 - reference, reference - (low + below) / 2.0)


def bf16_terms(within: float) -> tuple[float, float]:
    """An atol + rtol |e| bound against the bf16-rounded reference e = bf16(S) (what a run tool
    compares with), from the largest A: |y - e| <= |y - S| + ulp_bf16(|S|) / 2 <= ulp_bf16(|S| + A)
    + A <= 2**-7 (|S| + A) + A, and |S| <= |e| (1 + 2**-8).  Looser than the sweep's check by up
    to a bf16 step."""
    step = 2.0 ** -BF16_MANTISSA_BITS
    return within * (1.0 + step), step * (1.0 + U_BF16)


def separate_bias_term(bias_free: np.ndarray, within: float) -> np.ndarray:
    """Half a bf16 step of the accumulated bias-free sum, rounded before a separate bias add
    (repro.sh's allowance for it): ulp_bf16(|S0| + A) / 2."""
    return bf16_ulp(np.abs(np.asarray(bias_free, dtype=np.float64)) + within) / 2.0


# --- the tensor test ------------------------------------------------------------------------------

def activation_range(activation: str, scale: float, zero_point: int) -> tuple[int, int]:
    """w8i8: the int8 range TFLite clamps a fused activation's output to (the docstring above)."""
    def quantize(value: float) -> int:
        q = float(np.float32(value) / np.float32(scale))  # f32 division; float64 holds it and q + 0.5 exactly
        return zero_point + int(np.copysign(np.floor(abs(q) + 0.5), q))  # std::round: half away from zero

    if activation == "none":
        return -128, 127
    return max(-128, quantize(0.0)), 127 if activation == "relu" else min(127, quantize(6.0))


def channel_error_bound(variance: np.ndarray, reference: np.ndarray, within: np.ndarray, channel_axis: int,
                        keep: np.ndarray | None = None) -> np.ndarray:
    """Per output channel, LAMBDA sqrt(sum_g m_g**2 u**2 V_g): the bound on the channel's summed
    error. Elements whose sums S lie within each other's bound A (|S_i - S_j| <= A_i + A_j, linked
    in a chain) form one group whose errors may be equal: identical windows, and windows so alike
    that their roundings repeat (an input offset far above its spread); V_g is the group's largest.
    With `keep`, only those elements count (the others' errors are not summed either)."""
    keep = np.ones(np.shape(reference), dtype=bool) if keep is None else keep
    moved = [np.moveaxis(np.asarray(a, dtype=np.float64), channel_axis, 0) for a in (variance, reference, within)]
    kept = np.moveaxis(np.broadcast_to(keep, np.shape(reference)), channel_axis, 0)
    channels = moved[0].shape[0]
    bounds = np.empty(channels)
    for o in range(channels):
        mask = kept[o].reshape(-1)
        var, ref, a = (m[o].reshape(-1)[mask] for m in moved)
        order = np.argsort(ref, kind="stable")
        ref, a, var = ref[order], a[order], var[order]
        starts = np.flatnonzero(np.concatenate([[True], np.diff(ref) > a[:-1] + a[1:]]))
        sizes = np.diff(np.append(starts, ref.size)).astype(np.float64)
        largest = np.maximum.reduceat(var, starts) if ref.size else np.zeros(0)
        bounds[o] = LAMBDA * np.sqrt(np.sum(np.square(sizes) * largest))
    return bounds


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
                zero_point: int, clamp: tuple[int, int] = (-128, 127)) -> tuple[np.ndarray, np.ndarray]:
    """The int8 outputs of TFLite's double rounding and of single rounding, each plus the output
    zero point and clamped to `clamp` ([-128, 127], narrowed by a fused activation:
    activation_range), from every output's int32 accumulator (`acc`); `multipliers` is
    s_in s_w / s_out per output channel. Exact, in integers."""
    q31, shifts = quantized_multipliers(multipliers)
    shape = [1] * np.ndim(acc)
    shape[channel_axis] = -1
    q31, shifts = q31.reshape(shape), shifts.reshape(shape)
    acc = np.asarray(acc, dtype=np.int64)

    def out(values):
        return np.clip(values + zero_point, *clamp).astype(np.int8)

    return out(tflite_requantize(acc, q31, shifts)), out(single_round_requantize(acc, q31, shifts))
