"""What each stage's output depends on besides its input file: tool versions and the code
that implements the stage. Feeds the task runner's up-to-date checks.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from .executables import cannot_start
from .tools import write_text

PACKAGE_DIR = Path(__file__).parent

# stage -> (modules whose code shapes its output, distributions whose version does)
STAGE_INPUTS = {
    "model": (("model_tflite", "model_onnx", "data", "geometry", "cases", "tools"),
              ("tensorflow-cpu", "keras", "torch", "onnx", "ml-dtypes", "numpy")),
    "mlir": (("importer", "tools"), ("tosa-converter-for-tflite", "iree-base-compiler")),
    "vmfb": (("compiler", "tools"), ("iree-base-compiler",)),
    "verify": (("verify", "oracle", "tolerance", "compare", "reference", "runner", "signature", "data", "result",
                "repro", "tools"),
               ("iree-base-runtime", "ai-edge-litert", "onnxruntime", "onnx", "numpy", "ml-dtypes")),
}


@lru_cache(maxsize=None)
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


@lru_cache(maxsize=None)
def code_digest(modules: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in modules:
        h.update((PACKAGE_DIR / f"{name}.py").read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=None)
def stage_fingerprint(stage: str) -> dict:
    modules, dists = STAGE_INPUTS[stage]
    return {"code": code_digest(modules), "versions": {d: _version(d) for d in dists}}


def executable_identity(path: str, cache_dir: Path) -> dict:
    """An executable's identity (resolved path, size, modification time) and what its
    `--version` prints. The version is asked once per identity and kept in cache_dir."""
    real = os.path.realpath(path)
    st = os.stat(real)
    identity = {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    key = json.dumps(identity, sort_keys=True)
    cache = Path(cache_dir) / ".tool-versions.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        version = _ask_version(real)
        if cannot_start(version):  # never kept: the next run asks again
            return {**identity, "version": version}
        known[key] = version
        write_text(cache, json.dumps(known, indent=1) + "\n")
    return {**identity, "version": known[key]}


def _ask_version(path: str) -> str:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except OSError as err:
        return f"cannot start: {err.strerror}"
    except subprocess.TimeoutExpired as err:
        return f"unknown ({type(err).__name__})"
    return (proc.stdout + proc.stderr).strip()[:2000] or f"unknown (exit status {proc.returncode})"
