"""The compiled module's I/O: never assumed from the model, read from the module itself.

First choice, the function's `iree.abi.declaration` reflection, as the module dumper prints it
(`iree-dump-module --output=metadata`):
    sync func @main(%input0: tensor<1x8x8x3xbf16> {...}) -> (%output0: tensor<1x6x6x4xbf16> {...})
Modules that carry none (those built from iree-import-onnx output) take the imported MLIR's
entry function instead:
    func.func @main_graph(%arg0: !torch.vtensor<[1,3,8,8],f32>) -> !torch.vtensor<[1,4,6,6],f32>
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import StageError
from pipeline.core.tools import run_tool_output

# MLIR element type -> numpy dtype name (bfloat16 from ml_dtypes)
DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i8": "int8", "si8": "int8", "ui8": "uint8",
          "i32": "int32", "si32": "int32", "f64": "float64"}
ELEMENT_TYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int8": "i8", "uint8": "ui8",
                 "int32": "i32", "float64": "f64"}


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    element: str  # MLIR element type, e.g. "bf16"

    @property
    def dtype(self):
        import numpy as np

        name = DTYPES.get(self.element)
        if name is None:
            raise ValueError(f"unsupported element type {self.element}")
        if name == "bfloat16":
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(name)

    @property
    def spec(self) -> str:
        """As iree-run-module's typed --input takes it: 1x8x8x3xbf16."""
        return "x".join([*map(str, self.shape), ELEMENT_TYPES[self.dtype.name]])


@dataclass(frozen=True)
class Signature:
    function: str
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    source: str  # "reflection" or "mlir"

    def to_dict(self) -> dict:
        return {"function": self.function, "source": self.source,
                "inputs": [t.spec for t in self.inputs], "outputs": [t.spec for t in self.outputs]}

    def to_json(self) -> dict:
        """Every field as it was read (to_dict's specs name numpy's dtypes, not MLIR's types)."""
        return {"function": self.function, "source": self.source,
                "inputs": [[list(t.shape), t.element] for t in self.inputs],
                "outputs": [[list(t.shape), t.element] for t in self.outputs]}

    @classmethod
    def from_json(cls, data: dict) -> "Signature":
        def types(items):
            return tuple(TensorType(tuple(int(d) for d in shape), str(element)) for shape, element in items)

        return cls(str(data["function"]), types(data["inputs"]), types(data["outputs"]), str(data["source"]))


_TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z]+\d*)>")
_VTENSOR = re.compile(r"vtensor<\[([\d,\s]*)\],\s*([a-z]+\d*)>")


def _types(text: str) -> tuple[TensorType, ...]:
    found = []
    for match in re.finditer(f"{_TENSOR.pattern}|{_VTENSOR.pattern}", text):
        if match.group(2) is not None:
            dims = tuple(int(d) for d in match.group(1).split("x") if d)
            found.append(TensorType(dims, match.group(2)))
        else:
            dims = tuple(int(d) for d in match.group(3).replace(" ", "").split(",") if d)
            found.append(TensorType(dims, match.group(4)))
    return tuple(found)


def _split(declaration: str, function: str) -> tuple[str, str] | None:
    """The argument list and result list of `function` in a declaration or func.func line."""
    head = re.search(rf"@{re.escape(function)}\(", declaration)
    if not head:
        return None
    depth, i = 1, head.end()
    while i < len(declaration) and depth:
        depth += {"(": 1, ")": -1}.get(declaration[i], 0)
        i += 1
    args, rest = declaration[head.end():i - 1], declaration[i:]
    arrow = rest.find("->")
    if arrow < 0:
        return args, ""
    results = rest[arrow + 2:]
    body = results.find(" attributes ")  # func.func ... attributes {...} {
    brace = results.find("{") if not results.lstrip().startswith("(") else -1
    end = min(p for p in (body, brace, len(results)) if p >= 0)
    return args, results[:end]


def parse(declaration: str, function: str, source: str) -> Signature | None:
    parts = _split(declaration, function)
    if parts is None:
        return None
    inputs, outputs = _types(parts[0]), _types(parts[1])
    if not inputs or not outputs:
        return None
    return Signature(function, inputs, outputs, source)


def from_metadata(text: str, function: str) -> Signature | None:
    """From iree-dump-module --output=metadata: the function's iree.abi.declaration, if any."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("iree.abi.declaration:") and f"@{function}(" in line:
            return parse(line.split(":", 1)[1], function, "reflection")
    return None


def from_mlir(text: str, function: str) -> Signature | None:
    """From the imported MLIR's entry function (its public func.func)."""
    for line in text.splitlines():
        if "func.func" in line and f"@{function}(" in line and "private" not in line.split("@")[0]:
            return parse(line, function, "mlir")
    return None


def read(dump_tool: str, vmfb: Path, mlir: Path, function: str, *, stage: str, timeout: float,
         log: Path) -> Signature:
    """The module's signature: its reflection, else the imported MLIR's entry function."""
    argv = [dump_tool, "--output=metadata", str(vmfb)]
    _, metadata = run_tool_output(argv, stage=stage, timeout=timeout, log=log)
    found = from_metadata(metadata, function)
    if found is None:
        exported = re.search(rf"^\s*\[\s*\d+\]\s+{re.escape(function)}\(", metadata, re.M)
        if not exported:
            raise StageError(stage, f"the module exports no function @{function}", argv, str(log))
        found = from_mlir(Path(mlir).read_text(errors="replace"), function)
    if found is None:
        raise StageError(stage, f"no signature of @{function} in the module's reflection or in {Path(mlir).name}",
                         argv, str(log))
    return found
