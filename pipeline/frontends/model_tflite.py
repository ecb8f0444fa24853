"""Stage 1 (TFLite): a tf.keras Conv1D/Conv2D converted to a .tflite flatbuffer per flavor.

TensorFlow is imported inside the functions: loading the task list must not pay for it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.space.cases import Case
from pipeline.space.data import calibration_samples, case_weights
from pipeline.core.tools import write_bytes


def warm_up() -> None:
    """The helper's one-off imports. Keras imports scikit-learn, where it is installed (it is:
    the region rules use it), for its optional scikit-learn wrappers, which no model here uses
    and which cost a good part of the import (docs/measurements.md, 2026-12-07). While Keras is
    imported, scikit-learn reads as absent, as Keras allows; afterwards it imports as usual."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    hidden = "sklearn" not in sys.modules
    if hidden:
        sys.modules["sklearn"] = None  # `import sklearn` raises ImportError
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        if hidden and sys.modules.get("sklearn", False) is None:
            del sys.modules["sklearn"]


def _keras_model(case: Case):
    """The geometry as one Keras layer: Conv1D/Conv2D (groups=), or DepthwiseConv1D/2D where
    groups == c_in, with the case's weights and bias, and its activation as the layer's own
    (the converter fuses relu and relu6 into the conv op: its fused_activation_function)."""
    import keras

    g = case.geometry
    kernel, bias = case_weights(case)  # (O, I / groups, *K)
    # Named: Keras numbers unnamed layers per process (conv2d_7, ...), which would make the same
    # case's .tflite bytes differ from one build to the next and re-run everything downstream.
    inputs = keras.Input((*g.spatial, g.c_in), batch_size=g.batch, name="input")
    spatial_axes = tuple(range(2, 2 + g.rank))
    common = dict(strides=g.stride, padding=g.padding, dilation_rate=g.dilation,
                  activation=None if g.activation == "none" else g.activation)
    if g.depthwise:
        layer_type = keras.layers.DepthwiseConv1D if g.rank == 1 else keras.layers.DepthwiseConv2D
        layer = layer_type(g.kernel, depth_multiplier=g.depth_multiplier, name="conv", **common)
        # output channel o = c * M + m -> Keras (*K, C, M)
        weights = kernel[:, 0].reshape(g.c_in, g.depth_multiplier, *g.kernel).transpose(*spatial_axes, 0, 1)
    else:
        layer_type = keras.layers.Conv1D if g.rank == 1 else keras.layers.Conv2D
        layer = layer_type(g.c_out, g.kernel, groups=g.groups, name="conv", **common)
        weights = kernel.transpose(*spatial_axes, 1, 0)  # -> Keras (*K, I / groups, O)
    model = keras.Model(inputs, layer(inputs), name="model")
    layer.set_weights([weights, bias])
    return model


def convert(case: Case) -> bytes:
    """The .tflite flatbuffer of this case's flavor."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(_keras_model(case))
    if case.flavor in ("w8if32", "w8i8"):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if case.flavor == "w8i8":
        samples = calibration_samples(case)
        converter.representative_dataset = lambda: ([s] for s in samples)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter.convert()


def build_tflite(case: Case, out: Path) -> None:
    """Write the case's .tflite model to `out` (atomically)."""
    import contextlib
    import io

    # The converter prints a "Saved artifact at ..." banner on stdout; keep task output clean.
    with contextlib.redirect_stdout(io.StringIO()):
        data = convert(case)
    write_bytes(out, data)
