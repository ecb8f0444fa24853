import numpy as np

from pipeline import tolerance
from pipeline.data import BIAS_RANGE, conv_weights
from pipeline.geometry import Geometry

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


def test_bf16_tolerance_allows_one_step_not_two():
    e = np.array([0.75])
    tol = tolerance.bf16_tolerance(e, 64, 0.1, 0.5)
    assert tol[0] >= 2 ** -8 and tol[0] < 2 * 2 ** -8


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
    assert np.all(atol + rtol * np.abs(e) >= exact - 1e-300)
    assert np.all(atol + rtol * np.abs(e) <= 2 * exact)
