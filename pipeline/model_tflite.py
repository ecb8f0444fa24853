"""Stage 1 (TFLite): a tf.keras Conv1D/Conv2D converted to a .tflite flatbuffer per flavor.

TensorFlow is imported inside the functions: loading the task list must not pay for it.
"""
from __future__ import annotations

import os
from pathlib import Path

from .cases import Case
from .data import calibration_samples, conv_weights
from .tools import write_bytes


def warm_up() -> None:
    """The helper's one-off imports."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras  # noqa: F401
    import tensorflow  # noqa: F401


def _keras_model(case: Case):
    import keras

    g = case.geometry
    kernel, bias = conv_weights(g, case.weight_seed)
    inputs = keras.Input((*g.spatial, g.c_in), batch_size=1)
    layer_type = keras.layers.Conv1D if g.rank == 1 else keras.layers.Conv2D
    layer = layer_type(g.c_out, g.kernel, strides=g.stride, padding=g.padding)
    model = keras.Model(inputs, layer(inputs))
    # (O, I, *K) -> Keras (*K, I, O)
    layer.set_weights([kernel.transpose(*range(2, 2 + g.rank), 1, 0), bias])
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
