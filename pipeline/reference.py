"""A float64 convolution in numpy: the exact reference the tolerances are measured against."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .geometry import Geometry

CHUNK_BYTES = 64 << 20  # bound on the im2col buffer of one block of output rows


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF/torch 'same': total padding split with the extra element at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv_nchw(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, geometry: Geometry) -> np.ndarray:
    """Conv of x (1, C, *spatial) with kernel (O, C, *K) plus bias, in float64, NCHW/NCW out."""
    g = geometry
    x = np.asarray(x, dtype=np.float64)[0]
    w = np.asarray(kernel, dtype=np.float64)
    if g.rank == 1:
        x, w = x[:, None, :], w[:, :, None, :]
    kh, kw = w.shape[2:]
    sh, sw = g.shw
    if g.padding == "same":
        pads = [same_padding(n, k, s) for n, k, s in zip(x.shape[1:], (kh, kw), (sh, sw))]
        x = np.pad(x, [(0, 0), *pads])
    windows = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::sh, ::sw]  # (C, OH, OW, KH, KW)
    oh, ow = windows.shape[1:3]
    flat_w = w.transpose(1, 2, 3, 0).reshape(-1, w.shape[0])  # (C*KH*KW, O)
    out = np.empty((oh, ow, w.shape[0]))
    rows = max(1, CHUNK_BYTES // max(1, ow * flat_w.shape[0] * 8))
    for start in range(0, oh, rows):
        block = windows[:, start:start + rows].transpose(1, 2, 0, 3, 4).reshape(-1, flat_w.shape[0])
        out[start:start + rows] = (block @ flat_w).reshape(-1, ow, w.shape[0])
    out += np.asarray(bias, dtype=np.float64)
    out = out.transpose(2, 0, 1)[None]
    return out[:, :, 0, :] if g.rank == 1 else out


def to_channels_first(x: np.ndarray) -> np.ndarray:
    """(1, *spatial, C) -> (1, C, *spatial)."""
    return np.moveaxis(x, -1, 1)


def to_channels_last(x: np.ndarray) -> np.ndarray:
    """(1, C, *spatial) -> (1, *spatial, C)."""
    return np.moveaxis(x, 1, -1)


def round_to_bf16(values: np.ndarray):
    """float64 -> bf16, rounded once to nearest even (casting through f32 would round twice).

    The f32 step rounds to odd (truncate toward zero, then set the last bit if inexact), which
    keeps the information a second rounding needs: f32 has 16 bits more than bf16.
    """
    import ml_dtypes

    v = np.asarray(values, dtype=np.float64)
    f = v.astype(np.float32)
    wide = f.astype(np.float64)
    toward_zero = np.where(np.abs(wide) > np.abs(v), np.nextafter(f, np.float32(0)), f).astype(np.float32)
    inexact = (toward_zero.astype(np.float64) != v) & np.isfinite(v)
    odd = (toward_zero.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)
    return odd.astype(ml_dtypes.bfloat16)
