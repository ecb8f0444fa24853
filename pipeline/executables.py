"""Finding the executables of this environment.

Low-level module: imports nothing from the rest of the package.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# The iree-base-* packages put Python scripts on PATH that start the native tools in a
# subprocess (about 0.1-0.3 s each); the native executables themselves live here.
_NATIVE = {"iree-compile": ("iree", "compiler", "_mlir_libs"), "iree-opt": ("iree", "compiler", "_mlir_libs"),
           "iree-run-module": ("iree", "_runtime_libs")}


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
