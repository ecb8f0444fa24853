"""The store of stage outputs shared by build folders (pipeline/core/store.py): on its own (round
trips, a corrupted object detected and forgotten, racing writers, remembered failures, prune),
then through `doit` with the real tools: a second build folder takes every model, MLIR file,
module and oracle output from the store, with identical bytes and statuses; a corrupted entry is rebuilt; two
runs at once on one store both end correct; a compile error is remembered and a timeout is
not; with the store off nothing is taken or written."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from pipeline.core.chain import STORED_STAGES
from pipeline.core.store import Store, key_of
from pipeline.targets.cost import observations

from helpers import DOIT, ROOT, clean_env, doit, results, write_spec

GEOMETRIES = [
    {"category": "a", "rank": 2, "spatial": [9, 10], "kernel": [3, 3], "stride": [1, 2], "c_in": 4, "c_out": 8},
    {"category": "b", "rank": 1, "spatial": [20], "kernel": [5], "stride": [2], "c_in": 3, "c_out": 4},
]


def _files(tmp_path, **named) -> dict:
    for name, data in named.items():
        (tmp_path / name).write_bytes(data)
    return named


def test_put_and_get_round_trip_and_share_objects(tmp_path):
    store = Store(tmp_path / "store")
    source, dest = tmp_path / "src", tmp_path / "dest"
    source.mkdir()
    _files(source, **{"model.mlir": b"module {}", "model.mlirbc": b"\x00bc"})
    key = key_of({"stage": "mlir", "input": "abc"})
    assert store.get(key, dest, ["model.mlir", "model.mlirbc"]) is None
    store.put(key, source, ["model.mlir", "model.mlirbc"], "mlir of a")
    store.put(key_of({"stage": "mlir", "input": "def"}), source, ["model.mlir", "model.mlirbc"])
    hit = store.get(key, dest, ["model.mlir", "model.mlirbc"])
    assert hit.files == ("model.mlir", "model.mlirbc") and hit.outcome is None
    assert (dest / "model.mlir").read_bytes() == b"module {}" and (dest / "model.mlirbc").read_bytes() == b"\x00bc"
    assert len(list((tmp_path / "store").glob("objects/*/*"))) == 2  # two keys, one copy of each content
    assert store.get(key, dest, ["model.mlir"]) is None  # other outputs asked for: not this entry
    # no bytes written twice: the built file, its object and the file taken are one read-only inode
    obj = store._object(__import__("hashlib").sha256(b"module {}").hexdigest())
    assert os.path.samefile(source / "model.mlir", obj) and os.path.samefile(dest / "model.mlir", obj)
    assert not os.stat(obj).st_mode & 0o222


def test_bytes_in_memory_round_trip_and_a_corrupted_one_is_forgotten(tmp_path):
    store = Store(tmp_path / "store")
    key = key_of({"stage": "oracle"})
    assert store.read(key, ["oracle.pickle"]) is None
    store.put_data(key, {"oracle.pickle": b"refs"}, "oracle of a")
    assert store.read(key, ["oracle.pickle"]) == {"oracle.pickle": b"refs"}
    assert store.read(key, ["other"]) is None
    obj = next((tmp_path / "store").glob("objects/*/*"))
    os.chmod(obj, 0o644)
    obj.write_bytes(b"refz")
    assert store.read(key, ["oracle.pickle"]) is None
    assert not list((tmp_path / "store").glob("entries/*/*.json")) and not obj.exists()


def test_a_corrupted_object_is_detected_never_used_and_forgotten(tmp_path):
    store = Store(tmp_path / "store")
    (tmp_path / "model.vmfb").write_bytes(b"IREE module bytes")
    key = key_of({"stage": "vmfb"})
    store.put(key, tmp_path, ["model.vmfb"])
    obj = next((tmp_path / "store").glob("objects/*/*"))
    os.chmod(obj, 0o644)
    obj.write_bytes(b"IREE module bytez")  # in place: the build folder's file it was linked from too
    dest = tmp_path / "dest"
    assert store.get(key, dest, ["model.vmfb"]) is None
    assert not (dest / "model.vmfb").exists()
    assert not list((tmp_path / "store").glob("entries/*/*.json"))  # the entry is gone: the next put restores it
    (tmp_path / "model.vmfb").unlink()
    (tmp_path / "model.vmfb").write_bytes(b"IREE module bytes")  # built again
    store.put(key, tmp_path, ["model.vmfb"])
    assert store.get(key, dest, ["model.vmfb"]) and (dest / "model.vmfb").read_bytes() == b"IREE module bytes"


def test_racing_writers_of_one_key_leave_a_complete_entry(tmp_path):
    store = Store(tmp_path / "store")
    key = key_of({"stage": "model"})
    sources = []
    for i in range(8):
        folder = tmp_path / f"w{i}"
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"the same model" * 1000)
        sources.append(folder)
    seen = []

    def write(folder):
        store.put(key, folder, ["model.onnx"])
        seen.append(store.get(key, folder / "out", ["model.onnx"]))

    threads = [threading.Thread(target=write, args=(f,)) for f in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(h is not None for h in seen)
    assert all((f / "out" / "model.onnx").read_bytes() == b"the same model" * 1000 for f in sources)
    assert not [p for p in (tmp_path / "store").rglob(".*")]  # no temporary file left behind


def test_a_failure_is_remembered_with_its_log(tmp_path):
    store = Store(tmp_path / "store")
    key = key_of({"stage": "vmfb", "input": "x"})
    store.put_outcome(key, "compile", "iree-compile exit status 1: error: boom", "$ iree-compile ...\n# exit status 1")
    hit = store.get(key, tmp_path, ["model.vmfb"])
    assert hit.files == () and hit.outcome == {"stage": "compile", "reason": "iree-compile exit status 1: error: boom",
                                               "log": "$ iree-compile ...\n# exit status 1"}


def test_prune_by_age_then_by_size_keeps_what_is_named(tmp_path):
    store = Store(tmp_path / "store")
    keys = []
    for i in range(3):
        (tmp_path / "f").write_bytes(bytes([i]) * 1000)
        keys.append(key_of({"i": i}))
        store.put(keys[-1], tmp_path, ["f"])
    old = time.time() - 10 * 86400
    os.utime(store._entry(keys[0]), (old, old))
    for obj in (tmp_path / "store").glob("objects/*/*"):
        os.utime(obj, (old, old))  # objects past the hour in which a writer may still be naming them
    assert store.prune(max_age_days=5) == {"entries_removed": 1, "entries_kept": 2, "bytes_freed": 1000,
                                           "bytes_kept": 2000}
    os.utime(store._entry(keys[1]), (old + 86400, old + 86400))  # keys[1] is now the least recently used
    assert store.prune(max_bytes=1500)["entries_kept"] == 1
    assert store.get(keys[2], tmp_path / "d", ["f"]) and store.get(keys[1], tmp_path / "d", ["f"]) is None


# Under a given umask, in a child process (the umask is the process's): a file stored by a hard
# link, bytes stored from memory, a file taken, a copy (where links are refused), and the modes.
UMASK_CHILD = """
import json, os, sys
from pathlib import Path
from pipeline.core.store import Store, _atomic_copy, key_of
root = Path(sys.argv[1])
(root / "src").mkdir()
(root / "src" / "model.vmfb").write_bytes(b"module")
store = Store(root / "store")
store.put(key_of({"stage": "vmfb"}), root / "src", ["model.vmfb"])
store.put_data(key_of({"stage": "oracle"}), {"oracle.pickle": b"refs"})
store.get(key_of({"stage": "vmfb"}), root / "dest", ["model.vmfb"])
_atomic_copy(root / "src" / "model.vmfb", root / "copy" / "model.vmfb")
mode = lambda path: os.stat(path).st_mode & 0o777
print(json.dumps({"objects": sorted({mode(p) for p in (root / "store").glob("objects/*/*")}),
                  "entries": sorted({mode(p) for p in (root / "store").glob("entries/*/*.json")}),
                  "taken": mode(root / "dest" / "model.vmfb"), "copy": mode(root / "copy" / "model.vmfb")}))
