"""The TFLite models: TF's own SAME padding and output shapes against the geometry's
arithmetic, and every extended dimension built as the geometry says (real TensorFlow and the
TFLite interpreter against the float64 reference on the same weights)."""
import os

import numpy as np
import pytest

from helpers import ROOT

from pipeline.space.cases import Case
from pipeline.space.data import conv_weights, float_samples, input_shape
from pipeline.space.geometry import Geometry
from pipeline.checks.reference import conv_nchw, to_channels_first, to_channels_last

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.mark.parametrize("size", [7, 8, 13, 16])
@pytest.mark.parametrize("kernel, stride, dilation", [(1, 1, 1), (2, 1, 1), (3, 2, 1), (4, 3, 1), (5, 4, 1),
                                                      (2, 1, 3), (3, 1, 2), (4, 1, 2)])
def test_same_padding_matches_tf(size, kernel, stride, dilation):
    """TF's SAME: output shape and where the padding goes (values), per axis, odd totals included."""
    import tensorflow as tf

    g = Geometry(2, (size, size + 1), (kernel, kernel), (stride, stride), 2, 3, "same", (dilation, dilation)).validate()
    x, (w, b) = float_samples((1, *g.spatial, 2), 1).astype(np.float64), conv_weights(g, 2)
    want = tf.nn.convolution(x, w.transpose(2, 3, 1, 0).astype(np.float64), strides=g.stride, padding="SAME",
                             dilations=g.dilation).numpy() + b
    assert want.shape[1:3] == g.out_spatial
    got = to_channels_last(conv_nchw(to_channels_first(x), w, b, g))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


EXTENDED = [
    Geometry(2, (13, 10), (4, 3), (2, 3), 3, 5, "same"),  # asymmetric same padding, strided
    Geometry(2, (12, 11), (3, 2), (1, 1), 4, 6, "same", (2, 3)),  # dilated
    Geometry(2, (9, 10), (3, 3), (1, 2), 8, 12, groups=4),  # grouped CONV_2D
    Geometry(2, (9, 10), (3, 3), (2, 1), 6, 12, "same", groups=6),  # depthwise, multiplier 2
    Geometry(2, (8, 9), (2, 3), (1, 1), 5, 7, batch=3),  # batch
    Geometry(1, (30,), (4,), (1,), 7, 14, "same", (3,), 7, 2),  # Conv1D depthwise, dilated, batch 2
    Geometry(1, (25,), (3,), (2,), 6, 9, groups=3),  # Conv1D grouped
]


@pytest.mark.parametrize("geometry", EXTENDED, ids=lambda g: g.id)
def test_tflite_model_computes_its_geometry(geometry):
    """f32 model through the TFLite interpreter = float64 conv of the case's weights."""
    from ai_edge_litert.interpreter import Interpreter

    from pipeline.frontends.model_tflite import convert

    case = Case(geometry, "tflite", "f32")
    interpreter = Interpreter(model_content=convert(case))
    interpreter.allocate_tensors()
    x = float_samples(input_shape(case), 3)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    kernel, bias = conv_weights(geometry, case.weight_seed)
    want = to_channels_last(conv_nchw(to_channels_first(x), kernel, bias, geometry))
    assert got.shape == want.shape == (geometry.batch, *geometry.out_spatial, geometry.c_out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("geometry", EXTENDED[2:4], ids=lambda g: g.id)
def test_grouped_and_depthwise_weights_read_back_from_every_flavor(tmp_path, geometry):
    """The oracle reads the (dequantized) kernel back from the model file, as (O, I / groups, *K)."""
    from pipeline.frontends.model_tflite import convert
    from pipeline.checks.oracle import tflite_weights

    kernel, bias = conv_weights(geometry, Case(geometry, "tflite", "f32").weight_seed)
    for flavor in ("f32", "w8if32", "w8i8"):
        case = Case(geometry, "tflite", flavor)
        path = tmp_path / f"{flavor}.tflite"
        path.write_bytes(convert(case))
        weights = tflite_weights(case, path)
        assert weights.kernel.shape == kernel.shape
        step = np.abs(kernel).reshape(len(kernel), -1).max(axis=1) / 127 if flavor != "f32" else np.zeros(len(kernel))
        assert (np.abs(weights.kernel - kernel) <= step.reshape(-1, 1, 1, 1) / 2 + 1e-7).all(), flavor
        if flavor != "w8i8":  # w8i8 stores the bias as int32 on its own scale
            np.testing.assert_allclose(weights.bias, bias, atol=1e-6)


def test_the_same_case_converts_to_the_same_bytes(tmp_path):
    """A rebuilt model must not differ from the last one (its consumers would all re-run): two
    conversions in two separate processes, as two runs (or two doit workers) would make them.
    One warms up as the model helper does (Keras imported while scikit-learn reads as absent,
    which imports as usual afterwards), the other imports scikit-learn first, as a process that
    wrote region rules would have: the same bytes."""
    import subprocess
    import sys

    script = ("import sys; from pipeline.space.cases import Case; from pipeline.frontends.model_tflite import convert, "
              "warm_up; from tests_geometry import G; import pathlib\n"
              "if sys.argv[2] == 'helper':\n"
              "    warm_up()\n"
              "    assert 'sklearn' not in sys.modules and 'keras' in sys.modules\n"
              "else:\n"
              "    import sklearn\n"
              "for flavor in ('f32', 'w8if32', 'w8i8'):\n"
              "    pathlib.Path(sys.argv[1], flavor).write_bytes(convert(Case(G, 'tflite', flavor)))\n"
              "import sklearn.tree\n")
    (tmp_path / "tests_geometry.py").write_text(f"from pipeline.space.geometry import Geometry\nG = {EXTENDED[3]!r}\n")
    for run, mode in (("a", "helper"), ("b", "sklearn first")):
        (tmp_path / run).mkdir()
        subprocess.run([sys.executable, "-c", script, str(tmp_path / run), mode], check=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
                            "TF_CPP_MIN_LOG_LEVEL": "2"},
                       capture_output=True, timeout=300)
    for flavor in ("f32", "w8if32", "w8i8"):
        first, second = (tmp_path / "a" / flavor).read_bytes(), (tmp_path / "b" / flavor).read_bytes()
        assert len(first) > 0 and first == second, flavor


