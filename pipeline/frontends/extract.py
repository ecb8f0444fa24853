"""`doit extract MODEL.tflite|MODEL.onnx`: a model's convolutions as a sweep spec file.

Each conv of the model (TFLite CONV_2D and DEPTHWISE_CONV_2D; ONNX Conv) becomes a geometry
from its input shape, kernel, stride, padding, dilation, groups and channels; identical ones
become one geometry listing every layer that uses it (`layers`). The geometry carries the
activation fused into the conv (TFLite's fused activation; an ONNX Conv whose only reader is a
Relu, or a Clip to [0, 6]); another fused activation (tanh, sign bit) is swept as the plain conv,
and its layer says which.
An op the sweep cannot express is listed in `skipped` with the reason: a transposed conv, a
3-D conv, an unknown input shape, an ONNX auto_pad other than VALID and SAME_UPPER. ONNX pads
that are not TF's SAME are the geometry's explicit pads (ONNX cases only: TFLite's conv has none).

The file is read without TensorFlow or torch: TFLite with LiteRT's flatbuffer schema, ONNX with
the onnx package and its shape inference. A TFLite Conv1D is a CONV_2D of height 1 in the file,
so it comes out as a 2-D geometry of height 1 (the same arithmetic).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from pipeline.core.errors import ConfigError
from pipeline.frontends.activations import TFLITE_ACTIVATIONS, onnx_activation, onnx_readers
from pipeline.frontends.tflite_file import dequantized, tflite_ops
from pipeline.space.data import quantize_int8
from pipeline.space.geometry import ACTIVATIONS, Geometry, same_padding

TFLITE_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")
TFLITE_OTHERS = ("TRANSPOSE_CONV", "CONV_3D", "CONV_3D_TRANSPOSE")  # convolutions the sweep does not express


def _name(tensor) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name)


def tflite_convs(model: Path) -> tuple[list[dict], list[dict]]:
    """(convs, skipped) of a .tflite file: each conv {"layer", "op", "geometry", "activation"}."""
    graph, ops = tflite_ops(model)
    convs, skipped = [], []
    for op_name, op in ops:
        if op_name in TFLITE_OTHERS:
            skipped.append({"layer": _name(graph.tensors[op.outputs[0]]), "op": op_name,
                            "reason": f"{op_name} is not a convolution the sweep builds"})
            continue
        if op_name not in TFLITE_CONVS:
            continue
        x, w = graph.tensors[op.inputs[0]], graph.tensors[op.inputs[1]]
        layer = _name(graph.tensors[op.outputs[0]])
        shape = [int(v) for v in x.shape]
        if len(shape) != 4 or min(shape) < 1:
            skipped.append({"layer": layer, "op": op_name, "reason": f"input shape {shape} is not a known NHWC shape"})
            continue
        batch, h, wd, c_in = shape
        o = op.builtinOptions
        _, kh, kw, last = (int(v) for v in w.shape)
        if op_name == "DEPTHWISE_CONV_2D":  # filter (1, KH, KW, C x M)
            groups, c_out = c_in, last
        else:  # filter (O, KH, KW, I / groups)
            c_out, groups = int(w.shape[0]), c_in // last
        dilation = (int(o.dilationHFactor), int(o.dilationWFactor))
        padding = "same" if o.padding == 0 else "valid"  # Padding: SAME 0, VALID 1
        try:
            g = Geometry(2, (h, wd), (kh, kw), (int(o.strideH), int(o.strideW)), c_in, c_out, padding,
                         None if dilation == (1, 1) else dilation, groups, batch).validate(layer)
        except ConfigError as err:
            skipped.append({"layer": layer, "op": op_name, "reason": str(err)})
            continue
        fused = int(o.fusedActivationFunction)
        convs.append({"layer": layer, "op": op_name, "geometry": g,
                      "activation": TFLITE_ACTIVATIONS.get(fused, f"fused activation {fused} (not swept)"),
                      "tensors": [int(op.inputs[1]), int(op.inputs[2]) if len(op.inputs) > 2 else -1],
                      "input": int(op.inputs[0])})
    return convs, skipped


def tflite_weights(model: Path, convs: list[dict]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each conv's (kernel (O, I / groups, KH, KW), bias (O,)) from the file's constant tensors."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(str(model))
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    out = []
    for conv in convs:
        w, b = conv["tensors"]
        try:
            kernel = dequantized(interpreter, details[w])
        except ValueError as err:
            raise ConfigError("doit extract --weights", conv["layer"], f"has no constant filter in the file ({err})")
        # CONV_2D's filter is (O, KH, KW, I / groups), DEPTHWISE_CONV_2D's (1, KH, KW, C x M)
        kernel = kernel.transpose(0, 3, 1, 2) if conv["op"] == "CONV_2D" else kernel.transpose(3, 0, 1, 2)
        bias = dequantized(interpreter, details[b]).reshape(-1) if b >= 0 else np.zeros(kernel.shape[0])
        out.append((kernel, bias))
    return out


def _attributes(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _onnx_padding(attrs: dict, spatial, kernel, stride, dilation) -> tuple[str | None, tuple | None]:
    """(padding, pads): ("valid", None), ("same", None) (TF's SAME), or ("explicit", (before,
    after) per axis) for other pads; (None, None) for an auto_pad the sweep does not build."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return "valid", None
    if auto == "SAME_UPPER":  # the extra pad at the end, as TF's SAME
        return "same", None
    if auto not in ("NOTSET", ""):
        return None, None
    n = len(spatial)
    pads = list(attrs.get("pads", [0] * (2 * n)))
    if not any(pads):
        return "valid", None
    pairs = tuple((int(pads[i]), int(pads[i + n])) for i in range(n))
    same = tuple(same_padding(size, k, s, d) for size, k, s, d in zip(spatial, kernel, stride, dilation))
    return ("same", None) if pairs == same else ("explicit", pairs)


