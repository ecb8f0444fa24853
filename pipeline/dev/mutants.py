"""Mutants: a wrapper compiler that miscompiles on purpose, to measure what the checks catch.

`python -m pipeline.dev.mutants <mutant> <compiler> <compiler arguments...>` rewrites the conv's
constants in the imported MLIR it is given, then runs the real compiler on the rewritten copy
with the same arguments. The module it builds computes a slightly different conv, the way a
miscompile would:

- sign: output channel 0's weight of median magnitude has its sign flipped;
- lsb: that weight moved by one step of its stored format (int8: 1; bf16: one bf16 step; f32:
  one bf16 step too, 2**-8 relative, the narrowest format a target converts f32 weights to);
- bias: the conv's bias dropped (every element 0; a grouped TFLite conv's, every group's);
- tap: one tap shifted: output channel 0 reads its first input channel's first tap one position
  further along the width, so that weight adds to the next tap's (an int8 sum clamped to
  [-128, 127]) and its own becomes 0.

Output channel 0 is the model's in every layout: row 0 of TOSA's (O, KH, KW, I / groups) and of
ONNX's (O, I / groups, KH, KW) or (O, I / groups, KW) weights (grouped and depthwise ONNX convs
alike: its input channels are its group's), element (kh, kw, 0, 0) of TOSA depthwise's
(KH, KW, C, M) weights (output channel c x M + m). Constants are found from the first conv op
(tosa.conv2d and tosa.depthwise_conv2d, from TFLite; ONNX's onnx.Conv) back through the ops that
feed its weight and bias operands (cast, mul, reshape, slice) to the tosa.const / onnx.Constant:
for the weight, the one with as many elements (w8if32's int8 constant, dequantized by cast and
mul: it is the int8 that is mutated; w8i8's depthwise (1, KH, KW, C x M) constant, reshaped),
else the one it is a slice of along the output channels (TFLite's grouped conv: one tosa.conv2d
per group, on slices of the whole (O, KH, KW, I / groups) constant, whose row 0 is the model's
output channel 0).

The MLIR input is the one argument, not an option or the value of -o, that is an existing file
named .mlir (text) or whose content is MLIR bytecode (magic bytes `ML\\xefR`: the TOSA bytecode
of tosa-converter-for-tflite, which the torq target's compiler reads; any --emit-bytecode
output). Text is mutated as it is. Bytecode is printed to text by an iree-opt (the one beside
the compiler, as in a stock IREE install; else this environment's, from iree-base-compiler),
mutated there, and the constant's old elements are replaced by the new ones in a copy of the
input file, which must then print as the mutated text: the compiler reads the same bytes as
without the mutant but for the constant's. Only where the old elements are not found once in
the file (a splat constant is stored as one element) is the mutated text written as bytecode
by that iree-opt, version 4 at most (operation properties stored as attributes): torq-compile
2.3.0 refuses the version-6 bytecode iree-opt 3.13 writes of w8if32's tosa.cast ("has
properties but missing BytecodeOpInterface"), and does not read the TOSA text iree-opt 3.13
prints ("custom op 'tosa.const' has no custom assembly form").

A mutant that does not apply (no bias to drop, no neighbouring tap, weights laid out otherwise)
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
BYTECODE_MAGIC = b"ML\xefR"  # the first bytes of an MLIR bytecode file

_DTYPES = {"f32": np.float32, "i8": np.int8, "i32": np.int32, "bf16": np.uint16}
_CONST = re.compile(r"^\s*(%[\w.]+) = (?:tosa\.const\s+values\(|torch\.operator \"onnx\.Constant\"\(\) "
                    r"\{torch\.onnx\.value = )(dense(?:_resource)?<.*?>) : tensor<([\dx]*)x?(f32|bf16|i8|i32)>", re.M)
_DEF = re.compile(r"^\s*(%[\w.]+) = (.*)$", re.M)
_RESOURCE = re.compile(r"^(\s*)([\w.]+): \"0x([0-9A-Fa-f]{8})([0-9A-Fa-f]*)\"", re.M)
_TYPE = re.compile(r"(?<!\w)tensor<((?:\d+x)*)\w+>|vtensor<\[([\d,]*)\],\w+>")
_CONVS = {"tosa.conv2d": "tosa", "tosa.depthwise_conv2d": "tosa_depthwise", 'torch.operator "onnx.Conv"': "onnx"}


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


def _operand_shapes(line: str) -> list[tuple[int, ...]]:
    """The shapes of an op's operands, from its functional type `(...) -> ...`."""
    types = line.rsplit(" : ", 1)[-1].split("->")[0]
    return [_shape(m.group(1).rstrip("x")) if m.group(2) is None else tuple(int(d) for d in m.group(2).split(",") if d)
            for m in _TYPE.finditer(types)]


