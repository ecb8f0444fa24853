import numpy as np
import pytest

from pipeline.checks import tolerance
from pipeline.space.data import BIAS_RANGE, conv_weights
from pipeline.space.geometry import Geometry

LARGEST = Geometry(2, (16, 16), (9, 9), (1, 1), 512, 8)  # the largest reduction of the sweep


def test_lambda_gives_at_most_1e9_per_element():
    """Azuma-Hoeffding: P(|E| > LAMBDA u sqrt(V)) <= 2 exp(-LAMBDA**2 / 2)."""
    assert tolerance.FALSE_ALARM <= 1e-9
    assert 2 * np.exp(-(tolerance.LAMBDA - 0.01) ** 2 / 2) > 1e-9  # and no larger than needed


def test_q_bounds_every_partial_sum_in_any_order_and_bracketing():
    rng = np.random.default_rng(3)
    for _ in range(200):
        k = int(rng.integers(1, 60))
        p = rng.normal(rng.normal(), 1.0, k) * rng.choice([1.0, 1e-3], k)
        bias = float(rng.normal() * 3)
        q = tolerance.partial_sum_bound(np.array(p.sum() + bias), np.array(np.abs(p).sum()), bias)
        terms = np.append(p, bias)
        for _ in range(5):  # prefix sums of random orders, and every subset sum a tree can form
            order = rng.permutation(terms)
            assert np.abs(np.cumsum(order)).max() <= q * (1 + 1e-12)
            subset = order[rng.random(order.size) < 0.5]
            assert abs(subset.sum()) <= q * (1 + 1e-12)


def test_q_is_the_element_own_window_and_channel():
    """Q follows each element's own products: a window of small inputs gets a small bound."""
    q = tolerance.partial_sum_bound(np.array([2.0, 0.02]), np.array([10.0, 0.1]), 0.0)
    assert q.tolist() == pytest.approx([6.0, 0.06])  # the positive products' sum, (10 + 2) / 2
    # a negative bias adds to the negative side: P- = 4, plus 3
    assert float(tolerance.partial_sum_bound(np.array(-1.0), np.array(10.0), -3.0)) == pytest.approx(7.0)


def test_accumulation_bound_formula_and_units():
    q = np.array([2.0])
    a = tolerance.accumulation_bound(4608, q)
    assert a[0] == pytest.approx(tolerance.LAMBDA * 2 ** -24 * np.sqrt(4608 + 4) * 2.0)
    assert tolerance.accumulation_bound(4608, q, factors=2)[0] == pytest.approx(a[0] * np.sqrt(4616 / 4612))
    # a bf16 running sum, rounded after every 16 terms: the worst case of its 288 roundings
    growth = (1 + 2 ** -8) ** 288
    assert tolerance.bf16_accumulation_bound(4608, q, 16)[0] == pytest.approx((growth - 1) * 2.0 + growth * a[0])


