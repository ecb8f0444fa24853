"""The ONNX models: one Conv node whose explicit pads compute TF's SAME geometry, checked
with onnxruntime against torch (F.pad, then conv) on the same weights."""
import numpy as np
import pytest

from pipeline.space.cases import Case
from pipeline.space.data import conv_weights, float_samples, input_shape
from pipeline.space.geometry import Geometry

GEOMETRIES = [
    Geometry(2, (13, 10), (4, 3), (2, 3), 3, 5, "same"),  # pads (1, 2) and (1, 1): asymmetric
    Geometry(2, (16, 16), (2, 2), (1, 1), 2, 2, "same"),  # total 1 per axis: all of it after
    Geometry(2, (12, 11), (3, 2), (3, 2), 4, 6, "same", (2, 3), batch=2),  # strided and dilated
    Geometry(2, (9, 10), (3, 3), (1, 2), 8, 12, groups=4),
    Geometry(2, (9, 10), (3, 3), (2, 1), 6, 12, "same", groups=6),
    Geometry(1, (30,), (4,), (3,), 7, 14, "same", (3,), 7, 2),
    Geometry(1, (31,), (5,), (2,), 6, 9, "valid", (2,), 3, 4),
    # torch's own pads where TF SAME differs: (1, 1) at stride 2 on an even input, a ResNet stem
    Geometry(2, (12, 12), (3, 3), (2, 2), 4, 6, "explicit", explicit_pads=((1, 1), (1, 1))),
    Geometry(2, (16, 16), (7, 7), (2, 2), 3, 4, "explicit", explicit_pads=((3, 3), (3, 3))),
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: g.id)
def test_onnx_conv_pads_match_torch(geometry):
    import onnx
    import onnxruntime
    import torch
    import torch.nn.functional as F

    from pipeline.frontends.model_onnx import export_f32

    g = geometry.validate()
    case = Case(g, "onnx", "f32")
    data = export_f32(case)
    model = onnx.load_from_string(data)
    assert [n.op_type for n in model.graph.node] == ["Conv"]
    pads = next(a for a in model.graph.node[0].attribute if a.name == "pads").ints
    assert list(pads) == [p[0] for p in g.pads] + [p[1] for p in g.pads]

    x = float_samples(input_shape(case), 4)
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run(None, {"input": x})[0]
    kernel, bias = conv_weights(g, case.weight_seed)
    conv = F.conv1d if g.rank == 1 else F.conv2d
    padded = F.pad(torch.from_numpy(x), [p for pair in reversed(g.pads) for p in pair])
    want = conv(padded, torch.from_numpy(kernel), torch.from_numpy(bias), stride=g.stride, dilation=g.dilation,
                groups=g.groups).numpy()
    assert got.shape == want.shape == (g.batch, g.c_out, *g.out_spatial)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bf16_model_keeps_the_single_conv_and_its_pads():
    import onnx

    from pipeline.frontends.model_onnx import export_f32, to_bf16

    g = GEOMETRIES[2]
    model = onnx.load_from_string(to_bf16(export_f32(Case(g, "onnx", "bf16"))))
    assert [n.op_type for n in model.graph.node] == ["Conv"]
    attrs = {a.name: list(a.ints) for a in model.graph.node[0].attribute if a.ints}
    assert g.pads == ((1, 1), (1, 2))  # H: out 4, total 3*3 + 5 - 12 = 2; W: out 6, total 5*2 + 4 - 11 = 3
    assert attrs["pads"] == [1, 1, 1, 2] and attrs["dilations"] == [2, 3] and attrs["strides"] == [3, 2]


@pytest.mark.parametrize("activation, node", [("relu", "Relu"), ("relu6", "Clip")])
@pytest.mark.parametrize("flavor", ["f32", "bf16"])
def test_a_fused_activation_follows_the_conv_and_the_oracle_reads_it(activation, node, flavor, tmp_path):
    """Conv then Relu, or Clip to [0, 6] (bf16 bounds in the bf16 model), as exporters write them;
    onnxruntime's f32 output is act(float64 conv); the oracle reads the activation back."""
    import onnx
    import onnxruntime

    from pipeline.checks.oracle import onnx_weights
    from pipeline.checks.reference import activate, conv_nchw
    from pipeline.frontends.model_onnx import build_onnx

    g = Geometry(2, (9, 8), (3, 3), (2, 2), 4, 6, "same", activation=activation)
    case = Case(g, "onnx", flavor)
    path = tmp_path / "model.onnx"
    build_onnx(case, path)
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node] == ["Conv", node]
    onnx.checker.check_model(model, full_check=True)
    weights = onnx_weights(path)
    assert weights.activation == activation
    if flavor == "f32":
        x = float_samples(input_shape(case), 4) * 50  # sums past 6 too
        got = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        want = activate(conv_nchw(x, weights.kernel, weights.bias, g), activation)
        assert (want == 0).any() and (activation == "relu" or (want == 6).any())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
