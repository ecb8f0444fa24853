import numpy as np
import pytest

from pipeline.checks.compare import compare


def _outputs(seed=0, shape=(1, 6, 5, 8)):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def test_identical_output_passes():
    e = _outputs()
    c = compare("vs oracle", e, e.copy(), 1e-6)
    assert c.passed and c.mismatches == 0 and c.max_abs_error == 0 and c.error_to_tolerance == 0


def test_perturbed_output_fails_with_metrics():
    e = _outputs()
    a = e.copy()
    a[0, 3, 2, 5] += 1e-3
    c = compare("vs oracle", e, a, 1e-5)
    assert not c.passed
    assert c.mismatches == 1 and c.elements == e.size
    assert c.worst_index == [0, 3, 2, 5]
    assert c.max_abs_error == pytest.approx(1e-3, rel=1e-3)
    assert c.max_rel_error == pytest.approx(1e-3 / abs(float(e[0, 3, 2, 5])), rel=1e-2)
    assert c.error_to_tolerance == pytest.approx(100, rel=1e-2)
    assert "1 of 240 elements outside tolerance" in c.reason and "max abs error" in c.reason


def test_error_just_inside_and_outside_the_tolerance():
    e = np.zeros((4,), np.float32)
    assert compare("x", e, np.full(4, 0.5, np.float32), 0.5).passed
    assert not compare("x", e, np.full(4, 0.5001, np.float32), 0.5).passed


def test_per_element_tolerance_broadcasts():
    e = np.zeros((1, 2, 3), np.float32)
    a = np.full_like(e, 0.1)
    assert compare("x", e, a, np.array([0.2, 0.2, 0.2])).passed
    assert compare("x", e, a, np.array([0.2, 0.05, 0.2])).mismatches == 2


def test_nan_and_inf_never_pass():
    e = _outputs()
    for bad in (np.nan, np.inf):
        a = e.copy()
        a[0, 0, 0, 0] = bad
        assert not compare("x", e, a, 1e30).passed


def test_shape_and_dtype_are_checked_first():
    e = _outputs()
    assert "shape" in compare("x", e, e[:, :3], 1.0).reason
    assert "dtype" in compare("x", e, e.astype(np.float64), 1.0).reason


def test_int8_histogram_of_lsb_differences():
    e = np.array([[-128, 0, 5, 127, 3]], np.int8)
    a = np.array([[-127, 0, 4, 127, 3]], np.int8)
    c = compare("bit-exact", e, a, 0.0)
    assert not c.passed and c.mismatches == 2
    assert c.lsb_histogram == {"-1": 1, "0": 3, "1": 1}
    assert "LSB differences" in c.reason


@pytest.mark.parametrize("actual, shape", [
    (lambda e: np.where(np.arange(e.size).reshape(e.shape) == 7, np.nan, e).astype(np.float32), "non-finite output"),
    (lambda e: np.zeros_like(e), "all-zero output"),
    (lambda e: np.full_like(e, 0.25), "constant output"),
    (lambda e: (e + 1).astype(np.float32), "every element"),
    (lambda e: np.where(np.arange(e.size).reshape(e.shape) < 3, e + 1, e).astype(np.float32), "some elements"),
])
def test_a_failure_names_its_shape_the_worst_that_applies(actual, shape):
    e = _outputs()
    c = compare("vs oracle", e, actual(e), 1e-3)
    assert not c.passed and f"elements outside tolerance ({shape}); " in c.reason


def test_a_failed_int8_check_names_its_shape_too():
    e = np.arange(-5, 5, dtype=np.int8)
    assert "(constant output)" in compare("vs x", e, np.full_like(e, 127), 0).reason
    assert "(some elements)" in compare("vs x", e, np.where(e == 0, 1, e).astype(np.int8), 0).reason