"""


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_objects_stay_read_only_and_the_rest_gets_the_umask_s_mode(tmp_path, mask, mode):
    """Objects (and the build folder's files linked to them) are read-only, never written in
    place; entries and copies get the mode open() would give, not mkstemp's 0o600."""
    done = subprocess.run([sys.executable, "-c", UMASK_CHILD, str(tmp_path)], cwd=ROOT, umask=mask,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"objects": [0o444], "entries": [mode], "taken": 0o444, "copy": mode}
    assert not [p for p in (tmp_path / "store").rglob(".*")]  # no temporary file left behind


def test_a_write_that_fails_leaves_the_entry_as_it_was_and_nothing_beside_it(tmp_path):
    from pipeline.core.store import _atomic_copy, _atomic_write

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"bytes")
    store = Store(tmp_path / "store")
    key = key_of({"stage": "vmfb"})
    store.put(key, tmp_path / "src", ["f"])
    entry = store._entry(key)
    before = entry.read_bytes()
    with pytest.raises(TypeError):
        _atomic_write(entry, "not bytes")  # fails once its temporary file exists
    with pytest.raises(FileNotFoundError):
        _atomic_copy(tmp_path / "no-such-file", entry)
    assert entry.read_bytes() == before and store.get(key, tmp_path / "d", ["f"])
    assert not [p for p in (tmp_path / "store").rglob(".*")]


