"""Stage 4b: what the model means. The backends' own interpreters give the expected output;
the model file gives the weights the tolerance and the float64 references are built from.

Oracles: the TFLite interpreter (reference kernels for w8i8, where IREE is bit-exact),
onnxruntime for ONNX f32, and a numpy float64 convolution for bf16 (onnxruntime has no bf16 Conv).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipeline.space.cases import Case
from pipeline.checks.reference import activate, conv_nchw, round_to_bf16, to_channels_first, to_channels_last
from pipeline.checks.tolerance import activation_range


@dataclass(frozen=True)
class ModelWeights:
    """The convolution's parameters as stored in the model file, dequantized to float64."""

    kernel: np.ndarray  # (c_out, c_in, *kernel)
    bias: np.ndarray  # (c_out,)
    weights_quantized: bool  # kernel stored as int8 in the model file
    input_scale: float = 0.0  # int8 input quantization (w8i8), 0 when the input is float
    output_scale: float = 0.0  # int8 output quantization (w8i8), 0 when the output is float
    input_zero_point: int = 0  # int8 input quantization (w8i8)
    output_zero_point: int = 0  # int8 output quantization (w8i8)
    weight_scales: tuple = ()  # per output channel, when the kernel is stored as int8
    kernel_int: np.ndarray | None = None  # w8i8: the stored int8 kernel, (c_out, c_in, *kernel)
    bias_int: np.ndarray | None = None  # w8i8: the stored int32 bias
    requantized_once: bool = True  # the conv (with its bias) is the whole model: one int8 requantization
    activation: str = "none"  # the activation the model applies after the sum (Geometry.activation)
    activation_range: tuple = (-128, 127)  # w8i8: the int8 range its requantization clamps to


CONV_OPS = {"CONV_2D": (0, 3, 1, 2), "DEPTHWISE_CONV_2D": (3, 0, 1, 2)}  # op -> filter axes to (O, I/g, KH, KW)


def warm_up() -> None:
    """The helper's one-off imports."""
    import ai_edge_litert.interpreter  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401