@pytest.mark.parametrize("geometry", [
    Geometry(2, (9, 8), (3, 3), (2, 2), 4, 6, "same", activation="relu"),
    Geometry(2, (9, 8), (3, 3), (1, 1), 5, 5, "same", groups=5, activation="relu6"),  # depthwise
    Geometry(1, (17,), (3,), (1,), 4, 1, activation="relu6"),  # one output channel: the bias in an ADD
], ids=lambda g: g.id)
def test_a_fused_activation_is_the_conv_op_s_own_and_computes_its_clamp(geometry, tmp_path):
    """The converter fuses the activation into the model (the oracle reads it back and checks its
    bias through it); the interpreter's output is act(float64 conv), in f32 and in the hybrid flavor."""
    from pipeline.checks.oracle import tflite_activation, tflite_output, tflite_weights
    from pipeline.checks.reference import activate
    from pipeline.frontends.model_tflite import build_tflite

    for flavor in ("f32", "w8if32"):
        case = Case(geometry, "tflite", flavor)
        model = tmp_path / f"{flavor}.tflite"
        build_tflite(case, model)
        assert tflite_activation(model) == geometry.activation
        weights = tflite_weights(case, model)
        kernel, bias = conv_weights(geometry, case.weight_seed)
        np.testing.assert_allclose(weights.bias, bias, rtol=1e-6, atol=1e-7)
        x = float_samples(input_shape(case), 3) * 4
        got = tflite_output(case, model, x, reference_kernels=False)
        want = activate(to_channels_last(conv_nchw(to_channels_first(x), weights.kernel, weights.bias, geometry)),
                        geometry.activation)
        assert (want == 0).any()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.slow
@pytest.mark.parametrize("case, convs", [
    (Case(EXTENDED[0], "tflite", "f32"), 1),
    (Case(EXTENDED[2], "tflite", "f32"), 4),  # grouped: one conv per group
    (Case(EXTENDED[2], "tflite", "w8i8"), 4),
    (Case(EXTENDED[2], "onnx", "f32"), 1),  # ONNX keeps the groups in one conv
    (Case(EXTENDED[3], "tflite", "f32"), 1),  # depthwise, multiplier 2
    (Case(EXTENDED[5], "tflite", "f32"), 1),  # Conv1D depthwise
    (Case(EXTENDED[6], "tflite", "f32"), 3),  # Conv1D grouped
], ids=lambda v: getattr(v, "name", v))
def test_a_case_s_convs_are_the_conv_ops_of_its_imported_mlir(case, convs, tmp_path):
    """Case.convs, by which a stage's time limit grows (pipeline/targets/cost.py), counts the
    conv ops the real importer writes: one per group for a TFLite grouped conv, one for a
    depthwise one and for an ONNX conv."""
    import re

    from pipeline.frontends.importer import import_model
    from pipeline.frontends.model_onnx import build_onnx
    from pipeline.frontends.model_tflite import build_tflite

    model = tmp_path / case.model_file
    (build_tflite if case.backend == "tflite" else build_onnx)(case, model)
    import_model(case, model, tmp_path / "model.mlir", tmp_path / "import.log")
    ops = re.findall(r"\b(tosa\.conv2d|tosa\.depthwise_conv2d|onnx\.Conv)\b", (tmp_path / "model.mlir").read_text())
    assert len(ops) == case.convs == convs, ops
