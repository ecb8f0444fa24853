"""A content-addressed store of stage outputs, shared by every build folder that names it
(CONV_SWEEP_CACHE_DIR; default ~/.cache/conv-sweep/store, `off` disables it).

A stage's outputs are stored under a key computed from everything that determines them (its
input bytes, flags, tool identities and stage code; the caller computes it, and it holds no
path, mtime or host name), so a build folder, any build folder, takes them instead of
rebuilding. Two cases or targets whose outputs have one key share one build.

Layout:

    objects/<ab>/<sha256>         file contents, named by their digest, never changed
    entries/<ab>/<key>.json       {"files": {name: sha256}, "outcome": null | {...}, "what": ...}

Guarantees:
- Nothing half-written is visible: an object and an entry are written to a temporary file in
  their folder and renamed into place (atomic on one filesystem), an entry only after all its
  objects are in place.
- Writers may race on a key (concurrent runs, Dask workers on a shared filesystem): both write
  the same kind of complete entry, and a reader sees one or the other.
- A corrupted object (its bytes no longer match its digest) is detected when taken, removed
  with its entry, and the stage is rebuilt: it is never used.
- An outcome is stored only where it is deterministic: a tool that failed with a message
  (the same input bytes, flags and tool fail the same way again), or a tool cut at a time
  limit, kept with that limit (pipeline/core/cuts.py: asked at a higher one, it runs again).
  A completed run's output is kept with its time likewise (pipeline/checks/verify.py).

`prune` removes entries not used for a number of days, then the least recently used until
the store is under a size, and every object no entry names.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.integrity import sha256
from pipeline.core.layout import user_cache
from pipeline.core.tools import atomic_output

DISABLED = ("off", "none", "0")  # CONV_SWEEP_CACHE_DIR values that turn the store off


def default_dir(environ=None) -> Path:
    return user_cache(environ) / "store"


def key_of(fields: dict) -> str:
    """The key of a stage's outputs from what determines them (JSON-serializable, no paths)."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Hit:
    """What the store gave: files copied into place, or a remembered failure."""

    files: tuple[str, ...]
    outcome: dict | None  # {"stage", "reason", "log"} of a deterministic failure, else None


# The store's files are written by atomic_output (pipeline/core/tools.py): in a temporary file
# beside them, renamed into place once whole, with the mode the umask gives (an object is made
# read-only by its caller). The temporary file ends in TMP, never in .json: prune, which reads
# every entries/*/*.json, never takes one for an entry.
TMP = ".tmp"


def _atomic_copy(source: Path, dest: Path) -> None:
    """A copy of source at dest."""
    with atomic_output(dest, TMP) as tmp:
        shutil.copyfile(source, tmp)


