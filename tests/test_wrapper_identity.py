"""A wrapper's identity covers what it starts (pipeline/core/fingerprint.py, launched): a
compiler given as a script that execs another script that execs the real compiler is compiled
with again, in this build folder and in a fresh one on the same store, once the inner script
changes; a script whose exec target cannot be read is rebuilt every run, with one warning."""
import json

import pytest

from helpers import by_stage, clean_env, doit, executed, real_compiler, results, write_spec

pytestmark = pytest.mark.slow
TINY = {"category": "tiny", "rank": 2, "spatial": [8, 8], "kernel": [3, 3], "stride": [1, 1], "c_in": 2, "c_out": 2}


def _script(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _env(tmp_path, build: str, compiler: str, **knobs):
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TINY]), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / build, CONV_SWEEP_IREE_COMPILE=compiler,
                     CONV_SWEEP_CACHE_DIR=tmp_path / "store", **knobs)


def test_a_changed_inner_script_is_compiled_with_again_and_its_failure_seen(tmp_path):
    w2 = tmp_path / "w2.sh"
    _script(w2, f'exec {real_compiler()} "$@"\n')
    w1 = _script(tmp_path / "w1.sh", f'exec {w2} "$@"\n')
    first = doit("-n", "2", "sweep", env=_env(tmp_path, "a", w1), timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    case = next(name for name, r in results(tmp_path / "a").items() if r["flavor"] == "f32" and r["backend"] == "onnx")

    _script(w2, 'echo "error: this build of the compiler is broken" >&2\nexit 1\n')  # w1.sh is unchanged
    again = doit("-r", "json", f"verify:{case}", env=_env(tmp_path, "a", w1), timeout=600)
    assert again.returncode != 0
    assert by_stage(executed(again))["vmfb"] == 1  # compiled again, not taken as up to date
    found = results(tmp_path / "a")[case]
    assert (found["status"], found["stage"]) == ("error", "compile") and "broken" in found["reason"], found

    fresh = doit("-n", "2", "sweep", env=_env(tmp_path, "b", w1), timeout=600)  # the same store
    assert fresh.returncode != 0
    assert all(r["stage"] == "compile" for r in results(tmp_path / "b").values())


def test_a_script_whose_exec_cannot_be_read_is_rebuilt_every_run_with_one_warning(tmp_path):
    unreadable = _script(tmp_path / "via-variable.sh", 'exec "$REAL_COMPILER" "$@"\n')
    env = _env(tmp_path, "a", unreadable, REAL_COMPILER=real_compiler())
    runs = [doit("-r", "json", "sweep", env=env, timeout=600) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert by_stage(executed(run))["vmfb"] == 5  # every compile, the second run too
        said = run.stderr + run.stdout  # doit's json reporter keeps what a run printed in its report
        assert said.count("via-variable.sh line 2") == 1, said
        assert "rebuilt every run" in said
    # naming the files that identify it makes it a tool like any other: up to date the next time
    named = _env(tmp_path, "a", unreadable, REAL_COMPILER=real_compiler(), CONV_SWEEP_TOOL_FILES=real_compiler())
    doit("sweep", env=named, timeout=600)
    quiet = doit("-r", "json", "sweep", env=named, timeout=600)
    assert quiet.returncode == 0 and by_stage(executed(quiet))["vmfb"] == 0
    assert "rebuilt every run" not in quiet.stderr + quiet.stdout