def onnx_convs(model: Path) -> tuple[list[dict], list[dict]]:
    """(convs, skipped) of a .onnx file: each conv {"layer", "op", "geometry", "activation"}."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.shape_inference.infer_shapes(onnx.load(str(model))).graph
    shapes = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        dims = info.type.tensor_type.shape.dim
        shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    constants = {}
    for init in graph.initializer:
        value = numpy_helper.to_array(init)
        shapes[init.name] = list(value.shape)
        if value.size == 1:
            constants[init.name] = value.reshape(())
    for node in graph.node:
        if node.op_type == "Constant":
            value = numpy_helper.to_array(_attributes(node)["value"])
            if value.size == 1:
                constants[node.output[0]] = value.reshape(())
    readers = onnx_readers(graph)
    convs, skipped = [], []
    for node in graph.node:
        layer = node.name or node.output[0]
        if node.op_type in ("ConvTranspose", "ConvInteger", "QLinearConv"):
            skipped.append({"layer": layer, "op": node.op_type, "reason": f"{node.op_type} is not a convolution the sweep builds"})
            continue
        if node.op_type != "Conv":
            continue
        x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
        if not x or not w or any(v is None for v in x[1:]) or any(v is None for v in w):
            skipped.append({"layer": layer, "op": "Conv", "reason": f"input shape {x} or weight shape {w} is not known"})
            continue
        rank = len(x) - 2
        if rank not in (1, 2):
            skipped.append({"layer": layer, "op": "Conv", "reason": f"a {rank}-D convolution (the sweep builds 1-D and 2-D)"})
            continue
        attrs = _attributes(node)
        spatial, kernel = tuple(x[2:]), tuple(attrs.get("kernel_shape", w[2:]))
        stride, dilation = tuple(attrs.get("strides", [1] * rank)), tuple(attrs.get("dilations", [1] * rank))
        padding, pads = _onnx_padding(attrs, spatial, kernel, stride, dilation)
        if padding is None:
            skipped.append({"layer": layer, "op": "Conv", "reason": f"auto_pad {attrs.get('auto_pad')} "
                            "is none the sweep builds (VALID, SAME_UPPER, or explicit pads)"})
            continue
        groups = int(attrs.get("group", 1))
        try:
            g = Geometry(rank, spatial, kernel, stride, int(x[1]), int(w[0]), padding,
                         None if set(dilation) == {1} else dilation, groups, int(x[0] or 1),
                         explicit_pads=pads).validate(layer)
        except ConfigError as err:
            skipped.append({"layer": layer, "op": "Conv", "reason": str(err)})
            continue
        convs.append({"layer": layer, "op": "Conv", "geometry": g,
                      "activation": onnx_activation(node, readers, constants), "tensors": list(node.input[1:3]),
                      "input": node.input[0]})
    return convs, skipped


def tflite_inputs(model: Path, convs: list[dict], sample: np.ndarray) -> list[np.ndarray]:
    """Each conv's input (float64, channels first) when the model runs on `sample` (its input, in
    its layout: a float sample of an int8 model is quantized with the model's input scale and
    zero point, round half to even)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(str(model), experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    if tuple(sample.shape) != tuple(detail["shape"]):
        raise ConfigError("doit extract --input", list(sample.shape), f"must be the model's input shape {list(detail['shape'])}")
    if detail["dtype"] == np.int8 and sample.dtype != np.int8:
        sample = quantize_int8(sample, *detail["quantization"])
    interpreter.set_tensor(detail["index"], sample.astype(detail["dtype"]))
    interpreter.invoke()
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    return [np.moveaxis(dequantized(interpreter, details[conv["input"]]), -1, 1) for conv in convs]


def onnx_inputs(model: Path, convs: list[dict], sample: np.ndarray) -> list[np.ndarray]:
    """Each Conv's input when the model runs on `sample` (onnxruntime, every such input made an
    output of the graph)."""
    import onnx
    import onnxruntime

    proto = onnx.shape_inference.infer_shapes(onnx.load(str(model)))
    graph = proto.graph
    feed = graph.input[0].name
    known = {v.name: v for v in graph.value_info}
    names = list(dict.fromkeys(conv["input"] for conv in convs if conv["input"] != feed))
    graph.output.extend(known[name] for name in names if name in known)
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.get_inputs()[0].shape
    if len(expected) != sample.ndim or any(isinstance(d, int) and d != n for d, n in zip(expected, sample.shape)):
        raise ConfigError("doit extract --input", list(sample.shape), f"must be the model's input shape {expected}")
    wanted = [o.name for o in session.get_outputs()]
    values = dict(zip(wanted, session.run(wanted, {feed: sample.astype(np.float32)})))
    values[feed] = sample
    return [np.asarray(values[conv["input"]], dtype=np.float64) for conv in convs]


def onnx_weights(model: Path, convs: list[dict]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each Conv's (kernel, bias) from the file's initializers (no bias: zeros)."""
    import onnx
    from onnx import numpy_helper

    inits = {i.name: i for i in onnx.load(str(model)).graph.initializer}
    out = []
    for conv in convs:
        names = conv["tensors"]
        if names[0] not in inits:
            raise ConfigError("doit extract --weights", conv["layer"], "has no constant weight initializer in the file")
        kernel = numpy_helper.to_array(inits[names[0]]).astype(np.float64)
        bias = numpy_helper.to_array(inits[names[1]]).astype(np.float64) if len(names) > 1 and names[1] in inits \
            else np.zeros(kernel.shape[0])
        out.append((kernel, bias))
    return out


READERS = {".tflite": tflite_convs, ".onnx": onnx_convs}
WEIGHTS = {".tflite": tflite_weights, ".onnx": onnx_weights}
SAMPLE_INPUTS = {".tflite": tflite_inputs, ".onnx": onnx_inputs}


def extract(model: Path, where: str = "doit extract", weights: Path | None = None, spec_dir: Path | None = None,
            sample: Path | None = None) -> dict:
    """The model's convs as a spec file's content: {"source", "geometries": [{"category", ...the
    geometry, "layers": [{"layer", "op", "activation"}]}], "skipped": [...]}. A file that cannot be
    read, or holds no conv, is a ConfigError naming it. With `weights` (a folder), each conv's own
    kernel and bias are written there (pipeline/space/given.py), and a geometry is one per
    distinct (geometry, weights): its `weights` names the file, relative to `spec_dir`. With
    `sample` too (an .npy of the model's input), each file also holds the conv's input when the
    model runs on it."""
    model = Path(model)
    reader = READERS.get(model.suffix.lower())
    if reader is None:
        raise ConfigError(where, str(model), "must be a .tflite or .onnx model file")
    if not model.is_file():
        raise ConfigError(where, str(model), "is not a file")
    try:
        convs, skipped = reader(model)
    except Exception as err:  # the library's own message says what it could not read
        raise ConfigError(where, str(model), f"cannot be read as {model.suffix[1:]}: {type(err).__name__}: "
                          f"{str(err).splitlines()[0][:200] if str(err) else ''}") from None
    if not convs:
        raise ConfigError(where, str(model), "holds no convolution the sweep can build"
                          + (f" ({len(skipped)} skipped: {skipped[0]['reason']})" if skipped else ""))
    category = "extract_" + "".join(c if c.isalnum() else "_" for c in model.stem)
    if sample is not None and not weights:
        raise ConfigError(f"{where} --input", str(sample), "goes with --weights")
    files = _write_weights(model, convs, Path(weights), Path(spec_dir or "."), sample) if weights \
        else [None] * len(convs)
    by_geometry: dict[tuple, list[dict]] = {}
    for conv, file in zip(convs, files):
        fused = conv["activation"] if conv["activation"] in ACTIVATIONS else "none"
        by_geometry.setdefault((replace(conv["geometry"], activation=fused), file), []).append(
            {"layer": conv["layer"], "op": conv["op"], "activation": conv["activation"]})
    return {"source": f"{model.name}: {len(convs)} convolutions, {len(by_geometry)} distinct"
                      + (" (geometry and weights)" if weights else ""),
            "geometries": [{"category": category, **g.to_dict(), **({"weights": file} if file else {}),
                            "layers": layers} for (g, file), layers in by_geometry.items()],
            "skipped": skipped}


def _write_weights(model: Path, convs: list[dict], folder: Path, spec_dir: Path, sample: Path | None) -> list[str]:
    """Each conv's kernel and bias (and its input on `sample`) as an .npz in `folder`, named by
    its content's digest (two layers with the same ones share one); each file's path relative
    to `spec_dir`."""
    import hashlib
    import io
    import os

    from pipeline.core.tools import write_bytes
    from pipeline.space import given

    inputs = [None] * len(convs)
    if sample is not None:
        try:
            values = np.load(sample)
        except (OSError, ValueError) as err:
            raise ConfigError("doit extract --input", str(sample), f"cannot be read as .npy: {err}") from None
        inputs = SAMPLE_INPUTS[model.suffix.lower()](model, convs, values)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for (kernel, bias), conv, layer_input in zip(WEIGHTS[model.suffix.lower()](model, convs), convs, inputs):
        g = conv["geometry"]
        want = (g.c_out, g.c_in // g.groups, *g.kernel)
        if kernel.shape != want or bias.shape != (g.c_out,):
            raise ConfigError("doit extract --weights", conv["layer"],
                              f"kernel {list(kernel.shape)} and bias {list(bias.shape)} do not fit its geometry {want}")
        if layer_input is not None and layer_input.shape != (g.batch, g.c_in, *g.spatial):
            raise ConfigError("doit extract --input", conv["layer"],
                              f"its input {list(layer_input.shape)} does not fit its geometry")
        buffer = io.BytesIO()
        given.write(buffer, kernel, bias, layer_input)
        data = buffer.getvalue()
        path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.npz"
        write_bytes(path, data)
        out.append(os.path.relpath(path, spec_dir))
    return out