def _conv(mlir: str) -> tuple[str, str, str, str | None]:
    """The first conv op: its layout ("tosa", "tosa_depthwise", "onnx"), its line, its weight
    operand and its bias operand (None when it has none)."""
    for m in _DEF.finditer(mlir):
        line = m.group(2)
        layout = next((kind for op, kind in _CONVS.items() if line.startswith(op + " ") or line.startswith(op + "(")),
                      None)
        if layout:
            operands = _operands(line.split("{")[0] if layout == "onnx" else line)
            return layout, line, operands[1], operands[2] if len(operands) > 2 else None
    raise NotApplicable("no conv op in the module")


def _feeding(mlir: str, value: str, constants: dict) -> list[str]:
    """The constants `value` is computed from: itself, or those among the operands of the ops
    that define it (cast, mul, reshape, slice: a dequantization, a group's slice), depth first in
    operand order, so that the data operand's constant comes before a scale's or a shift's."""
    seen, todo, found = set(), [value], []
    defs = {m.group(1): m.group(2) for m in _DEF.finditer(mlir)}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in constants:
            found.append(name)
        todo += reversed(_operands(defs.get(name, "")))
    return found


def _weight_source(mlir: str, weight: str, shape: tuple[int, ...], layout: str, constants: dict) -> str:
    """The constant holding the conv's weights: as many elements as the weight, or (a TOSA
    group's slice) the whole (O, KH, KW, I / groups) constant the weight is sliced from."""
    feeding = _feeding(mlir, weight, constants)
    count = int(np.prod(shape))
    for name in feeding:
        if int(np.prod(constants[name]["shape"])) == count:
            return name
    if layout == "tosa":
        for name in feeding:
            whole = constants[name]["shape"]
            if len(whole) == len(shape) and whole[1:] == shape[1:] and whole[0] > shape[0]:
                return name
    raise NotApplicable(f"no constant of the weight's {'x'.join(map(str, shape))} elements feeds {weight}")


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


def channel_zero(layout: str, shape: tuple[int, ...]) -> tuple[np.ndarray, int, int]:
    """Where output channel 0's weights are in the weight's flat elements (row-major `shape`):
    their flat indices (in storage order), the kernel's width, and the flat distance from a tap
    to the next one along the width."""
    if layout == "onnx":  # (O, I / groups, KH, KW) or (O, I / groups, KW): row 0
        return np.arange(int(np.prod(shape[1:]))), shape[-1], 1
    if len(shape) != 4:
        raise NotApplicable(f"a {layout} weight of shape {shape}: expected 4 dimensions")
    if layout == "tosa":  # (O, KH, KW, I / groups): row 0
        return np.arange(int(np.prod(shape[1:]))), shape[2], shape[3]
    kh, kw, c, m = shape  # depthwise (KH, KW, C, M): output channel c x M + m, so 0 is (c, m) = (0, 0)
    return np.arange(kh * kw) * (c * m), kw, c * m