def _atomic_link(source: Path, dest: Path) -> None:
    """Put the store's object at dest as a hard link (no bytes copied; the object is
    read-only, and every writer of a build folder replaces a file rather than writing into it),
    or as a copy where the two are on different filesystems or links are refused."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.{time.monotonic_ns()}.link"
    try:
        os.link(source, tmp)
    except OSError:
        _atomic_copy(source, dest)
        return
    try:
        os.replace(tmp, dest)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _atomic_write(dest: Path, data: bytes) -> None:
    """`data` at dest."""
    with atomic_output(dest, TMP) as tmp:
        tmp.write_bytes(data)


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _object(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def _entry(self, key: str) -> Path:
        return self.root / "entries" / key[:2] / f"{key}.json"

    def _read_entry(self, key: str) -> dict | None:
        try:
            entry = json.loads(self._entry(key).read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and isinstance(entry.get("files"), dict) else None

    def get(self, key: str, dest_dir: Path, names: list[str]) -> Hit | None:
        """Put the key's files into dest_dir (each checked against its digest first), or give
        its remembered failure; None when the store has neither, or its entry is damaged (then
        removed, so the caller rebuilds and stores it again)."""
        entry = self._read_entry(key)
        if entry is None:
            return None
        if entry.get("outcome"):
            self._touch(key)
            return Hit((), entry["outcome"])
        files = entry["files"]
        if sorted(files) != sorted(names):
            return None
        for name in names:  # every object intact before any is copied: all or nothing
            if not self._intact(files[name]):
                self._forget(key, files[name])
                return None
        for name in names:
            _atomic_link(self._object(files[name]), Path(dest_dir) / name)
        self._touch(key)
        return Hit(tuple(names), None)

    def put(self, key: str, source_dir: Path, names: list[str], what: str = "") -> None:
        """Store the files `names` of source_dir under `key`. A file becomes its object by a
        hard link (no bytes written twice), and both are read-only from then on: every writer
        of a build folder replaces a file rather than writing into it. Across filesystems, a copy."""
        files = {}
        for name in names:
            path = Path(source_dir) / name
            digest = sha256(path)
            target = self._object(digest)
            if not target.exists():
                _atomic_link(path, target)
                os.chmod(target, 0o444)  # shared by hard links with build folders: never written in place
            files[name] = digest
        self._write_entry(key, {"files": files, "outcome": None, "what": what})

    def put_data(self, key: str, data: dict[str, bytes], what: str = "") -> None:
        """Store bytes held in memory (an oracle's outputs) under `key`, as files named by `data`'s keys."""
        files = {}
        for name, content in data.items():
            digest = hashlib.sha256(content).hexdigest()
            target = self._object(digest)
            if not target.exists():
                _atomic_write(target, content)
                os.chmod(target, 0o444)
            files[name] = digest
        self._write_entry(key, {"files": files, "outcome": None, "what": what})

    def read(self, key: str, names: list[str]) -> dict[str, bytes] | None:
        """The bytes of the key's files (each checked against its digest), or None as for `get`."""
        entry = self._read_entry(key)
        if entry is None or entry.get("outcome") or sorted(entry["files"]) != sorted(names):
            return None
        found = {}
        for name in names:
            digest = entry["files"][name]
            try:
                content = self._object(digest).read_bytes()
            except OSError:
                content = None
            if content is None or hashlib.sha256(content).hexdigest() != digest:
                self._forget(key, digest)
                return None
            found[name] = content
        self._touch(key)
        return found

    def put_outcome(self, key: str, stage: str, reason: str, log: str, what: str = "", **facts) -> None:
        """Remember a failure of the stage: its reason, its log's text, and any other `facts`
        (a cut's time limit: pipeline/run/stages.py keys cuts apart from outputs)."""
        self._write_entry(key, {"files": {}, "outcome": {"stage": stage, "reason": reason, "log": log, **facts},
                                "what": what})

    def _write_entry(self, key: str, entry: dict) -> None:
        entry = {**entry, "stored": time.time()}
        _atomic_write(self._entry(key), (json.dumps(entry, indent=1) + "\n").encode())

    def _intact(self, digest: str) -> bool:
        try:
            return sha256(self._object(digest)) == digest
        except OSError:
            return False

    def _forget(self, key: str, digest: str) -> None:
        for path in (self._entry(key), self._object(digest)):
            try:
                path.unlink()
            except OSError:
                pass

    def _touch(self, key: str) -> None:
        try:
            os.utime(self._entry(key))  # its last use, for prune
        except OSError:
            pass

    def prune(self, max_age_days: float | None = None, max_bytes: int | None = None) -> dict:
        """Remove entries unused for max_age_days, then the least recently used until the store
        holds at most max_bytes, then every object no entry names."""
        now = time.time()
        entries = []
        for path in sorted(self.root.glob("entries/*/*.json")):
            try:
                entries.append((path.stat().st_mtime, path, json.loads(path.read_text()).get("files", {})))
            except (OSError, ValueError, AttributeError):
                entries.append((0.0, path, {}))
        removed = 0
        if max_age_days is not None:
            for used, path, _ in [e for e in entries if now - e[0] > max_age_days * 86400]:
                path.unlink(missing_ok=True)
                removed += 1
            entries = [e for e in entries if now - e[0] <= max_age_days * 86400]
        sizes = {p.name: p.stat().st_size for p in self.root.glob("objects/*/*") if not p.name.startswith(".")}
        if max_bytes is not None:
            entries.sort(key=lambda e: e[0])  # least recently used first
            users = Counter(d for e in entries for d in set(e[2].values()))  # contents are shared by entries
            held = sum(sizes.get(d, 0) for d in users)
            while entries and held > max_bytes:
                _, path, files = entries.pop(0)
                path.unlink(missing_ok=True)
                removed += 1
                for digest in set(files.values()):
                    users[digest] -= 1
                    if not users[digest]:
                        held -= sizes.get(digest, 0)
        named = {d for e in entries for d in e[2].values()}
        freed = 0
        for path in self.root.glob("objects/*/*"):
            # an object written in the last hour may belong to an entry being written now
            if path.name not in named and not path.name.startswith(".") and now - path.stat().st_mtime > 3600:
                freed += sizes.get(path.name, 0)
                path.unlink(missing_ok=True)
        kept = sum(size for name, size in sizes.items() if name in named)
        return {"entries_removed": removed, "entries_kept": len(entries), "bytes_freed": freed, "bytes_kept": kept}
