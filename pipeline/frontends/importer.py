"""Stage 2: model file -> readable text MLIR. Runs in a helper process (pipeline/core/isolate.py).

TFLite: tosa-converter-for-tflite to bytecode (its --text form does not parse in iree-compile),
kept as model.mlirbc (MLIR bytecode is versioned: compilers carrying another MLIR version,
such as torq-compile, read it) and printed as text by iree-opt. ONNX: iree-import-onnx.
Both converters are Python command-line tools; they run here in-process (the helper imports
them once: the ONNX importer's own entry point, the TFLite converter's library call), and the
log records the equivalent command line, which is also what repro.sh runs.
"""
from __future__ import annotations

import shlex
import time
from pathlib import Path

from pipeline.core.chain import MLIR_BYTECODE
from pipeline.space.cases import Case
from pipeline.core.executables import tool_path
from pipeline.core.errors import StageError
from pipeline.core.tools import atomic_output, run_tool

STAGE = "import"


def warm_up_tflite() -> None:
    import tosa_converter_for_tflite  # noqa: F401


def warm_up_onnx() -> None:
    import iree.compiler.tools.import_onnx.__main__  # noqa: F401


def _tosa_converter(model: Path, bytecode: Path) -> int:
    """`tosa-converter-for-tflite MODEL --bytecode -o OUT` through the package's library call,
    which its command line makes with the same arguments (its parser reads only sys.argv)."""
    from tosa_converter_for_tflite import (TosaConverterDebugInfo, TosaConverterOutputFormat,
                                           tflite_flatbuffer_to_tosa_mlir)

    tflite_flatbuffer_to_tosa_mlir(str(model), str(bytecode), TosaConverterOutputFormat.Bytecode,
                                   TosaConverterDebugInfo.Disabled)
    return 0


def _iree_import_onnx(argv: list[str]) -> int:
    from iree.compiler.tools.import_onnx import __main__ as importer

    return importer.main(importer.parse_arguments(argv)) or 0


def _in_process(name: str, entry, argv: list[str], log: Path) -> float:
    """Run a Python command-line tool's entry point here; log it like run_tool does."""
    start = time.monotonic()
    with open(log, "a") as f:
        f.write(f"$ {shlex.join([name, *argv])}   # run in-process\n")
    try:
        status = entry(argv)
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except Exception as err:  # the converter's own error: this case fails at import
        raise StageError(STAGE, f"{name}: {type(err).__name__}: {err}".splitlines()[0][:300], None, str(log)) from None
    elapsed = time.monotonic() - start
    with open(log, "a") as f:
        f.write(f"# exit status {status} after {elapsed:.2f} s\n\n")
    if status:
        raise StageError(STAGE, f"{name} exit status {status}", None, str(log))
    return elapsed


WARM_UP = {"tflite": warm_up_tflite, "onnx": warm_up_onnx}  # per model format


def bytecode_path(mlir: Path) -> Path:
    """Where a TFLite import keeps the converter's bytecode, beside the text."""
    return Path(mlir).parent / MLIR_BYTECODE


def import_model(case: Case, model: Path, mlir: Path, log: Path, timeout: float = 600.0) -> float:
    """Write `mlir` (and, for TFLite, its bytecode) from `model`; return the tools' wall time."""
    mlir, log = Path(mlir), Path(log)
    with atomic_output(mlir) as tmp_mlir:
        if case.backend == "tflite":
            with atomic_output(bytecode_path(mlir)) as bytecode:
                elapsed = _in_process("tosa-converter-for-tflite", lambda _: _tosa_converter(model, bytecode),
                                      [str(model), "--bytecode", "-o", str(bytecode)], log)
                elapsed += run_tool([_tool("iree-opt"), str(bytecode), "-o", str(tmp_mlir)], stage=STAGE,
                                    timeout=timeout, log=log)
        else:
            elapsed = _in_process("iree-import-onnx", _iree_import_onnx, [str(model), "-o", str(tmp_mlir)], log)
        with open(tmp_mlir, "rb") as f:
            if b"func.func" not in f.read():
                raise StageError(STAGE, "importer wrote no MLIR function", None, str(log))
    return elapsed


def _tool(name: str) -> str:
    path = tool_path(name)
    if path is None:
        raise StageError(STAGE, f"{name} is not installed")
    return path
