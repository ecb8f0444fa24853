import numpy as np
import pytest

from pipeline.geometry import Geometry
from pipeline.reference import conv_nchw, same_padding


@pytest.mark.parametrize("geometry", [
    Geometry(2, (11, 9), (3, 2), (2, 1), 3, 4),
    Geometry(2, (10, 12), (4, 3), (1, 1), 2, 5, "same"),
    Geometry(1, (17,), (5,), (3,), 4, 2),
    Geometry(1, (16,), (4,), (1,), 3, 3, "same"),
])
def test_matches_torch_in_float64(geometry):
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, geometry.c_in, *geometry.spatial))
    w = rng.standard_normal((geometry.c_out, geometry.c_in, *geometry.kernel))
    b = rng.standard_normal(geometry.c_out)
    conv = torch.nn.functional.conv1d if geometry.rank == 1 else torch.nn.functional.conv2d
    want = conv(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=geometry.stride,
                padding=geometry.padding).numpy()
    got = conv_nchw(x, w, b, geometry)
    assert got.shape == want.shape == (1, geometry.c_out, *geometry.out_spatial)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_same_padding_puts_the_extra_element_last():
    assert same_padding(10, 4, 1) == (1, 2)
    assert same_padding(10, 3, 1) == (1, 1)


def test_round_to_bf16_rounds_once_to_nearest_even():
    """Against exact rational arithmetic, on values within 2**-17 of a bf16 tie, where a cast
    through f32 rounds twice and can land on the wrong side."""
    from fractions import Fraction

    import ml_dtypes

    from pipeline.reference import round_to_bf16

    rng = np.random.default_rng(1)
    base = rng.uniform(-4, 4, 3000).astype(ml_dtypes.bfloat16).astype(np.float64)
    step = 2.0 ** (np.floor(np.log2(np.abs(base))) - 7)
    values = base + step / 2 + rng.choice([-1, 1], base.size) * step * 2.0 ** -rng.integers(17, 40, base.size)
    values = np.concatenate([values, base + step / 2])  # exact ties too

    def nearest_even(v):
        b = ml_dtypes.bfloat16(np.float32(v))
        candidates = [np.nextafter(b, ml_dtypes.bfloat16(-np.inf)), b, np.nextafter(b, ml_dtypes.bfloat16(np.inf))]
        distance = [abs(Fraction(float(c)) - Fraction(v)) for c in candidates]
        best = [c for c, d in zip(candidates, distance) if d == min(distance)]
        return float(next(c for c in best if len(best) == 1 or np.array(c).view(np.uint16) % 2 == 0))

    want = np.array([nearest_even(v) for v in values])
    assert (round_to_bf16(values).astype(np.float64) == want).all()
    twice = values.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    assert (twice != want).any()  # the double rounding this avoids