# ------------------------------------------------------------------ through doit, with the real tools

def _env(tmp_path, build: str, store, **knobs) -> dict:
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", GEOMETRIES), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / build, CONV_SWEEP_CACHE_DIR=store, **knobs)


def _outputs(build) -> dict[str, bytes]:
    names = ("model.tflite", "model.onnx", "model.mlir", "model.mlirbc", "llvm-cpu/model.vmfb")
    return {str(p.relative_to(build)): p.read_bytes() for n in names for p in sorted(build.glob(f"cases/*/{n}"))}


def _from_store(build) -> dict[str, int]:
    """Per stage, how many cases took it from the store (their result.json says)."""
    counts = {}
    for result in results(build).values():
        for stage, info in result["stages"].items():
            if stage in STORED_STAGES:
                counts[stage] = counts.get(stage, 0) + bool(info.get("store"))
    return counts


def _statuses(build) -> dict[str, tuple]:
    return {name: (r["status"], r.get("stage"), r.get("reason")) for name, r in results(build).items()}


@pytest.mark.slow
def test_a_second_folder_takes_everything_from_the_store(tmp_path):
    store = tmp_path / "store"
    first = doit("-n", "2", "sweep", env=_env(tmp_path, "one", store))
    assert first.returncode == 0, first.stderr[-2000:]
    assert _from_store(tmp_path / "one") == {"model": 0, "import": 0, "compile": 0, "oracle": 0, "run": 0}
    second = doit("-n", "2", "sweep", env=_env(tmp_path, "two", store))
    assert second.returncode == 0, second.stderr[-2000:]
    assert _from_store(tmp_path / "two") == {"model": 10, "import": 10, "compile": 10, "oracle": 10, "run": 10}
    assert _outputs(tmp_path / "two") == _outputs(tmp_path / "one") and len(_outputs(tmp_path / "one")) == 36
    assert _statuses(tmp_path / "two") == _statuses(tmp_path / "one")
    assert "from the store: model 10 of 10, import 10 of 10, compile 10 of 10, oracle 10 of 10, run 10 of 10" \
        in second.stdout
    report = json.loads((tmp_path / "two" / "report" / "llvm-cpu" / "results.json").read_text())
    assert report["store"]["compile"] == {"from_store": 10, "of": 10}
    assert "taken from the store" in next((tmp_path / "two").glob("cases/*/llvm-cpu/compile.log")).read_text()
    # the module's signature too: the module dumper ran in the first folder only
    dumped = {build: sum("iree-dump-module" in p.read_text() for p in (tmp_path / build).glob("cases/*/llvm-cpu/run.log"))
              for build in ("one", "two")}
    assert dumped == {"one": 10, "two": 0}, dumped
    # and the runs: the second folder's outputs are the first's, and the run tool ran in the first only
    ran = {build: sum("iree-run-module" in line for p in (tmp_path / build).glob("cases/*/llvm-cpu/run.log")
                      for line in p.read_text().splitlines() if line.startswith("$ "))
           for build in ("one", "two")}
    assert ran == {"one": 10, "two": 0}, ran
    assert all("# taken from the store" in p.read_text() for p in (tmp_path / "two").glob("cases/*/llvm-cpu/run.log"))
    actual = {build: {p.parent.parent.name: p.read_bytes() for p in (tmp_path / build).glob("cases/*/llvm-cpu/actual.npy")}
              for build in ("one", "two")}
    assert actual["two"] == actual["one"] and len(actual["one"]) == 10
    # a run from the store timed nothing: it is no observed cost of the run tool (limits learn from those)
    observed = {build: len(observations(tmp_path / build / "report" / "llvm-cpu", "run")) for build in ("one", "two")}
    assert observed == {"one": 10, "two": 0}, observed

    # a corrupted object is rebuilt, not used: the third folder builds that module again (the
    # first folder's files are the objects they were stored as: their bytes are kept beforehand)
    built = _outputs(tmp_path / "one")
    vmfb = (tmp_path / "one" / "cases").glob("*/llvm-cpu/model.vmfb")
    victim = next(vmfb)
    original = victim.read_bytes()
    digest = __import__("hashlib").sha256(original).hexdigest()
    obj = store / "objects" / digest[:2] / digest
    os.chmod(obj, 0o644)
    obj.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    third = doit("-n", "2", "sweep", env=_env(tmp_path, "three", store))
    assert third.returncode == 0, third.stderr[-2000:]
    # the cases whose modules have the victim's bytes share its entry (a TFLite w8if32 model the
    # converter kept in float is its f32 twin, byte for byte): those, and only those, are rebuilt
    sharing = {rel.split("/")[1] for rel, data in built.items() if rel.endswith("/model.vmfb") and data == original}
    rebuilt = {name for name, r in results(tmp_path / "three").items() if not r["stages"]["compile"].get("store")}
    assert rebuilt and rebuilt <= sharing, (rebuilt, sharing)
    assert _from_store(tmp_path / "three") == {"model": 10, "import": 10, "compile": 10 - len(rebuilt), "oracle": 10,
                                             "run": 10}  # the rebuilt modules are the same bytes: the same runs
    assert _outputs(tmp_path / "three") == built
    assert __import__("hashlib").sha256(obj.read_bytes()).hexdigest() == digest  # stored again, whole


