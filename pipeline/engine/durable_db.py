"""A doit dependency backend that survives kill -9.

doit's own backends write the dependency database only when a run ends, so a sweep that is
killed (kill -9, OOM, a closed terminal) forgets every task it finished. This backend commits
a task's record each time doit saves part of it. A record cut short by a kill is safe: doit
saves it only after the task succeeded, and any part not yet written still holds the older
value, which either still matches (that input did not change) or makes the task run again.

It implements doit's documented backend interface (get, set, in_, remove, remove_all, dump),
on sqlite3, in the table layout of doit's own sqlite3 backend (a build folder written by
either reads with the other). Loaded by doit as a plugin ([tool.doit.plugins.backend] in
pyproject.toml), before dodo.py. One run per build folder is the run command's lock
(pipeline/engine/command.py).
"""
from __future__ import annotations

import os
import sqlite3

from doit.dependency import DatabaseException


class DurableSqliteDB:
    """sqlite3 backend, committed per task record."""

    desc = "sqlite3, committed as each task finishes (survives kill -9)"

    def __init__(self, name, codec, *, module_name=None):
        self.name, self.codec = name, codec
        folder = os.path.dirname(name) or "."
        try:
            os.makedirs(folder, exist_ok=True)  # the build folder: made when doit opens it
        except OSError as err:
            raise SystemExit(f"conv-sweep: bad configuration: CONV_SWEEP_BUILD_DIR: cannot make {folder}: "
                             f"{err.strerror}") from None
        try:
            self.conn = sqlite3.connect(name, isolation_level="DEFERRED")
            self.conn.execute("create table if not exists doit (task_id text not null primary key, task_data json)")
            self.conn.execute("pragma journal_mode=wal")
            self.conn.execute("pragma synchronous=normal")  # a killed process loses nothing committed
        except sqlite3.DatabaseError as err:
            raise DatabaseException(f"the dependency file {name!r} is corrupted or not sqlite3 ({err}): "
                                    "remove it (and its -wal, -shm files), and every task runs again") from None
        self.records: dict[str, dict] = {}  # task -> its saved values, as read or written

    def _record(self, task_id: str) -> dict:
        if task_id not in self.records:
            row = self.conn.execute("select task_data from doit where task_id=?", (task_id,)).fetchone()
            self.records[task_id] = self.codec.decode(row[0]) if row and row[0] else {}
        return self.records[task_id]

    def get(self, task_id, dependency):
        return self._record(task_id).get(dependency)

    def set(self, task_id, dependency, value):
        record = self._record(task_id)
        record[dependency] = value
        self.conn.execute("insert or replace into doit values (?,?)", (task_id, self.codec.encode(record)))
        self.conn.commit()

    def in_(self, task_id):
        return bool(self.records.get(task_id)) or \
            self.conn.execute("select 1 from doit where task_id=?", (task_id,)).fetchone() is not None

    def remove(self, task_id):
        self.records.pop(task_id, None)
        self.conn.execute("delete from doit where task_id=?", (task_id,))
        self.conn.commit()

    def remove_all(self):
        self.records.clear()
        self.conn.execute("delete from doit")
        self.conn.commit()

    def dump(self):
        self.conn.commit()
        self.conn.close()
