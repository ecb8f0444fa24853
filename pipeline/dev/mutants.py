"""Mutants: a wrapper compiler that miscompiles on purpose, to measure what the checks catch.

`python -m pipeline.dev.mutants <mutant> <compiler> <compiler arguments...>` rewrites the conv's
constants in the imported MLIR text it is given (the argument that is an existing `.mlir` file),
then runs the real compiler on the rewritten copy with the same arguments. The module it builds
computes a slightly different conv, the way a miscompile would:

- sign: output channel 0's weight of median magnitude has its sign flipped;
- lsb: that weight moved by one step of its stored format (int8: 1; bf16: one bf16 step; f32:
  one bf16 step too, 2**-8 relative, the narrowest format a target converts f32 weights to);
- bias: the conv's bias dropped (every element 0);
- tap: one tap shifted: output channel 0 reads input channel 0's first tap one position further
  along the width, so that weight adds to the next tap's and its own becomes 0.

Constants are found from the conv op (TOSA's tosa.conv2d, from TFLite; ONNX's onnx.Conv) back
through the ops that feed its weight and bias operands to the tosa.const / onnx.Constant with as
many elements (the dequantization of w8if32's int8 weights is cast and mul: its int8 constant is
mutated). A mutant that does not apply (no bias to drop, no neighbouring tap, a depthwise conv)
exits with status 3 and says why: such a module is not built.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MUTANTS = ("sign", "lsb", "bias", "tap")
NOT_APPLICABLE = 3  # the exit status of a mutant that does not apply to the model

_DTYPES = {"f32": np.float32, "i8": np.int8, "i32": np.int32, "bf16": np.uint16}
_CONST = re.compile(r"^\s*(%[\w.]+) = (?:tosa\.const\s+values\(|torch\.operator \"onnx\.Constant\"\(\) "
                    r"\{torch\.onnx\.value = )(dense(?:_resource)?<.*?>) : tensor<([\dx]*)x?(f32|bf16|i8|i32)>", re.M)
_DEF = re.compile(r"^\s*(%[\w.]+) = (.*)$", re.M)
_RESOURCE = re.compile(r"^(\s*)([\w.]+): \"0x([0-9A-Fa-f]{8})([0-9A-Fa-f]*)\"", re.M)


class NotApplicable(Exception):
    """The mutant does not apply to this model."""


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split("x") if d) if text else ()


def _constants(mlir: str) -> dict[str, dict]:
    """Every constant of the module: its SSA name -> literal, shape, element type, span."""
    found = {}
    for m in _CONST.finditer(mlir):
        found[m.group(1)] = {"literal": m.group(2), "shape": _shape(m.group(3)), "type": m.group(4),
                             "span": m.span(2)}
    return found


def _operands(line: str) -> list[str]:
    return re.findall(r"%[\w.]+", line.split(":")[0] if " : " in line else line)


def _conv(mlir: str) -> tuple[str, str, str]:
    """The conv op's line, its weight operand and its bias operand."""
    for m in _DEF.finditer(mlir):
        line = m.group(2)
        if line.startswith("tosa.depthwise_conv2d"):
            raise NotApplicable("a depthwise conv: output channel 0's weights are not contiguous")
        if line.startswith("tosa.conv2d") or line.startswith('torch.operator "onnx.Conv"'):
            operands = _operands(line.split("{")[0] if "onnx.Conv" in line else line)
            if len(operands) < 3:
                raise NotApplicable("the conv has no bias operand")
            return line, operands[1], operands[2]
    raise NotApplicable("no conv op in the module")


def _source(mlir: str, value: str, constants: dict, elements: int | None = None) -> str:
    """The constant `value` is computed from: itself, or the constant with `elements` elements
    among the operands of the ops that define it (cast, mul, reshape: a dequantization)."""
    seen, todo = set(), [value]
    defs = {m.group(1): m.group(2) for m in _DEF.finditer(mlir)}
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name in constants and (elements is None or int(np.prod(constants[name]["shape"])) == elements):
            return name
        todo += _operands(defs.get(name, ""))
    raise NotApplicable(f"no constant feeds {value}")


def _resources(mlir: str) -> dict[str, re.Match]:
    start = mlir.find("dialect_resources")
    return {m.group(2): m for m in _RESOURCE.finditer(mlir, start if start >= 0 else len(mlir))}