@pytest.mark.slow
def test_two_runs_at_once_on_one_store_both_end_correct(tmp_path):
    store = tmp_path / "store"
    runs = [subprocess.Popen([*DOIT, "-n", "2", "sweep"], cwd=ROOT, env=_env(tmp_path, name, store),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("x", "y")]
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-2000:]
    assert _statuses(tmp_path / "x") == _statuses(tmp_path / "y") and len(_statuses(tmp_path / "x")) == 10
    assert all(status == "pass" for status, _, _ in _statuses(tmp_path / "x").values())
    assert _outputs(tmp_path / "x") == _outputs(tmp_path / "y")
    after = doit("-n", "2", "sweep", env=_env(tmp_path, "z", store))  # and the store they left serves a third
    assert after.returncode == 0 and _from_store(tmp_path / "z") == {"model": 10, "import": 10, "compile": 10, "oracle": 10,
                                                                 "run": 10}


COMPILER = """#!/bin/sh
case "$PWD/$1" in  # the compiler runs in the case's folder, on ../model.mlir
  *conv_onnx_f32_*_r1_*) echo "error: 'linalg.conv' op injected failure" >&2; exit 3;;
  *conv_onnx_bf16_*_r1_*) sleep 600;;
esac
exec {real} "$@"
"""


@pytest.mark.slow
def test_a_compile_error_is_remembered_and_a_cut_with_its_limit(tmp_path):
    """A deterministic failure is that failure again; a cut is that cut again at the same limit
    (a known timeout is a result), and runs again with --retry-timeouts."""
    from helpers import real_compiler

    wrapper = tmp_path / "flaky-compile"
    wrapper.write_text(COMPILER.format(real=real_compiler()))
    wrapper.chmod(0o755)
    store = tmp_path / "store"
    knobs = {"CONV_SWEEP_IREE_COMPILE": wrapper, "CONV_SWEEP_TIMEOUT": 5}
    first = doit("-n", "2", "sweep", env=_env(tmp_path, "one", store, **knobs))
    second = doit("-n", "2", "sweep", env=_env(tmp_path, "two", store, **knobs))
    assert first.returncode != 0 and second.returncode != 0
    one, two = results(tmp_path / "one"), results(tmp_path / "two")
    error = next(n for n in one if n.startswith("conv_onnx_f32_") and "_r1_" in n)
    hang = next(n for n in one if n.startswith("conv_onnx_bf16_") and "_r1_" in n)
    assert one[error]["reason"] == two[error]["reason"] == "flaky-compile exit status 3: error: 'linalg.conv' op injected failure"
    assert two[error]["stages"]["compile"] == {"seconds": 0.0, "store": True}
    assert "taken from the store" in (tmp_path / "two" / "cases" / error / "llvm-cpu" / "compile.log").read_text()
    assert one[hang]["reason"].startswith("flaky-compile timed out after 5 s")
    assert one[hang]["stages"]["compile"] == {"seconds": 5.0, "cut": True}  # a cut counts its limit
    assert two[hang]["reason"] == one[hang]["reason"]  # remembered with its limit: not run again
    assert two[hang]["stages"]["compile"] == {"seconds": 0.0, "store": True, "cut": True, "limit": 5.0}
    assert "taken from the store" in (tmp_path / "two" / "cases" / hang / "llvm-cpu" / "compile.log").read_text()
    third = doit("--retry-timeouts", "-n", "2", "sweep", env=_env(tmp_path, "two", store, **knobs))
    assert third.returncode != 0
    assert results(tmp_path / "two")[hang]["stages"]["compile"] == {"seconds": 5.0, "cut": True}  # tried again
    # the wrapper's modules are its own: the real compiler's store entries are not the wrapper's
    clean = doit("-n", "2", "sweep", env=_env(tmp_path, "real", store))
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert _from_store(tmp_path / "real")["compile"] == 0


@pytest.mark.slow
def test_with_the_store_off_nothing_is_taken_or_written(tmp_path):
    run = doit("-n", "2", "sweep", env=_env(tmp_path, "one", "off"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert _from_store(tmp_path / "one") == {"model": 0, "import": 0, "compile": 0, "oracle": 0, "run": 0}
    assert "from the store" not in run.stdout
    assert not list(tmp_path.glob("**/objects"))
