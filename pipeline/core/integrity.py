"""Is a stage's output still the file that stage wrote? A truncated or hand-edited artifact
must be rebuilt by the task that produces it, not trusted because it exists.

The stage records size, mtime and SHA-256 of its output when it succeeds; the check compares
size and mtime first (a stat, so no-op reruns stay cheap) and the digest only if they differ.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_record(path: Path) -> dict:
    """What `path` holds now; {"absent": True} when the stage wrote nothing (an expected failure)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"absent": True}
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256(path)}


def unchanged(record: dict | None, path: Path) -> bool:
    """True if `path` still holds what `record` describes."""
    if not record:
        return False
    if record.get("absent"):
        return not os.path.exists(path)
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_size != record.get("size"):
        return False
    if st.st_mtime_ns == record.get("mtime_ns"):
        return True
    return sha256(path) == record.get("sha256")
