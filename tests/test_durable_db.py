"""The dependency backend (pipeline/engine/durable_db.py) on its own: a task's record is
committed as soon as doit saves it, read back by another connection while the first is still
open; the build folder's lock refuses a second run; which commands take the lock."""
import sqlite3

import pytest
from doit.dependency import JSONCodec

from pipeline.engine import durable_db
from pipeline.engine.durable_db import DurableSqliteDB, _needs_lock


def _open(path, monkeypatch, argv=("doit", "sweep")):
    monkeypatch.setattr(durable_db.sys, "argv", list(argv))
    return DurableSqliteDB(str(path), JSONCodec())


def test_a_record_is_committed_when_it_is_set(tmp_path, monkeypatch):
    db = _open(tmp_path / "build" / ".doit.db", monkeypatch)
    db.set("vmfb:conv_x@llvm-cpu", "model.mlir", "digest-1")
    # a second connection, while doit still holds the first and has not dumped anything
    rows = sqlite3.connect(tmp_path / "build" / ".doit.db").execute("select task_id, task_data from doit").fetchall()
    assert [r[0] for r in rows] == ["vmfb:conv_x@llvm-cpu"]
    assert JSONCodec().decode(rows[0][1]) == {"model.mlir": "digest-1"}
    db.remove("vmfb:conv_x@llvm-cpu")
    assert sqlite3.connect(tmp_path / "build" / ".doit.db").execute("select count(*) from doit").fetchone() == (0,)


def test_a_second_run_on_the_same_folder_is_refused(tmp_path, monkeypatch):
    first = _open(tmp_path / ".doit.db", monkeypatch)
    with pytest.raises(SystemExit, match="another doit run .pid .* is using"):
        _open(tmp_path / ".doit.db", monkeypatch)
    _open(tmp_path / ".doit.db", monkeypatch, argv=("doit", "list", "--all"))  # reading needs no lock
    assert first._lock_fd is not None


def test_an_unmakeable_build_folder_names_the_knob(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="CONV_SWEEP_BUILD_DIR: cannot make"):
        _open(tmp_path / "file" / "build" / ".doit.db", monkeypatch)


@pytest.mark.parametrize("argv, locked", [
    (["doit"], True), (["doit", "-n", "2", "sweep"], True), (["doit", "clean"], True),
    (["doit", "list", "--all"], False), (["doit", "info", "verify"], False),
    (["doit", "shrink", "conv_x@torq"], False), (["doit", "calibrate"], False), (["doit", "-n", "2", "run", "shrink", "verify"], False),
])
def test_which_commands_lock_the_build_folder(argv, locked):
    assert _needs_lock(argv) is locked
