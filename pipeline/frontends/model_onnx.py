"""Stage 1 (ONNX): a torch Conv1d/Conv2d exported to ONNX; bf16 is the same graph with
bf16 weights and I/O.

torch is imported inside the functions: loading the task list must not pay for it.
"""
from __future__ import annotations

import warnings
from pathlib import Path

from pipeline.space.cases import Case
from pipeline.space.data import case_weights, input_shape
from pipeline.core.tools import write_bytes

F32_OPSET = 17
BF16_OPSET = 22  # ONNX Conv accepts bfloat16 from opset 22 on


def warm_up() -> None:
    """The helper's one-off imports."""
    import onnx  # noqa: F401
    import torch  # noqa: F401


def export_f32(case: Case) -> bytes:
    """The f32 ONNX model: one Conv node (TorchScript exporter, no external data).

    torch pads symmetrically only (and its padding='same' refuses stride > 1), so the module
    is exported unpadded and the node then gets the geometry's explicit pads, TF SAME's odd
    element after: exactly the convolution the TFLite case computes.
    """
    import io

    import torch

    g = case.geometry
    kernel, bias = case_weights(case)
    conv_type = torch.nn.Conv1d if g.rank == 1 else torch.nn.Conv2d
    module = conv_type(g.c_in, g.c_out, g.kernel, stride=g.stride, padding=0, dilation=g.dilation,
                       groups=g.groups, bias=True)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(kernel))
        module.bias.copy_(torch.from_numpy(bias))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.zeros(input_shape(case)),), buffer, dynamo=False,
                          opset_version=F32_OPSET, input_names=["input"], output_names=["output"])
    return set_pads(buffer.getvalue(), g)


def _activation(model, activation: str) -> None:
    """Append the geometry's activation after the Conv node, as exporters write a torch ReLU and
    ReLU6: Relu, or Clip with min 0 and max 6 as initializers (which to_bf16 rounds with the
    weights: both are exact in bf16)."""
    import onnx
    from onnx import numpy_helper
    import numpy as np

    if activation == "none":
        return
    conv, output = model.graph.node[0], model.graph.output[0].name
    conv.output[0] = "conv_output"
    if activation == "relu":
        node = onnx.helper.make_node("Relu", ["conv_output"], [output], name="activation")
    else:
        model.graph.initializer.extend([numpy_helper.from_array(np.array(v, np.float32), name)
                                        for name, v in (("clip_min", 0.0), ("clip_max", 6.0))])
        node = onnx.helper.make_node("Clip", ["conv_output", "clip_min", "clip_max"], [output], name="activation")
    model.graph.node.append(node)


def set_pads(data: bytes, geometry) -> bytes:
    """Give the model's single Conv node the geometry's pads ([begin..., end...] in ONNX), its
    activation after it, and its output the shape they make; checked by onnx's checker and
    shape inference."""
    import onnx

    model = onnx.load_from_string(data)
    nodes = [node.op_type for node in model.graph.node]
    if nodes != ["Conv"]:
        raise ValueError(f"the exported graph is {nodes}, not one Conv node")
    pads = [before for before, _ in geometry.pads] + [after for _, after in geometry.pads]
    conv = model.graph.node[0]
    kept = [a for a in conv.attribute if a.name != "pads"]
    del conv.attribute[:]
    conv.attribute.extend([*kept, onnx.helper.make_attribute("pads", pads)])
    _activation(model, geometry.activation)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    for dim, size in zip(dims, (geometry.batch, geometry.c_out, *geometry.out_spatial)):
        dim.Clear()
        dim.dim_value = size
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def to_bf16(data: bytes) -> bytes:
    """Rewrite an f32 Conv model to bf16 initializers and I/O (round to nearest even), opset 22."""
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(data)
    for i, init in enumerate(model.graph.initializer):
        value = numpy_helper.to_array(init).astype(np.float32).astype(ml_dtypes.bfloat16)
        bf16 = onnx.helper.make_tensor(init.name, onnx.TensorProto.BFLOAT16, value.shape,
                                       value.view(np.uint16).tobytes(), raw=True)
        model.graph.initializer[i].CopyFrom(bf16)
    for value_info in (*model.graph.input, *model.graph.output):
        value_info.type.tensor_type.elem_type = onnx.TensorProto.BFLOAT16
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = BF16_OPSET
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def build_onnx(case: Case, out: Path) -> None:
    """Write the case's .onnx model to `out` (atomically)."""
    data = export_f32(case)
    if case.flavor == "bf16":
        data = to_bf16(data)
    write_bytes(out, data)