def _read(mlir: str, const: dict) -> np.ndarray:
    """The constant's elements, flat, in its storage dtype (bf16 as its uint16 bits)."""
    literal, dtype, count = const["literal"], _DTYPES[const["type"]], int(np.prod(const["shape"]))
    if literal.startswith("dense_resource<"):
        blob = _resources(mlir)[literal[len("dense_resource<"):-1]].group(4)
        return np.frombuffer(bytes.fromhex(blob), dtype=dtype).copy()
    body = literal[len("dense<"):-1]
    if body.startswith('"0x'):
        return np.frombuffer(bytes.fromhex(body[3:-1]), dtype=dtype).copy()
    if const["type"] == "bf16":
        raise NotApplicable("a bf16 constant written as numbers")
    numbers = [float(v) for v in re.findall(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)", body)]
    values = np.array(numbers * (count if len(numbers) == 1 else 1), dtype=np.float64)
    return values.astype(dtype)


def _write(mlir: str, const: dict, values: np.ndarray) -> str:
    """The module with the constant's elements replaced (same dtype and count)."""
    literal = const["literal"]
    data = np.ascontiguousarray(values).tobytes().hex().upper()
    if literal.startswith("dense_resource<"):
        m = _resources(mlir)[literal[len("dense_resource<"):-1]]
        return mlir[:m.start(4)] + data + mlir[m.end(4):]
    start, end = const["span"]
    return mlir[:start] + f'dense<"0x{data}">' + mlir[end:]


def _float_view(values: np.ndarray, kind: str) -> np.ndarray:
    if kind == "bf16":
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return values.astype(np.float64)


def _median_index(channel: np.ndarray) -> int:
    order = np.argsort(np.abs(channel), kind="stable")
    nonzero = [int(i) for i in order if channel[i] != 0]
    if not nonzero:
        raise NotApplicable("output channel 0's weights are all 0")
    return nonzero[len(nonzero) // 2]


def _step(values: np.ndarray, i: int, kind: str) -> None:
    """Move element i by one step of its stored format (toward zero at the top of the int range)."""
    if kind in ("i8", "i32"):
        values[i] += -1 if values[i] == np.iinfo(values.dtype).max else 1
    elif kind == "bf16":
        values[i] = np.uint16(int(values[i]) + 1)
    else:  # f32: one bf16 step, 2**-8 relative at most, in the bits
        bits = values.view(np.uint32)
        bits[i] = np.uint32(int(bits[i]) + (1 << 16))


def _flip(values: np.ndarray, i: int, kind: str) -> None:
    if kind == "bf16":
        values[i] ^= np.uint16(0x8000)
    elif kind == "f32":
        values[i] = -values[i]
    else:
        values[i] = -values[i] if values[i] != np.iinfo(values.dtype).min else np.iinfo(values.dtype).max


def mutate(mlir: str, mutant: str) -> str:
    """The module with `mutant` applied to its conv (see the module docstring)."""
    if mutant not in MUTANTS:
        raise ValueError(f"mutant {mutant!r}: must be one of {', '.join(MUTANTS)}")
    constants = _constants(mlir)
    line, weight, bias = _conv(mlir)
    weight_type = re.findall(r"tensor<([\dx]+)x(?:f32|bf16|i8)>|vtensor<\[([\d,]+)\]", line.split(" : ")[-1])
    onnx = "onnx.Conv" in line
    if mutant == "bias":
        name = _source(mlir, bias, constants)
        values = _read(mlir, constants[name])
        if not values.any():
            raise NotApplicable("the conv's bias is 0 (the model adds its bias elsewhere, or has none)")
        return _write(mlir, constants[name], np.zeros_like(values))
    dims = weight_type[1] if len(weight_type) > 1 else None
    shape = _shape(dims[0]) if dims and dims[0] else tuple(int(d) for d in dims[1].split(",")) if dims else None
    if shape is None:
        raise NotApplicable("the conv's weight type is not readable")
    name = _source(mlir, weight, constants, int(np.prod(shape)))
    const = constants[name]
    values = _read(mlir, const)
    per_channel = values.size // shape[0]
    kind = const["type"]
    if mutant in ("sign", "lsb"):
        i = _median_index(_float_view(values[:per_channel], kind))
        (_flip if mutant == "sign" else _step)(values, i, kind)
        return _write(mlir, const, values)
    # tap: output channel 0, input channel 0, the first tap's weight moves one step along the width
    width = shape[-1] if onnx else shape[-2]
    if width < 2:
        raise NotApplicable("the kernel is one tap wide: no neighbouring tap")
    next_tap = 1 if onnx else shape[-1]  # OIHW / OIW: the next element; OHWI: the next W, c_in apart
    if kind == "bf16":
        moved = np.array([_float_view(values[:1], kind)[0] + _float_view(values[next_tap:next_tap + 1], kind)[0]])
        import ml_dtypes

        values[next_tap] = moved.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0]
        values[0] = 0
    else:
        total = int(values[0]) + int(values[next_tap]) if kind in ("i8", "i32") else values[0] + values[next_tap]
        if kind in ("i8", "i32"):
            info = np.iinfo(values.dtype)
            total = max(info.min, min(info.max, total))
        values[next_tap], values[0] = total, 0
    return _write(mlir, const, values)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in MUTANTS:
        print(f"usage: python -m pipeline.dev.mutants {{{','.join(MUTANTS)}}} <compiler> <arguments...>",
              file=sys.stderr)
        return 2
    mutant, compiler, args = argv[0], argv[1], list(argv[2:])
    inputs = [i for i, a in enumerate(args) if a.endswith(".mlir") and Path(a).is_file()]
    if len(inputs) != 1:
        print(f"mutant {mutant}: expected one .mlir input among the arguments, found {len(inputs)}", file=sys.stderr)
        return 2
    source = Path(args[inputs[0]])
    try:
        mutated = mutate(source.read_text(), mutant)
    except NotApplicable as why:
        print(f"mutant {mutant} does not apply: {why}", file=sys.stderr)
        return NOT_APPLICABLE
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        path = Path(tmp) / source.name
        path.write_text(mutated)
        args[inputs[0]] = str(path)
        return subprocess.run([compiler, *args]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
