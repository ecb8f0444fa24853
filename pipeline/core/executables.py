"""Finding the executables of this environment, and telling whether one can start.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# The iree-base-* packages put Python scripts on PATH that start the native tools in a
# subprocess (a Python start on every call, far more than the native tool's own start:
# docs/measurements.md); the native executables themselves live here.
_NATIVE = {"iree-compile": ("iree", "compiler", "_mlir_libs"), "iree-opt": ("iree", "compiler", "_mlir_libs"),
           "iree-run-module": ("iree", "_runtime_libs"), "iree-dump-module": ("iree", "_runtime_libs"),
           "iree-benchmark-module": ("iree", "_runtime_libs")}


def tool_path(name: str) -> str | None:
    """An executable of this environment: the native IREE tool if installed, else the one
    beside the running Python, then on PATH."""
    if name in _NATIVE:
        import importlib.util

        spec = importlib.util.find_spec(_NATIVE[name][0])
        for location in (spec.submodule_search_locations or []) if spec else []:
            native = Path(location, *_NATIVE[name][1:], name)
            if native.is_file() and os.access(native, os.X_OK):
                return str(native)
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def resolve(name: str, base: Path, known: dict | None = None) -> str | None:
    """An executable's absolute path, or None if there is no executable file there: a path
    (relative to `base`, the user's folder), a name in `known` (a toolchain's tools), or a name
    looked up like tool_path."""
    if os.sep in name:
        path = str(Path(base) / name)
    else:
        path = (known or {}).get(name) or tool_path(name)
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return None
    return os.path.abspath(path)


_LOAD_FAILURES = ("error while loading shared libraries", "cannot open shared object", "not found (required by",
                  "cannot start:")


def cannot_start(output: str) -> str | None:
    """The loader's complaint, when what an executable printed says it cannot start."""
    for line in output.splitlines():
        if any(marker in line for marker in _LOAD_FAILURES):
            return line.strip()
    return None
