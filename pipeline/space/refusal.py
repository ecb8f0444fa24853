"""What each model frontend can express: a geometry a frontend refuses gets no case in that
backend, and the reason is shown instead (`doit refused`, the run's first lines, the report).
"""
from __future__ import annotations

from pipeline.space.geometry import Geometry

# Checked with tf.keras 3.15 / TensorFlow 2.21 and torch 2.13.
STRIDED_DILATION = ("tf.keras refuses strides > 1 together with dilation_rate > 1 (Conv1D, Conv2D: ValueError); "
                    "DepthwiseConv accepts it but builds a stride-1 conv plus a STRIDED_SLICE, not one strided conv")


def refusal(geometry: Geometry, backend: str) -> str | None:
    """Why `backend`'s frontend cannot build this geometry as one convolution, or None.

    TFLite (tf.keras, TFLiteConverter): grouped Conv1D/Conv2D become one grouped CONV_2D and
    depthwise ones one DEPTHWISE_CONV_2D, in all three flavors; SAME padding is TF's own at any
    stride; batch is any size. ONNX (torch, one Conv node with explicit pads): everything here.
    """
    if backend == "tflite" and any(s > 1 for s in geometry.stride) and any(d > 1 for d in geometry.dilation):
        return STRIDED_DILATION
    return None
