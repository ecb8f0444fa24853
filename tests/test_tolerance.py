import numpy as np
import pytest

from pipeline.checks import tolerance
from pipeline.space.data import BIAS_RANGE, conv_weights
from pipeline.space.geometry import Geometry

LARGEST = Geometry(2, (16, 16), (9, 9), (1, 1), 512, 8)  # the largest reduction of the sweep


def test_f32_bound_grows_like_k_not_like_the_worst_case():
    k, t, b = LARGEST.reduction, 1 / np.sqrt(LARGEST.reduction), BIAS_RANGE
    tol = tolerance.f32_accumulation(k, t, b)
    worst_case = k * tolerance.U_F32 * k * t  # gamma_K * sum |w x|
    assert tol < worst_case / 100
    assert tolerance.f32_accumulation(4 * k, t, b) < 4.5 * tol


def test_one_flipped_weight_exceeds_the_f32_bound_at_the_largest_reduction():
    kernel, bias = conv_weights(LARGEST, 0)
    t = float(np.abs(kernel).max())  # inputs are at most 1 in magnitude
    tol = tolerance.f32_tolerance(np.array(1.0), LARGEST.reduction, t, float(np.abs(bias).max()))
    median_weight = float(np.median(np.abs(kernel)))
    # flipping w changes every output it touches by 2 |w x|; inputs reach |x| ~ 1
    assert 2 * median_weight * 0.9 > 10 * float(tol)


def test_bf16_ulp():
    assert tolerance.bf16_ulp(np.array([1.0, 1.5, 0.25, -3.0])).tolist() == [2 ** -7, 2 ** -7, 2 ** -9, 2 ** -6]


def _bf16_neighbours(value: float) -> tuple[float, float]:
    """The bf16 values just below and above `value` (float64)."""
    step = float(tolerance.bf16_ulp(np.array(value))[()])
    low = np.floor(value / step) * step
    return low, low + step


def test_the_bf16_bound_passes_an_exact_tie_at_one_and_fails_a_step_beyond():
    """Against the unrounded sum S, with no accumulation error (t = b = 0: A = 0), an output
    exactly half a step from S (a tie) is at error/tolerance 1.000 and passes; the next bf16
    value, a step and a half away, fails."""
    from pipeline.checks.compare import compare

    low, high = _bf16_neighbours(0.75)
    s = np.array([(low + high) / 2])  # a tie between two bf16 values
    tol = tolerance.bf16_tolerance(s, 64, 0.0, 0.0)
    assert tol[0] == (high - low) / 2
    tie = compare("vs S", s, np.array([high]), tol)
    assert tie.passed and tie.error_to_tolerance == 1.0
    beyond = compare("vs S", s, np.array([high + (high - low)]), tol)
    assert not beyond.passed and beyond.error_to_tolerance == 3.0


def test_the_bf16_bound_holds_where_the_accumulated_value_crosses_into_the_next_binade():
    """K = 4,608, a sum cancelled to 2**-30 and an accumulation error of 0.9992 A: the value the
    module rounds lies in a binade far above S's. Its half step is allowed (ulp at |S| + A); half
    a step at |S| alone would call the worst rounding of that value a failure."""
    k, t, b = 4608, 0.02, 0.0
    a = tolerance.f32_accumulation(k, t, b, implementations=1)
    s = 2.0 ** -30
    accumulated = s + 0.9992 * a
    low, high = _bf16_neighbours(accumulated)
    for y in (low, high):  # either rounding of the accumulated value
        error = abs(y - s)
        assert error <= tolerance.bf16_tolerance(np.array([s]), k, t, b)[0]
    naive = tolerance.bf16_ulp(np.array(s))[()] / 2 + a
    assert max(abs(low - s), abs(high - s)) > naive  # the bound without the binade fix fails it


def test_the_bf16_bound_is_half_as_wide_as_one_step_in_its_dominant_term():
    s = np.array([0.75])
    tol = tolerance.bf16_tolerance(s, 64, 0.1, 0.5)
    a = tolerance.f32_accumulation(64, 0.1, 0.5, implementations=1)
    assert tol[0] == pytest.approx(2 ** -8 / 2 + a)  # 0.75 + A stays in [0.5, 1): step 2**-8


def test_f32_bound_with_drift_holds_for_non_negative_data_and_still_sees_a_flipped_weight():
    """x ~ U(0, 1), w ~ U(0, a), K = 4,608, summed in f32 one product after another: every output
    within the bound with its drift term (no false alarm), many outside it without (the zero-mean
    bound is not sound here); one flipped weight still exceeds the bound."""
    from pipeline.checks.oracle import drift, rms_product

    rng = np.random.default_rng(7)
    k, outputs, a = 4608, 400, 1 / np.sqrt(4608)
    w = rng.uniform(0, a, (1, k)).astype(np.float32)
    x = rng.uniform(0, 1, (outputs, k)).astype(np.float32)
    products = (x * w).astype(np.float32)
    sequential = np.cumsum(products, axis=1, dtype=np.float32)[:, -1].astype(np.float64)  # f32, in order
    exact = (x.astype(np.float64) * w.astype(np.float64)).sum(axis=1)
    r, mu = rms_product(w, x), drift(w, x)
    assert mu > 0 and r < float(np.abs(w).max()) * float(x.max())
    error = np.abs(sequential - exact)
    with_drift = tolerance.f32_tolerance(exact, k, r, 0.0, implementations=1, mu=mu)
    without = tolerance.f32_tolerance(exact, k, r, 0.0, implementations=1)
    assert (error <= with_drift).all()
    assert (error > without).mean() > 0.25  # about half of them
    flipped = 2 * float(np.median(w)) * 0.5  # one median weight's sign flipped, a typical input
    assert flipped > 10 * with_drift.max()


