import numpy as np
import pytest

from pipeline.space.geometry import Geometry, same_padding
from pipeline.checks.reference import conv_nchw


def _grid():
    """Small geometries crossing every dimension: padding, stride, dilation, groups, depthwise,
    batch, odd channel counts, Conv1D and Conv2D, square and not."""
    out = []
    for rank in (1, 2):
        for padding in ("valid", "same"):
            for stride in (1, 2, 3):
                for dilation in (1, 2, 3):
                    for c_in, c_out, groups in ((3, 5, 1), (6, 4, 2), (4, 8, 4), (5, 5, 5)):
                        for batch in (1, 3):
                            spatial = (11,) if rank == 1 else (9, 10)
                            kernel = (3,) if rank == 1 else (3, 2)
                            out.append(Geometry(rank, spatial, kernel, (stride,) * rank, c_in, c_out, padding,
                                                (dilation,) * rank, groups, batch).validate())
    return out


@pytest.mark.parametrize("geometry", [
    Geometry(2, (11, 9), (3, 2), (2, 1), 3, 4),
    Geometry(2, (10, 12), (4, 3), (1, 1), 2, 5, "same"),
    Geometry(1, (17,), (5,), (3,), 4, 2),
    Geometry(1, (16,), (4,), (1,), 3, 3, "same"),
    Geometry(2, (12, 13), (3, 4), (2, 3), 6, 9, "same", (2, 1), 3, 2),
], ids=lambda g: g.id)
def test_matches_torch_in_float64(geometry):
    _check_against_torch(geometry)


def test_matches_torch_on_a_grid_of_every_dimension():
    grid = _grid()
    assert len(grid) == 288 and len({g.id for g in grid}) == 288
    for geometry in grid:
        _check_against_torch(geometry)


def _check_against_torch(geometry):
    """torch pads symmetrically only: TF SAME's odd element goes after, by an explicit pad."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    g = geometry
    x = rng.standard_normal((g.batch, g.c_in, *g.spatial))
    w = rng.standard_normal((g.c_out, g.c_in // g.groups, *g.kernel))
    b = rng.standard_normal(g.c_out)
    conv = F.conv1d if g.rank == 1 else F.conv2d
    pad = [p for before_after in reversed(g.pads) for p in before_after]  # last axis first
    padded = F.pad(torch.from_numpy(x), pad)
    want = conv(padded, torch.from_numpy(w), torch.from_numpy(b), stride=g.stride, dilation=g.dilation,
                groups=g.groups).numpy()
    got = conv_nchw(x, w, b, g)
    assert got.shape == want.shape == (g.batch, g.c_out, *g.out_spatial), g.id
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=g.id)


def test_same_padding_puts_the_extra_element_last():
    assert same_padding(10, 4, 1) == (1, 2)
    assert same_padding(10, 3, 1) == (1, 1)


def test_round_to_bf16_rounds_once_to_nearest_even():
    """Against exact rational arithmetic, on values within 2**-17 of a bf16 tie, where a cast
    through f32 rounds twice and can land on the wrong side."""
    from fractions import Fraction

    import ml_dtypes

    from pipeline.checks.reference import round_to_bf16

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
