"""The activation fused into a conv, as a model file records it: TFLite's fused activation
function, or the node after an ONNX Conv. Read by `doit extract` and by the oracle (which
checks that a case's model applies the case's activation).
"""
from __future__ import annotations

TFLITE_ACTIVATIONS = {0: "none", 1: "relu", 3: "relu6"}  # ActivationFunctionType: NONE, RELU, RELU6


def onnx_readers(graph) -> dict[str, list]:
    """An ONNX graph's tensor name -> the nodes that read it."""
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def onnx_activation(node, readers: dict, constants: dict) -> str:
    """relu or relu6 where the conv's only reader is a Relu, or a Clip to [0, 6]; else none."""
    after = readers.get(node.output[0], [])
    if len(after) != 1:
        return "none"
    nxt = after[0]
    if nxt.op_type == "Relu":
        return "relu"
    if nxt.op_type == "Clip":
        from onnx import helper

        bounds = {a.name: helper.get_attribute_value(a) for a in nxt.attribute}
        low = constants.get(nxt.input[1]) if len(nxt.input) > 1 and nxt.input[1] else bounds.get("min")
        high = constants.get(nxt.input[2]) if len(nxt.input) > 2 and nxt.input[2] else bounds.get("max")
        if low is not None and high is not None and float(low) == 0.0 and float(high) == 6.0:
            return "relu6"
    return "none"
