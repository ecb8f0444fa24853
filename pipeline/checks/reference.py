"""A float64 convolution in numpy: the exact reference the tolerances are measured against."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pipeline.space.geometry import Geometry

CHUNK_BYTES = 64 << 20  # bound on the im2col buffer of one block of output rows


def conv_nchw(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, geometry: Geometry) -> np.ndarray:
    """Conv of x (N, C, *spatial) with kernel (O, C / groups, *K) plus bias, in float64, NCHW/NCW
    out: the geometry's zero padding (TF SAME: the odd element after), stride, dilation and groups
    (output channel o reads input group o // (O / groups))."""
    g = geometry
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(kernel, dtype=np.float64)
    pads = g.pads
    if g.rank == 1:
        x, w, pads = x[:, :, None, :], w[:, :, None, :], ((0, 0), *pads)
    if any(p for pair in pads for p in pair):
        x = np.pad(x, [(0, 0), (0, 0), *pads])
    n, groups = x.shape[0], g.groups
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw) = g.shw, g.dhw
    window = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    # (N, C, OH, OW, KH, KW): every output's window, its taps picked out by the dilation
    windows = sliding_window_view(x, window, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    oh, ow = windows.shape[2:4]
    per_group, outs = x.shape[1] // groups, w.shape[0] // groups
    taps = per_group * kh * kw
    flat_w = w.reshape(groups, outs, taps).transpose(0, 2, 1)  # (G, C/G*KH*KW, O/G)
    out = np.empty((n, groups, oh, ow, outs))
    rows = max(1, CHUNK_BYTES // max(1, groups * ow * taps * 8))
    for b in range(n):
        for start in range(0, oh, rows):
            block = windows[b, :, start:start + rows]  # (C, R, OW, KH, KW)
            r = block.shape[1]
            block = block.reshape(groups, per_group, r, ow, kh, kw).transpose(0, 2, 3, 1, 4, 5)
            out[b, :, start:start + r] = (block.reshape(groups, r * ow, taps) @ flat_w).reshape(groups, r, ow, outs)
    out = out.transpose(0, 1, 4, 2, 3).reshape(n, groups * outs, oh, ow)
    out += np.asarray(bias, dtype=np.float64).reshape(1, -1, 1, 1)
    return out[:, :, 0, :] if g.rank == 1 else out


ACTIVATION_BOUNDS = {"none": (-np.inf, np.inf), "relu": (0.0, np.inf), "relu6": (0.0, 6.0)}


def activate(values: np.ndarray, activation: str) -> np.ndarray:
    """The fused activation (Geometry.activation) applied to float values: a clamp to
    ACTIVATION_BOUNDS. A NaN stays NaN. The clamp is monotone and moves two values no further
    apart (|clamp(a) - clamp(b)| <= |a - b|), so a bound A on a sum's error is a bound on its
    activation's error; its ends (0, 6) are exact in every float format, so it commutes with any
    monotone rounding: round(clamp(S)) = clamp(round(S)) (pipeline/checks/tolerance.py)."""
    if activation == "none":
        return np.asarray(values)
    return np.clip(values, *ACTIVATION_BOUNDS[activation])  # np.clip keeps a NaN


def clamp_inactive(reference: np.ndarray, within: np.ndarray, activation: str) -> np.ndarray:
    """Where the activation cannot touch any value within `within` of `reference` (both ends
    strictly inside its bounds): there a value that passes the element check is the sum itself."""
    low, high = ACTIVATION_BOUNDS[activation]
    reference, within = np.asarray(reference, dtype=np.float64), np.asarray(within, dtype=np.float64)
    return (reference - within > low) & (reference + within < high)


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
