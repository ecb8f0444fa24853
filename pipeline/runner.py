"""Stage 4a: run a .vmfb on the case's saved input with iree-run-module, in a subprocess."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from .cases import Case
from .config import tool_path
from .errors import StageError
from .tools import run_tool

STAGE = "run"
DEVICE = "local-sync"  # one thread per run: doit's workers already use the cores


def run_command(case: Case, vmfb: Path, input_npy: Path, output: Path) -> list[str]:
    runner = tool_path("iree-run-module") or "iree-run-module"
    return [runner, f"--module={vmfb}", f"--device={DEVICE}", f"--function={case.entry_point}",
            f"--input=@{input_npy}", f"--output=@{output}"]


def load_npy(path: Path) -> np.ndarray:
    """np.load that restores bf16 (numpy stores ml_dtypes.bfloat16 as 2-byte void)."""
    array = np.load(path)
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16)
    return array


def run_vmfb(case: Case, vmfb: Path, input_npy: Path, out_shape: tuple[int, ...], out_dtype,
             *, timeout: float, log: Path) -> tuple[np.ndarray, float]:
    """The module's output for the saved input, and the run's wall time in seconds.

    bf16 outputs are written as raw bytes (iree-run-module cannot write bf16 .npy).
    """
    raw = np.dtype(out_dtype).name == "bfloat16"
    fd, name = tempfile.mkstemp(prefix=".actual.", suffix=".bin" if raw else ".npy", dir=Path(log).parent)
    os.close(fd)
    tmp = Path(name)
    try:
        elapsed = run_tool(run_command(case, vmfb, input_npy, tmp), stage=STAGE, timeout=timeout, log=log)
        if raw:
            data = np.fromfile(tmp, dtype=np.uint8)
            expected_bytes = int(np.prod(out_shape)) * 2
            if data.size != expected_bytes:
                raise StageError(STAGE, f"output has {data.size} bytes, expected {expected_bytes}", None, str(log))
            actual = data.view(out_dtype).reshape(out_shape)
        else:
            actual = load_npy(tmp)
    finally:
        tmp.unlink(missing_ok=True)
    return actual, elapsed