def _interpreter(model: Path, reference_kernels: bool):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = (OpResolverType.BUILTIN_REF if reference_kernels
                else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter = Interpreter(str(model), num_threads=1, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    return interpreter


def _dequantize(interpreter, detail) -> tuple[np.ndarray, bool]:
    """The tensor's values as the model computes with them, and whether it is stored as integers."""
    from pipeline.frontends.tflite_file import dequantized

    return dequantized(interpreter, detail), detail["dtype"] in (np.int8, np.int32)


def model_ops(model: Path) -> list[dict]:
    """The operators of a .tflite model's main subgraph, in order: {"op_name", "inputs",
    "outputs"} (its tensor indices are the subgraph's, as the interpreter's)."""
    from pipeline.frontends.tflite_file import tflite_ops

    return [{"op_name": name, "inputs": [int(i) for i in op.inputs], "outputs": [int(i) for i in op.outputs]}
            for name, op in tflite_ops(model)[1]]


def tflite_activation(model: Path) -> str:
    """The activation fused into the model's last op (the conv, or the ADD of its bias)."""
    from pipeline.frontends.activations import TFLITE_ACTIVATIONS
    from pipeline.frontends.tflite_file import tflite_ops

    _, ops = tflite_ops(model)
    fused = [int(getattr(op.builtinOptions, "fusedActivationFunction", 0) or 0) for name, op in ops
             if name in (*CONV_OPS, "ADD")]
    named = {TFLITE_ACTIVATIONS.get(f, f"fused activation {f}") for f in fused} - {"none"}
    if len(named) > 1:
        raise ValueError(f"{model}: several fused activations: {sorted(named)}")
    return named.pop() if named else "none"


def _constant_bias(interpreter, details: dict, ops: list[dict], bias_index: int, channels: int) -> np.ndarray:
    """A float model's additive constant read from its tensors: the conv's bias plus the operand
    of an ADD that no op writes and the model does not take (a constant: the converter may put
    the bias there, for a Conv1D with one output channel)."""
    bias = np.zeros(channels)
    if bias_index >= 0:
        bias = bias + _dequantize(interpreter, details[bias_index])[0].reshape(-1)
    written = {i for op in ops for i in op["outputs"]} | {d["index"] for d in interpreter.get_input_details()}
    for op in ops:
        if op["op_name"] == "ADD":
            for i in set(op["inputs"]) - written:
                bias = bias + _dequantize(interpreter, details[i])[0].reshape(-1)
    return bias


def tflite_weights(case: Case, model: Path) -> ModelWeights:
    interpreter = _interpreter(model, reference_kernels=False)
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    ops = model_ops(model)
    activation = tflite_activation(model)
    convs = [op for op in ops if op["op_name"] in CONV_OPS]
    if len(convs) != 1:
        raise ValueError(f"{model}: expected one {' or '.join(CONV_OPS)} op, found {len(convs)}")
    _, filter_index, bias_index = convs[0]["inputs"][:3]
    # CONV_2D's filter is (O, KH, KW, I / groups), DEPTHWISE_CONV_2D's (1, KH, KW, C x M): both to (O, I / groups, KH, KW)
    order = CONV_OPS[convs[0]["op_name"]]
    kernel, quantized = _dequantize(interpreter, details[filter_index])
    scales = tuple(float(v) for v in details[filter_index]["quantization_parameters"]["scales"])
    if len(scales) == 1:
        scales *= kernel.shape[order[0]]
    bias, _ = _dequantize(interpreter, details[bias_index])
    kernel = kernel.transpose(order)
    kernel_int = interpreter.get_tensor(filter_index).transpose(order).astype(np.int64)
    if case.geometry.rank == 1:
        kernel = kernel[:, :, 0, :]  # Conv1D is a 2-D conv with KH = 1
        kernel_int = kernel_int[:, :, 0, :]
    inputs, outputs = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    if inputs["dtype"] == np.float32:
        # The converter may leave the bias out of CONV_2D and add it in a separate ADD (it does
        # for a Conv1D with one output channel): the model's whole additive constant is its
        # output for a zero input, exact in float (and in the hybrid kernel: zero quantizes exactly).
        interpreter.set_tensor(inputs["index"], np.zeros(inputs["shape"], np.float32))
        interpreter.invoke()
        offsets = interpreter.get_tensor(outputs["index"]).astype(np.float64).reshape(-1, kernel.shape[0])
        if not (offsets == offsets[0]).all():
            raise ValueError(f"{model}: output for a zero input is not one bias per channel")
        bias = offsets[0]
        if activation != "none":  # its output for a zero input is act(bias): read the bias, check it
            bias = _constant_bias(interpreter, details, ops, bias_index, kernel.shape[0])
            if not np.array_equal(activate(bias, activation), offsets[0]):
                raise ValueError(f"{model}: the bias read from its tensors, through {activation}, is not its "
                                 "output for a zero input")
    integer = inputs["dtype"] == np.int8
    # the converter may add the bias in a separate ADD (a Conv1D with one output channel): in an
    # int8 model that is a second requantization, after the conv's own
    others = {op["op_name"] for op in ops} - set(CONV_OPS) - {"RESHAPE"}
    return ModelWeights(kernel, bias, quantized and details[filter_index]["dtype"] == np.int8,
                        float(inputs["quantization"][0]), float(outputs["quantization"][0]),
                        int(inputs["quantization"][1]), int(outputs["quantization"][1]), scales if quantized else (),
                        kernel_int if integer else None,
                        interpreter.get_tensor(bias_index).astype(np.int64) if integer else None,
                        requantized_once=not others, activation=activation,
                        activation_range=activation_range(activation, *outputs["quantization"]) if integer
                        else (-128, 127))


def onnx_weights(model: Path) -> ModelWeights:
    import onnx
    from onnx import numpy_helper

    from pipeline.frontends.activations import onnx_activation, onnx_readers

    graph = onnx.load(str(model)).graph
    inits = {i.name: i for i in graph.initializer}
    conv = next(node for node in graph.node if node.op_type == "Conv")
    readers = onnx_readers(graph)

    def array(name):
        init = inits[name]
        if init.data_type == onnx.TensorProto.BFLOAT16:
            import ml_dtypes

            raw = np.frombuffer(init.raw_data, dtype=np.uint16).view(ml_dtypes.bfloat16)
            return raw.reshape(tuple(init.dims)).astype(np.float64)
        return numpy_helper.to_array(init).astype(np.float64)

    constants = {name: float(array(name).reshape(-1)[0]) for name, init in inits.items()
                 if int(np.prod(init.dims)) == 1}  # a Clip's bounds
    return ModelWeights(array(conv.input[1]), array(conv.input[2]), False,
                        activation=onnx_activation(conv, readers, constants))


def model_weights(case: Case, model: Path) -> ModelWeights:
    return tflite_weights(case, model) if case.backend == "tflite" else onnx_weights(model)


def tflite_output(case: Case, model: Path, x: np.ndarray, reference_kernels: bool) -> np.ndarray:
    interpreter = _interpreter(model, reference_kernels)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()


def onnxruntime_output(model: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def float64_reference(case: Case, weights: ModelWeights, x: np.ndarray) -> np.ndarray:
    """The exact convolution of x with the model's (dequantized) weights, in the model's layout."""
    if case.backend == "tflite":
        return to_channels_last(conv_nchw(to_channels_first(x), weights.kernel, weights.bias, case.geometry))
    return conv_nchw(x, weights.kernel, weights.bias, case.geometry)


def expected_output(case: Case, model: Path, weights: ModelWeights, x: np.ndarray) -> np.ndarray:
    """The oracle's output for input x, in the model's own output dtype."""
    if case.backend == "tflite":
        return tflite_output(case, model, x, reference_kernels=case.flavor == "w8i8")
    if case.flavor == "bf16":
        # bf16 operands (as stored), exact accumulation, one rounding to bf16 (nearest even)
        return round_to_bf16(float64_reference(case, weights, x.astype(np.float64)))
    return onnxruntime_output(model, x)


def bf16_sum(case: Case, weights: ModelWeights, x: np.ndarray) -> np.ndarray:
    """ONNX bf16: S, the exact (float64) conv of the bf16 operands as stored, before any rounding."""
    return float64_reference(case, weights, x.astype(np.float64))


def bf16_operands_sum(case: Case, weights: ModelWeights, x: np.ndarray) -> np.ndarray:
    """S, the exact (float64) conv of the input rounded to bf16 and of `weights` (rounded to bf16
    or not, as the target's compiler holds them): what a compiler that runs an f32 model in bf16
    should compute before its one rounding to bf16."""
    return float64_reference(case, weights, _bf16(x))


def _bf16(a: np.ndarray) -> np.ndarray:
    """f32 (or exactly representable float64) values rounded to bf16, back in float64."""
    return round_to_bf16(np.asarray(a, dtype=np.float64)).astype(np.float64)


def bf16_operands(weights: ModelWeights) -> ModelWeights:
    """The weights and bias as a compiler converting the model to bf16 holds them (the
    dequantized int8 weights of w8if32 are f32 values first, then rounded)."""
    return ModelWeights(_bf16(weights.kernel.astype(np.float32)), _bf16(weights.bias.astype(np.float32)),
                        weights.weights_quantized)


def accumulators(case: Case, weights: ModelWeights, x: np.ndarray) -> np.ndarray:
    """w8i8: every output's int32 accumulator, sum (x - zp_in) w + bias, from the stored
    integers (the float64 conv of integers below 2**53 is exact), in the model's layout."""
    integers = replace(weights, kernel=weights.kernel_int.astype(np.float64), bias=weights.bias_int.astype(np.float64))
    acc = float64_reference(case, integers, x.astype(np.float64) - weights.input_zero_point)
    return np.rint(acc).astype(np.int64)


def abs_sum(case: Case, weights: ModelWeights, x: np.ndarray) -> np.ndarray:
    """sum |w_oj| |x_j| over each output's window, without the bias: with S and the bias, the
    bound Q on every partial sum of the element's terms (pipeline/checks/tolerance.py)."""
    magnitudes = ModelWeights(np.abs(weights.kernel), np.zeros_like(weights.bias), weights.weights_quantized)
    return float64_reference(case, magnitudes, np.abs(np.asarray(x, dtype=np.float64)))


def evaluate(case: Case, model: Path, x: np.ndarray, *, converted: bool = False, round_weights: bool = True,
             bias_free: bool = False, requantize: bool = False) -> dict:
    """Everything verify needs from the model, computed in the helper process: its weights
    ("weights"), the oracle's output for x ("expected"), for w8if32 the float64 conv of the
    dequantized weights ("exact"), for f32 the float64 conv of the weights ("float64"); for ONNX bf16 the exact sum of its bf16 operands ("sum",
    which "expected" rounds to bf16); for an f32 model the compiler runs in bf16 (`converted`)
    the exact sum of the bf16 operands ("bf16_sum") and its bf16 rounding ("bf16"), with the
    weights and bias rounded to bf16 too where the compiler does (`round_weights`; the bias as
    held: "bf16_bias"); for a target that adds the bias separately in bf16 (`bias_free`), the
    bf16 sum without the bias ("bias_free"); for w8i8 on a single-rounding target (`requantize`)
    whose model requantizes once, every output's int32 accumulator ("accumulators"); and for the
    float flavors sum |w| |x| over each output's window ("abs_sum"; "bf16_abs_sum" of the operands
    as a converting compiler holds them), which bounds the partial sums (pipeline/checks/tolerance.py)."""
    weights = model_weights(case, model)
    act = case.geometry.activation
    if weights.activation != act:
        raise ValueError(f"{model}: the model applies activation {weights.activation}, the case {act}")
    if case.flavor == "bf16":
        total = bf16_sum(case, weights, x)
        out = {"weights": weights, "sum": total, "expected": round_to_bf16(activate(total, act))}
    else:
        out = {"weights": weights, "expected": expected_output(case, model, weights, x)}
    if case.flavor == "w8if32":
        out["exact"] = float64_reference(case, weights, x)  # float64: exact, no rounding of its own
    elif case.flavor == "f32":  # the oracle itself is checked against it (verify: oracle_vs_float64)
        out["float64"] = float64_reference(case, weights, x)
    held, x_held = weights, x.astype(np.float64)
    if case.flavor != "w8i8":
        out["abs_sum"] = abs_sum(case, weights, x_held)
    if converted:
        held, x_held = (bf16_operands(weights) if round_weights else weights), _bf16(x)
        out["bf16_sum"] = bf16_operands_sum(case, held, x)
        out["bf16"] = round_to_bf16(activate(out["bf16_sum"], act))
        out["bf16_abs_sum"] = abs_sum(case, held, x_held)
        out["bf16_bias"] = held.bias
    if bias_free:
        out["bias_free"] = float64_reference(case, replace(held, bias=np.zeros_like(held.bias)), x_held)
    if requantize and case.flavor == "w8i8" and weights.requantized_once:
        out["accumulators"] = accumulators(case, weights, x)
    return out
