"""A .tflite file's operators, read from its flatbuffer with LiteRT's own schema (the
interpreter has no public op list): the oracle finds the conv's tensors with it, and `doit
extract` the model's convs. Without TensorFlow.
"""
from __future__ import annotations

from pathlib import Path


def tflite_ops(model: Path) -> tuple[object, list[tuple[str, object]]]:
    """The parsed flatbuffer's main subgraph and its operators, in order, each with its builtin
    op name (LiteRT's own schema: the interpreter has no public op list)."""
    from ai_edge_litert import schema_py_generated as schema

    flat = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(Path(model).read_bytes(), 0))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    graph = flat.subgraphs[0]
    ops = []
    for op in graph.operators:
        code = flat.operatorCodes[op.opcodeIndex]
        # a builtin code past 127 is in builtinCode; older files keep it in deprecatedBuiltinCode
        ops.append((names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "CUSTOM"), op))
    return graph, ops


def input_quantization(model: Path) -> tuple[float, int]:
    """A .tflite model's input (scale, zero point)."""
    graph, _ = tflite_ops(model)
    q = graph.tensors[graph.inputs[0]].quantization
    return float(q.scale[0]), int(q.zeroPoint[0])


def dequantized(interpreter, detail):
    """A tensor's values as the model computes with them, float64: an int8 or int32 one with
    quantization parameters dequantized per its quantized dimension ((q - zp) x scale, exact in
    float64). Used by the oracle and by `doit extract --weights`."""
    import numpy as np

    value = interpreter.get_tensor(detail["index"]).astype(np.float64)
    qp = detail["quantization_parameters"]
    if detail["dtype"] in (np.int8, np.int32) and len(qp["scales"]):
        shape = [1] * value.ndim
        shape[qp["quantized_dimension"]] = -1
        scales = np.asarray(qp["scales"], dtype=np.float64).reshape(shape)
        value = (value - np.asarray(qp["zero_points"], dtype=np.float64).reshape(shape)) * scales
    return value
