"""Stage 3: MLIR -> .vmfb with the target's compiler (iree-compile, torq-compile, ...) and flags.

Each target's flags are in its profile (pipeline/targets/targets.json). Stock IREE targets compile with
--mlir-disable-threading: the sweep runs one compile per core, and MLIR's multithreading then
only adds contention; MLIR output does not depend on it. They also compile with
--verify=false (no IR verifier after every pass): less compile time, every module of the
default sweep byte-identical on both (pipeline/dev/flagcheck.py proves it;
docs/measurements.md has the figures).

A profile with `fixed_addresses` starts its compiler with address-space randomization off
(`setarch <machine> -R`, util-linux). torq-compile 2.3.0 writes a different module from one
compile of the same input to the next (docs/measurements.md): its
output follows where its allocations land. With randomization off the same command writes
the same bytes every time, in any folder and environment (tests/test_compiler.py checks it),
so a failure fails with the same message again and a compile flag can be proven to leave
the module alone. The module still depends on the command line's file names (their lengths
move the allocations): the sweep compiles every case with the same relative names.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from pipeline.core.errors import StageError
from pipeline.core.tools import atomic_output, run_tool

STAGE = "compile"
PROFILE = "profile.csv"  # the compiler's estimated execution timeline, where the profile asks for one
VMFB_IDENTIFIER = b"IREE"  # flatbuffer file identifier of the module.fb inside every .vmfb


def compile_command(compiler: str, mlir: Path, vmfb: Path, flags: tuple[str, ...] = ()) -> list[str]:
    return [compiler, str(mlir), "-o", str(vmfb), *flags]


def check_vmfb(path: Path, compiler: str = "the compiler") -> None:
    """Raise StageError unless `path` is a complete IREE module (a zip holding module.fb)."""
    import zipfile

    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        raise StageError(STAGE, f"{compiler} wrote an empty or missing .vmfb")
    try:
        with zipfile.ZipFile(path) as archive, archive.open("module.fb") as module:
            head = module.read(16)
    except (zipfile.BadZipFile, KeyError, OSError) as err:
        raise StageError(STAGE, f"{compiler} wrote an invalid .vmfb ({err})") from None
    if VMFB_IDENTIFIER not in head:
        raise StageError(STAGE, f"{compiler} wrote an invalid .vmfb (no IREE module identifier)")


def compile_mlir(mlir: Path, vmfb: Path, *, compiler: str, flags: tuple[str, ...], timeout: float,
                 log: Path, profiling: tuple[str, ...] = (), timeout_note: str | None = None,
                 launch: tuple[str, ...] = ()) -> float:
    """Write `vmfb` from `mlir`; return the compiler's wall time in seconds.

    With `profiling` flags (naming the timeline file as {csv}), the same compile also writes
    the compiler's estimated timeline to PROFILE beside the module (torq-compile's profiling
    flags leave the module unchanged; tests/test_compiler.py checks it). `launch` goes before
    the compiler (pipeline/core/tools.py: fixed_addresses_launch)."""
    import os

    name = Path(compiler).name
    vmfb = Path(vmfb)
    (vmfb.parent / PROFILE).unlink(missing_ok=True)
    with atomic_output(vmfb) as tmp, (atomic_output(vmfb.parent / PROFILE) if profiling else nullcontext()) as csv:
        # Run in the module's folder with relative paths: the compiler records its input's path
        # in the module, which must not depend on where the build folder is (or on which machine).
        extra = tuple(flag.replace("{csv}", Path(csv).name) for flag in profiling)
        command = compile_command(compiler, Path(os.path.relpath(mlir, vmfb.parent)), Path(Path(tmp).name),
                                  flags + extra)
        elapsed = run_tool(command, stage=STAGE, timeout=timeout, log=log, cwd=vmfb.parent, timeout_note=timeout_note,
                           launch=launch)
        try:
            check_vmfb(tmp, name)
        except StageError as err:
            raise StageError(STAGE, err.reason, None, str(log)) from None
    return elapsed


def module_estimate(profiling: tuple[str, ...], folder: Path) -> float | None:
    """The compiler's estimated execution (NPU cycles) of the module compiled in `folder`, where
    the profile's `profiling` flags asked the compiler for its timeline; else None."""
    return estimated_time(Path(folder) / PROFILE) if profiling else None


def estimated_time(csv_path: Path) -> float | None:
    """The compiler's estimated execution time from its timeline (torq-compile
    --torq-dump-profiling: `taskId, elapsed_time(us), timestamp(us), event, location, bytes`,
    whose times are NPU cycles despite the label): last end minus first start, or None."""
    import csv

    try:
        with open(csv_path, newline="") as f:
            rows = [row for row in csv.reader(f)][1:]
        spans = [(int(row[2]), int(row[1])) for row in rows if len(row) >= 3]
    except (OSError, ValueError):
        return None
    if not spans:
        return None
    return float(max(start + length for start, length in spans) - min(start for start, _ in spans))
