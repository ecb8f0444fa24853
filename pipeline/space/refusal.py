"""What each model frontend can express, and what each flavor's check can trust: a geometry
refused gets no case in that backend (or flavor), and the reason is shown instead (`doit
refused`, the run's first lines, the report).
"""
from __future__ import annotations

from pipeline.space.geometry import Geometry

# Checked with tf.keras 3.15 / TensorFlow 2.21 and torch 2.13.
STRIDED_DILATION = ("tf.keras refuses strides > 1 together with dilation_rate > 1 (Conv1D, Conv2D: ValueError); "
                    "DepthwiseConv accepts it but builds a stride-1 conv plus a STRIDED_SLICE, not one strided conv")


EXPLICIT_PADS = ("TFLite's conv ops pad VALID or TF SAME only: explicit pads take a separate PAD op before the conv "
                 "(what the converter makes of a ZeroPadding2D), not one convolution")
UNPADDED_EXPORT = ("torch exports the conv unpadded and its pads are set on the ONNX node afterwards, so the "
                   "window (kernel - 1) x dilation + 1 must fit the unpadded input")
# |x - zero point| <= 255 and symmetric int8 weights |w| <= 127 (pipeline/checks/tolerance.py)
INT8_PRODUCT_MAX, INT32_MAX = 255 * 127, 2 ** 31 - 1


def int32_overflow(geometry: Geometry) -> str | None:
    """Why a full-int8 model of this geometry could overflow its int32 accumulator, or None: the
    products alone, before any work (the check of a built model counts its bias too:
    pipeline/checks/verify.py int32_guard)."""
    worst = geometry.reduction * INT8_PRODUCT_MAX
    if worst <= INT32_MAX:
        return None
    return (f"the int32 accumulator could overflow: K = {geometry.reduction} products of up to 255 x 127 "
            f"reach {worst:,} > 2**31 - 1 (K at most {INT32_MAX // INT8_PRODUCT_MAX:,} for w8i8)")


def refusal(geometry: Geometry, backend: str, flavor: str | None = None) -> str | None:
    """Why `backend`'s frontend cannot build this geometry as one convolution (in `flavor`,
    where given: a w8i8 geometry whose int32 accumulator could overflow cannot be checked), or None.

    TFLite (tf.keras, TFLiteConverter): grouped Conv1D/Conv2D become one grouped CONV_2D and
    depthwise ones one DEPTHWISE_CONV_2D, in all three flavors; SAME padding is TF's own at any
    stride; batch is any size; explicit pads are not one TFLite conv. ONNX (torch, one Conv node
    with explicit pads): everything whose window fits the unpadded input.
    """
    if backend == "tflite" and any(s > 1 for s in geometry.stride) and any(d > 1 for d in geometry.dilation):
        return STRIDED_DILATION
    if backend == "tflite" and geometry.padding == "explicit":
        return EXPLICIT_PADS
    if backend == "onnx" and any(w > n for w, n in zip(geometry.window, geometry.spatial)):
        return UNPADDED_EXPORT
    if flavor == "w8i8":
        return int32_overflow(geometry)
    return None