@pytest.mark.parametrize("kind", ["random", "sorted", "plus-minus", "offset-100"])
def test_f32_accumulation_stays_within_the_bound_in_order_and_pairwise(kind):
    """Structured data the old bound failed on: within A, summed in order and pairwise, K = 576
    (the false-alarm rate at scale: pipeline/dev/falsealarm.py)."""
    rng = np.random.default_rng(11)
    k, n = 576, 2000
    w = {"random": rng.uniform(-1, 1, k), "sorted": np.sort(rng.uniform(-1, 1, k)),
         "plus-minus": np.repeat([1.0, -1.0], k // 2), "offset-100": rng.uniform(-1, 1, k)}[kind].astype(np.float32)
    x = {"random": rng.uniform(-1, 1, (n, k)), "sorted": rng.uniform(0, 1, (n, k)),
         "plus-minus": 1 + rng.uniform(-1 / 16, 1 / 16, (n, k)),
         "offset-100": 100 + rng.uniform(-0.01, 0.01, (n, k))}[kind].astype(np.float32)
    products = x * w
    exact = (x.astype(np.float64) * w.astype(np.float64)).sum(axis=1)
    a = tolerance.accumulation_bound(k, tolerance.partial_sum_bound(exact, np.abs(products.astype(np.float64)).sum(axis=1), 0.0))
    in_order = np.cumsum(products, axis=1, dtype=np.float32)[:, -1].astype(np.float64)
    pairwise = np.add.reduce(products, axis=1, dtype=np.float32).astype(np.float64)
    for y in (in_order, pairwise):
        assert (np.abs(y - exact) <= a).all()
    assert (np.abs(in_order - exact) / a).max() > 1e-3  # not vacuous


def test_bf16_ulp():
    assert tolerance.bf16_ulp(np.array([1.0, 1.5, 0.25, -3.0])).tolist() == [2 ** -7, 2 ** -7, 2 ** -9, 2 ** -6]
    # just below a power of two, where np.log2 rounds up to it
    assert tolerance.bf16_ulp(np.array([np.nextafter(16.0, 0.0)])).tolist() == [2 ** -4]


def _bf16_values(low: float, high: float) -> list[float]:
    """Every bf16 number in [low, high]."""
    out, x = [], float(tolerance.bf16_nearest(np.array(low), ties_up=True))
    x = x if x >= low else float(tolerance._bf16_ceil(np.nextafter(np.array(x), np.inf)))
    while x <= high:
        out.append(x)
        x = float(tolerance._bf16_ceil(np.nextafter(np.array(x), np.inf)))
    return out


def test_bf16_accepts_exactly_the_values_a_correct_rounding_reaches():
    """[rn_down(S - A), rn_up(S + A)] equals the set of round-to-nearest images of [S - A, S + A]
    (sampled densely, both tie rules), near powers of two too; and the tolerance form admits
    exactly those bf16 values."""
    from pipeline.checks.reference import round_to_bf16

    rng = np.random.default_rng(5)
    for i in range(600):
        s = float(2.0 ** rng.integers(-6, 6) * (1 + rng.uniform(-1, 1) * 2 ** -8) * rng.choice([-1, 1])) if i % 2 \
            else float(rng.normal() * 2.0 ** rng.integers(-8, 8))
        a = abs(s) * 2.0 ** float(rng.integers(-14, -6)) * float(rng.uniform())
        low, high = (float(v) for v in tolerance.bf16_accepted(np.array(s), np.array(a)))
        reached = set(round_to_bf16(np.linspace(s - a, s + a, 3001)).astype(np.float64).tolist())
        accepted = set(_bf16_values(low, high))
        assert reached == accepted
        below = float(tolerance._bf16_floor(np.nextafter(np.array(low), -np.inf)))
        above = float(tolerance._bf16_ceil(np.nextafter(np.array(high), np.inf)))
        for y in [below, *sorted(accepted), above]:
            tol = float(tolerance.interval_tolerance(np.array(s), low, high, np.array(y)))
            assert (abs(y - s) <= tol) is (low <= y <= high)


def test_bf16_rejects_the_neighbour_no_rounding_reaches_near_a_power_of_two():
    """S = 1 + 2**-12, A = 2**-10: every value within A rounds to 1.0; half a step at |S| + A
    (the bound before) also admitted 0.99609375."""
    low, high = tolerance.bf16_accepted(np.array(1 + 2 ** -12), np.array(2 ** -10))
    assert float(low) == float(high) == 1.0
    tol = tolerance.interval_tolerance(np.array(1 + 2 ** -12), low, high, np.array(0.99609375))
    assert abs(0.99609375 - (1 + 2 ** -12)) > float(tol)


def test_bf16_tie_accepted_either_way():
    s = np.array(1 + 2 ** -8)  # halfway between 1 and 1 + 2**-7
    low, high = tolerance.bf16_accepted(s, np.array(0.0))
    assert (float(low), float(high)) == (1.0, 1 + 2 ** -7)


def test_separate_bias_interval_holds_every_two_step_rounding():
    """y = bf16(bf16(S0') + b) for S0' within A of S0, each rounding to nearest (either tie rule,
    the second also through f32): every such y inside the interval, nothing beyond its ends."""
    from pipeline.checks.reference import round_to_bf16

    rng = np.random.default_rng(9)
    for _ in range(300):
        s0, b = float(rng.normal() * 4), float(np.float32(round_to_bf16(np.array(rng.normal() * 4)).astype(np.float64)))
        a = abs(s0) * 2 ** -12 * float(rng.uniform())
        low, high = (float(v) for v in tolerance.bf16_accepted_separate_bias(np.array(s0), np.array(a), b))
        first = round_to_bf16(np.linspace(s0 - a, s0 + a, 401)).astype(np.float64)
        direct = round_to_bf16(first + b).astype(np.float64)
        through_f32 = round_to_bf16((first + b).astype(np.float32).astype(np.float64)).astype(np.float64)
        for y in np.concatenate([direct, through_f32]):
            assert low <= y <= high
        assert low >= float(round_to_bf16(np.array(first.min() + b))) - 2 * float(tolerance.bf16_ulp(np.array(low)))


def test_repro_form_covers_the_interval():
    """repro.sh compares with bf16(S) as atol + rtol |e|: every accepted value passes it."""
    from pipeline.checks.reference import round_to_bf16

    rng = np.random.default_rng(2)
    s = rng.normal(0, 3, 400)
    a = np.abs(s) * 2 ** -10 * rng.uniform(size=400)
    low, high = tolerance.bf16_accepted(s, a)
    atol, rtol = tolerance.bf16_terms(float(a.max()))
    e = round_to_bf16(s).astype(np.float64)
    for y in (low, high):
        assert (np.abs(y - e) <= atol + rtol * np.abs(e)).all()


def test_channel_bound_groups_sums_within_each_others_bound():
    """Elements whose sums lie within each other's bound may share their error: a group of m
    counts m**2 V (identical windows, and near-identical ones: an offset far above its spread)."""
    variance, within = np.full((1, 2, 4), 1.0), np.full((1, 2, 4), 0.1)
    apart = np.arange(8.0).reshape(1, 2, 4)
    close = 5.0 + np.arange(8.0).reshape(1, 2, 4) * 0.05  # neighbours 0.05 apart, bounds 0.1 each
    assert tolerance.channel_error_bound(variance, apart, within, 1).tolist() == pytest.approx([tolerance.LAMBDA * 2] * 2)
    assert tolerance.channel_error_bound(variance, close, within, 1).tolist() == pytest.approx([tolerance.LAMBDA * 4] * 2)
    two = np.array([[[0.0, 0.1, 5.0, 5.1], [0.0, 1.0, 2.0, 3.0]]])  # two pairs; four apart
    assert tolerance.channel_error_bound(variance, two, within, 1).tolist() == pytest.approx(
        [tolerance.LAMBDA * np.sqrt(8), tolerance.LAMBDA * 2])


def test_hybrid_bound_is_half_an_activation_step_per_weight_per_batch_element():
    kernel = np.full((2, 3, 4), 0.01)
    kernel[1] *= 2
    x = np.ones((2, 5, 3))
    x[1] *= 2.54  # the second batch element's own step
    h = tolerance.activation_quantization(kernel, x, (2, 5, 2), channel_axis=-1)
    step = 1 / 127
    assert np.allclose(h[0, 0], [step / 2 * 0.12, step / 2 * 0.24])
    assert np.allclose(h[1, 0], [2.54 * step / 2 * 0.12, 2.54 * step / 2 * 0.24])


def test_quantize_multiplier_rounds_a_tie_away_from_zero():
    """TFLite's QuantizeMultiplier rounds m 2**31 half away from zero; numpy's round would take
    the even neighbour."""
    mantissa = (2 ** 30 + 0.5) / 2 ** 31  # m 2**31 = 2**30 + 0.5: a tie, its lower neighbour even
    q31, shifts = tolerance.quantized_multipliers(np.array([mantissa]))
    assert int(q31[0]) == 2 ** 30 + 1 and int(shifts[0]) == 31


def test_a_geometry_whose_int8_accumulator_could_overflow_is_refused_for_w8i8_only():
    from pipeline.space.refusal import refusal

    fits = Geometry(2, (4, 4), (1, 1), (1, 1), 66_311, 1)  # K 255 127 = 66,311 x 32,385 = 2,147,481,735 < 2**31 - 1
    overflows = Geometry(2, (4, 4), (1, 1), (1, 1), 66_312, 1)
    assert refusal(fits, "tflite", "w8i8") is None
    reason = refusal(overflows, "tflite", "w8i8")
    assert "int32 accumulator could overflow" in reason and "66,311" in reason
    assert refusal(overflows, "tflite", "f32") is None and refusal(overflows, "onnx", "f32") is None


def _tflite_requantize(acc: int, q31: int, exponent: int) -> int:
    """TFLite's reference MultiplyByQuantizedMultiplier(acc, q31, exponent), one value at a time
    in Python integers, as its C++ reads: a left shift for a positive exponent (a multiplier >= 1),
    the saturating rounding doubling high multiply, then a rounding right shift."""
    left, right = max(exponent, 0), max(-exponent, 0)
    product = (acc * (1 << left)) * q31
    nudge = (1 << 30) if product >= 0 else 1 - (1 << 30)
    high = abs(product + nudge) >> 31
    high = high if product + nudge >= 0 else -high  # C division truncates toward zero
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if (high & mask) > threshold else 0)


def _single_round(acc: int, multipliers, c: int) -> int:
    """torq-compile's rescale as its source reads, one value at a time: every channel's 31-bit
    multiplier truncated to the smallest shift of all channels, one rounding half up."""
    q31, shifts = tolerance.quantized_multipliers(np.asarray(multipliers))
    common = int(min(shifts))
    m = int(q31[c]) >> (int(shifts[c]) - common)
    return (acc * m + (1 << (common - 1))) >> common


def test_requantization_with_a_multiplier_of_one_or_more():
    q31, shifts = tolerance.quantized_multipliers(np.array([1.5, 3.0, 0.75]))
    assert tolerance.tflite_requantize(np.array([100, 100, 100]), q31, shifts).tolist() == [150, 300, 75]
    assert tolerance.tflite_requantize(np.array([-7, -7, -7]), q31, shifts).tolist() == [-10, -21, -5]
    double, single = tolerance.requantized(np.array([[100, 100, 100]]), np.array([1.5, 3.0, 0.75]), -1, -3)
    assert double.tolist() == [[127, 127, 72]] and single.tolist() == [[127, 127, 72]]  # clamped after the zero point


def test_requantized_against_scalar_models_of_both_roundings():
    """Against scalar models in Python integers, with per-channel multipliers spanning several
    shifts (so single rounding truncates some multipliers) and one >= 1: both roundings exact,
    differing by one LSB at a few elements; then the zero point is added and the clamp applied."""
    rng = np.random.default_rng(7)
    multipliers = np.array([*rng.uniform(2.0 ** -16, 2.0 ** -9, 4), 1.25])
    acc = rng.integers(-2 ** 22, 2 ** 22, (20000, 5))
    acc[:, 4] = rng.integers(-300, 300, 20000)
    q31, shifts = tolerance.quantized_multipliers(multipliers)
    double = np.array([[_tflite_requantize(int(a), int(q31[c]), 31 - int(shifts[c])) for c, a in enumerate(row)]
                       for row in acc])
    single = np.array([[_single_round(int(a), multipliers, c) for c, a in enumerate(row)] for row in acc])
    assert (tolerance.tflite_requantize(acc, q31, shifts) == double).all()
    assert (tolerance.single_round_requantize(acc, q31, shifts) == single).all()
    assert (double != single).any() and np.abs(double - single).max() == 1
    for zp in (-128, 5, 127):
        got_double, got_single = tolerance.requantized(acc, multipliers, -1, zp)
        assert (got_double == np.clip(double + zp, -128, 127)).all()
        assert (got_single == np.clip(single + zp, -128, 127)).all()


@pytest.mark.parametrize("hw, k, s, backend, padded", [
    ((13, 13), (3, 3), (3, 3), "onnx", True), ((14, 14), (3, 3), (3, 3), "onnx", True),
    ((12, 12), (3, 3), (3, 3), "onnx", False), ((18, 18), (4, 4), (4, 4), "onnx", True),
    ((16, 16), (4, 4), (4, 4), "onnx", False), ((17, 17), (8, 8), (2, 2), "onnx", True),
    ((16, 16), (8, 8), (2, 2), "onnx", False), ((12, 13), (2, 2), (1, 2), "onnx", True),
    ((12, 12), (2, 2), (1, 2), "onnx", False), ((13, 13), (3, 3), (2, 2), "onnx", False),  # native range
    ((10, 9), (3, 3), (1, 1), "onnx", False),  # stride 1
])
def test_padded_space_to_depth_as_seen_on_the_torq_simulator(hw, k, s, backend, padded):
    """Where torq-compile 2.3.0 adds the bias in a separate bf16 step: each geometry here was
    checked element by element on its simulator (both roundings, an f32 ONNX model)."""
    assert tolerance.padded_space_to_depth(Geometry(2, hw, k, s, 4, 8), backend) is padded


def test_padded_space_to_depth_never_for_onnx_conv1d_grouped_or_dilated():
    assert not tolerance.padded_space_to_depth(Geometry(1, (100,), (3,), (3,), 4, 8), "onnx")
    assert tolerance.padded_space_to_depth(Geometry(1, (100,), (3,), (3,), 4, 8), "tflite")  # a Conv2D of height 1
    assert not tolerance.padded_space_to_depth(Geometry(2, (13, 13), (3, 3), (3, 3), 4, 8, groups=2), "onnx")
    assert not tolerance.padded_space_to_depth(Geometry(2, (13, 13), (3, 3), (3, 3), 4, 8, dilation=(2, 2)), "onnx")


def test_separate_bias_step_is_half_a_step_of_the_bias_free_sum():
    assert tolerance.separate_bias_term(np.array([1.0, 0.3]), 0.0).tolist() == [2 ** -8, 2 ** -10]
    # at the top of a binade, with the accumulation error: the step of the binade above
    assert tolerance.separate_bias_term(np.array([1.0 - 2 ** -20]), 1e-5)[0] == 2 ** -8


@pytest.mark.parametrize("activation, scale, zero_point, want", [
    ("none", 0.05, 3, (-128, 127)),
    ("relu", 0.05, -128, (-128, 127)),  # the output's range starts at 0: its own limits
    ("relu", 0.05, -20, (-20, 127)),
    ("relu6", 6.0 / 255, -128, (-128, 127)),  # calibrated to [0, 6]: 6 / s = 255, clamped at 127
    ("relu6", 0.1, 0, (0, 60)),
    ("relu6", 0.08, -5, (-5, 70)),  # 6 / 0.08 = 75.0 in f32
    ("relu6", 0.48, 0, (0, 13)),  # 12.5 rounds half away from zero
])
def test_activation_range_is_tflites_clamp(activation, scale, zero_point, want):
    """TFLite's CalculateActivationRangeQuantized: zp + round(f / s), round half away from zero,
    f / s in f32, within [-128, 127]."""
    assert tolerance.activation_range(activation, scale, zero_point) == want
