"""Stage 3: MLIR -> .vmfb with iree-compile for llvm-cpu on the host CPU."""
from __future__ import annotations

from pathlib import Path

from .errors import StageError
from .tools import atomic_output, run_tool

STAGE = "compile"
TARGET_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)
# One thread per compile: the sweep runs one compile per core, and MLIR's multithreading then
# only adds contention (about 25% more CPU per compile here). MLIR output does not depend on it.
SCHEDULING_FLAGS = ("--mlir-disable-threading",)
VMFB_IDENTIFIER = b"IREE"  # flatbuffer file identifier of the module.fb inside every .vmfb


def compile_command(compiler: str, mlir: Path, vmfb: Path, extra_flags: tuple[str, ...] = ()) -> list[str]:
    return [compiler, str(mlir), "-o", str(vmfb), *TARGET_FLAGS, *SCHEDULING_FLAGS, *extra_flags]


def check_vmfb(path: Path) -> None:
    """Raise StageError unless `path` is a complete IREE module (a zip holding module.fb)."""
    import zipfile

    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        raise StageError(STAGE, "iree-compile wrote an empty or missing .vmfb")
    try:
        with zipfile.ZipFile(path) as archive, archive.open("module.fb") as module:
            head = module.read(16)
    except (zipfile.BadZipFile, KeyError, OSError) as err:
        raise StageError(STAGE, f"iree-compile wrote an invalid .vmfb ({err})") from None
    if VMFB_IDENTIFIER not in head:
        raise StageError(STAGE, "iree-compile wrote an invalid .vmfb (no IREE module identifier)")


def compile_mlir(mlir: Path, vmfb: Path, *, compiler: str, flags: tuple[str, ...], timeout: float,
                 log: Path) -> float:
    """Write `vmfb` from `mlir`; return the compiler's wall time in seconds."""
    with atomic_output(Path(vmfb)) as tmp:
        elapsed = run_tool(compile_command(compiler, mlir, tmp, flags), stage=STAGE, timeout=timeout, log=log)
        try:
            check_vmfb(tmp)
        except StageError as err:
            raise StageError(STAGE, err.reason, None, str(log)) from None
    return elapsed
