"""A doit dependency backend that survives kill -9, and keeps two runs apart.

doit's own backends write the dependency database only when a run ends, so a sweep that is
killed (kill -9, OOM, a closed terminal) forgets every task it finished. This backend commits
a task's record each time doit saves part of it. A record cut short by a kill is safe: doit
saves it only after the task succeeded, and any part not yet written still holds the older
value, which either still matches (that input did not change) or makes the task run again.

It also takes an exclusive lock on the build folder for every command that can run or clean
tasks (`doit shrink`, which works in a folder of its own, excepted), so a second run on the
same folder refuses with a clear message.

The only module of the package that imports doit: it is loaded by doit as a plugin
([tool.doit.plugins.backend] in pyproject.toml), before dodo.py.
"""
from __future__ import annotations

import fcntl
import os
import sys

from doit.dependency import SqliteDB

READ_ONLY_COMMANDS = {"list", "info", "help", "dumpdb", "tabcompletion"}
# Tasks that touch no case artifact and no report: `doit shrink <case>` works in a folder of its
# own (<build>/shrink/<case>), so it may run beside a sweep, or beside another shrink; `doit
# calibrate` only reads the case folders' logs; `doit prune_store` works on the store alone.
UNLOCKED_TASKS = {"shrink", "calibrate", "prune_store"}


def _command(argv: list[str]) -> str:
    return next((a for a in argv[1:] if not a.startswith("-")), "run")


def _needs_lock(argv: list[str]) -> bool:
    if _command(argv) in READ_ONLY_COMMANDS:
        return False
    # the first word naming a task (not `run`, not an option's number such as -n 2); everything
    # after `shrink` is its case (a positional argument), never another task
    first = next((a for a in argv[1:] if not a.startswith("-") and a != "run" and not a.isdigit()), None)
    return first not in UNLOCKED_TASKS


class DurableSqliteDB(SqliteDB):
    """sqlite3 backend, committed per task record."""

    desc = "sqlite3, committed as each task finishes (survives kill -9), one run at a time"

    def __init__(self, name, codec, *, module_name=None):
        self._lock_fd = None
        folder = os.path.dirname(name) or "."
        try:
            os.makedirs(folder, exist_ok=True)  # the build folder: made when doit opens it
        except OSError as err:
            raise SystemExit(f"conv-sweep: bad configuration: CONV_SWEEP_BUILD_DIR: cannot make {folder}: "
                             f"{err.strerror}") from None
        if _needs_lock(sys.argv):
            self._lock_fd = _lock(name + ".lock")
        super().__init__(name, codec, module_name=module_name)
        self._conn.execute("pragma journal_mode=wal")
        self._conn.execute("pragma synchronous=normal")  # a killed process loses nothing committed

    def set(self, task_id, dependency, value):
        if task_id not in self._cache:
            self._cache[task_id] = self._get_task_data(task_id)
        super().set(task_id, dependency, value)
        self._conn.execute("insert or replace into doit values (?,?)",
                           (task_id, self.codec.encode(self._cache[task_id])))
        self._conn.commit()
        self._dirty.discard(task_id)

    def remove(self, task_id):
        super().remove(task_id)
        self._conn.commit()

    def remove_all(self):
        super().remove_all()
        self._conn.commit()


def _lock(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise SystemExit(f"conv-sweep: another doit run ({holder}) is using {os.path.dirname(path)}; "
                         "wait for it to finish or stop it, or set CONV_SWEEP_BUILD_DIR to another folder") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}".encode())
    return fd
