"""The dependency backend (pipeline/engine/durable_db.py) on doit's backend interface: a task's
record is committed as soon as doit saves it, read back by another connection while the first
is still open, and read by doit's own sqlite3 backend."""
import sqlite3

import pytest
from doit.dependency import JSONCodec, SqliteDB

from pipeline.engine.durable_db import DurableSqliteDB


def _open(path):
    return DurableSqliteDB(str(path), JSONCodec())


def test_a_record_is_committed_when_it_is_set(tmp_path):
    db = _open(tmp_path / "build" / ".doit.db")
    db.set("vmfb:conv_x@llvm-cpu", "model.mlir", "digest-1")
    db.set("vmfb:conv_x@llvm-cpu", "_config_changed", "key-1")
    # a second connection, while doit still holds the first and has not dumped anything
    rows = sqlite3.connect(tmp_path / "build" / ".doit.db").execute("select task_id, task_data from doit").fetchall()
    assert [r[0] for r in rows] == ["vmfb:conv_x@llvm-cpu"]
    assert JSONCodec().decode(rows[0][1]) == {"model.mlir": "digest-1", "_config_changed": "key-1"}
    assert db.in_("vmfb:conv_x@llvm-cpu") and not db.in_("verify:conv_x@llvm-cpu")
    assert db.get("verify:conv_x@llvm-cpu", "model.mlir") is None and not db.in_("verify:conv_x@llvm-cpu")
    db.remove("vmfb:conv_x@llvm-cpu")
    assert sqlite3.connect(tmp_path / "build" / ".doit.db").execute("select count(*) from doit").fetchone() == (0,)


def test_records_survive_without_a_dump_and_read_with_doits_own_backend(tmp_path):
    path = tmp_path / ".doit.db"
    db = _open(path)
    db.set("model:conv_x", "values", {"output": [{"sha256": "ab"}]})
    del db  # killed: never dumped
    again = _open(path)
    assert again.get("model:conv_x", "values") == {"output": [{"sha256": "ab"}]}
    doits = SqliteDB(str(path), JSONCodec())
    assert doits.get("model:conv_x", "values") == {"output": [{"sha256": "ab"}]}
    again.remove_all()
    assert not _open(path).in_("model:conv_x")


def test_an_unmakeable_build_folder_names_the_knob(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="CONV_SWEEP_BUILD_DIR: cannot make"):
        _open(tmp_path / "file" / "build" / ".doit.db")