def mutation(mlir: str, mutant: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """What `mutant` changes in the module: the constant (as _constants gives it), its elements
    before and after (flat, in its storage dtype)."""
    if mutant not in MUTANTS:
        raise ValueError(f"mutant {mutant!r}: must be one of {', '.join(MUTANTS)}")
    constants = _constants(mlir)
    layout, line, weight, bias = _conv(mlir)
    if mutant == "bias":
        if bias is None:
            raise NotApplicable("the conv has no bias operand")
        feeding = _feeding(mlir, bias, constants)
        if not feeding:
            raise NotApplicable(f"no constant feeds the bias {bias}")
        values = _read(mlir, constants[feeding[0]])
        if not values.any():
            raise NotApplicable("the conv's bias is 0 (the model adds its bias elsewhere, or has none)")
        return constants[feeding[0]], values, np.zeros_like(values)
    shapes = _operand_shapes(line)
    if len(shapes) < 2 or not shapes[1]:
        raise NotApplicable("the conv's weight type is not readable")
    shape = shapes[1]
    const = constants[_weight_source(mlir, weight, shape, layout, constants)]
    before, kind = _read(mlir, const), const["type"]
    values = before.copy()
    channel, width, next_tap = channel_zero(layout, shape)
    if mutant in ("sign", "lsb"):
        i = int(channel[_median_index(_float_view(values[channel], kind))])
        (_flip if mutant == "sign" else _step)(values, i, kind)
        return const, before, values
    # tap: output channel 0, its first input channel, the first tap's weight moves one step along the width
    if width < 2:
        raise NotApplicable("the kernel is one tap wide: no neighbouring tap")
    first, second = int(channel[0]), int(channel[0]) + next_tap
    if kind == "bf16":
        import ml_dtypes

        moved = _float_view(values[[first, second]], kind).sum()
        values[second] = np.array([moved], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0]
        values[first] = 0
    elif kind in ("i8", "i32"):  # the sum clamped to the integer range
        info = np.iinfo(values.dtype)
        values[second], values[first] = max(info.min, min(info.max, int(values[first]) + int(values[second]))), 0
    else:
        values[second], values[first] = values[first] + values[second], 0
    return const, before, values


def mutate(mlir: str, mutant: str) -> str:
    """The module with `mutant` applied to its conv (see the module docstring)."""
    const, _, after = mutation(mlir, mutant)
    return _write(mlir, const, after)


def is_bytecode(path: Path) -> bool:
    """Whether the file is MLIR bytecode (starts with its magic bytes)."""
    with open(path, "rb") as f:
        return f.read(len(BYTECODE_MAGIC)) == BYTECODE_MAGIC


def bytecode_version(path: Path) -> int:
    """The bytecode format version of an MLIR bytecode file: the prefix varint after the magic
    (the count of trailing zero bits of its first byte, plus one, is its length in bytes)."""
    with open(path, "rb") as f:
        head = f.read(len(BYTECODE_MAGIC) + 9)[len(BYTECODE_MAGIC):]
    if not head:
        raise ValueError(f"{path}: no bytecode version after the magic bytes")
    first = head[0]
    length = 9 if first == 0 else (first & -first).bit_length()
    if len(head) < length:
        raise ValueError(f"{path}: truncated bytecode version")
    return int.from_bytes(head[:length], "little") >> (length if length < 9 else 8)


def iree_opt(compiler: str) -> str:
    """The iree-opt that prints and writes bytecode: the one beside the compiler (a stock IREE
    install, a toolchain that has one), else this environment's."""
    beside = Path(compiler).with_name("iree-opt")
    if beside.is_file():
        return str(beside)
    from pipeline.core.executables import tool_path

    found = tool_path("iree-opt")
    if found is None:
        raise FileNotFoundError("iree-opt: not beside the compiler, and not installed (iree-base-compiler)")
    return found


def mlir_input(args: list[str]) -> list[int]:
    """The indices of the arguments that can be the compiler's MLIR input: an existing file, not
    an option nor the value of -o, that is MLIR bytecode or named .mlir."""
    found = []
    for i, arg in enumerate(args):
        if arg.startswith("-") or (i and args[i - 1] == "-o") or not Path(arg).is_file():
            continue
        if arg.endswith(".mlir") or is_bytecode(Path(arg)):
            found.append(i)
    return found


def _opt(command: list[str]) -> None:
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit status {proc.returncode}: {proc.stderr.strip()[-2000:]}")


def mutate_bytecode(source: Path, target: Path, mutant: str, opt: str) -> str:
    """Write to `target` the MLIR bytecode `source` with `mutant` applied; return how: "patched"
    (the constant's bytes replaced in a copy of the file, which `opt` then prints as it prints the
    mutated text) or else "rewritten" (the mutated text written as bytecode by `opt`, version 4 at
    most: properties stored as attributes, which compilers of an older MLIR read)."""
    with tempfile.TemporaryDirectory(prefix="mutant-text-") as tmp:
        printed, mutated, expected, check = (Path(tmp) / f"{n}.mlir" for n in ("printed", "mutated", "expected", "check"))
        _opt([opt, str(source), "-o", str(printed)])
        text = printed.read_text()
        const, before, after = mutation(text, mutant)
        mutated.write_text(_write(text, const, after))
        data, old = source.read_bytes(), before.tobytes()
        if data.count(old) == 1:
            target.write_bytes(data.replace(old, after.tobytes()))
            _opt([opt, str(target), "-o", str(check)])
            _opt([opt, str(mutated), "-o", str(expected)])
            if check.read_text() == expected.read_text():
                return "patched"
        _opt([opt, str(mutated), "--emit-bytecode", f"--emit-bytecode-version={min(bytecode_version(source), 4)}",
              "-o", str(target)])
        return "rewritten"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in MUTANTS:
        print(f"usage: python -m pipeline.dev.mutants {{{','.join(MUTANTS)}}} <compiler> <arguments...>",
              file=sys.stderr)
        return 2
    mutant, compiler, args = argv[0], argv[1], list(argv[2:])
    inputs = mlir_input(args)
    if len(inputs) != 1:
        print(f"mutant {mutant}: expected one MLIR input (.mlir text or MLIR bytecode) among the arguments, "
              f"found {len(inputs)}", file=sys.stderr)
        return 2
    source = Path(args[inputs[0]])
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        path = Path(tmp) / source.name
        try:
            if is_bytecode(source):
                if mutate_bytecode(source, path, mutant, iree_opt(compiler)) == "rewritten":
                    print(f"mutant {mutant}: the constant's bytes not found once in {source.name}: "
                          "bytecode rewritten by iree-opt", file=sys.stderr)
            else:
                path.write_text(mutate(source.read_text(), mutant))
        except NotApplicable as why:
            print(f"mutant {mutant} does not apply: {why}", file=sys.stderr)
            return NOT_APPLICABLE
        except (OSError, RuntimeError, ValueError) as err:
            print(f"mutant {mutant}: {err}", file=sys.stderr)
            return 2
        args[inputs[0]] = str(path)
        return subprocess.run([compiler, *args]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
