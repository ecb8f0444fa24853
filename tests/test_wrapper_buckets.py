"""A listed failure is a claim about the failure, not about the compiler's file name: the real
torq-compile's failures, listed by `doit accept_failures`, stay `xfail` when the same compiler
runs through a wrapper script of another name (as a user adds an environment, a sanitizer
build or `rr`), and a wrapper that crashes a listed case still makes it `changed`."""
import json

import pytest

from helpers import clean_env, doit, results, write_spec

pytestmark = pytest.mark.slow
# A Conv1D that torq-compile 2.3.0 refuses in several flavors (TFLite f32: an unresolved
# materialization; ONNX bf16: the conv op unsupported), each within a second.
CONV1D = {"category": "c1d", "rank": 1, "spatial": [100], "kernel": [3], "stride": [1], "c_in": 4, "c_out": 16}
WRAPPER = """#!/bin/sh
# runs the real compiler, and crashes on the case folders matching CRASH (if set)
case "$PWD" in
  {crash}) kill -SEGV $$;;
esac
exec {real} "$@"
"""


def _env(tmp_path, build: str, compiler=None):
    knobs = dict(CONV_SWEEP_TARGET="torq", CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [CONV1D]),
                 CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / build, CONV_SWEEP_CACHE_DIR="off",
                 CONV_SWEEP_EXPECTED_FAILURES=tmp_path / "xfails.json")
    if compiler:
        knobs["CONV_SWEEP_IREE_COMPILE"] = compiler
    return clean_env(**knobs)


def _wrapper(tmp_path, name: str, crash: str = "/nowhere/") -> str:
    from pipeline.config import Config

    real = Config.from_env(clean_env(CONV_SWEEP_TARGET="torq")).target("torq").compiler
    path = tmp_path / name
    path.write_text(WRAPPER.format(real=real, crash=crash))
    path.chmod(0o755)
    return str(path)


def test_a_wrapper_of_another_name_keeps_every_listed_bucket(tmp_path):
    (tmp_path / "xfails.json").write_text(json.dumps({"expected_failures": []}))
    first = doit("-n", "2", "sweep", env=_env(tmp_path, "direct"), timeout=600)
    assert first.returncode != 0  # nothing listed yet
    accepted = doit("accept_failures", env=_env(tmp_path, "direct"), timeout=120)
    assert accepted.returncode == 0, accepted.stderr
    listed = json.loads((tmp_path / "xfails.json").read_text())["expected_failures"]
    compile_entries = [e for e in listed if e["stage"] == "compile"]
    assert len(compile_entries) >= 2, listed
    assert all("torq-compile" not in e["bucket"] and "<tool>" in e["bucket"] for e in compile_entries), listed

    wrapped = doit("-n", "2", "sweep", env=_env(tmp_path, "wrapped", _wrapper(tmp_path, "dev-build.sh")), timeout=600)
    assert wrapped.returncode == 0, wrapped.stderr[-3000:]
    found = results(tmp_path / "wrapped", "torq")
    for entry in compile_entries:
        assert found[entry["case"]]["status"] == "xfail", found[entry["case"]]
    assert "dev-build.sh" in (tmp_path / "wrapped" / "cases" / compile_entries[0]["case"] / "torq" /
                              "compile.log").read_text()  # it did run through the wrapper

    crashed_case = compile_entries[0]["case"]
    crashing = _wrapper(tmp_path, "crashing.sh", crash=f"*{crashed_case}*")
    crashed = doit("-n", "2", "sweep", env=_env(tmp_path, "crashed", crashing), timeout=600)
    assert crashed.returncode != 0
    found = results(tmp_path / "crashed", "torq")
    assert found[crashed_case]["status"] == "changed", found[crashed_case]
    assert found[crashed_case]["notes"]["observed_bucket"] == "compile: <tool> killed by signal SIGSEGV"
    assert all(found[e["case"]]["status"] == "xfail" for e in compile_entries[1:])
