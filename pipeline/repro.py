"""repro.sh: one case, outside the tool, with only the IREE tools (and the TFLite importer
for .tflite models): re-import, re-compile with the exact flags the sweep used, run on the
saved input and check against the saved expected output with iree-run-module."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from .cases import Case
from .compiler import SCHEDULING_FLAGS, TARGET_FLAGS
from .config import Config, tool_path
from .runner import DEVICE
from .tools import write_bytes, write_text

REPRO, CHECK, EXPECTED_BIN = "repro.sh", "check.json", "repro-expected.bin"


ELEMENT_TYPES = {"float32": "f32", "int8": "i8", "bfloat16": "bf16"}


def write_check(case_dir: Path, expected, mode: str, atol: float = 0.0, rtol: float = 0.0) -> None:
    """Save the expected output as raw bytes (iree-run-module reads int8 .npy as si8 and bf16
    .npy as an opaque type, neither matching the module's i8/bf16) and how repro.sh compares:
    `exact`, or `approximate` with |actual - expected| <= atol + rtol |expected|."""
    element = ELEMENT_TYPES[expected.dtype.name]
    spec = "x".join(str(d) for d in expected.shape) + f"x{element}"
    write_bytes(Path(case_dir) / EXPECTED_BIN, expected.tobytes())
    write_text(Path(case_dir) / CHECK, json.dumps({"expected": f"{spec}=@{EXPECTED_BIN}", "mode": mode,
                                                    "atol": atol, "rtol": rtol, "type": element}) + "\n")


def _check_flags(case_dir: Path) -> list[str] | None:
    try:
        check = json.loads((Path(case_dir) / CHECK).read_text())
    except (OSError, ValueError):
        return None
    flags = [f"--expected_output={check['expected']}", f"--equality_mode={check['mode']}"]
    if check["mode"] == "approximate":
        flags += [f"--expected_{check['type']}_threshold={check['atol']:.9g}", f"--expected_rtol={check['rtol']:.9g}"]
    return flags


def write_repro(case: Case, cfg: Config, case_dir: Path) -> Path:
    case_dir = Path(case_dir)
    tools = {"IREE_COMPILE": cfg.iree_compile, "IREE_RUN_MODULE": tool_path("iree-run-module") or "iree-run-module"}
    if case.backend == "tflite":
        tools["TOSA_CONVERTER"] = tool_path("tosa-converter-for-tflite") or "tosa-converter-for-tflite"
        tools["IREE_OPT"] = tool_path("iree-opt") or "iree-opt"
        importing = [f'"$TOSA_CONVERTER" {case.model_file} --bytecode -o repro.mlirbc',
                     '"$IREE_OPT" repro.mlirbc -o repro.mlir']
    else:
        tools["IREE_IMPORT_ONNX"] = tool_path("iree-import-onnx") or "iree-import-onnx"
        importing = [f'"$IREE_IMPORT_ONNX" {case.model_file} -o repro.mlir']
    compile_line = '"$IREE_COMPILE" repro.mlir -o repro.vmfb ' + shlex.join(
        [*TARGET_FLAGS, *SCHEDULING_FLAGS, *cfg.compile_flags])
    run = ['"$IREE_RUN_MODULE"', "--module=repro.vmfb", f"--device={DEVICE}", f"--function={case.entry_point}",
           "--input=@input.npy"]
    check = _check_flags(case_dir)
    if check:
        run_line = " ".join(run + [shlex.quote(f) for f in check])
        run_note = "# checks the output against the saved oracle output, with the sweep's tolerance"
    else:
        run_line = " ".join(run)
        run_note = "# no saved expected output yet: prints the output for comparison"
    lines = [
        "#!/usr/bin/env bash",
        f"# Reproduce {case.name} outside conv-sweep.",
        "# Needs only the IREE tools" + (" and tosa-converter-for-tflite." if case.backend == "tflite" else "."),
        "# Each tool defaults to the one the sweep used; override with e.g. IREE_COMPILE=/path/iree-compile.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        *[f'{name}="${{{name}:-{shlex.quote(path)}}}"' for name, path in tools.items()],
        "set -x",
        *importing,
        compile_line,
        run_note,
        run_line,
        "",
    ]
    path = case_dir / REPRO
    write_text(path, "\n".join(lines))
    path.chmod(0o755)
    return path