def test_zero_mean_data_gets_no_drift_term():
    assert tolerance.f32_accumulation(4608, 0.05, 0.5, mu=0.0) == tolerance.f32_accumulation(4608, 0.05, 0.5)
    assert tolerance.drift_term(4608, 0.5, 0.0) == 4608 * 0.25


def test_quantize_multiplier_rounds_a_tie_away_from_zero():
    """TFLite's QuantizeMultiplier rounds m 2**31 half away from zero; numpy's round would take
    the even neighbour."""
    mantissa = (2 ** 30 + 0.5) / 2 ** 31  # m 2**31 = 2**30 + 0.5: a tie, its lower neighbour even
    q31, shifts = tolerance.quantized_multipliers(np.array([mantissa]))
    assert int(q31[0]) == 2 ** 30 + 1 and int(shifts[0]) == 31


def test_a_geometry_whose_int8_accumulator_could_overflow_is_refused_for_w8i8_only():
    from pipeline.space.refusal import refusal

    fits = Geometry(2, (4, 4), (1, 1), (1, 1), 66_311, 1)  # K 255 127 = 2,147,482,935 < 2**31
    overflows = Geometry(2, (4, 4), (1, 1), (1, 1), 66_312, 1)
    assert refusal(fits, "tflite", "w8i8") is None
    reason = refusal(overflows, "tflite", "w8i8")
    assert "int32 accumulator could overflow" in reason and "66,311" in reason
    assert refusal(overflows, "tflite", "f32") is None and refusal(overflows, "onnx", "f32") is None


def test_hybrid_bound_is_half_an_activation_step_per_weight():
    kernel = np.full((2, 3, 4), 0.01)
    kernel[1] *= 2
    tol = tolerance.hybrid_tolerance(np.zeros((1, 5, 2)), kernel, 1.27, 12, 0.01, 0.0, channel_axis=-1)
    step = 1.27 / 127
    assert np.allclose(tol[0, 0], [step / 2 * 0.12, step / 2 * 0.24], rtol=1e-3)


def test_atol_rtol_forms_match_the_per_element_tolerances():
    e = np.array([-3.0, -0.4, 0.0, 0.02, 1.7])
    atol, rtol = tolerance.f32_terms(300, 0.05, 0.5, implementations=2)
    assert np.allclose(atol + rtol * np.abs(e), tolerance.f32_tolerance(e, 300, 0.05, 0.5))
    atol, rtol = tolerance.bf16_terms(300, 0.05, 0.5)
    exact = tolerance.bf16_tolerance(e, 300, 0.05, 0.5)
    # against the rounded reference, the run tool's form allows up to a step more than the bound against S
    assert np.all(atol + rtol * np.abs(e) >= exact - 1e-300)
    assert np.all(atol + rtol * np.abs(e) <= 4 * exact)


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
    assert tolerance.separate_bias_term(np.array([1.0, 0.3]), 64, 0.0, 0.0)[0] == 2 ** -8
    assert tolerance.separate_bias_term(np.array([1.0, 0.3]), 64, 0.0, 0.0)[1] == 2 ** -10
    # at the top of a binade, with the accumulation error: the step of the binade above
    assert tolerance.separate_bias_term(np.array([1.0 - 2 ** -20]), 64, 1.0, 0.0)[0] == 2 ** -8


def test_converted_bound_covers_bf16_rounding_of_the_operands():
    """An f32 conv computed from bf16-rounded operands stays within the conversion bound of the
    exact conv, at every reduction size of the sweep."""
    import ml_dtypes

    from pipeline.checks.reference import conv_nchw

    for geometry in (Geometry(2, (10, 10), (3, 3), (1, 1), 4, 4), Geometry(2, (12, 12), (5, 5), (1, 1), 256, 2)):
        kernel, bias = conv_weights(geometry, 3)
        x = np.random.default_rng(3).uniform(-1, 1, (1, geometry.c_in, *geometry.spatial))
        exact = conv_nchw(x, kernel, bias, geometry)

        def bf16(a):
            return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)

        converted = bf16(conv_nchw(bf16(x), bf16(kernel), bf16(bias), geometry))
        t = float(np.abs(kernel).max()) * float(np.abs(x).max())
        tol = tolerance.converted_tolerance(exact, geometry.reduction, t, float(np.abs(bias).max()))
        assert (np.abs(converted - exact) <= tol).all()
        assert (np.abs(converted - exact) / tol).max() > 0.01  # the bound is not vacuous
