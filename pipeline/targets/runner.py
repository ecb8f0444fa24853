"""Stage 4a: run a .vmfb on the case's input with the target's run tool, in a subprocess.

Inputs and outputs go in the dtypes of the compiled module's signature (pipeline/targets/signature.py):
as .npy files where the profile's I/O mode is "npy" and numpy's format can carry the dtype, else
as raw bytes with a typed `--input=1x8x8x3xbf16=@file.bin` (run tools read bf16 .npy as an
opaque type and cannot write it).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from pipeline.core.errors import StageError
from pipeline.targets.signature import Signature, TensorType
from pipeline.core.tools import run_tool

STAGE = "run"


def raw_io(io: str, ttype: TensorType) -> bool:
    return io == "bin" or ttype.element == "bf16"


def input_arg(path: Path | str, ttype: TensorType, io: str) -> str:
    return f"--input={ttype.spec}=@{path}" if raw_io(io, ttype) else f"--input=@{path}"


def input_file_name(ttype: TensorType, io: str) -> str:
    return "module-input.bin" if raw_io(io, ttype) else "module-input.npy"


def write_input(path: Path, x: np.ndarray, ttype: TensorType, io: str) -> None:
    from pipeline.core.tools import atomic_output

    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            if raw_io(io, ttype):
                f.write(np.ascontiguousarray(x).tobytes())
            else:
                np.save(f, x)


def run_command(runner: str, run_flags: tuple[str, ...], vmfb: Path, signature: Signature, inputs: list[Path],
                output: Path, io: str) -> list[str]:
    return [runner, f"--module={vmfb}", *run_flags, f"--function={signature.function}",
            *(input_arg(p, t, io) for p, t in zip(inputs, signature.inputs)), f"--output=@{output}"]


def load_npy(path: Path) -> np.ndarray:
    """np.load that restores bf16 (numpy stores ml_dtypes.bfloat16 as 2-byte void)."""
    array = np.load(path)
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16)
    return array


def run_vmfb(runner: str, run_flags: tuple[str, ...], vmfb: Path, signature: Signature, inputs: list[Path],
             io: str, *, timeout: float, log: Path, timeout_note: str | None = None) -> tuple[np.ndarray, float]:
    """The module's first output, and the run's wall time in seconds (a timeout's reason ends
    with `timeout_note`)."""
    out_type = signature.outputs[0]
    raw = raw_io(io, out_type)
    fd, name = tempfile.mkstemp(prefix=".actual.", suffix=".bin" if raw else ".npy", dir=Path(log).parent)
    os.close(fd)
    tmp = Path(name)
    try:
        elapsed = run_tool(run_command(runner, run_flags, vmfb, signature, inputs, tmp, io), stage=STAGE,
                           timeout=timeout, log=log, timeout_note=timeout_note)
        if raw:
            data = np.fromfile(tmp, dtype=np.uint8)
            expected_bytes = int(np.prod(out_type.shape)) * out_type.dtype.itemsize
            if data.size != expected_bytes:
                raise StageError(STAGE, f"output has {data.size} bytes, expected {expected_bytes} "
                                 f"({out_type.spec})", None, str(log))
            actual = data.view(out_type.dtype).reshape(out_type.shape)
        else:
            actual = load_npy(tmp)
    finally:
        tmp.unlink(missing_ok=True)
    return actual, elapsed
