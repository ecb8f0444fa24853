"""Stage 2: model file -> readable text MLIR.

TFLite goes through tosa-converter-for-tflite (bytecode; its --text form does not parse in
iree-compile), printed as text by iree-opt. ONNX goes through iree-import-onnx.
"""
from __future__ import annotations

from pathlib import Path

from .cases import Case
from .config import tool_path
from .errors import StageError
from .tools import atomic_output, run_tool

STAGE = "import"


def import_commands(case: Case, model: Path, mlir: Path) -> list[list[str]]:
    """The command lines that turn `model` into `mlir` (the repro uses the same)."""
    if case.backend == "tflite":
        bytecode = mlir.with_suffix(".mlirbc")
        return [[_tool("tosa-converter-for-tflite"), str(model), "--bytecode", "-o", str(bytecode)],
                [_tool("iree-opt"), str(bytecode), "-o", str(mlir)]]
    return [[_tool("iree-import-onnx"), str(model), "-o", str(mlir)]]


def import_model(case: Case, model: Path, mlir: Path, *, timeout: float, log: Path) -> float:
    """Write `mlir` from `model`; return the tools' wall time in seconds."""
    mlir = Path(mlir)
    elapsed = 0.0
    with atomic_output(mlir) as tmp_mlir:
        tmp_bytecode = tmp_mlir.with_suffix(".mlirbc")
        try:
            for argv in import_commands(case, Path(model), tmp_mlir):
                elapsed += run_tool(argv, stage=STAGE, timeout=timeout, log=log)
        finally:
            tmp_bytecode.unlink(missing_ok=True)
        text = tmp_mlir.read_bytes() if tmp_mlir.exists() else b""
        if b"func.func" not in text:
            raise StageError(STAGE, "importer wrote no MLIR function", None, str(log))
    return elapsed


def _tool(name: str) -> str:
    path = tool_path(name)
    if path is None:
        raise StageError(STAGE, f"{name} is not installed")
    return path
