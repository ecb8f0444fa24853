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
